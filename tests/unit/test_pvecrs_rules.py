"""HA rules as PVE's CRS applies them: compiling, bundles, candidates, start placement."""

from __future__ import annotations

import doctest

import pytest

import keel.balance.pvecrs_rules as pvecrs_rules
from keel.balance.pvecrs import ResourceStats
from keel.balance.pvecrs_rules import (Bundle, HaResourceState, bundle_candidates, compile_rules,
                                       migration_bundles, motion_in_progress, node_affinity,
                                       resource_affinity, select_service_node)
from keel.model import HaRule

NODES = ["node1", "node2", "node3"]


def pos(name, *sids):
    return HaRule(name, "resource-affinity", sids, affinity="positive")


def neg(name, *sids):
    return HaRule(name, "resource-affinity", sids, affinity="negative")


def pin(name, nodes, *sids, strict=False):
    return HaRule(name, "node-affinity", sids, nodes=nodes, strict=strict)


def started(sid, node, state="started", **kw):
    return HaResourceState(sid, state, node, **kw)


def states(*items):
    return {s.sid: s for s in items}


def test_docstring_examples_hold():
    result = doctest.testmod(pvecrs_rules)
    assert result.attempted > 0 and result.failed == 0


# compiling

def test_non_strict_node_affinity_lets_other_nodes_in_at_priority_minus_one():
    rules = compile_rules([pin("p", {"node1": 2, "node2": 1}, "vm:1"),
                           pin("s", {"node3": 0}, "vm:2", strict=True)], NODES)
    assert rules.node_affinity["vm:1"] == {"node1": 2, "node2": 1, "node3": -1}
    assert rules.node_affinity["vm:2"] == {"node3": 0}


def test_connected_positive_rules_merge_even_when_pves_single_pass_would_not():
    # PVE groups rules in one pass sorted by their lowest sid: {a,d}, {b,c}, then {c,d} joins
    # the first group only, leaving {b,c} apart.  Keel takes the connected components.
    rules = compile_rules([pos("r1", "vm:a", "vm:d"), pos("r2", "vm:b", "vm:c"),
                           pos("r3", "vm:c", "vm:d")], NODES)
    assert rules.positive["vm:a"] == {"vm:b", "vm:c", "vm:d"}


def test_negative_affinity_is_inherited_through_positive_partners():
    rules = compile_rules([pos("t", "vm:1", "vm:2"), neg("a", "vm:2", "vm:3")], NODES)
    assert rules.negative["vm:1"] == {"vm:3"} and rules.negative["vm:3"] == {"vm:1", "vm:2"}


def test_a_bundle_shares_its_members_node_affinity_rule():
    rules = compile_rules([pos("t", "vm:1", "vm:2"), pin("p", {"node1": 0}, "vm:1", strict=True)], NODES)
    assert rules.node_affinity["vm:2"] == {"node1": 0}


@pytest.mark.parametrize("rules,dropped", [
    ([pin("p1", {"node1": 0}, "vm:1"), pin("p2", {"node2": 0}, "vm:1")], {"p1", "p2"}),
    ([neg("n", "vm:1", "vm:2", "vm:3", "vm:4")], {"n"}),
    ([pos("t", "vm:1")], {"t"}),
    ([pos("t", "vm:1", "vm:2"), neg("n", "vm:1", "vm:2")], {"t", "n"}),
    ([pos("t", "vm:1", "vm:2"), pin("p", {"node1": 2, "node2": 1}, "vm:1")], {"t", "p"}),
    ([pos("t", "vm:1", "vm:2"), pin("p1", {"node1": 0}, "vm:1"), pin("p2", {"node2": 0}, "vm:2")],
     {"t", "p1", "p2"}),
    ([neg("n", "vm:1", "vm:2"), pin("p", {"node1": 0}, "vm:1", "vm:2", strict=True)], {"n", "p"}),
])
def test_infeasible_rules_are_dropped_with_a_reason(rules, dropped):
    compiled = compile_rules(rules, NODES)
    assert {rule for rule, _ in compiled.dropped} == dropped
    assert all(why for _, why in compiled.dropped)


def test_disabled_rules_do_nothing():
    rule = HaRule("n", "resource-affinity", ("vm:1", "vm:2"), disabled=True, affinity="negative")
    assert compile_rules([rule], NODES).negative == {}


def test_node_affinity_prefers_the_highest_priority_online_nodes():
    rules = compile_rules([pin("p", {"node1": 2, "node2": 2, "node3": 1}, "vm:1", strict=True)], NODES)
    assert node_affinity(rules, "vm:1", NODES) == ({"node1", "node2", "node3"}, {"node1", "node2"})
    assert node_affinity(rules, "vm:1", ["node3"]) == ({"node3"}, {"node3"})
    assert node_affinity(rules, "vm:1", []) == (set(), set())
    assert node_affinity(rules, "vm:9", ["node2"]) == ({"node2"}, {"node2"})


def test_resource_affinity_follows_partners_that_move():
    rules = compile_rules([pos("t", "vm:1", "vm:2"), neg("n", "vm:1", "vm:3")], NODES)
    res = states(started("vm:1", "node1"), started("vm:2", "node1", "migrate", target="node2"),
                 started("vm:3", "node2", "relocate", target="node3"))
    together, separate = resource_affinity(rules, "vm:1", res, NODES)
    assert together == {"node2": 1} and separate == {"node2", "node3"}


# bundles and candidates

def test_bundles_are_co_located_started_partners_led_by_the_first_sid():
    rules = compile_rules([pos("t", "vm:2", "vm:1", "vm:3")], NODES)
    res = states(started("vm:1", "node1"), started("vm:2", "node1"),
                 started("vm:3", "node1", "request_stop"), started("vm:4", "node2"))
    bundles = migration_bundles(res, rules, NODES)
    assert bundles == [Bundle("vm:1", ("vm:1", "vm:2"), "node1", ("node2", "node3")),
                       Bundle("vm:4", ("vm:4",), "node2", ("node1", "node3"))]


def test_split_or_moving_bundles_stay_put():
    rules = compile_rules([pos("t", "vm:1", "vm:2"), pos("u", "vm:3", "vm:4")], NODES)
    res = states(started("vm:1", "node1"), started("vm:2", "node2"),
                 started("vm:3", "node1"), started("vm:4", "node1", "migrate", target="node2"))
    assert migration_bundles(res, rules, NODES) == []


def test_targets_honour_priority_negative_partners_and_the_current_node():
    rules = compile_rules([pin("p", {"node1": 1, "node2": 1, "node3": 0}, "vm:1"),
                           neg("n", "vm:2", "vm:4"), pin("q", {"node1": 0}, "vm:3", strict=True)], NODES)
    res = states(started("vm:1", "node1"), started("vm:2", "node2"), started("vm:3", "node1"),
                 started("vm:4", "node3"))
    assert migration_bundles(res, rules, NODES) == [
        Bundle("vm:1", ("vm:1",), "node1", ("node2",)), Bundle("vm:2", ("vm:2",), "node2", ("node1",)),
        Bundle("vm:4", ("vm:4",), "node3", ("node1",))]
    res = states(started("vm:1", "node3"))
    assert migration_bundles(res, rules, ["node2", "node3"])[0].targets == ("node2",)


def test_multi_priority_node_affinity_and_resource_affinity_do_not_mix():
    rules = compile_rules([pin("p", {"node1": 1, "node2": 0}, "vm:1"), neg("n", "vm:1", "vm:2")], NODES)
    assert {rule for rule, _ in rules.dropped} == {"p", "n"}
    assert rules.node_affinity == {} and rules.negative == {}


def test_motion_in_progress_counts_moves_and_queued_moves_but_not_stops():
    assert motion_in_progress(states(started("vm:1", "node1", "relocate", target="node2")))
    assert motion_in_progress(states(started("vm:1", "node1", cmd="migrate")))
    assert not motion_in_progress(states(started("vm:1", "node1", cmd="stop"),
                                         started("vm:2", "node1", "request_start_balance", target="node2")))


def test_bundle_candidates_carry_the_summed_stats_for_each_target():
    one = ResourceStats(1.0, 2.0, 100, 200)
    cands = bundle_candidates([Bundle("vm:1", ("vm:1", "vm:2"), "node1", ("node2", "node3"))],
                              {"vm:1": one, "vm:2": one})
    assert [(c.migration.target, c.stats) for c in cands] == [
        ("node2", ResourceStats(2.0, 4.0, 200, 400)), ("node3", ResourceStats(2.0, 4.0, 200, 400))]


# start placement

SCORES = {"node1": 0.2, "node2": 0.9, "node3": 0.5}


def place(rules, res, sid, preference="none", failback=True, online=NODES, scores=SCORES):
    return select_service_node(compile_rules(rules, NODES), sid, res, online, lambda: scores,
                               failback=failback, preference=preference)


def test_placement_stays_put_unless_asked_for_the_best_node():
    res = states(started("vm:1", "node1"))
    assert place([], res, "vm:1") == "node1"
    assert place([], res, "vm:1", "best-score") == "node2"


def test_placement_moves_to_a_preferred_node_unless_failback_is_off():
    rules = [pin("p", {"node3": 1}, "vm:1")]
    res = states(started("vm:1", "node1"))
    assert place(rules, res, "vm:1") == "node3"
    assert place(rules, res, "vm:1", failback=False) == "node1"


def test_placement_joins_the_majority_of_positive_partners_and_avoids_negative_ones():
    res = states(started("vm:1", "node1", "request_start"), started("vm:2", "node3"),
                 started("vm:3", "node3"), started("vm:4", "node2"), started("vm:5", "node2"))
    assert place([pos("t", "vm:1", "vm:2", "vm:3", "vm:4")], res, "vm:1", "best-score") == "node3"
    assert place([neg("n", "vm:1", "vm:4")], res, "vm:1", "best-score") == "node3"


def test_try_next_skips_failed_nodes_and_ties_go_by_name():
    res = states(started("vm:1", "node2", failed_nodes=("node2",)))
    assert place([], res, "vm:1", "try-next") == "node3"
    assert place([], res, "vm:1", "best-score", scores={"node1": 0.5, "node2": 0.5, "node3": 0.5}) == "node1"


def test_maintenance_fallback_node_wins_and_no_allowed_node_means_none():
    res = states(started("vm:1", "node1", maintenance_node="node3"))
    assert place([], res, "vm:1", "best-score") == "node3"
    strict = [pin("p", {"node1": 0}, "vm:1", strict=True)]
    assert place(strict, states(started("vm:1", "node2")), "vm:1", online=["node2", "node3"]) is None
    with pytest.raises(ValueError):
        place([], res, "vm:1", "random")
