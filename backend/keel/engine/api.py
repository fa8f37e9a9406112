"""Keel's local API (Flask), served by keel-engine on its Unix socket.

Every answer is JSON in Proxmox's envelope: ``{"data": ...}``, or on error
``{"data": null, "message": "...", "errors": {"field": "problem"}}`` with the HTTP status
of the error (400 bad input, 403 not allowed, 404 unknown, 409 busy or not the leader, 503
PVE unreachable).  The routes and their schemas are in ``engine.openapi`` (served at
``/api/openapi.json``).

Who asks is checked on every request (``engine.peer``): root on the node may do
everything; keel-web passes on the Proxmox VE user it verified and that user's privileges,
and each route checks them per object, as PVE would (docs/security.md, "Who can do what"):

* reading needs ``Sys.Audit`` on ``/``; guests appear only where the user has ``VM.Audit``
  (or ``VM.Migrate``) on ``/vms/<id>``, as in PVE's ``/cluster/resources``;
* a plan, an apply and maintenance need ``VM.Migrate`` on each guest they would move: a
  plan leaves the others where they are and says so, maintenance is refused;
* stopping a job: who started it, or ``Sys.Modify`` on ``/``;
* the config: ``Sys.Modify`` on ``/``, and through keel-web only the ``balancing`` and
  ``runners`` sections, within the limits of ``engine.boundary``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from keel import config as cfg
from keel.authz import Principal
from keel.engine import charts, openapi, peer, redact, views
from keel.engine.api_power import add_power_routes
from keel.engine.api_runners import add_runner_routes
from keel.engine.envelope import (MAX_BODY, body, caller, fail, number_arg, ok, require, require_somewhere,
                                  status_of as _status_of, who)
from keel.engine.core import Engine
from keel.engine.leadership import NotLeaderError
from keel.errors import InvalidError, KeelError, NotFoundError, NotAllowedError
from keel.units import parse_size

log = logging.getLogger("keel.engine")
STATUS_CACHE_S = 1.0
FIRST_READING_WAIT_S = 2.0    # status waits this long, once, for the engine's first reading
# Answered to any peer the socket lets in (root, keel-web) without a user: the document,
# GitHub's deliveries (checked by their signature), and the metrics, which keel-web serves
# without a login when the admin chose web.metrics: open.
OPEN_PATHS = ("/api/openapi.json", "/api/runners/webhook", "/api/metrics")


def create_app(engine: Engine) -> Flask:
    app = Flask("keel.engine")
    app.url_map.merge_slashes = False     # no redirects: every answer is JSON
    app.url_map.strict_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    @app.before_request
    def identify() -> Response | None:
        uid = peer.check_peer(request.environ)
        if (request.content_length or 0) > MAX_BODY:      # before reading a byte of it
            return fail(413, f"request body over {MAX_BODY // 1024} KiB")
        g.principal = None if request.path in OPEN_PATHS else peer.principal(uid, request.headers)
        return None

    @app.errorhandler(KeelError)
    def keel_error(err: KeelError) -> Response:
        extra = {"leader": err.leader} if isinstance(err, NotLeaderError) else {}
        return fail(_status_of(err), err.message, err.errors, **extra)

    @app.errorhandler(RecursionError)
    def too_deep(_err: RecursionError) -> Response:
        return fail(400, "the request is nested too deeply")

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Response:
        status = err.code or 400
        if status == 404:
            return fail(404, f"no such endpoint: {request.method} {request.path}")
        if status == 405:
            return fail(405, f"{request.method} is not allowed on {request.path}")
        if status == 413:
            return fail(413, f"request body over {MAX_BODY // 1024} KiB")
        return fail(status, err.description or err.name)

    @app.errorhandler(Exception)
    def internal(err: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.path)
        return fail(500, f"internal error ({type(err).__name__}); see the keel-engine log")

    @app.get("/api/openapi.json")
    def spec() -> Response:
        return jsonify(openapi.SPEC)

    cache: dict[str, Any] = {}

    def visible(principal: Principal) -> Any:
        """Whether the caller may see a guest: VM.Audit or VM.Migrate on ``/vms/<id>``."""
        if principal.is_root:
            return lambda vmid: True
        snap = engine.snapshot()
        audit = engine.may(principal, "VM.Audit", snap)
        migrate = engine.may(principal, "VM.Migrate", snap)
        return lambda vmid: vmid is None or audit(vmid) or migrate(vmid)

    @app.get("/api/status")
    def status() -> Response:
        # Every open UI panel polls this every 3 s: one answer serves all for a second.
        # It never waits on PVE (status_data); the job in it is shown per caller.
        principal = require("Sys.Audit")
        now = time.monotonic()
        if cache.get("at") is None or now - cache["at"] > STATUS_CACHE_S:
            cache["data"], cache["at"] = status_data(engine), now
        data = cache["data"]
        if data["job"] is not None and not principal.is_root:
            data = {**data, "job": redact.job(data["job"], visible(principal))}
        return ok(data)

    @app.get("/api/plan")
    def plan() -> Response:
        principal = require("Sys.Audit")
        require_somewhere("VM.Migrate")
        method = request.args.get("method")
        if method not in (None, "keel", "bruteforce", "topsis"):
            raise InvalidError(f"method: expected keel, bruteforce or topsis, got {method!r}")
        return ok(redact.plan(engine.plan(method, principal).to_json(), visible(principal)))

    @app.post("/api/apply")
    def apply() -> Response:
        principal = require("Sys.Audit")
        require_somewhere("VM.Migrate")
        r = body()
        method = r.choice("method", ("keel", "bruteforce", "topsis"), None)
        r.done()
        r.problems.raise_if_any()
        job = engine.apply(principal.who(), method, principal)
        return ok(redact.job(job.to_json(), visible(principal)), 202)

    @app.get("/api/jobs")
    def jobs() -> Response:
        principal = require("Sys.Audit")
        see = visible(principal)
        return ok([redact.job(j.to_json(since=len(j.events)), see) for j in engine.jobs.recent()])

    @app.get("/api/jobs/<job_id>")
    def job(job_id: str) -> Response:
        principal = require("Sys.Audit")
        found = engine.jobs.get(job_id)
        if found is None:
            raise NotFoundError(f"no job {job_id!r} (jobs are kept until newer ones replace them)")
        since = number_arg("since", 0, 0, 10**9)
        return ok(redact.job(found.to_json(since), visible(principal)))

    @app.delete("/api/jobs/<job_id>")
    def cancel(job_id: str) -> Response:
        principal = caller()
        found = engine.jobs.get(job_id)
        if found is None:
            raise NotFoundError(f"no job {job_id!r}")
        engine.cancel(found, principal)        # never waits on PVE
        return ok(redact.job(found.to_json(len(found.events)), visible(principal)))

    @app.get("/api/maintenance")
    def maintenance_list() -> Response:
        require("Sys.Audit")
        return ok(engine.store.maintenance_nodes())

    @app.post("/api/maintenance/<node>")
    def maintenance(node: str) -> Response:
        principal = require("Sys.Audit")
        require_somewhere("VM.Migrate")
        r = body()
        action = r.choice("action", ("enter", "leave"))
        evacuate = r.get("evacuate", bool, True)
        r.done()
        r.problems.raise_if_any()
        job = engine.maintenance(node, action == "enter", principal.who(), evacuate, principal)
        return ok({"node": node, "maintenance": action == "enter",
                   "job": redact.job(job.to_json(), visible(principal)) if job is not None else None},
                  202 if job else 200)

    @app.get("/api/maintenance/<node>/preview")
    def maintenance_preview(node: str) -> Response:
        principal = require("Sys.Audit")
        require_somewhere("VM.Migrate")
        preview = views.maintenance_preview(engine, node, principal)
        see = visible(principal)        # parking moves may name guests of other nodes
        return ok({**preview, "moves": redact.moves(preview["moves"], see),
                   "stays": redact.moves(preview["stays"], see)})

    node_charts = charts.NodeCharts(engine)

    @app.get("/api/charts/nodes")
    def chart_nodes() -> Response:
        require("Sys.Audit")
        timeframe = request.args.get("timeframe", "hour")
        if timeframe not in charts.TIMEFRAMES:
            raise InvalidError(f"timeframe: expected hour or day, got {timeframe[:20]!r}")
        return ok(node_charts.get(timeframe))

    @app.get("/api/history")
    def history() -> Response:
        principal = require("Sys.Audit")
        limit = number_arg("limit", 50, 1, 1000)
        return ok({"moves": redact.moves(engine.store.moves(limit=limit), visible(principal)),
                   "decisions": engine.store.decisions(limit=limit), "jobs": engine.store.jobs(limit=20)})

    @app.get("/api/best-node")
    def best() -> Response:
        require("Sys.Audit")
        try:
            cores = float(request.args.get("cores", ""))
        except ValueError:
            raise InvalidError(f"cores: expected a number, got {request.args.get('cores')!r}") from None
        if not 0 < cores <= 1024:
            raise InvalidError(f"cores: expected 0 to 1024, got {cores:g}")
        memory = parse_size(request.args.get("memory", ""), "memory")
        ranked = engine.best_node(cores, memory)
        return ok({"best": ranked[0].node if ranked and ranked[0].fits else None,
                   "nodes": [{"node": p.node, "fits": p.fits, "reason": p.reason,
                              "imbalance_after": None if p.figure_after == float("inf")
                              else round(p.figure_after, 4)} for p in ranked]})

    @app.get("/api/config")
    def config_get() -> Response:
        require("Sys.Audit")
        try:
            text = engine.config_path.read_text()
        except OSError as err:
            text = ""
            engine._error("config", f"cannot read {engine.config_path}: {err.strerror}")
        return ok({"path": str(engine.config_path), "text": text, "error": engine.config_error,
                   "balancing": openapi.balancing_json(engine.config.balancing),
                   "sections": {"balancing": _raw_section(text, "balancing") or {}}})

    @app.post("/api/config/validate")
    def config_validate() -> Response:
        require("Sys.Modify")
        text = _config_text(engine)
        try:
            engine.validate_config(text)
        except InvalidError as err:
            return ok({"valid": False, "message": err.message, "errors": err.errors})
        return ok({"valid": True, "message": "", "errors": {}})

    @app.put("/api/config")
    def config_put() -> Response:
        require("Sys.Modify")
        text = _config_text(engine)
        engine.put_config(text, who())
        return ok({"path": str(engine.config_path), "written": True})

    @app.get("/api/pve/crs")
    def crs() -> Response:
        require("Sys.Audit")
        snap = engine.snapshot()
        c = snap.crs
        return ok({"ha": c.ha, "rebalance_on_start": c.rebalance_on_start, "auto_rebalance": c.auto_rebalance,
                   "threshold": c.auto_rebalance_threshold, "method": c.auto_rebalance_method,
                   "hold_duration": c.auto_rebalance_hold_duration, "margin": c.auto_rebalance_margin,
                   "pve_version": snap.pve_version})

    add_runner_routes(app, engine)
    add_power_routes(app, engine, visible)

    @app.get("/api/metrics")
    def metrics() -> Response:
        return Response(openapi.metrics_text(engine), mimetype="text/plain; version=0.0.4")

    return app


def _config_text(engine: Engine) -> str:
    """The whole file (``text``, root only), or the file as it is with its ``balancing``
    section replaced by a mapping (``balancing``: what the web UI's settings window sends)."""
    r = body()
    text = r.get("text", str, None)
    section = r.get("balancing", dict, None)
    r.done()
    r.problems.raise_if_any()
    if (text is None) == (section is None):
        raise InvalidError("expected text (the whole config file) or balancing (that section alone)")
    if text is not None and not caller().is_root:
        raise NotAllowedError("through keel-web only the balancing and runners sections change; the "
                                    "rest of the config (proxmox, engine, web) is root's: edit "
                                    f"{engine.config_path} on a node")
    if section is not None:
        current = engine.config_path.read_text()
        # the section as it is already (a settings window saved unchanged): the file stays
        # byte for byte, its comments and layout inside the section too
        same = section == _raw_section(current, "balancing")
        text = current if same else cfg.replace_section(current, "balancing", section)
    if len(text) > MAX_BODY:
        raise InvalidError("text: the config is too large")
    return text


def _raw_section(text: str, key: str) -> Any:
    import yaml
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def lease_data(engine: Engine) -> dict[str, Any]:
    """The leader lease as this engine holds it: its term, how old its last renewal is, and
    why it last stopped holding it."""
    lease = engine.lease
    age = lease.age()
    return {"held": lease.held(), "term": lease.term, "age_s": None if age is None else round(age, 2),
            "window_s": lease.window_s, "margin_s": engine.fence.margin_s, "lost_reason": lease.lost_reason,
            "refused_acts": engine.fence.refused}


def status_data(engine: Engine) -> dict[str, Any]:
    """The engine's own state and the cluster as last read: never waits on PVE (a reading
    older than ``engine.status_interval`` is renewed in the background)."""
    from keel.status_view import summary
    cluster: Any = None
    error = None
    every = engine.config.engine.status_interval_s
    snap, age = engine.reading.latest()
    if age is None or age > every:
        engine.reading.refresh(every)
        if snap is None:                  # the first reading since start: worth a short wait
            snap, age = engine.reading.latest(first_wait_s=FIRST_READING_WAIT_S)
    maintenance = engine.store.maintenance_nodes()
    if snap is not None:
        cluster = summary(snap, engine.config.balancing, maintenance)
        cluster.pop("guests", None)
        cluster["age_s"] = round(age or 0.0, 1)
        views.add_model(engine, snap, maintenance, cluster)
    if engine.reading.error is not None:
        error = str(engine.reading.error)
    elif snap is None:
        error = "reading the cluster from Proxmox VE"
    running = engine.jobs.running()
    return {
        "node": engine.node, "leader": engine.leader, "leader_node": engine.leader_node(),
        "lease_error": engine.lease.error, "lease": lease_data(engine), "started_at": engine.started_at,
        "time": time.time(),
        "reconcile": {"pending": engine.reconciler.pending,
                      "last": engine.reconciler.last.line() if engine.reconciler.last else None},
        "config": {"path": str(engine.config_path), "error": engine.config_error,
                   "balancing_enabled": engine.config.balancing.enable,
                   "method": engine.config.balancing.method,
                   "threshold": engine.config.balancing.threshold,
                   "imbalance_figure": engine.config.balancing.imbalance},
        "last_round": engine.last_round, "job": running.to_json(len(running.events)) if running else None,
        "maintenance": maintenance,
        "inputs": views.plan_inputs(engine, maintenance, running),
        "cluster": cluster, "cluster_error": error, "errors": list(engine.errors),
    }
