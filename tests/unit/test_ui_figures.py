"""The figures the web UI shows (issue 16): the plan's own load model in /api/status, the
names under "Left alone", validation keeping every problem, promised vs achieved, and
keel-web's cheap reads (fields, ETag, gzip)."""

from __future__ import annotations

import gzip
import json

import pytest
from flask import Flask, Response

from balance_helpers import cluster, node, vm
from keel import words
from keel.balance.balancer import make_plan
from keel.balance.history import History, MoveRecord
from keel.balance.settings import BalancingSettings, GroupRule, parse
from keel.engine import outcome
from keel.errors import InvalidError
from keel.status_view import model_view
from keel.validate import Problems
from keel.web.app import _cheap, _fields_arg

NOW = 1_800_000_000.0


def test_cooldown_names_each_guest_by_its_own_name_not_its_groups():
    """Finding 9: guest 100 was labelled with its affinity group's name."""
    guests = [vm(100, "a", cpu=0.6, name="web1"), vm(101, "a", cpu=0.6, name="web2"),
              vm(102, "a", cpu=0.6, name="db1")] + [vm(110 + i, "a", cpu=0.6) for i in range(6)]
    snap = cluster([node("a"), node("b")], guests)
    history = History(moves=(MoveRecord(100, "b", "a", NOW - 60), MoveRecord(102, "b", "a", NOW - 60)))
    settings = BalancingSettings(groups=(GroupRule("webpair", "affinity", ("100", "101")),))
    plan = make_plan(snap, settings, history, NOW)
    cooling = {s.vmid: s.name for s in plan.skipped if s.reason == words.COOLDOWN}
    assert cooling == {100: "web1", 102: "db1"}
    assert all(s["name"] == {100: "web1", 102: "db1"}[s["vmid"]]
               for s in plan.to_json()["skipped"] if s["reason"] == words.COOLDOWN)


def test_every_problem_of_one_path_is_kept():
    problems = Problems("config")
    problems.add("balancing.schedule.windows[0]", "days: expected mon-sun")
    problems.add("balancing.schedule.windows[0]", "from: expected HH:MM")
    with pytest.raises(InvalidError) as err:
        problems.raise_if_any()
    assert err.value.errors == {"balancing.schedule.windows[0]": "days: expected mon-sun; from: expected HH:MM"}


def test_the_thresholds_message_says_what_is_allowed():
    with pytest.raises(InvalidError) as err:
        parse({"threshold": "lots", "margin": 2})
    assert "0.1, or a percentage such as 10%" in err.value.errors["threshold"]
    assert "between 0 and 100" not in err.value.message
    assert "from 0 to 1 (0.1) or a percentage from 0% to 100% (10%)" in err.value.errors["margin"]


def hot():
    guests = [vm(100 + i, "a", cpu=0.9, cores=4) for i in range(6)] + [vm(200, "b", cpu=0.1), vm(300, "c", cpu=0.1)]
    return cluster([node("a", cpus=32), node("b", cpus=32), node("c", cpus=32)], guests)


def test_the_model_view_is_the_plans_before_state_and_names_the_hottest_node():
    snap, settings = hot(), BalancingSettings()
    plan = make_plan(snap, settings, History(), NOW)
    view = model_view(snap, settings)
    assert view["imbalance"]["keel"] == round(plan.before.figures.keel, 4)
    for name, load in plan.before.nodes.items():
        assert view["nodes"][name]["cpu"] == round(load.cpu, 4)
        assert view["nodes"][name]["memory"] == round(load.memory, 4)
    assert view["hottest"]["node"] == "a"
    assert "cpu" in view["nodes"]["a"]["hot"] and not view["nodes"]["b"]["hot"]
    assert view["nodes"]["a"]["cpu_cap"] == 32


def test_smoothed_and_now_differ_when_samples_say_the_load_was_other():
    snap, settings = hot(), BalancingSettings()
    samples = {f"guest/{100 + i}": [(0.4, 6 * 1024**3)] * 3 for i in range(6)}
    samples["node/a"] = [(4.0, 40 * 1024**3)] * 3          # the node was quieter over the window
    view = model_view(snap, settings, samples=samples)
    assert view["smoothed"] and view["window_s"] == settings.window_s
    assert view["nodes"]["a"]["cpu"] < view["nodes"]["a"]["cpu_now"]
    assert view["imbalance"]["keel"] == round(make_plan(snap, settings, History(), NOW, samples).before.figures.keel, 4)


def test_achieved_says_why_it_differs_from_the_promise():
    snap, settings = hot(), BalancingSettings()
    plan = make_plan(snap, settings, History(), NOW)
    promised = outcome.promise(plan)
    assert promised["imbalance"] == round(plan.after.figures.keel, 4) and promised["moves"] == len(plan.moves)
    # nothing moved: the cluster is as before, so the promise is not met, and it says why
    achieved = outcome.measure(snap, settings, (), promised, 0, len(plan.moves), NOW)
    assert achieved["imbalance"] == round(plan.before.figures.keel, 4)
    assert achieved["why"][0] == f"{len(plan.moves)} of {len(plan.moves)} moves were not made"
    assert any(w.startswith("load moved: a's CPU") for w in achieved["why"])


def answer(data, status=200):
    return Response(json.dumps({"data": data}), status=status, content_type="application/json")


def test_keel_web_sends_only_the_fields_asked_for_with_an_etag_304_and_gzip():
    assert _fields_arg(b"limit=5&fields=cluster,job") == (b"limit=5", ("cluster", "job"))
    assert _fields_arg(b"fields=cluster;rm") == (b"", ())
    assert _fields_arg(b"limit=5") == (b"limit=5", None)
    app = Flask("t")
    data = {"cluster": {"nodes": ["x" * 40] * 40}, "job": None, "time": 1.0}
    with app.test_request_context("/api/status", headers={"Accept-Encoding": "gzip"}):
        first = _cheap(answer(data), ("cluster", "job"))
        assert first.headers["Content-Encoding"] == "gzip"
        assert json.loads(gzip.decompress(first.get_data()))["data"] == {"cluster": data["cluster"], "job": None}
        etag = first.headers["ETag"]
    with app.test_request_context("/api/status", headers={"If-None-Match": etag}):
        again = _cheap(answer({**data, "time": 2.0}), ("cluster", "job"))     # time is not asked for
        assert again.status_code == 304 and again.get_data() == b""
    with app.test_request_context("/api/status", headers={"If-None-Match": etag}):
        changed = _cheap(answer({**data, "job": {"id": "x"}}), ("cluster", "job"))
        assert changed.status_code == 200 and changed.headers["ETag"] != etag
        assert "Content-Encoding" not in changed.headers           # not asked for gzip
    with app.test_request_context("/api/status"):
        refused = _cheap(answer(None, 503), None)
        assert refused.status_code == 503 and "ETag" not in refused.headers
