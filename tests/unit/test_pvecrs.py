"""Keel's re-implementation of PVE's CRS: imbalance, TOPSIS, bruteforce, the gate, usage."""

from __future__ import annotations

import doctest
import math

import pytest

import keel.balance.pvecrs as pvecrs
import keel.balance.pvecrs_usage as pvecrs_usage
import keel.balance.topsis as topsis
from keel.balance.pvecrs import (AutoRebalanceGate, AutoRebalancer, Migration, MigrationCandidate,
                                 NodeStats, RebalanceSettings, ResourceStats, ScoredMigration,
                                 best_start_node, imbalance_after, node_imbalance, score_bruteforce,
                                 score_nodes_to_start, select_bruteforce, select_topsis,
                                 truncate_digits)
from keel.balance.pvecrs_usage import ClusterUsage, used_nodes
from keel.balance.topsis import PVE_CRITERIA, Criterion, pve_alternative, score_alternatives
from keel.model import CrsOptions

GiB = 1024**3


def node(name, cpu=0.0, maxcpu=24, mem=0, maxmem=32 * GiB):
    return NodeStats(name, cpu, maxcpu, mem, maxmem)


def moves_of(sids, source, targets, stats):
    return [MigrationCandidate(Migration(s, source, t), stats) for s in sids for t in targets]


@pytest.mark.parametrize("module", [pvecrs, pvecrs_usage, topsis])
def test_docstring_examples_hold(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# imbalance

def test_pves_worked_example_three_equal_nodes_all_load_on_one():
    # loads 1/3, 0, 0: mean 1/9, population sd 0.157, CV sqrt(2); normalised by sqrt(n-1) -> 1.0
    nodes = [node("a", cpu=8.0, mem=32 * GiB / 3), node("b"), node("c")]
    assert nodes[0].load == pytest.approx(1 / 3)
    assert node_imbalance(nodes) == pytest.approx(1.0)
    assert node_imbalance(nodes, normalised=False) == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("nodes", [[], [node("a", cpu=4.0)], [node("a"), node("b")]])
def test_no_imbalance_without_two_nodes_or_any_load(nodes):
    assert node_imbalance(nodes) == 0.0
    assert node_imbalance(nodes, normalised=False) == 0.0


def test_load_averages_cpu_and_memory_fractions():
    n = node("a", cpu=6.0, maxcpu=24, mem=16 * GiB, maxmem=32 * GiB)
    assert (n.cpu_load, n.mem_load, n.load) == (0.25, 0.5, 0.375)


def test_a_started_resource_without_cpu_limit_takes_the_whole_node():
    n = node("a", maxcpu=32).with_started(ResourceStats.configured(0, 4 * GiB))
    assert (n.cpu, n.mem) == (32.0, 4 * GiB)


def test_removing_usage_floors_at_zero():
    n = node("a", cpu=0.5, mem=GiB).without_running(ResourceStats(cpu=2.0, mem=4 * GiB))
    assert (n.cpu, n.mem) == (0.0, 0)


def test_truncation_to_fifteen_digits_makes_near_equal_imbalances_tie():
    a, b = 0.7231749488916931, 0.723174948891693
    assert a != b and truncate_digits(a) == truncate_digits(b)
    assert ScoredMigration.of(Migration("vm:1", "a", "b"), a).imbalance == truncate_digits(a)


# bruteforce, with the figures of test-crs-dynamic-auto-rebalance2

FOUR_ON_NODE1 = [node("node1", cpu=4.0, mem=16 * GiB), node("node2"), node("node3")]
ONE_VM = ResourceStats(cpu=1.0, maxcpu=2.0, mem=4 * GiB, maxmem=8 * GiB)


def test_bruteforce_picks_the_lowest_imbalance_with_pves_figures():
    cands = moves_of(["vm:101", "vm:102", "vm:103", "vm:104"], "node1", ["node2", "node3"], ONE_VM)
    best = select_bruteforce(FOUR_ON_NODE1, cands, normalised=False)
    assert best.migration == Migration("vm:101", "node1", "node2")
    assert f"{node_imbalance(FOUR_ON_NODE1, False):.2f} {best.imbalance:.2f}" == "1.41 0.94"
    # after that move: vm:102 to node3, 0.94 -> 0.35
    after = [node("node1", cpu=3.0, mem=12 * GiB), node("node2", cpu=1.0, mem=4 * GiB), node("node3")]
    cands = moves_of(["vm:102", "vm:103", "vm:104"], "node1", ["node2", "node3"], ONE_VM)
    cands += moves_of(["vm:101"], "node2", ["node1", "node3"], ONE_VM)
    best = select_bruteforce(after, cands, normalised=False)
    assert best.migration == Migration("vm:102", "node1", "node3")
    assert f"{best.imbalance:.2f}" == "0.35"


def test_bruteforce_ties_go_by_sid_then_source_then_target_whatever_the_input_order():
    cands = list(reversed(moves_of(["vm:101", "vm:102"], "node1", ["node2", "node3"], ONE_VM)))
    scored = score_bruteforce(FOUR_ON_NODE1, cands)
    assert [s.migration for s in scored] == [
        Migration("vm:101", "node1", "node2"), Migration("vm:101", "node1", "node3"),
        Migration("vm:102", "node1", "node2"), Migration("vm:102", "node1", "node3")]
    assert len({s.imbalance for s in scored}) == 1


def test_bruteforce_of_nothing_is_nothing():
    assert select_bruteforce(FOUR_ON_NODE1, []) is None
    assert select_topsis(FOUR_ON_NODE1, []) is None


def test_negative_affinity_case_figures():
    # test-crs-dynamic-constrained-auto-rebalance4: vm:101/vm:102 may not join vm:103 on node2
    nodes = [node("node1", 3.3, 24, 4294967296 + 2621440000, 48 * GiB), node("node2", maxmem=48 * GiB),
             node("node3", 1.0, 24, GiB, 48 * GiB)]
    vm101 = ResourceStats(0.9, 8.0, 4294967296, 8 * GiB)
    vm102 = ResourceStats(2.4, 8.0, 2621440000, 8 * GiB)
    vm104 = ResourceStats(1.0, 8.0, GiB, 8 * GiB)
    cands = [MigrationCandidate(Migration("vm:101", "node1", "node3"), vm101),
             MigrationCandidate(Migration("vm:102", "node1", "node3"), vm102),
             MigrationCandidate(Migration("vm:103", "node2", "node3"), ResourceStats(0, 8.0, 0, 8 * GiB)),
             MigrationCandidate(Migration("vm:104", "node3", "node1"), vm104),
             MigrationCandidate(Migration("vm:104", "node3", "node2"), vm104)]
    best = select_bruteforce(nodes, cands, normalised=False)
    assert best.migration == Migration("vm:101", "node1", "node3")
    assert f"{node_imbalance(nodes, False):.2f} -> {best.imbalance:.2f}" == "1.04 -> 0.72"


# TOPSIS

def test_pve_criteria_weigh_memory_most():
    assert [c.weight for c in PVE_CRITERIA] == [1.0, 2.0, 5.0, 10.0]
    assert topsis.normalised_weights(PVE_CRITERIA) == pytest.approx([1 / 18, 2 / 18, 5 / 18, 10 / 18])
    assert not any(c.maximize for c in PVE_CRITERIA)


def test_topsis_scores_by_hand():
    # A is better on CPU, B on memory; with weights 1,2,5,10 the distances are 5/18 and 1/18
    a, b = (1.0, 1.0, 2.0, 2.0), (2.0, 2.0, 1.0, 1.0)
    assert score_alternatives([a, b], PVE_CRITERIA) == pytest.approx([1 / 6, 5 / 6])
    assert topsis.rank_alternatives([a, b], PVE_CRITERIA) == [1, 0]


def test_topsis_all_equal_alternatives_score_zero_and_zero_columns_stay_zero():
    assert score_alternatives([(1.0, 0.0), (1.0, 0.0)], [Criterion("x", 1), Criterion("y", 1)]) == [0.0, 0.0]
    assert score_alternatives([], PVE_CRITERIA) == []


def test_topsis_maximised_criteria_prefer_high_values():
    assert topsis.rank_alternatives([(1.0,), (3.0,)], [Criterion("gain", 1.0, maximize=True)]) == [1, 0]


def test_pve_alternative_uses_rms_max_and_the_plus_one_shift():
    avg_cpu, max_cpu, avg_mem, max_mem = pve_alternative([(0.6, 0.0), (0.0, 0.8)])
    assert avg_cpu == pytest.approx(1 + math.sqrt((0.36 + 0) / 2))
    assert max_cpu == pytest.approx(1.6)
    assert avg_mem == pytest.approx(1 + math.sqrt(0.64 / 2))
    assert max_mem == pytest.approx(1.8)


def test_topsis_weighs_memory_where_bruteforce_weighs_cpu_and_memory_alike():
    # moving the CPU-heavy guest evens the combined load best; TOPSIS prefers the memory-heavy one
    nodes = [node("a", cpu=12.0, mem=12 * GiB), node("b", cpu=0.0, mem=0)]
    cpu_heavy = ResourceStats(cpu=8.0, maxcpu=8.0, mem=GiB, maxmem=GiB)
    mem_heavy = ResourceStats(cpu=1.0, maxcpu=1.0, mem=7 * GiB, maxmem=7 * GiB)
    cands = [MigrationCandidate(Migration("vm:1", "a", "b"), cpu_heavy),
             MigrationCandidate(Migration("vm:2", "a", "b"), mem_heavy)]
    assert select_bruteforce(nodes, cands).migration.sid == "vm:1"
    best = select_topsis(nodes, cands)
    assert best.migration.sid == "vm:2"
    assert best.imbalance == truncate_digits(imbalance_after(nodes, cands[1]))


def test_start_scores_prefer_the_emptier_node_and_ties_go_by_name():
    # test-crs-static1: node1 failed; node3 has the most memory left
    nodes = [NodeStats("node2", 0.0, 32, 0, 200 * 10**9), NodeStats("node3", 0.0, 32, 0, 300 * 10**9)]
    scores = score_nodes_to_start(nodes, ResourceStats.configured(2, 4 * 10**9))
    assert best_start_node(scores) == "node3"
    assert best_start_node({"b": 0.5, "a": 0.5}) == "a"
    assert best_start_node({}) is None


# settings and the gate

def test_settings_default_to_pve_5_2_and_convert_percent_for_9_2():
    assert RebalanceSettings() == RebalanceSettings(0.3, 3, 0.1, "bruteforce", False)
    s = RebalanceSettings.from_percent(30, 10)
    assert (s.threshold, s.margin, s.normalised) == (0.3, 0.1, True)
    with pytest.raises(ValueError):
        RebalanceSettings(method="random")
    crs = CrsOptions(ha="dynamic", auto_rebalance=True, auto_rebalance_threshold=0.25,
                     auto_rebalance_hold_duration=2.0, auto_rebalance_margin=0.05,
                     auto_rebalance_method="topsis")
    assert RebalanceSettings.from_crs(crs, normalised=True) == RebalanceSettings(0.25, 2, 0.05, "topsis", True)


def test_gate_counts_rounds_over_the_threshold_and_resets():
    gate = AutoRebalanceGate(RebalanceSettings(threshold=0.3, hold_duration=3))
    assert [gate.opens(0.5), gate.opens(0.5), gate.opens(0.3), gate.opens(0.5)] == [False] * 4
    assert gate.sustained_rounds == 1
    assert [gate.opens(0.5), gate.opens(0.5)] == [False, True]
    assert gate.sustained_rounds == 0


def test_gate_waits_while_something_moves_without_touching_the_counter():
    gate = AutoRebalanceGate(RebalanceSettings(hold_duration=2))
    assert gate.opens(0.9) is False
    assert gate.opens(0.9, busy=True) is False and gate.sustained_rounds == 1
    assert gate.opens(0.1, busy=True) is False and gate.sustained_rounds == 1
    assert gate.opens(0.9) is True


def test_hold_zero_opens_at_once_and_equal_to_threshold_never_opens():
    gate = AutoRebalanceGate(RebalanceSettings(threshold=0.3, hold_duration=0))
    assert gate.opens(0.31) is True
    assert gate.opens(0.3) is False


def test_margin_is_relative_and_compared_in_floating_point_as_pve_does():
    gate = AutoRebalanceGate(RebalanceSettings(margin=0.1))
    assert gate.accepts(0.5, 0.44) is True
    assert gate.accepts(0.5, 0.46) is False
    assert gate.accepts(1.0, 0.9) is False    # (1.0 - 0.9) / 1.0 is 0.09999999999999998 in f64


def test_rebalancer_decides_once_the_hold_is_over_and_builds_candidates_only_then():
    calls = []

    def candidates():
        calls.append(1)
        return moves_of(["vm:101"], "node1", ["node2", "node3"], ONE_VM)

    balancer = AutoRebalancer(RebalanceSettings(hold_duration=2))
    assert balancer.round(FOUR_ON_NODE1, candidates) is None and calls == []
    decision = balancer.round(FOUR_ON_NODE1, candidates)
    assert calls == [1]
    assert decision.command == "migrate"
    assert decision.message() == ("auto rebalance - migrate vm:101 to node2 "
                                  "(expected change for imbalance from 1.41 to 0.94)")
    assert decision.imbalance == pytest.approx(math.sqrt(2))


def test_rebalancer_refuses_a_move_under_the_margin_and_relocates_containers():
    one_vm_alone = [node("node1", cpu=1.0, mem=4 * GiB), node("node2"), node("node3")]
    balancer = AutoRebalancer(RebalanceSettings(hold_duration=1))
    assert balancer.round(one_vm_alone, moves_of(["vm:101"], "node1", ["node2"], ONE_VM)) is None
    ct = AutoRebalancer(RebalanceSettings(hold_duration=1)).round(
        FOUR_ON_NODE1, moves_of(["ct:200"], "node1", ["node2"], ONE_VM))
    assert ct.command == "relocate" and ct.message().startswith("auto rebalance - relocate ct:200 to node2")


def test_normalised_figures_are_the_raw_ones_over_sqrt_n_minus_1():
    balancer = AutoRebalancer(RebalanceSettings.from_percent(30, 10, hold_duration=1))
    decision = balancer.round(FOUR_ON_NODE1, moves_of(["vm:101"], "node1", ["node2"], ONE_VM))
    assert (round(decision.imbalance, 2), round(decision.target_imbalance, 2)) == (1.0, 0.66)


# usage bookkeeping

def test_used_nodes_follow_the_crm_state():
    online = {"a", "b"}
    assert used_nodes("started", "a", None, online) == ("a", None)
    assert used_nodes("relocate", "a", "b", online) == ("a", "b")
    assert used_nodes("request_start_balance", "a", "b", online) == (None, "b")
    assert used_nodes("started", "c", None, online) == (None, None)
    assert used_nodes("stopped", "a", None, online) == (None, None)


def test_static_usage_counts_configured_sizes_and_moving_guests_twice():
    usage = ClusterUsage("static")
    for name in ("a", "b", "c"):
        usage.add_node(name, maxcpu=8.7, maxmem=16 * GiB + 0.5)
    size = ResourceStats.configured(2, 4 * GiB)
    usage.add_ha_resource("vm:1", size, "started", "a")
    usage.add_ha_resource("vm:2", size, "migrate", "a", "b")
    usage.add_ha_resource("vm:3", size, "request_start", "c")
    nodes = {n.name: n for n in usage.balance_nodes()}
    assert nodes["a"].cpu == 4.0 and nodes["b"].cpu == 2.0 and nodes["c"].cpu == 0.0
    assert nodes["a"].maxcpu == 8 and nodes["a"].maxmem == 16 * GiB
    assert usage.start_nodes() == usage.balance_nodes()


def test_dynamic_usage_takes_measured_nodes_and_adds_only_starting_guests_for_placement():
    usage = ClusterUsage("dynamic")
    usage.add_node("a", maxcpu=8, maxmem=16 * GiB, cpu=2.0, mem=4 * GiB)
    usage.add_node("b", maxcpu=8, maxmem=16 * GiB)
    usage.add_ha_resource("vm:1", ResourceStats(1.0, 2.0, GiB, 2 * GiB), "started", "a",
                          running_flag=True)
    usage.add_ha_resource("vm:2", ResourceStats(1.0, 2.0, GiB, 2 * GiB), "request_start_balance",
                          "a", target="b")
    assert [(n.cpu, n.mem) for n in usage.balance_nodes()] == [(2.0, 4 * GiB), (0.0, 0)]
    assert [(n.cpu, n.mem) for n in usage.start_nodes()] == [(2.0, 4 * GiB), (2.0, 2 * GiB)]
    assert usage.resource("vm:2").current == "b" and not usage.resource("vm:2").running


def test_usage_candidates_sum_a_bundle_and_refuse_moving_members():
    usage = ClusterUsage("dynamic")
    usage.add_node("a", 8, 16 * GiB)
    usage.add_node("b", 8, 16 * GiB)
    usage.add_resource("vm:1", ResourceStats(1.0, 2.0, GiB, 2 * GiB), "a")
    usage.add_resource("vm:2", ResourceStats(0.5, 2.0, GiB, 2 * GiB), "a")
    usage.add_resource("vm:3", ResourceStats(0.5, 2.0, GiB, 2 * GiB), "a", target="b")
    [cand] = usage.candidates([("vm:1", ["vm:1", "vm:2"], ["b"])])
    assert cand.migration == Migration("vm:1", "a", "b") and cand.stats.cpu == 1.5
    with pytest.raises(ValueError):
        usage.candidates([("vm:1", ["vm:1", "vm:3"], ["b"])])
    with pytest.raises(ValueError):
        usage.add_resource("vm:1", ResourceStats(), "a")
    with pytest.raises(ValueError):
        ClusterUsage("basic")
