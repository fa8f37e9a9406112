"""Power saving's routes of the engine API (``/api/power...``, docs/power.md): each node's
power state with the energy estimate and the last sleeps and wakes, the consolidation plan
(a dry run), and sleeping, waking or testing the wake of one node, which needs PVE's ``Sys.PowerMgmt`` on
``/nodes/<node>``, as PVE asks for a node's shutdown (docs/security.md)."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, request

from keel.engine import redact
from keel.engine.envelope import body, ok, require
from keel.errors import NotAllowedError


def add_power_routes(app: Flask, engine: Any, visible: Any) -> None:
    def hidden(principal: Any) -> list[str]:
        """The guests the caller may not see, never named in power's free text either."""
        if principal.is_root:
            return []
        return redact.hidden_names(engine.snapshot().guests.values(), visible(principal))

    @app.get("/api/power")
    def power() -> Response:
        principal = require("Sys.Audit")
        return ok(redact.scrub(engine.power.status(), hidden(principal)))

    @app.get("/api/power/plan")
    def power_plan() -> Response:
        principal = require("Sys.Audit")
        # ?node=NODE: that node alone, as `keel power plan --node` and the sleep itself plan it
        # (the web UI's confirmation before Sleep shows it); 404 for a node not in the cluster.
        # &test=1: as its wake test plans it (the wake-test gate set aside)
        node = request.args.get("node") or None
        if node is not None:
            engine.power._known(node)
        test = node is not None and request.args.get("test") in ("1", "true")
        data = redact.plan(engine.power.plan(only=node, max_age_s=0.0, wake_test=not test).to_json(),
                           visible(principal))
        return ok(redact.scrub(data, hidden(principal)))

    @app.post("/api/power/nodes/<node>/<action>")
    def power_node(node: str, action: str) -> Response:
        principal = require("Sys.Audit")
        if action not in ("sleep", "wake", "test"):
            from keel.errors import NotFoundError
            raise NotFoundError(f"no such action {action[:20]!r}: expected sleep, wake or test")
        # the ACL paths too: an entry on /nodes/<node> (NoAccess) is not inherited over
        considered = frozenset() if principal.is_root else engine.considered(engine.snapshot())
        if not principal.can("Sys.PowerMgmt", f"/nodes/{node}", considered):
            raise NotAllowedError(f"permission check failed (/nodes/{node}, Sys.PowerMgmt)")
        r = body()
        r.done()
        r.problems.raise_if_any()
        engine.require_leader()
        reason = f"asked by {principal.who()}"
        if action in ("sleep", "test"):
            job = engine.power.sleep(node, principal.who(), reason, test=action == "test")
        else:
            job = engine.power.wake((node,), principal.who(), reason)
        return ok(redact.job(job.to_json(), visible(principal)), 202)
