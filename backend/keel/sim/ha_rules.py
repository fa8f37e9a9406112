"""Where the HA manager may put a service: node-affinity rules (PVE 9; groups on PVE 8,
read as the rules they become), resource-affinity partners, and the CRS node choice."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keel.sim.cluster import Cluster
    from keel.sim.guests import SimGuest
    from keel.sim.scenario_types import HaRule


def parse_nodes(text: str) -> dict[str, int]:
    """``pve1:2,pve2`` → ``{'pve1': 2, 'pve2': 0}``."""
    result = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        name, _, prio = part.partition(":")
        result[name] = int(prio) if prio else 0
    return result


def normalise_sid(sid: str) -> str:
    return f"vm:{sid}" if str(sid).isdigit() else str(sid)


def rule_entry(rule: "HaRule") -> dict[str, Any]:
    """A scenario rule stored as ``POST /cluster/ha/rules`` stores one: the keys given, and
    ``disable`` only when set (the API drops ``disable=0``; PVE lists no defaults of 0)."""
    entry: dict[str, Any] = {"type": rule.type, "resources": ",".join(rule.resources)}
    if rule.type == "node-affinity":
        entry["nodes"] = rule.nodes
        if rule.strict is not None:
            entry["strict"] = int(rule.strict)
    else:
        entry["affinity"] = rule.affinity
    if rule.disable:
        entry["disable"] = 1
    if rule.comment:
        entry["comment"] = rule.comment
    return entry


def sid_key(sid: str) -> tuple[str, int]:
    kind, _, vmid = sid.partition(":")
    return kind, int(vmid) if vmid.isdigit() else 0


class Placement:
    """The rule-reading half of ``HaManager`` (a mixin: it uses the manager's state)."""

    cluster: "Cluster"
    pve9: bool
    rules: dict[str, dict[str, Any]]
    groups: dict[str, dict[str, Any]]
    resources: dict[str, dict[str, Any]]
    service: dict[str, dict[str, Any]]
    node_status: dict[str, str]
    maintenance: set[str]

    def unavailable(self) -> set[str]: ...

    def effective_rules(self) -> list[dict[str, Any]]:
        """Enabled rules; on PVE 8, groups as the node-affinity rules they become in PVE 9."""
        if self.pve9:
            return [dict(r, rule=name) for name, r in sorted(self.rules.items()) if not r.get("disable")]
        rules = []
        for name, group in sorted(self.groups.items()):
            members = [sid for sid, res in sorted(self.resources.items()) if res.get("group") == name]
            if members:
                rules.append({"rule": f"ha-group-{name}", "type": "node-affinity",
                              "resources": ",".join(members), "nodes": group["nodes"],
                              "strict": group["restricted"]})
        return rules

    def _rules_for(self, sid: str, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.effective_rules() if r["type"] == kind
                and sid in r["resources"].split(",")]

    def _partners(self, sid: str, affinity: str) -> list[str]:
        found = set()
        for rule in self._rules_for(sid, "resource-affinity"):
            if rule.get("affinity") == affinity:
                found.update(s for s in rule["resources"].split(",") if s != sid)
        return sorted(found)

    def _failback(self, sid: str) -> bool:
        if not self.pve9:
            group = self.resources[sid].get("group")
            if group and self.groups.get(group, {}).get("nofailback"):
                return False
        return bool(int(self.resources[sid].get("failback", 1)))

    def allowed_nodes(self, sid: str, online: list[str]) -> list[str]:
        """Nodes the CRM would place ``sid`` on: the best priority class of its rule."""
        rules = self._rules_for(sid, "node-affinity")
        if not rules:
            return online
        nodes = parse_nodes(rules[0]["nodes"])
        candidates = [n for n in online if n in nodes]
        if not candidates:
            return [] if int(rules[0].get("strict", 0)) else online
        best = max(nodes[n] for n in candidates)
        return sorted(n for n in candidates if nodes[n] == best)

    def blocking_resources(self, guest: "SimGuest", node: str) -> list[dict[str, str]]:
        """get_resource_motion_info: negative-affinity partners on (or moving to) ``node``,
        for HA nodes that are online; ignored partners do not count."""
        if not self._routed(guest.sid) or self.node_status.get(node) != "online":
            return []
        blocking = []
        for partner in self._partners(guest.sid, "negative"):
            status = self.service.get(partner)
            if not self._routed(partner) or status is None:
                continue
            if status.get("node") not in (None, node) or status.get("target") not in (None, node):
                continue
            blocking.append({"sid": partner, "cause": "resource-affinity"})
        return blocking

    def dependent_resources(self, guest: "SimGuest") -> list[str] | None:
        """Positive-affinity partners that move along; None when the guest is not HA-managed."""
        if not self._routed(guest.sid):
            return None
        return [p for p in self._partners(guest.sid, "positive") if self._routed(p)]

    def _routed(self, sid: str) -> bool:
        state = self.resources[sid].get("state") if sid in self.resources else None
        return sid in self.resources and state != "ignored"

    def _online_nodes(self) -> list[str]:
        away = self.unavailable()
        return sorted(n for n, node in self.cluster.nodes.items() if node.online and n not in away)

    def select_node(self, sid: str, exclude: set[str] = frozenset()) -> str | None:
        online = [n for n in self._online_nodes() if n not in exclude]
        candidates = self.allowed_nodes(sid, online)
        for partner in self._partners(sid, "negative"):
            other = self.cluster.guests.get(int(partner.split(":")[1]))
            if other is not None:
                candidates = [n for n in candidates if n != other.node]
        if not candidates:
            return None
        mode = self.cluster.crs.get("ha", "basic")

        def score(node: str) -> tuple[float, str]:
            if mode == "basic":
                return (float(sum(1 for s in self.service.values() if s["node"] == node)), node)
            spec = self.cluster.nodes[node].spec
            if mode == "static":
                cpu = sum(self.cluster.guest_maxcpu(g) for g in self.cluster.guests.values()
                          if g.node == node and g.status == "running")
                mem = sum(g.maxmem for g in self.cluster.guests.values()
                          if g.node == node and g.status == "running")
                return ((cpu / spec.cpus + mem / spec.memory) / 2, node)
            cpu_frac, mem = self.cluster.node_usage(node)
            return ((cpu_frac + mem / spec.memory) / 2, node)
        return min(candidates, key=score)
