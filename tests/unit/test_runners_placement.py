"""Placement: provider order, backoff 15 s doubling to 2 min, priority holds; and the scaler."""

from __future__ import annotations

import yaml

from keel.runners.placement import FAILING, FULL, NEVER, Placement
from keel.runners.scaler import want
from keel.runners.settings import parse

INTERVAL = 30.0


def test_spread_evens_runners_out_by_weight_and_pack_fills_in_order():
    weights = {"a": 1.0, "b": 2.0, "c": 1.0}
    assert Placement.order("spread", ["a", "b", "c"], weights, {"a": 2, "b": 3, "c": 1}) == ["c", "b", "a"]
    assert Placement.order("spread", ["a", "b", "c"], weights, {}) == ["a", "b", "c"]       # ties: as listed
    assert Placement.order("pack", ["a", "b", "c"], weights, {"b": 99}) == ["b", "a", "c"]


def test_a_refusal_backs_the_scale_set_off_15_s_doubling_to_2_minutes():
    p = Placement(INTERVAL)
    waits = []
    now = 1000.0
    for _ in range(6):
        backoff = p.refused("small", 0, "pve", FAILING, now)
        waits.append(backoff.until - now)
        assert p.backoff_until("small", "pve", now + 1) == backoff.until
        assert p.backoff_until("other", "pve", now + 1) is None       # only this scale set
        now = backoff.until
    assert waits == [15, 30, 60, 120, 120, 120]
    assert p.backoff_until("small", "pve", now) is None               # over when its time is up
    p.succeeded("small", "pve")                                       # a success forgives it
    assert p.refused("small", 0, "pve", NEVER, now).until - now == 15


def test_full_holds_lower_priorities_back_for_two_intervals():
    p = Placement(INTERVAL)
    p.refused("large", 10, "pve", FULL, 0.0)
    assert p.held_back("small", 0, "pve", 1.0).holder == "large"
    assert p.held_back("medium", 0, "pve", 59.0).holder == "large"
    assert p.held_back("medium", 0, "pve", 60.0) is None              # 2 x 30 s
    assert p.held_back("large", 10, "pve", 1.0) is None               # not itself
    assert p.held_back("small", 0, "other", 1.0) is None              # only that provider


def test_equal_priorities_never_hold_and_other_refusals_hold_no_one():
    p = Placement(INTERVAL)
    p.refused("a", 5, "pve", FULL, 0.0)
    assert p.held_back("b", 5, "pve", 1.0) is None
    p.refused("c", 9, "pve", NEVER, 0.0)
    p.refused("d", 9, "pve", FAILING, 0.0)
    assert p.held_back("b", 5, "pve", 1.0) is None


def test_a_hold_is_renewed_while_the_holder_keeps_trying_and_ends_when_it_places():
    p = Placement(INTERVAL)
    p.refused("large", 10, "pve", FULL, 0.0)
    assert p.renew("large", "pve", 50.0)
    assert p.held_back("small", 0, "pve", 100.0) is not None          # renewed at 50: until 110
    assert p.held_back("small", 0, "pve", 110.0) is None
    assert not p.renew("large", "pve", 120.0)                         # too late: it has ended
    p.refused("large", 10, "pve", FULL, 200.0)
    p.succeeded("large", "pve")
    assert p.held_back("small", 0, "pve", 201.0) is None and p.holds_on("pve", 201.0) == []


def test_the_highest_hold_is_the_one_shown():
    p = Placement(INTERVAL)
    p.refused("medium", 5, "pve", FULL, 0.0)
    p.refused("large", 10, "pve", FULL, 0.0)
    assert p.held_back("small", 0, "pve", 1.0).holder == "large"
    assert p.held_back("medium", 5, "pve", 1.0).holder == "large"
    assert [h.holder for h in p.holds_on("pve", 1.0)] == ["large", "medium"]


def settings_with(**extra):
    data = yaml.safe_load("""
github: {url: https://github.com/acme, token_path: /t}
providers: [{name: pve, type: proxmox, runner: {template: 9000, cores: 2, memory: 4GiB}}]
scale_sets: [{name: small, max_runners: 5, providers: [pve]}]
""")
    data["scale_sets"][0].update(extra)
    return parse(data).scale_sets[0]


def test_desired_is_min_runners_plus_assigned_jobs_capped():
    assert want(settings_with(), 0, 3).desired == 3
    assert want(settings_with(min_runners=1), 0, 3).desired == 4            # on top of the jobs
    assert want(settings_with(min_runners=2), 0, 9).desired == 5            # at most max_runners
    assert want(settings_with(min_runners=2), 0, 0).desired == 2
    paused = want(settings_with(min_runners=2, paused=True), 0, 3)
    assert (paused.desired, paused.max_runners, paused.paused) == (0, 0, True)


def test_a_window_can_take_the_scale_set_off_schedule():
    s = settings_with(schedule={"windows": [{"days": ["mon-sun"], "from": "00:00", "to": "24:00",
                                             "max_runners": 0, "min_runners": 0}]})
    w = want(s, 0, 3)
    assert (w.desired, w.off_schedule, w.paused) == (0, True, False)


def test_room_freed_after_a_full_refusal_may_end_its_backoff_and_nothing_else_does():
    p = Placement(INTERVAL)
    p.refused("large", 10, "pve", FULL, 100.0)
    assert not p.ends_on_room("large", "pve", None, 101.0)            # no room freed
    assert not p.ends_on_room("large", "pve", 99.0, 101.0)            # freed before the refusal
    assert p.ends_on_room("large", "pve", 100.5, 101.0)
    p.forgive("large", "pve", 101.0)
    assert p.backoff_until("large", "pve", 101.0) is None              # tried again at once
    assert p.refused("large", 10, "pve", FULL, 101.0).until == 131.0  # still full: the doubling goes on
    p.refused("small", 0, "pve", FAILING, 100.0)
    assert not p.ends_on_room("small", "pve", 100.5, 101.0)           # only "full" backoffs end on room


def test_the_next_change_is_the_first_backoff_or_hold_to_end():
    p = Placement(INTERVAL)
    assert p.next_change(0.0) is None
    p.refused("large", 10, "pve", FULL, 0.0)                           # backoff to 15, hold to 60
    p.refused("small", 0, "other", FAILING, 5.0)                       # backoff to 20
    assert p.next_change(1.0) == 15.0
    assert p.next_change(15.0) == 20.0
    assert p.next_change(20.0) == 60.0
    assert p.next_change(60.0) is None


def test_what_fell_due_before_the_last_pass_does_not_call_for_another():
    """``fleet.due``: a deadline Keel could not act on (GitHub silent) is not due again and
    again; a backoff ending after the last pass is."""
    from types import SimpleNamespace

    from keel.runners import fleet
    svc = SimpleNamespace(placement=Placement(INTERVAL), github=SimpleNamespace(blocked_until=50.0),
                          sets={}, runners={}, verdicts={}, listing_at=0.0, last_pass_at=100.0,
                          unreachable={}, settings=SimpleNamespace(scale_set=lambda name: None))
    assert fleet.due(svc, 101.0) == float("inf")          # the block ended before the last pass
    svc.placement.refused("large", 10, "pve", FULL, 95.0)  # its 15 s end at 110
    assert fleet.due(svc, 101.0) == 110.0
    assert fleet.due(svc, 111.0) == 111.0                  # it ended after the last pass: a pass now
    svc.last_pass_at = 111.0
    assert fleet.due(svc, 111.5) == 155.0                  # then the hold's end (two intervals from 95)
