"""keel-engine's power saving in ``mode: automatic``, as real processes against ``keel sim``
on the power cluster (its clock 60 times real time): a quiet cluster consolidates and a node
sleeps; load rises and it is woken; a node that never wakes is reported and another woken;
a leader killed mid-sleep leaves nothing behind once the next one has reconciled."""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import start_sim
from service_helpers import start_engine, wait_for, write_config
from .test_power_sleep import fake_ha_manager, POWER, TOKEN

SLEEPERS = ["pve5", "pve6", "pve7", "pve8"]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    sim = start_sim(POWER, tmp_path / "sim", clock_factor=60)
    for n in SLEEPERS:
        sim.control("POST", f"nodes/{n}", {"next_wake": "normal"})     # no late boot by chance
    monkeypatch.setenv("PATH", fake_ha_manager(sim, tmp_path / "bin"))      # test_power_sleep's
    yield sim
    sim.stop()


def engine_config(tmp, sim, name="pve1", shared=None, lock=None, **power):
    settings = {"mode": "automatic", "nodes": SLEEPERS, "hold": "2s", "wake_timeout": "15s",
                "headroom": {"cpu": "40%"}, "wake_test_max_age": "off"}     # the wake test: test_power_test.py
    settings.update(power)
    return write_config(tmp, sim, node=name, shared=shared, lock=lock, api_token=TOKEN,
                        balancing={"interval": "1s", "hold": 2, "window": "3s", "guests": ["vm", "ct"], "power": settings})


def powered(sim):
    return {n: v["state"] for n, v in sim.control("GET", "state")["power"].items()}


def off(sim):
    return sorted(n for n, state in powered(sim).items() if state == "off")


def in_ha_maintenance(sim):
    manager = sim.client(TOKEN).get("/cluster/ha/status/manager_status")["manager_status"]
    return sorted(n for n, s in manager["node_status"].items() if s == "maintenance")


def noout(sim):
    return sim.client(TOKEN).get("/cluster/ceph/flags/noout")


def state_of(client, node):
    return next(n["state"] for n in client.call("GET", "/api/power")["nodes"] if n["node"] == node)


def busy(sim, guests_cpu=0.95):
    """Every running guest of the awake nodes near its full CPU: the load passes the line."""
    for g in sim.client(TOKEN).get("/cluster/resources", type="vm"):
        if g.get("status") == "running":
            sim.control("POST", f"guests/{g['vmid']}", {"cpu": guests_cpu, "profile": None})


def quiet(sim):
    for g in sim.client(TOKEN).get("/cluster/resources", type="vm"):
        sim.control("POST", f"guests/{g['vmid']}", {"cpu": 0.02, "profile": None})


def test_a_quiet_cluster_sleeps_a_node_and_wakes_it_when_the_load_rises(cluster, tmp_path):
    quiet(cluster)
    service, client = start_engine(engine_config(tmp_path / "e1", cluster))
    try:
        asleep = wait_for(lambda: off(cluster), timeout=120)
        node = asleep[0]
        assert node in SLEEPERS
        assert not [g for g in cluster.client(TOKEN).get("/cluster/resources", type="vm") if g["node"] == node]
        assert node in in_ha_maintenance(cluster)
        power = wait_for(lambda: state_of(client, node) == "sleeping" and client.call("GET", "/api/power"))
        assert next(n for n in power["nodes"] if n["node"] == node)["since"]
        assert [e["event"] for e in power["events"] if e["node"] == node][-1] == "asleep"
        assert "load stayed low" in next(e for e in power["events"] if e["node"] == node)["reason"]
        busy(cluster)
        wait_for(lambda: node not in off(cluster) and node not in in_ha_maintenance(cluster), timeout=60)
        power = client.call("GET", "/api/power")
        woken = [e for e in power["events"] if e["node"] == node and e["event"] == "waking"]
        assert woken and "headroom line" in woken[-1]["reason"]
        assert power["energy"]["node_hours_asleep"] > 0
    finally:
        service.stop()


def sleeping(client):
    return sorted((n["since"], n["node"]) for n in client.call("GET", "/api/power")["nodes"]
                  if n["state"] == "sleeping")


def test_a_node_that_never_wakes_is_reported_and_another_is_woken(cluster, tmp_path):
    quiet(cluster)
    service, client = start_engine(engine_config(tmp_path / "e1", cluster))
    try:
        asleep = wait_for(lambda: len(sleeping(client)) == 2 and sleeping(client), timeout=150)
        first, second = asleep[0][1], asleep[1][1]          # the longest asleep is woken first
        cluster.control("POST", f"nodes/{first}", {"next_wake": "fail"})
        busy(cluster)
        wait_for(lambda: second not in off(cluster) and second not in in_ha_maintenance(cluster), timeout=90)
        wait_for(lambda: state_of(client, second) == "awake")          # the engine's reading catches up
        power = client.call("GET", "/api/power")
        states = {n["node"]: n["state"] for n in power["nodes"]}
        assert states[first] == "did not wake" and states[second] == "awake"
        assert first in off(cluster) and first in in_ha_maintenance(cluster)    # off: never fenced
        assert power["energy"]["wakes_failed"] == 1
        assert any(e["node"] == first and e["event"] == "did not wake" for e in power["events"])
        # reported, and not woken again blindly while the load stays high
        wakes = lambda: [e for e in cluster.control("GET", "power") if e["node"] == first and e["event"] == "wol"]  # noqa: E731
        sent = len(wakes())
        import time
        time.sleep(5)
        assert len(wakes()) == sent
        text = client.request("GET", "/api/metrics", None, {})[2].decode()
        assert "keel_power_wakes_failed_total 1" in text and "keel_power_nodes_asleep 0" in text
    finally:
        service.stop()


def test_a_leader_killed_mid_sleep_leaves_nothing_behind_once_the_next_has_reconciled(cluster, tmp_path):
    quiet(cluster)
    shared, lock = tmp_path / "pmxcfs" / "keel", tmp_path / "pmxcfs" / "lock" / "keel-leader"
    first, _ = start_engine(engine_config(tmp_path / "e1", cluster, shared=shared, lock=lock))
    book = shared / "power.json"

    def in_maintenance():
        try:
            records = json.loads(book.read_text()).get("power_nodes", {})
        except (OSError, ValueError):
            return None
        return next((n for n, r in records.items() if r.get("ha_maintenance") and r.get("state") != "asleep"), None)

    try:
        node = wait_for(in_maintenance, timeout=120, step=0.01)
        os.killpg(first.process.pid, signal.SIGKILL)          # no goodbye, mid-sleep
        first.process.wait()
    finally:
        first.stop()
    second, client = start_engine(engine_config(tmp_path / "e2", cluster, name="pve2", shared=shared, lock=lock,
                                                mode="recommend"))
    try:
        wait_for(lambda: client.call("GET", "/api/status")["leader"], timeout=30)
        wait_for(lambda: state_of(client, node) == "awake" and node not in off(cluster), timeout=120)
        assert in_ha_maintenance(cluster) == [] and noout(cluster) == 0
        events = [e for e in client.call("GET", "/api/power")["events"] if e["node"] == node]
        assert "reconciled by pve2" in events[-1]["reason"]
        assert not list((shared / "jobs").glob("*.json"))   # the moves' journal is reconciled too
    finally:
        second.stop()


def test_a_shutdown_pve_refuses_is_undone_and_a_node_that_wakes_late_is_finished(cluster, tmp_path):
    quiet(cluster)
    cluster.control("POST", "faults", {"endpoints": [{"path": "/nodes/*/status", "method": "POST", "status": 500, "error_rate": 1,
                                                      "message": "simulated: shutdown refused"}]})
    # wake_timeout 3 s: 3 sim minutes, past a boot (2) and short of a late one (5)
    service, client = start_engine(engine_config(tmp_path / "e1", cluster, wake_timeout="3s"))
    try:
        def refused():
            return [e for e in client.call("GET", "/api/power")["events"] if e["event"] == "sleep refused"]
        event = wait_for(refused, timeout=120)[0]
        assert "PVE refused the shutdown" in event["detail"] and "simulated: shutdown refused" in event["detail"]
        cluster.control("DELETE", "faults")
        assert off(cluster) == []
        # nothing left behind: once nodes sleep, those in HA maintenance are the sleeping ones
        wait_for(lambda: off(cluster) and in_ha_maintenance(cluster) == off(cluster), timeout=120)
        assert state_of(client, event["node"]) in ("awake", "emptying", "shutting down", "sleeping")
        # now a node sleeps; it is woken, comes back too late, and its wake is finished when it is back
        node = wait_for(lambda: sleeping(client), timeout=60)[0][1]
        cluster.control("POST", f"nodes/{node}", {"next_wake": "late"})     # 3 min late: past wake_timeout
        busy(cluster)
        wait_for(lambda: state_of(client, node) == "did not wake", timeout=60)
        wait_for(lambda: state_of(client, node) == "awake" and node not in in_ha_maintenance(cluster), timeout=120)
        events = [e["event"] for e in client.call("GET", "/api/power")["events"] if e["node"] == node]
        assert events[-3:] == ["did not wake", "ha-maintenance", "awake"], events
    finally:
        service.stop()


def test_recommend_mode_only_plans_and_the_api_sleeps_and_wakes_a_node_when_asked(cluster, tmp_path):
    quiet(cluster)
    service, client = start_engine(engine_config(tmp_path / "e1", cluster, mode="recommend"))
    try:
        plan = wait_for(lambda: client.call("GET", "/api/power/plan"), timeout=30)
        assert plan["verdict"] == "SLEEP" and plan["sleep"]
        wait_for(lambda: (client.call("GET", "/api/power")["last"] or {}).get("decision"), timeout=30)
        import time
        time.sleep(5)                                            # past the hold: recommend acts on nothing
        assert off(cluster) == [] and "recommend" in client.call("GET", "/api/power")["last"]["decision"]["reason"]
        node = plan["sleep"][0]
        job = client.call("POST", f"/api/power/nodes/{node}/sleep", {})
        assert job["kind"] == "power-sleep" and job["requested_by"] == "root"
        wait_for(lambda: state_of(client, node) == "sleeping", timeout=90)
        assert client.call("GET", f"/api/jobs/{job['id']}")["state"] == "done"
        job = client.call("POST", f"/api/power/nodes/{node}/wake", {})
        wait_for(lambda: state_of(client, node) == "awake" and node not in in_ha_maintenance(cluster), timeout=90)
        events = client.call("GET", "/api/power")["events"]
        assert [e["reason"] for e in events if e["node"] == node][-1] == "asked by root"
    finally:
        service.stop()
