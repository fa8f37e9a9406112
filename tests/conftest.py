"""Shared fixtures: a real ``keel sim`` process on a loopback port, and clients for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
BACKEND = ROOT / "backend"
DEMO_SCENARIO = BACKEND / "keel" / "sim" / "scenarios" / "demo.yaml"
DEMO_TOKEN = "keel@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f"
DEMO_PASSWORD = "keel-demo"


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(BACKEND) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("KEEL_PVE_TOKEN", None)
    return env


@dataclass
class Sim:
    """A running simulator process."""

    url: str
    cert: str
    process: subprocess.Popen[str]
    scenario: Path
    # the clients handed out, closed when the simulator stops (an unclosed client's
    # kept-alive socket is a ResourceWarning on Debian 12's urllib3 1.26)
    clients: list[Any] = field(default_factory=list, repr=False)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = requests.request(method, f"{self.url}/_sim/{path}", json=body,
                                    verify=self.cert, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def advance(self, seconds: float) -> float:
        return self.control("POST", "clock", {"advance": seconds})["time"]

    def requests_log(self, since: int = 0) -> list[dict[str, Any]]:
        return self.control("GET", f"requests?since={since}")

    def proxmox(self, token: str = DEMO_TOKEN, user: str | None = None,
                password: str | None = None, **kwargs: Any) -> Any:
        import proxmoxer
        if user is not None:
            api = proxmoxer.ProxmoxAPI(self.host, port=self.port, user=user, password=password,
                                       verify_ssl=self.cert, **kwargs)
            self.clients.append(api._store["session"])
            return api
        ident, secret = token.split("=", 1)
        token_user, name = ident.split("!", 1)
        api = proxmoxer.ProxmoxAPI(self.host, port=self.port, user=token_user, token_name=name,
                                   token_value=secret, verify_ssl=self.cert, **kwargs)
        self.clients.append(api._store["session"])
        return api

    def client(self, token: str = DEMO_TOKEN) -> Any:
        from keel.pve.client import PveClient, Target
        client = PveClient(Target.from_url(self.url, verify=self.cert).with_token(token),
                           sleep=lambda s: None)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        while self.clients:
            self.clients.pop().close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def start_sim(scenario: Path, tmp: Path, clock_factor: float = 0.0) -> Sim:
    tls = tmp / "tls"
    tmp.mkdir(parents=True, exist_ok=True)
    log_path = tmp / "sim.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "keel", "sim", "--scenario", str(scenario), "--port", "0",
             "--clock-factor", str(clock_factor), "--tls-dir", str(tls)],
            stdout=subprocess.PIPE, stderr=log, text=True, env=python_env())
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        process.kill()
        process.wait()
        process.stdout.close()
        raise RuntimeError(f"keel sim did not start: {line!r} {log_path.read_text()}")
    return Sim(line.split(" ", 2)[2], str(tls / "sim.crt"), process, scenario)


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Start simulators from a scenario file or a dict; all are stopped at the end."""
    started: list[Sim] = []

    def make(scenario: Path | dict[str, Any] = DEMO_SCENARIO, clock_factor: float = 0.0) -> Sim:
        if isinstance(scenario, dict):
            path = tmp_path / f"scenario{len(started)}.yaml"
            path.write_text(yaml.safe_dump(scenario))
            scenario = path
        sim = start_sim(Path(scenario), tmp_path / f"sim{len(started)}", clock_factor)
        started.append(sim)
        return sim

    yield make
    for sim in started:
        sim.stop()


@pytest.fixture
def sim(sim_factory: Callable[..., Sim]) -> Sim:
    """The demo cluster with a stopped clock (tests move it with ``sim.advance``)."""
    return sim_factory()


@pytest.fixture(scope="module")
def shared_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """One demo simulator for a whole module of read-only tests."""
    sim = start_sim(DEMO_SCENARIO, tmp_path_factory.mktemp("shared-sim"))
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def _module_demo_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    sim = start_sim(DEMO_SCENARIO, tmp_path_factory.mktemp("demo-sim"))
    yield sim
    sim.stop()


@pytest.fixture
def fresh_sim(_module_demo_sim: Sim) -> Sim:
    """The demo cluster as its scenario starts, for a test that changes it: one process per
    module, put back to the start (``POST /_sim/reset``) before each test."""
    _module_demo_sim.control("POST", "reset")
    return _module_demo_sim


def pytest_configure(config: pytest.Config) -> None:
    """Warnings are errors (setup.cfg), Keel's ResourceWarnings too.  One exception, and only
    with urllib3 1.x (Debian 12's 1.26; `make test` has 2.x): a connection pool that is
    garbage-collected leaves its kept-alive TLS sockets to their own finalizers, which warn
    "unclosed <ssl.SSLSocket ...>" in whatever test runs then (urllib3 2 closes them itself).
    Only that, as pytest reports it; an unclosed database, file or plain socket still fails.
    Keel's own clients are closed (Sim.stop, PveClient.close), so this names what is left."""
    import urllib3
    if int(urllib3.__version__.split(".")[0]) < 2:
        # pytest's filter syntax splits on ":", so "." stands for the colons of the message
        config.addinivalue_line("filterwarnings", r"ignore:(?s)Exception ignored in. <ssl\.SSLSocket .*"
                                r"ResourceWarning. unclosed <ssl\.SSLSocket :pytest.PytestUnraisableExceptionWarning")


sys.path.insert(0, str(BACKEND))
