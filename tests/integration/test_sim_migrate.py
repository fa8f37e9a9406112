"""Migrations: the precondition, live and offline moves that take simulated time, their
failures, containers in restart mode, and HA guests that the CRM moves."""

from __future__ import annotations

import re

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"
GiB = 1024**3
MiB = 1024**2

RESTRICTED_STORAGE = {
    "nodes": [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}],
    "storages": [{"storage": "fast", "type": "lvmthin", "nodes": ["n1", "n2"]},
                 {"storage": "ceph", "type": "rbd", "shared": True}],
    "guests": [{"vmid": 100, "node": "n1", "storage": "fast", "status": "stopped"}],
    "users": [{"userid": "root@pam", "password": "secret"}],
}


def raw(sim, method: str, path: str, **data) -> requests.Response:
    return requests.request(method, f"{sim.url}{API}{path}", data=data, params=None,
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)


def status_of(pve, upid: str) -> dict:
    return pve.nodes(upid.split(":")[1]).tasks(upid).status.get()


def run_until_done(sim, pve, upid: str, step: float = 1.0, limit: float = 3600) -> tuple[dict, float]:
    """Advance the clock in steps until the task ends; (status, simulated seconds it took)."""
    waited = 0.0
    while True:
        status = status_of(pve, upid)
        if status["status"] == "stopped" or waited >= limit:
            return status, waited
        sim.advance(step)
        waited += step


def log_text(pve, upid: str) -> str:
    return "\n".join(line["t"] for line in pve.nodes(upid.split(":")[1]).tasks(upid).log.get(limit=500))


def log_lines(pve, upid: str) -> list[str]:
    """The task's log without the time stamps a migration log's lines start with."""
    return [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", line)
            for line in log_text(pve, upid).splitlines()]


def node_of(pve, vmid: int) -> str:
    return next(g["node"] for g in pve.cluster.resources.get(type="vm") if g["vmid"] == vmid)


def node_mem(pve, node: str) -> int:
    return pve.nodes(node).status.get()["memory"]["used"]


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- the precondition ---------------------------------------------------------------------


def test_precondition_of_a_vm_on_shared_storage_allows_every_other_node(shared_sim):
    pre = shared_sim.proxmox().nodes("pve1").qemu(103).migrate.get()
    assert pre["running"] == 1
    assert pre["allowed_nodes"] == ["pve2", "pve3", "pve4", "pve5"]
    assert pre["not_allowed_nodes"] == {}
    assert pre["local_disks"] == [] and pre["local_resources"] == []
    assert "dependent-ha-resources" not in pre     # not HA-managed


def test_precondition_lists_local_disks(shared_sim):
    pre = shared_sim.proxmox().nodes("pve1").qemu(112).migrate.get()
    [disk] = pre["local_disks"]
    assert (disk["volid"], disk["size"], disk["drivename"]) == ("local-lvm:vm-112-disk-0", 200 * GiB, "scsi0")
    assert pre["allowed_nodes"] == ["pve2", "pve3", "pve4", "pve5"]   # local-lvm exists everywhere


def test_precondition_lists_local_devices(shared_sim):
    pre = shared_sim.proxmox().nodes("pve2").qemu(116).migrate.get()
    assert pre["local_resources"] == ["hostpci0"]


def test_precondition_names_nodes_blocked_by_negative_affinity(shared_sim):
    pre = shared_sim.proxmox().nodes("pve1").qemu(110).migrate.get()
    assert pre["not_allowed_nodes"] == {
        "pve2": {"blocking-ha-resources": [{"sid": "vm:111", "cause": "resource-affinity"}]}}
    assert "pve2" not in pre["allowed_nodes"]
    assert pre["dependent-ha-resources"] == []


def test_precondition_names_positive_affinity_partners(shared_sim):
    pre = shared_sim.proxmox().nodes("pve1").qemu(102).migrate.get()
    assert pre["dependent-ha-resources"] == ["vm:120"]


def test_container_precondition_is_kebab_case(shared_sim):
    pre = shared_sim.proxmox().nodes("pve1").lxc(109).migrate.get()
    assert set(pre) == {"running", "allowed-nodes", "not-allowed-nodes"}
    assert pre["allowed-nodes"] == ["pve2", "pve3", "pve4", "pve5"]


def test_precondition_names_storages_a_node_lacks(sim_factory):
    sim = sim_factory(RESTRICTED_STORAGE)
    pve = sim.proxmox(user="root@pam", password="secret")
    pre = pve.nodes("n1").qemu(100).migrate.get()
    assert pre["allowed_nodes"] == ["n2"]
    assert pre["not_allowed_nodes"] == {"n3": {"unavailable_storages": ["fast"]}}
    ticket = pve.get_tokens()
    response = requests.post(f"{sim.url}{API}/nodes/n1/qemu/100/migrate", data={"target": "n3"},
                             cookies={"PVEAuthCookie": ticket[0]},
                             headers={"CSRFPreventionToken": ticket[1]}, verify=sim.cert, timeout=30)
    assert response.status_code == 500
    assert response.reason == "storage 'fast' is not available on node 'n3'"


def test_precondition_of_a_locked_vm_is_500(sim):
    sim.proxmox().nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    response = requests.get(f"{sim.url}{API}/nodes/pve1/qemu/103/migrate",
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)
    assert response.status_code == 500
    assert response.reason == "VM is locked (migrate)"   # AbstractConfig::check_lock: no vmid


# -- a live migration --------------------------------------------------------------------


def test_live_migration_takes_setup_plus_memory_over_speed(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    assert upid.startswith("UPID:pve1:") and upid.split(":")[5:8] == ["qmigrate", "103", "keel@pve!keel"]
    status, took = run_until_done(sim, pve, upid, step=0.5)
    # 3 s setup, then 12 GiB of used memory at 1 GiB/s
    assert status["exitstatus"] == "OK"
    assert took == pytest.approx(15, abs=0.5)


def test_live_migration_holds_the_lock_and_counts_memory_on_both_nodes(sim):
    pve = sim.proxmox()
    source, target = node_mem(pve, "pve1"), node_mem(pve, "pve2")
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    sim.advance(5)
    assert pve.nodes("pve1").qemu(103).config.get()["lock"] == "migrate"
    guest = next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 103)
    assert guest["lock"] == "migrate" and guest["node"] == "pve1" and guest["status"] == "running"
    assert node_mem(pve, "pve1") == source
    assert node_mem(pve, "pve2") == target + 12 * GiB
    target_entry = next(n for n in pve.cluster.resources.get(type="node") if n["node"] == "pve2")
    assert target_entry["mem"] == target + 12 * GiB
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "OK"
    assert node_of(pve, 103) == "pve2"
    assert "lock" not in pve.nodes("pve2").qemu(103).config.get()
    assert node_mem(pve, "pve1") == source - 12 * GiB
    assert node_mem(pve, "pve2") == target + 12 * GiB
    assert pve.nodes("pve2").qemu(103).status.current.get()["status"] == "running"


def test_live_migration_log_reads_like_qemu_servers(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    run_until_done(sim, pve, upid)
    log = log_text(pve, upid)
    assert "starting migration of VM 103 to node 'pve2' (10.0.0.2)" in log
    assert "migration active, transferred" in log
    assert "migration finished successfully (duration 00:00:15)" in log
    assert log.endswith("TASK OK")


def test_offline_migration_of_a_stopped_vm_is_quick(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve3").qemu(121).migrate.post(target="pve4")
    status, took = run_until_done(sim, pve, upid, step=0.5)
    assert status["exitstatus"] == "OK" and took <= 3
    assert node_of(pve, 121) == "pve4"
    assert pve.nodes("pve4").qemu(121).status.current.get()["status"] == "stopped"


# -- failures ------------------------------------------------------------------------------


def test_injected_migration_fault_ends_the_task_with_an_error_and_the_vm_stays(sim):
    sim.control("POST", "faults", {"migrations": [{"vmid": 103}]})
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["status"] == "stopped" and status["exitstatus"] != "OK"
    assert status["exitstatus"] == "migration aborted: simulated failure"
    assert node_of(pve, 103) == "pve1"
    assert "lock" not in pve.nodes("pve1").qemu(103).config.get()
    assert pve.nodes("pve1").qemu(103).status.current.get()["status"] == "running"
    assert "ERROR: online migrate failure - migration aborted: simulated failure" in log_text(pve, upid)


def test_migration_fault_for_another_vm_does_not_strike(sim):
    sim.control("POST", "faults", {"migrations": [{"vmid": 104}]})
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "OK"


def test_vm_with_local_devices_fails_in_the_task(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve2").qemu(116).migrate.post(target="pve1", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration aborted"
    assert "can't migrate VM which uses local devices: hostpci0" in log_text(pve, upid)
    assert node_of(pve, 116) == "pve2"


def test_running_vm_with_local_disks_needs_with_local_disks(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(112).migrate.post(target="pve2", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration aborted"
    log = log_text(pve, upid)
    assert ("can't migrate local disk 'local-lvm:vm-112-disk-0': can't live migrate attached "
            "local disks without with-local-disks option") in log
    assert "can't migrate VM - check log" in log
    assert node_of(pve, 112) == "pve1"


def test_with_local_disks_the_disks_are_copied_first_and_it_takes_longer(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(112).migrate.post(target="pve2", online=1, **{"with-local-disks": 1})
    status, took = run_until_done(sim, pve, upid, step=5)
    assert status["exitstatus"] == "OK"
    # 3 s setup + 200 GiB at 500 MiB/s + 3 GiB of memory at 1 GiB/s
    assert took == pytest.approx(3 + 200 * 1024 / 500 + 3, abs=5)
    assert node_of(pve, 112) == "pve2"
    assert "scsi0: start migration to pve2" in log_text(pve, upid)


def test_running_vm_without_online_is_500(sim):
    response = raw(sim, "POST", "/nodes/pve1/qemu/103/migrate", target="pve2")
    assert response.status_code == 500
    assert response.reason == "can't migrate running VM without --online"


def test_target_local_node_is_400(sim):
    response = raw(sim, "POST", "/nodes/pve1/qemu/103/migrate", target="pve1", online=1)
    assert response.status_code == 400
    assert response.json()["errors"] == {"target": "target is local node."}


def test_unknown_target_is_500(sim):
    response = raw(sim, "POST", "/nodes/pve1/qemu/103/migrate", target="pve9", online=1)
    assert response.status_code == 500
    assert response.reason == "no such cluster node 'pve9'"


def test_offline_target_fails_in_the_task_as_ssh_cannot_reach_it(sim):
    sim.control("POST", "nodes/pve5", {"online": False})
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve5", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration aborted"
    assert "Can't connect to destination address using public key" in log_text(pve, upid)
    assert node_of(pve, 103) == "pve1"


def test_force_is_root_only(sim):
    response = raw(sim, "POST", "/nodes/pve2/qemu/116/migrate", target="pve1", online=1, force=1)
    assert response.status_code == 400
    assert response.json()["errors"] == {"force": "Only root may use this option."}


def test_root_may_force_a_stopped_vm_with_local_devices(sim):
    pve = sim.proxmox()
    run_until_done(sim, pve, pve.nodes("pve2").qemu(116).status.stop.post())
    root = sim.proxmox(user="root@pam", password="keel-demo")
    upid = root.nodes("pve2").qemu(116).migrate.post(target="pve1", force=1)
    assert run_until_done(sim, root, upid)[0]["exitstatus"] == "OK"


def test_stopping_the_task_aborts_the_migration(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    sim.advance(4)
    pve.nodes("pve1").tasks(upid).delete()
    sim.advance(30)
    assert status_of(pve, upid)["exitstatus"] != "OK"
    assert node_of(pve, 103) == "pve1"


# -- containers ----------------------------------------------------------------------------


def test_running_container_without_restart_is_500(sim):
    response = raw(sim, "POST", "/nodes/pve4/lxc/124/migrate", target="pve5")
    assert response.status_code == 500
    assert response.reason == "can't migrate running container without --online or --restart"


def test_running_container_with_restart_is_stopped_moved_and_started(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve4").lxc(124).migrate.post(target="pve5", restart=1)
    assert upid.split(":")[5:7] == ["vzmigrate", "124"]
    sim.advance(4)
    assert pve.nodes("pve4").lxc(124).status.current.get()["status"] == "stopped"
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "OK"
    assert node_of(pve, 124) == "pve5"
    assert pve.nodes("pve5").lxc(124).status.current.get()["status"] == "running"


def test_running_container_with_restart_logs_shutdown_then_the_migration(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve4").lxc(124).migrate.post(target="pve5", restart=1)
    run_until_done(sim, pve, upid)
    lines = log_lines(pve, upid)
    assert lines[:2] == ["shutdown CT 124", "starting migration of CT 124 to node 'pve5' (10.0.0.5)"]
    assert lines[-3:] == ["start container on target node",
                          "migration finished successfully (duration 00:00:07)", "TASK OK"]


@pytest.mark.parametrize("options", [{"online": 1}, {"online": 1, "restart": 1}])
def test_container_live_migration_is_not_implemented_and_the_container_keeps_running(sim, options):
    # LXC::Migrate::prepare dies on ``online`` before a restart migration would shut it down.
    pve = sim.proxmox()
    upid = pve.nodes("pve4").lxc(124).migrate.post(target="pve5", **options)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration aborted"
    assert log_lines(pve, upid) == ["ERROR: migration aborted (duration 00:00:00): lxc live "
                                    "migration is currently not implemented",
                                    "TASK ERROR: migration aborted"]
    assert node_of(pve, 124) == "pve4"
    assert pve.nodes("pve4").lxc(124).status.current.get()["status"] == "running"


LOCKED_CONTAINER = {
    "nodes": [{"name": "n1"}, {"name": "n2"}],
    "storages": [{"storage": "ceph", "type": "rbd"}],
    "guests": [{"vmid": 200, "node": "n1", "type": "lxc", "status": "stopped", "lock": "backup"}],
}


def test_a_locked_container_is_not_migrated_and_keeps_its_lock(sim_factory):
    # pve-container checks the lock in the worker (LXC::Migrate::prepare), not before it.
    sim = sim_factory(LOCKED_CONTAINER)
    pve = sim.proxmox(user="root@pam", password="keel-sim")
    upid = pve.nodes("n1").lxc(200).migrate.post(target="n2")
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration aborted"
    assert "ERROR: migration aborted (duration 00:00:00): CT is locked (backup)" in log_text(pve, upid)
    assert node_of(pve, 200) == "n1"
    assert pve.nodes("n1").lxc(200).config.get()["lock"] == "backup"


def test_precondition_of_a_locked_container_is_500(sim_factory):
    sim = sim_factory(LOCKED_CONTAINER)
    with pytest.raises(ResourceException) as err:
        sim.proxmox(user="root@pam", password="keel-sim").nodes("n1").lxc(200).migrate.get()
    assert (err.value.status_code, err.value.content) == (500, "CT is locked (backup)")


def test_failed_restart_migration_starts_the_container_again_on_the_source(sim):
    sim.control("POST", "faults", {"migrations": [{"vmid": 124, "message": "copy failed"}]})
    pve = sim.proxmox()
    upid = pve.nodes("pve4").lxc(124).migrate.post(target="pve5", restart=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "copy failed"
    assert node_of(pve, 124) == "pve4"
    assert pve.nodes("pve4").lxc(124).status.current.get()["status"] == "running"


# -- HA-managed guests ---------------------------------------------------------------------


def test_ha_guest_migrate_is_a_quick_hamigrate_then_the_crm_moves_it(sim):
    pve = sim.proxmox()
    t0 = sim.control("GET", "state")["time"]
    upid = pve.nodes("pve1").qemu(110).migrate.post(target="pve3", online=1)
    assert upid.split(":")[5:7] == ["hamigrate", "110"]
    status, took = run_until_done(sim, pve, upid, step=0.5)
    assert status["exitstatus"] == "OK" and took <= 1
    sim.advance(10)   # one CRM round
    [qmigrate] = pve.nodes("pve1").tasks.get(typefilter="qmigrate", vmid=110, source="all",
                                             since=int(t0))
    assert qmigrate["user"] == "root@pam"
    status, _ = run_until_done(sim, pve, qmigrate["upid"])
    assert status["exitstatus"] == "OK"
    assert node_of(pve, 110) == "pve3"
    sim.advance(10)
    service = pve.cluster.ha.status.manager_status.get()["manager_status"]["service_status"]["vm:110"]
    assert (service["state"], service["node"]) == ("started", "pve3")
    assert next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 110)["hastate"] == "started"


def test_ha_guest_shows_state_migrate_while_it_moves(sim):
    pve = sim.proxmox()
    pve.nodes("pve1").qemu(110).migrate.post(target="pve3", online=1)
    sim.advance(11)
    service = pve.cluster.ha.status.manager_status.get()["manager_status"]["service_status"]["vm:110"]
    assert (service["state"], service["target"]) == ("migrate", "pve3")


def test_ha_guest_migrate_ignores_online_and_local_disk_options(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(101).migrate.post(target="pve4", online=1)
    assert ":hamigrate:101:" in upid
    sim.advance(60)
    assert node_of(pve, 101) == "pve4"


def test_ha_migration_to_a_node_blocked_by_negative_affinity_does_not_happen(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(110).migrate.post(target="pve2", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "OK"   # only queues the command
    sim.advance(60)
    assert node_of(pve, 110) == "pve1"


# -- what the target cannot run --------------------------------------------------------------

UNLIKE_NODES = {
    "nodes": [{"name": "n1", "cpus": 32, "cpu_model": "AMD EPYC 7313P 16-Core Processor"},
              {"name": "n2", "cpus": 8, "cpu_model": "AMD EPYC 7313P 16-Core Processor"},
              {"name": "n3", "cpus": 32, "cpu_model": "Intel(R) Xeon(R) E-2388G"}],
    "storages": [{"storage": "ceph", "type": "rbd", "shared": True}],
    "guests": [{"vmid": 100, "node": "n1", "cpus": 16, "memory": "2GiB"},
               {"vmid": 101, "node": "n1", "cpus": 2, "memory": "2GiB", "cpu_type": "host"}],
    "users": [{"userid": "root@pam", "password": "secret"}],
}


def test_a_vm_with_more_vcpus_than_the_target_has_threads_fails_to_start_there(sim_factory):
    sim = sim_factory(UNLIKE_NODES)
    pve = sim.proxmox(user="root@pam", password="secret")
    upid = pve.nodes("n1").qemu(100).migrate.post(target="n2", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration problems"
    assert "MAX 8 vcpus allowed per VM on this node" in log_text(pve, upid)
    assert node_of(pve, 100) == "n1"
    upid = pve.nodes("n1").qemu(100).migrate.post(target="n3", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "OK"


def test_a_vm_of_cpu_type_host_moves_live_only_to_the_same_cpu_model(sim_factory):
    sim = sim_factory(UNLIKE_NODES)
    pve = sim.proxmox(user="root@pam", password="secret")
    assert pve.nodes("n1").qemu(101).config.get()["cpu"] == "host"
    upid = pve.nodes("n1").qemu(101).migrate.post(target="n3", online=1)
    status, _ = run_until_done(sim, pve, upid)
    assert status["exitstatus"] == "migration problems"
    assert "device 'cpu'" in log_text(pve, upid) and node_of(pve, 101) == "n1"
    upid = pve.nodes("n1").qemu(101).migrate.post(target="n2", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "OK"


def test_a_vm_bigger_than_half_the_targets_free_memory_fits_and_one_bigger_than_it_does_not(sim_factory):
    sim = sim_factory({
        "nodes": [{"name": "n1", "memory": "64GiB", "overhead_mem": "4GiB"},
                  {"name": "n2", "memory": "64GiB", "overhead_mem": "4GiB"},
                  {"name": "n3", "memory": "64GiB", "overhead_mem": "4GiB"}],
        "storages": [{"storage": "ceph", "type": "rbd", "shared": True}],
        "guests": [{"vmid": 100, "node": "n1", "memory": "40GiB", "mem_used": 1.0},    # 60 GiB free on n3
                   {"vmid": 101, "node": "n2", "memory": "61GiB", "mem_used": 1.0}],
        "users": [{"userid": "root@pam", "password": "secret"}]})
    pve = sim.proxmox(user="root@pam", password="secret")
    upid = pve.nodes("n1").qemu(100).migrate.post(target="n3", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "OK"          # its own reservation is not counted twice
    assert node_of(pve, 100) == "n3"
    upid = pve.nodes("n2").qemu(101).migrate.post(target="n1", online=1)
    assert run_until_done(sim, pve, upid)[0]["exitstatus"] == "migration problems"
    assert "Cannot allocate memory" in log_text(pve, upid)
