#!/usr/bin/env python3
"""``make bench``, the gateway under slow clients: 48 slowloris connections (a request's
headers a line at a time) and 48 half-open TLS handshakes (a partial ClientHello, then
nothing), without credentials, held for 20 s against keel-web; each one the server cuts
off comes back at once.  Meanwhile an authenticated client (API token, a kept-alive
connection as the panel has) asks for the status every 0.5 s.  Prints its p50/p95/max
latency and failures; exits non-zero unless p95 < 200 ms and no request failed.

The slow clients come from four loopback addresses (127.0.0.2-5, 24 each: all under
keel-web's per-address cap, so every one of them is held); the status client from
127.0.0.1.  Real processes on loopback: the simulator, keel-engine, keel-web.  Run it with
the .venv (the newest gunicorn and gevent) or with Debian's python3 (``PYTHONPATH=backend
/usr/bin/python3 tests/bench/web_slow.py``: gunicorn 20.1 on Debian 12).
"""

from __future__ import annotations

import argparse
import socket
import ssl
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

TARGET_P95_S = 0.200
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


class Attack:
    """Keeps ``per_address`` slow connections of each kind open from each address until
    stopped; counts how many the server cut off."""

    def __init__(self, url: str, cert: str, slowloris: list[str], half_open: list[str], per_address: int):
        host, port = url.removeprefix("https://").rsplit(":", 1)
        self.target = (host, int(port))
        self.context = ssl.create_default_context(cafile=cert)
        self.plan = [("slowloris", a) for a in slowloris for _ in range(per_address)] + \
                    [("half-open", a) for a in half_open for _ in range(per_address)]
        self.socks: list[socket.socket | None] = [None] * len(self.plan)
        self.cut = {"slowloris": 0, "half-open": 0}
        self.refused = 0
        self.stop = threading.Event()

    def open(self, kind: str, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(self.target, timeout=5, source_address=(source, 0))
            if kind == "slowloris":
                sock = self.context.wrap_socket(sock, server_hostname=self.target[0])
                sock.sendall(b"GET /api/status HTTP/1.1\r\nHost: keel\r\n")
            else:
                sock.sendall(PARTIAL_CLIENT_HELLO)
            sock.setblocking(False)
            return sock
        except OSError:
            self.refused += 1
            return None

    def alive(self, sock: socket.socket) -> bool:
        try:
            return sock.recv(1) != b""
        except (BlockingIOError, ssl.SSLWantReadError):
            return True
        except OSError:
            return False

    def run(self) -> None:
        tick = 0
        while not self.stop.is_set():
            for i, (kind, source) in enumerate(self.plan):
                sock = self.socks[i]
                if sock is not None and not self.alive(sock):
                    sock.close()
                    self.cut[kind] += 1
                    sock = None
                if sock is None:
                    sock = self.socks[i] = self.open(kind, source)
                elif kind == "slowloris" and tick % 5 == 0:
                    try:
                        sock.sendall(b"X-Slow: 1\r\n")      # a header line every 5 s
                    except OSError:
                        pass
            tick += 1
            self.stop.wait(1.0)
        for sock in self.socks:
            if sock is not None:
                sock.close()

    def held(self) -> int:
        return sum(1 for s in self.socks if s is not None)


def poll(url: str, cert: str, seconds: float, every_s: float) -> tuple[list[float], list[str]]:
    session = requests.Session()
    session.headers["Authorization"] = f"PVEAPIToken={DEMO_TOKEN}"
    latencies: list[float] = []
    errors: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        try:
            answer = session.get(url + "/api/status", verify=cert, timeout=10)
            if answer.status_code != 200:
                errors.append(f"{answer.status_code} {answer.text[:80]}")
            else:
                latencies.append(time.perf_counter() - began)
        except requests.RequestException as err:
            errors.append(type(err).__name__)
        time.sleep(max(0.0, every_s - (time.perf_counter() - began)))
    return latencies, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--per-address", type=int, default=24)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-web-slow-"))
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", 1)
    config = write_config(tmp / "node", sim, engine={"status_interval": "30s"})
    engine, client = start_engine(config)
    web, url = start_web(config)
    warm = requests.Session()       # the panel was open before the attack: connected, credential cached
    attack = Attack(url, sim.cert, ["127.0.0.2", "127.0.0.3"], ["127.0.0.4", "127.0.0.5"], args.per_address)
    try:
        wait_for(lambda: client.call("GET", "/api/status")["leader"])
        warm.get(url + "/api/status", headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"}, verify=sim.cert,
                 timeout=10)
        attacker = threading.Thread(target=attack.run, daemon=True)
        attacker.start()
        time.sleep(2)                                   # every slow connection open
        held_at_start = attack.held()
        latencies, errors = poll(url, sim.cert, args.seconds, 0.5)
        attack.stop.set()
        attacker.join(timeout=30)
    finally:
        web.stop()
        engine.stop()
        sim.stop()
    import gunicorn
    rows = [(f"slow clients held (of {len(attack.plan)})", str(held_at_start), "", "", True),
            ("  cut off by a deadline, came back", f"{attack.cut['slowloris']} slowloris, "
             f"{attack.cut['half-open']} half-open", "", "", True)]
    if latencies:
        latencies.sort()
        p95 = latencies[max(0, int(len(latencies) * 0.95) - 1)]
        rows += [(f"status every 0.5 s for {args.seconds:.0f} s (gunicorn {gunicorn.__version__})",
                  f"{len(latencies)} answers", "", "", True),
                 ("  p50 latency", f"{statistics.median(latencies) * 1000:.1f} ms", "", "", True),
                 ("  p95 latency", f"{p95 * 1000:.1f} ms", f"< {TARGET_P95_S * 1000:.0f} ms", "", p95 < TARGET_P95_S),
                 ("  max latency", f"{latencies[-1] * 1000:.1f} ms", "", "", True)]
    else:
        rows.append(("status every 0.5 s", "no request succeeded", "", "", False))
    rows.append(("  failures", str(len(errors)), "0", errors[0][:80] if errors else "", not errors))
    width = [max(len(str(r[i])) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row[:4], width)) + ("  yes" if row[4] else "  NO"))
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
