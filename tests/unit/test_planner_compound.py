"""The planner's compound moves, for when no single move helps: making room on a full
node, and trades of several guests between two nodes (with a light guest out of the way
if need be); each carried out in an order that never passes a node's memory limit."""

from __future__ import annotations

import numpy as np

from balance_helpers import GiB, cluster, node, violations, vm
from keel import words
from keel.balance import trades
from keel.balance.balancer import make_plan
from keel.balance.history import History
from keel.balance.loads import LoadModel
from keel.balance.settings import BalancingSettings

NOW = 1_800_000_000.0


def plan(snapshot, **settings):
    config = BalancingSettings(**settings)
    return config, make_plan(snapshot, config, History(), NOW)


def light(vmid, where, mem=4, cpu=0.05):
    return vm(vmid, where, cores=1, mem_gib=mem, used_gib=mem, cpu=cpu)


def busy(vmid, where, cores_used):
    return vm(vmid, where, cores=8, mem_gib=8, used_gib=8, cpu=cores_used / 8)


def test_light_guests_make_room_for_a_busy_one():
    # a: three busy guests, 2.8 GiB free; b: full of light ones, 2.8 GiB free; c and d:
    # 6.8 GiB free each, room for a light guest but not for a busy one.  No single move
    # and no swap fits; a light guest of c goes to d, then a busy one of a to c.
    nodes = [node(n, mem_gib=32) for n in "abcd"]
    guests = ([busy(100 + i, "a", 7.2) for i in range(3)]
              + [light(200 + i, "b") for i in range(6)]
              + [light(300 + i, "c") for i in range(5)] + [light(400 + i, "d") for i in range(5)])
    snap = cluster(nodes, guests)
    config, p = plan(snap, headroom=0.1, threshold=0.05, margin=0.0)
    assert p.verdict == words.PLANNED, p.reason
    assert any(m.detail.startswith("makes room for") for m in p.moves)
    assert any(m.vmid < 200 for m in p.moves)                   # a busy guest left a
    assert p.after.figures.keel < p.before.figures.keel
    assert violations(snap, config, p) == []


def full_nodes_case():
    """Three nodes, two busy guests each, CPU uneven, memory too tight for any busy guest
    to arrive anywhere (no node has 8 GiB free)."""
    guests = ([light(110 + i, "pve1", cpu=0.12) for i in range(7)] + [light(117, "pve1", mem=7, cpu=0.07)]
              + [busy(100, "pve1", 3.81), busy(101, "pve1", 3.99)]
              + [light(120 + i, "pve2", mem=7, cpu=0.03) for i in range(5)]
              + [busy(102, "pve2", 3.6), busy(103, "pve2", 4.13)]
              + [light(130 + i, "pve3", cpu=0.02) for i in range(5)]
              + [light(135 + i, "pve3", mem=7, cpu=0.05) for i in range(2)]
              + [busy(104, "pve3", 4.23), busy(105, "pve3", 4.26)])
    return cluster([node(n, mem_gib=64) for n in ("pve1", "pve2", "pve3")], guests)


def test_busy_guests_trade_places_on_full_nodes_after_a_light_one_steps_aside():
    snap = full_nodes_case()
    config, p = plan(snap, headroom=0.1, threshold=0.001, margin=0.0)
    assert p.verdict == words.PLANNED, p.reason
    traded = {m.vmid for m in p.moves if m.detail.startswith(("traded for", "rotates with"))}
    assert traded & {100, 101, 102, 103, 104, 105}
    assert traded - {100, 101, 102, 103, 104, 105}              # light ones made it possible
    assert p.after.figures.objective < p.before.figures.objective * 0.5
    assert violations(snap, config, p) == []


def test_three_guests_going_round_three_full_nodes_need_a_light_one_out_of_the_way():
    # x on a, y on b, z on c, 8 GiB each, every node 4.6 GiB short of room for one
    model = model_of([53, 53, 53], [57.6, 57.6, 57.6])
    footprint = np.array([8, 8, 8, 4], float) * GiB
    cur = np.array([0, 1, 2, 0])
    rotation = [(0, 1), (1, 2), (2, 0)]
    assert trades.can_order(rotation, footprint, cur, model) is None
    # with a light guest of a moved to c first: z fits on a, then y on c, then x on b
    order = trades.can_order([(3, 2)] + rotation, footprint, cur, model)
    assert order == [(3, 2), (2, 0), (1, 2), (0, 1)]


def model_of(used_gib, cap_gib):
    n = len(used_gib)
    return LoadModel([f"n{i}" for i in range(n)], {f"n{i}": i for i in range(n)}, np.ones((n, 3)),
                     np.zeros((n, 3)), np.array(used_gib, float) * GiB, np.array(cap_gib, float) * GiB,
                     np.ones(3), np.ones(n, bool), {}, {}, {})


def test_an_order_is_found_one_guest_at_a_time():
    # two full nodes trade an 8-GiB guest for two 4-GiB ones: a 4 first, then the 8, then the other 4
    model = model_of([53, 53], [57.6, 57.6])
    footprint = np.array([8, 4, 4], float) * GiB
    cur = np.array([0, 1, 1])
    assert trades.can_order([(0, 1), (1, 0), (2, 0)], footprint, cur, model) == [(1, 0), (0, 1), (2, 0)]


def test_no_order_when_neither_side_ever_fits():
    model = model_of([53, 53], [57.6, 57.6])
    footprint = np.array([8, 8], float) * GiB
    assert trades.can_order([(0, 1), (1, 0)], footprint, np.array([0, 1]), model) is None


def test_a_third_node_with_room_can_hold_one_on_the_way():
    model = model_of([53, 53, 40], [57.6, 57.6, 57.6])
    footprint = np.array([8, 8], float) * GiB
    assert trades.can_order([(0, 1), (1, 0)], footprint, np.array([0, 1]), model) is not None
