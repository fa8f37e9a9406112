"""A gateway that stays up (finding 3): slow or idle clients without credentials (slow
headers, a half-open TLS handshake, a slow body) must not keep an authenticated client
from its status; each is cut off after its deadline, and one address holds only so many
connections.  Also refused credentials: a flood of forged tickets is answered at once,
and PVE is asked only within the address's budget.  (`make bench`, tests/bench/web_slow.py,
measures the same with 96 slow connections.)"""

from __future__ import annotations

import concurrent.futures
import time

import requests

from conftest import DEMO_TOKEN
from keel.web import limits
from service_helpers import request_from

from .web_helpers import PARTIAL_CLIENT_HELLO, closed_by_peer, tcp, tls

AUTH = {"Authorization": f"PVEAPIToken={DEMO_TOKEN}"}


def status_answers(url, cert, times=5):
    """``times`` status requests, each on a new connection from 127.0.0.1."""
    codes = []
    for _ in range(times):
        codes.append(requests.get(url + "/api/status", headers=AUTH, verify=cert, timeout=20).status_code)
        time.sleep(0.2)
    return codes


def test_slow_clients_do_not_keep_status_from_an_authenticated_client(web_stack):
    sim, url = web_stack
    held = []
    try:
        # slow headers: 8 more from one address than its cap, sending a header line now and then
        slow_headers, refused = [], 0
        for _ in range(limits.CONNECTIONS_PER_ADDRESS + 8):
            try:
                sock = tls(url, sim.cert, "127.0.0.2", timeout=5)
            except OSError:
                refused += 1                      # closed before its handshake: over the cap
                continue
            sock.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\n")
            slow_headers.append(sock)
        assert refused == 8 and len(slow_headers) == limits.CONNECTIONS_PER_ADDRESS
        # half-open TLS handshakes: a partial ClientHello, then nothing
        half_open = [tcp(url, source, timeout=5) for source in ("127.0.0.3", "127.0.0.4") for _ in range(12)]
        for sock in half_open:
            sock.sendall(PARTIAL_CLIENT_HELLO)
        # slow bodies: headers complete, then the body a byte at a time
        slow_bodies = []
        for _ in range(8):
            sock = tls(url, sim.cert, "127.0.0.5", timeout=5)
            sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Delivery: 1\r\nContent-Length: 1000\r\n\r\n{")
            slow_bodies.append(sock)
        held = slow_headers + half_open + slow_bodies

        assert status_answers(url, sim.cert) == [200] * 5

        # keep them trickling; each is cut off after its deadline
        began = time.monotonic()
        cut: dict[int, float] = {}
        while len(cut) < len(held) and time.monotonic() - began < limits.BODY_S + 20:
            for sock in held:
                if id(sock) in cut:
                    continue
                try:
                    if sock in slow_headers:
                        sock.sendall(b"X-Slow: 1\r\n")
                    elif sock in slow_bodies:
                        sock.sendall(b" ")
                except OSError:
                    cut[id(sock)] = time.monotonic() - began
                    continue
                sock.settimeout(0.01)
                if closed_by_peer(sock):
                    cut[id(sock)] = time.monotonic() - began
            time.sleep(1)
        assert len(cut) == len(held), f"{len(held) - len(cut)} slow connections still open"
        assert max(cut[id(s)] for s in slow_headers) < limits.HEADERS_S + 10
        assert max(cut[id(s)] for s in half_open) < limits.HANDSHAKE_S + 10
        assert max(cut[id(s)] for s in slow_bodies) < limits.BODY_S + 10
        assert status_answers(url, sim.cert, 1) == [200]
    finally:
        for sock in held:
            sock.close()


def test_a_flood_of_forged_tickets_is_answered_at_once(web_stack):
    sim, url = web_stack
    start = sim.requests_log()[-1]["seq"]
    forged = [f"PVEAuthCookie=PVE:root@pam:{int(time.time()):08X}::forged{i:04d}" for i in range(40)]

    def forge(header):
        return request_from("127.0.0.6", url, sim.cert, "GET", "/api/status", {"Authorization": header}).status

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        flood = pool.map(forge, forged)
        assert status_answers(url, sim.cert, 3) == [200] * 3      # meanwhile, from another address
        statuses = list(flood)
    assert set(statuses) <= {401, 429} and statuses.count(429) >= 40 - limits.FAILURES_FREE - limits.CHECKS_PER_ADDRESS
    asked = [r for r in sim.requests_log() if r["seq"] > start and r["path"].endswith("/access/permissions")
             and r["status"] == 401]
    # PVE saw the address's free refusals, and the checks already under way when they ran out
    assert len(asked) <= limits.FAILURES_FREE + limits.CHECKS_PER_ADDRESS, len(asked)
