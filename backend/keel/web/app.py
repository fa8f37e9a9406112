"""keel-web: the HTTPS gateway the browser panel calls (Flask under gunicorn, port 8443).

Every request to ``/api/...`` is authenticated with the caller's own Proxmox VE
credential (``Authorization: PVEAuthCookie=<ticket>`` or ``PVEAPIToken=...``), checked by
PVE (``keel.pve.access``) and cached at most ``web.auth_cache`` (60 s), then authorised:

* ``Sys.Audit`` on ``/`` to read;
* ``VM.Migrate`` on ``/vms`` to plan, apply, cancel and for maintenance;
* ``Sys.Modify`` on ``/`` to change the config and the runners.

Then it is forwarded to keel-engine's Unix socket with ``X-Keel-User: web:<user>``.
keel-web holds no secrets and reads nothing under ``/etc/pve/priv``.  CORS: only the
node's own UI origin (``https://<this host>:8006``, plus ``web.origins``), no credentials
mode.  Refused credentials are answered slowly when they repeat (as PVE does).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import defaultdict, deque
from typing import Any
from urllib.parse import quote, urlsplit

from flask import Flask, Response, jsonify, request

from keel import config as cfg
from keel.engine.client import EngineClient
from keel.errors import AuthError, KeelError, UnavailableError
from keel.pve import access

log = logging.getLogger("keel.web")
MAX_BODY = 1024 * 1024
ALLOW_HEADERS = "Authorization, CSRFPreventionToken, Content-Type, X-Requested-With"
ALLOW_METHODS = "GET, POST, PUT, DELETE"
FAILURES_FREE = 5                 # refused credentials per address per minute before slowing down
MAX_DELAY_S = 3.0

# (method, path prefix) -> (privilege, path); the first match wins.
RULES: tuple[tuple[str, str, str, str], ...] = (
    ("GET", "/api/plan", "VM.Migrate", "/vms"),
    ("POST", "/api/apply", "VM.Migrate", "/vms"),
    ("POST", "/api/maintenance/", "VM.Migrate", "/vms"),
    ("DELETE", "/api/jobs/", "VM.Migrate", "/vms"),
    ("PUT", "/api/config", "Sys.Modify", "/"),
    ("POST", "/api/config/validate", "Sys.Modify", "/"),
    ("POST", "/api/runners", "Sys.Modify", "/"),
    ("PUT", "/api/runners", "Sys.Modify", "/"),
    ("DELETE", "/api/runners", "Sys.Modify", "/"),
    ("GET", "/api/", "Sys.Audit", "/"),
)


def required(method: str, path: str) -> tuple[str, str] | None:
    for rule_method, prefix, privilege, where in RULES:
        if method == rule_method and path.startswith(prefix):
            return privilege, where
    return None


def envelope(status: int, message: str) -> Response:
    response = jsonify({"data": None, "message": message, "errors": {}})
    response.status_code = status
    return response


class Gate:
    """Credential checks with a short cache, and the slow-down for repeated failures."""

    def __init__(self, pve_url: str, verify: bool | str, cache_s: float):
        self.pve_url, self.verify, self.cache_s = pve_url, verify, cache_s
        self._cache: dict[str, tuple[float, access.Caller]] = {}
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def caller(self, authorization: str, address: str) -> access.Caller:
        key = hashlib.sha256(authorization.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.cache_s:
                return hit[1]
        try:
            caller = access.check(self.pve_url, authorization, self.verify)
        except AuthError:
            self._slow_down(address)
            raise
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (now, caller)
        return caller

    def _slow_down(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            recent = self._failures[address]
            recent.append(now)
            while recent and now - recent[0] > 60:
                recent.popleft()
            excess = len(recent) - FAILURES_FREE
        if excess > 0:
            time.sleep(min(MAX_DELAY_S, 0.5 * excess))


def _pve_verify(config: cfg.Config) -> bool | str:
    settings = config.proxmox
    if settings.ca_file:
        return settings.ca_file
    if settings.verify_tls and cfg.PVE_CA_FILE.exists():
        return str(cfg.PVE_CA_FILE)
    return settings.verify_tls


def create_app(config: cfg.Config, harness: Any = None) -> Flask:
    """``harness`` (a ``keel.web.harness.Harness``, from ``keel web --harness DIR``) adds the
    standalone web UI page for development and tests; never on in the package."""
    app = Flask("keel.web")
    app.url_map.merge_slashes = False     # no redirects: every answer is JSON
    app.url_map.strict_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    gate = Gate(config.proxmox.url, _pve_verify(config), config.web.auth_cache_s)
    engine = EngineClient(config.engine.socket)
    extra_origins = set(config.web.origins)

    def allowed_origin(origin: str) -> bool:
        if origin in extra_origins:
            return True
        if harness is not None and origin == request.host_url.rstrip("/"):
            return True                   # the harness page calls its own origin
        host = (request.host or "").rsplit(":", 1)[0].strip("[]")
        parts = urlsplit(origin)
        return parts.scheme == "https" and parts.hostname == host and parts.port == 8006

    @app.before_request
    def cors_and_auth() -> Response | None:
        origin = request.headers.get("Origin")
        if origin and not allowed_origin(origin):
            return envelope(403, f"origin {origin} is not allowed; Keel answers its node's own UI only")
        if (request.content_length or 0) > MAX_BODY:      # before reading a byte of it
            return envelope(413, f"request body over {MAX_BODY // 1024} KiB")
        if request.method == "OPTIONS":
            response = Response(status=204)
            response.headers["Access-Control-Allow-Methods"] = ALLOW_METHODS
            response.headers["Access-Control-Allow-Headers"] = ALLOW_HEADERS
            response.headers["Access-Control-Max-Age"] = "600"
            return response
        return None

    @app.after_request
    def cors_headers(response: Response) -> Response:
        origin = request.headers.get("Origin")
        if origin and allowed_origin(origin):
            response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @app.errorhandler(413)
    def too_large(_err: Any) -> Response:
        return envelope(413, f"request body over {MAX_BODY // 1024} KiB")

    @app.errorhandler(404)
    def not_found(_err: Any) -> Response:
        return envelope(404, f"no such endpoint: {request.path}")

    @app.errorhandler(Exception)
    def internal(err: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.path)
        return envelope(500, f"internal error ({type(err).__name__}); see the keel-web log")

    def authorise(method: str, path: str) -> tuple[access.Caller | None, Response | None]:
        header = request.headers.get("Authorization", "")
        if not header:
            return None, envelope(401, "no credentials: send Authorization: PVEAuthCookie=<ticket> "
                                       "(the PVE web UI does) or PVEAPIToken=...")
        try:
            caller = gate.caller(header, request.remote_addr or "?")
        except AuthError as err:
            log.warning("refused credentials from %s: %s", request.remote_addr, err.message)
            return None, envelope(401, err.message)
        except UnavailableError as err:
            return None, envelope(503, err.message)
        need = required(method, path)
        if need is None:
            return None, envelope(404, f"no such endpoint: {method} {path}")
        privilege, where = need
        if not caller.can(privilege, where):
            return None, envelope(403, f"permission check failed ({where}, {privilege})")
        return caller, None

    @app.route("/api/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
    def forward(rest: str) -> Response:
        path = "/api/" + rest
        caller, refusal = authorise(request.method, path)
        if refusal is not None:
            return refusal
        assert caller is not None
        body = request.get_data() if request.method in ("POST", "PUT") else None
        headers = {"X-Keel-User": f"web:{caller.user}", "Accept": "application/json"}
        if body:
            headers["Content-Type"] = "application/json"
        query = request.query_string.decode()
        try:
            status, ctype, raw = engine.request(request.method, quote(path) + (f"?{query}" if query else ""),
                                                body, headers)
        except KeelError as err:
            return envelope(503, err.message)
        if request.method != "GET":
            log.info("%s %s by %s: %s", request.method, path, caller.user, status)
        return Response(raw, status=status, content_type=ctype or "application/json")

    @app.post("/webhook")
    def github_webhook() -> Response:
        """GitHub's ``workflow_job`` deliveries for the runners.  No PVE credential: the
        runners check the delivery's HMAC-SHA256 signature against the webhook secret."""
        headers = {name: request.headers[name] for name in
                   ("X-Hub-Signature-256", "X-GitHub-Event", "X-GitHub-Delivery") if name in request.headers}
        headers["Content-Type"] = "application/json"
        try:
            status, ctype, raw = engine.request("POST", "/api/runners/webhook", request.get_data(), headers)
        except KeelError as err:
            return envelope(503, err.message)
        return Response(raw, status=status, content_type=ctype or "application/json")

    @app.get("/metrics")
    def metrics() -> Response:
        mode = config.web.metrics
        if mode == "off":
            return envelope(404, "metrics are off (web.metrics)")
        if mode == "auth":
            _, refusal = authorise("GET", "/api/metrics")
            if refusal is not None:
                return refusal
        try:
            status, ctype, raw = engine.request("GET", "/api/metrics")
        except KeelError as err:
            return envelope(503, err.message)
        return Response(raw, status=status, content_type=ctype)

    if harness is not None:
        from keel.web.harness import blueprint
        app.register_blueprint(blueprint(harness, config.proxmox.url, _pve_verify(config)))

    @app.get("/")
    def index() -> Response:
        return Response("<!doctype html><title>Keel</title><p>Keel's helper answers here. If you opened "
                        "this page to accept its certificate, go back to the Proxmox VE web UI and "
                        "reload it.</p>\n", content_type="text/html; charset=utf-8")

    return app
