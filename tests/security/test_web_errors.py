"""Requests that made keel-web answer 500 with a traceback in its log (finding 6), and
others of their kind: each is a 4xx in PVE's envelope now, and keel-web logs no
traceback.  (The engine's own 500s are tests/security/test_engine_*.py.)"""

from __future__ import annotations

import pytest
import requests

from conftest import DEMO_TOKEN

from .web_helpers import raw_request

TOKEN = f"PVEAPIToken={DEMO_TOKEN}"
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def is_envelope(body: dict) -> bool:
    return set(body) == {"data", "message", "errors"} and body["data"] is None and body["message"]


def call(web_stack, method, path, headers=None, **kwargs):
    sim, url = web_stack
    return requests.request(method, url + path, headers=headers or {}, verify=sim.cert, timeout=60, **kwargs)


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/webhook", 405),
    ("PUT", "/webhook", 405),
    ("DELETE", "/webhook", 405),
    ("PATCH", "/api/status", 405),
    ("PATCH", "/webhook", 405),
    ("POST", "/metrics", 405),
    ("TRACE", "/api/status", 405),
    ("PUT", "/", 405),
    ("GET", "/no/such/thing", 404),
])
def test_a_wrong_method_or_path_is_a_4xx_in_pves_envelope(web_stack, method, path, status):
    answer = call(web_stack, method, path, {"Authorization": TOKEN})
    assert answer.status_code == status, answer.text
    assert is_envelope(answer.json())
    if status == 405:
        assert answer.headers.get("Allow")


@pytest.mark.parametrize("origin", [
    "https://127.0.0.1:8006.evil.com",      # urlsplit's port raised
    "https://127.0.0.1:99999",
    "https://[::1",
    "https://127.0.0.1:-1",
    "null",
    "https://127.0.0.1:8006@evil.com",
])
def test_a_malformed_origin_is_refused_403(web_stack, origin):
    answer = call(web_stack, "GET", "/api/status", {"Authorization": TOKEN, "Origin": origin})
    assert answer.status_code == 403, answer.text
    assert is_envelope(answer.json())
    assert "Access-Control-Allow-Origin" not in answer.headers


@pytest.mark.parametrize("request_line", [
    b"GET /api/status?limit=\xb2 HTTP/1.1",               # a raw byte no URL may hold
    b"GET /api/history?since=%C2%B2 HTTP/1.1",
    b"GET /api/history?x=%ED%A0%80 HTTP/1.1",              # a lone surrogate, UTF-8 encoded
    b"GET /api/%ff%fe HTTP/1.1",
    b"GET /api/status?a=\x7f HTTP/1.1",
    b"GET /api/jobs/%00 HTTP/1.1",
])
def test_odd_bytes_in_the_request_line_are_never_a_500(web_stack, request_line):
    sim, url = web_stack
    data = request_line + f"\r\nHost: x\r\nAuthorization: {TOKEN}\r\nConnection: close\r\n\r\n".encode()
    status, body = raw_request(url, sim.cert, "127.0.0.1", data)
    assert 200 <= status < 500, (status, body)


def test_a_body_larger_than_announced_or_chunked_over_the_limit_is_refused(web_stack):
    sim, url = web_stack
    big = b"x" * (1024 * 1024 + 10)
    chunked = (f"PUT /api/config HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\nContent-Type: application/json\r\n"
               f"Transfer-Encoding: chunked\r\n\r\n{len(big):x}\r\n").encode() + big + b"\r\n0\r\n\r\n"
    status, body = raw_request(url, sim.cert, "127.0.0.1", chunked)
    assert status == 413, body


def test_a_chunked_body_within_the_limit_reaches_the_engine(web_stack):
    sim, url = web_stack
    payload = b'{"balancing": {}}'
    data = (f"POST /api/config/validate HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            f"{len(payload):x}\r\n").encode() + payload + b"\r\n0\r\n\r\n"
    status, body = raw_request(url, sim.cert, "127.0.0.1", data)
    assert status == 200, body


def test_expect_100_continue_is_answered_once(web_stack):
    sim, url = web_stack
    payload = b'{"balancing": {}}'
    head = (f"POST /api/config/validate HTTP/1.1\r\nHost: x\r\nAuthorization: {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nExpect: 100-continue\r\n"
            f"Connection: close\r\n\r\n").encode()
    from .web_helpers import tls
    with tls(url, sim.cert, "127.0.0.1") as sock:
        sock.sendall(head)
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(payload)
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert rest.startswith(b"HTTP/1.1 200"), rest[:200]
    assert b"100 Continue" not in rest


@pytest.mark.parametrize("headers", [
    {},                                                    # no X-GitHub-Delivery (finding 6: replayed)
    {"X-GitHub-Delivery": ""},
    {"X-GitHub-Delivery": "x" * 200},
    {"X-GitHub-Delivery": "../../etc/passwd"},
])
def test_a_webhook_delivery_without_its_id_is_refused_before_the_engine(web_stack, headers):
    answer = call(web_stack, "POST", "/webhook", {"X-GitHub-Event": "workflow_job",
                                                  "X-Hub-Signature-256": "sha256=00", **headers},
                  data=b'{"action": "queued"}')
    assert answer.status_code == 400, answer.text
    assert is_envelope(answer.json()) and "X-GitHub-Delivery" in answer.json()["message"]


def test_a_webhook_delivery_with_its_id_reaches_the_engine(web_stack):
    answer = call(web_stack, "POST", "/webhook", {"X-GitHub-Event": "workflow_job", "X-Hub-Signature-256": "sha256=00",
                                                  "X-GitHub-Delivery": DELIVERY}, data=b'{"action": "queued"}')
    assert answer.status_code == 404 and "runners do not run" in answer.json()["message"]


def test_keel_web_logged_no_traceback(web_stack):
    """Runs last in this module: nothing above was an internal error."""
    sim, url = web_stack
    from pathlib import Path
    log = (Path(sim.cert).parents[2] / "node" / "web.log").read_text()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
