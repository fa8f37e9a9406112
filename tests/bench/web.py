#!/usr/bin/env python3
"""``make bench``, the gateway: 50 concurrent clients on ``GET /api/status`` through
keel-web (HTTPS, API token checked by the simulated PVE and cached) to keel-engine (Unix
socket), all real processes on loopback.  Prints p50/p99 latency and requests per
second; exits non-zero when p99 is not under 50 ms.

Each client keeps its connection alive (as the browser does).  The load generator runs
on the same 2 cores as the servers, so the figures are a floor for a real node.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

import requests  # noqa: E402

from conftest import DEMO_SCENARIO, DEMO_TOKEN, start_sim  # noqa: E402
from service_helpers import start_engine, start_web, wait_for, write_config  # noqa: E402

TARGET_P99_S = 0.050


def load(url: str, cert: str, clients: int, seconds: float, every_s: float
         ) -> tuple[list[float], list[str], float]:
    """``clients`` threads with a kept-alive connection each, asking for the status every
    ``every_s`` seconds (0: back to back) for ``seconds``; (latencies, errors, elapsed)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Event()
    stop_at = [0.0]

    def work(index: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"PVEAPIToken={DEMO_TOKEN}"
        get = lambda: session.get(url + "/api/status", timeout=30, verify=cert)  # noqa: E731
        mine: list[float] = []
        try:
            get()                                  # connect, and warm keel-web's auth cache
            start.wait()
            if every_s:
                time.sleep(every_s * index / clients)          # spread the panels out
            while time.monotonic() < stop_at[0]:
                t0 = time.perf_counter()
                answer = get()
                took = time.perf_counter() - t0
                if answer.status_code != 200:
                    raise RuntimeError(f"{answer.status_code} {answer.text[:100]}")
                mine.append(took)
                if every_s:
                    time.sleep(max(0.0, every_s - took))
        except (requests.RequestException, RuntimeError) as err:
            with lock:
                errors.append(str(err))
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    stop_at[0] = time.monotonic() + seconds
    began = time.monotonic()
    start.set()
    for thread in threads:
        thread.join()
    return latencies, errors, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-web-"))
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", 1)
    config = write_config(tmp / "node", sim, engine={"status_interval": "30s"})
    engine, client = start_engine(config)
    web, url = start_web(config)
    try:
        wait_for(lambda: client.call("GET", "/api/status")["leader"])
        ui = load(url, sim.cert, args.clients, args.seconds * 3, every_s=3.0)
        flat = load(url, sim.cert, args.clients, args.seconds, every_s=0.0)
    finally:
        web.stop()
        engine.stop()
        sim.stop()
    rows = []
    for name, (lat, errors, elapsed), target in (
            (f"{args.clients} panels polling every 3 s", ui, True),
            (f"{args.clients} clients back to back (saturation)", flat, False)):
        if not lat:
            rows.append((name, "no request succeeded", "", errors[:1], False))
            continue
        lat.sort()
        p99 = lat[max(0, int(len(lat) * 0.99) - 1)]
        rows += [(name, f"{len(lat)} requests in {elapsed:.1f} s", "", "", True),
                 ("  p50 latency", f"{statistics.median(lat) * 1000:.1f} ms", "", "", True),
                 ("  p99 latency", f"{p99 * 1000:.1f} ms", f"< {TARGET_P99_S * 1000:.0f} ms" if target else "",
                  "" if target else "queueing: not judged", p99 < TARGET_P99_S or not target),
                 ("  requests per second", f"{len(lat) / elapsed:.0f}", "", "", True),
                 ("  errors", str(len(errors)), "0", errors[0][:80] if errors else "", not errors)]
    width = [max(len(str(r[i])) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], width)) + ("  yes" if row[4] else "  NO"))
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
