"""The small HTTP endpoint ``keel runners run`` serves on its own: ``/metrics`` and ``/webhook``.

Under the engine, the engine's API serves both; this is for the foreground loop (and the
tests).  Plain HTTP on the configured address (loopback by default): put a TLS proxy in
front of ``/webhook`` if GitHub must reach it.  The webhook's body is read whole and
handed, as received, to ``RunnerService.handle_webhook``, which checks its signature.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 25 * 1024 * 1024       # GitHub caps payloads at 25 MB


class Endpoint:
    """Serves ``service`` on ``host:port`` in a thread; ``paths`` picks ``metrics`` and/or ``webhook``."""

    def __init__(self, service: Any, listen: str, paths: tuple[str, ...] = ("metrics", "webhook")):
        host, _, port = listen.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:      # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] == "/metrics" and "metrics" in outer.paths:
                    self._reply(200, outer.service.metrics(), "text/plain; version=0.0.4")
                else:
                    self._reply(404, "not found\n")

            def do_POST(self) -> None:     # noqa: N802
                if self.path.split("?")[0] != "/webhook" or "webhook" not in outer.paths:
                    self._reply(404, "not found\n")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self._reply(413, "too large\n")
                    return
                body = self.rfile.read(length) if length else b""
                status, text = outer.service.handle_webhook(dict(self.headers.items()), body)
                self._reply(status, text + "\n")

            def _reply(self, status: int, text: str, kind: str = "text/plain") -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet."""

        self.service = service
        self.paths = paths
        self.server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="keel-runners-http",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.server.server_address[0]}:{self.port}"

    def start(self) -> "Endpoint":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
