"""ProxLB's nested settings (schedules, reservations, pools) and what has no Keel key.

Helpers of ``keel.importers.proxlb``: each reads one ProxLB structure from a ``Source``
and returns Keel's shape of it, adding a note where the meaning changes.  ``leftovers``
lists every ProxLB key that has no Keel equivalent, with the reason.
"""

from __future__ import annotations

from typing import Any

from keel.importers.commented import Note
from keel.importers.proxlb_source import Source, as_bool, as_list, as_number

METHODS = ("memory", "cpu", "disk")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def interval_s(src: Source) -> float | None:
    """service.schedule (``{interval: 12, format: hours}``) in seconds."""
    schedule = src.mapping("service.schedule")
    if schedule is None:
        return None
    amount = as_number(schedule.get("interval", 12))
    unit = str(schedule.get("format", "hours")).lower()
    if amount is None or amount <= 0 or unit not in ("hours", "minutes"):
        src.problems.add(src.label("service.schedule"), f"expected interval (a number above 0) and "
                                                        f"format (hours or minutes), got {schedule!r}")
        return None
    return float(amount) * (3600 if unit == "hours" else 60)


def duration(seconds: float) -> str:
    """Seconds as Keel's duration: ``43200`` → ``12h``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def reserve(src: Source) -> dict[str, str]:
    """node_resource_reserve (``{defaults: {memory: 4}, node1: {memory: 6}}``, GB) → memory.reserve."""
    table = src.mapping("balancing.node_resource_reserve")
    if not table:
        return {}
    out: dict[str, str] = {}
    for node, resources in table.items():
        where = f"{src.label('balancing.node_resource_reserve')}.{node}"
        if not isinstance(resources, dict):
            src.problems.add(where, f"expected a mapping such as {{memory: 4}}, got {resources!r}")
            continue
        for resource, amount in resources.items():
            gib = as_number(amount)
            if resource not in METHODS or gib is None or gib < 0:
                src.problems.add(f"{where}.{resource}", f"expected memory, cpu or disk with a number of GB, "
                                                        f"got {resource}: {amount!r}")
            elif resource != "memory":
                src.dropped.append(Note("ProxLB only applied memory reservations, and so does Keel "
                                        "(memory.reserve)", None, f"{where}.{resource}"))
            elif gib:
                out["default" if node == "defaults" else str(node)] = f"{gib:g}GiB"
    return out


def pools(src: Source) -> dict[str, dict[str, Any]]:
    """balancing.pools, checked and copied: Keel's has the same shape (type, pin, strict)."""
    table = src.mapping("balancing.pools")
    if not table:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for pool, rule in table.items():
        where = f"{src.label('balancing.pools')}.{pool}"
        rule = {} if rule is None else rule
        if not isinstance(rule, dict):
            src.problems.add(where, f"expected a mapping with type, pin, strict, got {rule!r}")
            continue
        item: dict[str, Any] = {}
        for key, value in rule.items():
            if key == "type":
                if value not in ("affinity", "anti-affinity"):
                    src.problems.add(f"{where}.type", f"must be affinity or anti-affinity, got {value!r}")
                else:
                    item["type"] = value
            elif key == "pin":
                nodes = as_list(value) if value is not None else []
                if nodes is None:
                    src.problems.add(f"{where}.pin", f"expected a list of nodes, got {value!r}")
                elif nodes:
                    item["pin"] = nodes
            elif key == "strict":
                strict = as_bool(value)
                if strict is None:
                    src.problems.add(f"{where}.strict", f"expected true or false, got {value!r}")
                else:
                    item["strict"] = strict
            else:
                src.dropped.append(Note("not a ProxLB pool setting (ProxLB ignored it too)", None,
                                        f"{where}.{key}"))
        if item:
            out[str(pool)] = item
        else:
            src.dropped.append(Note("a pool without type or pin has no effect", None, where))
    return out


def maintenance_schedule(src: Source, notes: list[Note], at: str | None) -> None:
    """Not carried over (Keel has no such schedule yet); its windows are spelled out instead."""
    plan = src.mapping("proxmox_cluster.maintenance_nodes_schedule")
    if not plan or not plan.get("schedules"):
        return
    label = src.label("proxmox_cluster.maintenance_nodes_schedule")
    hours = as_number(plan.get("duration", 0)) or 0
    early = as_number(plan.get("pre-migration", 0)) or 0
    schedules = plan.get("schedules")
    if not isinstance(schedules, dict):
        src.problems.add(f"{label}.schedules", f"expected node: [list of 'Monday, 8:00'], got {schedules!r}")
        return
    windows = []
    for node, entries in schedules.items():
        entries = [entries] if isinstance(entries, str) else entries or []
        for entry in entries:
            windows.append(f"{node} {_window(str(entry), hours, early)}")
    listing = "; ".join(windows)
    if at:
        notes.append(Note("ProxLB's weekly maintenance_nodes_schedule is not carried over: Keel has no "
                          "per-node maintenance schedule yet (see the end of this file).", at))
    src.dropped.append(Note(f"Keel has no per-node weekly maintenance schedule yet. ProxLB put these nodes "
                            f"into maintenance (in its host's local time): {listing}. Until Keel has one, "
                            f"add a node to balancing.maintenance for its window and take it out "
                            f"afterwards. (Keel's balancing.schedule is something else: the hours in "
                            f"which Keel may balance at all.)", None, label))


def _window(entry: str, hours: float, early_min: float) -> str:
    """``'Monday, 8:00'`` with ``duration`` hours and ``pre-migration`` minutes → ``Mon 07:50-11:00``."""
    try:
        day_text, time_text = (part.strip() for part in entry.split(",", 1))
        day = _WEEKDAYS.index(day_text.lower())
        hour, minute = (int(part) for part in time_text.split(":", 1))
        if not (0 <= hour < 24 and 0 <= minute < 60):
            raise ValueError
    except ValueError:
        return f"'{entry}' (ProxLB skips this entry: it expects 'Monday, 8:00')"
    start = day * 1440 + hour * 60 + minute - int(early_min)
    end = day * 1440 + hour * 60 + minute + int(hours * 60)

    def at(minutes: int) -> str:
        minutes %= 7 * 1440
        return f"{_WEEKDAYS[minutes // 1440][:3].capitalize()} {minutes % 1440 // 60:02d}:{minutes % 60:02d}"

    if end <= start:
        return f"{at(start)} (duration 0: no window)"
    return f"{at(start)} to {at(end)}"


# What has no Keel equivalent, with why.  Keys not listed here and not mapped above are
# reported as unknown.
_NO_EQUIVALENT = {
    "proxmox_cluster.overprovisioning": "ProxLB 2.x parses it but never uses it; Keel's capacity checks "
                                        "are memory.headroom and memory.reserve",
    "balancing.live": "Keel migrates running VMs live; ProxLB's live: false would have been refused by PVE "
                      "for running VMs anyway",
    "balancing.with_conntrack_state": "Keel has no key for PVE's with-conntrack-state migration option",
    "balancing.balance_larger_guests_first": "Keel's planner chooses moves by their effect on the "
                                             "imbalance and their cost, not by guest size order",
    "balancing.enforce_affinity": "Keel makes affinity and anti-affinity part of every plan, and moves "
                                  "guests that break a rule (a mandatory move, even when the cluster is "
                                  "level); there is no separate enforcement switch",
    "balancing.enforce_pinning": "Keel makes pins part of every plan, and moves a pinned guest found "
                                 "elsewhere to its node; there is no separate enforcement switch",
    "balancing.cpu_overcommit": "a setting of ProxLB's optional solver; Keel has no vCPU-to-core ratio "
                                "limit to set",
    "balancing.max_node_inflow": "a setting of ProxLB's optional solver; Keel limits migrations with "
                                 "limits.moves per round and limits.per_node at once",
    "service.daemon": "Keel's engine always runs and plans every `interval`; a one-shot run (daemon: false) "
                      "has no Keel key",
    "service.delay": "no key; Keel moves nothing until `hold` rounds in a row were over the threshold",
    "service.log_level": "Keel logs to the journal; `keel -v` makes the command line more verbose",
    "service.enable_ha": "Keel is installed on every node and is built to elect one leader by itself "
                         "(a pmxcfs lock); nothing to configure",
    "solver": "Keel's planner (balancing.method: keel) plans all moves of a round together, with "
              "capacity, rules and migration cost, which is what ProxLB's optional OR-Tools solver adds "
              "to ProxLB; none of its settings apply",
    "ini.config_version": "",
}
_MAPPED = {
    "proxmox_api.hosts", "proxmox_api.user", "proxmox_api.pass", "proxmox_api.token_id",
    "proxmox_api.token_secret", "proxmox_api.ssl_verification", "proxmox_api.timeout",
    "proxmox_api.retries", "proxmox_api.wait_time", "proxmox_cluster.maintenance_nodes",
    "proxmox_cluster.maintenance_nodes_schedule", "proxmox_cluster.ignore_nodes", "balancing.enable",
    "balancing.balance_types", "balancing.method", "balancing.mode", "balancing.balanciness",
    "balancing.memory_threshold", "balancing.cpu_threshold", "balancing.disk_threshold",
    "balancing.parallel", "balancing.parallel_jobs", "balancing.max_job_validation",
    "balancing.node_resource_reserve", "balancing.with_local_disks", "balancing.ignore_guests",
    "balancing.pools", "balancing.psi", "service.schedule", "ini.mode_option",
}


def leftovers(src: Source) -> None:
    """Every ProxLB key nothing above took, into ``src.dropped`` with the reason."""
    for name in src.values:
        if name in _MAPPED or name.startswith("proxmox_api."):
            continue
        if name in _NO_EQUIVALENT:
            if _NO_EQUIVALENT[name] and not _is_off(name, src.values[name]):
                src.drop(name, _NO_EQUIVALENT[name])
        elif name.startswith("ini."):
            _ini_extra(src, name)
        else:
            src.drop(name, "not a ProxLB setting (ProxLB ignored it too)")


def _is_off(name: str, value: Any) -> bool:
    """Settings whose ProxLB value changes nothing need no line in the list."""
    if name == "service.enable_ha":
        return as_bool(value) is False
    if name == "service.delay":
        return not isinstance(value, dict) or as_bool(value.get("enable", False)) is False
    if name == "balancing.live":
        return as_bool(value) is True
    if name in ("balancing.balance_larger_guests_first", "proxmox_cluster.overprovisioning"):
        return as_bool(value) is False
    if name == "service.daemon":
        return as_bool(value) is True
    return False


def _ini_extra(src: Source, name: str) -> None:
    """ProxLB 1.0's other INI sections: only worth a line when switched on."""
    _, section, key = name.split(".", 2)
    if key != "enable" or not as_bool(src.values[name]):
        return
    why = {"storage_balancing": "Keel does not move disks between storages",
           "update_service": "Keel does not run rolling updates of the nodes",
           "api": "Keel has its own API (keel-web) and CLI"}[section]
    src.drop(name, why)
