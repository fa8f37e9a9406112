"""Weekly time windows in a time zone: "weekdays 22:00 to 06:00 Europe/Berlin".

The balancer's allowed hours and the runners' scale-set schedules share this shape
(Rungar's, key for key)::

    schedule:
      timezone: Europe/Berlin
      windows:
        - {days: [mon, tue, wed, thu, fri], from: "08:00", to: "18:00"}
        - {days: [sat, sun], from: "22:00", to: "24:00"}

``to`` may be ``24:00``; a window whose ``to`` is not after its ``from`` crosses midnight
and belongs to the day it starts on.  The first window that matches wins (runners attach
a ``min_runners`` to each).  Pure: the time comes in as an argument.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

from keel.validate import Problems, Reader

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_ALIASES = {name: i for i, name in enumerate(DAYS)}
_DAY_ALIASES.update({full: i for i, full in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))})
_TIME_RE = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")


@dataclass(frozen=True)
class Window:
    days: frozenset[int]        # 0 = Monday
    start_min: int              # minutes after midnight
    end_min: int                # 1..1440; <= start_min means "until the next day"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def crosses_midnight(self) -> bool:
        return self.end_min <= self.start_min

    def contains(self, weekday: int, minute: int) -> bool:
        if not self.crosses_midnight:
            return weekday in self.days and self.start_min <= minute < self.end_min
        if weekday in self.days and minute >= self.start_min:
            return True
        return (weekday - 1) % 7 in self.days and minute < self.end_min


@dataclass(frozen=True)
class Schedule:
    timezone: str
    windows: tuple[Window, ...]

    def match(self, now: float) -> Window | None:
        """The first window that holds ``now`` (epoch seconds), or None."""
        local = dt.datetime.fromtimestamp(now, zoneinfo.ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        return next((w for w in self.windows if w.contains(local.weekday(), minute)), None)

    def allows(self, now: float) -> bool:
        return self.match(now) is not None


def parse_time(text: str) -> int | None:
    match = _TIME_RE.match(str(text).strip())
    if not match:
        return None
    minutes = int(match.group(1)) * 60 + int(match.group(2))
    return minutes if minutes <= 1440 else None


def parse_days(items: list[Any]) -> tuple[set[int], list[str]]:
    """``[mon-fri, sun]`` → ({0, 1, 2, 3, 4, 6}, []); the second item lists what is wrong."""
    days: set[int] = set()
    wrong: list[str] = []
    for day in items:
        text = str(day).lower()
        if "-" in text and all(p in _DAY_ALIASES for p in text.split("-", 1)):
            first, last = (_DAY_ALIASES[p] for p in text.split("-", 1))
            days.update(range(first, last + 1) if first <= last else
                        list(range(first, 7)) + list(range(0, last + 1)))
        elif text in _DAY_ALIASES:
            days.add(_DAY_ALIASES[text])
        else:
            wrong.append(f"unknown day {day!r} (use mon, tue, ... sun)")
    return days, wrong


def read(reader: Reader, extra_keys: tuple[str, ...] = ()) -> Schedule | None:
    """A schedule from a config mapping; problems go to ``reader.problems``."""
    if not reader.data:
        reader.done()
        return None
    timezone = reader.get("timezone", str, "UTC")
    try:
        zoneinfo.ZoneInfo(timezone or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        reader.problems.add(reader.sub("timezone"), f"unknown time zone {timezone!r} "
                                                    f"(use an IANA name such as Europe/Berlin)")
        timezone = "UTC"
    windows = []
    for path, item in reader.items("windows"):
        window = read_window(Reader(item, path, reader.problems), extra_keys)
        if window is not None:
            windows.append(window)
    if reader.has("windows") and not windows and not reader.problems.items:
        reader.problems.add(reader.sub("windows"), "needs at least one window")
    reader.done()
    return Schedule(timezone or "UTC", tuple(windows))


def read_window(r: Reader, extra_keys: tuple[str, ...] = ()) -> Window | None:
    days_raw = r.raw("days", list(DAYS))
    if isinstance(days_raw, str):
        days_raw = [d for d in re.split(r"[,\s]+", days_raw) if d]
    days: set[int] = set()
    if not isinstance(days_raw, list) or not days_raw:
        r.problems.add(r.sub("days"), "expected a list of days such as [mon, tue]")
    else:
        days, wrong = parse_days(days_raw)
        for message in wrong:
            r.problems.add(r.sub("days"), message)
    times = {}
    for key, default in (("from", "00:00"), ("to", "24:00")):
        value = r.raw(key, default)
        minutes = parse_time(str(value)) if isinstance(value, (str, int)) else None
        if minutes is None:
            r.problems.add(r.sub(key), f"expected a time HH:MM between 00:00 and 24:00, got {value!r}")
        times[key] = minutes
    extra = {key: r.raw(key) for key in extra_keys if r.has(key)}
    r.done()
    if times["from"] is None or times["to"] is None or not days:
        return None
    if times["from"] == 1440:
        r.problems.add(r.sub("from"), "a window cannot start at 24:00")
        return None
    return Window(frozenset(days), times["from"], times["to"] or 1440, extra)


def parse(data: Any, source: str = "schedule") -> Schedule | None:
    problems = Problems(source)
    schedule = read(Reader(data, "", problems))
    problems.raise_if_any()
    return schedule
