"""The HA stack: resources, rules (PVE 9) and groups (PVE 8), the status answers, and the
CRM at work: migrate commands, maintenance, a lost node, failback."""

from __future__ import annotations

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"

PVE8 = {
    "pve_version": "8.4.1",
    "nodes": [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}],
    "storages": [{"storage": "ceph", "type": "rbd", "shared": True}],
    "guests": [{"vmid": 100, "node": "n1", "ha": {"state": "started", "group": "prefer-n2"}},
               {"vmid": 101, "node": "n1", "ha": "started"},
               {"vmid": 102, "node": "n2"}],
    "ha": {"groups": [{"group": "prefer-n2", "nodes": {"n2": 2, "n3": 1}}]},
    "users": [{"userid": "root@pam", "password": "secret"}],
}

FAILBACK = {
    "nodes": [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}],
    "storages": [{"storage": "ceph", "type": "rbd", "shared": True}],
    "guests": [{"vmid": 100, "node": "n1", "ha": "started"},
               {"vmid": 101, "node": "n1", "ha": {"state": "started", "failback": False}}],
    "ha": {"rules": [{"rule": "home", "type": "node-affinity", "resources": ["vm:100", "vm:101"],
                      "nodes": {"n1": 2, "n2": 1}}]},
    "users": [{"userid": "root@pam", "password": "secret"}],
}


def raw(sim, method: str, path: str, **data) -> requests.Response:
    return requests.request(method, f"{sim.url}{API}{path}", data=data,
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=sim.cert, timeout=30)


def node_of(pve, vmid: int) -> str:
    return next(g["node"] for g in pve.cluster.resources.get(type="vm") if g["vmid"] == vmid)


def service(pve, sid: str) -> dict:
    return pve.cluster.ha.status.manager_status.get()["manager_status"]["service_status"][sid]


def settle(sim, seconds: float = 120, step: float = 5) -> None:
    """Let CRM rounds and the migrations they start run for a while of simulated time."""
    done = 0.0
    while done < seconds:
        sim.advance(step)
        done += step


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- resources -------------------------------------------------------------------------


def test_resources_list_the_configured_keys(shared_sim):
    resources = {r["sid"]: r for r in shared_sim.proxmox().cluster.ha.resources.get()}
    assert set(resources) == {"vm:100", "vm:101", "vm:102", "vm:110", "vm:111", "vm:115", "vm:120"}
    r = resources["vm:100"]
    assert (r["type"], r["state"], r["failback"], r["max_restart"], r["max_relocate"]) == \
        ("vm", "started", 1, 1, 1)
    assert len(r["digest"]) == 40 and "group" not in r


def test_resources_filter_by_type(shared_sim):
    assert shared_sim.proxmox().cluster.ha.resources.get(type="ct") == []


def test_resource_read_by_sid_or_vmid(shared_sim):
    pve = shared_sim.proxmox()
    assert pve.cluster.ha.resources("vm:110").get()["sid"] == "vm:110"
    assert pve.cluster.ha.resources("110").get()["sid"] == "vm:110"


def test_resource_add_update_delete(sim):
    pve = sim.proxmox()
    assert pve.cluster.ha.resources.post(sid="vm:103", state="started", comment="api") is None
    added = pve.cluster.ha.resources("vm:103").get()
    assert (added["type"], added["state"], added["comment"]) == ("vm", "started", "api")
    assert "failback" not in added            # only what was configured
    pve.cluster.ha.resources("vm:103").put(max_relocate=3, delete="comment")
    updated = pve.cluster.ha.resources("vm:103").get()
    assert updated["max_relocate"] == 3 and "comment" not in updated
    assert pve.nodes("pve1").qemu(103).status.current.get()["ha"]["managed"] == 1
    pve.cluster.ha.resources("vm:103").delete()
    assert "vm:103" not in [r["sid"] for r in pve.cluster.ha.resources.get()]
    assert pve.nodes("pve1").qemu(103).status.current.get()["ha"] == {"managed": 0}


def test_resource_add_of_a_container_by_vmid_detects_its_type(sim):
    pve = sim.proxmox()
    pve.cluster.ha.resources.post(sid="109")
    assert pve.cluster.ha.resources("ct:109").get()["type"] == "ct"


@pytest.mark.parametrize("method, path, data, reason", [
    ("POST", "/cluster/ha/resources", {"sid": "vm:100"},
     "create resource failed: resource ID 'vm:100' already defined"),
    ("POST", "/cluster/ha/resources", {"sid": "vm:999"}, "resource 'vm:999' does not exist in cluster"),
    ("POST", "/cluster/ha/resources", {"sid": "vm:103", "group": "grp"},
     "invalid parameter 'group': ha groups have been migrated to rules"),
    ("DELETE", "/cluster/ha/resources/vm:103", {}, "cannot delete service 'vm:103', not HA managed!"),
    ("POST", "/cluster/ha/resources/vm:103/migrate", {"node": "pve2"}, "resource 'vm:103' is not HA managed"),
])
def test_resource_errors_answer_500(sim, method, path, data, reason):
    response = raw(sim, method, path, **data)
    assert response.status_code == 500
    assert response.reason == reason


def test_deleting_a_resource_removes_it_from_its_rules(sim):
    pve = sim.proxmox()
    pve.cluster.ha.resources("vm:115").delete()
    assert "erp-prefers-big" not in [r["rule"] for r in pve.cluster.ha.rules.get()]   # it was alone
    pve.cluster.ha.resources("vm:110").delete()
    assert pve.cluster.ha.rules("db-apart").get()["resources"] == "vm:111"


def test_ignored_resource_acts_unmanaged(sim):
    pve = sim.proxmox()
    pve.cluster.ha.resources("vm:101").put(state="ignored")
    assert pve.nodes("pve1").qemu(101).status.current.get()["ha"] == {"managed": 0}
    upid = pve.nodes("pve1").qemu(101).status.stop.post()
    assert ":qmstop:101:" in upid


# -- HA migrate/relocate ---------------------------------------------------------------


def test_ha_migrate_on_pve9_answers_the_requested_node_and_comigrated_partners(sim):
    pve = sim.proxmox()
    answer = pve.cluster.ha.resources("vm:102").migrate.post(node="pve4")
    assert answer == {"sid": "vm:102", "requested-node": "pve4", "comigrated-resources": ["vm:120"]}
    settle(sim)
    assert node_of(pve, 102) == "pve4" and node_of(pve, 120) == "pve4"
    assert service(pve, "vm:102")["state"] == "started"


def test_ha_migrate_answer_has_no_comigrated_list_without_partners(sim):
    answer = sim.proxmox().cluster.ha.resources("vm:101").migrate.post(node="pve3")
    assert answer == {"sid": "vm:101", "requested-node": "pve3"}


def test_ha_migrate_to_a_node_with_a_negative_partner_is_blocked(sim):
    pve = sim.proxmox()
    answer = pve.cluster.ha.resources("vm:110").migrate.post(node="pve2")
    assert answer["blocking-resources"] == [{"sid": "vm:111", "cause": "resource-affinity"}]
    settle(sim, 60)
    assert node_of(pve, 110) == "pve1"


def test_ha_relocate_stops_moves_and_starts(sim):
    pve = sim.proxmox()
    pve.cluster.ha.resources("vm:101").relocate.post(node="pve3")
    settle(sim, 90)
    assert node_of(pve, 101) == "pve3"
    assert pve.nodes("pve3").qemu(101).status.current.get()["status"] == "running"


def test_ha_migrate_on_pve8_answers_null(sim_factory):
    sim = sim_factory(PVE8)
    pve = sim.proxmox(user="root@pam", password="secret")
    assert pve.cluster.ha.resources("vm:101").migrate.post(node="n3") is None
    settle(sim, 60)
    assert node_of(pve, 101) == "n3"


# -- rules (PVE 9) ---------------------------------------------------------------------


def test_rules_list_with_type_order_digest(shared_sim):
    rules = {r["rule"]: r for r in shared_sim.proxmox().cluster.ha.rules.get()}
    assert set(rules) == {"db-apart", "web-near-cache", "erp-prefers-big"}
    apart = rules["db-apart"]
    assert (apart["type"], apart["affinity"], apart["resources"]) == \
        ("resource-affinity", "negative", "vm:110,vm:111")
    assert rules["erp-prefers-big"]["nodes"] == "pve1:2,pve2:2,pve5:1"
    assert sorted(r["order"] for r in rules.values()) == [1, 2, 3]
    assert len({r["digest"] for r in rules.values()}) == 1


@pytest.mark.parametrize("params, names", [
    ({"type": "node-affinity"}, ["erp-prefers-big"]),
    ({"resource": "vm:120"}, ["web-near-cache"]),
])
def test_rules_filters(shared_sim, params, names):
    assert [r["rule"] for r in shared_sim.proxmox().cluster.ha.rules.get(**params)] == names


def test_scenario_rules_list_only_their_keys_as_rules_made_through_the_api(sim):
    pve = sim.proxmox()
    pve.cluster.ha.rules.post(rule="made", type="node-affinity", resources="vm:100", nodes="pve3")
    pve.cluster.ha.rules.post(rule="made-apart", type="resource-affinity", resources="vm:101,vm:102",
                              affinity="negative", disable=0)
    rules = {r["rule"]: r for r in pve.cluster.ha.rules.get()}
    assert set(rules["erp-prefers-big"]) == set(rules["made"]) == \
        {"rule", "type", "resources", "nodes", "order", "digest"}
    assert set(rules["db-apart"]) == set(rules["made-apart"]) == \
        {"rule", "type", "resources", "affinity", "order", "digest"}


def test_scenario_rules_keep_strict_and_disable_when_given(sim_factory):
    sim = sim_factory({
        "nodes": [{"name": "n1"}, {"name": "n2"}],
        "guests": [{"vmid": 100, "node": "n1", "ha": True}, {"vmid": 101, "node": "n1", "ha": True}],
        "ha": {"rules": [{"rule": "a", "type": "node-affinity", "resources": [100], "nodes": "n1",
                          "strict": False, "disable": True, "comment": "kept"},
                         {"rule": "b", "type": "node-affinity", "resources": [101], "nodes": "n1",
                          "strict": True, "disable": False}]}})
    pve = sim.proxmox(user="root@pam", password="keel-sim")
    rules = {r["rule"]: r for r in pve.cluster.ha.rules.get()}
    assert (rules["a"]["strict"], rules["a"]["disable"], rules["a"]["comment"]) == (0, 1, "kept")
    assert rules["b"]["strict"] == 1 and "disable" not in rules["b"] and "comment" not in rules["b"]


def test_rule_create_update_delete(sim):
    pve = sim.proxmox()
    pve.cluster.ha.rules.post(rule="keep-web", type="node-affinity", resources="vm:100,vm:101",
                              nodes="pve3:1,pve4", strict=1)
    rule = pve.cluster.ha.rules("keep-web").get()
    assert (rule["resources"], rule["nodes"], rule["strict"]) == ("vm:100,vm:101", "pve3:1,pve4", 1)
    pve.cluster.ha.rules("keep-web").put(type="node-affinity", nodes="pve4", comment="only pve4")
    assert pve.cluster.ha.rules("keep-web").get()["nodes"] == "pve4"
    pve.cluster.ha.rules("keep-web").put(type="node-affinity", disable=1)
    assert pve.cluster.ha.rules("keep-web").get()["disable"] == 1
    # PVE drops a false ``disable`` on update as on create: the rule stays disabled ...
    pve.cluster.ha.rules("keep-web").put(type="node-affinity", disable=0)
    assert pve.cluster.ha.rules("keep-web").get()["disable"] == 1
    # ... until ``disable`` is deleted.
    pve.cluster.ha.rules("keep-web").put(type="node-affinity", delete="disable")
    assert "disable" not in pve.cluster.ha.rules("keep-web").get()
    pve.cluster.ha.rules("keep-web").delete()
    assert "keep-web" not in [r["rule"] for r in pve.cluster.ha.rules.get()]


def test_a_strict_rule_moves_its_resources(sim):
    pve = sim.proxmox()
    pve.cluster.ha.rules.post(rule="pin", type="node-affinity", resources="vm:101", nodes="pve4",
                              strict=1)
    settle(sim, 60)
    assert node_of(pve, 101) == "pve4"


@pytest.mark.parametrize("data, reason", [
    ({"rule": "db-apart", "type": "resource-affinity", "affinity": "negative",
      "resources": "vm:100,vm:101"}, "create ha rule failed: HA rule 'db-apart' already defined"),
    ({"rule": "rr", "type": "node-affinity", "resources": "vm:103", "nodes": "pve1"},
     "create ha rule failed: cannot use unmanaged resource(s) vm:103."),
    ({"rule": "rr", "type": "node-affinity", "resources": "vm:100", "nodes": "pve9"},
     "create ha rule failed: cannot use non-existent node(s) pve9."),
    ({"rule": "rr", "type": "resource-affinity", "affinity": "positive", "resources": "vm:100"},
     "create ha rule failed: 400 Rule 'rr' is invalid."),
    ({"rule": "rr", "type": "resource-affinity", "affinity": "positive", "resources": "vm:110,vm:111"},
     "create ha rule failed: 400 Rule 'rr' is invalid."),
])
def test_rule_create_errors_answer_500(sim, data, reason):
    response = raw(sim, "POST", "/cluster/ha/rules", **data)
    assert response.status_code == 500
    assert response.reason == reason


def test_infeasible_rule_names_the_problem_in_the_message(sim):
    response = raw(sim, "POST", "/cluster/ha/rules", rule="rr", type="resource-affinity",
                   affinity="positive", resources="vm:100")
    assert "resources: rule is ineffective as there are less than two resources" in \
        response.json()["message"]


def test_deleting_an_unknown_rule_is_no_error(sim):
    assert sim.proxmox().cluster.ha.rules("nope").delete() is None


def test_groups_on_pve9_answer_that_they_were_migrated(shared_sim):
    response = requests.get(f"{shared_sim.url}{API}/cluster/ha/groups",
                            headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 500
    assert response.reason == "cannot index groups: ha groups have been migrated to rules"


# -- groups (PVE 8) --------------------------------------------------------------------


def test_groups_on_pve8(sim_factory):
    sim = sim_factory(PVE8)
    pve = sim.proxmox(user="root@pam", password="secret")
    [group] = pve.cluster.ha.groups.get()
    assert (group["group"], group["type"], group["nodes"]) == ("prefer-n2", "group", "n2:2,n3:1")
    assert pve.cluster.ha.resources("vm:100").get()["group"] == "prefer-n2"
    pve.cluster.ha.groups.post(group="only-n3", nodes="n3", restricted=1)
    pve.cluster.ha.resources("vm:101").put(group="only-n3")
    settle(sim, 60)
    assert node_of(pve, 101) == "n3"
    assert node_of(pve, 100) == "n2"     # the group's highest priority
    with pytest.raises(ResourceException) as err:
        pve.cluster.ha.rules.get()
    assert err.value.status_code == 501


def test_groups_in_use_cannot_be_deleted_on_pve8(sim_factory):
    sim = sim_factory(PVE8)
    pve = sim.proxmox(user="root@pam", password="secret")
    with pytest.raises(ResourceException) as err:
        pve.cluster.ha.groups("prefer-n2").delete()
    assert err.value.status_code == 500
    assert err.value.content == "delete ha group failed: ha group is used by service 'vm:100'"
    pve.cluster.ha.resources("vm:100").put(delete="group")
    pve.cluster.ha.groups("prefer-n2").delete()
    assert pve.cluster.ha.groups.get() == []


# -- status ----------------------------------------------------------------------------


def test_status_current_has_quorum_master_fencing_lrms_and_services(shared_sim):
    status = shared_sim.proxmox().cluster.ha.status.current.get()
    by_id = {e["id"]: e for e in status}
    assert by_id["quorum"] == {"id": "quorum", "type": "quorum", "node": "pve1", "status": "OK",
                               "quorate": 1}
    master = by_id["master"]
    assert master["node"] == "pve1" and master["status"].startswith("pve1 (active, ")
    assert master["status"].endswith(" - static load CRS")
    assert by_id["fencing"]["armed-state"] == "armed"
    assert [e["id"] for e in status if e["type"] == "lrm"] == [f"lrm:pve{i}" for i in range(1, 6)]
    assert by_id["lrm:pve1"]["status"].startswith("pve1 (active, watchdog active, ")
    svc = by_id["service:vm:100"]
    assert (svc["sid"], svc["node"], svc["crm_state"], svc["state"], svc["request_state"]) == \
        ("vm:100", "pve1", "started", "started", "started")
    assert svc["status"] == "vm:100 (pve1, started)"


def test_manager_status_shape(shared_sim):
    status = shared_sim.proxmox().cluster.ha.status.manager_status.get()
    manager = status["manager_status"]
    assert manager["master_node"] == "pve1" and isinstance(manager["timestamp"], int)
    assert manager["node_status"] == {f"pve{i}": "online" for i in range(1, 6)}
    svc = manager["service_status"]["vm:110"]
    assert (svc["node"], svc["state"]) == ("pve1", "started") and svc["uid"]
    assert status["quorum"] == {"node": "pve1", "quorate": 1}
    assert status["lrm_status"]["pve1"]["mode"] == "active"
    assert status["lrm_status"]["pve1"]["state"] == "active"


# -- the CRM at work -------------------------------------------------------------------


def test_maintenance_empties_the_node_and_the_guests_come_back_afterwards(sim):
    pve = sim.proxmox()
    ha_on_pve1 = [int(r["sid"][3:]) for r in pve.cluster.ha.resources.get() if node_of(pve, int(r["sid"][3:])) == "pve1"]
    assert sorted(ha_on_pve1) == [100, 101, 102, 110, 120]
    sim.control("POST", "nodes/pve1", {"maintenance": True})
    settle(sim, 300)
    assert all(node_of(pve, vmid) != "pve1" for vmid in ha_on_pve1)
    assert node_of(pve, 103) == "pve1"   # not HA: stays
    node = next(n for n in pve.cluster.resources.get(type="node") if n["node"] == "pve1")
    assert node["hastate"] == "maintenance"
    assert pve.cluster.ha.status.manager_status.get()["lrm_status"]["pve1"]["mode"] == "maintenance"
    sim.control("POST", "nodes/pve1", {"maintenance": False})
    settle(sim, 300)
    assert all(node_of(pve, vmid) == "pve1" for vmid in ha_on_pve1)
    assert all(service(pve, f"vm:{vmid}")["state"] == "started" for vmid in ha_on_pve1)


def test_lost_node_guests_are_recovered_elsewhere_after_the_fence_delay(sim):
    pve = sim.proxmox()
    sim.control("POST", "nodes/pve2", {"online": False})
    sim.advance(20)
    assert node_of(pve, 111) == "pve2"                       # not yet: fencing takes time
    status = pve.cluster.ha.status.manager_status.get()["manager_status"]
    assert status["node_status"]["pve2"] in ("unknown", "fence")
    settle(sim, 120)
    assert node_of(pve, 111) != "pve2" and node_of(pve, 115) != "pve2"
    assert node_of(pve, 111) != "pve1"                       # never next to vm:110 (negative)
    assert pve.nodes(node_of(pve, 111)).qemu(111).status.current.get()["status"] == "running"
    assert node_of(pve, 113) == "pve2"                       # not HA: stays with the dead node


def test_failback_moves_a_guest_home_unless_failback_is_off(sim_factory):
    sim = sim_factory(FAILBACK)
    pve = sim.proxmox(user="root@pam", password="secret")
    pve.cluster.ha.resources("vm:100").migrate.post(node="n2")
    pve.cluster.ha.resources("vm:101").migrate.post(node="n2")
    settle(sim, 30)
    assert node_of(pve, 101) == "n2"
    settle(sim, 120)
    assert node_of(pve, 100) == "n1"     # failback: the CRM moves it back to the best priority
    assert node_of(pve, 101) == "n2"     # failback off: it stays where it was put
    assert service(pve, "vm:100")["state"] == "started"


def test_a_node_affinity_guest_goes_to_its_best_node_when_that_node_is_lost(sim_factory):
    sim = sim_factory(FAILBACK)
    pve = sim.proxmox(user="root@pam", password="secret")
    sim.control("POST", "nodes/n1", {"online": False})
    settle(sim, 180)
    assert node_of(pve, 100) == "n2" and node_of(pve, 101) == "n2"
