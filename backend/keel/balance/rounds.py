"""Continuous balancing, one round at a time: sample → plan → decide → act → remember.

``keel balance`` runs rounds on a timer; the engine (once it exists) runs the same
rounds on its leader.  Time and sleeping come in from outside, so that tests can drive
a day of simulated load in seconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from keel.balance import guestconfig
from keel.balance.balancer import make_plan
from keel.balance.executor import Execution, Executor
from keel.balance.guard import Decision, decide
from keel.balance.journal import Journal
from keel.balance.plan import Plan
from keel.balance.settings import BalancingSettings
from keel.pve import snapshot as snapshots
from keel.pve.client import PveClient


@dataclass
class RoundResult:
    at: float
    plan: Plan
    decision: Decision
    execution: Execution | None = None
    snapshot: Any = None

    @property
    def moved(self) -> int:
        return sum(1 for r in self.execution.results if r.ok) if self.execution else 0

    def line(self) -> dict[str, Any]:
        return {"time": self.at, "verdict": self.decision.verdict, "reason": self.decision.reason,
                "imbalance": round(self.plan.before.figures.keel, 4), "planned": len(self.plan.moves),
                "moved": self.moved}


def iter_guest_samples(snapshot: Any) -> Iterator[tuple[str, tuple[float, float]]]:
    """The load sample of every running guest and online node, for ``add_samples``."""
    for guest in snapshot.guests.values():
        if guest.running:
            yield f"guest/{guest.vmid}", (guest.cpu_frac * guest.maxcpu, float(guest.mem))
    for node in snapshot.nodes.values():
        if node.online:
            yield f"node/{node.name}", (node.cpu_cores, float(node.mem))


class Rounds:
    def __init__(self, client: PveClient, settings: BalancingSettings, store: Any,
                 requested_by: str = "keel balance", on_event: Callable[[dict], None] | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 poll_s: float = 2.0, cancel: threading.Event | None = None,
                 journal: Callable[[], Journal] | None = None, abandon: threading.Event | None = None):
        self.cancel = cancel
        self.journal = journal
        self.abandon = abandon
        self.client = client
        self.settings = settings
        self.store = store
        self.requested_by = requested_by
        self.on_event = on_event
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s

    def round(self, apply: bool) -> RoundResult:
        """One round.  Without ``apply`` it is a dry run: the decision is made and recorded,
        nothing moves.  With it, mandatory moves go at once and balance moves once the guard
        lets them."""
        settings = self.settings
        now = self.clock()
        snap = snapshots.collect(self.client, psi=settings.mode == "psi", now=now)
        self.store.add_samples(now, dict(iter_guest_samples(snap)), keep_s=max(settings.window_s * 2, 600))
        history = self.store.history(now)
        samples = self.store.samples(now - settings.window_s) or None
        plan = make_plan(snap, settings, history, now, samples,
                         configs=guestconfig.Reader(self.client, self.clock))
        decision = decide(plan, settings, now, history.hold_rounds)
        self.store.put("hold_rounds", decision.hold_rounds)
        result = RoundResult(now, plan, decision, snapshot=snap)
        if decision.act and apply:
            moves = plan.mandatory_moves() if decision.mandatory_only else plan.moves
            if moves:
                result.execution = self.execute(replace(plan, moves=moves))
        self.store.decision(now, decision.verdict, decision.reason, plan.before.figures.keel, result.moved)
        return result

    def execute(self, plan: Plan) -> Execution:
        executor = Executor(self.client, self.settings, self.store, requested_by=self.requested_by,
                            on_event=self.on_event, cancel=self.cancel, clock=self.clock, sleep=self.sleep,
                            poll_s=self.poll_s, journal=self.journal() if self.journal else None,
                            abandon=self.abandon, cancel_reason=lambda: "this node stopped leading")
        return executor.run(plan, kind="round")
