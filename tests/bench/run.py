#!/usr/bin/env python3
"""``make bench``: Keel's performance figures, printed as a table.

Measured against a real ``keel sim`` process over HTTPS on loopback:

* generating and loading a 64-node, 10,000-guest scenario;
* starting the simulator on it (until it prints its ``listening on`` line);
* a full cluster snapshot (``keel.pve.snapshot.collect``): wall time and API calls,
  with a token (the production path) and with a password;
* ``keel apply``'s one-shot plan on it, with the configs of the guests it would move read
  from the simulator (and, planned again, none read twice);
* the demo cluster's snapshot, for scale.

Targets are stated next to each figure; the run exits non-zero if one is missed, so a
regression shows.  Tests assert correctness; this file is where speed is checked.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

import yaml  # noqa: E402

from conftest import DEMO_SCENARIO, DEMO_TOKEN, start_sim  # noqa: E402
from keel.balance import guestconfig  # noqa: E402
from keel.balance.balancer import make_plan  # noqa: E402
from keel.balance.settings import BalancingSettings  # noqa: E402
from keel.pve import snapshot  # noqa: E402
from keel.pve.client import PveClient, Target  # noqa: E402
from keel.sim import scenario as sc  # noqa: E402
from keel.sim.clock import Clock  # noqa: E402
from keel.sim.cluster import Cluster  # noqa: E402
from keel.sim.generate import DEMO_TOKEN_NAME, DEMO_TOKEN_USER, generate  # noqa: E402

NODES, GUESTS = 64, 10_000


def timed(fn, repeat: int = 1):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="snapshots per measurement")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str, bool]] = []   # what, value, target, note, ok

    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-"))
    data, (gen_s,) = timed(lambda: generate(NODES, GUESTS, seed=1, profile="skewed"))
    path = tmp / "big.yaml"
    path.write_text(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    rows.append((f"generate {NODES}x{GUESTS} scenario", f"{gen_s:.2f} s", "< 10 s", "", gen_s < 10))
    scenario, (load_s,) = timed(lambda: sc.load(path))
    rows.append(("load scenario (YAML + checks)", f"{load_s:.2f} s", "< 10 s", f"{path.stat().st_size / 1e6:.1f} MB",
                 load_s < 10))
    _, (init_s,) = timed(lambda: Cluster(scenario, Clock(None, 0)))
    rows.append(("build simulated cluster", f"{init_s:.2f} s", "< 5 s", "", init_s < 5))

    sim, (start_s,) = timed(lambda: start_sim(path, tmp / "sim"))
    rows.append(("keel sim start (process, to 'listening')", f"{start_s:.2f} s", "< 15 s", "", start_s < 15))
    try:
        secret = next(t["secret"] for u in data["users"] if u["userid"] == DEMO_TOKEN_USER
                      for t in u["tokens"])
        token = f"{DEMO_TOKEN_USER}!{DEMO_TOKEN_NAME}={secret}"
        client = PveClient(Target.from_url(sim.url, verify=sim.cert).with_token(token))
        snap, times = timed(lambda: snapshot.collect(client), args.repeat)
        median = statistics.median(times)
        rows.append((f"snapshot {NODES}x{GUESTS}, API token", f"{median:.2f} s",
                     "< 5 s", f"median of {args.repeat}, min {min(times):.2f} s, max {max(times):.2f} s",
                     median < 5))
        rows.append((f"snapshot {NODES}x{GUESTS}: API calls", str(snap.api_calls), f"<= {NODES + 10}",
                     "nodes + 8", snap.api_calls <= NODES + 10))
        # keel apply's plan on it: one-shot, the configs of the guests it would move read
        # once and kept; a second plan (the next apply, a round) reads none of them again
        guestconfig.forget()
        reader = guestconfig.Reader(client)
        plan, (plan_s,) = timed(lambda: make_plan(snap, BalancingSettings(), oneshot=True, configs=reader))
        rows.append((f"one-shot plan {NODES}x{GUESTS}, configs read", f"{plan_s:.2f} s", "< 5 s",
                     f"{len(plan.moves)} moves; {reader.calls} config reads (GET .../config), not one a guest",
                     plan_s < 5))
        again = guestconfig.Reader(client)
        _, (again_s,) = timed(lambda: make_plan(snap, BalancingSettings(), oneshot=True, configs=again))
        rows.append((f"one-shot plan {NODES}x{GUESTS} again", f"{again_s:.2f} s", "< 5 s",
                     f"{again.calls} config reads: kept from the first", again_s < 5 and again.calls == 0))
        guestconfig.forget()
        pw_client = PveClient(Target.from_url(sim.url, verify=sim.cert, user="root@pam", password="keel-sim"))
        _, pw_times = timed(lambda: snapshot.collect(pw_client), args.repeat)
        rows.append((f"snapshot {NODES}x{GUESTS}, password (root)", f"{statistics.median(pw_times):.2f} s",
                     "< 5 s", f"median of {args.repeat}", statistics.median(pw_times) < 5))
    finally:
        sim.stop()

    demo = start_sim(DEMO_SCENARIO, tmp / "demo")
    try:
        client = PveClient(Target.from_url(demo.url, verify=demo.cert).with_token(DEMO_TOKEN))
        snap, times = timed(lambda: snapshot.collect(client), args.repeat)
        rows.append(("snapshot demo (5 nodes, 27 guests)", f"{statistics.median(times) * 1000:.0f} ms",
                     "< 500 ms", f"{snap.api_calls} API calls", statistics.median(times) < 0.5))
    finally:
        demo.stop()

    width = [max(len(r[i]) for r in rows + [("what", "value", "target", "note", True)]) for i in range(4)]
    header = ("what", "value", "target", "note")
    print("  ".join(h.ljust(w) for h, w in zip(header, width)) + "  ok")
    print("  ".join("-" * w for w in width) + "  --")
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], width)) + ("  yes" if row[4] else "  NO"))
    if args.json:
        Path(args.json).write_text(json.dumps([dict(zip(header + ("ok",), r)) for r in rows], indent=2))
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
