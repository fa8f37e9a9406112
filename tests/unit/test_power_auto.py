"""``mode: automatic``'s decisions (keel.balance.power_auto), on hand-made inputs (no I/O)."""

from __future__ import annotations

from types import SimpleNamespace

from keel import words
from keel.balance.power_auto import SLEEP, WAKE, Demand, Hold, asleep_by_keel, decide
from keel.balance.power_gates import Forecast
from keel.balance.power_settings import parse

GiB = 1024**3
MONDAY = 1772409600.0          # 2026-03-02 00:00 UTC, a Monday


def power(**kw):
    kw.setdefault("mode", "automatic")
    kw.setdefault("nodes", ["c", "d"])
    kw.setdefault("hold", "10m")
    return parse(kw)


def load(cpu=0.2, mem=0.2, n=3):
    return [Forecast(f"n{i}", cpu * 32, 32, mem * 128 * GiB, 128 * GiB, 128 * GiB) for i in range(n)]


PLAN = SimpleNamespace(verdict=words.SLEEP, sleep=("c",), reason="c can sleep")
QUIET = SimpleNamespace(verdict=words.ALL_AWAKE, sleep=(), reason="no node can sleep now")


def test_a_node_sleeps_once_the_plan_held_for_the_hold():
    p = power()
    d = decide(p, MONDAY, Hold(), 3, PLAN, load(), {}, ["a", "b", "c", "d"])
    assert d.action is None and "0 of 600 s" in d.reason
    d = decide(p, MONDAY + 300, d.hold, 3, PLAN, load(), {}, ["a", "b", "c", "d"])
    assert d.action is None and d.hold.sleep_since == MONDAY
    d = decide(p, MONDAY + 600, d.hold, 3, PLAN, load(), {}, ["a", "b", "c", "d"])
    assert (d.action, d.nodes) == (SLEEP, ("c",)) and d.hold.sleep_since is None


def test_a_break_in_the_plan_starts_the_hold_again():
    p = power()
    d = decide(p, MONDAY, Hold(), 3, PLAN, load(), {}, ["a", "c"])
    d = decide(p, MONDAY + 300, d.hold, 3, QUIET, load(), {}, ["a", "c"])
    assert d.hold.sleep_since is None
    d = decide(p, MONDAY + 700, d.hold, 3, PLAN, load(), {}, ["a", "c"])
    assert d.action is None


def test_load_over_the_line_wakes_a_sleeping_node_after_the_balancers_hold():
    p = power()
    records = {"c": {"state": "asleep", "since": MONDAY}, "d": {"state": "asleep", "since": MONDAY - 60}}
    hot = load(cpu=0.9)
    d = decide(p, MONDAY, Hold(), 2, None, hot, records, ["a", "b"])
    assert d.action is None and "1 of 2 rounds" in d.reason
    d = decide(p, MONDAY + 10, d.hold, 2, None, hot, records, ["a", "b"])
    assert d.action == WAKE and d.nodes == ("d", "c") and "above the line of 75%" in d.reason
    # the load falls back under the line: the count starts again
    d = decide(p, MONDAY, Hold(over_rounds=1), 2, None, load(), records, ["a", "b"])
    assert d.action is None and d.hold.over_rounds == 0


def test_a_node_that_did_not_wake_is_not_tried_again():
    records = {"c": {"state": "did not wake", "since": MONDAY}, "d": {"state": "asleep", "since": MONDAY}}
    assert asleep_by_keel(records, ["a"]) == ["d"]
    d = decide(power(), MONDAY, Hold(over_rounds=5), 1, None, load(cpu=0.9), records, ["a", "b"])
    assert d.nodes == ("d",)


def test_wake_all_wakes_every_sleeping_node_and_runner_demand_wakes_at_once():
    p = power(wake_all="mon 07:30")
    records = {"c": {"state": "asleep", "since": MONDAY}, "d": {"state": "asleep", "since": MONDAY}}
    d = decide(p, MONDAY + 7.5 * 3600 + 5, Hold(last_tick=MONDAY + 7.5 * 3600 - 5), 3, PLAN, load(), records, ["a"])
    assert d.action == WAKE and d.wake_all and set(d.nodes) == {"c", "d"}
    d = decide(p, MONDAY + 3600, Hold(last_tick=MONDAY + 3590), 3, PLAN, load(), records, ["a"],
               demand=Demand("runner demand: scale set large: 2 job(s) wait"))
    assert d.action == WAKE and not d.wake_all and d.reason.startswith("runner demand")


def test_recommend_mode_and_a_job_under_way_act_on_nothing():
    d = decide(power(mode="recommend"), MONDAY, Hold(sleep_since=MONDAY - 9999), 1, PLAN, load(), {}, ["a", "c"])
    assert d.action is None and "recommend" in d.reason
    d = decide(power(), MONDAY, Hold(sleep_since=MONDAY - 9999), 1, PLAN, load(), {"c": {"state": "emptying"}},
               ["a", "c"])
    assert d.action is None and "emptying" in d.reason


def test_runner_demand_with_no_node_to_wake_puts_none_to_sleep():
    d = decide(power(), MONDAY, Hold(sleep_since=MONDAY - 9999), 1, PLAN, load(), {}, ["a", "c"],
               demand=Demand("runner demand: scale set large: 1 job(s) wait"))
    assert d.action is None and "no node of Keel's is asleep" in d.reason


def test_a_node_that_woke_late_has_its_wake_finished():
    records = {"c": {"state": "did not wake", "since": MONDAY}, "d": {"state": "asleep", "since": MONDAY}}
    d = decide(power(), MONDAY, Hold(), 3, PLAN, load(), records, ["a", "b", "c"])
    assert (d.action, d.nodes) == (WAKE, ("c",)) and "came back" in d.reason
    assert decide(power(), MONDAY, Hold(), 3, PLAN, load(), records, ["a", "b"]).action != WAKE


def test_maintenance_that_finds_no_room_asks_for_a_node():
    from dataclasses import replace

    from balance_helpers import cluster, node, vm
    from keel.balance.balancer import make_plan
    from keel.balance.history import History
    from keel.balance.power_auto import maintenance_demand
    from keel.balance.settings import BalancingSettings
    snap = cluster([node("a", mem_gib=64), node("b", mem_gib=64)],
                   [vm(100, "a", mem_gib=40, name="big"), vm(101, "b", mem_gib=40), vm(102, "a", mem_gib=4)])
    settings = BalancingSettings()
    plan = make_plan(snap, replace(settings, maintenance=frozenset({"a"})), History(), snap.taken_at)
    why = maintenance_demand(snap, {"a"}, plan)
    assert why and why.startswith("maintenance on a needs room") and "big (100)" in why and "102" not in why
    assert maintenance_demand(snap, set(), plan) is None
    d = decide(power(), MONDAY, Hold(), 3, None, load(), {"c": {"state": "asleep", "since": MONDAY}}, ["a", "b"],
               demand=Demand(why))
    assert d.action == WAKE and d.nodes == ("c",) and d.reason == why


# -- a Wake-on-LAN that PVE did not send: the node waits, another is woken ------------------

def test_the_wait_after_a_failed_send_doubles_from_the_interval_up_to_an_hour():
    from keel.balance.power_auto import RETRY_CAP_S, retry_after
    assert [retry_after(k, 60.0) for k in (1, 2, 3, 4)] == [60.0, 120.0, 240.0, 480.0]
    assert retry_after(30, 60.0) == RETRY_CAP_S == 3600.0
    assert retry_after(1, 7200.0) == 3600.0            # never past the cap, whatever the interval


def test_a_node_whose_wake_was_not_sent_waits_and_another_is_woken():
    records = {"c": {"state": "asleep", "since": MONDAY - 600, "retry_at": MONDAY + 120, "wake_failures": 2},
               "d": {"state": "asleep", "since": MONDAY}}
    hot = load(cpu=0.9)
    d = decide(power(), MONDAY, Hold(over_rounds=5), 1, None, hot, records, ["a", "b"])
    assert d.action == WAKE and d.nodes == ("d",)
    # only c is asleep: it is not tried before its time, and the reason says until when
    only_c = {"c": records["c"]}
    d = decide(power(), MONDAY, Hold(over_rounds=5), 1, None, hot, only_c, ["a", "b"])
    assert d.action is None and "c is not woken again for 120 s" in d.reason and "failed 2 times" in d.reason
    assert d.hold.over_rounds == 6                      # still over the line: tried once the wait ends
    d = decide(power(), MONDAY + 120, d.hold, 1, None, hot, only_c, ["a", "b"])
    assert (d.action, d.nodes) == (WAKE, ("c",))
    # demand waits the same way
    d = decide(power(), MONDAY, Hold(), 1, PLAN, load(), only_c, ["a", "b"], demand=Demand("runner demand: x"))
    assert d.action is None and d.reason.startswith("runner demand: x; c is not woken again for 120 s")


def test_a_wake_all_moment_tries_every_sleeping_node_waiting_or_not():
    p = power(wake_all="mon 07:30")
    records = {"c": {"state": "asleep", "since": MONDAY, "retry_at": MONDAY + 9 * 3600},
               "d": {"state": "asleep", "since": MONDAY}}
    d = decide(p, MONDAY + 7.5 * 3600 + 5, Hold(last_tick=MONDAY + 7.5 * 3600 - 5), 3, PLAN, load(), records, ["a"])
    assert d.action == WAKE and d.wake_all and d.nodes == ("c", "d")


def test_a_wake_all_moment_during_a_job_is_not_lost():
    p = power(wake_all="mon 07:30")
    records = {"c": {"state": "asleep", "since": MONDAY}, "d": {"state": "emptying", "since": MONDAY}}
    before = MONDAY + 7.5 * 3600 - 5
    d = decide(p, MONDAY + 7.5 * 3600 + 5, Hold(last_tick=before), 3, PLAN, load(), records, ["a", "d"])
    assert d.action is None and d.hold.last_tick == before
    records["d"] = {"state": "asleep", "since": MONDAY + 7.5 * 3600}
    d = decide(p, MONDAY + 7.5 * 3600 + 60, d.hold, 3, PLAN, load(), records, ["a"])
    assert d.action == WAKE and d.wake_all and set(d.nodes) == {"c", "d"}


# -- runner demand names the nodes that would help ------------------------------------------

def test_demand_wakes_only_a_sleeping_node_it_may_use_longest_asleep_first():
    records = {"c": {"state": "asleep", "since": MONDAY - 600}, "d": {"state": "asleep", "since": MONDAY},
               "e": {"state": "asleep", "since": MONDAY - 60}}
    d = decide(power(), MONDAY, Hold(), 3, PLAN, load(), records, ["a"],
               demand=Demand("runner demand: scale set big", frozenset({"a", "d", "e"})))
    assert (d.action, d.nodes) == (WAKE, ("e", "d"))
    d = decide(power(), MONDAY, Hold(), 3, PLAN, load(), records, ["a"], demand=Demand("runner demand: any"))
    assert d.nodes == ("c", "e", "d")                   # unrestricted: every sleeping node


def test_demand_none_of_whose_nodes_sleeps_wakes_none_and_says_so():
    records = {"c": {"state": "asleep", "since": MONDAY}}
    d = decide(power(), MONDAY, Hold(sleep_since=MONDAY - 9999), 1, PLAN, load(), records, ["a", "b"],
               demand=Demand("runner demand: scale set big", frozenset({"a", "b", "x"})))
    assert d.action is None and d.hold.sleep_since is None        # and none is put to sleep meanwhile
    assert d.reason == ("runner demand: scale set big; no sleeping node is one it may use (asleep: c; "
                        "it may use a, b, x): none is woken")
