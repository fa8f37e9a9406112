"""Ordering moves into waves: limits, memory, and which move may fill a free slot."""

from __future__ import annotations

from bench import instances as gen
from keel import words
from keel.balance import sequence
from keel.balance.balancer import make_plan
from keel.balance.history import History
from keel.balance.plan import Move

GiB = 1024 ** 3
NODES = ("n1", "n2", "n3")


def move(vmid: int, source: str, target: str, gib: float = 1, reason: str = words.BALANCE) -> Move:
    return Move(vmid, f"vm{vmid}", "qemu", source, target, reason, "", int(gib * GiB))


class Worse:
    """A judge that calls the moves of the given guests harmful, and records what it saw."""

    def __init__(self, harmful: set[int]) -> None:
        self.harmful = harmful
        self.asked: list[tuple[list[int], list[int]]] = []
        self.made_moves: list[int] = []

    def worsens(self, started, moves) -> bool:
        self.asked.append(([m.vmid for m in started], [m.vmid for m in moves]))
        return any(m.vmid in self.harmful for m in moves)

    def made(self, moves) -> None:
        self.made_moves += [m.vmid for m in moves]


def order(moves, judge=None, concurrent=2, per_node=1, cap_gib=100):
    used = {n: 0.0 for n in NODES}
    cap = {n: cap_gib * GiB for n in NODES}
    done, skipped = sequence.order(moves, used, cap, {}, {}, concurrent, per_node,
                                   judge=(lambda: judge) if judge else None)
    assert not skipped
    return {m.vmid: m.wave for m in done}


# Plan order: 1 and 2 both go into n3 (one at a time), 3 is free to fill wave 1's second slot.
PLAN = [move(1, "n1", "n3", 16), move(2, "n1", "n3", 1), move(3, "n2", "n1", 1)]


def test_without_a_judge_a_later_move_fills_a_free_slot():
    assert order(PLAN) == {1: 1, 3: 1, 2: 2}


def test_a_move_that_would_overtake_and_worsens_waits_for_the_plans_order():
    judge = Worse({3})
    assert order(PLAN, judge) == {1: 1, 2: 2, 3: 2}
    assert ([1], [3]) in judge.asked            # asked on top of what wave 1 had started
    assert judge.made_moves == [1, 2, 3]        # the judge follows the waves as they are made


def test_a_move_that_helps_may_still_fill_the_slot():
    assert order(PLAN, Worse(set())) == {1: 1, 3: 1, 2: 2}


def test_the_judge_is_asked_only_about_overtaking_moves():
    judge = Worse({1, 2, 3})
    plan = [move(1, "n1", "n3"), move(3, "n2", "n1")]           # nothing ahead of 3 waits
    assert order(plan, judge) == {1: 1, 3: 1}
    assert judge.asked == []


def test_mandatory_moves_are_never_held_back():
    plan = [PLAN[0], PLAN[1], move(3, "n2", "n1", reason=words.MAINTENANCE)]
    assert order(plan, Worse({3})) == {1: 1, 3: 1, 2: 2}


def test_a_harmful_move_still_goes_when_nothing_else_could():
    # 2 waits for room on n3 that 3 makes by leaving it: holding 3 back would drop 2
    plan = [move(1, "n1", "n2", 1), move(2, "n1", "n3", 60), move(3, "n3", "n2", 60)]
    used = {"n1": 70.0 * GiB, "n2": 0.0, "n3": 60.0 * GiB}
    cap = {n: 100.0 * GiB for n in NODES}
    done, skipped = sequence.order(plan, used, cap, {}, {}, 2, 1, judge=lambda: Worse({3}))
    assert not skipped
    waves = {m.vmid: m.wave for m in done}
    assert waves[3] < waves[2]


def test_each_plan_gets_a_fresh_judge():
    made = []

    def fresh():
        made.append(Worse(set()))
        return made[-1]
    sequence.order(PLAN, {n: 0.0 for n in NODES}, {n: 100.0 * GiB for n in NODES}, {}, {}, 2, 1,
                   judge=fresh)
    assert len(made) == 1 and made[0].made_moves == [1, 3, 2]


def test_on_the_real_load_a_move_that_would_level_less_waits():
    """The bench's 3 x 30: vm110 and vm118 both go to pve3, so vm118 waits for wave 2;
    vm125 (pve2 -> pve1) could fill wave 1's free slot, but on its own it would make the
    imbalance worse there, so it waits for vm118 (before: 0.095 -> 0.106 after wave 1)."""
    inst = gen.plain(3, 30, seed=11, name="small")
    settings = inst.settings(threshold=0.01)
    plan = make_plan(inst.snapshot, settings, History(), inst.snapshot.taken_at)
    waves = {m.vmid: m.wave for m in plan.moves}
    assert [(m.vmid, m.target) for m in plan.moves[:2]] == [(110, "pve3"), (118, "pve3")]
    assert waves[110] == 1 and waves[118] == waves[125] == 2
    model = gen.model(inst.snapshot, settings)
    levels = [model.figures().keel]
    for wave in sorted(set(waves.values())):
        for m in plan.moves:
            if m.wave == wave:
                model.move([m.vmid], m.source, m.target)
        levels.append(model.figures().keel)
    assert levels == sorted(levels, reverse=True)       # every wave leaves the cluster more level
