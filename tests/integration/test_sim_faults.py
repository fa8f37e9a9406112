"""Fault injection and the request log, through the /_sim control API."""

from __future__ import annotations

import pytest
import requests
from proxmoxer import ResourceException

from conftest import DEMO_TOKEN

API = "/api2/json"
HEADERS = {"Authorization": f"PVEAPIToken={DEMO_TOKEN}"}


def get(sim, path: str, **params) -> requests.Response:
    return requests.get(f"{sim.url}{API}{path}", params=params, headers=HEADERS, verify=sim.cert,
                        timeout=30)


def post(sim, path: str, **data) -> requests.Response:
    return requests.post(f"{sim.url}{API}{path}", data=data, headers=HEADERS, verify=sim.cert,
                         timeout=30)


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- endpoint faults -------------------------------------------------------------------


def test_endpoint_fault_with_count_fails_that_many_times_then_answers(sim):
    sim.control("POST", "faults", {"endpoints": [
        {"path": "/cluster/resources", "error_rate": 1, "count": 2, "status": 503,
         "message": "service busy"}]})
    answers = [get(sim, "/cluster/resources") for _ in range(3)]
    assert [a.status_code for a in answers] == [503, 503, 200]
    assert answers[0].reason == "service busy"
    assert answers[0].json() == {"data": None, "message": "service busy\n"}
    assert len(answers[2].json()["data"]) > 0


def test_endpoint_fault_matches_a_glob_and_a_method_only(sim):
    sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/*/qemu/*/status/*", "method": "POST", "error_rate": 1}]})
    assert post(sim, "/nodes/pve3/qemu/121/status/start").status_code == 500
    assert post(sim, "/nodes/pve3/qemu/121/status/start").reason == "simulated failure"
    assert get(sim, "/nodes/pve3/qemu/121/status/current").status_code == 200
    assert get(sim, "/cluster/resources").status_code == 200


def test_endpoint_fault_without_count_keeps_failing_until_cleared(sim):
    sim.control("POST", "faults", {"endpoints": [{"path": "/version", "error_rate": 1}]})
    assert [get(sim, "/version").status_code for _ in range(4)] == [500] * 4
    sim.control("DELETE", "faults")
    assert get(sim, "/version").status_code == 200


def test_proxmoxer_sees_an_injected_fault_as_a_resource_exception(sim):
    sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/*/qemu/*/migrate", "method": "POST", "error_rate": 1, "count": 1,
         "message": "migration refused"}]})
    pve = sim.proxmox()
    with pytest.raises(ResourceException) as err:
        pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)
    assert (err.value.status_code, err.value.content) == (500, "migration refused")
    assert ":qmigrate:103:" in pve.nodes("pve1").qemu(103).migrate.post(target="pve2", online=1)


def test_endpoint_latency_still_answers(sim):
    sim.control("POST", "faults", {"endpoints": [{"path": "/version", "latency": 0.05}]})
    response = get(sim, "/version")
    assert response.status_code == 200 and response.json()["data"]["version"] == "9.1.4"


def test_bad_fault_definition_is_refused_naming_the_key(sim):
    response = requests.post(f"{sim.url}/_sim/faults", json={"endpoints": [{"path": "/x", "rate": 1}]},
                             verify=sim.cert, timeout=30)
    assert response.status_code == 400
    assert "endpoints[0].rate" in response.json()["error"]


# -- quorum ----------------------------------------------------------------------------


def test_without_quorum_writes_fail_and_reads_work(sim):
    assert sim.control("POST", "quorum", {"quorate": False}) == {"quorate": False}
    pve = sim.proxmox()
    assert pve.cluster.resources.get(type="vm")
    status = {e["id"]: e for e in pve.cluster.status.get()}
    assert status["cluster"]["quorate"] == 0
    for call in (lambda: pve.nodes("pve3").qemu(121).status.start.post(),
                 lambda: pve.cluster.options.put(description="x"),
                 lambda: pve.nodes("pve1").qemu(103).config.put(description="x")):
        with pytest.raises(ResourceException) as err:
            call()
        assert (err.value.status_code, err.value.content) == (500, "cluster not ready - no quorum?")
    sim.control("POST", "quorum", {"quorate": True})
    assert pve.nodes("pve3").qemu(121).status.start.post().startswith("UPID:")


def test_without_quorum_a_login_still_works(sim):
    sim.control("POST", "quorum", {"quorate": False})
    assert sim.proxmox(user="root@pam", password="keel-demo").version.get()["version"] == "9.1.4"


def test_ha_status_shows_the_lost_quorum(sim):
    sim.control("POST", "quorum", {"quorate": False})
    [quorum] = [e for e in sim.proxmox().cluster.ha.status.current.get() if e["id"] == "quorum"]
    assert quorum["quorate"] == 0 and quorum["status"] == "No quorum on node 'pve1'!"


# -- a lost node -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/nodes/pve4/status", "/nodes/pve4/qemu", "/nodes/pve4/tasks",
                                  "/nodes/pve4/storage", "/nodes/pve4/qemu/123/config"])
def test_calls_for_a_lost_node_answer_595(sim, path):
    sim.control("POST", "nodes/pve4", {"online": False})
    response = requests.get(f"{sim.url}{API}{path}", headers=HEADERS, verify=sim.cert, timeout=30)
    assert response.status_code == 595
    assert response.reason == "No route to host"


def test_cluster_wide_reads_still_work_and_show_the_node_offline(sim):
    sim.control("POST", "nodes/pve4", {"online": False})
    pve = sim.proxmox()
    nodes = {n["node"]: n for n in pve.nodes.get()}
    assert nodes["pve4"]["status"] == "offline" and "cpu" not in nodes["pve4"]
    guests = {g["vmid"]: g for g in pve.cluster.resources.get(type="vm")}
    assert guests[123]["status"] == "unknown" and guests[123]["node"] == "pve4"
    storage = [s for s in pve.cluster.resources.get(type="storage") if s["node"] == "pve4"]
    assert storage and all(s["status"] == "unknown" for s in storage)


def test_a_node_that_comes_back_answers_again_with_its_non_ha_guests_stopped(sim):
    sim.control("POST", "nodes/pve4", {"online": False})
    sim.advance(30)
    sim.control("POST", "nodes/pve4", {"online": True})
    pve = sim.proxmox()
    assert pve.nodes("pve4").status.get()["uptime"] == 0
    assert pve.nodes("pve4").qemu(123).status.current.get()["status"] == "stopped"


def test_a_node_lost_during_a_migration_to_it_fails_the_migration(sim):
    pve = sim.proxmox()
    upid = pve.nodes("pve1").qemu(103).migrate.post(target="pve4", online=1)
    sim.advance(5)
    sim.control("POST", "nodes/pve4", {"online": False})
    status = pve.nodes("pve1").tasks(upid).status.get()
    assert status["status"] == "stopped" and status["exitstatus"] != "OK"
    assert next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 103)["node"] == "pve1"
    assert "lock" not in pve.nodes("pve1").qemu(103).config.get()


def test_unknown_node_in_the_control_api_is_404(sim):
    response = requests.post(f"{sim.url}/_sim/nodes/pve9", json={"online": False}, verify=sim.cert,
                             timeout=30)
    assert response.status_code == 404


# -- the request log ---------------------------------------------------------------------


def test_request_log_records_method_path_user_and_status(sim):
    sim.control("DELETE", "requests")
    get(sim, "/version")
    post(sim, "/nodes/pve1/qemu/103/migrate", target="pve1")
    requests.get(f"{sim.url}{API}/cluster/status", verify=sim.cert, timeout=30)
    log = sim.requests_log()
    assert [(r["method"], r["path"], r["user"], r["status"]) for r in log] == [
        ("GET", "/version", "keel@pve!keel", 200),
        ("POST", "/nodes/pve1/qemu/103/migrate", "keel@pve!keel", 400),
        ("GET", "/cluster/status", None, 401),
    ]
    assert [r["seq"] for r in log] == sorted(r["seq"] for r in log)
    assert all(isinstance(r["time"], (int, float)) for r in log)


def test_request_log_since_returns_only_newer_entries(sim):
    get(sim, "/version")
    last = sim.requests_log()[-1]["seq"]
    get(sim, "/cluster/resources")
    get(sim, "/nodes")
    newer = sim.requests_log(since=last)
    assert [r["path"] for r in newer] == ["/cluster/resources", "/nodes"]
    assert sim.requests_log(since=newer[-1]["seq"]) == []


def test_request_log_of_a_ticket_session_names_the_user(sim):
    sim.control("DELETE", "requests")
    sim.proxmox(user="auditor@pve", password="keel-demo").nodes.get()
    log = sim.requests_log()
    assert [(r["method"], r["path"], r["user"]) for r in log] == [
        ("POST", "/access/ticket", None), ("GET", "/nodes", "auditor@pve")]


def test_control_state_reports_time_nodes_and_counts(sim):
    state = sim.control("GET", "state")
    assert state["clock_factor"] == 0 and state["quorate"] is True
    assert state["nodes"]["pve1"] == {"online": True, "maintenance": False, "guests": 13}
    assert state["guests"] == 27
    before = state["time"]
    assert sim.advance(90) == before + 90


def test_reset_puts_the_cluster_back_to_the_scenario_start(sim):
    start = sim.control("GET", "state")["time"]
    pve = sim.proxmox()
    pve.nodes("pve3").qemu(121).status.start.post()
    sim.control("POST", "faults", {"endpoints": [{"path": "/nodes", "error_rate": 1, "count": 1}]})
    sim.control("POST", "nodes/pve5", {"online": False})
    sim.advance(600)
    state = sim.control("POST", "reset")
    assert state["time"] == start and state["running_tasks"] == 0 and state["requests"] == 0
    assert state["nodes"]["pve5"]["online"] is True
    pve = sim.proxmox()
    assert pve.nodes("pve3").qemu(121).status.current.get()["status"] == "stopped"
    assert len(pve.nodes.get()) == 5     # the fault is gone too
    assert pve.cluster.tasks.get() == []


# -- changing load and the clock ----------------------------------------------------------


def test_control_api_changes_a_guests_load_at_once(sim):
    pve = sim.proxmox()
    before = next(n for n in pve.cluster.resources.get(type="node") if n["node"] == "pve3")
    assert sim.control("POST", "guests/119", {"cpu": 1.0, "mem_used": "2GiB"}) == \
        {"vmid": 119, "cpu": 1.0, "mem_used": 2 * 1024**3}
    guest = next(g for g in pve.cluster.resources.get(type="vm") if g["vmid"] == 119)
    assert (guest["cpu"], guest["mem"]) == (1.0, 2 * 1024**3)
    after = next(n for n in pve.cluster.resources.get(type="node") if n["node"] == "pve3")
    assert after["mem"] == before["mem"] + 1024**3           # 1 GiB more than before
    assert after["cpu"] * after["maxcpu"] == pytest.approx(before["cpu"] * before["maxcpu"] + 2 * 0.92)


@pytest.mark.parametrize("mem_used, bytes_", [
    ("50%", 1024**3), (0.25, 512 * 1024**2), (1, 2 * 1024**3), ("1GiB", 1024**3), ("9GiB", 2 * 1024**3),
])
def test_control_api_mem_used_is_a_fraction_a_percentage_or_a_size(sim, mem_used, bytes_):
    # VM 119 has 2 GiB; a number up to 1 is a share of it, never one byte.
    assert sim.control("POST", "guests/119", {"mem_used": mem_used})["mem_used"] == bytes_


@pytest.mark.parametrize("body, status", [
    ({"profile": "no-such-profile"}, 404),
    ({"cpu": "lots"}, 400),
    ({"mem_used": "120%"}, 400),
])
def test_control_api_refuses_bad_load_changes(sim, body, status):
    response = requests.post(f"{sim.url}/_sim/guests/119", json=body, verify=sim.cert, timeout=30)
    assert response.status_code == status


def test_clock_factor_can_be_changed_and_time_never_goes_back(sim):
    start = sim.control("GET", "state")["time"]
    assert sim.control("POST", "clock", {"factor": 60})["factor"] == 60
    later = sim.control("GET", "state")["time"]
    assert later >= start
    assert sim.control("POST", "clock", {"factor": 0})["factor"] == 0
    response = requests.post(f"{sim.url}/_sim/clock", json={"advance": -5}, verify=sim.cert, timeout=30)
    assert response.status_code == 400
