"""The runners' routes of the engine API (``/api/runners/...``): status, settings and
secrets, the connection test, pause/resume/drain, GitHub's webhook deliveries."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, request

from keel.engine import runners_admin
from keel.engine.envelope import body, fail, number_arg, ok, require, who
from keel.errors import InvalidError
from keel.runners import activity as job_activity


def add_runner_routes(app: Flask, engine: Any) -> None:
    @app.get("/api/runners")
    def runners() -> Response:
        require("Sys.Audit")
        return ok({**engine.runners_status(), "config_error": engine.config_error})

    def _runners_part(key: str) -> Response:
        require("Sys.Audit")
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
        require("Sys.Audit")
        limit = number_arg("limit", 100, 1, runners_admin.WAIT_JOBS_MAX)
        return ok(runners_admin.waits(engine, limit))

    @app.get("/api/runners/activity")
    def runner_activity() -> Response:
        require("Sys.Audit")
        return ok(runners_admin.activity(engine, job_activity.parse_span(request.args.get("span"))))

    @app.get("/api/runners/settings")
    def runner_settings_get() -> Response:
        require("Sys.Audit")
        return ok(runners_admin.settings_view(engine))

    @app.put("/api/runners/settings")
    def runner_settings_put() -> Response:
        principal = require("Sys.Modify")
        settings, given, based_on = _runner_change()
        return ok(runners_admin.change(engine, settings, given, principal, based_on=based_on))

    @app.post("/api/runners/settings/validate")
    def runner_settings_validate() -> Response:
        principal = require("Sys.Modify")
        settings, given, based_on = _runner_change()
        try:
            return ok(runners_admin.change(engine, settings, given, principal, write=False, based_on=based_on))
        except InvalidError as err:
            return ok({"valid": False, "written": False, "message": err.message, "errors": err.errors})

    @app.put("/api/runners/secrets/<secret_id>")
    def runner_secret_put(secret_id: str) -> Response:
        principal = require("Sys.Modify")
        r = body()
        value = r.get("value", str)
        r.done()
        r.problems.raise_if_any()
        return ok(runners_admin.change(engine, None, {secret_id: value}, principal))

    @app.post("/api/runners/test")
    def runner_test() -> Response:
        require("Sys.Modify")
        r = body()
        r.done()
        r.problems.raise_if_any()
        return ok(runners_admin.test_connection(engine))

    @app.post("/api/runners/scale-sets/<name>/<action>")
    def scale_set_control(name: str, action: str) -> Response:
        """Pause, resume or drain a scale set at run time (``keel runners pause``, the tab)."""
        require("Sys.Modify")
        r = body()
        r.done()
        r.problems.raise_if_any()
        return ok(runners_admin.control(engine, name, action, who()))

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


def _runner_change() -> tuple[dict[str, Any] | None, dict[str, Any], str | None]:
    """``{"settings": {...}, "secrets": {id: value}, "stamp": "..."}``, each optional."""
    r = body()
    settings = r.raw("settings", None)
    given = r.get("secrets", dict, {})
    based_on = r.get("stamp", str, None)
    r.done()
    r.problems.raise_if_any()
    return (None if settings is None else runners_admin.json_body_settings(settings)), given, based_on
