"""Weekly windows: days, 24:00, crossing midnight, time zones, first match wins."""

import datetime as dt
import zoneinfo

import pytest

from keel.errors import InvalidError
from keel.schedule import parse


def at(text: str, tz: str = "UTC") -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=zoneinfo.ZoneInfo(tz)).timestamp()


# 2026-11-30 is a Monday.
@pytest.mark.parametrize("when,expected", [
    ("2026-11-30 08:00", True), ("2026-11-30 17:59", True), ("2026-11-30 18:00", False),
    ("2026-11-30 07:59", False), ("2026-12-05 12:00", False),   # Saturday
])
def test_office_hours(when, expected):
    schedule = parse({"windows": [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "08:00", "to": "18:00"}]})
    assert schedule.allows(at(when)) is expected


@pytest.mark.parametrize("when,expected", [
    ("2026-12-04 22:00", True),    # Friday night, in the window that starts Friday
    ("2026-12-05 05:59", True),    # Saturday morning, still Friday's window
    ("2026-12-05 06:00", False),
    ("2026-11-30 05:00", False),   # Monday morning: Sunday has no window
    ("2026-12-01 03:00", True),    # Tuesday morning: Monday's window
])
def test_windows_may_cross_midnight(when, expected):
    schedule = parse({"windows": [{"days": "mon-fri", "from": "22:00", "to": "06:00"}]})
    assert schedule.allows(at(when)) is expected


def test_until_midnight_and_all_day():
    schedule = parse({"windows": [{"days": ["sun"], "from": "20:00", "to": "24:00"}, {"days": ["sat"]}]})
    assert schedule.allows(at("2026-12-06 23:59"))
    assert not schedule.allows(at("2026-12-07 00:00"))
    assert schedule.allows(at("2026-12-05 00:00")) and schedule.allows(at("2026-12-05 23:59"))


def test_time_zone_is_applied():
    schedule = parse({"timezone": "Europe/Berlin", "windows": [{"days": ["mon"], "from": "09:00", "to": "10:00"}]})
    assert schedule.allows(at("2026-11-30 08:30", "UTC"))      # 09:30 in Berlin (CET)
    assert not schedule.allows(at("2026-11-30 09:30", "UTC"))


def test_first_match_wins_and_carries_its_extras():
    from keel.schedule import read
    from keel.validate import Problems, Reader
    problems = Problems("t")
    schedule = read(Reader({"windows": [{"days": ["mon"], "from": "08:00", "to": "12:00", "min_runners": 3},
                                        {"days": ["mon"], "min_runners": 1}]}, "", problems), ("min_runners",))
    assert problems.items == []
    assert schedule.match(at("2026-11-30 09:00")).extra == {"min_runners": 3}
    assert schedule.match(at("2026-11-30 13:00")).extra == {"min_runners": 1}


def test_bad_schedules_name_every_problem():
    with pytest.raises(InvalidError) as caught:
        parse({"timezone": "Mars/Olympus", "windows": [{"days": ["mon", "funday"], "from": "25:00", "to": "7pm"},
                                                      {"day": ["tue"]}]})
    errors = caught.value.errors
    assert set(errors) == {"timezone", "windows[0].days", "windows[0].from", "windows[0].to", "windows[1].day"}


def test_no_schedule_means_always():
    assert parse({}) is None
