"""Import every handler module so that their routes are registered."""

from keel.sim.api import access, ceph, cluster, extras, guests, ha, nodes, pools, power, users  # noqa: F401
from keel.sim.api.base import ROUTES

__all__ = ["ROUTES"]
