"""Each scale set's queue depth and busy runners over the last hour or day, for the Runners
tab's charts: from the jobs Keel has seen (``runner_jobs``), the most jobs that waited at
once and the most runners that ran a job at once within each step of the span.

A job waits from ``queued_at`` (else ``assigned_at``: GitHub gave it to the scale set)
until a runner starts it (``started_at``, else ``completed_at``), as the status's queue
counts it, and keeps a runner busy from ``started_at`` until ``completed_at``.  A job Keel has not seen finish counts until now while it was seen
within a day (GitHub cancels a job left that long), else until it was last seen.  Pure:
no I/O, no clock."""

from __future__ import annotations

import math
from typing import Any, Iterable

from keel.errors import InvalidError

SPANS = {"1h": 3600.0, "1d": 86400.0}
STEPS = 60                     # a point per minute over the hour, per 24 minutes over a day
OPEN_FOR_S = 86400.0           # a job not seen to finish counts at most this long after it was seen


def parse_span(text: str | None) -> float:
    """``1h`` or ``1d`` (or the same in seconds) → seconds; anything else is an error that
    names the value."""
    if text is None or text == "":
        return SPANS["1h"]
    if text in SPANS:
        return SPANS[text]
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds in SPANS.values():
        return float(seconds)
    raise InvalidError(f"span: expected 1h (3600) or 1d (86400), got {text!r}")


def _intervals(row: dict[str, Any], now: float) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """(waiting, busy) of one job, each (from, to) or None."""
    def end_of_open() -> float:
        seen = row.get("seen_at")
        return now if seen is None or now - float(seen) <= OPEN_FOR_S else float(seen)

    queued, assigned = row.get("queued_at"), row.get("assigned_at")
    started, completed = row.get("started_at"), row.get("completed_at")
    waiting = busy = None
    since = queued if queued is not None else assigned
    if since is not None:
        taken = started if started is not None else completed
        waiting = (float(since), float(taken) if taken is not None else end_of_open())
    if started is not None:
        busy = (float(started), float(completed) if completed is not None else end_of_open())
    return waiting, busy


def _peaks(intervals: list[tuple[float, float]], start: float, step: float, count: int) -> list[int]:
    """The most intervals open at once within each of ``count`` steps from ``start``."""
    edges: list[tuple[float, int]] = []
    for a, b in intervals:
        if b > a:
            edges.append((a, 1))
            edges.append((b, -1))
    edges.sort(key=lambda e: (e[0], e[1]))         # an end before a start at the same instant
    peaks = [0] * count
    level = 0
    i = 0
    for k in range(count):
        lo, hi = start + k * step, start + (k + 1) * step
        while i < len(edges) and edges[i][0] <= lo:     # what is open as the step begins
            level += edges[i][1]
            i += 1
        peak = level
        while i < len(edges) and edges[i][0] < hi:
            level += edges[i][1]
            i += 1
            peak = max(peak, level)
        peaks[k] = peak
    return peaks


def activity(rows: Iterable[dict[str, Any]], now: float, span_s: float = 3600.0,
             steps: int = STEPS) -> dict[str, Any]:
    """``{"span_s", "step_s", "scale_sets": {name: [[t, queued, busy], ...]}}``: ``steps + 1``
    points per scale set, the last at ``now``; each point the peak over the step that ends
    there (the first: the state at the span's start)."""
    step = span_s / steps
    now = float(math.ceil(now))                         # whole seconds, as PVE's rrddata times; up,
                                                        # so that the last step holds what began just now
    start = now - span_s - step                         # the first point's step ends at now - span
    waiting: dict[str, list[tuple[float, float]]] = {}
    busy: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        name = row.get("scale_set") or ""
        w, b = _intervals(row, now)
        waiting.setdefault(name, [])
        busy.setdefault(name, [])
        if w is not None:
            waiting[name].append(w)
        if b is not None:
            busy[name].append(b)
    out: dict[str, list[list[float]]] = {}
    for name in sorted(waiting):
        queued_peaks = _peaks(waiting[name], start, step, steps + 1)
        busy_peaks = _peaks(busy[name], start, step, steps + 1)
        out[name] = [[int(round(start + (k + 1) * step)), queued_peaks[k], busy_peaks[k]] for k in range(steps + 1)]
    return {"span_s": span_s, "step_s": step, "scale_sets": out}
