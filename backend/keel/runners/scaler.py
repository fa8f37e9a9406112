"""How many runners a scale set should have: pure, with the time as an argument.

``desired = min(max_runners, min_runners in force + assigned jobs)``, where the jobs are
those GitHub has assigned the scale set and not completed (running or waiting), and
``min_runners`` is its schedule's window's when one is in force.  A paused scale set
(``paused: true``, or a window with ``max_runners: 0``) wants none.

    >>> want(settings, now, assigned=3).desired      # min_runners 1, max 16   # doctest: +SKIP
    4
"""

from __future__ import annotations

from dataclasses import dataclass

from keel.runners.spec import ScaleSetSettings


@dataclass(frozen=True)
class Want:
    desired: int
    min_runners: int          # in force now
    max_runners: int          # in force now (0: paused)
    assigned: int
    paused: bool              # paused: true in the config
    off_schedule: bool        # a window with max_runners 0 is in force


def want(settings: ScaleSetSettings, now: float, assigned: int) -> Want:
    window_max = settings.max_runners_at(now)
    minimum = min(settings.min_runners_at(now), window_max)
    paused = settings.paused
    off_schedule = window_max == 0 and not paused
    cap = 0 if paused else window_max
    desired = 0 if cap == 0 else min(cap, minimum + max(0, assigned))
    return Want(desired, 0 if cap == 0 else minimum, cap, max(0, assigned), paused, off_schedule)
