"""The fake GitHub on the simulator's port: routing, authentication, rate limits, the long poll.

| path | who | authentication |
|---|---|---|
| ``/api/v3/...`` | the REST API | ``Bearer`` (or ``token``) installation token or PAT; the App's JWT for ``access_tokens``; ``RemoteAuth`` for ``runner-registration`` |
| ``/_actions/_apis/...`` | the Actions service | ``Bearer`` admin token from ``runner-registration`` |
| ``/_msgq/<session>`` | a session's message queue | ``Bearer`` the session's queue token |
| ``/_github/...`` | the control API (``control``) | none |

Every REST answer carries ``x-ratelimit-*`` headers from a per-token hourly bucket; a
spent bucket answers 403 with ``x-ratelimit-remaining: 0``.  The ``rate_limit`` fault
answers the next N requests (REST and Actions service) with 429 or 403 and
``retry-after`` or ``x-ratelimit-reset``; the ``outage`` fault answers every request but the
control API's 503 for a while, as GitHub does in an incident, while jobs and runners go on
behind it.  A path nobody answers gets 501, so a test fails loudly rather than on a
misleading 404.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import jwt
from werkzeug.wrappers import Request, Response

from keel.sim.github import actions, rest  # noqa: F401 (actions registers its routes)
from keel.sim.github.rest import ROUTES, Call, GhError

PREFIXES = ("/api/v3/", "/_actions/", "/_msgq/", "/_github")
RATE_WINDOW_S = 3600.0


def handles(path: str) -> bool:
    return path.startswith(PREFIXES)


def dispatch(cluster: Any, request: Request) -> Response:
    if cluster.github is None:
        return _json(501, {"message": "this scenario has no github: section"})
    path = request.path
    if path.startswith("/_github"):
        from keel.sim.github.control import control
        return control(cluster, request)
    with cluster.lock:
        cluster.sync()
        if cluster.github.out():
            cluster.github.log(request.method, path, 503)
            return _json(503, {"message": "Service Unavailable (simulated outage)"})
    if path.startswith("/_msgq/"):
        return _message_queue(cluster, request)
    body = _body(request)
    with cluster.lock:
        cluster.sync()
        fake = cluster.github
        headers: dict[str, str] = {}
        try:
            status, data, headers = _handle(fake, request, body)
        except GhError as err:
            status, data, headers = err.status, err.body, {**err.headers, **headers}
        fake.log(request.method, path, status)
    return _json(status, data, headers)


def _handle(fake: Any, request: Request, body: Any) -> tuple[int, Any, dict[str, str]]:
    method, path = request.method.upper(), request.path
    local = path[len("/api/v3"):] if path.startswith("/api/v3/") else path
    for route_method, pattern, handler in ROUTES:
        match = pattern.match(local)
        if match and route_method == method:
            break
    else:
        raise GhError(501, f"not simulated by the fake GitHub: {method} {path}")
    call = Call(fake, method, path, match.groups(), dict(request.args.items()), body, request.headers,
                request.host_url.rstrip("/"))
    headers: dict[str, str] = {}
    _fault(fake)
    if local.startswith("/_actions/"):
        _admin(fake, request)
    elif not local.startswith(("/app/", "/actions/runner-registration")):
        call.token = _token(fake, request)
        headers = _rate_headers(fake, call.token)
    status, data = handler(call)
    return status, data, {**headers, **call.extra_headers}


def _token(fake: Any, request: Request) -> Any:
    header = request.headers.get("Authorization", "")
    value = header.split(" ", 1)[1] if header.startswith(("Bearer ", "token ")) else ""
    token = fake.tokens.get(value)
    if token is None or token.kind == "registration" or token.expires_at <= fake.now:
        raise GhError(401, "Bad credentials")
    return token


def _admin(fake: Any, request: Request) -> None:
    header = request.headers.get("Authorization", "")
    try:
        claims = jwt.decode(header[len("Bearer "):], fake.admin_secret, algorithms=["HS256"],
                            options={"verify_exp": False, "verify_iat": False})
    except jwt.PyJWTError:
        raise actions.service_error(401, "UnauthorizedException", "Bad token") from None
    if claims.get("exp", 0) <= fake.now:
        raise actions.service_error(401, "UnauthorizedException", "The token has expired")


def _fault(fake: Any) -> None:
    fault = fake.take_fault("rate_limit")
    if not fault:
        return
    fault = fault if isinstance(fault, dict) else {}
    status = int(fault.get("status", 429))
    headers = {"x-ratelimit-limit": str(fake.spec.rate_limit), "x-ratelimit-resource": "core"}
    if fault.get("reset_in") is not None:
        headers.update({"x-ratelimit-remaining": "0",
                        "x-ratelimit-reset": str(int(fake.now + float(fault["reset_in"])))})
    else:
        headers["retry-after"] = str(int(fault.get("retry_after", 60)))
    raise GhError(status, "API rate limit exceeded" if status == 403 else
                  "You have exceeded a secondary rate limit", headers)


def _rate_headers(fake: Any, token: Any) -> dict[str, str]:
    buckets = fake.__dict__.setdefault("_buckets", {})
    start, used = buckets.get(token.value, (fake.now, 0))
    if fake.now - start >= RATE_WINDOW_S:
        start, used = fake.now, 0
    limit = fake.spec.rate_limit
    reset = str(int(start + RATE_WINDOW_S))
    if used >= limit:
        raise GhError(403, "API rate limit exceeded", {
            "x-ratelimit-limit": str(limit), "x-ratelimit-remaining": "0", "x-ratelimit-used": str(used),
            "x-ratelimit-reset": reset, "x-ratelimit-resource": "core"})
    buckets[token.value] = (start, used + 1)
    return {"x-ratelimit-limit": str(limit), "x-ratelimit-remaining": str(limit - used - 1),
            "x-ratelimit-used": str(used + 1), "x-ratelimit-reset": reset, "x-ratelimit-resource": "core"}


# -- the message queue ---------------------------------------------------------------------------


def _message_queue(cluster: Any, request: Request) -> Response:
    parts = request.path.strip("/").split("/")
    method = request.method.upper()
    if method == "DELETE" and len(parts) == 3 and parts[2].isdigit():
        with cluster.lock:
            cluster.sync()
            fake = cluster.github
            status, data = _queue_call(fake, request, parts[1], lambda s: fake.ack(s, int(parts[2])))
            fake.log(method, request.path, status)
        return _json(status, data)
    if method != "GET" or len(parts) != 2:
        return _json(501, {"message": f"not simulated by the fake GitHub: {method} {request.path}"})
    return _long_poll(cluster, request, parts[1])


def _queue_call(fake: Any, request: Request, session_id: str, action: Any) -> tuple[int, Any]:
    session = fake.sessions.get(session_id)
    if session is None:
        return 404, {"typeName": "TaskAgentSessionExpiredException", "message": "The session has expired."}
    header = request.headers.get("Authorization", "")
    if header != f"Bearer {session.token}" or session.token_expires_at <= fake.now:
        return 401, {"typeName": "UnauthorizedException", "message": "The message queue token has expired."}
    result = action(session)
    return (204, None) if result is None else (200, result)


def _long_poll(cluster: Any, request: Request, session_id: str) -> Response:
    """Wait up to ``long_poll`` real seconds for a message; 202 if none came."""
    try:
        last = int(request.args.get("lastMessageId", 0))
        capacity = int(request.headers.get("X-ScaleSetMaxCapacity", ""))
    except ValueError:
        return _json(400, {"typeName": "ArgumentException",
                           "message": "X-ScaleSetMaxCapacity must be a whole number"})
    deadline = time.monotonic() + cluster.github.spec.long_poll_s
    while True:
        with cluster.lock:
            cluster.sync()
            fake = cluster.github
            if fake.out():                    # an outage began while the poll waited
                fake.log("GET", request.path, 503)
                return _json(503, {"message": "Service Unavailable (simulated outage)"})
            found: list[Any] = []

            def poll(session: Any) -> Any:
                message = fake.next_message(session, last, capacity)
                if message is not None:
                    found.append(fake.message_json(fake.scale_sets[session.scale_set_id], message))
                return message
            status, data = _queue_call(fake, request, session_id, poll)
            remaining = deadline - time.monotonic()
            if status != 204 or remaining <= 0:
                status = 202 if status == 204 else status
                fake.log("GET", request.path, status)
                return _json(status, found[0] if found else data)
            version, wait = fake.version, remaining
            next_at, factor = cluster.next_event_at(), cluster.clock.factor
            if next_at is not None and factor > 0:
                wait = min(wait, max(0.005, (next_at - cluster.clock.now()) / factor))
        with fake.cond:
            if fake.version == version:
                fake.cond.wait(wait)


def _body(request: Request) -> Any:
    data = request.get_data()
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return dict(urllib.parse.parse_qsl(data.decode("latin-1")))


def _json(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    response = Response("" if data is None else json.dumps(data), status=status,
                        mimetype="application/json")
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response
