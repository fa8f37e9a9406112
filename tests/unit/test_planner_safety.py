"""Property tests: on random clusters and rules, no plan ever breaks a hard rule or
overcommits memory — not at the end, and not in any state in between."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from balance_helpers import GiB, cluster, node, vm
from keel import words
from keel.balance.balancer import make_plan
from keel.balance.history import History
from keel.balance.settings import BalancingSettings, Limits

NOW = 1_800_000_000.0
HOST_GIB = 2.0     # balance_helpers adds this per node


@st.composite
def clusters(draw):
    n_nodes = draw(st.integers(2, 6))
    names = [f"n{i}" for i in range(n_nodes)]
    nodes = [node(name, cpus=draw(st.sampled_from([8, 16, 32, 64])),
                  mem_gib=draw(st.sampled_from([32, 64, 128, 256]))) for name in names]
    guests = []
    for i in range(draw(st.integers(1, 30))):
        tags = []
        if draw(st.integers(0, 9)) == 0:
            tags.append(f"plb_anti_affinity_{draw(st.sampled_from('xy'))}")
        if draw(st.integers(0, 14)) == 0:
            tags.append(f"keel-affinity-{draw(st.sampled_from('pq'))}")
        if draw(st.integers(0, 14)) == 0:
            tags.append(f"plb_pin_{draw(st.sampled_from(names))}")
        if draw(st.integers(0, 19)) == 0:
            tags.append("keel-ignore")
        mem = draw(st.sampled_from([1, 2, 4, 8, 16]))
        guests.append(vm(100 + i, draw(st.sampled_from(names)), cores=draw(st.sampled_from([1, 2, 4, 8])),
                         mem_gib=mem, used_gib=mem * draw(st.floats(0.2, 1.0)), cpu=draw(st.floats(0.0, 1.0)),
                         status=draw(st.sampled_from(["running"] * 9 + ["stopped"])), tags=tuple(tags),
                         lock=draw(st.sampled_from([None] * 19 + ["backup"]))))
    maintenance = frozenset(draw(st.sets(st.sampled_from(names), max_size=1)))
    config = BalancingSettings(maintenance=maintenance, threshold=draw(st.sampled_from([0.02, 0.1])),
                               limits=Limits(moves=draw(st.integers(1, 20)), concurrent=draw(st.integers(1, 4)),
                                             per_node=draw(st.integers(1, 3))),
                               headroom=draw(st.sampled_from([0.0, 0.1, 0.2])))
    return cluster(nodes, guests, overhead_gib=HOST_GIB), config


def check(snapshot, config, plan):
    guests = snapshot.guests
    cap = {n: node.maxmem * (1 - config.headroom) for n, node in snapshot.nodes.items()}
    used = {n: float(node.mem) for n, node in snapshot.nodes.items()}
    where = {v: g.node for v, g in guests.items()}
    anti = {v: {t for t in g.tags if t.startswith("plb_anti_affinity_")} for v, g in guests.items()}
    pins = {v: {t[len("plb_pin_"):] for t in g.tags if t.startswith("plb_pin_")} for v, g in guests.items()}
    for move in plan.moves:
        g = guests[move.vmid]
        assert not g.template and not g.lock and "keel-ignore" not in g.tags, move
        assert move.target not in config.maintenance, move
        if pins[move.vmid] and move.reason != words.PARK:
            assert move.target in pins[move.vmid], move
        if move.reason == words.PARK:
            assert not pins[move.vmid] or move.target in pins[move.vmid], move
    for wave in sorted({m.wave for m in plan.moves}):
        batch = [m for m in plan.moves if m.wave == wave]
        incoming: dict[str, float] = {}
        for move in batch:
            # memory: held on both nodes while it moves
            incoming[move.target] = incoming.get(move.target, 0.0) + move.mem_bytes
            assert used[move.target] + incoming[move.target] <= cap[move.target] + 1, (wave, move)
            # anti-affinity: nobody of its groups there, now or arriving in this wave
            for other, node_name in where.items():
                if other != move.vmid and node_name == move.target:
                    assert not (anti[move.vmid] & anti[other]), (wave, move, other)
            for other in batch:
                if other is not move and other.target == move.target:
                    assert not (anti[move.vmid] & anti[other.vmid]), (wave, move, other)
        for move in batch:
            used[move.source] -= move.mem_bytes
            used[move.target] += move.mem_bytes
            where[move.vmid] = move.target
    # bundles that moved ended together
    groups: dict[str, set[str]] = {}
    moved = {m.vmid for m in plan.moves}
    for v, g in guests.items():
        for tag in g.tags:
            if tag.startswith("keel-affinity-"):
                groups.setdefault(tag, set()).add(v)
    for members in groups.values():
        if members & moved and all(not guests[v].lock and "keel-ignore" not in guests[v].tags
                                   and not guests[v].template for v in members):
            assert len({where[v] for v in members}) == 1, members


@given(clusters())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_plan_breaks_a_rule_or_overcommits_memory(case):
    snapshot, config = case
    plan = make_plan(snapshot, config, History(), NOW)
    check(snapshot, config, plan)
