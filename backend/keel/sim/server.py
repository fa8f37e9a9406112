"""The simulator's HTTPS front: PVE's wire protocol on ``/api2/json`` (and ``/api2/extjs``),
and a small JSON control API on ``/_sim`` for tests and demos.

A request goes: sync the cluster to now → find the endpoint in the schema (501 if PVE
has none) → authenticate (ticket cookie or header, CSRF on writes, or API token) → check
parameters against the schema (400) → refuse if the node it is for is down (595) or the
cluster has no quorum (writes) → check the schema's permissions (403) → run the handler.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import time
import urllib.parse
from typing import Any, Iterable

from werkzeug.wrappers import Request, Response

from keel.sim.access import Auth
from keel.sim.api.base import Call
from keel.sim.api.handlers import ROUTES
from keel.sim.cluster import Cluster
from keel.sim.control import control
from keel.sim.errors import ApiError

log = logging.getLogger("keel.sim")

API_PREFIXES = {"/api2/json": "json", "/api2/extjs": "extjs"}
UNAUTHENTICATED = {("POST", "/access/ticket"), ("GET", "/access/ticket"), ("GET", "/version")}


class SimApp:
    """The WSGI application around one ``Cluster``."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        response = self.dispatch(request)
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        path = request.path
        for prefix, fmt in API_PREFIXES.items():
            if path == prefix or path.startswith(prefix + "/"):
                return self.api(request, path[len(prefix):] or "/", fmt)
        if path.startswith("/_sim/") or path == "/_sim":
            return control(self.cluster, request)
        return _json_response(501, {"data": None}, f"Method '{request.method} {path}' not implemented")

    # -- the PVE API -----------------------------------------------------------------

    def api(self, request: Request, path: str, fmt: str) -> Response:
        cluster = self.cluster
        method = request.method.upper()
        delay = self._latency(method, path)
        if delay:
            time.sleep(delay)
        auth: Auth | None = None
        status = 200
        try:
            with cluster.lock:
                cluster.sync()
                try:
                    endpoint, path_params = cluster.schema.resolve(method, path)
                    raw = _raw_params(request, method)
                    if (method, endpoint.path) not in UNAUTHENTICATED:
                        auth = self._authenticate(request, method, endpoint.allow_token)
                    elif request.headers.get("Authorization") or request.cookies.get("PVEAuthCookie"):
                        auth = self._authenticate(request, method, True, optional=True)
                    for key in path_params:
                        raw[key] = urllib.parse.unquote(path_params[key])
                    params = endpoint.check_params(raw)
                    self._inject_fault(method, path)
                    node = params.get("node")
                    if endpoint.proxy_to_node and node is not None:
                        if node not in cluster.nodes:
                            raise ApiError(500, f"hostname lookup '{node}' failed - failed to get "
                                                f"address info for: {node}: Name or service not known")
                        if not cluster.nodes[node].online:
                            raise ApiError(595, "No route to host")
                    if method != "GET" and (method, endpoint.path) != ("POST", "/access/ticket"):
                        cluster.require_quorum()
                    call = Call(cluster, auth, endpoint, params)
                    self._check_permissions(call)
                    handler = ROUTES.get((method, endpoint.path))
                    if handler is None:
                        raise ApiError(501, f"Method '{method} {path}' not implemented "
                                            f"(not simulated by keel sim)")
                    data = handler(call)
                except ApiError as err:
                    status = err.status
                    error = err
                except Exception:  # a simulator bug: answer as pveproxy would, and say so
                    log.exception("internal error in %s %s", method, path)
                    status = 500
                    error = ApiError(500, "internal error in keel sim (see its log)")
                cluster.log_request(method, path, auth.name if auth else None, status)
        finally:
            pass
        if status == 401 and cluster.auth_delay_s:
            time.sleep(cluster.auth_delay_s)
        if status != 200:
            return _error_response(error, fmt)
        if fmt == "extjs":
            return _json_response(200, {"success": 1, "data": data})
        return _json_response(200, {"data": data})

    def _authenticate(self, request: Request, method: str, allow_token: bool,
                      optional: bool = False) -> Auth | None:
        access = self.cluster.access
        header = request.headers.get("Authorization", "")
        if header.startswith("PVEAPIToken"):
            value = header[len("PVEAPIToken"):].lstrip("= ")
            auth = access.check_token(value)
            if auth is None:
                raise ApiError(401, "invalid token value!" if "!" in value else "authentication failure")
            if not allow_token:
                raise ApiError(401, "API tokens are not allowed for this endpoint")
            return auth
        ticket = request.cookies.get("PVEAuthCookie")
        if header.startswith("PVEAuthCookie="):
            ticket = header.split("=", 1)[1]
        if not ticket:
            if optional:
                return None
            raise ApiError(401, "No ticket")
        ticket = urllib.parse.unquote(ticket)
        userid = access.check_ticket(ticket)
        if userid is None:
            raise ApiError(401, "permission denied - invalid PVE ticket")
        if method != "GET" and not access.check_csrf(userid, request.headers.get("CSRFPreventionToken")):
            raise ApiError(401, "Permission denied - invalid csrf token")
        return Auth(userid)

    def _check_permissions(self, call: Call) -> None:
        perms = call.endpoint.permissions
        if not perms or perms.get("user") in ("all", "world") and "check" not in perms:
            return
        if "check" in perms and call.auth is not None:
            ok, failed = _evaluate(call, perms["check"])
            if not ok:
                raise ApiError(403, f"Permission check failed ({failed})")
            return
        if perms.get("user") == "world":
            return
        if call.auth is None or not call.auth.is_root:
            raise ApiError(403, "Permission check failed (user != root@pam)")

    def _latency(self, method: str, path: str) -> float:
        with self.cluster.lock:
            delays = [f.latency_s for f in self.cluster.endpoint_faults
                      if f.latency_s and _fault_matches(f, method, path)]
        return max(delays, default=0.0)

    def _inject_fault(self, method: str, path: str) -> None:
        cluster = self.cluster
        for fault in list(cluster.endpoint_faults):
            if not fault.error_rate or not _fault_matches(fault, method, path):
                continue
            if cluster.fault_rng.random() >= fault.error_rate:
                continue
            if fault.count is not None:
                fault.count -= 1
                if fault.count <= 0:
                    cluster.endpoint_faults.remove(fault)
            raise ApiError(fault.status, fault.message)


def _fault_matches(fault: Any, method: str, path: str) -> bool:
    if fault.method and fault.method.upper() != method:
        return False
    return fnmatch.fnmatchcase(path.rstrip("/") or "/", fault.path.rstrip("/") or "/")


def _evaluate(call: Call, check: list[Any]) -> tuple[bool, str]:
    """Evaluate one of the schema's permission expressions."""
    op = check[0]
    if op == "perm":
        template, privs = check[1], check[2]
        options = dict(zip(check[3::2], check[4::2]))
        required = options.get("require_param")
        if required and call.params.get(required) in (None, ""):
            return False, f"{template}, {','.join(privs)}"
        path = template
        for key, value in call.params.items():
            path = path.replace("{" + key + "}", str(value))
        vmid = None
        if path.startswith("/vms/") and path[5:].isdigit():
            vmid = int(path[5:])
        any_of = bool(options.get("any"))
        if call.can(path, privs, any_of=any_of, vmid=vmid):
            return True, ""
        return False, f"{path}, {('|' if any_of else ',').join(privs)}"
    if op in ("and", "or"):
        failures = []
        for sub in check[1:]:
            ok, failed = _evaluate(call, sub)
            if ok and op == "or":
                return True, ""
            if not ok:
                if op == "and":
                    return False, failed
                failures.append(failed)
        return (op == "and"), (failures[0] if failures else "")
    if op == "userid-param" and check[1:] == ["self"]:
        return call.auth is not None and call.params.get("userid") == call.auth.userid, "userid"
    return (call.auth is not None and call.auth.is_root), "user != root@pam"


def _raw_params(request: Request, method: str) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for key in request.args:
        values = request.args.getlist(key)
        raw[key] = values if len(values) > 1 else values[0]
    if method in ("POST", "PUT", "DELETE"):
        if request.mimetype == "application/json":
            body = request.get_json(silent=True)
            if isinstance(body, dict):
                raw.update(body)
            elif request.get_data():
                raise ApiError(400, "Parameter verification failed.", {"body": "invalid JSON"})
        else:
            for key in request.form:
                values = request.form.getlist(key)
                raw[key] = values if len(values) > 1 else values[0]
    return raw


def _reason(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "error"
    return first.encode("latin-1", "replace").decode("latin-1")[:200]


def _json_response(status: int, body: Any, reason: str | None = None) -> Response:
    payload = json.dumps(body, separators=(",", ":"))
    response = Response(payload, mimetype="application/json")
    response.status = f"{status} {reason}" if reason else str(status)
    return response


def _error_response(error: ApiError, fmt: str) -> Response:
    message = error.message if error.message.endswith("\n") else error.message + "\n"
    body: dict[str, Any] = {"data": None, "message": message}
    if error.errors:
        body["errors"] = error.errors
    if fmt == "extjs":
        body["success"] = 0
        body["status"] = error.status
        return _json_response(200, body)
    return _json_response(error.status, body, _reason(error.message))
