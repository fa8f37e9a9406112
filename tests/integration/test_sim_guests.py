"""Guests: lists, config, status, power, clone, destroy, rrddata and the guest agent."""

from __future__ import annotations

import base64

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"
GiB = 1024**3
PSI_GUEST = {"pressurecpusome", "pressurecpufull", "pressureiosome", "pressureiofull",
             "pressurememorysome", "pressurememoryfull"}

PVE8 = {
    "pve_version": "8.3",
    "nodes": [{"name": "n1"}],
    "guests": [{"vmid": 100, "node": "n1"}, {"vmid": 101, "node": "n1", "type": "lxc"}],
    "users": [{"userid": "root@pam", "password": "secret"}],
}


def wait_task(sim, pve, upid: str, step: float = 1.0, limit: float = 3600) -> dict:
    """Move the simulated clock until the task has ended; return its status."""
    node = upid.split(":")[1]
    waited = 0.0
    while True:
        status = pve.nodes(node).tasks(upid).status.get()
        if status["status"] == "stopped" or waited >= limit:
            return status
        sim.advance(step)
        waited += step


def resource(pve, vmid: int) -> dict:
    return next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == vmid)


def raw(sim, method: str, path: str, **data) -> requests.Response:
    return requests.request(method, f"{sim.url}{API}{path}", data=data,
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- lists -----------------------------------------------------------------------------


def test_qemu_list_has_the_nodes_vms_without_a_node_field(shared_sim):
    vms = {v["vmid"]: v for v in shared_sim.proxmox().nodes("pve1").qemu.get()}
    assert set(vms) == {100, 101, 102, 103, 104, 105, 106, 107, 108, 110, 112, 120}
    web = vms[100]
    assert "node" not in web and "maxcpu" not in web
    assert (web["name"], web["status"], web["cpus"], web["maxmem"]) == ("web1", "running", 4, 8 * GiB)
    assert web["tags"] == "web" and web["pid"] > 0 and web["uptime"] > 0
    assert PSI_GUEST <= set(web)
    assert all(0 <= web[k] <= 100 for k in PSI_GUEST)


def test_stopped_vm_in_list_has_no_psi_and_no_pid(shared_sim):
    vm = {v["vmid"]: v for v in shared_sim.proxmox().nodes("pve3").qemu.get()}[121]
    assert vm["status"] == "stopped"
    assert not PSI_GUEST & set(vm) and "pid" not in vm
    assert (vm["cpu"], vm["mem"], vm["uptime"]) == (0, 0, 0)


def test_lxc_list_has_containers_with_swap_and_disk(shared_sim):
    cts = shared_sim.proxmox().nodes("pve1").lxc.get()
    assert [c["vmid"] for c in cts] == [109]
    ct = cts[0]
    assert ct["type"] == "lxc" and "node" not in ct and "memhost" not in ct
    assert ct["maxswap"] == 512 * 1024**2 and "swap" in ct
    assert 0 < ct["disk"] <= ct["maxdisk"]


def test_guest_lists_on_pve8_have_no_psi(sim_factory):
    sim = sim_factory(PVE8)
    pve = sim.proxmox(user="root@pam", password="secret")
    for guest in pve.nodes("n1").qemu.get() + pve.nodes("n1").lxc.get():
        assert guest["status"] == "running"
        assert not PSI_GUEST & set(guest)


def test_guest_lists_follow_the_guest_to_its_node(shared_sim):
    pve = shared_sim.proxmox()
    assert 111 not in [v["vmid"] for v in pve.nodes("pve1").qemu.get()]
    assert 111 in [v["vmid"] for v in pve.nodes("pve2").qemu.get()]


# -- config ----------------------------------------------------------------------------


def test_config_has_the_pve_keys_and_a_digest(shared_sim):
    config = shared_sim.proxmox().nodes("pve1").qemu(100).config.get()
    assert config["name"] == "web1" and config["cores"] == 4 and config["sockets"] == 1
    assert config["memory"] == "8192"                      # a property string: a JSON string
    assert config["scsi0"] == "ceph:vm-100-disk-0,size=32G"
    assert config["net0"].startswith("virtio=BC:24:11:") and "bridge=vmbr0" in config["net0"]
    assert config["tags"] == "web"
    assert len(config["digest"]) == 40


def test_container_config_uses_hostname_and_rootfs(shared_sim):
    config = shared_sim.proxmox().nodes("pve1").lxc(109).config.get()
    assert config["hostname"] == "cache1" and config["rootfs"].startswith("ceph:vm-109-disk-0")
    assert config["memory"] == 8192


def test_config_of_a_guest_on_another_node_is_500(shared_sim):
    response = requests.get(f"{shared_sim.url}{API}/nodes/pve2/qemu/100/config",
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 500
    assert response.reason == "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"


@pytest.mark.parametrize("given, stored", [
    ("web,prod", "prod;web"),
    ("b;a;b", "a;b"),
    ("Zeta alpha", "alpha;zeta"),
    ("one", "one"),
])
def test_config_put_normalises_tags(sim, given, stored):
    pve = sim.proxmox()
    assert pve.nodes("pve1").qemu(103).config.put(tags=given) is None
    assert pve.nodes("pve1").qemu(103).config.get()["tags"] == stored
    assert resource(pve, 103)["tags"] == stored


def test_config_put_keeps_tag_order_with_tag_style_ordering_config(sim):
    pve = sim.proxmox()
    pve.cluster.options.put(**{"tag-style": "ordering=config"})
    pve.nodes("pve1").qemu(103).config.put(tags="zeta;alpha")
    assert pve.nodes("pve1").qemu(103).config.get()["tags"] == "zeta;alpha"


def test_config_put_sets_and_deletes_and_changes_the_digest(sim):
    pve = sim.proxmox()
    before = pve.nodes("pve1").qemu(103).config.get()
    pve.nodes("pve1").qemu(103).config.put(description="API server", delete="tags", digest=before["digest"])
    after = pve.nodes("pve1").qemu(103).config.get()
    assert after["description"] == "API server" and "tags" not in after
    assert after["digest"] != before["digest"]


def test_config_put_with_a_stale_digest_is_500(sim):
    pve = sim.proxmox()
    digest = pve.nodes("pve1").qemu(103).config.get()["digest"]
    pve.nodes("pve1").qemu(103).config.put(description="first")
    response = raw(sim, "PUT", "/nodes/pve1/qemu/103/config", description="second", digest=digest)
    assert response.status_code == 500
    assert response.reason == "checksum mismatch (file change by other user?)"


def test_container_config_put_with_a_stale_digest_is_500(sim):
    response = raw(sim, "PUT", "/nodes/pve1/lxc/109/config", description="x", digest="0" * 40)
    assert response.status_code == 500
    assert response.reason == "detected modified configuration - file changed by other user? Try again."


def test_config_put_on_a_locked_guest_is_500(sim):
    pve = sim.proxmox()
    pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    response = raw(sim, "PUT", "/nodes/pve1/qemu/103/config", description="x")
    assert response.status_code == 500
    assert response.reason == "VM is locked (migrate)"   # AbstractConfig::check_lock: no vmid


def test_config_put_cannot_set_and_delete_one_key(sim):
    response = raw(sim, "PUT", "/nodes/pve1/qemu/103/config", description="x", delete="description")
    assert response.status_code == 400
    assert "delete" in response.json()["errors"]


def test_config_put_with_nothing_to_do_is_500(sim):
    response = raw(sim, "PUT", "/nodes/pve1/qemu/103/config")
    assert response.status_code == 500
    assert response.reason == "no options specified"


def test_config_put_rejects_an_unknown_key(sim):
    response = raw(sim, "PUT", "/nodes/pve1/qemu/103/config", colour="blue")
    assert response.status_code == 400
    assert "colour" in response.json()["errors"]


def test_config_post_runs_as_a_qmconfig_task(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).config.post(name="api-one")
    assert ":qmconfig:103:" in upid
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert pve.nodes("pve1").qemu(103).config.get()["name"] == "api-one"


def test_config_change_of_memory_shows_in_resources(sim):
    pve = sim.proxmox()
    pve.nodes("pve3").qemu(121).config.put(memory=6144, cores=3)
    guest = resource(pve, 121)
    assert (guest["maxmem"], guest["maxcpu"]) == (6 * GiB, 3)


# -- status and power --------------------------------------------------------------------


def test_status_current_of_an_ha_vm(shared_sim):
    status = shared_sim.proxmox().nodes("pve1").qemu(100).status.current.get()
    assert status["status"] == "running" and status["qmpstatus"] == "running"
    assert status["ha"] == {"managed": 1, "state": "started"}
    assert status["agent"] == 1 and status["cpus"] == 4 and "node" not in status
    assert "maxcpu" not in status


def test_status_current_of_a_vm_without_ha(shared_sim):
    status = shared_sim.proxmox().nodes("pve3").qemu(121).status.current.get()
    assert status["status"] == "stopped" and status["ha"] == {"managed": 0}
    assert "pid" not in status


def test_status_current_of_a_container(shared_sim):
    status = shared_sim.proxmox().nodes("pve1").lxc(109).status.current.get()
    assert status["status"] == "running" and status["ha"] == {"managed": 0}
    assert status["type"] == "lxc"


@pytest.mark.parametrize("kind, node, vmid, action, task_type, after", [
    ("qemu", "pve3", 121, "start", "qmstart", "running"),
    ("qemu", "pve3", 119, "stop", "qmstop", "stopped"),
    ("qemu", "pve3", 119, "shutdown", "qmshutdown", "stopped"),
    ("lxc", "pve3", 118, "stop", "vzstop", "stopped"),
    ("lxc", "pve3", 118, "shutdown", "vzshutdown", "stopped"),
])
def test_power_actions_run_tasks_that_change_status_in_simulated_time(sim, kind, node, vmid, action,
                                                                     task_type, after):
    pve = sim.proxmox()
    guest = getattr(pve.nodes(node), kind)(vmid)
    before = guest.status.current.get()["status"]
    upid = getattr(guest.status, action).post()
    assert upid.split(":")[5:7] == [task_type, str(vmid)]
    assert guest.status.current.get()["status"] == before     # not yet
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert guest.status.current.get()["status"] == after


def test_container_start_after_stop(sim):
    pve = sim.proxmox()
    wait_task(sim, pve, pve.nodes("pve3").lxc(118).status.stop.post())
    upid = pve.nodes("pve3").lxc(118).status.start.post()
    assert ":vzstart:118:" in upid
    wait_task(sim, pve, upid)
    assert pve.nodes("pve3").lxc(118).status.current.get()["status"] == "running"


@pytest.mark.parametrize("path, reason", [
    ("/nodes/pve1/lxc/109/status/start", "CT 109 already running"),
    ("/nodes/pve3/lxc/118/status/stop", None),
])
def test_container_power_prechecks_answer_500(sim, path, reason):
    pve = sim.proxmox()
    if reason is None:
        wait_task(sim, pve, pve.nodes("pve3").lxc(118).status.stop.post())
        reason = "CT 118 not running"
    response = raw(sim, "POST", path)
    assert response.status_code == 500
    assert response.reason == reason


@pytest.mark.parametrize("vmid, node, error", [
    (100, "pve1", None),                                  # HA: hastart instead
    (103, "pve1", "VM 103 already running"),
    (9000, "pve5", "you can't start a vm if it's a template"),
])
def test_vm_start_failures_are_task_errors(sim, vmid, node, error):
    pve = sim.proxmox()
    upid = pve.nodes(node).qemu(vmid).status.start.post()
    if error is None:
        assert ":hastart:100:" in upid
        return
    status = wait_task(sim, pve, upid)
    assert status["exitstatus"] == error
    assert pve.nodes(node).tasks(upid).log.get()[-1]["t"] == f"TASK ERROR: {error}"


def test_vm_stop_of_a_locked_vm_is_a_task_error(sim):
    pve = sim.proxmox()
    pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    upid = pve.nodes("pve1").qemu(103).status.stop.post()
    assert wait_task(sim, pve, upid, step=0.5)["exitstatus"] == "VM is locked (migrate)"


def test_ha_guest_power_goes_through_ha(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(101).status.shutdown.post()
    assert ":hastop:101:" in upid
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    sim.advance(30)   # a CRM round, then the shutdown
    assert pve.nodes("pve1").qemu(101).status.current.get()["status"] == "stopped"
    assert pve.cluster.ha.resources("vm:101").get()["state"] == "stopped"
    upid = pve.nodes("pve1").qemu(101).status.start.post()
    assert ":hastart:101:" in upid
    sim.advance(30)
    assert pve.nodes("pve1").qemu(101).status.current.get()["status"] == "running"


# -- clone -------------------------------------------------------------------------------


def test_linked_clone_of_a_template_appears_at_once_locked_then_unlocks(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve5").qemu(9000).clone.post(newid=500, name="runner-1", pool="ci")
    assert upid.split(":")[5:7] == ["qmclone", "9000"]
    clone = resource(pve, 500)
    assert clone["lock"] == "clone" and clone["node"] == "pve5"
    assert pve.nodes("pve5").qemu(500).config.get()["lock"] == "clone"
    assert "lock" not in pve.nodes("pve5").qemu(9000).config.get()
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    config = pve.nodes("pve5").qemu(500).config.get()
    assert "lock" not in config and "template" not in config
    assert config["name"] == "runner-1"
    assert config["scsi0"].startswith("ceph:base-9000-disk-0/vm-500-disk-0")
    assert config["net0"] != pve.nodes("pve5").qemu(9000).config.get()["net0"]   # new MAC
    assert resource(pve, 500)["pool"] == "ci"
    assert 500 in [m["vmid"] for m in pve.pools.get(poolid="ci")[0]["members"]]


def test_full_clone_copies_the_disks_and_takes_longer(sim):
    pve = sim.proxmox()
    linked = pve.nodes("pve5").qemu(9000).clone.post(newid=501)
    full = pve.nodes("pve5").qemu(9000).clone.post(newid=502, full=1, storage="local-lvm")
    sim.advance(3)
    assert pve.nodes("pve5").tasks(linked).status.get()["exitstatus"] == "OK"
    assert pve.nodes("pve5").tasks(full).status.get()["status"] == "running"
    assert wait_task(sim, pve, full)["exitstatus"] == "OK"
    config = pve.nodes("pve5").qemu(502).config.get()
    assert config["scsi0"].startswith("local-lvm:vm-502-disk-0")
    assert config["name"] == "Copy-of-VM-runner-template"


def test_clone_of_a_running_vm_is_full(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve3").qemu(119).clone.post(newid=503)
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert pve.nodes("pve3").qemu(503).config.get()["scsi0"].startswith("ceph:vm-503-disk-0")
    assert "lock" not in pve.nodes("pve3").qemu(119).config.get()


def test_clone_to_an_existing_vmid_is_500(sim):
    response = raw(sim, "POST", "/nodes/pve5/qemu/9000/clone", newid=100)
    assert response.status_code == 500
    assert response.reason == "unable to create VM 100: config file already exists"


def test_nextid_race_second_clone_with_the_same_id_fails(sim):
    pve = sim.proxmox()
    newid = int(pve.cluster.nextid.get())
    pve.nodes("pve5").qemu(9000).clone.post(newid=newid)
    response = raw(sim, "POST", "/nodes/pve5/qemu/9000/clone", newid=newid)
    assert response.status_code == 500
    assert response.reason == f"unable to create VM {newid}: config file already exists"
    assert pve.cluster.nextid.get() == str(newid + 1)


@pytest.mark.parametrize("params, reason", [
    ({"storage": "local-lvm"}, "parameter 'storage' not allowed for linked clones"),
    ({"full": 0, "vmid_": 103}, "Linked clone feature is not supported for 'ceph:vm-103-disk-0' (scsi0)"),
    ({"pool": "nope"}, "pool 'nope' does not exist"),
    ({"vmid_": 112, "target": "pve2"}, "can't clone VM to node 'pve2' (VM uses local storage)"),
])
def test_clone_prechecks_answer_500(sim, params, reason):
    vmid = params.pop("vmid_", 9000)
    node = {9000: "pve5", 103: "pve1", 112: "pve1"}[vmid]
    response = raw(sim, "POST", f"/nodes/{node}/qemu/{vmid}/clone", newid=600, **params)
    assert response.status_code == 500
    assert response.reason == reason


def test_clone_to_another_node_from_shared_storage(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve5").qemu(9000).clone.post(newid=504, target="pve3")
    assert upid.startswith("UPID:pve5:")
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert resource(pve, 504)["node"] == "pve3"


def test_parallel_linked_clones_of_one_template(sim):
    pve = sim.proxmox()
    upids = [pve.nodes("pve5").qemu(9000).clone.post(newid=510 + i) for i in range(4)]
    assert all(wait_task(sim, pve, u)["exitstatus"] == "OK" for u in upids)


# -- destroy -----------------------------------------------------------------------------


def test_destroy_a_stopped_vm(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve3").qemu(122).delete()
    assert ":qmdestroy:122:" in upid
    assert resource(pve, 122)["lock"] == "destroyed"
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert 122 not in [g["vmid"] for g in pve.cluster.resources.get(type="vm")]
    assert 122 not in [m["vmid"] for m in pve.pools.get(poolid="dev")[0]["members"]]


@pytest.mark.parametrize("path, reason", [
    ("/nodes/pve1/qemu/103", "VM 103 is running - destroy failed"),
    ("/nodes/pve1/qemu/100", "unable to remove VM 100 - used in HA resources and purge parameter not set."),
    ("/nodes/pve1/lxc/109", "unable to destroy CT 109 - container is running"),
])
def test_destroy_prechecks_answer_500(sim, path, reason):
    response = raw(sim, "DELETE", path)
    assert response.status_code == 500
    assert response.reason == reason


def test_destroy_of_a_protected_vm_is_500(sim):
    pve = sim.proxmox()
    pve.nodes("pve3").qemu(122).config.put(protection=1)
    response = raw(sim, "DELETE", "/nodes/pve3/qemu/122")
    assert response.status_code == 500
    assert response.reason == "can't remove VM 122 - protection mode enabled"


def test_destroy_with_purge_removes_the_ha_resource(sim):
    pve = sim.proxmox()
    wait_task(sim, pve, pve.nodes("pve1").qemu(100).status.stop.post())
    sim.advance(30)
    assert pve.nodes("pve1").qemu(100).status.current.get()["status"] == "stopped"
    upid = pve.nodes("pve1").qemu(100).delete(purge=1)
    assert wait_task(sim, pve, upid)["exitstatus"] == "OK"
    assert "vm:100" not in [r["sid"] for r in pve.cluster.ha.resources.get()]


# -- rrddata -----------------------------------------------------------------------------


def test_guest_rrddata_hour_has_60_rows_with_psi_while_running(shared_sim):
    rows = shared_sim.proxmox().nodes("pve1").qemu(100).rrddata.get(timeframe="hour", cf="AVERAGE")
    assert len(rows) == 60
    assert all(r["maxcpu"] == 4 and r["maxmem"] == 8 * GiB for r in rows)
    assert all(0 <= r["cpu"] <= 1 and r["memhost"] >= r["mem"] for r in rows)
    assert all(PSI_GUEST <= set(r) for r in rows)


def test_guest_rrddata_max_is_at_least_average(shared_sim):
    guest = shared_sim.proxmox().nodes("pve1").qemu(105)
    average = guest.rrddata.get(timeframe="day", cf="AVERAGE")
    peak = guest.rrddata.get(timeframe="day", cf="MAX")
    assert all(p["cpu"] >= a["cpu"] - 1e-9 for a, p in zip(average, peak))


def test_stopped_guest_rrddata_has_zeros_and_no_psi(shared_sim):
    rows = shared_sim.proxmox().nodes("pve3").qemu(121).rrddata.get(timeframe="hour")
    assert len(rows) == 60 and all(r["cpu"] == 0 and r["mem"] == 0 for r in rows)
    assert not any(PSI_GUEST & set(r) for r in rows)


def test_container_rrddata(shared_sim):
    rows = shared_sim.proxmox().nodes("pve1").lxc(109).rrddata.get(timeframe="hour")
    assert len(rows) == 60 and "memhost" not in rows[0] and rows[0]["disk"] > 0


# -- guest agent -------------------------------------------------------------------------


def test_agent_ping_on_a_stopped_vm_is_500_not_running(sim):
    response = raw(sim, "POST", "/nodes/pve3/qemu/121/agent/ping")
    assert response.status_code == 500
    assert response.reason == "VM 121 is not running"


def test_agent_ping_answers_only_after_the_guest_has_booted(sim):
    pve = sim.proxmox()
    wait_task(sim, pve, pve.nodes("pve3").qemu(121).status.start.post())
    response = raw(sim, "POST", "/nodes/pve3/qemu/121/agent/ping")
    assert response.status_code == 500
    assert response.reason == "QEMU guest agent is not running"
    sim.advance(25)   # boot takes 20 s by default
    assert pve.nodes("pve3").qemu(121).agent.ping.post() == {"result": {}}


def test_agent_without_agent_configured_is_500(sim):
    pve = sim.proxmox()
    pve.nodes("pve1").qemu(103).config.put(delete="agent")
    response = raw(sim, "POST", "/nodes/pve1/qemu/103/agent/ping")
    assert response.status_code == 500
    assert response.reason == "No QEMU guest agent configured"


def test_agent_file_write_then_read_and_the_control_api_sees_it(sim):
    pve = sim.proxmox()
    agent = pve.nodes("pve1").qemu(103).agent
    assert agent("file-write").post(file="/etc/runner/token", content="s3cret\n") is None
    encoded = base64.b64encode(b"two\n").decode()
    agent("file-write").post(file="/etc/runner/name", content=encoded, encode=0)
    assert agent("file-read").get(file="/etc/runner/token")["content"] == "s3cret\n"
    assert agent("file-read").get(file="/etc/runner/name")["content"] == "two\n"
    assert sim.control("GET", "guests/103/files") == {"/etc/runner/token": "s3cret\n",
                                                      "/etc/runner/name": "two\n"}


def test_agent_file_read_of_a_missing_file_is_500(sim):
    response = requests.get(f"{sim.url}{API}/nodes/pve1/qemu/103/agent/file-read",
                            params={"file": "/nope"}, headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)
    assert response.status_code == 500
    assert "No such file or directory" in response.reason
