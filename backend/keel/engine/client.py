"""Talking to keel-engine over its Unix socket: keel-web forwards to it, the CLI uses it
when the engine runs.  Standard library only (http.client over AF_UNIX)."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from keel.errors import (AuthError, BusyError, InvalidError, KeelError, NotFoundError, PermissionDeniedError,
                         UnavailableError)

_BY_STATUS = {400: InvalidError, 401: AuthError, 403: PermissionDeniedError, 404: NotFoundError,
              409: BusyError, 413: InvalidError, 503: UnavailableError}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EngineClient:
    def __init__(self, socket_path: str, timeout_s: float = 130.0):
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
        """(status, content type, body); UnavailableError if the engine does not answer."""
        conn = _UnixConnection(self.socket_path, self.timeout_s)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.getheader("Content-Type", ""), response.read()
        except (OSError, http.client.HTTPException) as err:
            raise UnavailableError(f"keel-engine is not answering on {self.socket_path} "
                                   f"({getattr(err, 'strerror', None) or type(err).__name__}); "
                                   f"is keel-engine.service running?") from None
        finally:
            conn.close()

    def available(self) -> bool:
        try:
            status, _, _ = self.request("GET", "/api/openapi.json")
        except UnavailableError:
            return False
        return status == 200

    def call(self, method: str, path: str, payload: Any = None, user: str | None = None) -> Any:
        """The ``data`` of a JSON answer, or the KeelError its status stands for."""
        headers = {"Accept": "application/json"}
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        if user:
            headers["X-Keel-User"] = user
        status, _, raw = self.request(method, path, body, headers)
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            raise UnavailableError(f"keel-engine answered {status} without JSON") from None
        if status >= 400:
            kind = _BY_STATUS.get(status, KeelError)
            raise kind(answer.get("message") or f"keel-engine answered {status}", answer.get("errors") or {})
        return answer.get("data")
