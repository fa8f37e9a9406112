"""Import every handler module so that their routes are registered."""

from keel.sim.api import access, cluster, extras, guests, ha, nodes, pools, users  # noqa: F401
from keel.sim.api.base import ROUTES

__all__ = ["ROUTES"]
