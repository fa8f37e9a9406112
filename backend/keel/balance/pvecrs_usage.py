"""Node usage as PVE's HA manager keeps it for the CRS (``PVE::HA::Usage`` and the crate's
``Usage`` with its aggregators).

A ``ClusterUsage`` holds the online nodes with their base stats and the resources
assigned to them (stationary on one node, or moving and counted on both).  It gives the
node stats the scheduler works on:

* ``static`` mode: nodes start empty; every assigned resource adds its configured size.
* ``dynamic`` mode: the node stats are the measured ones as they are (they already hold
  every running guest); for scoring where to start a resource, resources that are still
  starting add their configured size.

>>> usage = ClusterUsage("static")
>>> usage.add_node("a", maxcpu=8, maxmem=16 * GiB)
>>> usage.add_node("b", maxcpu=8, maxmem=16 * GiB)
>>> usage.add_resource("vm:1", ResourceStats.configured(2, 4 * GiB), current="a", target="b")
>>> [(n.name, n.cpu) for n in usage.balance_nodes()]
[('a', 2.0), ('b', 2.0)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from keel.balance.pvecrs import GiB, Migration, MigrationCandidate, NodeStats, ResourceStats

MODES = ("static", "dynamic")
# CRM service states in which a resource puts load on its current node.
_ON_CURRENT = frozenset(("started", "request_stop", "fence", "freeze", "error", "recovery",
                         "migrate", "relocate"))
_ON_TARGET = frozenset(("migrate", "relocate", "request_start_balance"))

__all__ = ["ClusterUsage", "UsedResource", "used_nodes", "GiB"]


def used_nodes(state: str, node: str | None, target: str | None,
               online: Iterable[str]) -> tuple[str | None, str | None]:
    """The (current, target) online nodes a resource in CRM ``state`` puts load on.

    >>> used_nodes("migrate", "a", "b", {"a", "b"})
    ('a', 'b')
    >>> used_nodes("request_start", "a", None, {"a"})
    (None, None)
    """
    online = set(online)
    if state in ("stopped", "request_start"):
        return None, None
    current = node if state in _ON_CURRENT and node in online else None
    moving_to = target if state in _ON_TARGET and target is not None and target in online else None
    return current, moving_to


@dataclass(frozen=True)
class UsedResource:
    sid: str
    stats: ResourceStats
    running: bool
    current: str
    target: str | None = None

    @property
    def stationary(self) -> bool:
        return self.target is None


class ClusterUsage:
    """The online nodes and the resources on them; see the module docstring."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown CRS mode {mode!r}")
        self.mode = mode
        self._nodes: dict[str, NodeStats] = {}
        self._resources: dict[str, UsedResource] = {}

    # nodes
    def add_node(self, name: str, maxcpu: float, maxmem: float, cpu: float = 0.0,
                 mem: float = 0) -> None:
        if name in self._nodes:
            raise ValueError(f"node '{name}' already exists")
        if self.mode == "static":
            cpu, mem, maxcpu, maxmem = 0.0, 0, int(maxcpu), int(maxmem)
        self._nodes[name] = NodeStats(name, float(cpu), maxcpu, mem, maxmem)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    # resources
    def add_resource(self, sid: str, stats: ResourceStats, current: str,
                     target: str | None = None, running: bool = True) -> None:
        if sid in self._resources:
            raise ValueError(f"resource '{sid}' already exists")
        if current == target:
            raise ValueError(f"resource '{sid}' has the same current and target node")
        if current not in self._nodes or (target is not None and target not in self._nodes):
            raise ValueError(f"nodes for resource '{sid}' do not exist")
        self._resources[sid] = UsedResource(sid, stats, running, current, target)

    def add_ha_resource(self, sid: str, stats: ResourceStats, state: str, node: str | None,
                        target: str | None = None, running_flag: bool = False) -> None:
        """Add an HA resource as PVE's manager does from its service status.

        ``running_flag`` is the CRM's ``running`` mark (set once the LRM reported a
        successful start); only ``started`` resources carry it.
        """
        current, moving_to = used_nodes(state, node, target, self._nodes)
        running = (state == "started" and running_flag) or (state != "started" and current is not None)
        if current is None and moving_to is None:
            return
        if current is None:
            current, moving_to = moving_to, None
        self.add_resource(sid, stats, current, moving_to, running)

    def remove_resource(self, sid: str) -> None:
        self._resources.pop(sid, None)

    def resource(self, sid: str) -> UsedResource | None:
        return self._resources.get(sid)

    # views
    def _with_started(self, include) -> list[NodeStats]:
        out = []
        for name, node in self._nodes.items():
            for res in self._resources.values():
                if name in (res.current, res.target) and include(res):
                    node = node.with_started(res.stats)
            out.append(node)
        return out

    def balance_nodes(self) -> list[NodeStats]:
        """Node stats for the imbalance and the rebalancing choice."""
        if self.mode == "static":
            return self._with_started(lambda res: True)
        return list(self._nodes.values())

    def start_nodes(self) -> list[NodeStats]:
        """Node stats for choosing where to start or recover a resource."""
        if self.mode == "static":
            return self._with_started(lambda res: True)
        return self._with_started(lambda res: not res.running)

    def candidates(self, bundles: Iterable[tuple[str, Iterable[str], Iterable[str]]]
                   ) -> list[MigrationCandidate]:
        """Expand (leader, members, target nodes) into migration candidates.

        Every member must be stationary on the leader's node; the candidate carries the
        members' summed stats, as PVE moves the whole bundle.
        """
        out = []
        for leader, members, targets in bundles:
            lead = self._resources.get(leader)
            if lead is None or not lead.stationary:
                raise ValueError(f"leader '{leader}' is missing or moving")
            total = ResourceStats()
            for sid in members:
                res = self._resources.get(sid)
                if res is None or not res.stationary or res.current != lead.current:
                    raise ValueError(f"resource '{sid}' cannot move with '{leader}'")
                total = total + res.stats
            out.extend(MigrationCandidate(Migration(leader, lead.current, t), total)
                       for t in targets)
        return out

    def stats_by_sid(self) -> Mapping[str, ResourceStats]:
        return {sid: res.stats for sid, res in self._resources.items()}
