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
    cap: dict[str, dict[str, int]] = {}
    for area, path in (("vms", "/vms"), ("storage", "/storage"), ("access", "/access"),
                       ("nodes", "/nodes"), ("dc", "/"), ("sdn", "/sdn"), ("mapping", "/mapping")):
        privs = access.privileges(auth, path)
        prefix = {"vms": "VM.", "storage": "Datastore.", "nodes": "Sys.", "sdn": "SDN.",
                  "mapping": "Mapping."}.get(area)
        cap[area] = {p: 1 for p in privs if prefix is None or p.startswith(prefix)}
    answer: dict[str, Any] = {"username": user.userid, "ticket": ticket_value,
                              "CSRFPreventionToken": csrf, "cap": cap}
    if access.has(auth, "/", ["Sys.Audit"]):
        answer["clustername"] = call.cluster.scenario.cluster_name
    return answer


@route("GET", "/access/permissions")
def permissions(call: Call) -> dict[str, dict[str, int]]:
    access = call.cluster.access
    assert call.auth is not None
    target = call.auth
    wanted = call.params.get("userid")
    if wanted:
        userid, _, token = wanted.partition("!")
        own = userid == call.auth.userid and (call.auth.tokenid is None or token == call.auth.tokenid)
        if not own and not call.can("/access", ["Sys.Audit"]):
            raise ApiError(403, "Permission check failed (/access, Sys.Audit)")
        if userid not in access.users or (token and token not in access.users[userid].tokens):
            raise ApiError(500, f"no such user ('{wanted}')")
        target = Auth(userid, token or None)
    path = call.params.get("path")
    if path:
        vmid = int(path.split("/")[2]) if path.startswith("/vms/") and path.count("/") == 2 \
            and path.split("/")[2].isdigit() else None
        pool = call.cluster.pool_of(vmid) if vmid is not None else None
        return {path: access.privileges(target, path, pool)}
    result = {}
    for acl_path in access.acl_paths(target):
        privs = access.privileges(target, acl_path)
        if privs:
            result[acl_path] = privs
    return result
