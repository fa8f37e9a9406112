"""The wake test (docs/power.md, the ``Wake-on-LAN`` gate): a node sleeps only with a
successful wake by Keel within ``wake_test_max_age``.  ``keel power test NODE`` and ``POST
/api/power/nodes/<node>/test`` put the node to sleep (every other gate applies) and wake it
at once, against ``keel sim`` on the power cluster (its clock 60 times real time); the
simulator's request log and state say what was done."""

from __future__ import annotations

import json

import pytest

from keel.errors import BusyError, ExitStatus
from service_helpers import start_engine, wait_for, write_config
from .test_power_sleep import TOKEN, cluster, ha_maintenance, ha_manager, keel, node_power  # noqa: F401

TESTED = {"wake_test_max_age": "30d"}          # the default, which the other power tests turn off


def writes(sim, node, since=0):
    return [(r["method"], r["path"]) for r in sim.requests_log(since) if r["method"] == "POST"
            and r["path"] in (f"/nodes/{node}/status", f"/nodes/{node}/wakeonlan")]


def plan(sim, tmp_path, node):
    status, out, err = keel(sim, tmp_path, "plan", "--json", "--node", node, **TESTED)
    assert status == 0, err
    return json.loads(out)


def test_keel_power_test_records_the_wake_and_the_node_then_passes_the_gate(cluster, tmp_path):
    before = plan(cluster, tmp_path, "pve7")
    assert before["verdict"] == "ALL AWAKE"
    assert [(r["gate"], r["node"]) for r in before["refusals"]] == [("Wake-on-LAN", "pve7")]
    assert "never" in before["refusals"][0]["detail"] and "keel power test pve7" in before["refusals"][0]["detail"]
    status, _, err = keel(cluster, tmp_path, "sleep", "pve7", "--yes", **TESTED)
    assert status == ExitStatus.BUSY and "Wake-on-LAN: no successful wake test" in err
    assert writes(cluster, "pve7") == []

    status, out, err = keel(cluster, tmp_path, "test", "pve7", "--yes", **TESTED)
    assert status == 0, out + err
    assert "pve7: asleep" in out and "Wake-on-LAN sent to bc:24:11:19:00:07" in out and "wake test passed" in out
    assert [path.rsplit("/", 1)[1] for _, path in writes(cluster, "pve7")] == ["status", "wakeonlan"]
    assert node_power(cluster, "pve7") == "online" and not ha_maintenance(cluster, "pve7")

    after = plan(cluster, tmp_path, "pve7")
    assert after["verdict"] == "SLEEP" and after["sleep"] == ["pve7"], after["refusals"]
    status, out, _ = keel(cluster, tmp_path, "status", "--json", **TESTED)
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert nodes["pve7"]["wake_test"] and nodes["pve6"]["wake_test"] is None
    assert plan(cluster, tmp_path, "pve6")["refusals"][0]["gate"] == "Wake-on-LAN"     # tests are per node
    # and a test older than wake_test_max_age no longer counts
    status, out, _ = keel(cluster, tmp_path, "plan", "--json", "--node", "pve7", wake_test_max_age="1ms")
    assert json.loads(out)["refusals"][0]["gate"] == "Wake-on-LAN"


def test_a_wake_test_that_does_not_wake_is_reported_and_records_no_test(cluster, tmp_path):
    cluster.control("POST", "nodes/pve7", {"next_wake": "fail"})
    status, out, err = keel(cluster, tmp_path, "test", "pve7", "--yes", wake_timeout="5s", **TESTED)
    assert status == ExitStatus.TASK_FAILED
    assert "pve7 did not come back within 5 s of its Wake-on-LAN packet" in err
    assert node_power(cluster, "pve7") == "off" and ha_maintenance(cluster, "pve7")
    status, out, _ = keel(cluster, tmp_path, "status", "--json", **TESTED)
    data = json.loads(out)
    pve7 = next(n for n in data["nodes"] if n["node"] == "pve7")
    assert pve7["keel_state"] == "did not wake" and pve7["wake_test"] is None
    assert [e["event"] for e in data["events"]][-2:] == ["did not wake", "wake test failed"]


def test_the_engine_tests_a_node_when_asked_and_it_may_sleep_then(cluster, tmp_path):
    config = write_config(tmp_path / "e1", cluster, api_token=TOKEN, balancing={
        "interval": "1s", "window": "3s", "guests": ["vm", "ct"],
        "power": {"mode": "recommend", "nodes": ["pve7"], "wake_timeout": "20s", **TESTED}})
    service, client = start_engine(config)
    try:
        wait_for(lambda: client.call("GET", "/api/power")["leader"], timeout=30)
        with pytest.raises(BusyError) as refused:
            client.call("POST", "/api/power/nodes/pve7/sleep", {})
        assert "Wake-on-LAN: no successful wake test within wake_test_max_age (30d): never" in str(refused.value)
        job = client.call("POST", "/api/power/nodes/pve7/test", {})
        assert job["kind"] == "power-test" and job["requested_by"] == "root"
        done = wait_for(lambda: client.call("GET", f"/api/jobs/{job['id']}")["state"] in ("done", "failed")
                        and client.call("GET", f"/api/jobs/{job['id']}"), timeout=120)
        assert done["state"] == "done", done
        assert [path.rsplit("/", 1)[1] for _, path in writes(cluster, "pve7")] == ["status", "wakeonlan"]
        power = client.call("GET", "/api/power")
        assert next(n for n in power["nodes"] if n["node"] == "pve7")["wake_test"]
        assert [e["event"] for e in power["events"] if e["node"] == "pve7"][-1] == "wake test"
        shared = json.loads((tmp_path / "e1" / "shared" / "power.json").read_text())
        assert shared["power_wake_tests"]["pve7"]["by"] == "root"      # in pmxcfs: every leader sees it
        # once the engine's reading has it back (a reading may be 2 s old), pve7 may sleep
        wait_for(lambda: client.call("GET", "/api/power/plan")["sleep"] == ["pve7"], timeout=30)
    finally:
        service.stop()
