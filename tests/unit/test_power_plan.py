"""The consolidation plan and its gates, on hand-made clusters (no I/O)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from balance_helpers import GiB, cluster, node, rule_node_affinity, vm
from keel import words
from keel.balance import power_gates as gates
from keel.balance.power import plan_sleep
from keel.balance.power_settings import parse as parse_power
from keel.balance.settings import BalancingSettings, GroupRule
from keel.model import CephFacts, CephPool, PowerFacts


def settings(**power):
    power.setdefault("mode", "recommend")
    power.setdefault("wake_test_max_age", "off")     # the wake-test gate has tests of its own below
    return BalancingSettings(power=parse_power(power))


def facts(snapshot, local="a", wol_missing=(), ceph=None, votes=None):
    return PowerFacts(local_node=local, votes=votes or {n: 1 for n in snapshot.nodes},
                      wol={n: None if n in wol_missing else f"bc:24:11:00:00:0{i}"
                           for i, n in enumerate(snapshot.nodes) if snapshot.nodes[n].online},
                      ceph=ceph)


def six(guests=None, **kw):
    """Six nodes: a, b big; c..f small with a guest or two each (c cheapest, f dearest)."""
    nodes = [node("a", cpus=64, mem_gib=256), node("b", cpus=64, mem_gib=256)] + \
            [node(n, cpus=32, mem_gib=128) for n in "cdef"]
    guests = guests if guests is not None else [
        vm(100, "a"), vm(101, "b"), vm(110, "c", mem_gib=4), vm(120, "d", mem_gib=8),
        vm(130, "e", mem_gib=16), vm(140, "f", mem_gib=16), vm(141, "f", mem_gib=8)]
    return cluster(nodes, guests, **kw)


def test_the_cheapest_node_sleeps_first_and_its_guests_go_elsewhere():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["f", "e", "d", "c"]))
    assert plan.verdict == words.SLEEP
    assert plan.sleep == ("c",)                # 5 of 6 votes awake: more than the bare majority of 4
    assert [(m.vmid, m.source) for m in plan.moves] == [(110, "c")] and plan.moves[0].target != "c"
    assert plan.costs["c"] < plan.costs["d"] < plan.costs["e"] < plan.costs["f"]
    # the next ones would leave a bare majority of corosync's votes
    refused = {r.node: r for r in plan.refusals}
    assert refused["d"].gate == words.GATE_QUORUM and "bare majority" in refused["d"].detail
    assert [s.action for s in plan.steps] == ["migrate", "shutdown"]
    assert plan.saving_watts == 150


def test_each_move_says_its_node_goes_to_sleep_not_that_it_is_in_maintenance():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["f", "e", "d", "c"], allow_bare_majority=True))
    assert plan.moves and all(m.detail == f"{m.source} goes to sleep (power saving)" for m in plan.moves)
    assert all(m.reason == words.MAINTENANCE for m in plan.moves)      # moved as maintenance moves are
    assert "is in maintenance" not in json.dumps(plan.to_json())


def test_with_a_bare_majority_allowed_more_nodes_sleep_cheapest_first():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["f", "e", "d", "c"], allow_bare_majority=True))
    assert plan.sleep == ("c", "d")
    assert {m.vmid for m in plan.moves} == {110, 120}
    assert all(m.target in ("a", "b", "e", "f") for m in plan.moves)
    refused = {r.node: r.gate for r in plan.refusals}
    assert refused == {"e": words.GATE_QUORUM, "f": words.GATE_QUORUM}   # 3 of 6 is no quorum
    assert plan.saving_watts == 300


def test_min_awake_holds_whatever_the_votes():
    snap = six()
    plan = plan_sleep(snap, facts(snap, votes={"a": 5, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}),
                      settings(nodes=list("bcdef"), min_awake=4))
    assert len(plan.sleep) == 2
    assert {r.gate for r in plan.refusals} == {words.GATE_MIN_AWAKE}


def test_the_headroom_line_keeps_nodes_awake():
    # every small node busy: putting one's load on the others passes 75 % CPU
    snap = cluster([node(n, cpus=16, mem_gib=64) for n in "abcdef"],
                   [vm(100 + i, n, cores=8, cpu=0.9, mem_gib=8) for i, n in enumerate("abcdef")])
    plan = plan_sleep(snap, facts(snap), settings(nodes=list("bcdef")))
    assert plan.verdict == words.ALL_AWAKE and not plan.sleep
    assert all(r.gate == words.GATE_HEADROOM for r in plan.refusals)
    assert "above the line of 75%" in plan.refusals[0].detail
    assert plan.reason.startswith("no node can sleep now: ")


def test_n_plus_one_refuses_where_the_line_alone_would_not():
    snap = cluster([node("a", cpus=64, mem_gib=256), node("b", cpus=8, mem_gib=32), node("c", cpus=8, mem_gib=32)],
                   [vm(100, "a", cores=16, cpu=0.5, mem_gib=64), vm(101, "b", cores=2, cpu=0.1, mem_gib=2),
                    vm(102, "c", cores=2, cpu=0.1, mem_gib=2)], )
    votes = {"a": 3, "b": 1, "c": 1}            # a alone keeps quorum: only N+1 can say no
    plan = plan_sleep(snap, facts(snap, votes=votes), settings(nodes=["c"], min_awake=1))
    assert plan.verdict == words.ALL_AWAKE
    (refusal,) = plan.refusals
    assert refusal.gate == words.GATE_HEADROOM and refusal.detail.startswith("N+1: without a ")
    loose = plan_sleep(snap, facts(snap, votes=votes), settings(nodes=["c"], min_awake=1,
                                                                headroom={"spare_nodes": 0}))
    assert loose.sleep == ("c",)


def test_a_guest_that_cannot_move_keeps_its_node_awake_and_says_why():
    snap = six([vm(100, "a"), vm(101, "b"), vm(110, "c", mem_gib=4, local_gib=50), vm(120, "d")])
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c", "d"]))
    refused = {r.node: r for r in plan.refusals}
    assert refused["c"].gate == words.GATE_GUESTS
    assert "g110 (110): local disks" in refused["c"].detail
    assert plan.sleep == ("d",)


def test_pins_and_strict_ha_rules_are_the_planners_own():
    sid = "vm:110"
    snap = six([vm(100, "a"), vm(110, "c", ha=True), vm(120, "d"), vm(130, "e")],
               rules=[rule_node_affinity("only-c", [sid], {"c": 1}, strict=True)])
    base = settings(nodes=["c", "d", "e"], allow_bare_majority=True)
    pinned = replace(base, pins={"120": ("d",)})
    plan = plan_sleep(snap, facts(snap), pinned)
    refused = {r.node: r for r in plan.refusals}
    assert refused["c"].gate == refused["d"].gate == words.GATE_GUESTS
    assert plan.sleep == ("e",)
    assert [s.action for s in plan.steps] == ["migrate", "ha-maintenance", "shutdown"]


def test_anti_affinity_is_kept_while_emptying():
    guests = [vm(100, "a"), vm(101, "b"), vm(110, "c", name="dns1"), vm(120, "d", name="dns2"),
              vm(130, "e", name="dns3")]
    snap = cluster([node(n) for n in "abcde"], guests)
    s = replace(settings(nodes=["c"], min_awake=1, allow_bare_majority=True),
                groups=(GroupRule("dns", "anti-affinity", ("dns1", "dns2", "dns3")),))
    plan = plan_sleep(snap, facts(snap), s)
    assert plan.sleep == ("c",) and plan.moves[0].target in ("a", "b")


@pytest.mark.parametrize("gate,kwargs", [
    (words.GATE_WOL, {"wol_missing": ("c",)}),
    (words.GATE_API_NODE, {"local": "c"}),
])
def test_node_gates(gate, kwargs):
    snap = six()
    plan = plan_sleep(snap, facts(snap, **kwargs), settings(nodes=["c"]))
    assert plan.verdict == words.ALL_AWAKE and [r.gate for r in plan.refusals] == [gate]


def test_the_lease_holder_does_not_sleep():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c"]), lease_holder="c")
    assert [r.gate for r in plan.refusals] == [words.GATE_LEASE]
    assert "hand it over first" in plan.refusals[0].detail


DAY = 86400.0


def test_a_node_without_a_recent_wake_test_stays_awake_and_is_told_how_to_test_it():
    snap = six()
    now = snap.taken_at
    tested = settings(nodes=["c"], wake_test_max_age="30d")
    never = plan_sleep(snap, facts(snap), tested, now)
    assert never.verdict == words.ALL_AWAKE and [r.gate for r in never.refusals] == [words.GATE_WOL]
    assert "never" in never.refusals[0].detail and "keel power test c" in never.refusals[0].detail
    old = plan_sleep(snap, facts(snap), tested, now, wake_tests={"c": {"time": now - 31 * DAY}})
    assert [r.gate for r in old.refusals] == [words.GATE_WOL]
    assert "31 days ago" in old.refusals[0].detail and "30d" in old.refusals[0].detail
    recent = plan_sleep(snap, facts(snap), tested, now, wake_tests={"c": {"time": now - 29 * DAY}})
    assert recent.sleep == ("c",)
    # the test itself: a sleep with every other gate, this one set aside
    assert plan_sleep(snap, facts(snap), tested, now, wake_test=False).sleep == ("c",)
    assert plan_sleep(snap, facts(snap, wol_missing=("c",)), tested, now, wake_test=False).refusals[0].gate \
        == words.GATE_WOL


def test_the_wake_test_gate_alone():
    assert gates.wake_test("c", {"c": {"time": 1000.0}}, 3600.0, 2000.0) is None
    assert gates.wake_test("c", {}, None, 2000.0) is None                      # the gate is off
    refusal = gates.wake_test("c", {"c": {"time": 0.0}}, 3600.0, 7200.0)
    assert refusal.gate == words.GATE_WOL and refusal.node == "c"
    assert "2 hours ago" in refusal.detail and "1h" in refusal.detail and "keel power test c" in refusal.detail
    assert "never" in gates.wake_test("c", {"d": {"time": 7000.0}}, 3600.0, 7200.0).detail
    assert "never" in gates.wake_test("c", {"c": "garbage"}, 3600.0, 7200.0).detail


def test_maintenance_offline_and_ignored_nodes_are_not_candidates():
    snap = six()
    snap = replace(snap, nodes={**snap.nodes, "d": replace(snap.nodes["d"], online=False, mem=0)})
    s = replace(settings(nodes=["c", "d", "e"]), maintenance=frozenset({"c"}),
                ignore=replace(BalancingSettings().ignore, nodes=frozenset({"e"})))
    plan = plan_sleep(snap, facts(snap), s)
    assert {r.node: r.gate for r in plan.refusals} == {
        "c": words.GATE_MAINTENANCE, "d": words.GATE_AWAKE, "e": words.GATE_POLICY}


def test_a_node_whose_room_maintenance_elsewhere_needs_stays_awake():
    # d in maintenance: its 40 GiB guest fits only on c (a and b nearly full)
    nodes = [node(n, mem_gib=64) for n in "abcd"]
    snap = cluster(nodes, [vm(100, "a", mem_gib=40), vm(101, "b", mem_gib=40), vm(102, "d", mem_gib=40, name="app")])
    s = replace(settings(nodes=["c"], allow_bare_majority=True, headroom={"spare_nodes": 0}),
                maintenance=frozenset({"d"}))
    plan = plan_sleep(snap, facts(snap), s)
    assert plan.verdict == words.ALL_AWAKE
    [refusal] = plan.refusals
    assert refusal.gate == words.GATE_MAINTENANCE and refusal.node == "c"
    assert refusal.detail == "with it asleep, maintenance on d needs room: no awake node can take app (102)"
    # once d is empty, c may sleep
    snap = cluster(nodes, [vm(100, "a", mem_gib=40), vm(101, "b", mem_gib=40)])
    assert plan_sleep(snap, facts(snap), s).sleep == ("c",)


def test_a_never_sleep_window_keeps_every_node_awake():
    snap = six()                    # taken at 1_800_000_000: Friday 2027-01-15 08:00 UTC
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c"], never_sleep="fri 07:00-19:00"))
    assert plan.verdict == words.ALL_AWAKE and plan.refusals[0].gate == words.GATE_SCHEDULE
    assert plan.refusals[0].node is None
    assert plan_sleep(snap, facts(snap), settings(nodes=["c"], never_sleep="sat 07:00-19:00")).sleep == ("c",)


def test_no_quorum_no_sleep():
    snap = six(quorate=False)
    assert plan_sleep(snap, facts(snap), settings(nodes=["c"])).verdict == words.NO_QUORUM


def test_only_one_node_and_a_node_not_listed():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c", "d"]), only="d")
    assert plan.sleep == ("d",)
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c"]), only="d")
    assert plan.refusals[0].gate == words.GATE_POLICY and not plan.sleep
    assert plan_sleep(snap, facts(snap), settings(nodes=["c"]), only="zz").refusals[0].gate == words.GATE_POLICY


def test_the_plan_as_json_and_the_mode_off_preview():
    snap = six()
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c"], mode="off"))
    data = json.loads(json.dumps(plan.to_json()))
    assert data["verdict"] == "SLEEP" and data["sleep"] == ["c"] and data["mode"] == "off"
    assert set(data) == {"verdict", "reason", "mode", "sleep", "created_at", "moves", "summary", "steps",
                         "refusals", "forecast", "costs_gib", "skipped", "notices"}
    assert data["summary"]["moves"] == 1 and data["moves"][0]["from"] == "c"
    assert {f["node"] for f in data["forecast"]} == {"a", "b", "d", "e", "f"}
    assert any("mode is off" in n for n in data["notices"])


def test_templates_and_stopped_guests_that_stay_are_noticed():
    snap = six([vm(100, "a"), vm(9000, "c", status="stopped", template=True, name="tmpl"),
                vm(111, "c", status="stopped", local_gib=10, name="cold")])
    plan = plan_sleep(snap, facts(snap), settings(nodes=["c"]))
    assert plan.sleep == ("c",)
    assert any("tmpl (9000) stays on c" in n for n in plan.notices)
    assert any("cold (111) stays on c" in n for n in plan.notices)


# -- Ceph ----------------------------------------------------------------------------------

def ceph(**kw):
    base = dict(health="HEALTH_OK", osds={n: (2, 2) for n in "abcd"}, mons=("a", "b", "c"),
                mons_in_quorum=("a", "b", "c"), pools=(CephPool("ceph-vm", 3, 2), CephPool(".mgr", 3, 2)),
                pg_states={"active+clean": 129})
    base.update(kw)
    return CephFacts(**base)


def test_a_ceph_node_sleeps_with_noout_set():
    snap = six()
    plan = plan_sleep(snap, facts(snap, ceph=ceph()), settings(nodes=["d"]))
    assert plan.sleep == ("d",)
    assert [s.action for s in plan.steps] == ["migrate", "ceph-noout", "shutdown"]
    already = plan_sleep(snap, facts(snap, ceph=ceph(flags=frozenset({"noout"}))), settings(nodes=["d"]))
    assert "set already" in already.steps[1].detail


def test_ceph_never_below_min_size():
    snap = six()
    plan = plan_sleep(snap, facts(snap, ceph=ceph()), settings(nodes=["c", "d"], allow_bare_majority=True))
    refused = {r.node: r for r in plan.refusals}
    assert plan.sleep == ("c",)        # then d too would leave a placement group 1 copy of 3
    assert refused["d"].gate == words.GATE_CEPH and "needs 2 for I/O" in refused["d"].detail
    assert "with c and d off" in refused["d"].detail
    size2 = ceph(pools=(CephPool("ceph-vm", 2, 2),))
    plan = plan_sleep(snap, facts(snap, ceph=size2), settings(nodes=["d"]))
    assert plan.refusals[0].gate == words.GATE_CEPH and "needs 2 for I/O" in plan.refusals[0].detail


def test_ceph_monitors_keep_more_than_a_bare_majority():
    snap = six()
    plan = plan_sleep(snap, facts(snap, ceph=ceph()), settings(nodes=["c"]))
    assert plan.refusals[0].gate == words.GATE_CEPH
    assert plan.refusals[0].detail == ("its monitor would leave 2 of 3 monitors in quorum, a bare majority "
                                       "(allow_bare_majority: true allows it)")


@pytest.mark.parametrize("kw,words_", [
    ({"health": "HEALTH_WARN", "checks": ("SLOW_OPS",)}, "HEALTH_WARN (SLOW_OPS)"),
    ({"health": "HEALTH_ERR"}, "HEALTH_ERR"),
    ({"health": "", "osds": {}, "error": "PVE GET /cluster/ceph/status: got timeout"}, "could not be read: PVE GET"),
    ({"osds": {"a": (2, 1), "b": (2, 2), "c": (2, 2), "d": (2, 2)}}, "OSDs are down on a"),
    ({"pg_states": {"active+clean": 100, "active+remapped+backfilling": 29}}, "29 placement groups"),
])
def test_ceph_must_be_well_before_a_ceph_node_sleeps(kw, words_):
    snap = six()
    plan = plan_sleep(snap, facts(snap, ceph=ceph(**kw)), settings(nodes=["d"]))
    assert plan.refusals[0].gate == words.GATE_CEPH and words_ in plan.refusals[0].detail


def test_a_node_without_ceph_does_not_care_about_its_health():
    snap = six()
    plan = plan_sleep(snap, facts(snap, ceph=ceph(health="HEALTH_ERR")), settings(nodes=["e"]))
    assert plan.sleep == ("e",) and "ceph-noout" not in [s.action for s in plan.steps]


def test_ceph_ill_only_from_nodes_asleep_is_well():
    snap = six()
    snap = replace(snap, nodes={**snap.nodes, "d": replace(snap.nodes["d"], online=False, mem=0)})
    c = ceph(health="HEALTH_WARN", checks=("OSDMAP_FLAGS", "OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED"),
             osds={"a": (2, 2), "b": (2, 2), "c": (2, 2), "d": (2, 0), "e": (2, 2)},
             pools=(CephPool("ceph-vm", 4, 2),), pg_states={"active+undersized+degraded": 129})
    plan = plan_sleep(snap, facts(snap, ceph=c), settings(nodes=["e"], allow_bare_majority=True))
    assert plan.sleep == ("e",), plan.refusals
    busy = replace(c, pg_states={"active+undersized+degraded+remapped+backfilling": 129})
    plan = plan_sleep(snap, facts(snap, ceph=busy), settings(nodes=["e"], allow_bare_majority=True))
    assert plan.refusals[0].detail.startswith("Ceph is not settled: 129 placement groups")


# -- the gates alone ------------------------------------------------------------------------

def test_quorum_gate():
    votes = {n: 1 for n in "abcde"}                 # 5 votes: quorum 3
    assert gates.quorum(votes, set("abcd"), {"e"}, "e", False) is None
    bare = gates.quorum(votes, set("abc"), {"d", "e"}, "e", False)
    assert bare.gate == words.GATE_QUORUM and "bare majority" in bare.detail and "d and e asleep" in bare.detail
    assert gates.quorum(votes, set("abc"), {"d", "e"}, "e", True) is None
    lost = gates.quorum(votes, set("ab"), set("cde"), "e", True)
    assert "quorum needs 3" in lost.detail
    assert "could not be read" in gates.quorum({}, set("ab"), set(), "e", True).detail


def test_headroom_gate_names_the_node_and_the_line():
    power = parse_power({"headroom": {"memory": "50%"}})
    f = [gates.Forecast("a", 10, 64, 100 * GiB, 128 * GiB, 115 * GiB), gates.Forecast("b", 1, 64, 1, 128 * GiB, 115 * GiB)]
    r = gates.headroom(f, power, "c")
    assert r.node == "c" and r.detail == "a would be at 78% memory, above the line of 50%"
