"""What hangs off a node: /nodes, status, version, rrddata, storage and tasks."""

from __future__ import annotations

import re

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"
GiB = 1024**3
PSI_NODE = {"pressurecpusome", "pressureiosome", "pressureiofull", "pressurememorysome",
            "pressurememoryfull"}
NODE_RRD_PVE8 = {"time", "loadavg", "maxcpu", "cpu", "iowait", "memtotal", "memused", "swaptotal",
                 "swapused", "roottotal", "rootused", "netin", "netout"}
NODE_RRD_PVE9 = NODE_RRD_PVE8 | {"memavailable", "arcsize"} | PSI_NODE

PVE8 = {
    "pve_version": "8.4.1",
    "nodes": [{"name": "n1", "cpus": 8, "memory": "32GiB"}, {"name": "n2"}],
    "guests": [{"vmid": 100, "node": "n1", "cpus": 2, "memory": "4GiB", "cpu": 0.5},
               {"vmid": 101, "node": "n1", "type": "lxc"}],
    "users": [{"userid": "root@pam", "password": "secret"}],
}


def get(sim, path: str, token: str = DEMO_TOKEN, **params) -> requests.Response:
    return requests.get(f"{sim.url}{API}{path}", params=params,
                        headers={"Authorization": f"PVEAPIToken={token}"}, verify=sim.cert, timeout=30)


def wait_task(sim, pve, upid: str, step: float = 1.0, limit: float = 600) -> dict:
    node = upid.split(":")[1]
    waited = 0.0
    while True:
        status = pve.nodes(node).tasks(upid).status.get()
        if status["status"] == "stopped" or waited >= limit:
            return status
        sim.advance(step)
        waited += step


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- /nodes, status, version ---------------------------------------------------------


def test_nodes_list_every_node_with_usage_and_fingerprint(shared_sim):
    nodes = shared_sim.proxmox().nodes.get()
    assert [n["node"] for n in nodes] == ["pve1", "pve2", "pve3", "pve4", "pve5"]
    pve1 = nodes[0]
    assert set(pve1) == {"id", "type", "node", "status", "level", "cpu", "maxcpu", "mem", "maxmem",
                         "disk", "maxdisk", "uptime", "ssl_fingerprint"}
    assert (pve1["id"], pve1["type"], pve1["status"]) == ("node/pve1", "node", "online")
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", pve1["ssl_fingerprint"])


def test_node_status_has_string_loadavg_and_cpuinfo(shared_sim):
    status = shared_sim.proxmox().nodes("pve1").status.get()
    assert len(status["loadavg"]) == 3 and all(isinstance(x, str) for x in status["loadavg"])
    assert float(status["loadavg"][0]) > 0
    info = status["cpuinfo"]
    assert (info["cpus"], info["sockets"], info["cores"]) == (64, 1, 32)
    assert isinstance(info["mhz"], str) and float(info["mhz"]) > 0
    assert info["model"] and info["flags"] and info["user_hz"] == 100
    memory = status["memory"]
    assert memory["total"] == 256 * GiB
    assert memory["used"] + memory["free"] == memory["total"]
    assert 0 < status["cpu"] < 1
    assert status["pveversion"].startswith("pve-manager/9.1.4/")
    assert status["boot-info"]["mode"] in ("efi", "legacy-bios")
    assert set(status["current-kernel"]) == {"sysname", "release", "version", "machine"}
    assert not PSI_NODE & set(status)


def test_node_status_memory_matches_cluster_resources(shared_sim):
    pve = shared_sim.proxmox()
    used = pve.nodes("pve2").status.get()["memory"]["used"]
    node = [e for e in pve.cluster.resources.get(type="node") if e["node"] == "pve2"][0]
    assert node["mem"] == used


def test_node_version(shared_sim):
    version = shared_sim.proxmox().nodes("pve3").version.get()
    assert (version["version"], version["release"]) == ("9.1.4", "9.1")
    assert re.fullmatch(r"[0-9a-f]{8,64}", version["repoid"])


def test_unknown_node_is_500_naming_it(shared_sim):
    response = get(shared_sim, "/nodes/pve9/status")
    assert response.status_code == 500
    assert "pve9" in response.reason


# -- rrddata -------------------------------------------------------------------------


def test_node_rrddata_hour_has_60_one_minute_rows_with_psi_on_pve9(shared_sim):
    rows = shared_sim.proxmox().nodes("pve1").rrddata.get(timeframe="hour")
    assert len(rows) == 60
    times = [r["time"] for r in rows]
    assert all(b - a == 60 for a, b in zip(times, times[1:]))
    assert all(set(r) == NODE_RRD_PVE9 for r in rows)
    assert all(0 <= r["cpu"] <= 1 and r["maxcpu"] == 64 for r in rows)
    assert all(0 <= r[k] <= 100 for r in rows for k in PSI_NODE)
    assert all(r["memused"] + r["memavailable"] == r["memtotal"] for r in rows)


def test_node_rrddata_rows_end_before_now(shared_sim):
    now = shared_sim.control("GET", "state")["time"]
    rows = shared_sim.proxmox().nodes("pve1").rrddata.get(timeframe="hour")
    assert rows[-1]["time"] < now <= rows[-1]["time"] + 120


@pytest.mark.parametrize("timeframe, step, count", [
    ("day", 60, 1440), ("week", 1800, 336), ("month", 1800, 1440), ("year", 21600, 1440),
])
def test_node_rrddata_timeframes_have_pve9_resolutions(shared_sim, timeframe, step, count):
    rows = shared_sim.proxmox().nodes("pve4").rrddata.get(timeframe=timeframe)
    assert len(rows) == count
    assert rows[1]["time"] - rows[0]["time"] == step


def test_node_rrddata_max_is_at_least_average(shared_sim):
    pve = shared_sim.proxmox()
    average = pve.nodes("pve1").rrddata.get(timeframe="day", cf="AVERAGE")
    peak = pve.nodes("pve1").rrddata.get(timeframe="day", cf="MAX")
    assert [r["time"] for r in average] == [r["time"] for r in peak]
    assert all(p["cpu"] >= a["cpu"] - 1e-9 for a, p in zip(average, peak))
    assert any(p["cpu"] > a["cpu"] for a, p in zip(average, peak))   # pve1 has noisy guests


def test_node_rrddata_on_pve8_has_no_psi_and_the_old_resolutions(sim_factory):
    sim = sim_factory(PVE8)
    pve = sim.proxmox(user="root@pam", password="secret")
    rows = pve.nodes("n1").rrddata.get(timeframe="hour")
    assert len(rows) == 60 and all(set(r) == NODE_RRD_PVE8 for r in rows)
    day = pve.nodes("n1").rrddata.get(timeframe="day")
    assert len(day) == 70 and day[1]["time"] - day[0]["time"] == 1800
    guest = pve.nodes("n1").qemu(100).rrddata.get(timeframe="hour")
    assert not any(k.startswith("pressure") or k == "memhost" for r in guest for k in r)


def test_node_rrddata_rejects_an_unknown_timeframe(shared_sim):
    response = get(shared_sim, "/nodes/pve1/rrddata", timeframe="century")
    assert response.status_code == 400
    assert "timeframe" in response.json()["errors"]


# -- storage -------------------------------------------------------------------------


def test_storage_config_lists_type_content_and_shared(shared_sim):
    storages = {s["storage"]: s for s in shared_sim.proxmox().storage.get()}
    assert set(storages) == {"local", "local-lvm", "ceph"}
    assert storages["ceph"]["type"] == "rbd" and storages["ceph"]["shared"] == 1
    assert "shared" not in storages["local-lvm"]
    assert storages["local"]["content"] == "iso,vztmpl,backup"
    assert shared_sim.proxmox().storage.get(type="rbd") == [storages["ceph"]]


def test_node_storage_status_has_sizes_and_flags(shared_sim):
    storages = {s["storage"]: s for s in shared_sim.proxmox().nodes("pve1").storage.get()}
    lvm = storages["local-lvm"]
    assert {"storage", "type", "content", "shared", "active", "enabled", "total", "used", "avail",
            "used_fraction"} == set(lvm)
    assert (lvm["shared"], lvm["active"], lvm["enabled"]) == (0, 1, 1)
    assert lvm["used"] + lvm["avail"] == lvm["total"] == 2 * 1024 * GiB
    assert lvm["used_fraction"] == pytest.approx(lvm["used"] / lvm["total"], abs=1e-6)
    assert storages["ceph"]["shared"] == 1


def test_node_storage_filters_by_content(shared_sim):
    names = [s["storage"] for s in shared_sim.proxmox().nodes("pve1").storage.get(content="iso")]
    assert names == ["local"]


def test_local_storage_content_lists_the_volumes_of_that_nodes_guests(shared_sim):
    content = shared_sim.proxmox().nodes("pve1").storage("local-lvm").content.get()
    assert [v["volid"] for v in content] == ["local-lvm:vm-112-disk-0"]
    volume = content[0]
    assert (volume["vmid"], volume["size"], volume["format"]) == (112, 200 * GiB, "raw")
    assert shared_sim.proxmox().nodes("pve2").storage("local-lvm").content.get() == []


def test_shared_storage_content_filters_by_vmid(shared_sim):
    content = shared_sim.proxmox().nodes("pve3").storage("ceph").content.get(vmid=100)
    assert [(v["volid"], v["vmid"]) for v in content] == [("ceph:vm-100-disk-0", 100)]
    template = shared_sim.proxmox().nodes("pve3").storage("ceph").content.get(vmid=9000)
    assert template[0]["volid"] == "ceph:base-9000-disk-0"


def test_storage_content_of_an_unknown_storage_is_500(shared_sim):
    response = get(shared_sim, "/nodes/pve1/storage/nfs/content")
    assert response.status_code == 500


# -- tasks ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks_sim(tmp_path_factory):
    """A demo cluster with a few finished tasks and one running."""
    from conftest import DEMO_SCENARIO, start_sim
    sim = start_sim(DEMO_SCENARIO, tmp_path_factory.mktemp("tasks-sim"))
    pve = sim.proxmox()
    upids = {"start121": pve.nodes("pve3").qemu(121).status.start.post()}
    sim.advance(5)
    upids["stop119"] = pve.nodes("pve3").qemu(119).status.stop.post()
    sim.advance(5)
    upids["start122"] = pve.nodes("pve3").qemu(122).status.start.post()
    sim.advance(5)
    upids["migrate119"] = pve.nodes("pve3").qemu(119).migrate.post(target="pve4")
    sim.upids = upids
    yield sim
    sim.stop()


def test_task_list_defaults_to_finished_tasks_newest_first(tasks_sim):
    tasks = tasks_sim.proxmox().nodes("pve3").tasks.get()
    assert [t["upid"] for t in tasks] == [tasks_sim.upids[k] for k in ("start122", "stop119", "start121")]
    entry = tasks[0]
    assert {"upid", "node", "pid", "pstart", "starttime", "type", "id", "user", "tokenid",
            "endtime", "status"} == set(entry)
    assert (entry["status"], entry["type"], entry["id"]) == ("OK", "qmstart", "122")
    assert (entry["user"], entry["tokenid"]) == ("keel@pve", "keel")


@pytest.mark.parametrize("params, keys", [
    ({"typefilter": "qmstart"}, ["start122", "start121"]),
    ({"vmid": 119}, ["stop119"]),
    ({"vmid": 119, "source": "all"}, ["migrate119", "stop119"]),
    ({"source": "active"}, ["migrate119"]),
    ({"source": "all", "typefilter": "qmigrate"}, ["migrate119"]),
    ({"limit": 1}, ["start122"]),
    ({"start": 1, "limit": 1}, ["stop119"]),
    ({"errors": 1}, []),
    ({"statusfilter": "ok"}, ["start122", "stop119", "start121"]),
    ({"userfilter": "root"}, []),
])
def test_task_list_filters(tasks_sim, params, keys):
    tasks = tasks_sim.proxmox().nodes("pve3").tasks.get(**params)
    assert [t["upid"] for t in tasks] == [tasks_sim.upids[k] for k in keys]


def test_running_task_is_listed_with_status_running(tasks_sim):
    [task] = tasks_sim.proxmox().nodes("pve3").tasks.get(source="active")
    assert task["status"] == "RUNNING" and "endtime" not in task


def test_task_list_since_and_until_bound_the_start_time(tasks_sim):
    pve = tasks_sim.proxmox()
    start = pve.nodes("pve3").tasks(tasks_sim.upids["stop119"]).status.get()["starttime"]
    assert [t["upid"] for t in pve.nodes("pve3").tasks.get(since=start)] == \
        [tasks_sim.upids["start122"], tasks_sim.upids["stop119"]]
    assert [t["upid"] for t in pve.nodes("pve3").tasks.get(until=start - 1)] == \
        [tasks_sim.upids["start121"]]


def test_task_status_of_a_finished_task(tasks_sim):
    upid = tasks_sim.upids["start121"]
    status = tasks_sim.proxmox().nodes("pve3").tasks(upid).status.get()
    assert status["status"] == "stopped" and status["exitstatus"] == "OK"
    assert (status["upid"], status["node"], status["type"], status["id"]) == (upid, "pve3", "qmstart", "121")
    assert (status["user"], status["tokenid"]) == ("keel@pve", "keel")
    assert status["pid"] == int(upid.split(":")[2], 16)
    assert status["starttime"] == int(upid.split(":")[4], 16)


def test_task_log_has_numbered_lines_ending_in_task_ok(tasks_sim):
    upid = tasks_sim.upids["start121"]
    log = tasks_sim.proxmox().nodes("pve3").tasks(upid).log.get()
    assert log[-1]["t"] == "TASK OK"
    assert [line["n"] for line in log] == list(range(1, len(log) + 1))


def test_unknown_task_is_400_naming_upid(tasks_sim):
    upid = tasks_sim.upids["start121"].replace(":pve3:", ":pve4:")
    response = get(tasks_sim, f"/nodes/pve4/tasks/{upid}/status")
    assert response.status_code == 400
    assert response.json()["errors"] == {"upid": "no such task"}
    response = get(tasks_sim, "/nodes/pve3/tasks/UPID:garbage/status")
    assert response.json()["errors"] == {"upid": "unable to parse worker upid"}


def test_running_migration_log_grows_with_simulated_time(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    first = pve.nodes("pve1").tasks(upid).log.get()
    assert "starting migration of VM 103 to node 'pve2' (10.0.0.2)" in first[0]["t"]
    sim.advance(5)
    assert len(pve.nodes("pve1").tasks(upid).log.get()) > len(first)


def test_delete_stops_a_running_task(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    assert pve.nodes("pve1").tasks(upid).delete() is None
    status = pve.nodes("pve1").tasks(upid).status.get()
    assert status["status"] == "stopped" and status["exitstatus"] != "OK"
    sim.advance(60)
    config = pve.nodes("pve1").qemu(103).config.get()
    assert "lock" not in config
    assert [g["node"] for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 103] == ["pve1"]


def test_only_the_owner_or_an_auditor_sees_a_task(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve3").qemu(121).status.start.post()
    root = sim.proxmox(user="root@pam", password="keel-demo")
    assert root.nodes("pve3").tasks(upid).status.get()["type"] == "qmstart"
    auditor = sim.proxmox(user="auditor@pve", password="keel-demo")
    assert auditor.nodes("pve3").tasks(upid).status.get()["type"] == "qmstart"   # Sys.Audit
    with pytest.raises(ResourceException) as err:
        auditor.nodes("pve3").tasks(upid).delete()
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/nodes/pve3, Sys.Modify)"
