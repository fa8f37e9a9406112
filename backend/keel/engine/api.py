"""Keel's local API (Flask), served by keel-engine on its Unix socket.

Every answer is JSON in Proxmox's envelope: ``{"data": ...}``, or on error
``{"data": null, "message": "...", "errors": {"field": "problem"}}`` with the HTTP status
of the error (400 bad input, 404 unknown, 409 busy or not the leader, 503 PVE
unreachable).  Who asked comes in ``X-Keel-User`` (keel-web puts the PVE user there, the
CLI ``cli:<user>``); the socket is root's and group ``keel``'s only, so that is trusted.
The routes and their schemas are in ``engine.openapi`` (served at ``/api/openapi.json``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Flask, Response, jsonify, request

from keel import config as cfg
from keel.engine import openapi, runners_admin
from keel.engine.core import Engine, NotLeaderError
from keel.errors import AuthError, InvalidError, KeelError, NotFoundError
from keel.units import parse_size
from keel.validate import Problems, Reader

log = logging.getLogger("keel.engine")
MAX_BODY = 1024 * 1024
STATUS_CACHE_S = 1.0


def _status_of(err: KeelError) -> int:
    # PVE refusing Keel's own token is Keel's problem, not the caller's: never a 401/403 here,
    # which keel-web would pass on as if the user's ticket were bad.
    if isinstance(err, AuthError):
        return 502
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
    data = request.get_json(silent=True) if request.data else {}
    if data is None or not isinstance(data, dict):
        raise InvalidError("the request body must be a JSON object")
    problems = Problems("request body")
    return Reader(data, "", problems)


def who() -> str:
    return request.headers.get("X-Keel-User", "").strip()[:200] or "local"


def create_app(engine: Engine) -> Flask:
    app = Flask("keel.engine")
    app.url_map.merge_slashes = False     # no redirects: every answer is JSON
    app.url_map.strict_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    @app.before_request
    def limit() -> Response | None:
        if (request.content_length or 0) > MAX_BODY:      # before reading a byte of it
            return fail(413, f"request body over {MAX_BODY // 1024} KiB")
        return None

    @app.errorhandler(KeelError)
    def keel_error(err: KeelError) -> Response:
        extra = {"leader": err.leader} if isinstance(err, NotLeaderError) else {}
        return fail(_status_of(err), err.message, err.errors, **extra)

    @app.errorhandler(404)
    def not_found(_err: Any) -> Response:
        return fail(404, f"no such endpoint: {request.method} {request.path}")

    @app.errorhandler(405)
    def not_allowed(_err: Any) -> Response:
        return fail(405, f"{request.method} is not allowed on {request.path}")

    @app.errorhandler(413)
    def too_large(_err: Any) -> Response:
        return fail(413, f"request body over {MAX_BODY // 1024} KiB")

    @app.errorhandler(Exception)
    def internal(err: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.path)
        return fail(500, f"internal error ({type(err).__name__}); see the keel-engine log")

    @app.get("/api/openapi.json")
    def spec() -> Response:
        return jsonify(openapi.SPEC)

    cache: dict[str, Any] = {}

    @app.get("/api/status")
    def status() -> Response:
        # Every open UI panel polls this every 3 s: one answer serves all for a second.
        now = time.monotonic()
        if cache.get("at") is None or now - cache["at"] > STATUS_CACHE_S:
            cache["body"], cache["at"] = ok(status_data(engine)).get_data(), now
        return Response(cache["body"], mimetype="application/json")

    @app.get("/api/plan")
    def plan() -> Response:
        method = request.args.get("method")
        if method not in (None, "keel", "bruteforce", "topsis"):
            raise InvalidError(f"method: expected keel, bruteforce or topsis, got {method!r}")
        return ok(engine.plan(method).to_json())

    @app.post("/api/apply")
    def apply() -> Response:
        r = body()
        method = r.choice("method", ("keel", "bruteforce", "topsis"), None)
        r.done()
        r.problems.raise_if_any()
        job = engine.apply(who(), method)
        return ok(job.to_json(), 202)

    @app.get("/api/jobs")
    def jobs() -> Response:
        return ok([j.to_json(since=len(j.events)) for j in engine.jobs.recent()])

    @app.get("/api/jobs/<job_id>")
    def job(job_id: str) -> Response:
        found = engine.jobs.get(job_id)
        if found is None:
            raise NotFoundError(f"no job {job_id!r} (jobs are kept until newer ones replace them)")
        since = request.args.get("since", "0")
        if not since.isdigit():
            raise InvalidError(f"since: expected an event index, got {since!r}")
        return ok(found.to_json(int(since)))

    @app.delete("/api/jobs/<job_id>")
    def cancel(job_id: str) -> Response:
        found = engine.jobs.get(job_id)
        if found is None:
            raise NotFoundError(f"no job {job_id!r}")
        found.cancel(who())
        return ok(found.to_json(len(found.events)))

    @app.get("/api/maintenance")
    def maintenance_list() -> Response:
        return ok(engine.store.maintenance_nodes())

    @app.post("/api/maintenance/<node>")
    def maintenance(node: str) -> Response:
        r = body()
        action = r.choice("action", ("enter", "leave"))
        evacuate = r.get("evacuate", bool, True)
        r.done()
        r.problems.raise_if_any()
        job = engine.maintenance(node, action == "enter", who(), evacuate)
        return ok({"node": node, "maintenance": action == "enter",
                   "job": job.to_json() if job is not None else None}, 202 if job else 200)

    @app.get("/api/history")
    def history() -> Response:
        limit = request.args.get("limit", "50")
        if not limit.isdigit() or not 0 < int(limit) <= 1000:
            raise InvalidError(f"limit: expected 1 to 1000, got {limit!r}")
        return ok({"moves": engine.store.moves(limit=int(limit)),
                   "decisions": engine.store.decisions(limit=int(limit))})

    @app.get("/api/best-node")
    def best() -> Response:
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
        text = _config_text(engine)
        try:
            engine.validate_config(text)
        except InvalidError as err:
            return ok({"valid": False, "message": err.message, "errors": err.errors})
        return ok({"valid": True, "message": "", "errors": {}})

    @app.put("/api/config")
    def config_put() -> Response:
        text = _config_text(engine)
        engine.put_config(text, who())
        return ok({"path": str(engine.config_path), "written": True})

    @app.get("/api/pve/crs")
    def crs() -> Response:
        snap = engine.snapshot()
        c = snap.crs
        return ok({"ha": c.ha, "rebalance_on_start": c.rebalance_on_start, "auto_rebalance": c.auto_rebalance,
                   "threshold": c.auto_rebalance_threshold, "method": c.auto_rebalance_method,
                   "hold_duration": c.auto_rebalance_hold_duration, "margin": c.auto_rebalance_margin,
                   "pve_version": snap.pve_version})

    @app.get("/api/runners")
    def runners() -> Response:
        return ok(engine.runners_status())

    def _runners_part(key: str) -> Response:
        status = engine.runners_status()
        return ok(status.get(key, []))

    @app.get("/api/runners/scale-sets")
    def scale_sets() -> Response:
        return _runners_part("scale_sets")

    @app.get("/api/runners/runners")
    def runner_list() -> Response:
        return _runners_part("runners")

    @app.get("/api/runners/jobs")
    def runner_jobs() -> Response:
        return _runners_part("jobs")

    @app.get("/api/runners/waits")
    def runner_waits() -> Response:
        limit = request.args.get("limit", "100")
        if not limit.isdigit() or not 0 < int(limit) <= runners_admin.WAIT_JOBS_MAX:
            raise InvalidError(f"limit: expected 1 to {runners_admin.WAIT_JOBS_MAX}, got {limit!r}")
        return ok(runners_admin.waits(engine, int(limit)))

    @app.get("/api/runners/settings")
    def runner_settings_get() -> Response:
        return ok(runners_admin.settings_view(engine))

    @app.put("/api/runners/settings")
    def runner_settings_put() -> Response:
        settings, given, based_on = _runner_change()
        return ok(runners_admin.change(engine, settings, given, who(), based_on=based_on))

    @app.post("/api/runners/settings/validate")
    def runner_settings_validate() -> Response:
        settings, given, based_on = _runner_change()
        try:
            return ok(runners_admin.change(engine, settings, given, who(), write=False, based_on=based_on))
        except InvalidError as err:
            return ok({"valid": False, "written": False, "message": err.message, "errors": err.errors})

    @app.put("/api/runners/secrets/<secret_id>")
    def runner_secret_put(secret_id: str) -> Response:
        r = body()
        value = r.get("value", str)
        r.done()
        r.problems.raise_if_any()
        return ok(runners_admin.change(engine, None, {secret_id: value}, who()))

    @app.post("/api/runners/test")
    def runner_test() -> Response:
        r = body()
        r.done()
        r.problems.raise_if_any()
        return ok(runners_admin.test_connection(engine))

    @app.post("/api/runners/webhook")
    def webhook() -> Response:
        """A GitHub ``workflow_job`` delivery, passed on by keel-web: the runners check its
        signature (HMAC-SHA256 with the webhook secret)."""
        running = engine.runners
        if running is None:
            return fail(404 if engine.leader else 409, "the runners do not run on this node"
                        + ("" if engine.leader else f"; {engine.leader_node() or 'no node'} leads"))
        status, text = running[0].handle_webhook(dict(request.headers), request.get_data())
        return ok(text, status) if status < 400 else fail(status, text)

    @app.get("/api/metrics")
    def metrics() -> Response:
        return Response(openapi.metrics_text(engine), mimetype="text/plain; version=0.0.4")

    return app


def _runner_change() -> tuple[dict[str, Any] | None, dict[str, Any], str | None]:
    """``{"settings": {...}, "secrets": {id: value}, "stamp": "..."}``, each optional."""
    r = body()
    settings = r.raw("settings", None)
    given = r.get("secrets", dict, {})
    based_on = r.get("stamp", str, None)
    r.done()
    r.problems.raise_if_any()
    return (None if settings is None else runners_admin.json_body_settings(settings)), given, based_on


def _config_text(engine: Engine) -> str:
    """The whole file (``text``), or the file as it is with its ``balancing`` section
    replaced by a mapping (``balancing``: what the web UI's settings window sends)."""
    r = body()
    text = r.get("text", str, None)
    section = r.get("balancing", dict, None)
    r.done()
    r.problems.raise_if_any()
    if (text is None) == (section is None):
        raise InvalidError("expected text (the whole config file) or balancing (that section alone)")
    if section is not None:
        text = cfg.replace_section(engine.config_path.read_text(), "balancing", section)
    if len(text) > MAX_BODY:
        raise InvalidError("text: the config is too large")
    return text


def _raw_section(text: str, key: str) -> Any:
    import yaml
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return data.get(key) if isinstance(data, dict) else None


def status_data(engine: Engine) -> dict[str, Any]:
    from keel.status_view import summary
    cluster: Any = None
    error = None
    try:
        snap = engine.snapshot()
        cluster = summary(snap)
        cluster.pop("guests", None)
    except KeelError as err:
        error = str(err)
    running = engine.jobs.running()
    return {
        "node": engine.node, "leader": engine.leader, "leader_node": engine.leader_node(),
        "lease_error": engine.lease.error, "started_at": engine.started_at, "time": time.time(),
        "config": {"path": str(engine.config_path), "error": engine.config_error,
                   "balancing_enabled": engine.config.balancing.enable,
                   "method": engine.config.balancing.method,
                   "threshold": engine.config.balancing.threshold,
                   "imbalance_figure": engine.config.balancing.imbalance},
        "last_round": engine.last_round, "job": running.to_json(len(running.events)) if running else None,
        "maintenance": engine.store.maintenance_nodes(),
        "cluster": cluster, "cluster_error": error, "errors": list(engine.errors),
    }
