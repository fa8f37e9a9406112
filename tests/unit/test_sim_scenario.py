"""Scenario files: what a good one becomes, and every bad key named with its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from keel.errors import InvalidError
from keel.sim import scenario as sc
from keel.sim.clock import Clock
from keel.sim.cluster import Cluster

DEMO = Path(sc.__file__).parent / "scenarios" / "demo.yaml"
GiB = 1024**3


def minimal(**extra) -> dict:
    return {"nodes": [{"name": "n1"}, {"name": "n2"}], **extra}


def problems(data) -> dict[str, str]:
    with pytest.raises(InvalidError) as err:
        sc.parse(data)
    return err.value.errors


def test_the_demo_scenario_loads():
    scenario = sc.load(DEMO)
    assert (scenario.name, scenario.pve_version, scenario.pve_major) == ("demo", "9.1.4", 9)
    assert [n.name for n in scenario.nodes] == ["pve1", "pve2", "pve3", "pve4", "pve5"]
    assert len(scenario.guests) == 27
    web = next(g for g in scenario.guests if g.vmid == 100)
    assert (web.memory, web.mem_used, web.cores, web.ha.state) == (8 * GiB, 6 * GiB, 4, "started")
    assert [r.rule for r in scenario.ha_rules] == ["db-apart", "web-near-cache", "erp-prefers-big"]
    assert scenario.ha_rules[2].nodes == "pve1:2,pve2:2,pve5:1"


def test_a_minimal_scenario_gets_defaults():
    scenario = sc.parse(minimal())
    assert scenario.pve_version == "9.1.4" and scenario.local_node == "n1"
    assert [s.storage for s in scenario.storages] == ["local", "local-lvm"]
    assert [u.userid for u in scenario.users] == ["root@pam"]
    assert scenario.nodes[1].ip == "10.0.0.2" and scenario.nodes[0].cpus == 16
    assert scenario.migration_speed == GiB and scenario.migration_setup_s == 3.0


def test_guest_defaults_and_disk_names():
    scenario = sc.parse(minimal(guests=[
        {"vmid": 100, "node": "n1"},
        {"vmid": 101, "node": "n1", "type": "lxc", "disks": [{"size": "8G"}, {"size": "1T"}]},
        {"vmid": 102, "node": "n2", "disks": [{"size": "10G"}, {"cdrom": True, "storage": "local"}]},
    ]))
    vm, ct, cd = scenario.guests
    assert (vm.name, vm.type, vm.status, vm.memory, vm.mem_used) == ("vm100", "qemu", "running", 2 * GiB, GiB)
    assert [d.key for d in vm.disks] == ["scsi0"] and vm.disks[0].storage == "local-lvm"
    assert [d.key for d in ct.disks] == ["rootfs", "mp0"] and ct.name == "ct101"
    assert [d.key for d in cd.disks] == ["scsi0", "ide2"]


def test_sizes_durations_and_version_strings():
    scenario = sc.parse(minimal(pve_version=8.4, migration={"speed": "500MiB", "setup": "1m"},
                                guests=[{"vmid": 100, "node": "n1", "memory": 4 * GiB, "mem_used": 0.25}]))
    assert scenario.pve_version == "8.4.0" and scenario.pve_major == 8
    assert scenario.migration_speed == 500 * 1024**2 and scenario.migration_setup_s == 60
    assert scenario.guests[0].mem_used == GiB


@pytest.mark.parametrize("data, path, message", [
    ({}, "nodes", "a cluster needs at least one node"),
    (minimal(colour="blue"), "colour", "unknown key"),
    (minimal(pve_version="7.4"), "pve_version", "must be an 8.x or 9.x version"),
    ({"nodes": [{"name": "n1"}, {"name": "bad name"}]}, "nodes[1].name", "not a valid node name"),
    ({"nodes": [{"name": "n1"}, {"name": "n1"}]}, "nodes", "duplicate node name 'n1'"),
    ({"nodes": [{"name": "n1", "cpus": 0}]}, "nodes[0].cpus", "must be at least 1"),
    ({"nodes": [{"name": "n1", "memory": "lots"}]}, "nodes[0].memory", ""),
    ({"nodes": [{"name": "n1", "status": "asleep"}]}, "nodes[0].status", "must be one of online, offline"),
    (minimal(guests=[{"vmid": 100, "node": "n1"}, {"vmid": 101, "node": "n9"}]),
     "guests[1].node", "no node named 'n9'"),
    (minimal(guests=[{"vmid": 100}]), "guests[0].node", "is required"),
    (minimal(guests=[{"vmid": 99, "node": "n1"}]), "guests[0].vmid", "must be at least 100"),
    (minimal(guests=[{"vmid": 100, "node": "n1"}, {"vmid": 100, "node": "n2"}]), "guests",
     "duplicate vmid 100"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "type": "kvm"}]), "guests[0].type", "must be one of qemu, lxc"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "cpu": 1.5}]), "guests[0].cpu", "must be at most 1"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "storage": "nfs"}]), "guests[0].storage",
     "no storage named 'nfs'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "disks": [{"storage": "nfs"}]}]),
     "guests[0].disks[0].storage", "no storage named 'nfs'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "devices": ["gpu0"]}]), "guests[0].devices[0]",
     "not a local device key"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "profile": "spiky"}]), "guests[0].profile",
     "no profile named 'spiky'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "template": True}]), "guests[0].status",
     "a template cannot be running"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "ha": {"state": "on"}}]), "guests[0].ha.state",
     "must be one of"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "ha": {"failbak": True}}]), "guests[0].ha.failbak",
     "unknown key"),
    (minimal(ha={"groups": [{"group": "g", "nodes": "n1"}]}), "ha.groups", "PVE 9 has no HA groups"),
    (minimal(pve_version="8.4", ha={"rules": [{"rule": "r", "type": "node-affinity", "nodes": "n1",
                                               "resources": ["vm:100"]}]}), "ha.rules", "PVE 8 has no HA rules"),
    (minimal(ha={"rules": [{"rule": "r", "type": "resource-affinity", "resources": ["100", "101"]}]}),
     "ha.rules[0].affinity", "must be positive or negative"),
    (minimal(ha={"rules": [{"rule": "r", "type": "node-affinity", "resources": ["100"]}]}),
     "ha.rules[0].nodes", "a node-affinity rule needs nodes"),
    (minimal(users=[{"userid": "alice"}]), "users[0].userid", "must look like user@realm"),
    (minimal(acl=[{"path": "/", "role": "PVEAuditor"}]), "acl[0]", "needs a user, token or group"),
    (minimal(profiles={"p": {"daily": {"amplitude": 2}}}), "profiles.p.daily.amplitude", "must be at most 1"),
    (minimal(faults={"endpoints": [{"path": "/x", "status": 200}]}), "faults.endpoints[0].status",
     "must be at least 400"),
    (minimal(faults={"migrations": [{"vmid": 100, "rate": 2}]}), "faults.migrations[0].rate",
     "must be at most 1"),
    (minimal(local_node="n7"), "local_node", "no node named 'n7'"),
    (minimal(start_time="yesterday"), "start_time", "expected an ISO 8601 time"),
    (minimal(storages=[{"storage": "s", "size": "big"}]), "storages[0].size", ""),
])
def test_a_bad_key_is_named_with_its_path(data, path, message):
    found = problems(data)
    assert path in found, found
    assert message in found[path]


def test_every_problem_is_reported_at_once():
    found = problems({"nodes": [{"name": "n1", "cpus": "many"}], "colour": "blue",
                      "guests": [{"vmid": 100, "node": "n1"}, {"vmid": 101, "node": "nx", "cpu": 3}]})
    assert set(found) == {"nodes[0].cpus", "colour", "guests[1].node", "guests[1].cpu"}


def test_the_error_message_lists_the_paths(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("nodes:\n  - {name: n1}\nguests:\n  - {vmid: 100, node: n2}\n")
    with pytest.raises(InvalidError) as err:
        sc.load(path)
    assert str(path) in err.value.message and "guests[0].node: no node named 'n2'" in err.value.message


@pytest.mark.parametrize("text, message", [("nodes: [", "not valid YAML"), (None, "cannot read scenario")])
def test_unreadable_files(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(InvalidError, match=message):
        sc.load(path)


@pytest.mark.parametrize("options, key, message", [
    ({"crs": {"ha": "fancy"}}, "cluster_options.crs", "does not have a value in the enumeration"),
    ({"colour": "blue"}, "cluster_options.colour", "not a datacenter.cfg option"),
    ({"next-id": {"lower": "x"}}, "cluster_options.next-id", "type check ('integer') failed"),
])
def test_bad_cluster_options_are_problems_with_their_paths(options, key, message):
    found = problems(minimal(cluster_options=options))
    assert key in found and message in found[key], found


def test_cluster_options_are_reported_with_the_other_problems_and_the_file_name(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("nodes:\n  - {name: n1}\nguests:\n  - {vmid: 100, node: n2}\n"
                    "cluster_options: {crs: {ha: fancy}}\n")
    with pytest.raises(InvalidError) as err:
        sc.load(path)
    assert err.value.message.startswith(f"{path}: 2 problem(s): ")
    assert set(err.value.errors) == {"guests[0].node", "cluster_options.crs"}
    assert "scenario:" not in err.value.message


def test_cluster_options_become_objects():
    cluster = Cluster(sc.parse(minimal(cluster_options={"crs": {"ha": "static", "ha-rebalance-on-start": True}})),
                      Clock(0, 0))
    assert cluster.options["crs"] == {"ha": "static", "ha-rebalance-on-start": 1}


def test_a_reset_keeps_the_lock_that_requests_wait_on():
    cluster = Cluster(sc.parse(minimal()), Clock(0, 0))
    lock = cluster.lock
    with lock:                      # as the control API holds it while it resets
        cluster.reset()
    assert cluster.lock is lock


# -- guests, disks and the names a scenario refers to --------------------------------------


@pytest.mark.parametrize("data, path, message", [
    (minimal(guests=[{"node": "n1"}]), "guests[0].vmid", "is required"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "disks": [{"key": "scsi0"}, {"size": "8G"}]}]),
     "guests[0].disks[1]", "automatic key 'scsi0' is already used by guests[0].disks[0]"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "disks": [{"size": "8G"}, {"key": "scsi0"}]}]),
     "guests[0].disks[1].key", "key 'scsi0' is already used by guests[0].disks[0]"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "disks": [{"key": "rootfs"}]}]),
     "guests[0].disks[0].key", "not a disk key of a VM: 'rootfs'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "type": "lxc", "disks": [{}, {"key": "rootfs"}]}]),
     "guests[0].disks[1].key", "key 'rootfs' is already used by guests[0].disks[0]"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "type": "lxc",
                      "disks": [{}, {"cdrom": True, "storage": "local"}]}]),
     "guests[0].disks[1].cdrom", "a container has no CD drive"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "disks": [{}] + [{"cdrom": True, "storage": "local"}] * 5}]),
     "guests[0].disks[5]", "no IDE slot left for another CD-ROM"),
    (minimal(pve_version="8.4", guests=[{"vmid": 100, "node": "n1", "ha": {"group": "g"}}]),
     "guests[0].ha.group", "no HA group named 'g'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "ha": {"group": "g"}}]),
     "guests[0].ha.group", "PVE 9 has no HA groups"),
    (minimal(acl=[{"path": "/", "role": "PVEAuditr", "user": "root@pam"}]), "acl[0].role",
     "no role named 'PVEAuditr'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "ha": True}],
             ha={"rules": [{"rule": "r", "type": "node-affinity", "nodes": "n1", "resources": [100, 999]}]}),
     "ha.rules[0].resources", "vm:999 is not a guest of the scenario"),
    (minimal(guests=[{"vmid": 100, "node": "n1"}],
             ha={"rules": [{"rule": "r", "type": "node-affinity", "nodes": "n1", "resources": ["vm:100"]}]}),
     "ha.rules[0].resources", "vm:100 is not an HA resource"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "ha": True}],
             ha={"rules": [{"rule": "r", "type": "node-affinity", "nodes": {"n1": 1, "n7": 2},
                            "resources": ["vm:100"]}]}),
     "ha.rules[0].nodes", "no node named 'n7'"),
    (minimal(pve_version="8.4", ha={"groups": [{"group": "g", "nodes": "n1,n9"}]}),
     "ha.groups[0].nodes", "no node named 'n9'"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "mem_used": "150%"}]), "guests[0].mem_used",
     "a percentage must be from 0% to 100%"),
    (minimal(guests=[{"vmid": 100, "node": "n1", "mem_used": True}]), "guests[0].mem_used",
     "expected"),
])
def test_names_a_scenario_uses_must_exist(data, path, message):
    found = problems(data)
    assert path in found, found
    assert message in found[path]


def test_a_guest_without_vmid_is_not_a_duplicate_of_another():
    found = problems(minimal(guests=[{"node": "n1"}, {"node": "n2"}]))
    assert set(found) == {"guests[0].vmid", "guests[1].vmid"}


def test_cdroms_get_ide2_ide3_then_the_other_ide_slots():
    cd = {"cdrom": True, "storage": "local"}
    scenario = sc.parse(minimal(guests=[{"vmid": 100, "node": "n1",
                                         "disks": [{}, cd, cd, {"size": "4G"}, cd]}]))
    assert [d.key for d in scenario.guests[0].disks] == ["scsi0", "ide2", "ide3", "scsi1", "ide0"]


def test_a_rules_bare_vmid_is_read_by_the_guests_type():
    scenario = sc.parse(minimal(
        guests=[{"vmid": 100, "node": "n1", "ha": True},
                {"vmid": 101, "node": "n1", "type": "lxc", "ha": True}],
        ha={"rules": [{"rule": "r", "type": "resource-affinity", "affinity": "positive",
                       "resources": [100, 101]}]}))
    assert scenario.ha_rules[0].resources == ("vm:100", "ct:101")


@pytest.mark.parametrize("written, expected", [
    (0.25, GiB), (1, 4 * GiB), (0, 0), ("50%", 2 * GiB), ("12.5%", GiB // 2), ("1GiB", GiB),
    (1024, 1024), ("8GiB", 4 * GiB),
])
def test_mem_used_is_a_fraction_a_percentage_or_a_size(written, expected):
    scenario = sc.parse(minimal(guests=[{"vmid": 100, "node": "n1", "memory": "4GiB", "mem_used": written}]))
    assert scenario.guests[0].mem_used == expected


@pytest.mark.parametrize("storage, shared", [
    ({"storage": "ceph", "type": "rbd"}, True),
    ({"storage": "nas", "type": "nfs"}, True),
    ({"storage": "pbs", "type": "pbs", "content": "backup"}, True),
    ({"storage": "zfs-iscsi", "type": "zfs"}, True),
    ({"storage": "data", "type": "dir"}, False),
    ({"storage": "data", "type": "dir", "shared": True}, True),
    ({"storage": "tank", "type": "zfspool"}, False),
])
def test_network_storage_is_shared_by_its_type(storage, shared):
    scenario = sc.parse(minimal(storages=[storage]))
    assert scenario.storages[0].shared is shared
