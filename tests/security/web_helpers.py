"""Raw clients for the hostile tests: what a browser never sends."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import requests

# The first bytes of a TLS ClientHello: a record header and the start of the handshake,
# then nothing (a handshake left half-open).
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


def login(sim: Any, user: str, password: str = "keel-demo") -> tuple[str, str]:
    """(ticket, CSRF token) from the simulated PVE, as its login window gets them."""
    answer = requests.post(f"{sim.url}/api2/json/access/ticket", data={"username": user, "password": password},
                           verify=sim.cert, timeout=30)
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    return data["ticket"], data["CSRFPreventionToken"]


def tcp(url: str, source: str, timeout: float = 30) -> socket.socket:
    sock = socket.create_connection(host_port(url), timeout=timeout, source_address=(source, 0))
    return sock


def tls(url: str, cert: str, source: str, timeout: float = 30) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=cert)
    host, _ = host_port(url)
    return context.wrap_socket(tcp(url, source, timeout), server_hostname=host)


def raw_request(url: str, cert: str, source: str, data: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """Send ``data`` as it is; (status, body) of the answer."""
    with tls(url, cert, source, timeout) as sock:
        sock.sendall(data)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
            head, sep, body = received.partition(b"\r\n\r\n")
            if sep:
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
        head, _, body = received.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock`` (waits at most the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True
