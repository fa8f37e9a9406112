"""When to act on a plan: hold rounds and allowed hours (anti-flapping lives here too).

The planner already refuses plans that are not worth it (threshold, margin) and moves
that come too soon (cooldown, ping-pong).  The guard adds what needs rounds: the
imbalance must persist for ``hold`` consecutive rounds before balance moves are made,
and only inside the allowed hours.  Mandatory moves (maintenance, broken rules) never wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from keel import words
from keel.balance.plan import Plan
from keel.balance.settings import BalancingSettings


@dataclass(frozen=True)
class Decision:
    act: bool                   # run the plan's moves now
    verdict: str
    reason: str
    hold_rounds: int            # carry this into the next round
    mandatory_only: bool = False


def decide(plan: Plan, settings: BalancingSettings, now: float, hold_rounds: int) -> Decision:
    mandatory = plan.mandatory_moves()
    if plan.verdict not in (words.PLANNED, words.STUCK, words.NOT_WORTH_IT, words.BALANCED):
        return Decision(False, plan.verdict, plan.reason, 0)
    if plan.verdict != words.PLANNED:
        rounds = hold_rounds + 1 if plan.verdict in (words.STUCK, words.NOT_WORTH_IT) else 0
        # a plan not worth it for balance keeps its mandatory moves: they go, never waiting
        return Decision(bool(mandatory), plan.verdict, plan.reason
                        + (f"; {len(mandatory)} mandatory moves go ahead" if mandatory else ""),
                        rounds, mandatory_only=bool(mandatory))
    only_mandatory = len(mandatory) == len(plan.moves)
    if only_mandatory:
        return Decision(True, words.PLANNED, plan.reason, hold_rounds, mandatory_only=True)
    if settings.schedule is not None and not settings.schedule.allows(now):
        return Decision(bool(mandatory), words.OUTSIDE_SCHEDULE,
                        "balancing is not allowed at this hour"
                        + (f"; {len(mandatory)} mandatory moves go ahead" if mandatory else ""),
                        0, mandatory_only=bool(mandatory))
    rounds = hold_rounds + 1
    if rounds < settings.hold:
        return Decision(bool(mandatory), words.HOLDING,
                        f"imbalanced for {rounds} of {settings.hold} rounds",
                        rounds, mandatory_only=bool(mandatory))
    return Decision(True, words.PLANNED, plan.reason, 0)
