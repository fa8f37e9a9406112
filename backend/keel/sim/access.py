"""Users, API tokens, roles and ACLs, and tickets, the way pve-access-control has them.

Privileges for a path come from the most specific ACL entry on the way from ``/`` to
the path (entries above the path count only if they propagate); a user's own entries
beat its groups' at the same level; ``NoAccess`` beats everything; a guest or storage in
a pool also gets the roles set on the pool (never propagating).  A token with privilege
separation gets the intersection of its own and its user's; ``root@pam`` has every
privilege, and so has its token without privilege separation (a privsep token of root's
has its own entries only).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from keel.sim import scenario as sc
from keel.sim.errors import ApiError

TICKET_LIFETIME_S = 7200
CSRF_MIN_AGE_S = -300     # PVE::AccessControl::verify_csrf_prevention_token: -300 < age < lifetime
ROOT = "root@pam"

VM_PRIVS = (
    "VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU",
    "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory",
    "VM.Config.Network", "VM.Config.Options", "VM.Console", "VM.Migrate", "VM.PowerMgmt",
    "VM.Replicate", "VM.Snapshot", "VM.Snapshot.Rollback", "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead", "VM.GuestAgent.FileWrite", "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.Unrestricted",
)
SYS_PRIVS = ("Sys.Audit", "Sys.Console", "Sys.Incoming", "Sys.Modify", "Sys.PowerMgmt",
             "Sys.Syslog", "Sys.AccessNetwork")
DATASTORE_PRIVS = ("Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate",
                   "Datastore.Audit")
OTHER_PRIVS = ("Pool.Allocate", "Pool.Audit", "SDN.Allocate", "SDN.Audit", "SDN.Use",
               "Mapping.Audit", "Mapping.Modify", "Mapping.Use", "Group.Allocate",
               "Realm.Allocate", "Realm.AllocateUser", "User.Modify", "Permissions.Modify")
ALL_PRIVS = frozenset(VM_PRIVS + SYS_PRIVS + DATASTORE_PRIVS + OTHER_PRIVS)

# PVE's built-in roles (pve-access-control), as far as the simulator needs them.
BUILTIN_ROLES: dict[str, frozenset[str]] = {
    "Administrator": ALL_PRIVS,
    "NoAccess": frozenset(),
    "PVEAdmin": ALL_PRIVS - {"Sys.Modify", "Permissions.Modify", "Realm.Allocate"},
    "PVEAuditor": frozenset({"Datastore.Audit", "Mapping.Audit", "Pool.Audit", "SDN.Audit",
                             "Sys.Audit", "VM.Audit", "VM.GuestAgent.Audit"}),
    "PVEVMAdmin": frozenset(VM_PRIVS),
    "PVEVMUser": frozenset({"VM.Audit", "VM.Backup", "VM.Config.CDROM", "VM.Config.Cloudinit",
                            "VM.Console", "VM.PowerMgmt", "VM.GuestAgent.Audit"}),
    "PVETemplateUser": frozenset({"VM.Audit", "VM.Clone"}),
    "PVESysAdmin": frozenset(SYS_PRIVS) | {"Permissions.Modify"},
    "PVEDatastoreAdmin": frozenset(DATASTORE_PRIVS),
    "PVEDatastoreUser": frozenset({"Datastore.AllocateSpace", "Datastore.Audit"}),
    "PVEPoolAdmin": frozenset({"Pool.Allocate", "Pool.Audit"}),
    "PVEPoolUser": frozenset({"Pool.Audit"}),
    "PVESDNUser": frozenset({"SDN.Audit", "SDN.Use"}),
    "PVEMappingUser": frozenset({"Mapping.Audit", "Mapping.Use"}),
    "PVEUserAdmin": frozenset({"Group.Allocate", "Realm.AllocateUser", "User.Modify"}),
}


@dataclass
class Token:
    tokenid: str
    secret: str
    privsep: bool
    comment: str = ""
    expire: int = 0


@dataclass
class User:
    userid: str
    password: str | None
    enable: bool = True
    groups: set[str] = field(default_factory=set)
    tokens: dict[str, Token] = field(default_factory=dict)
    comment: str = ""
    expire: int = 0


@dataclass
class AclEntry:
    path: str
    ugid: str
    kind: str           # user|token|group
    role: str
    propagate: bool


@dataclass(frozen=True)
class Auth:
    """Who made a request: a user, or a user's API token."""

    userid: str
    tokenid: str | None = None

    @property
    def name(self) -> str:
        return f"{self.userid}!{self.tokenid}" if self.tokenid else self.userid

    @property
    def is_root(self) -> bool:
        """root@pam itself (PVE's ``$authuser eq 'root@pam'``): a token of root's is not."""
        return self.userid == ROOT and self.tokenid is None


class Access:
    """The access-control state of a simulated cluster."""

    def __init__(self, users: list[sc.User], roles: dict[str, tuple[str, ...]], acl: list[sc.Acl],
                 www_key: bytes | None = None):
        self.users: dict[str, User] = {}
        for u in users:
            self.users[u.userid] = User(
                u.userid, u.password, u.enable, set(u.groups),
                {t.tokenid: Token(t.tokenid, t.secret, t.privsep, t.comment) for t in u.tokens},
                u.comment)
        self.roles: dict[str, frozenset[str]] = dict(BUILTIN_ROLES)
        for name, privs in roles.items():
            self.roles[name] = frozenset(privs)
        self.acl = [AclEntry(_norm(a.path), a.ugid, a.kind, a.role, a.propagate) for a in acl]
        self._key = os.urandom(32)
        # PVE's CSRF secret: Digest::SHA::hmac_sha256_base64(<pve-www.key>), whose one
        # argument is the key: HMAC-SHA256 keyed with the file over no data, base64 without
        # padding (PVE::AccessControl).  The simulator writes its key file beside its
        # certificate, so keel-web checks these tokens as it checks PVE's.
        self.www_key = www_key if www_key is not None else new_www_key()
        self._csrf_secret = _b64(hmac.new(self.www_key, b"", hashlib.sha256).digest()).encode()
        # Pool membership lives in the cluster, which replaces these with its live view:
        # the pools holding an ACL path (/vms/<vmid>, /storage/<id>), and every member path.
        # Derived figures, valid for one request (the cluster clears it in ``sync``), since
        # users, ACLs and pools may change between requests.
        self.memo: dict[Any, Any] = {}
        self.pools_of: Callable[[str], list[str]] = lambda path: []
        self.pool_member_paths: Callable[[], list[str]] = list

    # -- tickets -------------------------------------------------------------------

    def login(self, username: str, password: str, realm: str | None = None) -> User:
        if realm and "@" not in username:
            username = f"{username}@{realm}"
        user = self.users.get(username)
        if user is not None and user.enable and password.startswith("PVE:"):
            if self.check_ticket(password) == username:
                return user
        if user is None or not user.enable or user.password is None or not hmac.compare_digest(
                user.password.encode(), password.encode()):
            raise ApiError(401, "authentication failure")
        return user

    def make_ticket(self, userid: str) -> tuple[str, str]:
        stamp = f"{int(time.time()):08X}"
        data = f"PVE:{userid}:{stamp}"
        ticket = f"{data}::{self._sign(data)}"
        return ticket, self.make_csrf(userid, stamp)

    def make_csrf(self, userid: str, stamp: str) -> str:
        """PVE::Ticket::assemble_csrf_prevention_token: ``XXXXXXXX:<signature>``."""
        digest = hmac.new(self._csrf_secret, f"{stamp}:{userid}".encode(), hashlib.sha256).digest()
        return f"{stamp}:{_b64(digest)}"

    def check_ticket(self, ticket: str) -> str | None:
        """The userid of a valid, unexpired ticket; None otherwise."""
        try:
            data, signature = ticket.split("::", 1)
            prefix, userid, stamp = data.split(":", 2)
            issued = int(stamp, 16)
        except ValueError:
            return None
        if prefix != "PVE" or not hmac.compare_digest(signature, self._sign(data)):
            return None
        age = time.time() - issued
        if age > TICKET_LIFETIME_S or age < -300:
            return None
        user = self.users.get(userid)
        return userid if user is not None and user.enable else None

    def check_csrf(self, userid: str, token: str | None) -> bool:
        """PVE::Ticket::verify_csrf_prevention_token: eight upper-case hex digits, a colon,
        the signature; fresh while -300 < age < the ticket's lifetime."""
        match = re.fullmatch(r"([A-Z0-9]{8}):(\S+)", token or "")
        if match is None:
            return False
        stamp, signature = match.groups()
        age = time.time() - int(stamp, 16)
        expected = self.make_csrf(userid, stamp).split(":", 1)[1]
        return hmac.compare_digest(signature.encode(), expected.encode()) and \
            CSRF_MIN_AGE_S < age < TICKET_LIFETIME_S

    def check_token(self, header_value: str) -> Auth | None:
        """``user@realm!tokenid=secret`` (or with ``:``) → Auth if the secret matches."""
        if "!" not in header_value:
            return None
        userid, rest = header_value.split("!", 1)
        for sep in ("=", ":"):
            if sep in rest:
                tokenid, secret = rest.split(sep, 1)
                break
        else:
            return None
        user = self.users.get(userid)
        token = user.tokens.get(tokenid) if user else None
        if user is None or token is None or not user.enable:
            return None
        if token.expire and token.expire < time.time():
            return None
        if not hmac.compare_digest(token.secret.encode(), secret.encode()):
            return None
        return Auth(userid, tokenid)

    def _sign(self, data: str) -> str:
        return _b64(hmac.new(self._key, data.encode(), hashlib.sha256).digest())

    # -- privileges ----------------------------------------------------------------

    def privileges(self, auth: Auth, path: str) -> dict[str, int]:
        """Privilege → propagate flag for ``auth`` on ``path`` (RPCEnvironment::permissions)."""
        if auth.is_root:
            return {priv: 1 for priv in sorted(ALL_PRIVS)}
        user = self.users.get(auth.userid)
        if user is None or not user.enable:
            return {}
        path = _norm(path)
        # root@pam has every privilege whatever the ACL says, and so has its token without
        # privilege separation; a privsep token of root@pam has its own entries only.
        root = auth.userid == ROOT
        roles = None if root else self._effective_roles(user, path, None)
        own = None
        if auth.tokenid is not None:
            token = user.tokens.get(auth.tokenid)
            if token is None:
                return {}
            if token.privsep:
                own = self._effective_roles(user, path, auth.tokenid)
        if root and own is None:
            return {priv: 1 for priv in sorted(ALL_PRIVS)}
        # Many paths (every guest under /vms) end with the same roles: expand each set once.
        key = ("privileges", roles, own)
        if key not in self.memo:
            if roles is None:
                assert own is not None
                privs = self._expand(own)
            else:
                privs = self._expand(roles)
                if own is not None:
                    mine = self._expand(own)
                    privs = {p: min(privs[p], mine[p]) for p in mine if p in privs}
            self.memo[key] = dict(sorted(privs.items()))
        return self.memo[key]

    def has(self, auth: Auth, path: str, privs: list[str] | tuple[str, ...],
            any_of: bool = False) -> bool:
        granted = self.privileges(auth, path)
        hits = [p in granted for p in privs]
        return any(hits) if any_of else all(hits)

    def missing(self, auth: Auth, path: str, privs: list[str] | tuple[str, ...]) -> str | None:
        """The first of ``privs`` that ``auth`` lacks on ``path`` (what PVE's 403 names)."""
        granted = self.privileges(auth, path)
        return next((p for p in privs if p not in granted), None)

    def _effective_roles(self, user: User, path: str, token: str | None
                         ) -> tuple[tuple[str, int], ...]:
        """The roles on ``path`` plus those a pool gives its members, as a sorted tuple."""
        roles = self._roles(user, path, token)
        pool_roles: dict[str, int] = {}
        for pool in self.pools_of(path):
            for role in self._roles(user, f"/pool/{pool}", token):
                pool_roles[role] = 0
        if pool_roles and "NoAccess" not in roles:
            if "NoAccess" in pool_roles:
                roles = {"NoAccess": 0}
            else:
                # A pool-derived role never propagates and never overrides an ACL's own.
                roles = {**pool_roles, **roles}
        return tuple(sorted(roles.items()))

    def _expand(self, roles: tuple[tuple[str, int], ...]) -> dict[str, int]:
        privs: dict[str, int] = {}
        for role, propagate in roles:
            for priv in self.roles.get(role, frozenset()):
                privs[priv] = max(privs.get(priv, 0), propagate)
        return privs

    def _roles(self, user: User, path: str, token: str | None) -> dict[str, int]:
        """Role → propagate flag on ``path`` (AccessControl::roles): the most specific entry
        wins; a user's own entries beat its groups'; a token has only its own entries."""
        found = self._found(user, path, token, final=True)
        roles = found if found is not None else self._inherited(user, _parent(path), token)
        if "NoAccess" in roles:
            return {"NoAccess": roles["NoAccess"]}
        return roles

    def _inherited(self, user: User, path: str | None, token: str | None) -> dict[str, int]:
        """What ``path`` and its ancestors pass down (propagating entries only), memoised:
        ten thousand guests under ``/vms`` share one walk up the tree."""
        if path is None:
            return {}
        key = ("inherited", user.userid, token, path)
        if key not in self.memo:
            found = self._found(user, path, token, final=False)
            self.memo[key] = found if found is not None else self._inherited(user, _parent(path), token)
        return self.memo[key]

    def _found(self, user: User, path: str, token: str | None, final: bool) -> dict[str, int] | None:
        """The roles the entries on exactly ``path`` give, or None if none apply."""
        entries = self._acl_by_path().get(path)
        if not entries:
            return None
        if token is not None:
            levels = [{("token", f"{user.userid}!{token}")}]
        else:
            levels = [{("user", user.userid)}, {("group", g) for g in user.groups}]
        for owners in levels:
            found = {e.role: int(e.propagate) for e in entries
                     if (e.kind, e.ugid) in owners and (final or e.propagate)}
            if found:
                return found
        return None

    def _acl_by_path(self) -> dict[str, list[AclEntry]]:
        index = self.memo.get("acl_by_path")
        if index is None:
            index = {}
            for entry in self.acl:
                index.setdefault(entry.path, []).append(entry)
            self.memo["acl_by_path"] = index
        return index

    def effective_permissions(self, auth: Auth) -> dict[str, dict[str, int]]:
        """Every path PVE looks at for ``GET /access/permissions`` without ``path``: the top
        levels, every ACL path, and the paths of pool members; those without privileges left out."""
        paths = {"/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms"}
        paths |= {e.path for e in self.acl} | set(self.pool_member_paths())
        result = {}
        for path in sorted(paths):
            privs = self.privileges(auth, path)
            if privs:
                result[path] = privs
        return result

    def capabilities(self, auth: Auth) -> dict[str, dict[str, int]]:
        """The ``cap`` of a login answer (RPCEnvironment::compute_api_permission)."""
        areas = {"vms": r"VM\.|Permissions\.Modify", "access": r"(User|Group)\.|Permissions\.Modify",
                 "storage": r"Datastore\.|Permissions\.Modify", "nodes": r"Sys\.|Permissions\.Modify",
                 "sdn": r"SDN\.|Permissions\.Modify", "dc": r"Sys\.Audit|Sys\.Modify|SDN\.",
                 "mapping": r"Mapping\.|Permissions.Modify"}
        caps: dict[str, dict[str, int]] = {area: {} for area in areas}
        paths = ["/", "/nodes", "/access/groups", "/vms", "/storage", "/sdn", "/mapping"]
        for path in dict.fromkeys(paths + sorted({e.path for e in self.acl})):
            privs = self.privileges(auth, path)
            top = path.split("/")[1] if path != "/" else "dc"
            if top == "pool":
                for priv in privs:
                    if priv.startswith("VM."):
                        caps["vms"][priv] = 1
                    elif priv.startswith("Datastore."):
                        caps["storage"][priv] = 1
                    elif priv == "Permissions.Modify":
                        caps["storage"][priv] = caps["vms"][priv] = 1
            elif top in areas:
                for priv in privs:
                    if re.match(areas[top], priv):
                        caps[top][priv] = 1
        return {area: dict(sorted(privs.items())) for area, privs in caps.items()}


def new_www_key() -> bytes:
    """A fresh stand-in for /etc/pve/pve-www.key (PVE's is an RSA key; only its bytes count)."""
    return base64.b64encode(os.urandom(48)) + b"\n"


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode().rstrip("=")


def _norm(path: str) -> str:
    path = "/" + path.strip("/")
    return path


def _parent(path: str) -> str | None:
    if path == "/":
        return None
    return path.rsplit("/", 1)[0] or "/"
