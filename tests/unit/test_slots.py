"""The executor's slots: a move starts when what it depends on has ended and a slot is
free (issue 14: waves waited for their slowest migration; bundles exceeded the limits)."""

from __future__ import annotations

from dataclasses import dataclass

from keel.balance import slots


@dataclass
class M:
    vmid: int
    source: str
    target: str
    wave: int


def test_a_move_waits_only_for_earlier_moves_into_or_out_of_its_target():
    moves = [M(1, "a", "b", 1), M(2, "c", "d", 1), M(3, "a", "e", 2), M(4, "f", "g", 2), M(5, "b", "a", 3),
             M(1, "b", "c", 3)]
    # 3 leaves a while 1 may still be leaving it: a source only loses memory and guests
    assert slots.dependencies(moves) == [set(), set(), set(), set(), {0, 2}, {0, 1}]


def test_a_free_slot_is_filled_at_once_within_the_limits():
    moves = [M(1, "a", "b", 1), M(2, "a", "c", 1), M(3, "d", "e", 2), M(4, "d", "b", 2)]
    deps = slots.dependencies(moves)
    two = slots.Slots(concurrent=2, per_node=1)
    # a's two moves may not leave together (per_node 1): the next independent one fills in
    assert two.startable(moves, deps, [0, 1, 2, 3], [], set()) == [0, 2]
    # move 0 still runs, 2 ended: 3 goes to b, where 0 is arriving: it waits; 1 may not leave a
    assert two.startable(moves, deps, [1, 3], [0], {2}) == []
    assert two.startable(moves, deps, [1, 3], [], {0, 2}) == [1, 3]


def test_moves_into_a_node_start_in_the_plans_order():
    moves = [M(1, "c", "a", 1), M(2, "x", "y", 1), M(3, "y", "a", 2), M(4, "b", "c", 2)]
    deps = slots.dependencies(moves)
    many = slots.Slots(concurrent=4, per_node=2)
    # 3 waits for 1 into a; 4 into c waits for 1 out of c
    assert deps == [set(), set(), {0}, {0}]
    assert many.startable(moves, deps, [2, 3], [0, 1], set()) == []
    moves[3] = M(4, "b", "a", 2)             # a second move into a: it does not pass the first
    deps = slots.dependencies(moves)
    assert many.startable(moves, deps, [2, 3], [0], set()) == []
    assert many.startable(moves, deps, [2, 3], [1], {0}) == [2, 3]


def test_each_guest_of_a_bundle_counts_against_the_limits():
    bundle = [M(1, "a", "b", 1), M(2, "a", "b", 1), M(3, "a", "b", 1)]
    deps = slots.dependencies(bundle)
    assert slots.Slots(concurrent=2, per_node=1).startable(bundle, deps, [0, 1, 2], [], set()) == [0]
    assert slots.Slots(concurrent=2, per_node=2).startable(bundle, deps, [0, 1, 2], [], set()) == [0, 1]


def test_the_eta_plays_the_rest_forward_on_the_same_rules():
    moves = [M(1, "a", "b", 1), M(2, "c", "d", 1), M(3, "a", "d", 2)]
    deps = slots.dependencies(moves)
    two = slots.Slots(concurrent=2, per_node=1)
    # 1 and 2 run 10 s and 30 s; 3 (20 s) waits for 2, into d: 30 + 20
    assert slots.eta(moves, deps, two, [0, 1, 2], {}, set(), {0: 10, 1: 30, 2: 20}) == 50
    # 2 has 5 s left, 3 waits for it
    assert slots.eta(moves, deps, two, [2], {1: 5.0}, {0}, {2: 20}) == 25
