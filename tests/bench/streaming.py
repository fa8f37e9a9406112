#!/usr/bin/env python3
"""``make bench``: how well the executor keeps its slots busy, and how true its ETA is.

A skewed 6-node cluster in the simulator (30 guests of 4-24 GiB on three hot nodes),
its clock stopped: the executor's sleeps move it, so every figure is in simulated seconds
and repeatable.  For ``concurrent`` 2 and 3 (``per_node`` 1), Keel plans with its defaults
(no move limit) (no move or GiB limit) and carries the plan out; from the moves' start and end times:

* slot utilisation: of the slot-seconds from the first start to the last, the share that
  migrations filled (``per_node`` alone can keep it lower: three moves left, all out of one
  node, go one by one), and the share they filled of the slot-seconds in which a waiting
  move could have started — its prerequisites done, ``per_node`` allowing — which is what
  the scheduler answers for: a free slot must not wait for a wave's slowest migration
  (target ≥ 90 %);
* ETA: the estimate the job gave after its first migration ended (from the speed measured
  so far), against the time the rest took (target within ±10 %); and the plan's own
  estimate before anything ran, against the whole run.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

import yaml  # noqa: E402

from conftest import start_sim  # noqa: E402
from keel.balance import slots  # noqa: E402
from keel.balance.balancer import make_plan  # noqa: E402
from keel.balance.executor import Executor  # noqa: E402
from keel.balance.settings import BalancingSettings, Limits  # noqa: E402
from keel.pve import snapshot  # noqa: E402
from keel.pve.client import PveClient, Target  # noqa: E402
from keel.store import Store  # noqa: E402


def scenario(seed: int = 7) -> dict:
    rng = random.Random(seed)
    guests = []
    for i in range(30):
        mem = rng.choice([4, 8, 12, 16, 24])
        guests.append({"vmid": 100 + i, "name": f"g{i}", "node": f"n{1 + i % 3}", "cpus": 4,
                       "memory": f"{mem}GiB", "mem_used": "80%", "cpu": round(rng.uniform(0.3, 0.9), 2),
                       "storage": "ceph"})
    return {"name": "streaming", "seed": seed, "start_time": "2026-12-01T00:00:00Z",
            "storages": [{"storage": "ceph", "type": "rbd", "shared": True, "content": ["images"]}],
            "nodes": [{"name": f"n{i}", "cpus": 32, "memory": "192GiB"} for i in range(1, 7)],
            "users": [{"userid": "root@pam", "password": "bench"}], "guests": guests}


def run(concurrent: int, tmp: Path) -> dict:
    path = tmp / f"scenario-{concurrent}.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    sim = start_sim(path, tmp / f"sim-{concurrent}", 0.0)
    try:
        client = PveClient(Target.from_url(sim.url, verify=sim.cert, user="root@pam", password="bench"))
        settings = BalancingSettings(limits=Limits(moves=100, bytes=2**50, concurrent=concurrent, per_node=1))
        clock = lambda: sim.control("GET", "state")["time"]   # noqa: E731
        plan = make_plan(snapshot.collect(client), settings, now=clock())
        store = Store(tmp / f"keel-{concurrent}.db")
        events: list[dict] = []
        execution = Executor(client, settings, store, "bench", events.append, clock=clock,
                             sleep=sim.advance, poll_s=1.0).run(plan)
        client.close()
        moves = [m for m in store.moves(limit=1000) if m["started_at"] is not None]
        first = min(m["started_at"] for m in moves)
        last_start = max(m["started_at"] for m in moves)
        end = max(m["ended_at"] for m in moves)
        window = last_start - first
        busy = sum(max(0.0, min(m["ended_at"], last_start) - max(m["started_at"], first)) for m in moves)
        could = _could(plan, moves, concurrent, first, last_start)
        ends = [e for e in events if e["event"] == "done"]
        after_first = ends[0]
        rest = end - after_first["time"]
        return {"concurrent": concurrent, "moves": len(plan.moves), "ok": execution.ok,
                "utilisation": busy / (concurrent * window) if window > 0 else 1.0,
                "filled": busy / could if could > 0 else 1.0,
                "eta": after_first["eta_s"], "rest": rest, "plan_est": plan.est_seconds, "took": end - first}
    finally:
        sim.stop()


def _could(plan, rows, concurrent: int, first: float, until: float) -> float:
    """Slot-seconds in [first, until] a migration filled or could have filled: at each
    moment, min(concurrent, running + waiting moves that could start then)."""
    moves = list(plan.moves)
    index = {(m.vmid, m.source, m.target): i for i, m in enumerate(moves)}
    span = {index[(r["vmid"], r["source"], r["target"])]: (r["started_at"], r["ended_at"]) for r in rows}
    deps = slots.dependencies(moves)
    loose = slots.Slots(10**6, plan.config["limits"]["per_node"])
    times = sorted({first, until, *(t for s, e in span.values() for t in (s, e) if first <= t <= until)})
    total = 0.0
    for start, end in zip(times, times[1:]):
        t = (start + end) / 2
        running = [i for i, (s, e) in span.items() if s <= t < e]
        ok = {i for i, (s, e) in span.items() if e <= t}
        waiting = [i for i in range(len(moves)) if i not in span or span[i][0] > t]
        ready = loose.startable(moves, deps, waiting, running, ok)
        total += min(concurrent, len(running) + len(ready)) * (end - start)
    return total


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-streaming-"))
    print("Streamed execution (simulated seconds, 6 nodes, 30 guests on 3 hot nodes, per_node 1)")
    print(f"{'concurrent':>10} {'moves':>6} {'slots busy':>11} {'of possible':>12} {'ETA after 1st':>14} {'took':>7} "
          f"{'error':>7} {'plan est.':>10} {'whole run':>10} {'error':>7}  target")
    failed = False
    for concurrent in (2, 3):
        r = run(concurrent, tmp)
        eta_error = (r["eta"] - r["rest"]) / r["rest"] if r["rest"] else 0.0
        plan_error = (r["plan_est"] - r["took"]) / r["took"] if r["took"] else 0.0
        ok = r["ok"] and r["filled"] >= 0.9 and abs(eta_error) <= 0.10
        failed |= not ok
        print(f"{r['concurrent']:>10} {r['moves']:>6} {r['utilisation']:>10.1%} {r['filled']:>11.1%} {r['eta']:>13.0f}s "
              f"{r['rest']:>6.0f}s {eta_error:>+7.1%} {r['plan_est']:>9.0f}s {r['took']:>9.0f}s "
              f"{plan_error:>+7.1%}  possible slots ≥ 90 %, ETA ±10 %: {'yes' if ok else 'NO'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
