"""Power saving in the simulator, over real HTTPS through proxmoxer (issue 19): node
shutdown and reboot as PVE runs them, Wake-on-LAN, quorum by corosync votes, and what the
HA stack does with a node that goes (the shutdown policy, maintenance, fencing)."""

from __future__ import annotations

import pytest
import requests
from proxmoxer import ResourceException

TOKEN = "keel@pve!keel=00000000-0000-4000-8000-000000000019"
AUDIT = "audit@pve!ro=00000000-0000-4000-8000-0000000000aa"


def scenario(**extra) -> dict:
    nodes = [{"name": n, "wakeonlan": f"bc:24:11:00:00:0{i + 1}",
              "power": {"boot": "2m", "shutdown": "20s"}} for i, n in enumerate("abcd")]
    nodes.append({"name": "e", "power": {"boot": "2m"}})          # no MAC configured
    return {
        "seed": 3, "start_time": "2026-03-02T00:00:00Z", "local_node": "a",
        "storages": [{"storage": "ceph", "type": "rbd"}],
        "nodes": nodes,
        "guests": [{"vmid": 100, "node": "c", "ha": "started", "memory": "4GiB"},
                   {"vmid": 101, "node": "c", "memory": "4GiB"},
                   {"vmid": 102, "node": "c", "type": "lxc", "memory": "1GiB"},
                   {"vmid": 103, "node": "d", "ha": "started", "memory": "4GiB"},
                   {"vmid": 104, "node": "b", "memory": "4GiB"}],
        "users": [{"userid": "root@pam", "password": "pw"},
                  {"userid": "keel@pve", "tokens": [{"id": "keel", "secret": TOKEN.split("=")[1],
                                                      "privsep": False}]},
                  {"userid": "audit@pve", "tokens": [{"id": "ro", "secret": AUDIT.split("=")[1],
                                                       "privsep": False}]}],
        "acl": [{"path": "/", "role": "Administrator", "user": "keel@pve"},
                {"path": "/", "role": "PVEAuditor", "user": "audit@pve"}],
        **extra,
    }


@pytest.fixture(scope="module")
def _power_sim(tmp_path_factory):
    import yaml
    from conftest import start_sim
    tmp = tmp_path_factory.mktemp("power")
    path = tmp / "power.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    sim = start_sim(path, tmp / "sim")
    yield sim
    sim.stop()


@pytest.fixture
def sim(_power_sim):
    _power_sim.control("POST", "reset")
    return _power_sim


def pve(sim, token: str = TOKEN):
    return sim.proxmox(token=token)


def power(sim, node: str) -> str:
    return sim.control("GET", "state")["power"][node]["state"]


def where(api, vmid: int) -> dict:
    return next(g for g in api.cluster.resources.get(type="vm") if g["vmid"] == vmid)


def service(api, sid: str) -> dict:
    return api.cluster.ha.status.manager_status.get()["manager_status"]["service_status"][sid]


def node_status(api, node: str) -> str:
    return api.cluster.ha.status.manager_status.get()["manager_status"]["node_status"][node]


def run(sim, seconds: float, step: float = 5) -> None:
    done = 0.0
    while done < seconds:
        sim.advance(step)
        done += step


def shut_down(sim, api, node: str, command: str = "shutdown") -> None:
    assert api.nodes(node).status.post(command=command) is None
    run(sim, 60)


# -- shutdown and reboot ------------------------------------------------------------------


def test_shutdown_answers_null_stops_the_guests_in_a_stopall_task_and_powers_the_node_off(sim):
    api = pve(sim)
    assert api.nodes("c").status.post(command="shutdown") is None
    assert power(sim, "c") == "shutting-down"
    sim.advance(3)
    [stopall] = [t for t in api.nodes("c").tasks.get(source="active") if t["type"] == "stopall"]
    assert stopall["user"] == "root@pam" and stopall["id"] == ""
    sim.advance(6)
    log = [line["t"] for line in api.nodes("c").tasks(stopall["upid"]).log.get()]
    assert log == ["Stopping CT 102 (timeout = 180 seconds)", "Stopping VM 101 (timeout = 180 seconds)",
                   "TASK OK"]                          # newest vmid first; the HA guest is the LRM's
    kinds = {t["type"] for t in api.nodes("c").tasks.get() if t["id"] in ("101", "102")}
    assert kinds == {"qmshutdown", "vzshutdown"}
    run(sim, 40)
    assert power(sim, "c") == "off"
    status = {e["name"]: e for e in api.cluster.status.get() if e["type"] == "node"}
    assert status["c"]["online"] == 0
    node = next(n for n in api.cluster.resources.get(type="node") if n["node"] == "c")
    assert node["status"] == "offline"
    with pytest.raises(ResourceException) as err:
        api.nodes("c").status.get()
    assert err.value.status_code == 595 and "No route to host" in str(err.value)


def test_the_state_tells_a_powered_off_node_from_a_lost_one(sim):
    api = pve(sim)
    shut_down(sim, api, "b")
    sim.control("POST", "nodes/d", {"online": False})
    state = sim.control("GET", "state")
    assert state["power"]["b"]["state"] == "off" and state["power"]["d"]["state"] == "lost"
    assert state["nodes"]["b"]["online"] is False and state["nodes"]["d"]["online"] is False
    events = [(e["node"], e["event"]) for e in sim.control("GET", "power")]
    assert events == [("b", "shutdown"), ("b", "off")]


def test_a_reboot_comes_back_after_the_boot_time(sim):
    api = pve(sim)
    api.nodes("b").status.post(command="reboot")
    run(sim, 60)
    assert power(sim, "b") == "booting"
    run(sim, 120)
    assert power(sim, "b") == "online"
    assert api.nodes("b").status.get()["uptime"] < 60
    assert api.nodes("b").qemu(104).status.current.get()["status"] == "stopped"   # not HA: stays down


def test_node_power_needs_sys_powermgmt(sim):
    auditor = pve(sim, AUDIT)
    for call in (lambda: auditor.nodes("b").status.post(command="shutdown"),
                 lambda: auditor.nodes("b").wakeonlan.post()):
        with pytest.raises(ResourceException) as err:
            call()
        assert err.value.status_code == 403 and "Sys.PowerMgmt" in str(err.value)
    with pytest.raises(ResourceException) as err:
        pve(sim).nodes("b").status.post(command="halt")
    assert err.value.status_code == 400


# -- HA and the shutdown policy ---------------------------------------------------------------


def test_a_poweroff_with_the_default_policy_stops_ha_guests_and_recovers_them_after_the_fence_delay(sim):
    api = pve(sim)
    shut_down(sim, api, "c")
    assert power(sim, "c") == "off"
    assert where(api, 100)["node"] == "c"                # not yet: the CRM waits 60 s
    status = api.cluster.ha.status.manager_status.get()
    assert status["lrm_status"].get("c") is None and status["manager_status"]["node_status"]["c"] == "unknown"
    run(sim, 70)
    guest = where(api, 100)
    assert guest["node"] != "c" and guest["status"] == "running" and guest["hastate"] == "started"


def test_a_power_cut_is_fenced_only_once_the_agent_lock_expires(sim):
    api = pve(sim)
    sim.control("POST", "nodes/d", {"power": "off"})
    assert power(sim, "d") == "off"
    run(sim, 75)
    assert node_status(api, "d") == "fence" and service(api, "vm:103")["state"] == "fence"
    assert where(api, 103)["node"] == "d"
    run(sim, 60)                                       # the lock lives 120 s
    assert node_status(api, "d") == "unknown"
    assert where(api, 103)["node"] != "d" and service(api, "vm:103")["state"] == "started"


def test_a_reboot_freezes_ha_guests_and_starts_them_again_on_the_same_node(sim):
    api = pve(sim)
    api.nodes("c").status.post(command="reboot")
    run(sim, 60)
    assert service(api, "vm:100")["state"] == "freeze"
    run(sim, 120)
    assert power(sim, "c") == "online"
    run(sim, 20)
    assert where(api, 100)["node"] == "c" and where(api, 100)["status"] == "running"
    assert service(api, "vm:100")["state"] == "started"


def test_the_migrate_policy_moves_ha_guests_away_before_the_node_goes_and_back_after(sim):
    api = pve(sim)
    api.cluster.options.put(ha="shutdown_policy=migrate")
    api.nodes("c").status.post(command="shutdown")
    run(sim, 30)
    assert where(api, 100)["node"] != "c"              # migrated live, still running
    assert where(api, 100)["status"] == "running"
    run(sim, 60)
    assert power(sim, "c") == "off" and node_status(api, "c") == "maintenance"
    run(sim, 120)
    assert where(api, 100)["node"] != "c"              # never fenced nor recovered
    api.nodes("c").wakeonlan.post()
    run(sim, 180)
    assert where(api, 100)["node"] == "c" and service(api, "vm:100")["state"] == "started"


def test_a_node_in_ha_maintenance_sleeps_without_fencing_and_stays_in_maintenance(sim):
    api = pve(sim)
    sim.control("POST", "nodes/d", {"maintenance": True})
    run(sim, 30)
    assert where(api, 103)["node"] != "d"
    shut_down(sim, api, "d")
    run(sim, 300)
    assert power(sim, "d") == "off" and node_status(api, "d") == "maintenance"
    assert service(api, "vm:103")["state"] == "started"
    api.nodes("d").wakeonlan.post()
    run(sim, 150)
    assert node_status(api, "d") == "maintenance"      # until it is disabled
    lrm = next(e for e in api.cluster.ha.status.current.get() if e["id"] == "lrm:d")
    assert lrm["status"].startswith("d (maintenance mode, watchdog active")
    sim.control("POST", "nodes/d", {"maintenance": False})
    run(sim, 30)
    assert node_status(api, "d") == "online" and where(api, 103)["node"] == "d"


# -- Wake-on-LAN and the node config -----------------------------------------------------------


def test_wakeonlan_answers_the_mac_and_the_node_rejoins_after_its_boot_time(sim):
    api = pve(sim)
    shut_down(sim, api, "b")
    assert api.nodes("b").wakeonlan.post() == "bc:24:11:00:00:02"
    assert power(sim, "b") == "booting"
    run(sim, 115)
    assert {e["name"]: e["online"] for e in api.cluster.status.get() if e["type"] == "node"}["b"] == 0
    run(sim, 10)
    assert {e["name"]: e["online"] for e in api.cluster.status.get() if e["type"] == "node"}["b"] == 1
    assert api.nodes("b").status.get()["uptime"] < 30          # pveproxy answers
    [wol] = [e for e in sim.control("GET", "power") if e["event"] == "wol"]
    assert (wol["sender"], wol["outcome"]) == ("a", "normal")


def test_wakeonlan_errors_are_pves(sim):
    api = pve(sim)
    for node, message in (("e", "No wake on LAN MAC address defined for 'e'!"),
                          ("a", "'a' is local node, cannot wake my self!"),
                          ("zz", "no such cluster node 'zz'")):
        with pytest.raises(ResourceException) as err:
            api.nodes(node).wakeonlan.post()
        assert err.value.status_code == 500 and message in str(err.value)


def test_a_wake_can_fail_or_be_late_and_a_lost_node_never_wakes(sim):
    api = pve(sim)
    shut_down(sim, api, "b")
    sim.control("POST", "nodes/b", {"next_wake": "fail"})
    api.nodes("b").wakeonlan.post()
    run(sim, 600)
    assert power(sim, "b") == "off"
    sim.control("POST", "nodes/b", {"next_wake": "late"})
    api.nodes("b").wakeonlan.post()
    run(sim, 300)
    assert power(sim, "b") == "booting"                # boot 2 m + late 5 m
    run(sim, 150)
    assert power(sim, "b") == "online"
    sim.control("POST", "nodes/d", {"online": False})
    api.nodes("d").wakeonlan.post()                    # the packet goes; nothing listens
    run(sim, 300)
    assert power(sim, "d") == "lost"
    response = requests.post(f"{sim.url}/_sim/nodes/b", json={"next_wake": "soon"},
                             verify=sim.cert, timeout=30)
    assert response.status_code == 400 and "next_wake must be one of" in response.json()["error"]


def test_the_node_config_holds_the_wakeonlan_mac_as_pve_stores_it(sim):
    api = pve(sim)
    config = api.nodes("e").config.get()
    assert set(config) == {"digest"}
    api.nodes("e").config.put(wakeonlan="mac=bc:24:11:00:00:05,broadcast-address=10.0.0.255")
    assert api.nodes("e").config.get(property="wakeonlan") == {
        "wakeonlan": "mac=bc:24:11:00:00:05,broadcast-address=10.0.0.255"}
    assert api.nodes("e").config.get(property="description") == {}
    with pytest.raises(ResourceException) as err:
        api.nodes("e").config.put(description="x", digest=config["digest"])
    assert "detected modified configuration" in str(err.value)
    bad = requests.put(f"{sim.url}/api2/json/nodes/e/config", data={"wakeonlan": "01:00:5e:00:00:01"},
                       headers={"Authorization": f"PVEAPIToken={TOKEN}"}, verify=sim.cert, timeout=30)
    assert bad.status_code == 400
    assert bad.json()["errors"] == {"wakeonlan": "invalid format - mac: invalid format - value does not "
                                                 "look like a valid unicast MAC address"}
    shut_down(sim, api, "e")
    assert api.nodes("e").wakeonlan.post() == "bc:24:11:00:00:05"
    api.nodes("a").config.put(delete="wakeonlan")
    assert "wakeonlan" not in api.nodes("a").config.get()


# -- quorum -------------------------------------------------------------------------------------


def test_corosync_votes_show_in_the_node_list_and_decide_quorum(sim):
    api = pve(sim)
    nodes = {n["node"]: n for n in api.cluster.config.nodes.get()}
    assert nodes["a"] == {"node": "a", "name": "a", "nodeid": "1", "quorum_votes": "1",
                          "ring0_addr": "10.0.0.1"}
    shut_down(sim, api, "b")
    shut_down(sim, api, "c")
    [cluster] = [e for e in api.cluster.status.get() if e["type"] == "cluster"]
    assert cluster["quorate"] == 1                     # 3 of 5 votes
    shut_down(sim, api, "d")
    [cluster] = [e for e in api.cluster.status.get() if e["type"] == "cluster"]
    assert cluster["quorate"] == 0
    state = sim.control("GET", "state")
    assert state["quorate"] is False and state["quorum"] == {"votes": 2, "expected": 5, "quorum": 3}
    with pytest.raises(ResourceException) as err:
        api.nodes("a").config.put(description="x")
    assert err.value.status_code == 500 and "no quorum" in str(err.value)
    api.nodes("d").wakeonlan.post()                    # no /etc/pve write: works without quorum
    run(sim, 600)
    assert sim.control("GET", "state")["quorate"] is True
    # d booted in 2 minutes, but the HA watchdogs allow 60 s without quorum: the CRM master
    # (a) and the nodes running HA guests reset themselves meanwhile
    resets = [e["node"] for e in sim.control("GET", "power") if e["event"] == "watchdog reset"]
    assert resets[0] == "a" and "d" not in resets     # d booted into no quorum: never armed
    assert pve(sim).version.get()["version"]


def test_the_api_of_a_powered_off_local_node_does_not_answer(sim):
    api = pve(sim)
    sim.control("POST", "nodes/a", {"power": "off"})
    with pytest.raises(requests.exceptions.ConnectionError):
        api.version.get()
    assert sim.control("GET", "state")["power"]["a"]["state"] == "off"
    sim.control("POST", "nodes/a", {"power": "on"})
    run(sim, 125)
    assert pve(sim).version.get()["version"]
    assert [r["status"] for r in sim.requests_log() if r["path"] == "/version"][:1] == [0]
