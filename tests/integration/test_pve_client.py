"""Keel's PVE client against a real simulator: auth, TLS, error mapping, retries, tasks."""

from __future__ import annotations

import socket

import pytest

from conftest import DEMO_TOKEN
from keel.errors import (AuthError, BusyError, InvalidError, NotFoundError, PermissionDeniedError,
                         TaskFailedError, UnavailableError)
from keel.pve.client import PveClient, Target
from keel.pve.tasks import task_log, wait_task

SECRET = DEMO_TOKEN.split("=", 1)[1]


def test_token_login_and_call_counting(shared_sim):
    client = shared_sim.client()
    assert client.get("/version")["release"] == "9.1"
    assert client.get("/cluster/resources", type="node")[0]["type"] == "node"
    assert client.calls == 2


def test_password_login_counts_the_ticket_request(shared_sim):
    target = Target.from_url(shared_sim.url, verify=shared_sim.cert, user="root@pam",
                             password="keel-demo")
    client = PveClient(target)
    assert client.get("/version")["version"] == "9.1.4"
    assert client.calls == 2


def test_wrong_password_is_an_auth_error_without_the_password(shared_sim):
    target = Target.from_url(shared_sim.url, verify=shared_sim.cert, user="root@pam",
                             password="hunter2-wrong")
    with pytest.raises(AuthError) as caught:
        PveClient(target)
    assert "root@pam" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_wrong_token_secret_is_an_auth_error_without_the_secret(shared_sim):
    client = shared_sim.client(token="keel@pve!keel=00000000-0000-0000-0000-000000000000")
    with pytest.raises(AuthError) as caught:
        client.get("/version/../cluster/status")
    assert "00000000-0000" not in str(caught.value)
    assert SECRET not in repr(client.target)


def test_tls_is_verified_by_default(shared_sim):
    target = Target.from_url(shared_sim.url).with_token(DEMO_TOKEN)
    client = PveClient(target, sleep=lambda s: None)
    with pytest.raises(UnavailableError, match="TLS verification"):
        client.get("/version")


def test_tls_verification_can_be_turned_off_for_test_clusters(shared_sim):
    target = Target.from_url(shared_sim.url, verify=False).with_token(DEMO_TOKEN)
    assert PveClient(target).get("/version")["version"] == "9.1.4"


def test_unreachable_pve_is_retried_for_reads_then_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps: list[float] = []
    target = Target("127.0.0.1", port, verify=False).with_token(DEMO_TOKEN)
    client = PveClient(target, sleep=sleeps.append)
    with pytest.raises(UnavailableError, match="connection refused"):
        client.get("/version")
    assert client.calls == 4
    assert sleeps == [0.5, 1.5, 4.0]


def test_every_call_has_the_clients_timeout(sim):
    """proxmoxer 1.2 (Debian 12) applies its timeout to the login only: a PVE that stopped
    answering held a call for ever there."""
    sim.control("POST", "faults", {"endpoints": [{"path": "/nodes/pve3/qemu/121/status/start",
                                                  "latency": "3s"}]})
    target = Target.from_url(sim.url, verify=sim.cert, timeout_s=1).with_token(DEMO_TOKEN)
    with PveClient(target) as client:
        with pytest.raises(UnavailableError, match="timed out"):
            client.post("/nodes/pve3/qemu/121/status/start")


def test_the_fence_stops_a_write_before_it_leaves(sim):
    from keel.errors import FencedError
    refused = []

    def fence(what):
        refused.append(what)
        raise FencedError(f"not the leader: {what} not made")
    seq = (sim.requests_log() or [{"seq": 0}])[-1]["seq"]
    target = Target.from_url(sim.url, verify=sim.cert).with_token(DEMO_TOKEN)
    with PveClient(target, fence=fence) as client:
        assert client.get("/version")["version"]                 # reads are never fenced
        with pytest.raises(FencedError):
            client.post("/nodes/pve3/qemu/121/status/start")
    assert refused == ["POST /nodes/pve3/qemu/121/status/start"]
    assert [r["method"] for r in sim.requests_log(seq)] == ["GET"]


def test_a_passing_595_on_a_read_is_retried(sim):
    sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/pve1/status", "error_rate": 1, "status": 595, "message": "No route to host",
         "count": 2}]})
    client = sim.client()
    assert client.get("/nodes/pve1/status")["cpuinfo"]["cpus"] == 64
    assert client.calls == 3


def test_writes_are_never_retried(sim):
    sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/pve3/qemu/121/status/start", "error_rate": 1, "status": 595,
         "message": "No route to host", "count": 1}]})
    client = sim.client()
    with pytest.raises(UnavailableError, match="No route to host"):
        client.post("/nodes/pve3/qemu/121/status/start")
    assert client.calls == 1
    assert client.post("/nodes/pve3/qemu/121/status/start").startswith("UPID:pve3:")


@pytest.mark.parametrize("method,path,params,error,text", [
    ("get", "/cluster/resources", {"type": "vms"}, InvalidError, "Parameter verification failed"),
    ("get", "/nodes/pve1/qemu/999/config", {}, NotFoundError, "does not exist"),
    ("get", "/nodes/pve1/frobnicate", {}, NotFoundError, "not implemented"),
    ("post", "/nodes/pve1/qemu/100/migrate", {"target": "pve1"}, InvalidError, "Parameter"),
])
def test_pve_errors_become_keel_errors_with_pves_message(shared_sim, method, path, params, error, text):
    client = shared_sim.client()
    with pytest.raises(error, match=text):
        getattr(client, method)(path, **params)


def test_parameter_errors_keep_pves_per_parameter_messages(shared_sim):
    with pytest.raises(InvalidError) as caught:
        shared_sim.client().post("/nodes/pve1/qemu/100/migrate", target="pve1")
    assert caught.value.errors == {"target": "target is local node."}


def test_missing_privilege_is_permission_denied(shared_sim):
    target = Target.from_url(shared_sim.url, verify=shared_sim.cert, user="auditor@pve",
                             password="keel-demo")
    client = PveClient(target)
    assert client.get("/cluster/resources")
    with pytest.raises(PermissionDeniedError, match=r"/vms/121, VM.PowerMgmt"):
        client.post("/nodes/pve3/qemu/121/status/start")


def test_a_locked_guest_is_busy(sim):
    client = sim.client()
    client.post("/nodes/pve1/qemu/104/migrate", target="pve3", online=1)
    with pytest.raises(BusyError, match="locked"):
        client.put("/nodes/pve1/qemu/104/config", description="x")


def test_wait_task_follows_a_task_in_simulated_time(sim):
    client = sim.client()
    upid = client.post("/nodes/pve3/qemu/121/status/start")
    polls = []
    result = wait_task(client, upid, poll_s=0.5, sleep=sim.advance, on_poll=polls.append)
    assert result.ok and result.exitstatus == "OK"
    assert polls[0]["status"] == "running" and polls[-1]["status"] == "stopped"
    assert client.get("/nodes/pve3/qemu/121/status/current")["status"] == "running"


def test_wait_task_raises_with_the_exit_status_of_a_failed_task(sim):
    sim.control("POST", "faults", {"migrations": [{"vmid": 114, "message": "simulated link failure"}]})
    client = sim.client()
    upid = client.post("/nodes/pve2/qemu/114/migrate", target="pve3", online=1)
    with pytest.raises(TaskFailedError) as caught:
        wait_task(client, upid, sleep=sim.advance)
    assert "simulated link failure" in caught.value.exitstatus
    assert caught.value.upid == upid
    assert any("simulated link failure" in line for line in task_log(client, upid))


def test_wait_task_times_out_as_unavailable(sim):
    client = sim.client()
    upid = client.post("/nodes/pve1/qemu/103/migrate", target="pve3", online=1)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds          # time passes for the waiter, not for the cluster

    with pytest.raises(UnavailableError, match="still running"):
        wait_task(client, upid, timeout_s=5, poll_s=1, clock=lambda: now[0], sleep=sleep)
