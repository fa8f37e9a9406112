"""The simulator's HTTPS front: PVE's wire protocol on ``/api2/json`` (and ``/api2/extjs``),
and a small JSON control API on ``/_sim`` for tests and demos.

A request goes as in pveproxy (docs/simulator.md, "How a request is handled"): wait out
the latency of a matching endpoint fault → run the events due by now → authenticate
(ticket cookie or header, CSRF on writes, or API token; 401) → find the endpoint in the
schema (501 if PVE has none) → refuse an API token on an endpoint PVE keeps for tickets
(403) → check the schema's permissions (403) → refuse if the node it is for is unknown
(500) or down (595) → check parameters against the schema (400) → draw the error of a
matching endpoint fault → refuse writes without quorum (500) → run the handler (501 if
the simulator has none).
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
from keel.sim.httpd import DropConnection

log = logging.getLogger("keel.sim")

API_PREFIXES = {"/api2/json": "json", "/api2/extjs": "extjs"}
# Parameters of writes kept in the request log: what a test needs to follow guests (never secrets).
LOGGED_PARAMS = ("newid", "name", "target", "pool", "full", "storage", "cores", "memory",
                 "command")                # a node's status: shutdown, reboot
UNAUTHENTICATED = {("POST", "/access/ticket"), ("GET", "/access/ticket"), ("GET", "/access/domains")}
# Writes that touch no /etc/pve, so PVE carries them out without quorum too: a node's
# shutdown, a Wake-on-LAN packet (how a cluster that lost quorum gets it back), Ceph flags.
QUORUM_FREE = {("POST", "/nodes/{node}/status"), ("POST", "/nodes/{node}/wakeonlan"),
               ("PUT", "/cluster/ceph/flags/{flag}")}


class SimApp:
    """The WSGI application around one ``Cluster``."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        request.get_data()   # read the whole body, so the connection can be kept alive
        response = self.dispatch(request)
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        path = request.path
        for prefix, fmt in API_PREFIXES.items():
            if path == prefix or path.startswith(prefix + "/"):
                return self.api(request, path[len(prefix):] or "/", fmt)
        if path.startswith("/_sim/") or path == "/_sim":
            return control(self.cluster, request)
        from keel.sim.github import http as github_http
        if github_http.handles(path):
            return github_http.dispatch(self.cluster, request)
        return _json_response(501, {"data": None}, f"Method '{request.method} {path}' not implemented")

    # -- the PVE API -----------------------------------------------------------------

    def api(self, request: Request, path: str, fmt: str) -> Response:
        cluster = self.cluster
        method = request.method.upper()
        delay, reply_delay = self._latency(method, path)
        if delay:
            time.sleep(delay)
        auth: Auth | None = None
        status = 200
        logged: dict[str, Any] = {}
        with cluster.lock:
            cluster.sync()
            if cluster.nodes[cluster.scenario.local_node].power in ("off", "booting"):
                # the node whose pveproxy this is does not run: nothing answers
                cluster.log_request(method, path, None, 0)
                raise DropConnection()
            try:
                auth = self._authenticate(request, method, path)
                endpoint, path_params = cluster.schema.resolve(method, path)
                raw = _raw_params(request, method)
                if method != "GET":
                    logged = {k: raw[k] for k in LOGGED_PARAMS if k in raw}
                for key in path_params:
                    raw[key] = urllib.parse.unquote(path_params[key])
                if _is_token(request) and not endpoint.allow_token:
                    raise ApiError(403, f"Permission check failed (URI '{path}' not available "
                                        f"with API token, need proper ticket.\n)")
                self._check_permissions(Call(cluster, auth, endpoint, raw, path))
                self._check_node(endpoint, raw.get("node"))
                params = endpoint.check_params(raw)
                self._inject_fault(method, path)
                if method != "GET" and (method, endpoint.path) != ("POST", "/access/ticket") \
                        and (method, endpoint.path) not in QUORUM_FREE:
                    cluster.require_quorum()
                handler = ROUTES.get((method, endpoint.path))
                if handler is None:
                    raise ApiError(501, f"Method '{method} {path}' not implemented "
                                        f"(not simulated by keel sim)")
                data = handler(Call(cluster, auth, endpoint, params, path))
            except ApiError as err:
                status = err.status
                error = err
            except Exception:  # a simulator bug: answer as pveproxy would, and say so
                log.exception("internal error in %s %s", method, path)
                status = 500
                error = ApiError(500, "internal error in keel sim (see its log)")
            cluster.log_request(method, path, auth.name if auth else None, status, logged)
        if reply_delay:
            time.sleep(reply_delay)         # done already: a client that gives up meanwhile never hears
        if status == 401 and cluster.auth_delay_s:
            time.sleep(cluster.auth_delay_s)
        if status != 200:
            return _error_response(error, fmt)
        if fmt == "extjs":
            return _json_response(200, {"success": 1, "data": data})
        return _json_response(200, {"data": data})

    def _authenticate(self, request: Request, method: str, path: str) -> Auth | None:
        """pve-manager's auth_handler: a token, else a ticket (and CSRF token on writes).

        Only the login calls go without; a bad credential is one opaque message (PVE logs the
        reason and answers ``Authentication failed!``)."""
        if (method, path.rstrip("/")) in UNAUTHENTICATED:
            return None
        access = self.cluster.access
        header = request.headers.get("Authorization", "")
        ticket = request.cookies.get("PVEAuthCookie")
        if header.startswith("PVEAuthCookie="):
            ticket = header.split("=", 1)[1]
        if not ticket and header.startswith("PVEAPIToken"):
            auth = access.check_token(header[len("PVEAPIToken"):].lstrip("= "))
            if auth is None:
                raise ApiError(401, "Authentication failed!")
            return auth
        if not ticket:
            raise ApiError(401, "No ticket")
        userid = access.check_ticket(urllib.parse.unquote(ticket))
        if userid is None:
            raise ApiError(401, "Authentication failed!")
        if method != "GET" and not access.check_csrf(userid, request.headers.get("CSRFPreventionToken")):
            raise ApiError(401, "Permission denied - invalid csrf token")
        return Auth(userid)

    def _check_permissions(self, call: Call) -> None:
        """RPCEnvironment::check_api2_permissions, with the raw parameters as PVE has them."""
        perms = call.endpoint.permissions
        if call.auth is None:
            if perms.get("user") == "world" or call.endpoint.path == "/access/ticket":
                return
            raise ApiError(403, "Permission check failed (user != null)")
        if call.auth.is_root:
            return
        if not perms:
            raise ApiError(403, "Permission check failed (user != root@pam)")
        if perms.get("user") == "all":
            return
        if "check" in perms:
            ok, failed = _evaluate(call, perms["check"])
            if not ok:
                raise ApiError(403, f"Permission check failed ({failed})" if failed
                               else "Permission check failed")
            return
        raise ApiError(403, "Permission check failed")

    def _check_node(self, endpoint: Any, node: Any) -> None:
        """Calls PVE proxies to another node fail when that node is down (pveproxy's 595)."""
        cluster = self.cluster
        if not endpoint.proxy_to_node or not isinstance(node, str):
            return
        if node not in cluster.nodes:
            raise ApiError(500, f"hostname lookup '{node}' failed - failed to get address info "
                                f"for: {node}: Name or service not known")
        if not cluster.nodes[node].online:
            raise ApiError(595, "No route to host")

    def _latency(self, method: str, path: str) -> tuple[float, float]:
        """How long to wait before handling the request, and before answering it."""
        with self.cluster.lock:
            matching = [f for f in self.cluster.endpoint_faults if _fault_matches(f, method, path)]
        return (max((f.latency_s for f in matching), default=0.0),
                max((f.reply_latency_s for f in matching), default=0.0))

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
    """One of the schema's permission expressions (RPCEnvironment::exec_api2_perm_check).

    Returns (granted, what failed): a failed ``perm`` names the path and the first missing
    privilege (all of them for ``any``); ``or`` and ``require_param`` fail without detail.
    """
    op = check[0]
    if op == "perm":
        template, privs = check[1], check[2]
        options = dict(zip(check[3::2], check[4::2]))
        required = options.get("require_param")
        if required and call.params.get(required) is None:
            return False, ""
        path = template
        for key, value in call.params.items():
            path = path.replace("{" + key + "}", str(value))
        path = "/" + "/".join(p for p in path.split("/") if p)
        any_of = bool(options.get("any"))
        if any_of:
            if call.can(path, privs, any_of=True):
                return True, ""
            return False, f"{path}, {'|'.join(privs)}"
        assert call.auth is not None
        missing = call.cluster.access.missing(call.auth, path, privs)
        return (missing is None), f"{path}, {missing}"
    if op == "and":
        for sub in check[1:]:
            ok, failed = _evaluate(call, sub)
            if not ok:
                return False, failed
        return True, ""
    if op == "or":
        return any(_evaluate(call, sub)[0] for sub in check[1:]), ""
    if op == "userid-param" and check[1:] == ["self"]:
        return call.auth is not None and call.params.get("userid") == call.auth.userid, ""
    return (call.auth is not None and call.auth.is_root), "user != root@pam"


def _is_token(request: Request) -> bool:
    return (request.headers.get("Authorization", "").startswith("PVEAPIToken")
            and not request.cookies.get("PVEAuthCookie"))


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
