"""Cluster-wide reads and datacenter options: /version, /cluster/status, /cluster/resources,
/cluster/nextid, /cluster/options, /cluster/tasks."""

from __future__ import annotations

import re

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"
DEMO_NODES = ["pve1", "pve2", "pve3", "pve4", "pve5"]

GUEST_FIELDS = {"id", "type", "vmid", "node", "name", "status", "template", "uptime", "maxcpu",
                "cpu", "maxmem", "mem", "maxdisk", "disk", "netin", "netout", "diskread",
                "diskwrite"}
NODE_USAGE_FIELDS = {"cpu", "mem", "disk", "uptime", "maxcpu", "maxmem", "maxdisk"}

AUDIT_ONE_VM = {
    "nodes": [{"name": "pve1"}, {"name": "pve2"}],
    "pools": [{"poolid": "prod"}],
    "guests": [{"vmid": 100, "node": "pve1", "pool": "prod", "tags": ["web"]},
               {"vmid": 101, "node": "pve2", "tags": ["secret"]}],
    "users": [{"userid": "root@pam", "password": "secret"},
              {"userid": "vera@pve", "password": "vera-pw"}],
    "acl": [{"path": "/vms/100", "role": "PVEAuditor", "user": "vera@pve"}],
}


def get(sim, path: str, **params):
    return requests.get(f"{sim.url}{API}{path}", params=params,
                        headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                        verify=sim.cert, timeout=30)


def by_id(entries: list[dict]) -> dict[str, dict]:
    return {e["id"]: e for e in entries}


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- /version and /cluster/status ---------------------------------------------------------


def test_version_has_version_release_repoid_and_console(shared_sim):
    version = shared_sim.proxmox().version.get()
    assert version["version"] == "9.1.4"
    assert version["release"] == "9.1"
    assert re.fullmatch(r"[0-9a-f]{8,64}", version["repoid"])
    assert version["console"] in ("applet", "vv", "html5", "xtermjs")


def test_version_follows_the_scenario(sim_factory):
    sim = sim_factory({"pve_version": "8.4", "nodes": [{"name": "n1"}]})
    version = sim.proxmox(user="root@pam", password="keel-sim").version.get()
    assert (version["version"], version["release"]) == ("8.4.0", "8.4")


def test_cluster_status_has_one_quorate_cluster_entry_and_one_entry_per_node(shared_sim):
    status = shared_sim.proxmox().cluster.status.get()
    cluster = [e for e in status if e["type"] == "cluster"]
    nodes = [e for e in status if e["type"] == "node"]
    assert cluster == [{"type": "cluster", "id": "cluster", "name": "demo", "nodes": 5,
                        "quorate": 1, "version": cluster[0]["version"]}]
    assert isinstance(cluster[0]["version"], int)
    assert [n["name"] for n in nodes] == DEMO_NODES
    assert [n["nodeid"] for n in nodes] == [1, 2, 3, 4, 5]
    assert [n["local"] for n in nodes] == [1, 0, 0, 0, 0]
    assert all(n["online"] == 1 and n["id"] == f"node/{n['name']}" for n in nodes)
    assert nodes[0]["ip"] == "10.0.0.1"


def test_cluster_status_shows_a_lost_node_offline_and_quorum_as_long_as_a_majority_is_up(sim):
    sim.control("POST", "nodes/pve5", {"online": False})
    sim.control("POST", "nodes/pve4", {"online": False})
    status = by_id(sim.proxmox().cluster.status.get())
    assert status["node/pve5"]["online"] == 0
    assert status["cluster"]["quorate"] == 1
    sim.control("POST", "nodes/pve3", {"online": False})
    assert by_id(sim.proxmox().cluster.status.get())["cluster"]["quorate"] == 0


# -- /cluster/resources ----------------------------------------------------------------


def test_resources_without_type_list_pools_guests_nodes_and_storage(shared_sim):
    resources = shared_sim.proxmox().cluster.resources.get()
    kinds = [e["type"] for e in resources]
    assert set(kinds) == {"pool", "qemu", "lxc", "node", "storage"}
    # pve-manager lists pools, then guests, then nodes, then storage.
    order = ["pool", "guest", "node", "storage"]
    ranks = [order.index("guest" if k in ("qemu", "lxc") else k) for k in kinds]
    assert ranks == sorted(ranks)
    assert kinds.count("node") == 5
    assert kinds.count("qemu") + kinds.count("lxc") == 27


@pytest.mark.parametrize("kind, types", [
    ("vm", {"qemu", "lxc"}),
    ("node", {"node"}),
    ("storage", {"storage"}),
])
def test_resources_type_filter_keeps_only_that_kind(shared_sim, kind, types):
    resources = shared_sim.proxmox().cluster.resources.get(type=kind)
    assert resources and {e["type"] for e in resources} == types


def test_running_qemu_guest_resource_has_the_documented_fields(shared_sim):
    guest = by_id(shared_sim.proxmox().cluster.resources.get(type="vm"))["qemu/100"]
    assert GUEST_FIELDS | {"memhost", "tags", "pool", "hastate"} == set(guest)
    assert guest["vmid"] == 100 and guest["node"] == "pve1" and guest["name"] == "web1"
    assert guest["status"] == "running" and guest["template"] == 0
    assert guest["maxcpu"] == 4 and guest["maxmem"] == 8 * 1024**3
    assert 0 < guest["cpu"] <= 1 and 0 < guest["mem"] <= guest["maxmem"]
    assert guest["memhost"] >= guest["mem"]
    assert guest["uptime"] > 0 and guest["disk"] == 0 and guest["maxdisk"] == 32 * 1024**3
    assert (guest["tags"], guest["pool"], guest["hastate"]) == ("web", "prod", "started")


def test_container_resource_has_real_disk_and_memhost_zero(shared_sim):
    # PVE 9's RRD layout has a memhost column that pvestatd leaves empty for containers.
    ct = by_id(shared_sim.proxmox().cluster.resources.get(type="vm"))["lxc/109"]
    assert ct["type"] == "lxc" and ct["memhost"] == 0
    assert 0 < ct["disk"] <= ct["maxdisk"]


def test_pve8_has_no_memhost_in_resources_or_pool_members(sim_factory):
    sim = sim_factory({"pve_version": "8.4.1", "nodes": [{"name": "pve1"}], "pools": ["prod"],
                       "guests": [{"vmid": 100, "node": "pve1", "pool": "prod"},
                                  {"vmid": 101, "node": "pve1", "type": "lxc", "pool": "prod"}]})
    pve = sim.proxmox(user="root@pam", password="keel-sim")
    guests = [e for e in pve.cluster.resources.get() if e["type"] in ("qemu", "lxc")]
    [pool] = pve.pools.get(poolid="prod")
    assert len(guests) == 2 and len(pool["members"]) == 2
    assert not [e for e in guests + pool["members"] if "memhost" in e]
    assert guests[0]["mem"] > 0       # the other usage fields are there


def test_stopped_guest_and_template_resources_use_nothing(shared_sim):
    resources = by_id(shared_sim.proxmox().cluster.resources.get(type="vm"))
    stopped, template = resources["qemu/121"], resources["qemu/9000"]
    assert (stopped["status"], stopped["cpu"], stopped["mem"], stopped["uptime"]) == ("stopped", 0, 0, 0)
    assert template["template"] == 1 and template["status"] == "stopped"
    assert template["tags"] == "keel-runner-template"
    assert "hastate" not in stopped and "lock" not in stopped


def test_node_resource_has_usage_and_hastate_but_no_host_arch_on_x86(shared_sim):
    node = by_id(shared_sim.proxmox().cluster.resources.get(type="node"))["node/pve1"]
    assert {"id", "type", "node", "status", "level", "cgroup-mode", "hastate"} | NODE_USAGE_FIELDS \
        == set(node)
    assert node["status"] == "online" and node["hastate"] == "online"
    assert node["maxcpu"] == 64 and node["maxmem"] == 256 * 1024**3
    assert 0 < node["cpu"] < 1 and 0 < node["mem"] < node["maxmem"]


def test_node_cpu_is_the_sum_of_its_guests_cores_over_its_threads(shared_sim):
    resources = shared_sim.proxmox().cluster.resources.get()
    node = by_id(resources)["node/pve3"]
    cores = sum(g["cpu"] * g["maxcpu"] for g in resources
                if g["type"] in ("qemu", "lxc") and g["node"] == "pve3")
    overhead = node["cpu"] * node["maxcpu"] - cores
    assert 0 < overhead < 1.0   # the host's own use (0.3 cores by default)


def test_storage_resources_are_per_node_with_shared_flag(shared_sim):
    storage = by_id(shared_sim.proxmox().cluster.resources.get(type="storage"))
    assert set(storage) == {f"storage/{n}/{s}" for n in DEMO_NODES
                            for s in ("local", "local-lvm", "ceph")}
    ceph = storage["storage/pve2/ceph"]
    assert {"id", "type", "storage", "node", "status", "disk", "maxdisk", "content", "shared",
            "plugintype"} == set(ceph)
    assert (ceph["shared"], ceph["plugintype"], ceph["status"]) == (1, "rbd", "available")
    assert storage["storage/pve1/local-lvm"]["shared"] == 0
    # ceph is one pool: every node reports the same usage
    assert len({storage[f"storage/{n}/ceph"]["disk"] for n in DEMO_NODES}) == 1


def test_network_storage_is_shared_without_the_flag(sim_factory):
    sim = sim_factory({"nodes": [{"name": "pve1"}, {"name": "pve2"}],
                       "storages": [{"storage": "ceph", "type": "rbd", "size": "10TiB"},
                                    {"storage": "data", "type": "dir"}],
                       "guests": [{"vmid": 100, "node": "pve1", "storage": "ceph", "disk": "1TiB"}]})
    pve = sim.proxmox(user="root@pam", password="keel-sim")
    config = {s["storage"]: s for s in pve.storage.get()}
    assert config["ceph"]["shared"] == 1 and "shared" not in config["data"]
    storage = by_id(pve.cluster.resources.get(type="storage"))
    assert storage["storage/pve2/ceph"]["shared"] == 1
    # one pool seen from every node, not a local storage per node
    assert storage["storage/pve2/ceph"]["disk"] == storage["storage/pve1/ceph"]["disk"] > 0
    assert pve.nodes("pve1").qemu(100).migrate.get()["local_disks"] == []


def test_pool_resources_add_up_their_running_members(shared_sim):
    resources = shared_sim.proxmox().cluster.resources.get()
    pool = by_id(resources)["/pool/prod"]
    members = [g for g in resources if g["type"] in ("qemu", "lxc") and g.get("pool") == "prod"
               and g["status"] == "running"]
    assert pool["pool"] == "prod" and pool["type"] == "pool"
    assert pool["maxmem"] == sum(g["maxmem"] for g in members)
    assert pool["mem"] == sum(g["mem"] for g in members)
    assert pool["maxcpu"] == sum(g["maxcpu"] for g in members)
    assert pool["uptime"] == max(g["uptime"] for g in members)


def test_resources_show_only_what_the_caller_may_audit(sim_factory):
    sim = sim_factory(AUDIT_ONE_VM)
    vera = sim.proxmox(user="vera@pve", password="vera-pw")
    resources = vera.cluster.resources.get()
    guests = [e for e in resources if e["type"] in ("qemu", "lxc")]
    assert [g["vmid"] for g in guests] == [100]
    assert "pool" not in guests[0]            # no Pool.Audit on /pool/prod
    nodes = [e for e in resources if e["type"] == "node"]
    assert len(nodes) == 2 and not any(NODE_USAGE_FIELDS & set(n) for n in nodes)
    assert not [e for e in resources if e["type"] in ("storage", "pool")]


# -- /cluster/nextid -------------------------------------------------------------------


def test_nextid_is_the_first_free_id_as_a_string(shared_sim):
    response = get(shared_sim, "/cluster/nextid")
    assert response.json() == {"data": "126"}


@pytest.mark.parametrize("vmid, status, answer", [
    (500, 200, {"data": "500"}),
    (100, 400, {"data": None, "message": "Parameter verification failed.\n",
                "errors": {"vmid": "VM 100 already exists"}}),
    (9000, 400, {"data": None, "message": "Parameter verification failed.\n",
                 "errors": {"vmid": "VM 9000 already exists"}}),
    (99, 400, None),
])
def test_nextid_with_vmid_checks_that_id(shared_sim, vmid, status, answer):
    response = get(shared_sim, "/cluster/nextid", vmid=vmid)
    assert response.status_code == status
    if answer is not None:
        assert response.json() == answer


def test_nextid_respects_the_next_id_range(sim_factory):
    sim = sim_factory({"nodes": [{"name": "n1"}], "guests": [{"vmid": 1000, "node": "n1"}],
                       "cluster_options": {"next-id": {"lower": 1000, "upper": 2000}}})
    pve = sim.proxmox(user="root@pam", password="keel-sim")
    assert pve.cluster.nextid.get() == "1001"


def test_nextid_is_not_a_reservation(sim):
    pve = sim.proxmox()
    first = pve.cluster.nextid.get()
    assert pve.cluster.nextid.get() == first


# -- /cluster/options ------------------------------------------------------------------


def test_options_return_property_strings_as_objects(shared_sim):
    options = shared_sim.proxmox().cluster.options.get()
    assert options["crs"] == {"ha": "static"}


def test_options_put_takes_a_property_string_and_get_returns_an_object(sim):
    pve = sim.proxmox()
    assert pve.cluster.options.put(crs="ha=static,ha-auto-rebalance=1") is None
    assert pve.cluster.options.get()["crs"] == {"ha": "static", "ha-auto-rebalance": 1}
    pve.cluster.options.put(**{"next-id": "lower=200,upper=300"})
    assert pve.cluster.options.get()["next-id"] == {"lower": 200, "upper": 300}
    assert pve.cluster.nextid.get() == "200"


def test_options_delete_removes_keys(sim):
    pve = sim.proxmox()
    pve.cluster.options.put(description="lab", keyboard="de")
    pve.cluster.options.put(delete="crs,keyboard")
    options = pve.cluster.options.get()
    assert "crs" not in options and "keyboard" not in options
    assert options["description"] == "lab"


@pytest.mark.parametrize("params, bad_key", [
    ({"crs": "ha=fancy"}, "crs"),
    ({"crs": "colour=blue"}, "crs"),
    ({"crs": "ha=static,ha=basic"}, "crs"),
    ({"crs": "ha-auto-rebalance-threshold=20"}, "crs"),   # requires ha-auto-rebalance
    ({"next-id": "lower=abc"}, "next-id"),
    ({"keyboard": "klingon"}, "keyboard"),
    ({"delete": "bad!key"}, "delete"),
])
def test_options_put_with_a_bad_value_is_400_naming_the_key(sim, params, bad_key):
    response = requests.put(f"{sim.url}{API}/cluster/options", data=params,
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)
    assert response.status_code == 400
    assert response.reason == "Parameter verification failed."
    assert bad_key in response.json()["errors"]


def test_options_put_sets_then_deletes_so_a_key_in_both_ends_up_deleted(sim):
    pve = sim.proxmox()
    pve.cluster.options.put(keyboard="de", delete="keyboard,no-such-option")
    assert "keyboard" not in pve.cluster.options.get()


def test_options_tag_style_colour_map_is_accepted(sim):
    pve = sim.proxmox()
    pve.cluster.options.put(**{"tag-style": "color-map=web:FF0000,ordering=config"})
    assert pve.cluster.options.get()["tag-style"] == {"color-map": "web:FF0000", "ordering": "config"}


def test_options_without_sys_audit_show_console_tag_style_and_allowed_tags_only(sim_factory):
    sim = sim_factory(dict(AUDIT_ONE_VM, cluster_options={
        "crs": {"ha": "static"}, "keyboard": "de", "console": "html5",
        "tag-style": {"ordering": "config"}}))
    vera = sim.proxmox(user="vera@pve", password="vera-pw")
    assert vera.cluster.options.get() == {"console": "html5", "tag-style": {"ordering": "config"},
                                          "allowed-tags": ["web"]}


def test_options_allowed_tags_of_a_privileged_user_are_all_tags_in_use(shared_sim):
    allowed = shared_sim.proxmox().cluster.options.get()["allowed-tags"]
    assert {"web", "db", "keel-runner-template", "plb_pin_pve2"} <= set(allowed)
    assert allowed == sorted(allowed)


# -- /cluster/tasks --------------------------------------------------------------------


def test_cluster_tasks_list_running_and_finished_tasks_of_every_node(sim):
    pve = sim.proxmox()
    started = pve.nodes("pve3").qemu(121).status.start.post()
    stopped = pve.nodes("pve2").qemu(114).status.stop.post()
    tasks = {t["upid"]: t for t in pve.cluster.tasks.get()}
    assert {started, stopped} <= set(tasks)
    assert "status" not in tasks[started]
    sim.advance(5)
    tasks = {t["upid"]: t for t in pve.cluster.tasks.get()}
    assert tasks[started]["status"] == "OK" and tasks[started]["endtime"] >= tasks[started]["starttime"]
    assert (tasks[started]["node"], tasks[started]["type"], tasks[started]["id"]) == ("pve3", "qmstart", "121")
    assert (tasks[stopped]["user"], tasks[stopped]["tokenid"]) == ("keel@pve", "keel")


# -- /pools ----------------------------------------------------------------------------


def test_pools_list_ids_and_comments(shared_sim):
    assert shared_sim.proxmox().pools.get() == [
        {"poolid": "ci", "comment": "CI runners"}, {"poolid": "dev", "comment": "Development"},
        {"poolid": "prod", "comment": "Production"}]


def test_pool_members_are_guest_stats(shared_sim):
    [pool] = shared_sim.proxmox().pools.get(poolid="ci")
    assert pool["poolid"] == "ci" and [m["vmid"] for m in pool["members"]] == [125, 9000]
    member = pool["members"][0]
    assert (member["id"], member["node"], member["type"]) == ("qemu/125", "pve5", "qemu")
    assert "pool" not in member and "tags" not in member


def test_pool_membership_changes(sim):
    pve = sim.proxmox()
    pve.pools.post(poolid="staging", comment="pre-prod")
    pve.pools.put(poolid="staging", vms="119,123", storage="ceph")
    members = pve.pools.get(poolid="staging")[0]["members"]
    assert [m["id"] for m in members] == ["qemu/119", "qemu/123", "storage/pve1/ceph"]
    pve.pools.put(poolid="staging", vms="119", delete=1)
    assert [m["id"] for m in pve.pools.get(poolid="staging", type="qemu")[0]["members"]] == ["qemu/123"]
    pve.pools.put(poolid="staging", vms="100", **{"allow-move": 1})
    assert next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 100)["pool"] == "staging"


@pytest.mark.parametrize("method, data, reason", [
    ("PUT", {"poolid": "staging", "vms": "100"},
     "update pools failed: VM 100 belongs already to pool 'prod' and 'allow-move' is not set"),
    ("PUT", {"poolid": "prod", "vms": "100"}, "update pools failed: VM 100 is already a pool member"),
    ("PUT", {"poolid": "prod", "vms": "119", "delete": 1}, "update pools failed: VM 119 is not a pool member"),
    ("PUT", {"poolid": "nope", "vms": "119"}, "update pools failed: pool 'nope' does not exist"),
    ("POST", {"poolid": "prod"}, "create pool failed: pool 'prod' already exists"),
    ("DELETE", {"poolid": "dev"}, "delete pool failed: pool 'dev' is not empty (contains VM 105)"),
])
def test_pool_errors_answer_500(sim, method, data, reason):
    sim.proxmox().pools.post(poolid="staging")
    response = requests.request(method, f"{sim.url}{API}/pools", data=data if method != "DELETE" else None,
                                params=data if method == "DELETE" else None,
                                headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                                verify=sim.cert, timeout=30)
    assert response.status_code == 500
    assert response.reason == reason


def test_an_empty_pool_can_be_deleted(sim):
    pve = sim.proxmox()
    pve.pools.post(poolid="staging")
    pve.pools.delete(poolid="staging")
    assert "staging" not in [p["poolid"] for p in pve.pools.get()]
