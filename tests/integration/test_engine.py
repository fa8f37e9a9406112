"""keel-engine as a real process (gunicorn, Unix socket) against the simulator: status,
plan, apply jobs, maintenance, config reload, and leadership."""

from __future__ import annotations

import time

import pytest
import yaml

from keel.errors import BusyError, InvalidError
from service_helpers import start_engine, wait_for, write_config


@pytest.fixture
def engine(sim_factory, tmp_path):
    sim = sim_factory(clock_factor=40)
    config = write_config(tmp_path / "e1", sim)
    service, client = start_engine(config)
    yield sim, service, client
    service.stop()


def test_status_plan_and_apply_through_the_local_api(engine):
    sim, service, client = engine
    status = wait_for(lambda: (s := client.call("GET", "/api/status"))["leader"] and s)
    assert status["node"] == "pve1" and status["leader_node"] == "pve1"
    assert status["cluster"]["cluster"] == "demo" and status["config"]["error"] is None
    plan = client.call("GET", "/api/plan")
    assert plan["verdict"] == "PLANNED" and plan["moves"]
    job = client.call("POST", "/api/apply", {}, user="cli:tester")
    assert job["state"] == "running" and job["requested_by"] == "cli:tester"
    done = wait_for(lambda: (j := client.call("GET", f"/api/jobs/{job['id']}"))["state"] != "running" and j,
                    timeout=120)
    assert done["state"] == "done", done
    # the engine plans again when asked to apply: the same cluster, perhaps a move more or less
    assert done["progress"]["ok"] == done["progress"]["total"] == len(done["plan"]["moves"]) > 0
    history = client.call("GET", "/api/history")
    assert {m["requested_by"] for m in history["moves"]} == {"cli:tester"}
    after = client.call("GET", "/api/plan")["before"]["imbalance"]["keel"]
    assert after < plan["before"]["imbalance"]["keel"] / 2


def test_bad_requests_name_what_is_wrong(engine):
    _, _, client = engine
    with pytest.raises(InvalidError) as err:
        client.call("POST", "/api/apply", {"metod": "keel"})
    assert err.value.errors == {"metod": "unknown key"}
    with pytest.raises(InvalidError, match="method"):
        client.call("GET", "/api/plan?method=greedy")
    with pytest.raises(InvalidError, match="memory"):
        client.call("GET", "/api/best-node?cores=2&memory=lots")
    assert client.call("GET", "/api/best-node?cores=2&memory=4GiB")["best"]


def test_maintenance_empties_the_node_and_is_kept_cluster_wide(engine, tmp_path):
    _, _, client = engine
    wait_for(lambda: client.call("GET", "/api/status")["leader"])
    answer = client.call("POST", "/api/maintenance/pve4", {"action": "enter"}, user="web:alice@pam")
    job = answer["job"]
    done = wait_for(lambda: (j := client.call("GET", f"/api/jobs/{job['id']}"))["state"] != "running" and j,
                    timeout=120)
    assert done["state"] == "done" and done["kind"] == "maintenance"
    shared = yaml.safe_load((tmp_path / "e1" / "shared" / "maintenance.json").read_text())
    assert shared["nodes"]["pve4"]["requested_by"] == "web:alice@pam"
    assert client.call("GET", "/api/maintenance") == shared["nodes"]
    client.call("POST", "/api/maintenance/pve4", {"action": "leave"})
    assert client.call("GET", "/api/maintenance") == {}
    with pytest.raises(Exception, match="no node 'pve9'"):
        client.call("POST", "/api/maintenance/pve9", {"action": "enter"})


def test_a_bad_config_is_refused_and_the_last_good_one_keeps_running(engine, tmp_path):
    _, _, client = engine
    path = tmp_path / "e1" / "keel.yaml"
    good = path.read_text()
    data = yaml.safe_load(good)
    data["balancing"]["threshold"] = "lots"
    data["balancing"]["metod"] = "keel"
    path.write_text(yaml.safe_dump(data))
    status = wait_for(lambda: (s := client.call("GET", "/api/status"))["config"]["error"] and s)
    assert "balancing.threshold" in status["config"]["error"] and "balancing.metod" in status["config"]["error"]
    assert status["config"]["threshold"] == 0.10                  # still the last good one
    # through the API: refused with every bad key named, nothing written
    with pytest.raises(InvalidError) as err:
        client.call("PUT", "/api/config", {"text": yaml.safe_dump(data)})
    assert set(err.value.errors) >= {"balancing.threshold", "balancing.metod"}
    check = client.call("POST", "/api/config/validate", {"text": "balancing: {hold: -1}"})
    assert not check["valid"] and "balancing.hold" in check["errors"]
    data = yaml.safe_load(good)
    data["balancing"]["threshold"] = 0.25
    client.call("PUT", "/api/config", {"text": yaml.safe_dump(data)}, user="web:root@pam")
    status = wait_for(lambda: (s := client.call("GET", "/api/status"))["config"]["threshold"] == 0.25 and s)
    assert status["config"]["error"] is None
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".keel.yaml")] == []


def test_a_second_apply_while_one_runs_is_refused(sim_factory, tmp_path):
    sim = sim_factory(clock_factor=2)             # migrations take a while
    service, client = start_engine(write_config(tmp_path / "slow", sim))
    try:
        _second_apply(client)
    finally:
        service.stop()


def _second_apply(client):
    wait_for(lambda: client.call("GET", "/api/status")["leader"])
    job = client.call("POST", "/api/apply", {})
    with pytest.raises(BusyError, match="being carried out"):
        client.call("POST", "/api/apply", {})
    client.call("DELETE", f"/api/jobs/{job['id']}", user="cli:tester")
    done = wait_for(lambda: (j := client.call("GET", f"/api/jobs/{job['id']}"))["state"] not in
                    ("running", "cancelling") and j, timeout=120)
    assert done["state"] == "cancelled" and done["cancelled_by"] == "cli:tester"
    assert done["progress"]["completed"] < done["progress"]["total"]
    time.sleep(0.5)
