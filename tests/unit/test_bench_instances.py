"""The planner benchmark's instances (tests/bench/instances.py) are what they claim to be:
reproducible, realistic, within every limit at the start; the swap case needs a swap;
and the MILP reference solves the smallest one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balance_helpers import GiB, violations
from bench import instances as gen
from keel import words
from keel.balance.balancer import make_plan
from keel.balance.plan import Move


@pytest.fixture(scope="module")
def instances():
    return gen.all_instances(large=False)


def test_the_same_seed_gives_the_same_instance_and_another_seed_another():
    assert gen.fingerprint(gen.plain(3, 30, seed=11)) == gen.fingerprint(gen.plain(3, 30, seed=11))
    assert gen.fingerprint(gen.plain(3, 30, seed=11)) != gen.fingerprint(gen.plain(3, 30, seed=12))
    assert gen.fingerprint(gen.rules()) == gen.fingerprint(gen.rules())
    assert gen.fingerprint(gen.trace()) == gen.fingerprint(gen.trace())


def test_every_instance_starts_realistic_and_within_every_limit(instances):
    names = [i.name for i in instances]
    assert names == ["small", "medium", "medium", "skewed", "mixed", "rules", "maintenance", "swap", "trace"]
    for inst in instances:
        assert gen.invalid(inst.snapshot, inst.settings()) == [], inst.name
        figures = gen.figures(inst.snapshot, inst.settings())
        assert figures.keel > 0.10, f"{inst.name} has nothing to balance"
        for n in inst.snapshot.nodes.values():
            assert n.cpu_frac < 1.0 and n.mem <= 0.9 * n.maxmem, (inst.name, n)
    sizes = {(len(i.snapshot.nodes), len(i.snapshot.guests)) for i in instances}
    assert {(3, 30), (8, 200), (16, 1000)} <= sizes
    mixed = next(i for i in instances if i.name == "mixed")
    assert len({n.maxmem for n in mixed.snapshot.nodes.values()}) == 3
    rules = next(i for i in instances if i.name == "rules")
    tags = {t.split("_")[0] if t.startswith("plb") else t.rsplit("-", 1)[0]
            for g in rules.snapshot.guests.values() for t in g.tags}
    assert tags == {"keel-affinity", "plb", "keel"}      # keel-affinity-*, plb_*, keel-ignore
    maintenance = next(i for i in instances if i.name == "maintenance")
    assert maintenance.maintenance and gen.figures(maintenance.snapshot, maintenance.settings()).keel > 0


def test_the_trace_has_a_daily_cycle_and_stays_realistic_every_hour():
    inst = gen.trace()
    settings = inst.settings()
    hourly = [gen.at_hour(inst, inst.snapshot, h) for h in range(gen.HOURS)]
    assert all(gen.invalid(s, settings) == [] for s in hourly)
    kinds = inst.meta["kinds"]
    office = [v for v, k in kinds.items() if k == "office" and inst.snapshot.guests[v].running]
    load = [sum(s.guests[v].cpu_cores for v in office) for s in hourly]
    assert max(range(24), key=load.__getitem__) in range(10, 17)
    assert max(load) > 2.5 * min(load)


def test_in_the_swap_case_no_single_move_helps_but_a_swap_does():
    inst = gen.swap()
    settings = inst.settings()
    snap = inst.snapshot
    cap = {n: x.maxmem * (1 - settings.headroom) for n, x in snap.nodes.items()}
    for g in snap.guests_on("pve1"):          # nothing of the busy node fits anywhere else
        assert all(snap.nodes[n].mem + g.mem > cap[n] for n in ("pve2", "pve3"))
    assert gen.single_moves(snap, settings) == []
    assert gen.improving_swaps(snap, settings)
    for method in ("bruteforce", "topsis"):
        assert make_plan(snap, replace(settings, threshold=0.01), method=method).verdict != words.PLANNED


def test_the_replay_finds_an_overcommit_and_a_broken_rule():
    inst = gen.swap()
    settings = inst.settings()
    plan = make_plan(inst.snapshot, settings)
    g = inst.snapshot.guests_on("pve1")[0]
    too_big = Move(g.vmid, g.name, "qemu", "pve1", "pve2", words.BALANCE, "", g.mem, wave=1)
    assert any("memory limit" in v for v in violations(inst.snapshot, settings, replace(plan, moves=(too_big,))))
    rules = gen.rules()
    pinned = next(x for x in rules.snapshot.guests.values() if any(t.startswith("plb_pin_") for t in x.tags))
    away = next(n for n in rules.snapshot.nodes if f"plb_pin_{n}" not in pinned.tags)
    off = Move(pinned.vmid, pinned.name, "qemu", pinned.node, away, words.BALANCE, "", 0, wave=1)
    assert any("pins" in v for v in violations(rules.snapshot, rules.settings(), replace(plan, moves=(off,))))


def test_moving_guests_keeps_the_node_figures_consistent():
    inst = gen.plain(3, 30, seed=11)
    g = next(x for x in inst.snapshot.guests.values() if x.running and x.node == "pve1")
    moved = gen.apply(inst.snapshot, [Move(g.vmid, g.name, "qemu", "pve1", "pve3", words.BALANCE, "", g.mem)])
    assert moved.guests[g.vmid].node == "pve3"
    assert moved.nodes["pve3"].mem - inst.snapshot.nodes["pve3"].mem == g.mem
    assert moved.nodes["pve1"].mem - inst.snapshot.nodes["pve1"].mem == -g.mem
    assert abs(gen.rebuild(inst.snapshot, inst.snapshot.guests).nodes["pve1"].mem
               - inst.snapshot.nodes["pve1"].mem) < GiB // 1024


def test_the_milp_solves_the_smallest_instance_to_optimality():
    pytest.importorskip("scipy")
    from bench import milp
    inst = gen.plain(3, 30, seed=11)
    settings = inst.settings()
    # a generous limit: on a busy 2-core machine the level stage can take seconds to find
    # its first solution (the test checks what it finds, not how fast)
    ref = milp.solve(inst.snapshot, settings, time_limit=10.0, spread=False)
    before = gen.figures(inst.snapshot, settings)
    assert ref.peak.optimal and ref.peak.objective is not None
    assert ref.peak.peak == pytest.approx(ref.peak.objective, abs=1e-6)
    assert ref.peak.objective < before.peak
    assert ref.level is not None and ref.level.keel is not None and ref.level.keel < before.keel
    assert ref.level.peak <= ref.peak.objective + 1e-6


def test_keels_plan_on_the_swap_instance_is_carried_out_whole_and_helps():
    inst = gen.swap()
    settings = inst.settings(threshold=0.01)
    plan = make_plan(inst.snapshot, settings)
    assert plan.verdict == words.PLANNED
    assert not [s for s in plan.skipped if s.reason == words.NO_SAFE_ORDER]
    assert plan.after.figures.peak <= plan.before.figures.peak
    assert plan.after.figures.keel < plan.before.figures.keel * 0.6
    assert violations(inst.snapshot, settings, plan) == []


def test_a_plan_cut_short_by_its_budget_on_a_big_cluster_still_goes_ahead():
    inst = gen.plain(64, 3000, seed=3)
    plan = make_plan(inst.snapshot, inst.settings())
    assert plan.verdict == words.PLANNED, plan.reason
    assert "budget is spent" in plan.reason and len(plan.moves) <= inst.settings().limits.moves
