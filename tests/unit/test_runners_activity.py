"""The runners' queue depth and busy runners over time (keel.runners.activity)."""

from __future__ import annotations

import pytest

from keel.errors import InvalidError
from keel.runners.activity import activity, parse_span

NOW = 100_000.0


def job(scale_set="small", queued=None, assigned=None, started=None, completed=None, seen=NOW):
    return {"job_id": "1", "scale_set": scale_set, "queued_at": queued, "assigned_at": assigned,
            "started_at": started, "completed_at": completed, "seen_at": seen}


def series(rows, span=3600.0):
    return activity(rows, NOW, span)["scale_sets"]


def at(points, t):
    """The point whose step holds t."""
    return next(p for p in points if p[0] - 60.0 < t <= p[0])


def test_61_points_a_minute_apart_ending_now():
    points = series([job(queued=NOW - 30)])["small"]
    assert len(points) == 61
    assert points[-1][0] == NOW
    assert points[0][0] == NOW - 3600
    assert all(b[0] - a[0] == pytest.approx(60.0) for a, b in zip(points, points[1:]))


def test_a_day_has_24_minute_steps():
    data = activity([job(queued=NOW - 30)], NOW, 86400.0)
    assert data["step_s"] == pytest.approx(1440.0)
    assert len(data["scale_sets"]["small"]) == 61


def test_a_job_waits_until_a_runner_starts_it_then_is_busy_until_completed():
    points = series([job(queued=NOW - 1000, assigned=NOW - 900, started=NOW - 690, completed=NOW - 300)])["small"]
    assert at(points, NOW - 950)[1:] == [1, 0]
    assert at(points, NOW - 800)[1:] == [1, 0]      # assigned to the scale set, no runner yet
    assert at(points, NOW - 500)[1:] == [0, 1]
    assert at(points, NOW - 100)[1:] == [0, 0]
    assert points[0][1:] == [0, 0]


def test_a_job_known_only_from_its_assignment_waits_from_then():
    points = series([job(assigned=NOW - 1000, started=NOW - 400)])["small"]
    assert at(points, NOW - 1100)[1] == 0
    assert at(points, NOW - 600)[1] == 1
    assert at(points, NOW - 200)[1:] == [0, 1]


def test_the_peak_within_a_step_is_kept():
    # three jobs each waiting 10 s inside one minute, overlapping two at a time
    rows = [job(queued=NOW - 1200 + d, started=NOW - 1190 + d, completed=NOW - 1185 + d) for d in (0, 5, 40)]
    point = at(series(rows)["small"], NOW - 1195)
    assert point[1] == 2


def test_an_open_job_counts_until_now():
    points = series([job(queued=NOW - 5000, started=NOW - 4000)])["small"]
    assert points[0][1:] == [0, 1]
    assert points[-1][1:] == [0, 1]


def test_a_job_not_seen_for_a_day_stops_counting_when_last_seen():
    rows = [job(queued=NOW - 200_000, started=NOW - 199_000, seen=NOW - 190_000)]
    points = series(rows)["small"]
    assert all(p[1:] == [0, 0] for p in points)


def test_a_queued_job_not_yet_taken_waits_until_now():
    points = series([job(queued=NOW - 90)])["small"]
    assert points[-1][1] == 1
    assert points[-2][1] == 1
    assert points[-3][1] == 0


def test_scale_sets_apart_and_sorted():
    rows = [job("medium", queued=NOW - 100), job("small", queued=NOW - 100), job("small", queued=NOW - 50)]
    data = series(rows)
    assert list(data) == ["medium", "small"]
    assert data["small"][-1][1] == 2
    assert data["medium"][-1][1] == 1


def test_a_job_before_the_span_is_left_out():
    points = series([job(queued=NOW - 9000, started=NOW - 8000, completed=NOW - 7000)])["small"]
    assert all(p[1:] == [0, 0] for p in points)


def test_an_end_and_a_start_at_one_instant_are_not_two_at_once():
    rows = [job(started=NOW - 600, completed=NOW - 300), job(started=NOW - 300, completed=NOW - 100)]
    assert max(p[2] for p in series(rows)["small"]) == 1


def test_no_jobs_no_scale_sets():
    assert series([]) == {}


@pytest.mark.parametrize("text, seconds", [(None, 3600.0), ("", 3600.0), ("1h", 3600.0), ("1d", 86400.0),
                                           ("3600", 3600.0), ("86400", 86400.0)])
def test_spans(text, seconds):
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["2h", "60", "abc", "-3600"])
def test_a_bad_span_is_named(text):
    with pytest.raises(InvalidError) as err:
        parse_span(text)
    assert "span" in str(err.value) and repr(text) in str(err.value)


def test_what_began_in_the_last_fraction_of_a_second_is_in_the_last_point():
    points = activity([job(started=NOW + 0.6)], NOW + 0.9)["scale_sets"]["small"]
    assert points[-1][0] == NOW + 1 and points[-1][2] == 1
