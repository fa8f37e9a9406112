"""The ``balancing:`` section of Keel's config: what the balancer may do, and when.

Every default is named with its reason.  ``read(reader)`` takes a ``validate.Reader`` so
that every bad key is reported with its path (``balancing.limits.moves``).  Fractions
accept numbers (``0.1``) or percentages (``"10%"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from keel import schedule as sched
from keel.balance import power_settings
from keel.balance.power_settings import PowerSettings
from keel.units import parse_size
from keel.validate import Problems, Reader

GiB = 1024**3

METHODS = ("keel", "bruteforce", "topsis")
MODES = ("used", "assigned", "psi")
RESOURCES = ("cpu", "memory", "disk")
SCOPES = ("all", "ha")
IMBALANCE_FIGURES = ("keel", "pve", "spread")
GUEST_TYPES = ("vm", "ct")

# Defaults, with why.
DEFAULT_WEIGHTS = {"cpu": 1.0, "memory": 1.0, "disk": 0.0}   # disk moves are slow: opt in
DEFAULT_THRESHOLD = 0.10   # Keel's figure: nodes 10 points from the mean, typically
DEFAULT_HOTSPOT = 0.90     # a node this full on a weighted resource is worth acting on alone
DEFAULT_ABOVE_MEAN = 0.10  # ... and so is one this many points above the cluster's mean on one
DEFAULT_HOLD = 3           # rounds, as PVE: one noisy sample moves nothing
DEFAULT_MARGIN = 0.10      # a plan must cut the imbalance by 10 % to pay for its migrations
DEFAULT_COOLDOWN_S = 3600.0   # a guest that moved stays put an hour
DEFAULT_MAX_MOVES = 10
DEFAULT_MAX_BYTES = 256 * GiB
DEFAULT_CONCURRENT = 2     # migrations at once, cluster-wide
DEFAULT_PER_NODE = 1       # in and out of any one node at once
DEFAULT_WINDOW_S = 300.0   # `used` load is averaged over 5 minutes
DEFAULT_INTERVAL_S = 60.0  # continuous mode: one round a minute
DEFAULT_HEADROOM = 0.10    # never plan a node's memory above 90 %
MOVE_TIMEOUT_S = 1800.0
UNLIMITED_MOVES = 10**9    # what "no limit" is to the planner's budget
UNLIMITED_BYTES = 2**62


@dataclass(frozen=True)
class GroupRule:
    """An affinity (keep together) or anti-affinity (keep apart) group from the config."""

    name: str
    kind: str                     # affinity|anti-affinity
    guests: tuple[str, ...]       # vmids or names
    strict: bool = True


@dataclass(frozen=True)
class PoolRule:
    """ProxLB's ``balancing.pools``: a PVE pool as a group, optionally pinned."""

    pool: str
    kind: str | None              # affinity|anti-affinity|None
    pin: tuple[str, ...] = ()
    strict: bool = True


@dataclass(frozen=True)
class Ignore:
    nodes: frozenset[str] = frozenset()
    guests: frozenset[str] = frozenset()    # vmids or names
    tags: frozenset[str] = frozenset()
    pools: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Limits:
    moves: int = DEFAULT_MAX_MOVES     # per round of continuous mode (and keel balance)
    bytes: int = DEFAULT_MAX_BYTES
    concurrent: int = DEFAULT_CONCURRENT
    per_node: int = DEFAULT_PER_NODE
    move_timeout_s: float = MOVE_TIMEOUT_S
    oneshot_moves: int | None = None   # per keel plan / keel apply; None: until level or
    oneshot_bytes: int | None = None   # no move is worth it


@dataclass(frozen=True)
class BalancingSettings:
    enable: bool = False          # continuous mode migrates only when true
    method: str = "keel"
    mode: str = "used"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    guest_types: frozenset[str] = frozenset({"vm"})
    scope: str = "all"
    imbalance: str = "keel"       # the figure `threshold` applies to
    threshold: float = DEFAULT_THRESHOLD
    hotspot: float | None = DEFAULT_HOTSPOT
    above_mean: float | None = DEFAULT_ABOVE_MEAN   # points above the mean that make a node hot
    hold: int = DEFAULT_HOLD
    margin: float = DEFAULT_MARGIN
    cooldown_s: float = DEFAULT_COOLDOWN_S
    limits: Limits = Limits()
    window_s: float = DEFAULT_WINDOW_S
    interval_s: float = DEFAULT_INTERVAL_S
    headroom: float = DEFAULT_HEADROOM
    reserve: Mapping[str, int] = field(default_factory=dict)   # node (or "default") -> bytes
    with_local_disks: bool = False
    ignore: Ignore = Ignore()
    pins: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # guest -> nodes
    groups: tuple[GroupRule, ...] = ()
    pools: Mapping[str, PoolRule] = field(default_factory=dict)
    maintenance: frozenset[str] = frozenset()
    schedule: sched.Schedule | None = None
    use_ha_rules: bool = True     # Proxmox HA rules (and PVE 8 groups) are rules here too
    use_tags: bool = True         # plb_* and keel-* tags on guests
    power: PowerSettings = PowerSettings()   # balancing.power: sleeping quiet nodes (issue 19)

    def reserve_for(self, node: str) -> int:
        return int(self.reserve.get(node, self.reserve.get("default", 0)))

    def oneshot(self) -> "BalancingSettings":
        """The settings of a one-shot plan (``keel plan``, ``keel apply``, the tab's Apply):
        the one-shot limits in place of the per-round ones; no limit where none is set."""
        lim = self.limits
        return replace(self, limits=replace(
            lim, moves=UNLIMITED_MOVES if lim.oneshot_moves is None else lim.oneshot_moves,
            bytes=UNLIMITED_BYTES if lim.oneshot_bytes is None else lim.oneshot_bytes))


def fraction(value: Any) -> float | None:
    """``0.1``, ``10%`` or ``"10 %"`` → 0.1; None if it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*", value)
        if match:
            return float(match.group(1)) / 100.0
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _fraction(r: Reader, key: str, default: float | None, high: float = 1.0) -> float | None:
    raw = r.raw(key, None)
    if raw is None:
        return default
    value = fraction(raw)
    if value is None or not 0.0 <= value <= high:
        allowed = ("from 0 to 1 (0.1) or a percentage from 0% to 100% (10%)" if high == 1.0 else
                   f"from 0 to {high:g}: 0.1, or a percentage such as 10%")
        r.problems.add(r.sub(key), f"expected a fraction {allowed}, got {raw!r}")
        return default
    return value


def read(r: Reader) -> BalancingSettings:
    d = BalancingSettings()
    weights = dict(DEFAULT_WEIGHTS)
    res = r.mapping("resources")
    for name in RESOURCES:
        weights[name] = res.number(name, weights[name], 0)
    res.done()
    if not any(weights.values()):
        r.problems.add(r.sub("resources"), "at least one resource needs a weight above 0")
    guest_types = r.string_list("guests", tuple(d.guest_types))
    for kind in guest_types:
        if kind not in GUEST_TYPES:
            r.problems.add(r.sub("guests"), f"unknown guest type {kind!r} (use vm and/or ct)")

    lim = r.mapping("limits")
    once = lim.mapping("oneshot")
    limits = Limits(
        moves=lim.integer("moves", DEFAULT_MAX_MOVES, 0),
        bytes=_gib_or_size(lim, "gib", DEFAULT_MAX_BYTES),
        concurrent=lim.integer("concurrent", DEFAULT_CONCURRENT, 1),
        per_node=lim.integer("per_node", DEFAULT_PER_NODE, 1),
        move_timeout_s=lim.duration("move_timeout", MOVE_TIMEOUT_S),
        oneshot_moves=once.integer("moves", None, 0),
        oneshot_bytes=_gib_or_size(once, "gib", None),
    )
    once.done()
    lim.done()

    mem = r.mapping("memory")
    headroom = _fraction(mem, "headroom", DEFAULT_HEADROOM, high=0.9)
    reserve: dict[str, int] = {}
    res_map = mem.mapping("reserve")
    for node in list(res_map.data):
        reserve[str(node)] = res_map.size(str(node), 0)
    mem.done()

    ign = r.mapping("ignore")
    ignore = Ignore(nodes=frozenset(ign.string_list("nodes")), guests=frozenset(ign.string_list("guests")),
                    tags=frozenset(ign.string_list("tags")), pools=frozenset(ign.string_list("pools")))
    ign.done()

    pins: dict[str, tuple[str, ...]] = {}
    pin_map = r.mapping("pin")
    for guest in list(pin_map.data):
        nodes = pin_map.string_list(str(guest))
        if not nodes:
            r.problems.add(pin_map.sub(str(guest)), "a pin needs at least one node")
        pins[str(guest)] = nodes

    groups = []
    for kind, key in (("affinity", "affinity"), ("anti-affinity", "anti_affinity")):
        for path, item in r.items(key):
            g = Reader(item, path, r.problems)
            rule = GroupRule(name=g.get("name", str, f"{key}-{len(groups) + 1}"), kind=kind,
                             guests=g.string_list("guests"), strict=g.get("strict", bool, True))
            if len(rule.guests) < 2:
                r.problems.add(g.sub("guests"), "a group needs at least two guests")
            g.done()
            groups.append(rule)

    pools: dict[str, PoolRule] = {}
    pool_map = r.mapping("pools")
    for pool in list(pool_map.data):
        p = pool_map.mapping(str(pool))
        kind = p.get("type", str, None, check=lambda v: None if v in ("affinity", "anti-affinity")
                     else "must be affinity or anti-affinity")
        pools[str(pool)] = PoolRule(str(pool), kind, p.string_list("pin"), p.get("strict", bool, True))
        p.done()

    settings = BalancingSettings(
        enable=r.get("enable", bool, d.enable),
        method=r.choice("method", METHODS, d.method),
        mode=r.choice("mode", MODES, d.mode),
        weights=weights,
        guest_types=frozenset(guest_types),
        scope=r.choice("scope", SCOPES, d.scope),
        imbalance=r.choice("imbalance", IMBALANCE_FIGURES, d.imbalance),
        threshold=_fraction(r, "threshold", d.threshold, high=100.0),
        hotspot=None if r.raw("hotspot", "") is False else _fraction(r, "hotspot", d.hotspot),
        above_mean=None if r.raw("above_mean", "") is False else _fraction(r, "above_mean", d.above_mean),
        hold=r.integer("hold", d.hold, 0),
        margin=_fraction(r, "margin", d.margin),
        cooldown_s=r.duration("cooldown", d.cooldown_s),
        limits=limits,
        window_s=r.duration("window", d.window_s),
        interval_s=r.duration("interval", d.interval_s),
        headroom=headroom,
        reserve=reserve,
        with_local_disks=r.get("with_local_disks", bool, d.with_local_disks),
        ignore=ignore,
        pins=pins,
        groups=tuple(groups),
        pools=pools,
        maintenance=frozenset(r.string_list("maintenance")),
        schedule=sched.read(r.mapping("schedule")),
        use_ha_rules=r.get("ha_rules", bool, True),
        use_tags=r.get("tags", bool, True),
        power=power_settings.read(r.mapping("power")),
    )
    r.done()
    return settings


def _gib_or_size(r: Reader, key: str, default: int | None) -> int | None:
    raw = r.raw(key, None)
    if raw is None:
        return default
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return int(raw * GiB)
    try:
        return parse_size(raw, r.sub(key))
    except Exception:
        r.problems.add(r.sub(key), f"expected GiB as a number or a size such as 500GiB, got {raw!r}")
        return default


def parse(data: Any, source: str = "balancing") -> BalancingSettings:
    problems = Problems(source)
    settings = read(Reader(data, "", problems))
    problems.raise_if_any()
    return settings
