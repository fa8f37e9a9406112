"""keel-web: the HTTPS gateway the browser panel calls (Flask under gunicorn, port 8443).

Every request to ``/api/...`` is authenticated with the caller's own Proxmox VE
credential (``Authorization: PVEAuthCookie=<ticket>`` or ``PVEAPIToken=...``), checked by
PVE (``keel.pve.access``) and cached at most ``web.auth_cache`` (60 s).  A write made with
a ticket also needs PVE's ``CSRFPreventionToken`` header, checked as pveproxy checks it
(``keel.pve.csrf``, the key ``web.www_key``).  Then a cheap first refusal, which never
refuses what keel-engine would allow on some object:

* ``Sys.Audit`` on ``/`` to read;
* ``VM.Migrate`` on some path to plan, apply and for maintenance (the engine checks each
  guest's ``/vms/<id>``);
* ``Sys.Modify`` on ``/`` to change the config and the runners;
* ``Sys.PowerMgmt`` on some path to sleep or wake a node (the engine checks ``/nodes/<node>``);
* nothing more to cancel a job: the engine allows its owner, or ``Sys.Modify`` on ``/``.

Then it is forwarded to keel-engine's Unix socket with ``X-Keel-User: <user>`` and
``X-Keel-Privileges``: the caller's privileges as PVE answered them (``keel.authz``), for
the engine to decide per object.  keel-web holds no secrets and reads nothing under
``/etc/pve/priv``.  CORS: only the node's own UI origin (``https://<this host>:8006``,
plus ``web.origins``), no credentials mode.  An address whose credentials PVE refused more
than ``FAILURES_FREE`` times a minute is answered 429 at once, without asking PVE.

The two blocking calls, PVE's permission check and the engine's socket, go through
``pve_calls`` and ``engine_calls`` (``keel.web.worker`` runs them in thread pools, so a
slow PVE holds neither a connection's greenlet nor the other requests).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from keel import authz
from keel import config as cfg
from keel.engine.client import EngineClient
from keel.errors import AuthError, KeelError, UnavailableError
from keel.pve import access, csrf
from keel.web import limits
from keel.web.limits import MAX_BODY

log = logging.getLogger("keel.web")
ALLOW_HEADERS = "Authorization, CSRFPreventionToken, Content-Type, X-Requested-With, If-None-Match"
EXPOSE_HEADERS = "ETag"
GZIP_MIN = 512               # answers shorter than this are sent as they are
FIELDS = re.compile(r"^[a-z_]{1,40}(,[a-z_]{1,40}){0,30}$")      # ?fields=cluster,job
ALLOW_METHODS = "GET, POST, PUT, DELETE"
WRITES = frozenset({"POST", "PUT", "DELETE"})
CSRF_REFUSED = "Permission denied - invalid csrf token"          # pveproxy's words
DOCS = Path("/usr/share/doc/pve-keel")                           # where the package puts docs/*.md
WEBHOOK_HEADERS = ("X-Hub-Signature-256", "X-GitHub-Event", "X-GitHub-Delivery")
DELIVERY = re.compile(r"^[A-Za-z0-9-]{1,128}$")                  # GitHub's delivery GUID

Blocking = Callable[..., Any]                                    # run(fn, *args) -> fn(*args)


def _direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


@dataclass(frozen=True)
class Need:
    """What keel-web asks of a caller before forwarding.  ``privilege`` None: any
    authenticated caller (the engine decides); ``path`` None: the privilege on some path."""

    privilege: str | None
    path: str | None = "/"

    def met_by(self, caller: access.Caller) -> bool:
        if self.privilege is None:
            return True
        if self.path is None:
            return caller.anywhere(self.privilege)
        return caller.can(self.privilege, self.path)

    def refusal(self) -> str:
        if self.path is None:
            return f"permission check failed ({self.privilege} on no path: it is needed on the guests to move)"
        return f"permission check failed ({self.path}, {self.privilege})"


# (method, path prefix) -> what is needed; the first match wins.
RULES: tuple[tuple[str, str, Need], ...] = (
    ("GET", "/api/plan", Need("VM.Migrate", None)),
    ("GET", "/api/maintenance/", Need("VM.Migrate", None)),     # a node's evacuation preview
    ("POST", "/api/apply", Need("VM.Migrate", None)),
    ("POST", "/api/maintenance/", Need("VM.Migrate", None)),
    ("POST", "/api/power/nodes/", Need("Sys.PowerMgmt", None)),  # the engine checks /nodes/<node>
    ("DELETE", "/api/jobs/", Need(None)),
    ("PUT", "/api/config", Need("Sys.Modify")),
    ("POST", "/api/config/validate", Need("Sys.Modify")),
    ("POST", "/api/runners", Need("Sys.Modify")),
    ("PUT", "/api/runners", Need("Sys.Modify")),
    ("DELETE", "/api/runners", Need("Sys.Modify")),
    ("GET", "/api/", Need("Sys.Audit")),
)


def required(method: str, path: str) -> Need | None:
    for rule_method, prefix, need in RULES:
        if method == rule_method and path.startswith(prefix):
            return need
    return None


def envelope(status: int, message: str, errors: dict[str, str] | None = None) -> Response:
    response = jsonify({"data": None, "message": message, "errors": errors or {}})
    response.status_code = status
    return response


class Throttled(KeelError):
    """Too many refused credentials from one address: answered 429 at once."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Gate:
    """Credential checks with a short cache; refused credentials counted per address."""

    def __init__(self, pve_url: str, verify: bool | str, cache_s: float, pve_calls: Blocking = _direct,
                 check: Callable[..., access.Caller] = access.check):
        self.pve_url, self.verify, self.cache_s = pve_url, verify, cache_s
        self._run, self._check = pve_calls, check
        self._cache: dict[str, tuple[float, access.Caller]] = {}
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._checking: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()

    def caller(self, authorization: str, address: str) -> access.Caller:
        """The caller, from the cache or from PVE; AuthError, UnavailableError, or Throttled
        for an address over its budget of refusals (PVE is not asked then)."""
        key = hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()
        who = limits.address_key(address)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.cache_s:
                return hit[1]
            self._refuse_if_over(who, key, now)
            self._checking[who].add(key)
        try:
            caller = self._run(self._check, self.pve_url, authorization, self.verify)
        except AuthError:
            self._failed(who)
            raise
        finally:
            with self._lock:
                self._checking[who].discard(key)
                if not self._checking[who]:
                    del self._checking[who]
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (now, caller)
        return caller

    def _refuse_if_over(self, who: str, key: str, now: float) -> None:
        recent = self._failures.get(who)
        while recent and now - recent[0] > limits.FAILURE_WINDOW_S:
            recent.popleft()
        if recent is not None and len(recent) >= limits.FAILURES_FREE:
            wait = limits.FAILURE_WINDOW_S - (now - recent[0])
            raise Throttled(f"too many refused credentials from {who}: try again in {wait:.0f} s", wait)
        checking = self._checking.get(who, set())
        if key not in checking and len(checking) >= limits.CHECKS_PER_ADDRESS:
            raise Throttled(f"too many credentials from {who} being checked at once: try again", 1.0)

    def _failed(self, who: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._failures) > 100_000:        # many addresses: keep only the recent ones
                for stale in [a for a, times in self._failures.items()
                              if not times or now - times[-1] > limits.FAILURE_WINDOW_S]:
                    del self._failures[stale]
            self._failures[who].append(now)


def _pve_verify(config: cfg.Config) -> bool | str:
    settings = config.proxmox
    if settings.ca_file:
        return settings.ca_file
    if settings.verify_tls and cfg.PVE_CA_FILE.exists():
        return str(cfg.PVE_CA_FILE)
    return settings.verify_tls


def _engine_target(path: str, query: bytes) -> str:
    """The path and query for the engine, percent-encoded as ASCII (http.client sends
    nothing else): what the client sent stays as it was, anything else is escaped."""
    target = quote(path, safe="/", errors="surrogateescape")
    if query:
        target += "?" + quote(query, safe="/?&=%+:,;@!$'()*[]~")
    return target


def _fields_arg(query: bytes) -> tuple[bytes, tuple[str, ...] | None]:
    """The query without ``fields=``, and the keys it names (None: all; (): malformed)."""
    if b"fields=" not in query:
        return query, None
    kept, fields = [], None
    for part in query.split(b"&"):
        if part.startswith(b"fields="):
            text = part[len(b"fields="):].decode("ascii", "replace").replace("%2C", ",").replace("%2c", ",")
            fields = tuple(text.split(",")) if FIELDS.match(text) else ()
        elif part:
            kept.append(part)
    return b"&".join(kept), fields


def _cheap(response: Response, fields: tuple[str, ...] | None) -> Response:
    """A read's answer as cheap as it can be sent (docs/ui.md, "What the panels cost"): only
    the ``fields`` asked for, ``304 Not Modified`` for an ``If-None-Match`` naming its ETag,
    and gzip for a client that takes it."""
    raw = response.get_data()
    if response.status_code != 200:
        return response
    if fields:
        try:
            answer = json.loads(raw)
        except ValueError:
            return response
        data = answer.get("data") if isinstance(answer, dict) else None
        if isinstance(data, dict):
            answer["data"] = {key: data[key] for key in fields if key in data}
            raw = json.dumps(answer, separators=(",", ":")).encode()
            response.set_data(raw)
    etag = '"' + hashlib.sha256(raw).hexdigest()[:24] + '"'
    response.headers["ETag"] = etag
    wanted = request.headers.get("If-None-Match", "")
    if etag in (tag.strip() for tag in wanted.split(",")):
        response.status_code = 304
        response.set_data(b"")
        response.headers.pop("Content-Type", None)
        return response
    accepted = request.headers.get("Accept-Encoding", "")
    if len(raw) >= GZIP_MIN and "gzip" in accepted.lower():
        response.set_data(gzip.compress(raw, compresslevel=6, mtime=0))
        response.headers["Content-Encoding"] = "gzip"
    return response


def create_app(config: cfg.Config, harness: Any = None, pve_calls: Blocking = _direct,
               engine_calls: Blocking = _direct) -> Flask:
    """``harness`` (a ``keel.web.harness.Harness``, from ``keel web --harness DIR``) adds the
    standalone web UI page for development and tests; never on in the package.
    ``pve_calls``/``engine_calls`` run the blocking calls to PVE and to keel-engine."""
    app = Flask("keel.web")
    app.url_map.merge_slashes = False     # no redirects: every answer is JSON
    app.url_map.strict_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    gate = Gate(config.proxmox.url, _pve_verify(config), config.web.auth_cache_s, pve_calls)
    csrf_key = csrf.KeyFile(config.web.www_key)
    engine = EngineClient(config.engine.socket)
    extra_origins = set(config.web.origins)

    def to_engine(method: str, target: str, body: bytes | None = None,
                  headers: dict[str, str] | None = None) -> Response:
        try:
            status, ctype, raw = engine_calls(engine.request, method, target, body, headers or {})
        except KeelError as err:
            return envelope(503, err.message)
        return Response(raw, status=status, content_type=ctype or "application/json")

    def allowed_origin(origin: str) -> bool:
        if origin in extra_origins:
            return True
        if harness is not None and origin == request.host_url.rstrip("/"):
            return True                   # the harness page calls its own origin
        host = (request.host or "").rsplit(":", 1)[0].strip("[]")
        try:
            parts = urlsplit(origin)
            return parts.scheme == "https" and parts.hostname == host and parts.port == 8006
        except ValueError:                # a port that is no number: no origin of ours
            return False

    @app.before_request
    def cors_and_auth() -> Response | None:
        origin = request.headers.get("Origin")
        if origin and not allowed_origin(origin):
            return envelope(403, f"origin {origin!r} is not allowed; Keel answers its node's own UI only")
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
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
        response.headers["Vary"] = "Origin, Accept-Encoding"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        """Werkzeug's own refusals (404, 405, 413, a malformed request) in PVE's envelope."""
        status = err.code or 400
        if status == 404:
            return envelope(404, f"no such endpoint: {request.path}")
        if status == 413:
            return envelope(413, f"request body over {MAX_BODY // 1024} KiB")
        response = envelope(status, f"{request.method} {request.path}: {err.name.lower()}")
        if status == 405:
            allowed = err.get_response().headers.get("Allow")
            if allowed:
                response.headers["Allow"] = allowed
        return response

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
        except Throttled as err:
            response = envelope(429, err.message)
            response.headers["Retry-After"] = str(max(1, round(err.retry_after_s)))
            return None, response
        except AuthError as err:
            log.warning("refused credentials from %s: %s", request.remote_addr, err.message)
            return None, envelope(401, err.message)
        except UnavailableError as err:
            return None, envelope(503, err.message)
        if caller.ticket and method in WRITES:
            try:
                secret = pve_calls(csrf_key.secret)
            except UnavailableError as err:
                return None, envelope(503, err.message)
            if not csrf.verify_token(secret, caller.user, request.headers.get("CSRFPreventionToken")):
                log.warning("refused a write by %s from %s without a valid CSRF token",
                            caller.user, request.remote_addr)
                return None, envelope(401, CSRF_REFUSED)
        need = required(method, path)
        if need is None:
            return None, envelope(404, f"no such endpoint: {method} {path}")
        if not need.met_by(caller):
            return None, envelope(403, need.refusal())
        return caller, None

    def identity(caller: access.Caller) -> dict[str, str]:
        """Who is asking, as keel-web verified it, for keel-engine to decide per object."""
        return {authz.HEADER_USER: caller.user, authz.HEADER_PRIVILEGES: authz.encode(caller.tree)}

    @app.route("/api/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
    def forward(rest: str) -> Response:
        path = "/api/" + rest
        caller, refusal = authorise(request.method, path)
        if refusal is not None:
            return refusal
        assert caller is not None
        body = request.get_data() if request.method in ("POST", "PUT") else None
        headers = {**identity(caller), "Accept": "application/json"}
        if body:
            headers["Content-Type"] = "application/json"
        query, fields = request.query_string, None
        if request.method == "GET":
            query, fields = _fields_arg(query)
            if fields == ():
                return envelope(400, "fields: expected top-level keys of the answer, comma separated "
                                     "(fields=cluster,job)", {"fields": "expected key,key,..."})
        response = to_engine(request.method, _engine_target(path, query), body, headers)
        if request.method != "GET":
            log.info("%s %s by %s: %s", request.method, path, caller.user, response.status_code)
            return response
        return _cheap(response, fields)

    @app.post("/webhook")
    def github_webhook() -> Response:
        """GitHub's ``workflow_job`` deliveries for the runners.  No PVE credential: the
        runners check the delivery's HMAC-SHA256 signature against the webhook secret, and
        act on a job's action once (they remember the job's id and action)."""
        delivery = request.headers.get("X-GitHub-Delivery", "")
        if not DELIVERY.match(delivery):
            return envelope(400, "X-GitHub-Delivery: missing or not a delivery id (GitHub sends "
                                 "one with every delivery)", {"X-GitHub-Delivery": "required"})
        headers = {name: request.headers[name] for name in WEBHOOK_HEADERS if name in request.headers}
        headers["Content-Type"] = "application/json"
        return to_engine("POST", "/api/runners/webhook", request.get_data(), headers)

    @app.get("/metrics")
    def metrics() -> Response:
        mode = config.web.metrics
        if mode == "off":
            return envelope(404, "metrics are off (web.metrics)")
        headers = {}
        if mode == "auth":
            caller, refusal = authorise("GET", "/api/metrics")
            if refusal is not None:
                return refusal
            assert caller is not None
            headers = identity(caller)
        return to_engine("GET", "/api/metrics", None, headers)

    if harness is not None:
        from keel.web.harness import blueprint
        app.register_blueprint(blueprint(harness, config.proxmox.url, _pve_verify(config), pve_calls))

    docs = Path(harness.www).parent / "docs" if harness is not None else DOCS

    @app.get("/docs/<name>")
    def doc(name: str) -> Response:
        """Keel's documentation as the package ships it, for the panels' Help buttons: the
        Markdown text (Debian compresses the larger files; served decompressed)."""
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,40}\.md", name):
            return envelope(404, f"no such document: {name[:60]}")
        for candidate in (docs / name, docs / (name + ".gz")):
            if candidate.is_file():
                raw = candidate.read_bytes()
                if candidate.suffix == ".gz":
                    raw = gzip.decompress(raw)
                response = Response(raw, content_type="text/plain; charset=utf-8")
                response.headers["Content-Security-Policy"] = "default-src 'none'"
                return response
        return envelope(404, f"no such document: {name} (in {docs})")

    @app.get("/")
    def index() -> Response:
        return Response("<!doctype html><title>Keel</title><p>Keel's helper answers here. If you opened "
                        "this page to accept its certificate, go back to the Proxmox VE web UI and "
                        "reload it.</p>\n", content_type="text/html; charset=utf-8")

    return app
