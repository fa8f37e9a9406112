"""A small threaded HTTPS server for WSGI apps, with keep-alive.

Werkzeug's development server closes every connection (it cannot tell a request body
it did not read from the next request), so every call would pay a TLS handshake.
PVE's pveproxy keeps connections alive, and clients such as proxmoxer reuse them; this
server does too.  It reads each request body whole before it calls the app, answers
with a Content-Length, and hands each connection to a thread, where the TLS handshake
also happens.
"""

from __future__ import annotations

import io
import socket
import ssl
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MAX_BODY = 64 * 1024 * 1024


class DropConnection(Exception):
    """Raised by the app: close the connection without an answer (a host that is down)."""


class WsgiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120           # an idle kept-alive connection frees its thread after this
    server: "HttpsServer"

    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes; without this, Nagle's algorithm and the
        # peer's delayed ACK add 40 ms to every answer on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, socket.timeout, ssl.SSLError):
            self.close_connection = True

    def do_GET(self) -> None:     # noqa: N802 (http.server's naming)
        self._run()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = do_GET

    def _run(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.send_error(411, "Length Required")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.send_error(413, "Request Entity Too Large")
            return
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": urllib.parse.unquote(path, encoding="latin-1"),
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "SERVER_NAME": self.server.server_address[0],
            "SERVER_PORT": str(self.server.server_address[1]),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for key, value in self.headers.items():
            name = "HTTP_" + key.upper().replace("-", "_")
            if name in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                continue
            environ[name] = f"{environ[name]},{value}" if name in environ else value
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [status, headers]
            return lambda data: None

        try:
            result = self.server.app(environ, start_response)
        except DropConnection:
            self.close_connection = True
            return
        try:
            data = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        status, headers = started
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for name, value in headers:
            if name.lower() not in ("content-length", "connection", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: the simulator keeps its own request log."""


class HttpsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, host: str, port: int, app: WsgiApp, context: ssl.SSLContext):
        super().__init__((host, port), WsgiHandler)
        self.app = app
        # The handshake happens in the connection's thread, not in the accept loop.
        self.socket = context.wrap_socket(self.socket, server_side=True,
                                          do_handshake_on_connect=False)
