"""The engine API's envelope and checks, shared by its route modules (``engine.api``,
``engine.api_runners``): answers in Proxmox's ``{"data": ...}``, the strict JSON body, and
the caller's privileges (``require``)."""

from __future__ import annotations

from typing import Any

from flask import Response, g, jsonify, request

from keel.authz import Principal
from keel.errors import AuthError, InvalidError, KeelError, NotAllowedError
from keel.validate import Problems, Reader

MAX_BODY = 1024 * 1024


def status_of(err: KeelError) -> int:
    # PVE refusing Keel's own token is Keel's problem, not the caller's: never a 401/403 here,
    # which keel-web would pass on as if the user's ticket were bad.
    if isinstance(err, AuthError):
        return 502
    if type(err) is KeelError:        # PVE failed (a 500 on a read): try again later
        return 503
    return err.http_status


def ok(data: Any, status: int = 200) -> Response:
    response = jsonify({"data": data})
    response.status_code = status
    return response


def fail(status: int, message: str, errors: dict[str, str] | None = None, **extra: Any) -> Response:
    response = jsonify({"data": None, "message": message, "errors": errors or {}, **extra})
    response.status_code = status
    return response


def body() -> Reader:
    """The JSON body as a strict Reader: unknown keys are refused by ``done()``."""
    try:
        data = request.get_json(silent=True) if request.data else {}
    except RecursionError:
        raise InvalidError("the request body is nested too deeply") from None
    if data is None or not isinstance(data, dict):
        raise InvalidError("the request body must be a JSON object")
    problems = Problems("request body")
    return Reader(data, "", problems)


def caller() -> Principal:
    principal = g.get("principal")
    if principal is None:                         # an OPEN_PATHS route asking: a bug
        raise NotAllowedError("no caller")
    return principal


def who() -> str:
    return caller().who()


def require(privilege: str, path: str = "/") -> Principal:
    principal = caller()
    if not principal.can(privilege, path):
        raise NotAllowedError(f"permission check failed ({path}, {privilege})")
    return principal


def require_somewhere(privilege: str) -> Principal:
    """``privilege`` on some path: the route then decides per guest."""
    principal = caller()
    if not principal.anywhere(privilege):
        raise NotAllowedError(f"permission check failed ({privilege} on no guest)")
    return principal


def number_arg(name: str, default: int, low: int, high: int) -> int:
    text = request.args.get(name, str(default))
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise InvalidError(f"{name}: expected {low} to {high}, got {text[:20]!r}")
    return int(text)
