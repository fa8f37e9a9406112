"""From a snapshot, the config and the history to what may move where: units, the nodes
each may go to, the groups that must stay apart, and what must move now.

A *unit* is what moves as one: a guest, or a bundle of guests that must share a node
(affinity groups, ProxLB/Keel affinity tags, Proxmox HA positive resource-affinity).
"May it move" is decided here and only here; the planner chooses among what this
module allows.  Every guest left alone gets a reason; contradictory rules are reported
as conflicts and the guests concerned stay put.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from keel import words
from keel.balance.history import History
from keel.balance.settings import BalancingSettings
from keel.balance.tags import read_tags
from keel.model import Guest, Snapshot
from keel.balance.plan import Skip


@dataclass
class Unit:
    key: str                          # "vm:100", or "group:<name>" for a bundle
    guests: list[Guest]
    node: str                         # where it is (a split bundle: where most of it is)
    allowed: set[str]                 # nodes it may go to (all eligible nodes if unrestricted)
    mandatory: str | None = None      # words.MAINTENANCE / words.RULE: must move now
    mandatory_detail: str = ""
    balance: bool = True              # may move to even out load (not cooling, running, ...)
    avoid: set[str] = field(default_factory=set)   # nodes it left recently (ping-pong)
    anchor: str | None = None         # a member that cannot move holds the bundle here
    soft_away: set[str] = field(default_factory=set)  # soft rules prefer it not to be there

    @property
    def vmids(self) -> list[int]:
        return [g.vmid for g in self.guests]

    @property
    def name(self) -> str:
        return self.guests[0].name if len(self.guests) == 1 else self.key.split(":", 1)[1]

    @property
    def split(self) -> bool:
        return len({g.node for g in self.guests}) > 1


@dataclass
class Constraints:
    units: list[Unit]
    anti_groups: list[tuple[str, set[str]]]      # (name, unit keys), at most one per node
    eligible: set[str]                           # nodes that may receive guests
    maintenance: set[str]
    fixed: list[Guest]                           # guests that stay (they still count as load)
    skipped: list[Skip]
    conflicts: list[str]
    notices: list[str]


def eligible_nodes(snapshot: Snapshot, settings: BalancingSettings, maintenance: set[str]) -> set[str]:
    """The nodes that may receive guests: online, not in maintenance (the settings', the
    given ones, PVE's HA maintenance) and not ignored."""
    ha_maint = {n.name for n in snapshot.nodes.values() if n.in_maintenance}
    online = {n.name for n in snapshot.nodes.values() if n.online}
    return online - set(settings.maintenance) - maintenance - ha_maint - set(settings.ignore.nodes)


def compile_rules(snapshot: Snapshot, settings: BalancingSettings, history: History,
                  now: float, may_move: Callable[[Guest], bool] | None = None) -> Constraints:
    skipped: list[Skip] = []
    conflicts: list[str] = []
    notices: list[str] = []
    ha_maint = {n.name for n in snapshot.nodes.values() if n.in_maintenance}
    maintenance = set(settings.maintenance) | set(history.maintenance) | ha_maint
    unknown = sorted((set(settings.maintenance) | set(history.maintenance)) - set(snapshot.nodes))
    if unknown:
        conflicts.append(f"maintenance names unknown nodes: {', '.join(unknown)}")
    eligible = eligible_nodes(snapshot, settings, set(history.maintenance))
    pve_rebalances = snapshot.crs.auto_rebalance and snapshot.crs.ha in ("static", "dynamic")
    if pve_rebalances:
        notices.append("Proxmox's own HA auto-rebalance is on: Keel leaves HA guests to it "
                       "and balances the others.")

    names = {g.name: g.vmid for g in snapshot.guests.values()}
    pin_nodes = _config_pins(settings, names)
    movable: dict[int, Guest] = {}
    fixed: list[Guest] = []
    counts = {words.STOPPED: 0, words.TEMPLATE: 0}
    for guest in snapshot.guests.values():
        reason = _why_fixed(guest, snapshot, settings, history, now, pve_rebalances,
                            guest.node in maintenance)
        if reason is None and may_move is not None and not may_move(guest):
            reason = words.NOT_PERMITTED, f"you may not migrate it (no VM.Migrate on /vms/{guest.vmid})"
        if reason is None:
            movable[guest.vmid] = guest
            continue
        fixed.append(guest)
        word, detail = reason
        if word in counts:
            counts[word] += 1
        else:
            skipped.append(Skip(word, detail, guest.vmid, guest.name))
        if guest.node in maintenance and word not in (words.TEMPLATE, words.NODE_DOWN):
            notices.append(f"{guest.name} ({guest.vmid}) stays on {guest.node}, which is in "
                           f"maintenance: {detail}")
    if counts[words.STOPPED]:
        notices.append(f"{counts[words.STOPPED]} stopped guests carry no load and are not balanced")

    groups = _groups(snapshot, settings)
    units = _bundle(movable, fixed, groups["affinity"], conflicts, skipped)
    by_vmid = {vmid: unit for unit in units for vmid in unit.vmids}

    for unit in units:
        allowed = set(eligible) if unit.anchor is None else {unit.anchor} & eligible
        for guest in unit.guests:
            allowed &= _allowed_for(guest, snapshot, settings, pin_nodes, eligible, groups["pools"])
        unit.allowed = allowed
        unit.avoid = set().union(*(history.left_recently(g.vmid, now) for g in unit.guests))
        if not allowed:
            conflicts.append(f"{unit.name}: its pins and rules leave no node it may run on")
        cooling = [g for g in unit.guests if history.cooling(g.vmid, now, settings.cooldown_s)]
        if cooling:
            unit.balance = False
            # each guest by its own name (a bundle's name is its group's, or an HA rule's)
            for guest in cooling:
                skipped.append(Skip(words.COOLDOWN, "moved recently" if len(unit.guests) == 1 else
                                    f"moved recently (it moves with {unit.name})", guest.vmid, guest.name))
        if any(not g.running for g in unit.guests):
            unit.balance = False

    anti_groups = []
    for name, vmids in groups["anti"].items():
        for unit in units:
            inside = [g for g in unit.guests if g.vmid in vmids]
            if len(inside) > 1:
                conflicts.append(f"{', '.join(g.name for g in inside)} must share a node (affinity "
                                 f"{unit.name}) and must not (anti-affinity {name.split(':', 1)[-1]})")
                unit.allowed, unit.balance = set(), False
                for guest in unit.guests:
                    skipped.append(Skip(words.CONFLICT, "affinity and anti-affinity contradict each other",
                                        guest.vmid, guest.name))
        keys = {by_vmid[v].key for v in vmids if v in by_vmid}
        # members that stay where they are (fixed, or left out over a conflict) hold their node
        fixed_nodes = {snapshot.guests[v].node for v in vmids if v not in by_vmid and v in snapshot.guests}
        for unit in units:
            if unit.key in keys:
                unit.allowed -= fixed_nodes
        if len(keys) + len(fixed_nodes) > len(eligible | fixed_nodes):
            conflicts.append(f"anti-affinity {name}: {len(vmids)} guests but only "
                             f"{len(eligible)} nodes to spread them over")
        if len(keys) > 1:
            anti_groups.append((name, keys))
    for name, vmids in groups["soft_anti"].items():
        for vmid in vmids:
            unit = by_vmid.get(vmid)
            if unit is not None:
                others = {snapshot.guests[v].node for v in vmids if v != vmid and v in snapshot.guests}
                unit.soft_away |= others

    _mandatory(units, anti_groups, maintenance)
    return Constraints(units, anti_groups, eligible, maintenance, fixed, skipped, conflicts, notices)


def _why_fixed(guest: Guest, snapshot: Snapshot, settings: BalancingSettings, history: History,
               now: float, pve_rebalances: bool, on_maintenance: bool) -> tuple[str, str] | None:
    node = snapshot.nodes.get(guest.node)
    tags = read_tags(guest.tags) if settings.use_tags else None
    if node is None or not node.online:
        return words.NODE_DOWN, f"its node {guest.node} is down"
    if guest.template:
        return words.TEMPLATE, "templates are never moved"
    if tags is not None and tags.runner:
        return words.RUNNER, "runner VMs are never moved"
    if guest.lock:
        return words.LOCKED, f"locked ({guest.lock})"
    ign = settings.ignore
    if (str(guest.vmid) in ign.guests or guest.name in ign.guests or guest.node in ign.nodes
            or (guest.pool is not None and guest.pool in ign.pools)
            or any(t in ign.tags for t in guest.tags) or (tags is not None and tags.ignore)):
        return words.IGNORED, "ignored by config or tag"
    if guest.type == "lxc" and "ct" not in settings.guest_types:
        return words.CONTAINER, "containers restart when moved; add ct to balancing.guests to allow it"
    is_ha = guest.ha is not None and guest.ha.state != "ignored"
    if settings.scope == "ha" and not is_ha:
        return words.NOT_HA, "scope is HA guests only"
    if is_ha:
        assert guest.ha is not None
        if pve_rebalances:
            return words.PVE_BALANCES, "Proxmox's auto-rebalance moves HA guests"
        state = guest.ha.crm_state or "started"
        if state not in ("started", "stopped", "request_stop") or guest.ha.target:
            return words.HA_STATE, f"HA state {state}"
    if guest.local_disks and not settings.with_local_disks:
        return words.LOCAL_DISKS, "has local disks (with_local_disks is off)"
    blocked = history.blocked_reason(guest.vmid, now)
    if blocked:
        return words.BLOCKED, blocked
    if history.failed_recently(guest.vmid, now, settings.cooldown_s):
        return words.COOLDOWN, "its last migration failed; waiting out the cooldown"
    if not guest.running and not on_maintenance:
        return words.STOPPED, "stopped"
    return None


def _config_pins(settings: BalancingSettings, names: dict[str, int]) -> dict[int, set[str]]:
    pins: dict[int, set[str]] = {}
    for key, nodes in settings.pins.items():
        vmid = int(key) if key.isdigit() else names.get(key)
        if vmid is not None:
            pins.setdefault(vmid, set()).update(nodes)
    return pins


def _allowed_for(guest: Guest, snapshot: Snapshot, settings: BalancingSettings,
                 pins: dict[int, set[str]], eligible: set[str], pools: dict) -> set[str]:
    allowed = set(eligible)
    if guest.vmid in pins:
        allowed &= pins[guest.vmid]
    if settings.use_tags:
        tag_pins = read_tags(guest.tags).pins
        if tag_pins:
            allowed &= {n for n in snapshot.nodes if n.lower() in tag_pins}
    pool = settings.pools.get(guest.pool or "")
    if pool is not None and pool.pin and pool.strict:
        allowed &= set(pool.pin)
    if settings.use_ha_rules and guest.ha is not None:
        for rule in snapshot.ha_rules:
            if rule.disabled or rule.type != "node-affinity" or guest.ha.sid not in rule.resources:
                continue
            listed = {n: p for n, p in rule.nodes.items() if n in eligible}
            if not listed:
                if rule.strict:
                    allowed &= set()
                continue
            # The CRM keeps (or brings back) a guest on the highest-priority online nodes of
            # its rule; anywhere else it would be moved back, so only those are targets.
            if rule.strict or guest.ha.failback:
                best = max(listed.values())
                allowed &= {n for n, p in listed.items() if p == best}
    for disk in guest.local_disks:
        storage = snapshot.storages.get(disk.storage)
        if storage is not None:
            allowed &= {n for n in allowed if storage.on(n)}
    return allowed


def _groups(snapshot: Snapshot, settings: BalancingSettings) -> dict:
    """Affinity, anti-affinity and soft anti-affinity groups as sets of vmids."""
    names = {g.name: g.vmid for g in snapshot.guests.values()}
    sids = {g.sid: g.vmid for g in snapshot.guests.values()}
    affinity: dict[str, set[int]] = {}
    anti: dict[str, set[int]] = {}
    soft_anti: dict[str, set[int]] = {}

    def resolve(ref: str) -> int | None:
        return int(ref) if ref.isdigit() else names.get(ref, sids.get(ref))

    for rule in settings.groups:
        members = {v for v in (resolve(r) for r in rule.guests) if v is not None}
        target = affinity if rule.kind == "affinity" else anti if rule.strict else soft_anti
        if rule.kind == "affinity" and not rule.strict:
            continue   # soft affinity: a preference the planner does not chase (yet)
        target.setdefault(f"config:{rule.name}", set()).update(members)
    if settings.use_tags:
        for guest in snapshot.guests.values():
            tags = read_tags(guest.tags)
            for name in tags.affinity:
                affinity.setdefault(f"tag:{name}", set()).add(guest.vmid)
            for name in tags.anti_affinity:
                anti.setdefault(f"tag:{name}", set()).add(guest.vmid)
    for pool_name, pool in settings.pools.items():
        members = {g.vmid for g in snapshot.guests.values() if g.pool == pool_name}
        if pool.kind == "affinity":
            affinity.setdefault(f"pool:{pool_name}", set()).update(members)
        elif pool.kind == "anti-affinity":
            (anti if pool.strict else soft_anti).setdefault(f"pool:{pool_name}", set()).update(members)
    if settings.use_ha_rules:
        for rule in snapshot.ha_rules:
            if rule.disabled or rule.type != "resource-affinity":
                continue
            members = {sids[s] for s in rule.resources if s in sids}
            target = affinity if rule.affinity == "positive" else anti
            target.setdefault(f"ha:{rule.rule}", set()).update(members)
    pools = {name: pool for name, pool in settings.pools.items()}
    return {"affinity": affinity, "anti": anti, "soft_anti": soft_anti, "pools": pools}


def _bundle(movable: dict[int, Guest], fixed: list[Guest], affinity: dict[str, set[int]],
            conflicts: list[str], skipped: list[Skip]) -> list[Unit]:
    """Units: guests joined by affinity (union-find); a bundle with a fixed member stays."""
    parent: dict[int, int] = {v: v for v in movable}
    fixed_by_id = {g.vmid: g for g in fixed}
    names: dict[int, str] = {}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    anchors: dict[int, set[int]] = {}
    for name, members in sorted(affinity.items()):
        inside = sorted(v for v in members if v in movable)
        anchored = {v for v in members if v in fixed_by_id}
        for v in inside[1:]:
            parent[find(v)] = find(inside[0])
        if inside:
            root = find(inside[0])
            names.setdefault(root, name.split(":", 1)[1])
            anchors.setdefault(root, set()).update(anchored)
    buckets: dict[int, list[Guest]] = {}
    for vmid, guest in sorted(movable.items()):
        buckets.setdefault(find(vmid), []).append(guest)
    units = []
    for root, guests in buckets.items():
        pinned = anchors.get(find(root), set())
        if pinned:
            anchor_nodes = {fixed_by_id[v].node for v in pinned}
            if len(anchor_nodes) > 1:
                conflicts.append(f"affinity group {names.get(root, root)}: members that cannot move "
                                 f"sit on {', '.join(sorted(anchor_nodes))}")
                for g in guests:
                    skipped.append(Skip(words.CONFLICT, "its affinity group is split across fixed guests",
                                        g.vmid, g.name))
                continue
            unit = _unit(guests, names.get(root))
            unit.anchor = anchor_nodes.pop()
            unit.balance = False
            units.append(unit)
            continue
        units.append(_unit(guests, names.get(root)))
    return units


def _unit(guests: list[Guest], group: str | None) -> Unit:
    if len(guests) == 1:
        return Unit(guests[0].sid, guests, guests[0].node, set())
    weight: dict[str, int] = {}
    for g in guests:
        weight[g.node] = weight.get(g.node, 0) + g.mem
    node = max(sorted(weight), key=lambda n: weight[n])
    return Unit(f"group:{group}", guests, node, set())


def _mandatory(units: list[Unit], anti_groups: list[tuple[str, set[str]]], maintenance: set[str]) -> None:
    for unit in units:
        if not unit.allowed and not unit.balance:
            continue        # in conflict: stays where it is
        nodes = {g.node for g in unit.guests}
        if nodes & maintenance:
            unit.mandatory = words.MAINTENANCE
            unit.mandatory_detail = f"{', '.join(sorted(nodes & maintenance))} is in maintenance"
        elif unit.split:
            unit.mandatory = words.RULE
            unit.mandatory_detail = "its affinity group is split across nodes"
        elif unit.allowed and unit.node not in unit.allowed:
            unit.mandatory = words.RULE
            unit.mandatory_detail = f"may only run on {', '.join(sorted(unit.allowed))}"
    by_key = {u.key: u for u in units}
    for name, keys in anti_groups:
        seen: dict[str, list[Unit]] = {}
        for key in sorted(keys):
            unit = by_key[key]
            seen.setdefault(unit.node, []).append(unit)
        for node, together in seen.items():
            if len(together) < 2:
                continue
            # keep the biggest where it is; the smaller ones move
            together.sort(key=lambda u: -sum(g.mem for g in u.guests))
            for unit in together[1:]:
                if unit.mandatory is None:
                    unit.mandatory = words.RULE
                    unit.mandatory_detail = f"anti-affinity {name.split(':', 1)[-1]}: shares {node}"
