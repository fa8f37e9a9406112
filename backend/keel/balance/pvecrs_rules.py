"""HA rules as PVE's CRS applies them: compiling, bundles, candidates, start placement.

* ``compile_rules``: PVE 9 HA rules (``keel.model.HaRule``) to what the scheduler
  uses, with PVE's feasibility checks (infeasible rules are dropped, with the reason)
  and transforms (connected positive rules merged; negative affinity inherited
  through positive partners; a positive bundle shares its node-affinity rule).
* ``migration_bundles``: for each started HA resource, sorted by sid, its bundle (it
  and its started positive partners, all on one node and none moving; the leader is
  the first sid) and the target nodes: the highest-priority online nodes of its
  node-affinity rule (all online nodes without one), minus nodes that hold a
  negative-affinity partner, minus its current node.
* ``motion_in_progress``: whether any HA resource migrates, relocates or has such a
  command queued (PVE then makes no auto-rebalance decision).
* ``select_service_node``: where PVE starts, recovers or moves a resource.

>>> from keel.model import HaRule
>>> rules = compile_rules([HaRule("keep", "resource-affinity", ("vm:1", "vm:2"),
...                                affinity="positive")], nodes=["a", "b"])
>>> res = {s: HaResourceState(s, "started", "a") for s in ("vm:1", "vm:2", "vm:3")}
>>> migration_bundles(res, rules, online=["a", "b"])
[Bundle(leader='vm:1', resources=('vm:1', 'vm:2'), node='a', targets=('b',)), \
Bundle(leader='vm:3', resources=('vm:3',), node='a', targets=('b',))]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from keel.balance.pvecrs import Migration, MigrationCandidate, ResourceStats
from keel.balance.pvecrs_usage import used_nodes
from keel.model import HaRule


@dataclass(frozen=True)
class HaResourceState:
    """The CRM's view of one HA resource (an entry of ``manager_status.service_status``)."""

    sid: str
    state: str                      # started|migrate|relocate|request_start|stopped|...
    node: str
    target: str | None = None       # during migrate/relocate/request_start_balance
    cmd: str | None = None          # queued command: migrate|relocate|stop
    failed_nodes: tuple[str, ...] = ()
    maintenance_node: str | None = None


@dataclass(frozen=True)
class CompiledRules:
    node_affinity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # sid -> node -> prio
    positive: Mapping[str, frozenset[str]] = field(default_factory=dict)
    negative: Mapping[str, frozenset[str]] = field(default_factory=dict)
    dropped: tuple[tuple[str, str], ...] = ()   # (rule id, why)


@dataclass(frozen=True)
class Bundle:
    """Resources that move together (led by ``leader``) and where they may go."""

    leader: str
    resources: tuple[str, ...]
    node: str
    targets: tuple[str, ...]


def _components(sets: list[tuple[str, frozenset[str]]]) -> list[tuple[list[str], set[str]]]:
    """Group (id, members) by shared members (connected components)."""
    groups: list[tuple[list[str], set[str]]] = []
    for rid, members in sorted(sets, key=lambda s: (min(s[1]) if s[1] else "", s[0])):
        joined = [g for g in groups if g[1] & members]
        ids, union = [rid], set(members)
        for g in joined:
            ids = g[0] + ids
            union |= g[1]
            groups.remove(g)
        groups.append((ids, union))
    return groups


def _feasibility(rules: list[HaRule], nodes: list[str]) -> dict[str, str]:
    """Rule id -> why PVE would drop it."""
    why: dict[str, str] = {}
    node_aff = [r for r in rules if r.type == "node-affinity"]
    res_aff = [r for r in rules if r.type == "resource-affinity"]
    positive = [r for r in res_aff if r.affinity == "positive"]
    negative = [r for r in res_aff if r.affinity == "negative"]
    for sid in {s for r in node_aff for s in r.resources}:
        users = [r for r in node_aff if sid in r.resources]
        if len(users) > 1:
            for r in users:
                why.setdefault(r.rule, f"resource '{sid}' is already used in another node affinity rule")
    for r in res_aff:
        if len(set(r.resources)) < 2:
            why.setdefault(r.rule, "rule is ineffective as there are less than two resources")
    for r in negative:
        if len(set(r.resources)) > len(nodes):
            why.setdefault(r.rule, "rule defines more resources than available nodes")
    groups = _components([(r.rule, frozenset(r.resources)) for r in positive])
    for ids, members in groups:
        for neg in negative:
            if len(members & set(neg.resources)) >= 2:
                why.setdefault(neg.rule, "rule shares two or more resources with a positive rule")
                for rid in ids:
                    why.setdefault(rid, "rule shares two or more resources with a negative rule")
        paired = [n for n in node_aff if members & set(n.resources)]
        if len(paired) > 1:
            for rid in ids:
                why.setdefault(rid, "resources are in multiple node affinity rules")
            for n in paired:
                why.setdefault(n.rule, "resources are also in a positive rule with another node affinity rule")
    for r in res_aff:
        paired = [n for n in node_aff if set(r.resources) & set(n.resources)]
        if any(len(set(n.nodes.values())) > 1 for n in paired):
            why.setdefault(r.rule, "resources are in node affinity rules with multiple priorities")
            for n in paired:
                why.setdefault(n.rule, "resources are in a resource affinity rule")
    for neg in negative:
        located: set[str] = set()
        allowed: set[str] = set()
        paired = []
        for n in node_aff:
            common = set(neg.resources) & set(n.resources)
            if common:
                located |= common
                allowed |= set(n.nodes)
                paired.append(n)
        if len(allowed) < len(located):
            why.setdefault(neg.rule, "resources are restricted to fewer nodes than resources")
            for n in paired:
                why.setdefault(n.rule, "it restricts negative-affinity resources to too few nodes")
    return why


def compile_rules(rules: Iterable[HaRule], nodes: Iterable[str]) -> CompiledRules:
    """Compile enabled rules for the cluster's ``nodes`` (all of them, online or not)."""
    nodes = sorted(nodes)
    enabled = [r for r in rules if not r.disabled]
    why = _feasibility(enabled, nodes)
    kept = [r for r in enabled if r.rule not in why]
    positive_sets = [(ids, members) for ids, members in _components(
        [(r.rule, frozenset(r.resources)) for r in kept
         if r.type == "resource-affinity" and r.affinity == "positive"])]
    negative_sets = [set(r.resources) for r in kept
                     if r.type == "resource-affinity" and r.affinity == "negative"]
    # a positive bundle inherits each member's negative affinity
    for _, members in positive_sets:
        for neg in list(negative_sets):
            inside = members & neg
            if not inside:
                continue
            for other in neg - inside:
                for sid in members - inside:
                    negative_sets.append({sid, other})
    node_rules = [(set(r.resources), dict(r.nodes), r.strict) for r in kept
                  if r.type == "node-affinity"]
    for _, members in positive_sets:
        for resources, _, _ in node_rules:
            if resources & members:
                resources |= members
                break
    node_affinity: dict[str, dict[str, int]] = {}
    for resources, prios, strict in node_rules:
        effective = dict(prios)
        if not strict:
            for node in nodes:
                effective.setdefault(node, -1)
        for sid in resources:
            node_affinity[sid] = effective
    positive: dict[str, set[str]] = {}
    for _, members in positive_sets:
        for sid in members:
            positive.setdefault(sid, set()).update(members - {sid})
    negative: dict[str, set[str]] = {}
    for members in negative_sets:
        for sid in members:
            negative.setdefault(sid, set()).update(members - {sid})
    return CompiledRules({s: dict(v) for s, v in node_affinity.items()},
                         {s: frozenset(v) for s, v in positive.items()},
                         {s: frozenset(v) for s, v in negative.items()},
                         tuple(sorted(why.items())))


def node_affinity(rules: CompiledRules, sid: str,
                  online: Iterable[str]) -> tuple[set[str], set[str]]:
    """(allowed, preferred) online nodes: preferred = the highest priority among allowed."""
    online = set(online)
    prios = rules.node_affinity.get(sid)
    if prios is None:
        return set(online), set(online)
    allowed = {n for n in prios if n in online}
    if not allowed:
        return set(), set()
    top = max(prios[n] for n in allowed)
    return allowed, {n for n in allowed if prios[n] == top}


def resource_affinity(rules: CompiledRules, sid: str, resources: Mapping[str, HaResourceState],
                      online: Iterable[str]) -> tuple[dict[str, int], set[str]]:
    """(together: node -> partners there, separate: nodes holding a negative partner)."""
    online = set(online)
    together: dict[str, int] = {}
    separate: set[str] = set()
    for other in rules.positive.get(sid, ()):
        res = resources.get(other)
        if res is None:
            continue
        current, target = used_nodes(res.state, res.node, res.target, online)
        node = target if target is not None else current   # follow a partner that moves
        if node is not None:
            together[node] = together.get(node, 0) + 1
    for other in rules.negative.get(sid, ()):
        res = resources.get(other)
        if res is None:
            continue
        current, target = used_nodes(res.state, res.node, res.target, online)
        separate.update(n for n in (current, target) if n is not None)
    return together, separate


def motion_in_progress(resources: Mapping[str, HaResourceState]) -> bool:
    return any(r.state in ("migrate", "relocate") or r.cmd in ("migrate", "relocate")
               for r in resources.values())


def active_bundles(resources: Mapping[str, HaResourceState],
                   rules: CompiledRules) -> dict[str, tuple[str, ...]]:
    """Leader -> members, for the started, co-located, stationary positive bundles."""
    bundles: dict[str, tuple[str, ...]] = {}
    for sid in sorted(resources):
        res = resources[sid]
        if res.state != "started":
            continue
        members, nodes, moving = [sid], {res.node}, False
        for other in rules.positive.get(sid, ()):
            partner = resources.get(other)
            if partner is None:
                continue
            if partner.state in ("migrate", "relocate"):
                moving = True
                break
            if partner.state == "started":
                members.append(other)
                nodes.add(partner.node)
        if moving or len(nodes) > 1:
            continue
        members.sort()
        bundles[members[0]] = tuple(members)
    return bundles


def migration_bundles(resources: Mapping[str, HaResourceState], rules: CompiledRules,
                      online: Iterable[str]) -> list[Bundle]:
    """The bundles that may move and their targets, sorted by leader."""
    online = sorted(set(online))
    out = []
    for leader, members in sorted(active_bundles(resources, rules).items()):
        node = resources[leader].node
        _, targets = node_affinity(rules, leader, online)
        _, separate = resource_affinity(rules, leader, resources, online)
        targets -= separate
        targets.discard(node)
        if targets:
            out.append(Bundle(leader, members, node, tuple(sorted(targets))))
    return out


def bundle_candidates(bundles: Iterable[Bundle],
                      stats: Mapping[str, ResourceStats]) -> list[MigrationCandidate]:
    """One candidate per (bundle, target), carrying the members' summed stats.

    >>> one = ResourceStats(1.0, 2.0, 1024, 2048)
    >>> [c.stats.cpu for c in bundle_candidates([Bundle("vm:1", ("vm:1", "vm:2"), "a", ("b",))],
    ...                                         {"vm:1": one, "vm:2": one})]
    [2.0]
    """
    out = []
    for bundle in bundles:
        total = ResourceStats()
        for sid in bundle.resources:
            total = total + stats[sid]
        out.extend(MigrationCandidate(Migration(bundle.leader, bundle.node, target), total)
                   for target in bundle.targets)
    return out


def select_service_node(rules: CompiledRules, sid: str,
                        resources: Mapping[str, HaResourceState], online: Iterable[str],
                        scores: Callable[[], Mapping[str, float]], failback: bool = True,
                        preference: str = "none") -> str | None:
    """The node PVE's ``select_service_node`` picks for ``sid``.

    ``scores`` gives each node's start score, higher is better (TOPSIS, e.g.
    ``score_nodes_to_start``); it is called only when the choice needs it.
    ``preference``: ``none`` (stay if possible), ``best-score``, ``try-next`` (the next
    best node not yet failed on).
    """
    if preference not in ("none", "best-score", "try-next"):
        raise ValueError(f"unknown node preference {preference!r}")
    res = resources[sid]
    current = res.node
    online = set(online)
    allowed, preferred = node_affinity(rules, sid, online)
    if not preferred:
        return None
    together, separate = resource_affinity(rules, sid, resources, online)
    allowed_here = together.get(current) or current not in separate
    if preference == "none" and not failback and current in allowed and allowed_here:
        return current
    if preference == "try-next":
        preferred -= set(res.failed_nodes)
    preferred -= separate
    together = {n: c for n, c in together.items() if n in preferred}
    if together:
        majority = sorted(sorted(together), key=lambda n: -together[n])[0]
        preferred &= {majority}
    if res.maintenance_node is not None and res.maintenance_node in preferred:
        return res.maintenance_node
    if preference == "none" and current in preferred:
        return current
    by_score = scores()
    ranked = sorted(preferred, key=lambda n: (-by_score.get(n, 0.0), n))
    if not ranked:
        return None
    if preference == "try-next":
        found = ranked.index(current) if current in ranked else None
        if found is not None and found < len(ranked) - 1:
            return ranked[found + 1]
    return ranked[0]
