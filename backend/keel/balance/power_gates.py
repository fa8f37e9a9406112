"""The gates a node passes before it may sleep: pure functions over what Keel read from PVE.

Each returns None when the node may go, or a ``Refusal`` naming the gate and saying why in a
sentence for a person.  ``keel.balance.power`` asks them for every candidate, in the order
of ``docs/power.md`` ("The gates").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from keel import words
from keel.balance.plan import Plan
from keel.balance.power_settings import PowerSettings
from keel.model import CephFacts, PowerFacts, Snapshot

GiB = 1024**3

# Ceph health checks that sleeping nodes cause themselves (their OSDs and monitor down,
# noout set): with these alone, and the down OSDs all on nodes that are off, Ceph is well.
SLEEP_CHECKS = frozenset({"OSDMAP_FLAGS", "OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED", "MON_DOWN"})
# Placement group states that say Ceph is busy or blocked: no node sleeps meanwhile.
BUSY_PG_STATES = ("backfill", "recover", "peered", "stale", "incomplete", "down", "inactive", "remapped")
# The HA states of a service that is between two places: its node may not go now.
HA_SETTLED = (None, "started", "stopped", "request_stop")


@dataclass(frozen=True)
class Refusal:
    gate: str                   # a words.GATE_* word
    node: str | None            # None: it holds for every node
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Forecast:
    """An awake node's predicted load once the plan's guests have moved."""

    node: str
    cpu_cores: float
    cpus: float
    mem_bytes: float
    mem_total: float            # its memory less the reserve
    mem_limit: float            # what the balancer may fill it to (memory.headroom)

    @property
    def cpu_frac(self) -> float:
        return self.cpu_cores / self.cpus if self.cpus else 0.0

    @property
    def mem_frac(self) -> float:
        return self.mem_bytes / self.mem_total if self.mem_total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "cpu": round(self.cpu_frac, 4), "memory": round(self.mem_frac, 4),
                "cpu_cores": round(self.cpu_cores, 2), "mem_gib": round(self.mem_bytes / GiB, 2)}


def _names(nodes: Iterable[str]) -> str:
    items = sorted(nodes)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def schedule(power: PowerSettings, now: float) -> Refusal | None:
    window = power.never_sleep_window(now)
    if window is None:
        return None
    return Refusal(words.GATE_SCHEDULE, None, f"the never_sleep window {window.text} ({power.timezone}) is open")


def quorum(votes: Mapping[str, int], awake_after: set[str], leaving: set[str], node: str,
           allow_bare_majority: bool) -> Refusal | None:
    """Corosync's votequorum: quorum is a majority of every node's votes (``expected``).
    The awake nodes must keep more than that bare majority, unless allowed."""
    if not votes:
        return Refusal(words.GATE_QUORUM, node, "corosync's votes could not be read (/cluster/config/nodes)")
    expected = sum(votes.values())
    need = expected // 2 + 1
    have = sum(votes.get(n, 0) for n in awake_after)
    asleep = f"with {_names(leaving)} asleep" if leaving else "awake"
    if have < need:
        return Refusal(words.GATE_QUORUM, node, f"{asleep} the awake nodes would hold {have} of {expected} "
                                                f"corosync votes; quorum needs {need}")
    if have == need and not allow_bare_majority:
        return Refusal(words.GATE_QUORUM, node, f"{asleep} the awake nodes would hold {have} of {expected} "
                                                f"corosync votes, a bare majority: one more node lost would "
                                                f"lose quorum (allow_bare_majority: true allows it)")
    return None


def min_awake(awake_after: set[str], node: str, minimum: int) -> Refusal | None:
    if len(awake_after) >= minimum:
        return None
    return Refusal(words.GATE_MIN_AWAKE, node, f"only {len(awake_after)} node{'s' if len(awake_after) != 1 else ''} "
                                               f"would be awake; min_awake is {minimum}")


def ha(node: str, snapshot: Snapshot) -> Refusal | None:
    """The HA stack must be settled on the node: its own HA state known and online (or in
    maintenance), and none of its services on the way somewhere."""
    if not any(g.ha is not None for g in snapshot.guests.values()):
        return None
    state = snapshot.nodes[node].ha_state
    if state not in (None, "online", "maintenance"):
        return Refusal(words.GATE_HA, node, f"its HA state is {state}")
    moving = [g for g in snapshot.guests_on(node) if g.ha is not None and g.ha.state != "ignored"
              and (g.ha.crm_state not in HA_SETTLED or g.ha.target)]
    if moving:
        g = moving[0]
        return Refusal(words.GATE_HA, node, f"HA service {g.sid} ({g.name}) is in state {g.ha.crm_state}"
                                            + (f" and {len(moving) - 1} more" if len(moving) > 1 else ""))
    return None


def uses_ha(snapshot: Snapshot) -> bool:
    return any(g.ha is not None for g in snapshot.guests.values())


def ceph(node: str, awake_after: set[str], ceph_facts: CephFacts | None,
         allow_bare_majority: bool) -> Refusal | None:
    """A node with OSDs or a monitor: Ceph must be well (or ill only from nodes that are
    off), busy with nothing, and keep every pool at ``min_size`` copies and the monitors in
    quorum with the node gone."""
    c = ceph_facts
    if c is not None and c.error:
        return Refusal(words.GATE_CEPH, node, f"Ceph's state could not be read: {c.error}")
    if c is None or (node not in c.osds and node not in c.mons):
        return None

    def refuse(detail: str) -> Refusal:
        return Refusal(words.GATE_CEPH, node, detail)

    ill = sorted(set(c.checks) - SLEEP_CHECKS)
    if c.health == "HEALTH_ERR" or ill:
        return refuse(f"Ceph is {c.health}" + (f" ({', '.join(ill)})" if ill else ""))
    awake_down = sorted(h for h, (count, up) in c.osds.items() if up < count and h in awake_after | {node})
    if awake_down:
        return refuse(f"OSDs are down on {_names(awake_down)}, which {'is' if len(awake_down) == 1 else 'are'} awake")
    busy = {s: n for s, n in c.pg_states.items() if any(word in s for word in BUSY_PG_STATES)}
    if busy:
        state, count = max(busy.items(), key=lambda kv: kv[1])
        return refuse(f"Ceph is not settled: {count} placement groups {state}")
    down = {h for h in c.osds if h not in awake_after}
    for pool in c.pools:
        left = max(0, pool.size - len(down))
        if left < pool.min_size:
            return refuse(f"pool {pool.name} keeps {pool.size} copies on distinct hosts and needs "
                          f"{pool.min_size} for I/O: with {_names(down)} off, a placement group could be "
                          f"left with {left}")
    if node in c.mons:
        up = [m for m in c.mons_in_quorum if m in awake_after]
        need = len(c.mons) // 2 + 1
        if len(up) < need or (len(up) == need and not allow_bare_majority):
            bare = "" if len(up) < need else ", a bare majority (allow_bare_majority: true allows it)"
            return refuse(f"its monitor would leave {len(up)} of {len(c.mons)} monitors in quorum{bare}")
    return None


def has_osds(node: str, ceph_facts: CephFacts | None) -> bool:
    return ceph_facts is not None and ceph_facts.osds.get(node, (0, 0))[0] > 0


def guests_stay(node: str, snapshot: Snapshot, plan: Plan) -> Refusal | None:
    """No running guest may be left on the node: PVE's shutdown would stop it (a guest with
    local disks or devices, one pinned there, one Keel must leave alone)."""
    ends = {m.vmid: m.target for m in plan.moves}
    why = {s.vmid: s for s in plan.skipped if s.vmid is not None}
    left = [g for g in snapshot.guests_on(node) if g.running and ends.get(g.vmid, node) == node]
    if not left:
        return None
    parts = []
    for g in left[:3]:
        skip = why.get(g.vmid)
        parts.append(f"{g.name} ({g.vmid}): {skip.reason}, {skip.detail}" if skip else f"{g.name} ({g.vmid})")
    more = f"; and {len(left) - 3} more" if len(left) > 3 else ""
    return Refusal(words.GATE_GUESTS, node, f"{len(left)} running guest{'s' if len(left) != 1 else ''} "
                                            f"cannot leave it: {'; '.join(parts)}{more}")


def lease(node: str, holder: str | None) -> Refusal | None:
    if holder != node:
        return None
    return Refusal(words.GATE_LEASE, node, "it holds Keel's leader lease: hand it over first (in automatic "
                                           "mode the leader does so itself when its node is next to sleep; "
                                           "else stop keel-engine there, another node takes over)")


def api_node(node: str, facts: PowerFacts) -> Refusal | None:
    if node != facts.local_node:
        return None
    return Refusal(words.GATE_API_NODE, node, "Keel talks to Proxmox VE through it and sends the "
                                              "Wake-on-LAN packets from it")


def wake_on_lan(node: str, facts: PowerFacts) -> Refusal | None:
    if facts.wol.get(node):
        return None
    return Refusal(words.GATE_WOL, node, "no Wake-on-LAN MAC in its node config: "
                                         f"pvenode config set --wakeonlan MAC (on {node})")


def _ago(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size:.0f} {unit}s ago"
    return f"{max(0.0, seconds):.0f} seconds ago"


def _span(seconds: float) -> str:
    """A duration as the config writes it: 30d, 12h, 90m, 45s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def last_wake_test(node: str, tests: Mapping[str, Any] | None) -> float | None:
    """When ``node`` last came back from a wake by Keel (``power_exec``'s WAKE_TESTS), if ever."""
    entry = (tests or {}).get(node)
    when = entry.get("time") if isinstance(entry, Mapping) else None
    return float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None


def wake_test(node: str, tests: Mapping[str, Any] | None, max_age_s: float | None, now: float) -> Refusal | None:
    """A MAC in the node config says nothing about the BIOS, the NIC or the switch: the node
    must have come back from a wake by Keel within ``wake_test_max_age``."""
    if max_age_s is None:
        return None
    when = last_wake_test(node, tests)
    if when is not None and now - when <= max_age_s:
        return None
    import time
    last = "never" if when is None else (
        f"the last was {_ago(now - when)} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(when))})")
    return Refusal(words.GATE_WOL, node, f"no successful wake test within wake_test_max_age ({_span(max_age_s)}): "
                                         f"{last}; test it with keel power test {node} (a sleep and a wake)")


def headroom(forecasts: list[Forecast], power: PowerSettings, node: str) -> Refusal | None:
    """Every awake node under the line; and N+spare: with the ``spare_nodes`` biggest awake
    nodes gone, the others can take all the load within their CPU threads and the
    balancer's memory limit (a fluid check: guests do not split, so keep the margin)."""
    def refuse(detail: str) -> Refusal:
        return Refusal(words.GATE_HEADROOM, node, detail)

    for f in sorted(forecasts, key=lambda f: -max(f.cpu_frac - power.cpu_line, f.mem_frac - power.memory_line)):
        if f.cpu_frac > power.cpu_line:
            return refuse(f"{f.node} would be at {f.cpu_frac:.0%} CPU, above the line of {power.cpu_line:.0%}")
        if f.mem_frac > power.memory_line:
            return refuse(f"{f.node} would be at {f.mem_frac:.0%} memory, above the line of "
                          f"{power.memory_line:.0%}")
    spare = power.spare_nodes
    if spare <= 0:
        return None
    if len(forecasts) <= spare:
        return refuse(f"N+{spare} needs more than {spare} awake node{'s' if spare != 1 else ''} to take Keel's "
                      f"guests")
    cpu_total = sum(f.cpu_cores for f in forecasts)
    mem_total = sum(f.mem_bytes for f in forecasts)
    for what, size, total, unit in (("CPU", lambda f: f.cpus, cpu_total, "cores"),
                                    ("memory", lambda f: f.mem_limit, mem_total, "GiB")):
        biggest = sorted(forecasts, key=lambda f: (-size(f), f.node))[:spare]
        room = sum(size(f) for f in forecasts if f not in biggest)
        if total > room:
            scale = GiB if unit == "GiB" else 1
            return refuse(f"N+{spare}: without {_names(f.node for f in biggest)} the other awake nodes would "
                          f"need {total / scale:.0f} {unit} of {what} and have {room / scale:.0f}")
    return None
