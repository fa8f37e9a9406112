"""Running a method on an instance round after round, as continuous mode would.

Each round plans on the current state (``make_plan`` with the history of the moves made
so far, so cooldown and ping-pong apply), replays the plan's waves to count rule and
memory violations in every state on the way, then moves the guests and goes again, a
minute later (or when the plan's migrations are done, if that is later).  A run stops
when a round plans nothing (any verdict but PLANNED) or at its round cap.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from balance_helpers import GiB, violations
from bench import instances as inst_mod
from bench.instances import Instance
from keel import words
from keel.balance.balancer import make_plan
from keel.balance.history import History, MoveRecord
from keel.balance.plan import Figures, Plan
from keel.balance.settings import BalancingSettings
from keel.model import Snapshot

INTERVAL_S = 60.0


@dataclass
class Run:
    instance: str
    size: str
    method: str                 # keel, keel*, bruteforce, topsis
    before: Figures
    after: Figures
    rounds: int = 0
    moves: int = 0
    gib: float = 0.0
    violations: list[str] = field(default_factory=list)
    plan_s: list[float] = field(default_factory=list)
    verdict: str = ""           # of the last round
    reason: str = ""            # ... and why
    capped: bool = False
    returned: int = 0           # guests that went back to a node they had left
    moved_twice: int = 0        # guests moved more than once
    trajectory: list[tuple[float, float, float]] = field(default_factory=list)  # (GiB, keel, pve)
    notes: list[str] = field(default_factory=list)
    final: Snapshot | None = None

    @property
    def plan_median(self) -> float:
        return statistics.median(self.plan_s) if self.plan_s else 0.0

    def gib_to_reach(self, level: float, figure: int = 1) -> float | None:
        """The fewest GiB after which this run's figure (1 Keel's, 2 PVE's) was at or
        below ``level``; None if it never was."""
        for point in self.trajectory:
            if point[figure] <= level + 1e-9:
                return point[0]
        return None

    def to_json(self) -> dict:
        def figs(f: Figures) -> dict:
            return {"keel": round(f.keel, 5), "pve": round(f.pve, 5), "peak": round(f.peak, 5)}
        return {"instance": self.instance, "size": self.size, "method": self.method,
                "before": figs(self.before), "after": figs(self.after), "rounds": self.rounds,
                "moves": self.moves, "gib": round(self.gib, 2), "violations": self.violations[:20],
                "violation_count": len(self.violations),
                "plan_s_median": round(self.plan_median, 4),
                "plan_s_max": round(max(self.plan_s, default=0), 4),
                "verdict": self.verdict, "reason": self.reason, "capped": self.capped,
                "returned": self.returned, "moved_twice": self.moved_twice, "notes": self.notes}


class _Tracker:
    """Counts of what moved where, across rounds."""

    def __init__(self) -> None:
        self.left: dict[int, set[str]] = {}
        self.count: dict[int, int] = {}
        self.returned: set[int] = set()

    def record(self, plan: Plan) -> None:
        for m in plan.moves:
            if m.target in self.left.get(m.vmid, set()):
                self.returned.add(m.vmid)
            self.left.setdefault(m.vmid, set()).add(m.source)
            self.count[m.vmid] = self.count.get(m.vmid, 0) + 1


def _round(run: Run, snap: Snapshot, settings: BalancingSettings, history: History, now: float,
           method: str, tracker: _Tracker) -> tuple[Plan, Snapshot, History, float]:
    start = time.perf_counter()
    plan = make_plan(snap, settings, history, now, method=method)
    run.plan_s.append(time.perf_counter() - start)
    run.rounds += 1
    run.verdict, run.reason = plan.verdict, plan.reason
    if plan.verdict != words.PLANNED:
        return plan, snap, history, now
    run.violations += [f"round {run.rounds}: {v}" for v in violations(snap, settings, plan)]
    model = inst_mod.model(snap, settings)
    for m in plan.moves:
        model.move([m.vmid], m.source, m.target)
        run.gib += m.mem_bytes / GiB
        f = model.figures()
        run.trajectory.append((run.gib, f.keel, f.pve))
    run.moves += len(plan.moves)
    tracker.record(plan)
    done = now + plan.est_seconds
    history = History(moves=history.moves + tuple(MoveRecord(m.vmid, m.source, m.target, done)
                                                  for m in plan.moves))
    after = now + max(INTERVAL_S, plan.est_seconds)
    snap = inst_mod.apply(snap, plan.moves, taken_at=after)
    problems = inst_mod.invalid(snap, settings)
    if problems:
        run.notes.append(f"round {run.rounds}: after it, {'; '.join(problems[:3])}")
    return plan, snap, history, after


def converge(inst: Instance, method: str, settings: BalancingSettings, cap: int = 50,
             label: str | None = None, remember: bool = True) -> Run:
    """Rounds until a round plans nothing, or ``cap`` rounds.  ``remember=False`` plans every
    round without the history of the earlier ones (no cooldown, no ping-pong window), as the
    MILP reference knows none."""
    snap = inst.snapshot
    before = inst_mod.figures(snap, settings)
    run = Run(inst.name, inst.size, label or method, before, before)
    run.trajectory.append((0.0, before.keel, before.pve))
    history, now, tracker = History(), snap.taken_at, _Tracker()
    for _ in range(cap):
        plan, snap, history, now = _round(run, snap, settings, history if remember else History(), now,
                                          method, tracker)
        if plan.verdict != words.PLANNED:
            break
    else:
        run.capped = True
    for g in snap.guests.values():
        if (g.node in settings.maintenance and not (g.template or g.lock)
                and "keel-ignore" not in g.tags):
            run.violations.append(f"{g.vmid} is still on {g.node}, which is in maintenance")
    run.after = inst_mod.figures(snap, settings)
    run.returned = len(tracker.returned)
    run.moved_twice = sum(1 for c in tracker.count.values() if c > 1)
    run.final = snap
    return run


def replay_trace(inst: Instance, method: str, settings: BalancingSettings, per_hour: int = 10) -> Run:
    """A day: every hour the loads change; rounds a minute apart until one plans nothing
    (at most ``per_hour``).  Figures are means over the 24 hours, measured after each
    hour's rounds; "before" is the same day with nothing ever moved."""
    snap = inst.snapshot
    start = snap.taken_at
    static = [inst_mod.figures(inst_mod.at_hour(inst, snap, h), settings) for h in range(inst_mod.HOURS)]
    run = Run(inst.name, inst.size, method, _mean(static), _mean(static))
    history, tracker = History(), _Tracker()
    hourly = []
    for h in range(inst_mod.HOURS):
        now = start + h * 3600.0
        snap = inst_mod.at_hour(inst, snap, h, taken_at=now)
        for _ in range(per_hour):
            plan, snap, history, now = _round(run, snap, settings, history, now, method, tracker)
            if plan.verdict != words.PLANNED or now >= start + (h + 1) * 3600.0:
                break
        hourly.append(inst_mod.figures(snap, settings))
    run.after = _mean(hourly)
    run.returned = len(tracker.returned)
    run.moved_twice = sum(1 for c in tracker.count.values() if c > 1)
    worst_static, worst = max(f.peak for f in static), max(f.peak for f in hourly)
    run.notes.append(f"worst hour's peak {worst_static:.1%} -> {worst:.1%}")
    run.final = snap
    return run


def _mean(figs: list[Figures]) -> Figures:
    n = len(figs)
    return Figures(keel=sum(f.keel for f in figs) / n, pve=sum(f.pve for f in figs) / n,
                   spread={k: sum(f.spread[k] for f in figs) / n for k in figs[0].spread},
                   peak=sum(f.peak for f in figs) / n, objective=sum(f.objective for f in figs) / n)


class Times(list):
    """Wall times of plans, and the last plan."""
    plan: Plan | None = None


def time_plans(inst: Instance, settings: BalancingSettings, repeat: int = 5, oneshot: bool = False) -> Times:
    """Wall time of ``repeat`` Keel plans on the instance as it starts (``oneshot``: as
    ``keel apply`` plans, on to the level)."""
    times = Times()
    for _ in range(repeat):
        start = time.perf_counter()
        times.plan = make_plan(inst.snapshot, settings, History(), inst.snapshot.taken_at, method="keel",
                               oneshot=oneshot)
        times.append(time.perf_counter() - start)
    return times
