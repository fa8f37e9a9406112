#!/usr/bin/env python3
"""Power saving over a simulated week (issue 19's target bench).

A real ``keel sim`` process (HTTPS on 127.0.0.1, clock ``--factor`` times real time)
serves 8 nodes carrying the planner bench's 24-h office/batch trace
(``instances.trace()``: office guests peaking at 13:00, batch at 01:00, steady ones),
whose daily shapes are the simulator's load profiles, so the load follows the trace
through 7 days.  Every node has a Wake-on-LAN MAC and boots in 3 minutes (some late by
2 more); some guests are HA resources (with a negative HA rule), some carry anti-affinity,
affinity and pin tags; Ceph has OSDs on four nodes, one pool size 3 / min_size 2.

One real ``keel engine`` (the leader) runs with ``balancing.enable: true``.  As a new
cluster must (docs/power.md, the wake test), each node that may sleep is first wake-tested
through the engine's API in ``mode: recommend``; then ``balancing.power.mode: automatic``
and the week begins (nothing before it is counted).  The engine's durations (interval, window, cooldown, power
hold, wake timeout, move timeout) are divided by the clock factor, so that they mean in
simulated time what they say.  This process only samples ``/_sim/state``,
``/cluster/resources`` and the request log, and judges:

* node-hours asleep >= 30 % of 8 x 168 h (the sim's power history: off until the wake);
* 0 rule violations in any sampled state (anti-affinity partners together, affinity
  bundles split once their moves are over, pins broken, HA negative rule broken);
* 0 intervals where an awake node is over the headroom line (CPU 75 %, memory 80 %) for
  longer than the boot time;
* 0 quorum losses, 0 fencing events (``/_sim/state``'s ``quorum_losses``, ``fencing``, and
  no watchdog reset), Ceph never below min_size (no inactive PG, no blocked guest).

    python3 tests/bench/power_week.py [--factor 1000] [--days 7] [--default-too] [--json FILE]

``--default-too`` runs the week again with ``allow_bare_majority: false`` (at most 2 of 8
asleep: a 25 % ceiling, so it cannot meet 30 %) and shows it, unjudged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

import yaml  # noqa: E402

import instances  # noqa: E402
from conftest import python_env, start_sim  # noqa: E402
from integration.test_power_sleep import fake_ha_manager  # noqa: E402
from keel.engine.client import EngineClient  # noqa: E402
from service_helpers import write_config  # noqa: E402

GiB = 1024**3
TOKEN = "keel@pve!keel=19191919-0000-4000-8000-000000000019"
NODES = instances.node_names(8)
SLEEPERS = NODES[3:]                    # pve4 (OSDs) to pve8; pve1-pve3 run the Ceph monitors
NODE_GIB = 288                          # see scenario(): room for 3 asleep under the 80 % line and N+1
BOOT_S, LATE_S, SHUTDOWN_S = 180.0, 120.0, 30.0
CPU_LINE, MEM_LINE = 0.75, 0.80
TARGET_ASLEEP = 0.30
SAMPLE_SIM_S = 60.0                     # aim: one sample a simulated minute
SPLIT_S = 900.0                         # an affinity bundle split longer than this is a violation
STATE_EVERY = 5                         # /_sim/state every 5th sample (power, Ceph); resources every one
ENGINE_POLL_S = 0.1                     # see start_engine()


# -- the scenario ---------------------------------------------------------------------------

def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace's cluster as a keel sim scenario, and the rules to check."""
    inst = instances.trace()
    snap, kinds = inst.snapshot, inst.meta["kinds"]
    rng = random.Random(19)
    guests = {}
    for g in sorted(snap.guests.values(), key=lambda g: g.vmid):
        kind = kinds[g.vmid]
        # the trace's shape swings 0.35-1.45 around 0.76 of its base; a cosine of amplitude
        # 0.6 around 0.9 of it covers the same 0.36-1.44
        base = g.cpu_frac * (0.9 if kind != "steady" else 1.0)
        guests[g.vmid] = {
            "vmid": g.vmid, "node": g.node, "name": f"{kind}-{g.vmid}", "cpus": g.maxcpu,
            "memory": f"{g.maxmem // GiB}GiB", "cpu": round(min(1.0, base), 4),
            "mem_used": f"{max(1, g.mem // (1024 ** 2))}MiB", "profile": kind, "storage": "ceph-vm",
            "disk": "32GiB", "status": "running" if g.running else "stopped"}
    running = [v for v, g in guests.items() if g["status"] == "running" and g["memory"] in ("1GiB", "2GiB", "4GiB")]
    rng.shuffle(running)
    rules: dict[str, Any] = {"apart": {}, "together": {}, "pins": {}, "ha_apart": []}

    def put(vmid: int, node: str) -> None:
        guests[vmid]["node"] = node

    for a in range(3):                                      # anti-affinity groups of 3
        members = [running.pop() for _ in range(3)]
        tag = f"plb_anti_affinity_a{a}"
        for i, v in enumerate(members):
            guests[v]["tags"] = [tag]
            put(v, NODES[(a + 3 * i) % 8])
        rules["apart"][tag] = members
    for b in range(2):                                      # affinity bundles of 2
        members = [running.pop() for _ in range(2)]
        tag = f"keel-affinity-b{b}"
        for v in members:
            guests[v]["tags"] = [tag]
            put(v, NODES[5 + b])
        rules["together"][tag] = members
    for v, pins in ((running.pop(), ["pve1", "pve2"]), (running.pop(), ["pve2", "pve3"])):
        guests[v]["tags"] = [f"plb_pin_{p}" for p in pins]
        put(v, pins[0])
        rules["pins"][v] = pins
    ha = [running.pop() for _ in range(16)]                 # HA resources, spread over the nodes
    for i, v in enumerate(ha):
        guests[v]["ha"] = "started"
        put(v, NODES[i % 8])
    rules["ha_apart"] = [ha[0], ha[1]]
    nodes = []
    for i, name in enumerate(NODES):
        power: dict[str, Any] = {"boot": f"{BOOT_S:.0f}s", "shutdown": f"{SHUTDOWN_S:.0f}s"}
        if name in SLEEPERS:
            power["late"] = {"chance": 0.1, "by": f"{LATE_S:.0f}s"}
        nodes.append({"name": name, "cpus": snap.nodes[name].maxcpu, "memory": f"{NODE_GIB}GiB",
                      "wakeonlan": f"bc:24:11:19:00:{i + 1:02x}", "power": power})
    data = {
        "name": "power-week", "pve_version": "9.1.4", "cluster_name": "power-week", "seed": 19,
        "start_time": "2026-03-02T00:00:00Z", "local_node": "pve1",
        "cluster_options": {"crs": {"ha": "static"}, "ha": {"shutdown_policy": "conditional"}},
        "storages": [
            {"storage": "local", "type": "dir", "content": ["iso", "vztmpl", "backup"], "size": "100GiB"},
            {"storage": "ceph-vm", "type": "rbd", "content": ["images", "rootdir"], "size": "30TiB"}],
        "nodes": nodes,
        "ceph": {"osds": {n: 2 for n in NODES[:4]}, "mons": NODES[:3],
                 "pools": [{"name": "ceph-vm", "size": 3, "min_size": 2, "pg_num": 128, "storages": ["ceph-vm"]}]},
        "users": [{"userid": "root@pam", "password": "keel-power"},
                  {"userid": "keel@pve", "password": "keel-power",
                   "tokens": [{"id": "keel", "secret": TOKEN.split("=", 1)[1], "privsep": True}]}],
        "acl": [{"path": "/", "role": "Administrator", "user": "keel@pve"},
                {"path": "/", "role": "Administrator", "token": "keel@pve!keel"}],
        "profiles": {"office": {"daily": {"amplitude": 0.6, "peak_hour": instances.PEAKS["office"]},
                                "noise": 0.1, "mem_amplitude": 0.05},
                     "batch": {"daily": {"amplitude": 0.6, "peak_hour": instances.PEAKS["batch"]},
                               "noise": 0.1, "mem_amplitude": 0.05},
                     "steady": {"noise": 0.1}},
        "ha": {"rules": [{"rule": "ha-apart", "type": "resource-affinity", "affinity": "negative",
                          "resources": rules["ha_apart"]}]},
        "guests": list(guests.values()),
    }
    return data, rules


# -- the processes ---------------------------------------------------------------------------

def start_engine(tmp: Path, sim: Any, factor: float, bare: bool) -> tuple[subprocess.Popen, EngineClient, Path]:
    """``keel engine`` as a process.  Its job poll (2 s, fixed in ``Engine``) would be 33
    simulated minutes at x1000; the launcher sets Engine's default to ENGINE_POLL_S, and
    nothing else."""
    def d(seconds: float) -> str:
        return f"{seconds / factor:.4f}s"
    power = {"mode": "recommend", "nodes": SLEEPERS, "min_awake": 2, "allow_bare_majority": bare,
             "hold": d(1800), "wake_timeout": d(600), "wake_test_max_age": d(30 * 86400)}
    config = write_config(tmp, sim, node="pve1", api_token=TOKEN, balancing={
        "enable": True, "guests": ["vm", "ct"], "interval": d(60), "window": d(300), "cooldown": d(3600),
        "hold": 2, "limits": {"move_timeout": d(1800)}, "power": power})
    launch = ("import sys; import keel.engine.core as core; d = list(core.Engine.__init__.__defaults__); "
              f"d[-1] = {ENGINE_POLL_S}; core.Engine.__init__.__defaults__ = tuple(d); "
              "from keel.cli import main; sys.exit(main())")
    log = open(tmp / "engine.log", "w")
    process = subprocess.Popen([sys.executable, "-c", launch, "engine", "--config", str(config)], stdout=log,
                               stderr=subprocess.STDOUT, env=python_env(), start_new_session=True)
    log.close()
    client = EngineClient(str(tmp / "engine.sock"), timeout_s=60)
    deadline = time.monotonic() + 30
    while not client.available():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"keel engine did not start:\n{(tmp / 'engine.log').read_text()}")
        time.sleep(0.1)
    return process, client, config


def wake_tests(client: EngineClient, config: Path) -> None:
    """What docs/power.md asks of a new cluster before Keel may sleep a node: a wake test of
    each (``keel power test NODE``: a sleep and a wake), here through the engine's API, one
    at a time, in ``mode: recommend``; then ``mode: automatic``, the week."""
    deadline = time.monotonic() + 60
    while not client.call("GET", "/api/status")["leader"]:
        if time.monotonic() > deadline:
            raise SystemExit("keel engine did not lead within 60 s")
        time.sleep(0.1)
    for node in SLEEPERS:
        job = client.call("POST", f"/api/power/nodes/{node}/test", {})
        deadline = time.monotonic() + 120
        while (job := client.call("GET", f"/api/jobs/{job['id']}"))["state"] in ("running", "cancelling"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the wake test of {node} did not end within 120 s")
            time.sleep(0.05)
        if job["state"] != "done":
            raise SystemExit(f"the wake test of {node} failed: {job.get('error')}")
    data = yaml.safe_load(config.read_text())
    data["balancing"]["power"]["mode"] = "automatic"
    config.write_text(yaml.safe_dump(data))
    deadline = time.monotonic() + 30
    while client.call("GET", "/api/power")["mode"] != "automatic":
        if time.monotonic() > deadline:
            raise SystemExit("keel engine did not take mode: automatic within 30 s")
        time.sleep(0.05)


# -- sampling -----------------------------------------------------------------------------

class Week:
    """What the samples add up to."""

    def __init__(self, rules: dict[str, Any], sizes: dict[str, tuple[int, int]]):
        self.rules, self.sizes = rules, sizes
        self.samples = 0
        self.violations: list[str] = []
        self.transient_splits = 0
        self.over_since: float | None = None
        self.over_longest = (0.0, None, "")         # seconds, start, what
        self.over_episodes = 0
        self.over_long = 0
        self.over_what = ""
        self.ceph_below: list[str] = []
        self.asleep_sampled = 0.0
        self.last_t: float | None = None
        self.gaps: list[float] = []
        self.max_asleep = 0
        self.split_since: dict[str, float] = {}
        self.recent: dict[str, list[float]] = {}   # node -> its last 5 sampled CPU figures
        self.smooth_since: float | None = None
        self.smooth_longest = 0.0
        self.split_reported: set[str] = set()

    def add(self, t: float, state: dict[str, Any] | None, resources: list[dict[str, Any]]) -> None:
        self.samples += 1
        off = [r["node"] for r in resources if r.get("type") == "node" and r.get("status") != "online"]
        self.max_asleep = max(self.max_asleep, len(off))
        if self.last_t is not None:
            self.gaps.append(t - self.last_t)
            self.asleep_sampled += self._off_before * (t - self.last_t)
        self.last_t, self._off_before = t, len(off)
        self._rules(t, resources)
        self._headroom(t, resources)
        if state is None:
            return
        ceph = state.get("ceph") or {}
        bad = [name for name, p in (ceph.get("pools") or {}).items()
               if p.get("blocked") or any("peered" in s or "stale" in s for s in p.get("pgs", {}))]
        if bad or ceph.get("blocked_guests") or ceph.get("health") == "no monitor quorum":
            self.ceph_below.append(f"t={t:.0f}: pools {bad} blocked, guests {ceph.get('blocked_guests')}")

    def _rules(self, t: float, resources: list[dict[str, Any]]) -> None:
        where = {int(r["vmid"]): r for r in resources if r.get("type") in ("qemu", "lxc")}

        def node(v: int) -> str:
            return where[v]["node"]
        for tag, members in self.rules["apart"].items():
            nodes = [node(v) for v in members if where[v].get("status") == "running"]
            if len(set(nodes)) < len(nodes):
                self.violations.append(f"t={t:.0f}: {tag} shares a node {nodes}")
        for tag, members in self.rules["together"].items():
            # Keel moves a bundle's guests one after the other (a node takes one migration
            # at a time): split while they move, a violation once it lasts past SPLIT_S
            if len({node(v) for v in members}) > 1:
                since = self.split_since.setdefault(tag, t)
                if since == t:
                    self.transient_splits += 1
                elif t - since > SPLIT_S and tag not in self.split_reported:
                    self.split_reported.add(tag)
                    self.violations.append(f"t={t:.0f}: {tag} split {[node(v) for v in members]} "
                                           f"for {t - since:.0f} s")
            else:
                self.split_since.pop(tag, None)
                self.split_reported.discard(tag)
        for v, pins in self.rules["pins"].items():
            if node(v) not in pins:
                self.violations.append(f"t={t:.0f}: {v} off its pins {pins}: {node(v)}")
        a, b = self.rules["ha_apart"]
        if node(a) == node(b) and where[a].get("status") == where[b].get("status") == "running":
            self.violations.append(f"t={t:.0f}: HA rule ha-apart broken: {a} and {b} on {node(a)}")

    def _headroom(self, t: float, resources: list[dict[str, Any]]) -> None:
        over = []
        for r in resources:
            if r.get("type") != "node" or r.get("status") != "online":
                continue
            cpu, mem = float(r.get("cpu") or 0), r.get("mem", 0) / max(1, r.get("maxmem", 1))
            if cpu > CPU_LINE or mem > MEM_LINE:
                over.append(f"{r['node']} cpu {cpu:.0%} mem {mem:.0%}")
        smooth = False
        for r in resources:
            if r.get("type") == "node":
                cpus = self.recent.setdefault(r["node"], [])
                cpus[:] = (cpus + [float(r.get("cpu") or 0)])[-5:] if r.get("status") == "online" else []
                smooth = smooth or (len(cpus) == 5 and sum(cpus) / 5 > CPU_LINE)
        if smooth and self.smooth_since is None:
            self.smooth_since = t
        elif not smooth and self.smooth_since is not None:
            self.smooth_longest = max(self.smooth_longest, t - self.smooth_since)
            self.smooth_since = None
        if over and self.over_since is None:
            self.over_since, self.over_what = t, ", ".join(over)
            self.over_episodes += 1
        elif not over and self.over_since is not None:
            self._close(t)

    def _close(self, t: float) -> None:
        length = t - self.over_since
        if length > BOOT_S:
            self.over_long += 1
        if length > self.over_longest[0]:
            self.over_longest = (length, self.over_since, self.over_what)
        self.over_since = None

    def finish(self, t: float) -> None:
        if self.over_since is not None:
            self._close(t)


def sim_now(sim: Any, state: dict[str, Any], t0: float) -> float:
    """The simulated time of a sample: the last state's time, moved on by the clock."""
    return state["time"] + (time.monotonic() - state["_wall"]) * state["clock_factor"]


def asleep_from_history(history: list[dict[str, Any]], start: float, end: float) -> tuple[float, int, int]:
    """Node-seconds off (from ``off`` to the Wake-on-LAN packet or power button that woke
    it, or the end), shutdowns and wake packets."""
    off_at: dict[str, float] = {}
    total = 0.0
    for h in history:
        if h["time"] < start:                  # the wake tests before the week
            continue
        if h["event"] == "off":
            off_at[h["node"]] = h["time"]
        elif h["event"] in ("wol", "power-on") and h["node"] in off_at and h.get("outcome") != "did not wake":
            total += h["time"] - off_at.pop(h["node"])
    total += sum(end - t for t in off_at.values())
    week = [h for h in history if h["time"] >= start]
    return total, sum(1 for h in week if h["event"] == "shutdown"), sum(1 for h in week if h["event"] == "wol")


def run_week(factor: float, days: float, bare: bool, tmp: Path) -> dict[str, Any]:
    data, rules = scenario()
    path = tmp / "power-week.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    sim = start_sim(path, tmp / "sim", clock_factor=factor)
    os.environ["PATH"] = fake_ha_manager(sim, tmp / "bin")       # the integration tests' ha-manager
    pve = sim.client(TOKEN)
    sizes = {n["name"]: (n["cpus"], NODE_GIB) for n in data["nodes"]}
    week = Week(rules, sizes)
    engine = None
    trace = open(tmp / "cpu.jsonl", "w")          # each sample's node CPU, for a look afterwards
    wall0 = time.monotonic()
    try:
        engine, client, config = start_engine(tmp / "engine", sim, factor, bare)
        tests_wall = time.monotonic()
        wake_tests(client, config)
        tests_wall = time.monotonic() - tests_wall
        start = sim.control("GET", "state")["time"]
        end = start + days * 86400
        seq, calls, sample_wall = 0, 0, []
        t = start
        while t < end:
            t0 = time.monotonic()
            if week.samples % STATE_EVERY == 0:
                state = sim.control("GET", "state")
                state["_wall"] = time.monotonic()
            resources = pve.get("/cluster/resources")
            t = sim_now(sim, state, t0)
            week.add(t, state if week.samples % STATE_EVERY == 0 else None, resources)
            trace.write(json.dumps([round(t), {r["node"]: round(float(r.get("cpu") or 0), 4) for r in resources
                                               if r.get("type") == "node" and r.get("status") == "online"}]) + "\n")
            sample_wall.append(time.monotonic() - t0)
            if week.samples % 100 == 0:
                log = sim.requests_log(seq)
                if log:
                    seq = log[-1]["seq"]
                    calls += sum(1 for r in log if r["user"] and r["user"].startswith("keel@pve") and r["path"]
                                 != "/cluster/resources" or False)
                if engine.poll() is not None:
                    raise SystemExit(f"keel engine exited:\n{(tmp / 'engine' / 'engine.log').read_text()[-3000:]}")
            pause = SAMPLE_SIM_S / factor - (time.monotonic() - t0)
            if pause > 0:
                time.sleep(pause)
        week.finish(t)
        state = sim.control("GET", "state")
        history = sim.control("GET", "power")
        power = client.call("GET", "/api/power")
        jobs = client.call("GET", "/api/jobs")
    finally:
        trace.close()
        if engine is not None and engine.poll() is None:
            engine.terminate()
            try:
                engine.wait(timeout=60)
            except subprocess.TimeoutExpired:
                engine.kill()
        sim.stop()
    with closing(sqlite3.connect(tmp / "engine" / "keel.db")) as db:       # one decision a round
        rounds = db.execute("SELECT count(*) FROM decisions").fetchone()[0]
    wall = time.monotonic() - wall0
    hours = days * 24
    asleep_s, shutdowns, wols = asleep_from_history(history, start, t)
    resets = [h for h in history if h["event"] == "watchdog reset"]
    failed = [j for j in (jobs if isinstance(jobs, list) else jobs.get("jobs", []))
              if j.get("state") not in ("done", "running")]
    return {
        "bare": bare, "factor": factor, "days": days, "wall_s": wall, "sim_s": t - start, "tests_wall_s": tests_wall,
        "asleep_frac": asleep_s / (len(NODES) * hours * 3600), "asleep_node_h": asleep_s / 3600,
        "asleep_sampled_h": week.asleep_sampled / 3600, "ceiling": (3 if bare else 2) / len(NODES),
        "max_asleep": week.max_asleep, "history_len": len(history),
        "sleeps": shutdowns, "wakes": wols, "violations": week.violations, "transient_splits": week.transient_splits,
        "over_longest_s": week.over_longest[0], "over_longest_at": week.over_longest[1],
        "over_longest_what": week.over_longest[2], "over_episodes": week.over_episodes, "smooth_longest_s": week.smooth_longest, "over_long": week.over_long,
        "quorum_losses": state.get("quorum_losses", []), "fencing": state.get("fencing", []),
        "watchdog_resets": len(resets), "ceph_below": week.ceph_below,
        "samples": week.samples, "gap_median_s": sorted(week.gaps)[len(week.gaps) // 2] if week.gaps else 0,
        "gap_max_s": max(week.gaps, default=0), "sample_ms": 1000 * sorted(sample_wall)[len(sample_wall) // 2],
        "engine_rounds": rounds, "engine_calls": calls,
        "engine_hours_asleep": (power.get("energy") or {}).get("node_hours_asleep"),
        "wakes_failed": (power.get("energy") or {}).get("wakes_failed"),
        "failed_jobs": [f"{j.get('kind')}: {j.get('error')}" for j in failed][:5],
        "events": [f"{e['node']} {e['event']}" for e in power.get("events", [])][-6:],
    }


# -- the table ----------------------------------------------------------------------------

def targets(r: dict[str, Any]) -> list[tuple[str, str, str, str, bool]]:
    hours = r["days"] * 24
    rows = [
        ("node-hours asleep", f"{r['asleep_frac']:.1%} ({r['asleep_node_h']:.0f} of {8 * hours:.0f})",
         f">= {TARGET_ASLEEP:.0%}", f"ceiling {r['ceiling']:.1%}; sampled {r['asleep_sampled_h']:.0f} h; "
         f"engine says {(r['engine_hours_asleep'] or 0) * r['factor']:.0f} h (its wall clock x factor)", r["asleep_frac"] >= TARGET_ASLEEP),
        ("rule violations (sampled states)", f"{len(r['violations'])}", "0",
         f"{r['transient_splits']} bundle splits mid-migration not counted", not r["violations"]),
        ("over the headroom line > boot time", f"{r['over_long']}", "0",
         f"longest {r['over_longest_s'] / 60:.1f} min of {r['over_episodes']} episodes; boot {BOOT_S / 60:.0f} min",
         r["over_long"] == 0),
        ("... CPU as a 5-minute mean", f"{r['smooth_longest_s'] / 60:.1f} min", "",
         "longest interval over 75 % (the engine's window), for information", True),
        ("quorum losses", f"{len(r['quorum_losses'])}", "0", "", not r["quorum_losses"]),
        ("fencing events", f"{len(r['fencing']) + r['watchdog_resets']}", "0",
         f"{len(r['fencing'])} marked by the CRM, {r['watchdog_resets']} watchdog resets",
         not r["fencing"] and not r["watchdog_resets"]),
        ("Ceph below min_size (samples)", f"{len(r['ceph_below'])}", "0", "pool size 3 / min_size 2, OSDs on 4 nodes",
         not r["ceph_below"]),
    ]
    return rows


def table(results: list[dict[str, Any]]) -> bool:
    ok = True
    for r in results:
        judged = r["bare"]
        title = "allow_bare_majority: true (judged)" if judged else "allow_bare_majority: false (default, shown)"
        print(f"\n### Power week: {title}, clock x{r['factor']:g}, {r['days']:g} days in {r['wall_s'] / 60:.1f} min\n")
        print("| figure | measured | target | notes | |")
        print("|---|---|---|---|---|")
        for name, value, target, notes, good in targets(r):
            mark = ("ok" if good else "MISS") if judged else ("ok" if good else "miss (unjudged)")
            print(f"| {name} | {value} | {target if judged else ''} | {notes} | {mark} |")
            if judged and not good:
                ok = False
        print(f"| sleeps / wakes | {r['sleeps']} / {r['wakes']} | | at most {r['max_asleep']} asleep at once; "
              f"{r['wakes_failed'] or 0} wakes failed | |")
        print(f"| wake tests first | {len(SLEEPERS)} | | one at a time through the engine's API, "
              f"{r['tests_wall_s']:.0f} s; not counted in the week | |")
        print(f"| engine rounds | {r['engine_rounds']} | | one every {r['sim_s'] / max(1, r['engine_rounds']) / 60:.1f} "
              f"sim min | |")
        print(f"| samples | {r['samples']} | | every {r['gap_median_s']:.0f} sim s (median; max {r['gap_max_s']:.0f}); "
              f"{r['sample_ms']:.0f} ms each | |")
        for label, items in (("violations", r["violations"]), ("ceph", r["ceph_below"]),
                             ("failed jobs", r["failed_jobs"]), ("fencing", r["fencing"])):
            for item in items[:5]:
                print(f"  {label}: {item}")
        if r["over_longest_s"]:
            print(f"  longest over the line: from t={r['over_longest_at']:.0f}: {r['over_longest_what']}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factor", type=float, default=1000.0)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--default-too", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the scenario, logs and config here")
    args = parser.parse_args()
    started = time.monotonic()
    results = []
    for bare in (True, False) if args.default_too else (True,):
        with tempfile.TemporaryDirectory(prefix="keel-power-week-") as tmp:
            where = Path(args.keep) / ("bare" if bare else "default") if args.keep else Path(tmp)
            where.mkdir(parents=True, exist_ok=True)
            results.append(run_week(args.factor, args.days, bare, where))
    ok = table(results)
    print(f"\nwall time {(time.monotonic() - started) / 60:.1f} min")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
