"""``balancing.power``: when Keel may empty quiet nodes and power them off, and wake them.

    balancing:
      power:
        mode: recommend             # off | recommend | automatic (as DRS's automation levels)
        nodes: [pve5, pve6, pve7, pve8]
        min_awake: 2
        headroom: {cpu: 75%, memory: 80%, spare_nodes: 1}
        hold: 30m
        never_sleep: "mon-fri 07:00-19:00"
        wake_all: "mon-fri 07:30"
        timezone: Europe/Berlin
        watts_per_node: 150
        wake_timeout: 10m
        wake_test_max_age: 30d      # or off

Every field is plain data (strings, numbers, tuples), so that the settings in force stay
JSON as keel-engine shows them.  Windows are read by ``keel.schedule`` and checked with its
``Window``; time comes in as an argument.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, Mapping

from keel import schedule as sched
from keel.validate import Problems, Reader

MODES = ("off", "recommend", "automatic")

# Defaults, with why.
DEFAULT_MIN_AWAKE = 2          # one node down for any reason still leaves one to run the guests
DEFAULT_SPARE_NODES = 1        # N+1: the awake nodes can take the load of the biggest one of them
DEFAULT_CPU_LINE = 0.75        # the line no awake node's predicted CPU may pass (and what wakes one)
DEFAULT_MEMORY_LINE = 0.80     # ... and memory: room for a guest that grows before a node is back
DEFAULT_HOLD_S = 1800.0        # the load stays low for 30 minutes before a node sleeps
DEFAULT_WATTS = 150.0          # what a typical 1U server draws idle, for the savings estimate
DEFAULT_WAKE_TIMEOUT_S = 600.0  # a node not back in 10 minutes is reported, and another is woken
DEFAULT_WAKE_TEST_MAX_AGE_S = 30 * 86400.0   # a month: firmware, NIC and switch settings drift
# PVE's API has no call for HA maintenance: Keel runs pve-ha-manager's own command on its node.

_WINDOW_RE = re.compile(r"^\s*(?:(?P<days>[a-z,\-]+)\s+)?(?P<start>\d{1,2}:\d\d)\s*-\s*(?P<end>\d{1,2}:\d\d)\s*$")
_TIME_RE = re.compile(r"^\s*(?:(?P<days>[a-z,\-]+)\s+)?(?P<at>\d{1,2}:\d\d)\s*$")


@dataclass(frozen=True)
class PowerWindow:
    """A weekly window from ``never_sleep`` (``mon-fri 07:00-19:00``), or a moment from
    ``wake_all`` (``mon-fri 07:30``: ``start_min == end_min``)."""

    text: str
    days: tuple[int, ...]       # 0 = Monday
    start_min: int
    end_min: int

    def window(self) -> sched.Window:
        return sched.Window(frozenset(self.days), self.start_min, self.end_min)


@dataclass(frozen=True)
class PowerSettings:
    mode: str = "off"
    nodes: tuple[str, ...] = ()           # the nodes that may sleep; none unless named
    min_awake: int = DEFAULT_MIN_AWAKE
    allow_bare_majority: bool = False     # may the awake nodes hold just a majority of the votes
    cpu_line: float = DEFAULT_CPU_LINE
    memory_line: float = DEFAULT_MEMORY_LINE
    spare_nodes: int = DEFAULT_SPARE_NODES
    hold_s: float = DEFAULT_HOLD_S
    never_sleep: tuple[PowerWindow, ...] = ()
    wake_all: tuple[PowerWindow, ...] = ()
    timezone: str = "UTC"
    watts: Mapping[str, float] = field(default_factory=lambda: {"default": DEFAULT_WATTS})
    wake_timeout_s: float = DEFAULT_WAKE_TIMEOUT_S
    # a node sleeps only with a successful wake by Keel this recent (None: the gate is off)
    wake_test_max_age_s: float | None = DEFAULT_WAKE_TEST_MAX_AGE_S

    def watts_for(self, node: str) -> float:
        return float(self.watts.get(node, self.watts.get("default", DEFAULT_WATTS)))

    def _local(self, now: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(self.timezone))

    def never_sleep_window(self, now: float) -> PowerWindow | None:
        """The ``never_sleep`` window open at ``now``, if one is."""
        local = self._local(now)
        minute = local.hour * 60 + local.minute
        return next((w for w in self.never_sleep if w.window().contains(local.weekday(), minute)), None)

    def wake_all_due(self, since: float, now: float) -> bool:
        """Whether a ``wake_all`` moment came in ``(since, now]``."""
        moment = self.next_wake_all(since)
        return moment is not None and moment <= now

    def next_wake_all(self, after: float) -> float | None:
        """The first ``wake_all`` moment after ``after`` (epoch seconds), or None."""
        if not self.wake_all:
            return None
        zone = zoneinfo.ZoneInfo(self.timezone)
        start = self._local(after)
        best: float | None = None
        for offset in range(8):
            day = (start + dt.timedelta(days=offset)).date()
            for w in self.wake_all:
                if day.weekday() not in w.days:
                    continue
                moment = dt.datetime(day.year, day.month, day.day, w.start_min // 60, w.start_min % 60,
                                     tzinfo=zone).timestamp()
                if moment > after and (best is None or moment < best):
                    best = moment
            if best is not None:
                return best
        return best


def _days(text: str | None, r: Reader, path: str) -> tuple[int, ...] | None:
    """``mon-fri``, ``sat,sun``, ``mon`` (or nothing: every day), read as keel.schedule reads them."""
    if not text:
        return tuple(range(7))
    days, wrong = sched.parse_days([d for d in text.split(",") if d])
    for message in wrong:
        r.problems.add(path, message)
    return None if wrong or not days else tuple(sorted(days))


def _windows(r: Reader, key: str, moment: bool) -> tuple[PowerWindow, ...]:
    raw = r.raw(key, None)
    if raw is None:
        return ()
    shape = "DAYS HH:MM (mon-fri 07:30)" if moment else "DAYS HH:MM-HH:MM (mon-fri 07:00-19:00)"
    if not isinstance(raw, (str, list)):
        r.problems.add(r.sub(key), f"expected a string such as {shape}, or a list of them, got {raw!r}")
        return ()
    items = [(r.sub(key), raw)] if isinstance(raw, str) else list(r.items(key))
    result = []
    for path, text in items:
        if not isinstance(text, str):
            r.problems.add(path, f"expected a string such as {shape}, got {text!r}")
            continue
        match = (_TIME_RE if moment else _WINDOW_RE).match(text.lower())
        if match is None:
            r.problems.add(path, f"expected {shape}, got {text!r}")
            continue
        days = _days(match.group("days"), r, path)
        times = [sched.parse_time(match.group(g)) for g in (("at",) if moment else ("start", "end"))]
        if any(t is None for t in times) or times[0] == 1440:
            r.problems.add(path, f"expected times HH:MM between 00:00 and 24:00 ({shape}), got {text!r}")
            continue
        if days is None:
            continue
        start = int(times[0])                                  # type: ignore[arg-type]
        end = start if moment else int(times[1]) or 1440       # type: ignore[arg-type]
        result.append(PowerWindow(text.strip(), days, start, end))
    return tuple(result)


def _line(r: Reader, key: str, default: float) -> float:
    from keel.balance.settings import fraction
    raw = r.raw(key, None)
    if raw is None:
        return default
    value = fraction(raw)
    if value is None or not 0.0 < value <= 1.0:
        r.problems.add(r.sub(key), f"expected a fraction above 0 and at most 1 (0.75) or a percentage "
                                   f"(75%), got {raw!r}")
        return default
    return value


def _watts(r: Reader) -> dict[str, float]:
    raw = r.raw("watts_per_node", None)
    if raw is None:
        return {"default": DEFAULT_WATTS}
    if isinstance(raw, dict):
        m = r.mapping("watts_per_node")
        watts = {str(node): m.number(str(node), DEFAULT_WATTS, 0) for node in list(raw)}
        watts.setdefault("default", DEFAULT_WATTS)
        return watts
    return {"default": r.number("watts_per_node", DEFAULT_WATTS, 0)}


def _max_age(r: Reader, key: str, default: float) -> float | None:
    """A duration, or ``off`` (a bare ``off`` in YAML reads as false) or ``0``: None, no limit."""
    from keel.errors import InvalidError
    from keel.units import parse_duration
    raw = r.raw(key, None)
    if raw is None:
        return default
    if raw is False or (isinstance(raw, str) and raw.strip().lower() == "off"):
        return None
    try:
        value = parse_duration(raw, r.sub(key))
    except InvalidError as err:
        r.problems.add(r.sub(key), f"expected a duration such as 30d, or off (0): {err}")
        return default
    return value or None


def read(r: Reader) -> PowerSettings:
    d = PowerSettings()
    raw_mode = r.raw("mode", None)
    mode = d.mode
    if raw_mode is True:
        r.problems.add(r.sub("mode"), f"must be one of {', '.join(MODES)}, got {raw_mode!r}")
    elif raw_mode is not False:       # PyYAML reads a bare `off` as false: that is off
        mode = r.choice("mode", MODES, d.mode)
    nodes = r.string_list("nodes")
    for name in sorted({n for n in nodes if nodes.count(n) > 1}):
        r.problems.add(r.sub("nodes"), f"{name} is listed twice")
    head = r.mapping("headroom")
    cpu_line = _line(head, "cpu", d.cpu_line)
    memory_line = _line(head, "memory", d.memory_line)
    spare = head.integer("spare_nodes", d.spare_nodes, 0)
    head.done()
    timezone = r.get("timezone", str, d.timezone)
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        r.problems.add(r.sub("timezone"), f"unknown time zone {timezone!r} (use an IANA name such as "
                                          f"Europe/Berlin)")
        timezone = d.timezone
    wake_timeout = r.duration("wake_timeout", d.wake_timeout_s)
    if wake_timeout is not None and wake_timeout <= 0:
        r.problems.add(r.sub("wake_timeout"), "must be above 0 (how long a node may take to wake)")
        wake_timeout = d.wake_timeout_s
    settings = PowerSettings(
        mode=mode, nodes=nodes, min_awake=r.integer("min_awake", d.min_awake, 1),
        allow_bare_majority=r.get("allow_bare_majority", bool, d.allow_bare_majority),
        cpu_line=cpu_line, memory_line=memory_line, spare_nodes=spare,
        hold_s=r.duration("hold", d.hold_s),
        never_sleep=_windows(r, "never_sleep", moment=False),
        wake_all=_windows(r, "wake_all", moment=True),
        timezone=timezone, watts=_watts(r), wake_timeout_s=wake_timeout,
        wake_test_max_age_s=_max_age(r, "wake_test_max_age", d.wake_test_max_age_s or 0.0),
    )
    r.done()
    return settings


def parse(data: Any, source: str = "balancing.power") -> PowerSettings:
    problems = Problems(source)
    settings = read(Reader(data, "", problems))
    problems.raise_if_any()
    return settings
