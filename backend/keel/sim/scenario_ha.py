"""A scenario's ``ha`` section, rules (PVE 9) or groups (PVE 8), and the HA names the
rest of the scenario uses: a guest's ``ha.group``, a rule's resources and nodes."""

from __future__ import annotations

from typing import Any

from keel.sim.scenario_types import RULE_TYPES, Guest, HaGroup, HaRule
from keel.validate import Problems, Reader


def read_rule(r: Reader) -> HaRule:
    kind = r.choice("type", RULE_TYPES)
    rule = HaRule(rule=r.get("rule", str), type=kind or "node-affinity",
                  resources=r.string_list("resources"), nodes=_nodes(r.raw("nodes", "")),
                  strict=r.get("strict", bool, None), affinity=r.get("affinity", str, ""),
                  disable=r.get("disable", bool, False), comment=r.get("comment", str, ""))
    if rule.type == "node-affinity" and not rule.nodes:
        r.problems.add(r.sub("nodes"), "a node-affinity rule needs nodes")
    if rule.type == "resource-affinity" and rule.affinity not in ("positive", "negative"):
        r.problems.add(r.sub("affinity"), "must be positive or negative")
    r.done()
    return rule


def read_group(r: Reader) -> HaGroup:
    group = HaGroup(group=r.get("group", str), nodes=_nodes(r.raw("nodes", "")),
                    restricted=r.get("restricted", bool, False),
                    nofailback=r.get("nofailback", bool, False), comment=r.get("comment", str, ""))
    r.done()
    return group


def _nodes(value: Any) -> str:
    """``pve1:2,pve2`` from that string, a list of names or a mapping of name to priority."""
    if isinstance(value, dict):
        return ",".join(f"{n}:{p}" if p else str(n) for n, p in value.items())
    if isinstance(value, list):
        return ",".join(str(n) for n in value)
    return str(value or "")


def check_names(problems: Problems, major: int, guests: list[Guest], node_names: list[str],
                rules: list[HaRule], groups: list[HaGroup]) -> None:
    """What PVE's HA API would refuse: a rule's resource that is not an HA resource, a node
    that is not in the cluster, a group that does not exist.  A rule's bare vmid becomes
    ``vm:`` or ``ct:`` by the guest's type, as ``ha-manager`` reads it."""
    by_vmid = {g.vmid: g for g in guests}
    ha_sids = {_sid_of(g) for g in guests if g.ha is not None}
    for index, rule in enumerate(rules):
        path = f"ha.rules[{index}]"
        sids = []
        for given in rule.resources:
            guest = by_vmid.get(int(given)) if given.isdigit() else None
            sid = _sid_of(guest) if guest is not None else (f"vm:{given}" if given.isdigit() else given)
            sids.append(sid)
            if sid not in ha_sids:
                kind, _, vmid = sid.partition(":")
                known = by_vmid.get(int(vmid)) if vmid.isdigit() else None
                why = ("is not an HA resource (give the guest `ha`)" if known is not None
                       and _sid_of(known) == sid else "is not a guest of the scenario")
                problems.add(f"{path}.resources", f"{sid} {why}")
        rule.resources = tuple(sids)
        _check_nodes(problems, f"{path}.nodes", rule.nodes, node_names)
    group_names = {g.group for g in groups}
    for index, group in enumerate(groups):
        _check_nodes(problems, f"ha.groups[{index}].nodes", group.nodes, node_names)
    for index, guest in enumerate(guests):
        if guest.ha is None or guest.ha.group is None:
            continue
        path = f"guests[{index}].ha.group"
        if major >= 9:
            problems.add(path, "PVE 9 has no HA groups; use ha.rules (node-affinity)")
        elif guest.ha.group not in group_names:
            problems.add(path, f"no HA group named {guest.ha.group!r}")


def _check_nodes(problems: Problems, path: str, nodes: str, node_names: list[str]) -> None:
    for part in (p.strip() for p in nodes.split(",") if p.strip()):
        name, _, priority = part.partition(":")
        if name not in node_names:
            problems.add(path, f"no node named {name!r}")
        if priority and not priority.isdigit():
            problems.add(path, f"a priority must be a number, got {part!r}")


def _sid_of(guest: Guest) -> str:
    return f"{'vm' if guest.type == 'qemu' else 'ct'}:{guest.vmid}"
