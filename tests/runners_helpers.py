"""The runners' test kit: a simulated cluster with a fake GitHub, and a RunnerService on it.

The simulator's clock is stopped; ``Kit.advance`` moves it and the service's clock
together, so timeouts, backoffs and holds run in simulated time.  ``Kit.settle`` takes
messages and reconciles until nothing more happens.  ``Kit.assert_clean`` is what every
runner test ends with: no runner VM and no registration left, and no limit ever exceeded
according to the simulator's request log.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from keel.runners.record import Runner, description
from keel.runners.service import RunnerService
from keel.runners.settings import parse

TOKEN = "keel@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f"
CLIENT_ID = "Iv23liKeelTest0001"
INSTALLATION = 4242
GiB = 1024**3
_KEY: list[Any] = []


def app_key() -> Any:
    if not _KEY:
        _KEY.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return _KEY[0]


def public_pem() -> str:
    return app_key().public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def write_private_key(path: Path) -> Path:
    path.write_bytes(app_key().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def scenario(nodes: int = 3, memory: str = "64GiB", overhead: str = "4GiB", guests: list | None = None,
             github: dict | None = None, boot: str = "10s", **extra: Any) -> dict[str, Any]:
    """A cluster of ``nodes`` with a runner template (9000, on shared storage) and a fake GitHub."""
    data: dict[str, Any] = {
        "name": "runners", "seed": 3, "start_time": "2026-03-02T08:00:00Z",
        "storages": [{"storage": "local", "type": "dir", "content": ["iso", "vztmpl", "backup"]},
                     {"storage": "ceph", "type": "rbd", "content": ["images", "rootdir"], "shared": True,
                      "size": "100TiB"}],
        "nodes": [{"name": f"pve{i + 1}", "cpus": 32, "memory": memory, "overhead_mem": overhead}
                  for i in range(nodes)],
        "guests": [{"vmid": 9000, "name": "runner-template", "node": "pve1", "template": True,
                    "status": "stopped", "memory": "2GiB", "storage": "ceph", "boot": boot}] + (guests or []),
        "pools": ["runners"],
        "users": [{"userid": "root@pam", "password": "keel-sim"},
                  {"userid": "keel@pve", "tokens": [{"id": "keel", "secret": TOKEN.split("=")[1],
                                                     "privsep": False}]}],
        "acl": [{"path": "/", "role": "Administrator", "user": "keel@pve"}],
        "github": {"repos": ["my-org/app"], "long_poll": 0, "connect": "2s",
                   "apps": [{"client_id": CLIENT_ID, "public_key": public_pem(),
                             "installations": [{"id": INSTALLATION, "account": "my-org"}]}],
                   **(github or {})},
    }
    data.update(extra)
    return data


def runner_settings(sim: Any, key_path: Path, scale_sets: list[dict], providers: list[dict] | None = None,
                    **extra: Any) -> Any:
    data = {"github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID,
                       "app_installation_id": INSTALLATION, "app_private_key_path": str(key_path),
                       "tls": {"ca_file": sim.cert}},
            "providers": providers or [{"name": "pve", "type": "proxmox",
                                        "runner": {"template": 9000, "pool": "runners"}}],
            "scale_sets": scale_sets}
    data.update(extra)
    return parse(data)


@dataclass
class SimClock:
    t: float

    def __call__(self) -> float:
        return self.t


@dataclass
class Kit:
    sim: Any
    settings: Any
    clock: SimClock
    store: Path
    service: RunnerService
    log_from: int = 0
    seen_gh: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # -- time and the service ---------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.clock.t = self.sim.advance(seconds)

    def step(self, seconds: float = 1.0) -> None:
        """Messages, then a full pass, then time moves on."""
        self.service.poll_once()
        self.service.reconcile_once()
        self.advance(seconds)

    def settle(self, seconds: float, dt: float = 1.0) -> None:
        for _ in range(int(seconds / dt)):
            self.step(dt)

    def restart(self) -> RunnerService:
        """A new service on the same store and cluster, as after a restart or a leader change."""
        self.service.close()
        self.service = RunnerService(self.settings, self.sim.client(TOKEN), self.store, clock=self.clock)
        return self.service

    # -- the fake GitHub ----------------------------------------------------------------------

    def gh(self, method: str, path: str, body: dict | None = None) -> Any:
        response = requests.request(method, f"{self.sim.url}/_github/{path}", json=body,
                                    verify=self.sim.cert, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def queue(self, labels: str | list[str], duration: float = 60, count: int = 1, **extra: Any) -> list[int]:
        return self.gh("POST", "jobs", {"labels": labels, "duration": duration, "count": count, **extra})["ids"]

    def github_state(self) -> dict[str, Any]:
        return self.gh("GET", "state")

    def jobs(self) -> dict[int, dict[str, Any]]:
        return {j["id"]: j for j in self.github_state()["jobs"]}

    def registrations(self) -> list[dict[str, Any]]:
        return self.github_state()["runners"]

    def github_requests(self, since: int = 0) -> list[dict[str, Any]]:
        return self.gh("GET", f"requests?since={since}")

    # -- the cluster ------------------------------------------------------------------------------

    def vms(self) -> dict[int, dict[str, Any]]:
        """Runner VMs: those tagged keel-runner (or still being cloned from the template)."""
        rows = self.sim.client(TOKEN).get("/cluster/resources", type="vm")
        return {r["vmid"]: r for r in rows
                if "keel-runner" in str(r.get("tags", "")).split(";") or
                (r.get("lock") == "clone") or re.match(r"^.+-[0-9a-f]{8}$", str(r.get("name", "")))}

    def vms_of(self, scale_set: str) -> list[dict[str, Any]]:
        return [v for v in self.vms().values() if str(v.get("name", "")).startswith(scale_set + "-")]

    def node_free(self) -> dict[str, int]:
        rows = self.sim.client(TOKEN).get("/cluster/resources", type="node")
        return {r["node"]: r["maxmem"] - r["mem"] for r in rows}

    def clones(self, since: int = 0) -> list[dict[str, Any]]:
        return [r for r in self.sim.requests_log(since)
                if r["method"] == "POST" and r["path"].endswith("/clone") and r["status"] == 200]

    # -- what every test ends with ---------------------------------------------------------------

    def assert_clean(self, limits: dict[str, int] | None = None, provider_limit: int | None = None) -> None:
        assert self.vms() == {}, f"runner VMs left: {sorted(self.vms())}"
        assert self.registrations() == [], f"registrations left: {self.registrations()}"
        self.assert_limits(limits, provider_limit)

    def assert_limits(self, limits: dict[str, int] | None = None, provider_limit: int | None = None) -> dict[str, int]:
        """From the simulator's request log: VMs per scale set from clone request to delete
        request never above its max_runners (and the provider's), whatever happened."""
        limits = limits if limits is not None else {s.name: s.max_runners for s in self.settings.scale_sets}
        alive: dict[int, str] = {}
        count: dict[str, int] = {}
        peak: dict[str, int] = {}
        total_peak = 0
        for r in self.sim.requests_log(0):
            if r["status"] != 200:
                continue
            if r["method"] == "POST" and r["path"].endswith("/clone"):
                name = r["params"]["name"]
                scale_set = name.rsplit("-", 1)[0]
                alive[int(r["params"]["newid"])] = scale_set
                count[scale_set] = count.get(scale_set, 0) + 1
                peak[scale_set] = max(peak.get(scale_set, 0), count[scale_set])
                total_peak = max(total_peak, len(alive))
                assert count[scale_set] <= limits.get(scale_set, 10**9), \
                    f"{scale_set}: {count[scale_set]} VMs at once (max {limits[scale_set]}) at {r['time']}"
                if provider_limit is not None:
                    assert len(alive) <= provider_limit, f"{len(alive)} VMs on the provider at {r['time']}"
            match = re.fullmatch(r"/nodes/[^/]+/qemu/(\d+)", r["path"])
            if r["method"] == "DELETE" and match and int(match.group(1)) in alive:
                scale_set = alive.pop(int(match.group(1)))
                count[scale_set] -= 1
        return peak


def make_kit(sim_factory: Any, tmp_path: Path, scale_sets: list[dict], scenario_data: dict | None = None,
             providers: list[dict] | None = None, **extra: Any) -> Kit:
    tmp_path.mkdir(parents=True, exist_ok=True)
    sim = sim_factory(scenario_data or scenario())
    key = write_private_key(tmp_path / "app.pem")
    settings = runner_settings(sim, key, scale_sets, providers, **extra)
    clock = SimClock(sim.control("GET", "state")["time"])
    store = tmp_path / "keel.db"
    service = RunnerService(settings, sim.client(TOKEN), store, clock=clock)
    return Kit(sim, settings, clock, store, service)


class LiveClock:
    """The simulator's time, read locally: its clock runs at ``factor`` times real time from
    ``start`` (the simulated time when it was set going)."""

    def __init__(self, start: float, factor: float):
        self.start, self.factor, self.m0 = start, factor, time.monotonic()

    def __call__(self) -> float:
        return self.start + self.factor * (time.monotonic() - self.m0)


@dataclass
class LiveKit:
    """A simulator whose clock runs (``factor`` × real time) and a ``RunnerService`` running
    its own loop (``run``) in a thread, as ``keel runners run`` and the engine run it: no
    test helper steps its passes."""

    sim: Any
    settings: Any
    clock: LiveClock
    service: RunnerService
    stop: threading.Event
    thread: threading.Thread

    def gh(self, method: str, path: str, body: dict | None = None) -> Any:
        response = requests.request(method, f"{self.sim.url}/_github/{path}", json=body,
                                    verify=self.sim.cert, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def sleep_until(self, t: float) -> None:
        """Until the simulated time ``t``."""
        time.sleep(max(0.0, (t - self.clock()) / self.clock.factor))

    def wait(self, what: Any, timeout_s: float = 60.0, every_s: float = 0.05) -> Any:
        """``what()`` until it is true (simulated seconds of timeout); its value."""
        deadline = self.clock() + timeout_s
        while True:
            value = what()
            if value:
                return value
            assert self.clock() < deadline, "it did not happen in time"
            time.sleep(every_s)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in reversed(self.service.store.events(1000, kind))]

    def clones(self) -> list[dict[str, Any]]:
        return [r for r in self.sim.requests_log(0)
                if r["method"] == "POST" and r["path"].endswith("/clone") and r["status"] == 200]


@contextlib.contextmanager
def live_kit(sim: Any, tmp_path: Path, scale_sets: list[dict], factor: float = 5.0,
             **extra: Any) -> Iterator[LiveKit]:
    """``LiveKit`` on ``sim`` (started with its clock stopped): the clock is set going at
    ``factor`` and the service's loop started; both stopped at the end."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = runner_settings(sim, write_private_key(tmp_path / "app.pem"), scale_sets, **extra)
    start = sim.control("POST", "clock", {"factor": factor})["time"]
    clock = LiveClock(start, factor)
    service = RunnerService(settings, sim.client(TOKEN), tmp_path / "keel.db", clock=clock, clock_rate=factor)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True, name="keel-runners-test")
    thread.start()
    try:
        yield LiveKit(sim, settings, clock, service, stop, thread)
    finally:
        stop.set()
        thread.join(timeout=120)
        service.close()


class SimPool:
    """One simulator process per scenario for a whole test module, put back to its start
    (``POST /_sim/reset``, which rebuilds the fake GitHub too) before each use: half a second
    saved per test."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.sims: dict[str, Any] = {}

    def __call__(self, data: dict[str, Any], clock_factor: float = 0.0) -> Any:
        import yaml
        from conftest import start_sim
        text = yaml.safe_dump(data)
        sim = self.sims.get(text)
        if sim is not None and sim.process.poll() is None:
            sim.control("POST", "reset")
            return sim
        path = self.tmp / f"scenario{len(self.sims)}.yaml"
        path.write_text(text)
        sim = self.sims[text] = start_sim(path, self.tmp / f"sim{len(self.sims)}", clock_factor)
        return sim

    def close(self) -> None:
        for sim in self.sims.values():
            sim.stop()


def kit_fixture(sim_factory: Any, tmp_path: Path) -> Any:
    """For a module's ``kits`` fixture: ``make(scale_sets, ...)`` kits, all closed at the end."""
    made: list[Kit] = []

    def make(scale_sets: list[dict], scenario_data: dict | None = None, **extra: Any) -> Kit:
        kit = make_kit(sim_factory, tmp_path / f"kit{len(made)}", scale_sets, scenario_data, **extra)
        made.append(kit)
        return kit
    return make, made


PAT = "ghp_KeelTestPersonalAccessToken0000001"      # the fake GitHub's personal access token
SMALL_SET = {"name": "keel-c2-m4", "max_runners": 2,
             "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
LARGE_SET = {"name": "keel-c8-m16", "max_runners": 1, "priority": 10,
             "providers": [{"name": "pve", "runner": {"cores": 8, "memory": "16GiB"}}]}


@dataclass
class RunnersStack:
    """The simulator (real time, fake GitHub), keel-engine hosting the runners, keel-web."""

    sim: Any
    url: str                   # keel-web
    client: Any                # the engine's local API
    config: Path
    secrets: Path              # engine.secrets_dir
    engine: Any = None
    web: Any = None

    def gh(self, method: str, path: str, body: dict | None = None) -> Any:
        response = requests.request(method, f"{self.sim.url}/_github/{path}", json=body,
                                    verify=self.sim.cert, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def login(self, user: str = "root@pam", password: str = "keel-demo") -> tuple[str, str]:
        """(ticket, CSRF token), as PVE's login window gets them."""
        answer = requests.post(f"{self.sim.url}/api2/json/access/ticket",
                               data={"username": user, "password": password}, verify=self.sim.cert, timeout=10)
        data = answer.json()["data"]
        return data["ticket"], data["CSRFPreventionToken"]

    def ticket(self, user: str = "root@pam", password: str = "keel-demo") -> str:
        return self.login(user, password)[0]


def runners_scenario() -> dict[str, Any]:
    """``scenario()`` in real time for the services: quick boots and polls, an auditor."""
    data = scenario(start_time=None, boot="2s", github={"long_poll": "1s", "connect": "1s", "tokens": [PAT]})
    data["users"][0]["password"] = "keel-demo"           # as the demo's, for the web UI harness
    data["users"].append({"userid": "auditor@pve", "password": "keel-demo"})
    data["acl"].append({"path": "/", "role": "PVEAuditor", "user": "auditor@pve"})
    return data


def runners_section(sim: Any, key: Path, scale_sets: list[dict] | None = None) -> dict[str, Any]:
    return {"github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID,
                       "app_installation_id": INSTALLATION, "app_private_key_path": str(key),
                       "tls": {"ca_file": sim.cert}},
            "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
            "scale_sets": scale_sets or [SMALL_SET, LARGE_SET], "reconcile_interval": "5s"}


@contextlib.contextmanager
def runners_stack(tmp: Path, scale_sets: list[dict] | None = None,
                  web_args: tuple[str, ...] = ()) -> Iterator[RunnersStack]:
    """The stack of ``RunnersStack``, the runners configured (GitHub App key in the secrets
    directory); everything stopped at the end.  ``web_args``: more ``keel web`` options
    (``("--harness", "www")`` for the UI tests)."""
    import yaml
    from conftest import start_sim
    from service_helpers import services, write_config
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(runners_scenario()))
    sim = start_sim(tmp / "scenario.yaml", tmp / "sim", 1.0)
    try:
        secrets = tmp / "node" / "secrets"
        secrets.mkdir(parents=True, mode=0o700)
        key = write_private_key(secrets / "github-app.pem")
        config = write_config(tmp / "node", sim, api_token=TOKEN)
        data = yaml.safe_load(config.read_text())
        data["runners"] = runners_section(sim, key, scale_sets)
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        with services(config, web_args, ready=lambda c: c.call("GET", "/api/runners").get("active")) \
                as (client, url, engine, web):
            yield RunnersStack(sim, url, client, config, secrets, engine, web)
    finally:
        sim.stop()


# -- the seed's "Under load" cluster (tests/integration/test_runners_under_load.py, the bench) ----

UNDER_LOAD_SEED = __import__("yaml").safe_load((Path(__file__).parent / "fixtures" / "rungar" /
                                                "several-sizes.yaml").read_text())
SIZES_UNDER_LOAD = {"S": ("rungar-c2-m4", 2, 4), "M": ("rungar-c4-m8", 4, 8), "L": ("rungar-c8-m16", 8, 16)}
LAYOUT_UNDER_LOAD = {"pve1": "L" + "M" * 2 + "S" * 5, "pve2": "L" + "M" * 3 + "S" * 3, "pve3": "M" * 3 + "S" * 8}
INSTALLATION_UNDER_LOAD = "under-load"
SATURDAY_AFTERNOON = "2026-03-07T13:00:00Z"          # 15:00 in Vilnius: no reserve window


def under_load_scenario(start_time: str | None = SATURDAY_AFTERNOON) -> dict:
    """Two large, sixteen small and eight medium jobs running on their runners (160 GiB), the
    three nodes with 7, 6 and 6 GiB free: the seed's busy afternoon."""
    installation = parse({**_under_load_settings("https://x/my-org"),
                          "installation": INSTALLATION_UNDER_LOAD}).installation_id
    guests = [{"vmid": 150, "name": "dns", "node": "pve1", "memory": "1GiB", "mem_used": 1.0},
              {"vmid": 151, "name": "ci-cache", "node": "pve2", "memory": "2GiB", "mem_used": 1.0}]
    runners, jobs = [], []
    vmid = 200
    for node, sizes in LAYOUT_UNDER_LOAD.items():
        for size in sizes:
            scale_set, cores, gib = SIZES_UNDER_LOAD[size]
            name = f"{scale_set}-{vmid:08x}"
            record = Runner(name, scale_set, "pve", runner_id=None, created_at=1772880000.0 - 1200)
            guests.append({"vmid": vmid, "name": name, "node": node, "cpus": cores, "memory": f"{gib}GiB",
                           "mem_used": 1.0, "storage": "ceph", "pool": "runners",
                           "tags": ["keel-runner", f"keel-runner-{installation}"],
                           "description": description(record, installation)})
            runners.append({"name": name, "scale_set": scale_set, "vmid": vmid})
            jobs.append({"repo": "my-org/app", "labels": [scale_set], "duration": "2h", "runner": name})
            vmid += 1
    data = scenario(nodes=3, guests=guests, start_time=start_time,
                    github={"scale_sets": [{"name": s} for s, _, _ in SIZES_UNDER_LOAD.values()],
                            "runners": runners, "jobs": jobs})
    data["nodes"][2]["overhead_mem"] = "2GiB"
    return data


def _under_load_settings(url: str) -> dict:
    data = {k: v for k, v in UNDER_LOAD_SEED.items() if k != "version"}
    data["github"] = {"url": url, "token_path": "/unused"}
    data["providers"] = [{"name": "pve", "type": "proxmox", "nodes": ["pve1", "pve2", "pve3"],
                          "runner": {"template": 9000, "pool": "runners"}}]
    return data
