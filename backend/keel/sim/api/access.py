"""``/access``: tickets and permissions."""

from __future__ import annotations

from typing import Any

from keel.sim.access import Auth
from keel.sim.api.base import Call, route
from keel.sim.errors import ApiError


@route("GET", "/access")
def index(call: Call) -> list[dict[str, str]]:
    return [{"subdir": s} for s in ("users", "groups", "roles", "acl", "domains", "ticket",
                                   "permissions")]


@route("GET", "/access/ticket")
def ticket_page(call: Call) -> None:
    return None


@route("POST", "/access/ticket")
def ticket(call: Call) -> dict[str, Any]:
    access = call.cluster.access
    user = access.login(call.params["username"], call.params["password"], call.params.get("realm"))
    ticket_value, csrf = access.make_ticket(user.userid)
    auth = Auth(user.userid)
    cap = access.capabilities(auth)
    answer: dict[str, Any] = {"username": user.userid, "ticket": ticket_value,
                              "CSRFPreventionToken": csrf, "cap": cap}
    if access.has(auth, "/", ["Sys.Audit"]):
        answer["clustername"] = call.cluster.scenario.cluster_name
    return answer


@route("GET", "/access/permissions")
def permissions(call: Call) -> dict[str, dict[str, int]]:
    """A user may read its own permissions and its tokens'; others' need Sys.Audit on /access."""
    access = call.cluster.access
    assert call.auth is not None
    wanted = call.params.get("userid") or call.auth.name
    userid, _, token = wanted.partition("!")
    if wanted != call.auth.name and not (token and userid == call.auth.name):
        call.require("/access", ["Sys.Audit"])
    target = Auth(userid, token or None)
    path = call.params.get("path")
    if path:
        return {path: access.privileges(target, path)}
    return access.effective_permissions(target)
