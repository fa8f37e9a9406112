#!/usr/bin/env python3
"""The runners' bench: 1,000 jobs through the simulator and its fake GitHub, in real time.

A ``keel sim`` process (clock ×1) serves 8 nodes of 512 GiB and a fake GitHub; a
``RunnerService`` runs its loop (``run``) in this process, as ``keel runners run`` does.
Jobs for three scale sets are queued at a steady rate; each gets a VM cloned from the
template, booted, handed its JIT config, runs for a few seconds and is deleted.

Figures, with targets (the run exits non-zero if one is missed):

* time from a job queued on GitHub to the clone of its runner requested (p50, p95),
  clone time excluded: under 1 s;
* peak runners per scale set, from the simulator's request log: at most its max_runners;
* orphans when everything is done (runner VMs and registrations left): 0;
* and, for scale: GitHub's own wait (queued → a runner took it), calls per job.

    python3 tests/bench/runners.py [--jobs 1000] [--rate 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

import requests  # noqa: E402
import yaml  # noqa: E402

from conftest import start_sim  # noqa: E402
from keel.runners.service import RunnerService  # noqa: E402
from runners_helpers import TOKEN, runner_settings, scenario, write_private_key  # noqa: E402

SIZES = [  # name, cores, memory, max_runners, priority, share of the jobs
    ("bench-c2-m4", 2, "4GiB", 120, 0, 0.6),
    ("bench-c4-m8", 4, "8GiB", 60, 0, 0.3),
    ("bench-c8-m16", 8, "16GiB", 24, 10, 0.1),
]
TARGET_LATENCY_S = 1.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=8.0, help="jobs queued per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-runners-"))
    data = scenario(nodes=8, memory="512GiB", start_time=None, boot="3s",
                    github={"long_poll": "20s", "connect": "1s", "poweroff": "1s"})
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(data))
    sim = start_sim(tmp / "scenario.yaml", tmp / "sim", clock_factor=1.0)
    service = None
    try:
        scale_sets = [{"name": n, "max_runners": m, "priority": p,
                       "providers": [{"name": "pve", "runner": {"cores": c, "memory": mem}}]}
                      for n, c, mem, m, p, _ in SIZES]
        settings = runner_settings(sim, write_private_key(tmp / "app.pem"), scale_sets,
                                   reconcile_interval="10s")
        service = RunnerService(settings, sim.client(TOKEN), tmp / "keel.db")
        stop = threading.Event()
        loop = threading.Thread(target=service.run, args=(stop,), daemon=True)
        loop.start()
        gh = requests.Session()

        def control(method: str, path: str, body: dict | None = None) -> dict:
            response = gh.request(method, f"{sim.url}/_github/{path}", json=body, verify=sim.cert, timeout=60)
            response.raise_for_status()
            return response.json()

        deadline = time.monotonic() + 30
        while len(control("GET", "state")["sessions"]) < len(SIZES):
            if time.monotonic() > deadline:
                raise SystemExit("the scale sets never got their sessions")
            time.sleep(0.1)
        started = time.monotonic()
        names = [s[0] for s in SIZES]
        weights = [s[5] for s in SIZES]
        for i in range(args.jobs):
            target = started + i / args.rate
            time.sleep(max(0.0, target - time.monotonic()))
            control("POST", "jobs", {"labels": [rng.choices(names, weights)[0]],
                                     "duration": round(rng.uniform(3, 8), 1)})
        queued_s = time.monotonic() - started
        deadline = time.monotonic() + 600
        while True:
            state = control("GET", "state")
            if all(j["status"] == "completed" for j in state["jobs"]) and not state["runners"] \
                    and not service.runners:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        total_s = time.monotonic() - started
        stop.set()
        loop.join(timeout=120)
        state = control("GET", "state")
        log = sim.requests_log(0)
        rows, ok = figures(state, log, service, args.jobs, queued_s, total_s, sim)
    finally:
        if service is not None:
            service.close()
        sim.stop()
    width = max(len(r[0]) for r in rows)
    print(f"{'runners bench':<{width}}  {'value':>14}  {'target':<10}  note")
    for what, value, target, note, good in rows:
        print(f"{what:<{width}}  {value:>14}  {target:<10}  {note}{'' if good else '  <-- MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps([dict(zip(("what", "value", "target", "note", "ok"), r))
                                               for r in rows], indent=2))
    return 0 if ok else 1


def figures(state, log, service, jobs, queued_s, total_s, sim):
    rows = []
    done = [j for j in state["jobs"] if j["status"] == "completed"]
    rows.append(("jobs completed", f"{len(done)} of {jobs}", f"= {jobs}",
                 f"queued over {queued_s:.0f} s, all done after {total_s:.0f} s", len(done) == jobs))
    clones = [r for r in log if r["method"] == "POST" and r["path"].endswith("/clone") and r["status"] == 200]
    latencies = []
    for name, *_ in SIZES:
        queued = sorted(j["queued_at"] for j in state["jobs"] if j["labels"] == [name])
        made = sorted(c["time"] for c in clones if c["params"]["name"].rsplit("-", 1)[0] == name)
        latencies += [m - q for q, m in zip(queued, made)]
    p50, p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
    rows.append(("job queued -> clone requested, p50", f"{p50:.3f} s", f"< {TARGET_LATENCY_S:g} s",
                 f"{len(latencies)} clones for {len(done)} jobs", p50 < TARGET_LATENCY_S))
    rows.append(("job queued -> clone requested, p95", f"{p95:.3f} s", f"< {TARGET_LATENCY_S:g} s",
                 f"max {max(latencies, default=0):.3f} s", p95 < TARGET_LATENCY_S))
    waits = [j["started_at"] - j["queued_at"] for j in done if j["started_at"]]
    rows.append(("job queued -> runner took it, p50/p95", f"{percentile(waits, .5):.1f}/"
                 f"{percentile(waits, .95):.1f} s", "", "clone 2 s + start 1 s + boot 3 s + connect 1 s", True))
    alive: dict[int, str] = {}
    count: dict[str, int] = {}
    peak: dict[str, int] = {}
    for r in log:
        if r["status"] != 200:
            continue
        if r["method"] == "POST" and r["path"].endswith("/clone"):
            scale_set = r["params"]["name"].rsplit("-", 1)[0]
            alive[int(r["params"]["newid"])] = scale_set
            count[scale_set] = count.get(scale_set, 0) + 1
            peak[scale_set] = max(peak.get(scale_set, 0), count[scale_set])
        elif r["method"] == "DELETE" and r["path"].count("/") == 4 and "/qemu/" in r["path"]:
            vmid = int(r["path"].rsplit("/", 1)[1])
            if vmid in alive:
                count[alive.pop(vmid)] -= 1
    for name, _, _, maximum, _, _ in SIZES:
        rows.append((f"peak runners {name}", f"{peak.get(name, 0)}", f"<= {maximum}", "", peak.get(name, 0) <= maximum))
    vms = [g for g in sim.client(TOKEN).get("/cluster/resources", type="vm")
           if "keel-runner" in str(g.get("tags", "")) or str(g.get("name", "")).startswith("bench-")]
    orphans = len(vms) + len(state["runners"])
    rows.append(("orphans (VMs + registrations left)", f"{orphans}", "0", f"{len(vms)} VMs, "
                 f"{len(state['runners'])} registrations", orphans == 0))
    pve_calls = sum(1 for r in log)
    gh_calls = sum(service.github.requests_total.values())
    rows.append(("API calls per job (PVE / GitHub)", f"{pve_calls / max(1, jobs):.1f} / {gh_calls / max(1, jobs):.1f}",
                 "", "GitHub: long polls included", True))
    created = service.meters.count("keel_runners_created_total")
    reasons: dict[str, float] = {}
    for (name, labels), value in service.meters.counters.items():
        if name in ("keel_runners_removed_total", "keel_runners_lost_total"):
            reason = dict(labels)["reason"]
            reasons[reason] = reasons.get(reason, 0) + value
    rows.append(("runners created", f"{created:.0f}", f"= {jobs}",
                 "removed: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(reasons.items())), created == jobs))
    return rows, all(r[4] for r in rows)


if __name__ == "__main__":
    sys.exit(main())
