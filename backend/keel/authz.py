"""Who may do what: a caller's Proxmox VE privileges, evaluated per object as PVE does.

keel-web learns a caller's effective privileges from PVE itself (``GET /access/permissions``
with the caller's own ticket or token): a map *path → {privilege: propagate}*, with the
privileges PVE computed for each path it looked at.  PVE looks at the top levels
(``/``, ``/vms``, ``/storage``, ...), at every path that has an ACL entry and at every pool
member (``/vms/<id>``, ``/storage/<id>``); it leaves out the paths where the caller has
nothing (pve-access-control, ``RPCEnvironment::get_effective_permissions``).

So a path that is not in the map either inherits from the nearest path above it that PVE
looked at (the privileges that propagate from there), or it is a path PVE looked at and
found empty: a ``NoAccess`` entry on ``/vms/110``, a pool that gives nothing.  Telling the
two apart needs the paths PVE looked at: the ACL paths and the pool members (``considered``
below), which keel-engine reads with its own token.  Without them nothing is inherited
into a path that might have its own entry: the check fails closed.

keel-web passes the privileges Keel checks on to keel-engine in ``X-Keel-Privileges``
(``encode``/``decode``) with the verified user in ``X-Keel-User``; the engine decides per
object (``Principal.can``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Collection, Mapping

from keel.errors import InvalidError

# The privileges Keel's doors check (docs/security.md); others are not passed on.  The last
# three guard what runner settings make Keel's token do: clone a template into a pool,
# on a storage.
KEEL_PRIVILEGES = ("Sys.Audit", "Sys.Modify", "VM.Audit", "VM.Migrate", "VM.Clone", "VM.Allocate",
                   "Datastore.AllocateSpace", "Sys.PowerMgmt")
# The paths PVE always looks at for GET /access/permissions.
TOP_PATHS = frozenset({"/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms"})
HEADER_USER = "X-Keel-User"
HEADER_PRIVILEGES = "X-Keel-Privileges"
MAX_ENCODED = 4 * 1024 * 1024

Tree = Mapping[str, Mapping[str, int]]


def normalise(path: str) -> str:
    return "/" + path.strip("/")


def parent(path: str) -> str | None:
    if path == "/":
        return None
    return path.rsplit("/", 1)[0] or "/"


def encode(tree: Tree) -> str:
    """The privileges Keel checks, as one compact line of JSON (ASCII: a header value)."""
    kept = {}
    for path, privileges in tree.items():
        mine = {p: 1 if v else 0 for p, v in privileges.items() if p in KEEL_PRIVILEGES}
        if mine:
            kept[normalise(path)] = dict(sorted(mine.items()))
    return json.dumps(kept, separators=(",", ":"), sort_keys=True, ensure_ascii=True)


def decode(text: str) -> dict[str, dict[str, int]]:
    """``encode``'s output back, or InvalidError if it is not that shape."""
    if len(text) > MAX_ENCODED:
        raise InvalidError(f"{HEADER_PRIVILEGES}: too large")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidError(f"{HEADER_PRIVILEGES}: not JSON") from None
    if not isinstance(data, dict):
        raise InvalidError(f"{HEADER_PRIVILEGES}: expected a map of path to privileges")
    tree: dict[str, dict[str, int]] = {}
    for path, privileges in data.items():
        if not isinstance(path, str) or not path.startswith("/") or not isinstance(privileges, dict):
            raise InvalidError(f"{HEADER_PRIVILEGES}: expected a map of path to privileges")
        if not all(isinstance(p, str) and v in (0, 1) for p, v in privileges.items()):
            raise InvalidError(f"{HEADER_PRIVILEGES}: privileges map to 0 or 1 (propagate)")
        tree[normalise(path)] = {p: int(v) for p, v in privileges.items()}
    return tree


@dataclass(frozen=True)
class Principal:
    """A caller of keel-engine: root on this node (``tree`` None: every privilege), or a
    Proxmox VE user or token whose privileges keel-web verified."""

    user: str
    tree: Tree | None = None
    via_web: bool = False

    @classmethod
    def root(cls, user: str = "root") -> "Principal":
        return cls(user)

    @property
    def is_root(self) -> bool:
        return self.tree is None

    def privileges_on(self, path: str, considered: Collection[str] = ()) -> frozenset[str]:
        """What the caller may do on ``path``; ``considered``: the paths PVE looked at
        besides the top levels (ACL paths, pool members), see the module's doc."""
        if self.tree is None:
            return frozenset(KEEL_PRIVILEGES)
        path = normalise(path)
        found = self.tree.get(path)
        if found is not None:
            return frozenset(found)
        if path in TOP_PATHS or path in considered:
            return frozenset()
        above = parent(path)
        while above is not None:
            found = self.tree.get(above)
            if found is not None:
                return frozenset(p for p, propagate in found.items() if propagate)
            if above in TOP_PATHS or above in considered:
                return frozenset()
            above = parent(above)
        return frozenset()

    def can(self, privilege: str, path: str = "/", considered: Collection[str] = ()) -> bool:
        return privilege in self.privileges_on(path, considered)

    def anywhere(self, privilege: str) -> bool:
        """Has ``privilege`` on some path (a pool, one guest): worth asking per object."""
        return self.tree is None or any(privilege in privs for privs in self.tree.values())

    def who(self) -> str:
        """As history and logs name the caller."""
        return f"web:{self.user}" if self.via_web else self.user
