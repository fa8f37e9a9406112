"""What every handler gets, and the route registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from keel.sim.access import Auth
from keel.sim.cluster import Cluster
from keel.sim.errors import ApiError
from keel.sim.schema import Endpoint

Handler = Callable[["Call"], Any]
ROUTES: dict[tuple[str, str], Handler] = {}


def route(method: str, path: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        key = (method, path)
        if key in ROUTES:
            raise RuntimeError(f"two handlers for {method} {path}")
        ROUTES[key] = handler
        return handler
    return register


@dataclass
class Call:
    """One API call: the cluster, who asks, and the checked parameters."""

    cluster: Cluster
    auth: Auth | None
    endpoint: Endpoint
    params: dict[str, Any]
    url_path: str = ""          # the path as asked, e.g. /nodes/pve1/qemu/100/config

    @property
    def user(self) -> str:
        """The owner string tasks carry (user@realm or user@realm!token)."""
        return self.auth.name if self.auth else "root@pam"

    def can(self, path: str, privs: list[str] | tuple[str, ...], any_of: bool = False) -> bool:
        """Whether the caller holds ``privs`` on ``path`` (a guest's pool counts by itself)."""
        if self.auth is None:
            return False
        return self.cluster.access.has(self.auth, path, privs, any_of=any_of)

    def require(self, path: str, privs: list[str] | tuple[str, ...], any_of: bool = False) -> None:
        """PVE's ``check``/``check_any``: 403 naming the first missing privilege (or all, any_of)."""
        if self.auth is None:
            raise ApiError(403, "Permission check failed (user != null)")
        if any_of:
            if not self.can(path, privs, any_of=True):
                raise ApiError(403, f"Permission check failed ({path}, {'|'.join(privs)})")
            return
        missing = self.cluster.access.missing(self.auth, path, privs)
        if missing:
            raise ApiError(403, f"Permission check failed ({path}, {missing})")

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.params.get(name)
        return default if value is None else bool(int(value))

    @property
    def t(self) -> float:
        return self.cluster.t
