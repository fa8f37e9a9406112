"""``/access/users``, ``/access/roles``, ``/access/acl`` and API tokens: what ``keel setup``
(and ``pveum``) use to make a user, a role, a token and their ACL entries.

Permissions as PVE checks them, simplified where only root or an administrator calls:
user and token management needs ``User.Modify`` on ``/access/groups`` (or being that
user, for one's own tokens), roles ``Sys.Modify`` on ``/access``, ACLs
``Permissions.Modify`` on the path.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from keel.sim.access import AclEntry, Token, User, _norm
from keel.sim.api.base import Call, route
from keel.sim.errors import ApiError


def _split(value: Any) -> list[str]:
    return [v for v in str(value or "").replace(";", ",").replace(" ", ",").split(",") if v]


def _changed(call: Call) -> None:
    call.cluster.access.memo.clear()


def _user_admin(call: Call, userid: str | None = None) -> None:
    if userid is not None and call.auth is not None and call.auth.userid == userid and call.auth.tokenid is None:
        return
    call.require("/access/groups", ["User.Modify"])


@route("GET", "/access/users")
def users(call: Call) -> list[dict[str, Any]]:
    access = call.cluster.access
    visible = call.can("/access/groups", ["User.Modify", "Sys.Audit"], any_of=True)
    out = []
    for user in access.users.values():
        if not visible and (call.auth is None or call.auth.userid != user.userid):
            continue
        entry: dict[str, Any] = {"userid": user.userid, "enable": int(user.enable), "expire": user.expire,
                                 "comment": user.comment, "realm-type": user.userid.rsplit("@", 1)[-1]}
        if call.flag("full"):
            entry["tokens"] = [{"tokenid": t.tokenid, "privsep": int(t.privsep), "comment": t.comment,
                                "expire": t.expire} for t in user.tokens.values()]
        out.append(entry)
    return out


@route("POST", "/access/users")
def create_user(call: Call) -> None:
    access = call.cluster.access
    userid = call.params["userid"]
    realm = userid.rsplit("@", 1)[-1]
    call.require(f"/access/realm/{realm}", ["Realm.AllocateUser"])
    call.require("/access/groups", ["User.Modify"])
    if userid in access.users:
        raise ApiError(500, f"create user failed: user '{userid}' already exists")
    access.users[userid] = User(userid, call.params.get("password"), call.flag("enable", True),
                                set(_split(call.params.get("groups"))), {}, call.params.get("comment", ""),
                                int(call.params.get("expire", 0) or 0))
    _changed(call)


@route("GET", "/access/roles")
def roles(call: Call) -> list[dict[str, Any]]:
    from keel.sim.access import BUILTIN_ROLES
    return [{"roleid": name, "privs": ",".join(sorted(privs)), "special": int(name in BUILTIN_ROLES)}
            for name, privs in sorted(call.cluster.access.roles.items())]


@route("GET", "/access/roles/{roleid}")
def role(call: Call) -> dict[str, int]:
    privs = call.cluster.access.roles.get(call.params["roleid"])
    if privs is None:
        raise ApiError(500, f"role '{call.params['roleid']}' does not exist")
    return {priv: 1 for priv in sorted(privs)}


def _privs(call: Call) -> frozenset[str]:
    from keel.sim.access import BUILTIN_ROLES
    known = set().union(*BUILTIN_ROLES.values())
    wanted = set(_split(call.params.get("privs")))
    unknown = sorted(wanted - known)
    if unknown:
        raise ApiError(400, "Parameter verification failed.", {"privs": f"invalid privilege '{unknown[0]}'"})
    return frozenset(wanted)


@route("POST", "/access/roles")
def create_role(call: Call) -> None:
    call.require("/access", ["Sys.Modify"])
    access = call.cluster.access
    roleid = call.params["roleid"]
    if roleid in access.roles:
        raise ApiError(500, f"role '{roleid}' already exists")
    access.roles[roleid] = _privs(call)
    _changed(call)


@route("PUT", "/access/roles/{roleid}")
def update_role(call: Call) -> None:
    from keel.sim.access import BUILTIN_ROLES
    call.require("/access", ["Sys.Modify"])
    access = call.cluster.access
    roleid = call.params["roleid"]
    if roleid not in access.roles:
        raise ApiError(500, f"role '{roleid}' does not exist")
    if roleid in BUILTIN_ROLES:
        raise ApiError(500, f"cannot modify special role '{roleid}'")
    privs = _privs(call)
    access.roles[roleid] = access.roles[roleid] | privs if call.flag("append") else privs
    _changed(call)


def _user(call: Call) -> User:
    user = call.cluster.access.users.get(call.params["userid"])
    if user is None:
        raise ApiError(500, f"no such user ('{call.params['userid']}')")
    return user


@route("GET", "/access/users/{userid}/token")
def tokens(call: Call) -> list[dict[str, Any]]:
    _user_admin(call, call.params["userid"])
    return [{"tokenid": t.tokenid, "privsep": int(t.privsep), "comment": t.comment, "expire": t.expire}
            for t in _user(call).tokens.values()]


@route("POST", "/access/users/{userid}/token/{tokenid}")
def create_token(call: Call) -> dict[str, Any]:
    _user_admin(call, call.params["userid"])
    user = _user(call)
    tokenid = call.params["tokenid"]
    if tokenid in user.tokens:
        raise ApiError(500, "Token already exists.")
    token = Token(tokenid, str(uuid.UUID(bytes=secrets.token_bytes(16))), call.flag("privsep", True),
                  call.params.get("comment", ""), int(call.params.get("expire", 0) or 0))
    user.tokens[tokenid] = token
    _changed(call)
    return {"full-tokenid": f"{user.userid}!{tokenid}", "value": token.secret,
            "info": {"privsep": int(token.privsep), "comment": token.comment, "expire": token.expire}}


@route("DELETE", "/access/users/{userid}/token/{tokenid}")
def delete_token(call: Call) -> None:
    _user_admin(call, call.params["userid"])
    user = _user(call)
    if user.tokens.pop(call.params["tokenid"], None) is None:
        raise ApiError(500, f"no such token '{call.params['tokenid']}' for user '{user.userid}'")
    access = call.cluster.access
    name = f"{user.userid}!{call.params['tokenid']}"
    access.acl = [e for e in access.acl if not (e.kind == "token" and e.ugid == name)]
    _changed(call)


@route("GET", "/access/acl")
def acl(call: Call) -> list[dict[str, Any]]:
    return [{"path": e.path, "ugid": e.ugid, "type": e.kind, "roleid": e.role, "propagate": int(e.propagate)}
            for e in call.cluster.access.acl if call.can(e.path, ["Permissions.Modify"])]


@route("PUT", "/access/acl")
def update_acl(call: Call) -> None:
    access = call.cluster.access
    path = _norm(call.params["path"])
    call.require(path, ["Permissions.Modify"])
    roles = _split(call.params.get("roles"))
    for roleid in roles:
        if roleid not in access.roles:
            raise ApiError(500, f"role '{roleid}' does not exist")
    targets = ([("user", u) for u in _split(call.params.get("users"))]
               + [("token", t) for t in _split(call.params.get("tokens"))]
               + [("group", g) for g in _split(call.params.get("groups"))])
    for kind, ugid in targets:
        if kind == "user" and ugid not in access.users:
            raise ApiError(500, f"user '{ugid}' does not exist")
        if kind == "token":
            userid, _, tokenid = ugid.partition("!")
            if tokenid not in access.users.get(userid, User(userid, None)).tokens:
                raise ApiError(500, f"token '{ugid}' does not exist")
    delete = call.flag("delete")
    propagate = call.flag("propagate", True)
    for kind, ugid in targets:
        for roleid in roles:
            access.acl = [e for e in access.acl
                          if not (e.path == path and e.kind == kind and e.ugid == ugid and e.role == roleid)]
            if not delete:
                access.acl.append(AclEntry(path, ugid, kind, roleid, propagate))
    _changed(call)
