"""One-shot plans past the threshold: on to the level only while the moves still pay.

Once the cluster is balanced (its figure within the threshold, no node hot by itself) a
one-shot plan goes on towards the level (half the threshold) only while each move does
at least ``RETURNS`` of what the plan's moves have done per GiB; then it stops, and says
``returns diminish``.  Planned again, the cluster is balanced."""

from __future__ import annotations

from balance_helpers import cluster, node, violations, vm
from bench import instances as gen
from keel import words
from keel.balance import planner
from keel.balance.balancer import make_plan
from keel.balance.history import History
from keel.balance.level import _triggered, level_reached
from keel.balance.settings import BalancingSettings

NOW = 1_800_000_000.0


def dear_end():
    """Three nodes whose way to the level ends in dear moves once they are balanced."""
    return gen.skewed(3, 30, seed=2).snapshot


def one_shot(snapshot, config=None):
    return make_plan(snapshot, config or BalancingSettings(), History(), NOW, oneshot=True)


def test_a_balanced_cluster_is_not_levelled_further_for_little_per_gib(monkeypatch):
    snap = dear_end()
    config = BalancingSettings()
    plan = one_shot(snap, config)
    assert plan.verdict == words.PLANNED and plan.stopped == words.DIMINISHING
    after = gen.model(gen.apply(snap, plan.moves), config)
    assert not _triggered(after, config) and not level_reached(after, config)
    assert "returns diminish" in plan.reason
    assert violations(snap, config, plan) == []
    # without the rule it goes on to the level, along the same way, for more GiB
    monkeypatch.setattr(planner, "RETURNS", 0.0)
    full = one_shot(snap, config)
    assert full.stopped == words.LEVEL_REACHED
    assert plan.bytes_moved < full.bytes_moved
    assert {m.vmid for m in plan.moves} <= {m.vmid for m in full.moves}


def test_where_returns_diminish_the_cluster_planned_again_is_balanced():
    snap = dear_end()
    plan = one_shot(snap)
    again = one_shot(gen.apply(snap, plan.moves))
    assert again.verdict == words.BALANCED and again.moves == ()


def test_while_the_cluster_is_over_the_threshold_returns_do_not_stop_the_plan():
    # the rule never stops a plan short of balanced: it applies only past the threshold
    config = BalancingSettings()
    for snap in (gen.skewed(16, 160, seed=116).snapshot, gen.mixed(10, 100, seed=110).snapshot,
                 gen.rules(10, 100, seed=110, bundles=4, groups=2, pinned=5, ignored=1, locked=1).snapshot):
        plan = one_shot(snap, config)
        assert plan.stopped in (words.LEVEL_REACHED, words.DIMINISHING)
        assert not _triggered(gen.model(gen.apply(snap, plan.moves), config), config)


def test_even_moves_go_on_to_the_level():
    # forty like guests on one node: every move does about what the others did, so the
    # plan goes on to the level as before
    names = [f"n{i}" for i in range(4)]
    guests = [vm(100 + i, names[0], cores=1, mem_gib=2, cpu=0.3, used_gib=1.5) for i in range(40)]
    snap = cluster([node(n, cpus=32, mem_gib=128) for n in names], guests)
    plan = one_shot(snap)
    assert plan.stopped == words.LEVEL_REACHED


def test_the_rule_is_a_prefix_rule_a_looser_threshold_stops_no_later():
    snap = dear_end()
    gib = [one_shot(snap, BalancingSettings(threshold=t)).bytes_moved for t in (0.04, 0.10, 0.15, 0.25)]
    assert gib == sorted(gib, reverse=True)
