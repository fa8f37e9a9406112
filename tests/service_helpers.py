"""Starting keel-engine and keel-web as real processes against a simulator, for tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import requests
import yaml

from conftest import DEMO_TOKEN, python_env
from keel.engine.client import EngineClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp: Path, sim: Any, node: str = "pve1", lock: Path | None = None, shared: Path | None = None,
                 balancing: dict | None = None, engine: dict | None = None, web_port: int | None = None,
                 api_token: str = DEMO_TOKEN) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    token = tmp / "token"
    token.write_text(api_token + "\n")
    token.chmod(0o600)                    # keel-engine refuses a token file others may read
    cert_dir = Path(sim.cert).parent
    config = {
        "proxmox": {"url": sim.url, "token_file": str(token), "ca_file": sim.cert},
        "balancing": {"interval": "2s", **(balancing or {})},
        "engine": {"socket": str(tmp / "engine.sock"), "store": str(tmp / "keel.db"),
                   "lock": str(lock or tmp / "lock" / "keel-leader"), "lock_expiry": "4s", "lock_renew": "0.5s",
                   "shared_dir": str(shared or tmp / "shared"), "node": node, "status_interval": "1s",
                   "secrets_dir": str(tmp / "secrets"), **(engine or {})},
        "web": {"listen": f"127.0.0.1:{web_port or free_port()}", "cert": str(cert_dir / "sim.crt"),
                "key": str(cert_dir / "sim.key"), "metrics": "auth",
                "www_key": str(cert_dir / "pve-www.key")},
    }
    path = tmp / "keel.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Service:
    process: subprocess.Popen
    log: Path
    config: Path

    def stop(self, sig: str = "TERM") -> None:
        if self.process.poll() is None:
            if sig == "KILL":
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def _start(kind: str, config: Path, args: tuple[str, ...] = ()) -> Service:
    log = config.parent / f"{kind}.log"
    handle = open(log, "w")
    process = subprocess.Popen([sys.executable, "-m", "keel", kind, "--config", str(config), *args],
                               stdout=handle, stderr=subprocess.STDOUT, env=python_env(), start_new_session=True)
    handle.close()
    return Service(process, log, config)


def start_engine(config: Path) -> tuple[Service, EngineClient]:
    service = _start("engine", config)
    data = yaml.safe_load(config.read_text())
    client = EngineClient(data["engine"]["socket"], timeout_s=60)
    deadline = time.monotonic() + 30
    while not client.available():
        if service.process.poll() is not None or time.monotonic() > deadline:
            service.stop("KILL")
            raise AssertionError(f"keel engine did not start:\n{service.log_text()}")
        time.sleep(0.1)
    return service, client


def start_web(config: Path, args: tuple[str, ...] = ()) -> tuple[Service, str]:
    """``args``: more of ``keel web``'s options, such as ``("--harness", "www")``."""
    service = _start("web", config, args)
    data = yaml.safe_load(config.read_text())
    url = f"https://{data['web']['listen']}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(url + "/", verify=data["web"]["cert"], timeout=2)
            return service, url
        except requests.RequestException:
            if service.process.poll() is not None or time.monotonic() > deadline:
                service.stop("KILL")
                raise AssertionError(f"keel web did not start:\n{service.log_text()}") from None
            time.sleep(0.1)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        import json
        return json.loads(self.body)


def request_from(source: str, url: str, cert: str, method: str, path: str, headers: dict[str, str] | None = None,
                 body: bytes | None = None, timeout: float = 30) -> Answer:
    """One HTTPS request to keel-web from the loopback address ``source`` (127.0.0.2, ...):
    keel-web counts its limits per client address."""
    import http.client
    import ssl
    host, port = url.removeprefix("https://").rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, source_address=(source, 0),
                                       context=ssl.create_default_context(cafile=cert))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def wait_for(predicate: Any, timeout: float = 30.0, step: float = 0.2) -> Any:
    """``predicate()`` once it is true.  A predicate that raises (a list that briefly lacks
    what it looks for, a stack still starting) is asked again; when time is up, the error
    names what it last returned or raised."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:       # noqa: BLE001 - reported below if it never passes
            error, value = exc, None
        else:
            error, last = None, value
        if value:
            return value
        time.sleep(step)
    if error is not None:
        raise AssertionError(f"timed out after {timeout:g} s waiting; the predicate last raised "
                             f"{type(error).__name__}: {error}") from error
    raise AssertionError(f"timed out after {timeout:g} s waiting; the predicate last returned {last!r}"[:2000])


def leading(client: EngineClient) -> Any:
    return client.call("GET", "/api/status")["leader"]


@contextlib.contextmanager
def services(config: Path, web_args: tuple[str, ...] = (), ready: Any = leading,
             timeout: float = 30.0) -> Iterator[tuple[EngineClient, str, Service, Service]]:
    """keel-engine and keel-web on ``config``, once ``ready(client)`` is true: yields
    (engine client, web URL, engine, web); both stopped at the end."""
    engine, client = start_engine(config)
    try:
        web, url = start_web(config, web_args)
        try:
            wait_for(lambda: ready(client), timeout=timeout)
            yield client, url, engine, web
        finally:
            web.stop()
    finally:
        engine.stop()


@contextlib.contextmanager
def node_stack(tmp: Path, clock_factor: float) -> Iterator[tuple[Any, str]]:
    """The demo simulator, keel-engine (leading) and keel-web on it: yields (sim, web URL)."""
    from conftest import DEMO_SCENARIO, start_sim
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", clock_factor)
    try:
        with services(write_config(tmp / "node", sim)) as (_, url, _, _):
            yield sim, url
    finally:
        sim.stop()
