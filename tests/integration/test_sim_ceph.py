"""Hyperconverged Ceph in the simulator, over real HTTPS through proxmoxer (issue 19):
status and health, the OSD flags, the OSD tree and the pools, as PVE's API answers them,
and what a node's OSDs going down does to them; plus the power scenario's day."""

from __future__ import annotations

from pathlib import Path

import pytest
from proxmoxer import ResourceException

from conftest import BACKEND, start_sim

POWER = BACKEND / "keel" / "sim" / "scenarios" / "power.yaml"
TOKEN = "keel@pve!keel=19191919-0000-4000-8000-000000000019"


@pytest.fixture(scope="module")
def _power_sim(tmp_path_factory):
    sim = start_sim(POWER, tmp_path_factory.mktemp("ceph"))
    yield sim
    sim.stop()


@pytest.fixture
def sim(_power_sim):
    _power_sim.control("POST", "reset")
    return _power_sim


def pve(sim):
    return sim.proxmox(token=TOKEN)


def run(sim, seconds: float, step: float = 10) -> None:
    done = 0.0
    while done < seconds:
        sim.advance(step)
        done += step


def test_status_is_ceph_status_with_health_detail_and_the_mon_dump(sim):
    api = pve(sim)
    status = api.cluster.ceph.status.get()
    assert status["health"] == {"status": "HEALTH_OK", "checks": {}, "mutes": []}
    assert status["quorum_names"] == ["pve1", "pve2", "pve3"]
    assert [m["name"] for m in status["monmap"]["mons"]] == ["pve1", "pve2", "pve3"]
    assert status["monmap"]["min_mon_release_name"] == "squid"
    osdmap = status["osdmap"]
    assert (osdmap["num_osds"], osdmap["num_up_osds"], osdmap["num_in_osds"]) == (8, 8, 8)
    pgmap = status["pgmap"]
    assert pgmap["num_pools"] == 2 and pgmap["num_pgs"] == 129            # .mgr and ceph-vm
    assert pgmap["pgs_by_state"] == [{"state_name": "active+clean", "count": 129}]
    assert pgmap["bytes_total"] == 8 * 4 * 1024**4 and pgmap["bytes_used"] > 0
    assert api.nodes("pve2").ceph.status.get()["fsid"] == status["fsid"]


def test_nodes_without_ceph_say_it_is_not_installed(sim):
    with pytest.raises(ResourceException) as err:
        pve(sim).nodes("pve6").ceph.osd.get()
    assert err.value.status_code == 500 and "binary not installed: /usr/bin/ceph-mon" in str(err.value)


def test_the_flags_are_listed_set_and_cleared_as_pve_does(sim):
    api = pve(sim)
    flags = api.cluster.ceph.flags.get()
    assert [f["name"] for f in flags] == ["nobackfill", "nodeep-scrub", "nodown", "noin", "noout",
                                          "norebalance", "norecover", "noscrub", "notieragent",
                                          "noup", "pause"]
    assert all(f["value"] == 0 and f["description"] for f in flags)
    assert api.cluster.ceph.flags("noout").put(value=1) is None
    assert api.cluster.ceph.flags("noout").get() == 1
    health = api.cluster.ceph.status.get()["health"]
    assert health["status"] == "HEALTH_WARN"
    assert health["checks"]["OSDMAP_FLAGS"]["summary"]["message"] == "noout flag(s) set"
    assert api.nodes("pve1").ceph.osd.get()["flags"].startswith("noout,sortbitwise")
    upid = api.cluster.ceph.flags.put(noout=0, noscrub=1)
    assert ":cephsetflags::keel@pve!keel:" in upid
    sim.advance(1)
    assert api.nodes("pve1").tasks(upid).status.get()["exitstatus"] == "OK"
    assert [line["t"] for line in api.nodes("pve1").tasks(upid).log.get()] == [
        "unset noout", "set noscrub", "TASK OK"]           # in the order of PVE's flag list
    assert {f["name"] for f in api.cluster.ceph.flags.get() if f["value"]} == {"noscrub"}
    with pytest.raises(ResourceException) as err:
        api.cluster.ceph.flags("nofun").get()
    assert err.value.status_code == 400


def test_the_osd_tree_and_the_pools(sim):
    api = pve(sim)
    tree = api.nodes("pve3").ceph.osd.get()
    [root] = tree["root"]["children"]
    assert (root["name"], root["type"]) == ("default", "root")
    assert [h["name"] for h in root["children"]] == ["pve1", "pve2", "pve3", "pve4"]
    osd = root["children"][0]["children"][0]
    assert {k: osd[k] for k in ("id", "name", "type", "host", "status", "in", "device_class", "leaf")} == {
        "id": 0, "name": "osd.0", "type": "osd", "host": "pve1", "status": "up", "in": 1,
        "device_class": "nvme", "leaf": 1}
    pools = {p["pool_name"]: p for p in api.nodes("pve1").ceph.pool.get()}
    assert set(pools) == {".mgr", "ceph-vm"}
    vm = pools["ceph-vm"]
    assert (vm["size"], vm["min_size"], vm["pg_num"], vm["type"], vm["crush_rule_name"]) == (
        3, 2, 128, "replicated", "replicated_rule")
    assert vm["application_metadata"] == {"rbd": {}} and vm["bytes_used"] > 0


def test_a_ceph_node_that_shuts_down_leaves_degraded_pgs_and_noout_keeps_its_osds_in(sim):
    api = pve(sim)
    api.cluster.ceph.flags("noout").put(value=1)
    api.nodes("pve4").status.post(command="shutdown")
    run(sim, 60)
    health = api.cluster.ceph.status.get()["health"]
    assert {"OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED", "OSDMAP_FLAGS"} <= set(health["checks"])
    assert health["checks"]["OSD_DOWN"]["detail"][0]["message"] == "osd.6 (root=default,host=pve4) is down"
    run(sim, 1200)
    osds = [o for h in api.nodes("pve1").ceph.osd.get()["root"]["children"][0]["children"]
            if h["name"] == "pve4" for o in h["children"]]
    assert [(o["status"], o["in"]) for o in osds] == [("down", 1), ("down", 1)]
    api.nodes("pve4").wakeonlan.post()
    run(sim, 130)
    status = api.cluster.ceph.status.get()
    assert status["pgmap"]["pgs_by_state"] == [{"state_name": "active+clean", "count": 129}]
    assert set(status["health"]["checks"]) == {"OSDMAP_FLAGS"}


def test_two_ceph_nodes_down_block_a_pool_below_min_size(sim):
    api = pve(sim)
    api.cluster.ceph.flags("noout").put(value=1)
    sim.control("POST", "nodes/pve3", {"power": "off"})
    sim.control("POST", "nodes/pve4", {"power": "off"})
    run(sim, 120)
    status = api.cluster.ceph.status.get()
    checks = status["health"]["checks"]
    assert checks["PG_AVAILABILITY"]["summary"]["message"].startswith("Reduced data availability: ")
    assert checks["PG_AVAILABILITY"]["severity"] == "HEALTH_WARN"
    assert "SLOW_OPS" in checks
    assert status["pgmap"]["inactive_pgs_ratio"] > 0
    state = sim.control("GET", "state")["ceph"]
    assert state["pools"]["ceph-vm"]["blocked"] is True and state["blocked_guests"]
    sim.control("POST", "nodes/pve2", {"power": "off"})            # 1 of 3 monitors left
    with pytest.raises(ResourceException) as err:
        api.cluster.ceph.status.get()
    assert err.value.status_code == 500 and "got timeout" in str(err.value)


def test_an_osd_can_fail_on_its_own_through_the_control_api(sim):
    api = pve(sim)
    sim.control("POST", "ceph/osds/3", {"up": False})
    assert api.cluster.ceph.status.get()["osdmap"]["num_up_osds"] == 7
    sim.control("POST", "ceph/osds/3", {"up": True})
    assert api.cluster.ceph.status.get()["osdmap"]["num_up_osds"] == 8


def test_the_power_scenarios_day_runs_through_its_load_trace(sim):
    """A whole simulated day in hourly steps: the clock gets there, nothing stalls, and the
    office load peaks in the working day and falls at night."""
    api = pve(sim)
    start = sim.control("GET", "state")["time"]
    load = {}
    for hour in range(24):
        sim.advance(3600)
        nodes = {n["node"]: n for n in api.cluster.resources.get(type="node")}
        load[hour + 1] = sum(nodes[f"pve{i}"]["cpu"] * nodes[f"pve{i}"]["maxcpu"] for i in range(1, 9))
    assert sim.control("GET", "state")["time"] == start + 86400
    assert load[11] > 2 * load[23]                     # the working day against the night
    assert api.cluster.ceph.status.get()["health"]["status"] == "HEALTH_OK"
    assert all(g["status"] in ("running", "stopped") for g in api.cluster.resources.get(type="vm"))
    assert Path(POWER).exists()


def test_answers_carry_only_the_fields_pves_schema_lists(sim):
    from keel.sim.schema import Schema
    schema = Schema.load()
    api = pve(sim)
    for path, answer in (("/nodes/{node}/ceph/pool", api.nodes("pve1").ceph.pool.get()),
                         ("/cluster/ceph/flags", api.cluster.ceph.flags.get())):
        props = schema.endpoint("GET", path).returns["items"]["properties"]
        for entry in answer:
            assert set(entry) <= set(props), (path, set(entry) - set(props))
    props = schema.endpoint("GET", "/nodes/{node}/config").returns["properties"]
    assert set(api.nodes("pve1").config.get()) <= set(props)
    osd_props = schema.endpoint("GET", "/nodes/{node}/ceph/osd").returns
    assert set(api.nodes("pve1").ceph.osd.get()) <= set(osd_props["items"]["properties"])
