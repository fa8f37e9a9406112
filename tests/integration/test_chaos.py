"""Chaos: three engines on one lock and one simulator, balancing and running runners, while
the leader is stopped, killed and restarted and migrate answers are lost.

Each trial (seeded) changes guests' load and queues runner jobs, lets work start, then does
one of the faults of docs/service.md's table:

* ``stop``     — SIGSTOP of the leader for 1-3 lease expiries, then SIGCONT;
* ``kill``     — SIGKILL of the leader at a random moment, restarted a little later;
* ``follower`` — SIGKILL of a follower, restarted;
* ``timeout``  — migrate answers held back past the engines' 2 s client timeout for a while.

Then, from the simulator's request log (each engine has its own token) and the engines'
own records:

* one actor: every cluster-changing call came from the engine that took the lease last
  before it (the takes are in the engines' logs, each with its wall time);
* every move accounted for: in every engine's history each move ended (ok, failed with a
  reason, or not_started with a reason), none is left running, no journal is left in the
  shared directory, and every migration PVE started is recorded as started (ok or failed);
* the runner fleet ends clean: every job picked up and done, no runner VM and no
  registration left.

``make test`` runs ``KEEL_CHAOS_TRIALS`` (20) trials; ``make chaos`` hunts longer
(``KEEL_CHAOS_TRIALS=200``, another ``KEEL_CHAOS_SEED`` each run).
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from runners_helpers import CLIENT_ID, INSTALLATION, scenario as runners_scenario, write_private_key
from service_helpers import start_engine, wait_for, write_config

TRIALS = int(os.environ.get("KEEL_CHAOS_TRIALS", "20"))
SEED = int(os.environ.get("KEEL_CHAOS_SEED", "13"))
NODES = ("pve1", "pve2", "pve3")
SECRET = "0f0e0d0c-0b0a-4908-8706-050403020100"
EXPIRY_S = 4.0
TAKEN = re.compile(r"leader lock \S+ taken by (\S+) \(term \d+, at ([0-9.]+)\)")
# A runner whose leader lost the lease before it wrote the VM's JIT configuration never
# connects; the next leader removes it after start_timeout (5 min by default).
SMALL = {"name": "keel-c2-m4", "max_runners": 3, "start_timeout": "30s",
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}


def chaos_scenario() -> dict[str, Any]:
    guests = [{"vmid": 200 + i, "name": f"app{i}", "node": "pve1", "cpus": 4, "memory": f"{4 + 2 * (i % 3)}GiB",
               "cpu": 0.3 + 0.05 * i, "mem_used": "70%", "storage": "ceph"} for i in range(9)]
    data = runners_scenario(nodes=3, memory="96GiB", guests=guests, boot="2s", start_time=None,
                            github={"long_poll": "1s", "connect": "1s", "session_timeout": "10s"})
    data["migration"] = {"speed": "6GiB", "setup": "0.5s"}
    keel = next(u for u in data["users"] if u["userid"] == "keel@pve")
    for name in NODES:
        keel["tokens"].append({"id": name, "secret": SECRET, "privsep": True})
        data["acl"].append({"path": "/", "role": "Administrator", "token": f"keel@pve!{name}"})
    return data


class Cluster:
    def __init__(self, sim: Any, tmp: Path):
        self.sim, self.tmp = sim, tmp
        self.shared = tmp / "pmxcfs" / "keel"
        lock = tmp / "pmxcfs" / "lock" / "keel-leader"
        key = write_private_key(tmp / "app.pem")
        self.configs: dict[str, Path] = {}
        for name in NODES:
            config = write_config(tmp / name, sim, node=name, lock=lock, shared=self.shared,
                                  balancing={"enable": True, "interval": "2s", "hold": 1, "cooldown": "5s",
                                             "window": "10s", "threshold": 0.03,
                                             "limits": {"moves": 4, "concurrent": 2}},
                                  api_token=f"keel@pve!{name}={SECRET}")
            data = yaml.safe_load(config.read_text())
            data["proxmox"]["timeout"] = "2s"
            data["runners"] = {
                "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID,
                           "app_installation_id": INSTALLATION, "app_private_key_path": str(key),
                           "tls": {"ca_file": sim.cert}},
                "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
                "scale_sets": [SMALL], "reconcile_interval": "5s"}
            config.write_text(yaml.safe_dump(data))
            self.configs[name] = config
        self.logs: dict[str, list[str]] = {name: [] for name in NODES}
        self.running: dict[str, Any] = {}
        for name in NODES:
            self.start(name)

    def start(self, name: str) -> None:
        self.running[name] = start_engine(self.configs[name])

    def restart(self, name: str) -> None:
        service = self.running[name][0]
        self.logs[name].append(service.log_text())     # the next start writes a new log
        self.start(name)

    def service(self, name: str) -> Any:
        return self.running[name][0]

    def leader(self) -> str | None:
        for name, (service, client) in self.running.items():
            if service.process.poll() is not None:
                continue
            try:
                if client.call("GET", "/api/status")["leader"]:
                    return name
            except Exception:   # stopped or restarting
                pass
        return None

    def signal(self, name: str, sig: int) -> None:
        os.killpg(self.service(name).process.pid, sig)

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)
        self.service(name).process.wait()

    def stop(self) -> None:
        for name in NODES:
            try:
                self.signal(name, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.service(name).stop()

    def all_logs(self) -> dict[str, str]:
        return {name: "".join(self.logs[name]) + self.service(name).log_text() for name in NODES}

    # -- GitHub and the cluster --------------------------------------------------------------

    def gh(self, method: str, path: str, body: dict | None = None) -> Any:
        response = requests.request(method, f"{self.sim.url}/_github/{path}", json=body,
                                    verify=self.sim.cert, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def runner_vms(self) -> list[int]:
        root = self.sim.client(f"keel@pve!pve1={SECRET}")
        return sorted(r["vmid"] for r in root.get("/cluster/resources", type="vm")
                      if "keel-runner" in str(r.get("tags", "")).split(";")
                      or re.match(r"^keel-c2-m4-[0-9a-f]{8}$", str(r.get("name", ""))))

    def migrations_running(self) -> list[dict[str, Any]]:
        root = self.sim.client(f"keel@pve!pve1={SECRET}")
        return [t for t in root.get("/cluster/tasks") if t.get("type") in ("qmigrate", "vzmigrate")
                and not t.get("endtime")]


def perturb(cluster: Cluster, rng: random.Random) -> None:
    for vmid in rng.sample(range(200, 209), 3):
        cluster.sim.control("POST", f"guests/{vmid}", {"cpu": round(rng.uniform(0.05, 0.95), 2),
                                                      "mem_used": f"{rng.randint(30, 95)}%"})
    if rng.random() < 0.6:                  # about what three runners get through in a trial
        cluster.gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": rng.choice([2, 3, 5]),
                                    "count": rng.randint(1, 2)})


def fault(cluster: Cluster, rng: random.Random, kind: str) -> None:
    leader = wait_for(cluster.leader, timeout=4 * EXPIRY_S + 10)
    if kind == "stop":
        cluster.signal(leader, signal.SIGSTOP)
        time.sleep(rng.uniform(1, 3) * EXPIRY_S)
        cluster.signal(leader, signal.SIGCONT)
    elif kind == "kill":
        cluster.kill(leader)
        time.sleep(rng.uniform(0, 2))
        cluster.restart(leader)
    elif kind == "follower":
        follower = rng.choice([n for n in NODES if n != leader])
        cluster.kill(follower)
        cluster.restart(follower)
    else:                                   # answers lost after the 2 s client timeout
        cluster.sim.control("POST", "faults", {"endpoints": [
            {"path": "/nodes/*/*/*/migrate", "method": "POST", "reply_latency": "2.5s"}]})
        time.sleep(rng.uniform(3, 6))
        cluster.sim.control("DELETE", "faults")


def settle(cluster: Cluster, timeout: float = 240) -> None:
    """Until every migration has ended and every record says how; then until every runner
    job is done and the fleet is gone (given time for the jobs still queued)."""
    def moves_unsettled() -> str | None:
        if cluster.migrations_running():
            return f"migrations running: {cluster.migrations_running()}"
        for name in NODES:
            client = cluster.running[name][1]
            status = client.call("GET", "/api/status")
            if status["reconcile"]["pending"]:
                return f"{name} reconciling {status['reconcile']}"
            if status["job"] and status["job"]["state"] == "running":
                return f"{name} runs job {status['job']['id']}"
            moves = client.call("GET", "/api/history?limit=1000")["moves"]
            open_ = [m for m in moves if m["status"] not in ("ok", "failed", "not_started")]
            if open_:
                return f"{name} has unfinished moves {[(m['plan_id'], m['vmid'], m['status']) for m in open_]}"
        return None

    def runners_unsettled() -> str | None:
        waiting = [j for j in cluster.gh("GET", "state")["jobs"] if j["status"] != "completed"]
        if waiting:
            return f"{len(waiting)} runner jobs not completed: {[(j['id'], j['status']) for j in waiting[:10]]}"
        if cluster.runner_vms():
            return f"runner VMs left: {cluster.runner_vms()}"
        if cluster.gh("GET", "state")["runners"]:
            return f"registrations left: {cluster.gh('GET', 'state')['runners']}"
        return None

    # the runner jobs still queued get the time three runners need for them, and a margin
    backlog = len([j for j in cluster.gh("GET", "state")["jobs"] if j["status"] != "completed"])
    for unsettled, allowed in ((moves_unsettled, timeout), (runners_unsettled, timeout + 10 * backlog)):
        started = time.monotonic()
        while (why := unsettled()) is not None:
            assert time.monotonic() - started < allowed, f"not settled after {allowed:.0f} s: {why}"
            time.sleep(1.0)


def test_one_leader_acts_and_every_move_and_runner_is_accounted_for(sim_factory, tmp_path):
    rng = random.Random(SEED)
    sim = sim_factory(chaos_scenario(), clock_factor=1)
    cluster = Cluster(sim, tmp_path)
    kinds = ["stop", "kill", "follower", "timeout"]
    done: list[str] = []
    try:
        wait_for(cluster.leader, timeout=30)
        for trial in range(TRIALS):
            perturb(cluster, rng)
            time.sleep(rng.uniform(0.5, 4))
            kind = kinds[trial % len(kinds)] if trial < len(kinds) else rng.choice(kinds)
            fault(cluster, rng, kind)
            done.append(kind)
        settle(cluster)
        check(cluster)
    finally:
        cluster.stop()
    assert len(done) == TRIALS and set(done) == set(kinds), done


def check(cluster: Cluster) -> None:
    sim = cluster.sim
    log = sim.requests_log()
    # one actor at a time
    takes = sorted((float(t), node) for text in cluster.all_logs().values() for node, t in TAKEN.findall(text))
    assert len(takes) >= 2, takes
    writes = [e for e in log if e["method"] != "GET" and str(e["user"]).startswith("keel@pve!")]
    assert writes
    for e in writes:
        node = e["user"].split("!", 1)[1]
        before = [n for t, n in takes if t <= e["wall"]]
        assert before and before[-1] == node, (f"{node} wrote {e['method']} {e['path']} at {e['wall']} "
                                                f"while {before[-1] if before else 'nobody'} held the lease", takes)
    # every move accounted for, once per job and guest, in whichever engine's store knows it
    moves: dict[tuple[str, int], dict[str, Any]] = {}
    for name in NODES:
        for m in cluster.running[name][1].call("GET", "/api/history?limit=1000")["moves"]:
            assert m["status"] in ("ok", "failed", "not_started"), m
            assert m["status"] == "ok" or m["error"], m
            key = (m["plan_id"], m["vmid"])
            if key not in moves or moves[key]["status"] == "not_started":
                moves[key] = m
    assert not list((cluster.shared / "jobs").glob("*.json")), "journals left in the shared directory"
    started = sorted(int(e["path"].split("/")[4]) for e in writes
                     if re.fullmatch(r"/nodes/[^/]+/(qemu|lxc)/\d+/migrate", e["path"]) and e["status"] == 200)
    recorded = sorted(vmid for (_, vmid), m in moves.items() if m["status"] in ("ok", "failed") and m["upid"])
    assert started == recorded, (started, recorded)
    # the runners ended clean
    assert cluster.runner_vms() == [] and cluster.gh("GET", "state")["runners"] == []
    assert all(j["status"] == "completed" for j in cluster.gh("GET", "state")["jobs"])
