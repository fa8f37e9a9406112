"""How many runners a scale set should have: pure, with the time as an argument.

``desired = min(max_runners, min_runners in force + assigned jobs)``, where the jobs are
those GitHub has assigned the scale set and not completed (running or waiting), and
``min_runners`` is its schedule's window's when one is in force.  A paused scale set
(``paused: true``, ``keel runners pause``, or a window with ``max_runners: 0``) wants none
and tells GitHub it has no room; a draining one (``keel runners drain``) keeps no reserve
and tells GitHub it has room for the jobs it already has, and no more.

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
    paused: bool              # paused: true in the config, or paused at run time
    off_schedule: bool        # a window with max_runners 0 is in force
    draining: bool = False    # drained at run time: the jobs it has, then no more


def want(settings: ScaleSetSettings, now: float, assigned: int, control: str | None = None) -> Want:
    """``control``: ``"paused"`` or ``"draining"`` (``keel runners pause|drain``), or None."""
    window_max = settings.max_runners_at(now)
    minimum = min(settings.min_runners_at(now), window_max)
    paused = settings.paused or control == "paused"
    draining = control == "draining" and not paused
    off_schedule = window_max == 0 and not paused
    cap = 0 if paused else window_max
    assigned = max(0, assigned)
    if draining:
        minimum, cap = 0, min(cap, assigned)
    desired = 0 if cap == 0 else min(cap, minimum + assigned)
    return Want(desired, 0 if cap == 0 else minimum, cap, assigned, paused, off_schedule, draining)
