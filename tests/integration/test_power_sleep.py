"""``keel power sleep NODE`` and ``keel power wake NODE`` against ``keel sim`` on the power
cluster, its clock running 60 times faster than real time: migrations through the
executor, HA maintenance through the command Keel runs for it (here one that asks the
simulator, as ``ha-manager crm-command node-maintenance`` asks the CRM), Ceph's noout,
the shutdown, Wake-on-LAN, and a node that never wakes."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from conftest import BACKEND, start_sim
from keel.cli import Env, main
from keel.errors import ExitStatus

POWER = BACKEND / "keel" / "sim" / "scenarios" / "power.yaml"
TOKEN = "keel@pve!keel=19191919-0000-4000-8000-000000000019"

# Stands in for `ha-manager crm-command node-maintenance enable|disable NODE` on a PVE node:
# an `ha-manager` first on PATH that asks the simulator (Keel's command is fixed, not configurable).
HA_COMMAND = '''
import json, ssl, sys, urllib.request
url, cert = URL, CERT
assert sys.argv[1:3] == ["crm-command", "node-maintenance"], sys.argv
action, node = sys.argv[3:5]
request = urllib.request.Request(f"{url}/_sim/nodes/{node}", method="POST",
                                 data=json.dumps({"maintenance": action == "enable"}).encode(),
                                 headers={"Content-Type": "application/json"})
urllib.request.urlopen(request, context=ssl.create_default_context(cafile=cert)).read()
'''


@pytest.fixture
def cluster(tmp_path):
    sim = start_sim(POWER, tmp_path / "sim", clock_factor=60)
    for n in ("pve5", "pve6", "pve7", "pve8"):
        sim.control("POST", f"nodes/{n}", {"next_wake": "normal"})     # no late boot by chance
    yield sim
    sim.stop()


def fake_ha_manager(sim, folder: Path) -> str:
    """Writes the fake ``ha-manager`` for ``sim`` into ``folder``: the PATH to use, it first."""
    folder.mkdir(exist_ok=True)
    script = folder / "ha-manager"
    script.write_text(f"#!{sys.executable}\nURL, CERT = {sim.url!r}, {str(sim.cert)!r}\n" + HA_COMMAND)
    script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(autouse=True)
def ha_manager(cluster, tmp_path, monkeypatch):
    """A fake ``ha-manager`` first on PATH, for the simulator."""
    monkeypatch.setenv("PATH", fake_ha_manager(cluster, tmp_path / "bin"))


def keel(sim, tmp_path: Path, *argv: str, **power):
    settings = {"mode": "recommend", "nodes": ["pve4", "pve5", "pve6", "pve7", "pve8"], "wake_timeout": "20s",
                "wake_test_max_age": "off"}                  # the wake test: test_power_test.py
    settings.update(power)
    path = tmp_path / "keel.yaml"
    path.write_text(yaml.safe_dump({"balancing": {"guests": ["vm", "ct"], "power": settings}}))
    out, err = io.StringIO(), io.StringIO()
    environ = {"KEEL_PVE_URL": sim.url, "KEEL_PVE_TOKEN": TOKEN, "KEEL_PVE_CA_FILE": sim.cert}
    status = main(["power", *argv, "--config", str(path), "--store", str(tmp_path / "keel.db")],
                  Env(stdout=out, stderr=err, environ=environ))
    return status, out.getvalue(), err.getvalue()


def state(sim):
    return sim.control("GET", "state")


def node_power(sim, node):
    return state(sim)["power"][node]["state"]


def ha_maintenance(sim, node):
    manager = sim.client(TOKEN).get("/cluster/ha/status/manager_status")
    return manager["manager_status"]["node_status"][node] == "maintenance"


def test_a_node_sleeps_and_wakes_and_nothing_is_left_behind(cluster, tmp_path):
    status, out, err = keel(cluster, tmp_path, "sleep", "pve7", "--yes")
    assert status == 0, out + err
    assert "pve7: asleep" in out
    assert node_power(cluster, "pve7") == "off"
    guests = cluster.client(TOKEN).get("/cluster/resources", type="vm")
    assert not [g for g in guests if g["node"] == "pve7"]                 # every guest left first
    assert all(g["status"] == "running" for g in guests if not g.get("template"))
    assert ha_maintenance(cluster, "pve7")
    events = [(e["node"], e["event"]) for e in cluster.control("GET", "power")]
    assert ("pve7", "shutdown") in events and ("pve7", "off") in events
    cluster.advance(300)                                                  # the CRM had time to fence
    manager = cluster.client(TOKEN).get("/cluster/ha/status/manager_status")["manager_status"]
    assert {s["state"] for s in manager["service_status"].values()} == {"started"}   # none fenced
    status, out, _ = keel(cluster, tmp_path, "status", "--json")
    data = json.loads(out)
    assert data["asleep"] == ["pve7"]
    assert next(n for n in data["nodes"] if n["node"] == "pve7")["keel_state"] == "asleep"
    assert [e["event"] for e in data["events"]] == ["emptying", "ha-maintenance", "asleep"]

    status, out, err = keel(cluster, tmp_path, "wake", "pve7")
    assert status == 0, out + err
    assert "Wake-on-LAN sent to bc:24:11:19:00:07" in out and "pve7: awake" in out
    assert node_power(cluster, "pve7") == "online"
    assert not ha_maintenance(cluster, "pve7")


def test_a_ceph_node_sleeps_with_noout_and_wakes_without_it(cluster, tmp_path):
    client = cluster.client(TOKEN)
    status, out, err = keel(cluster, tmp_path, "sleep", "pve4", "--yes")
    assert status == 0, out + err
    assert "Ceph's noout set" in out and client.get("/cluster/ceph/flags/noout") == 1
    status, out, err = keel(cluster, tmp_path, "wake", "pve4")
    assert status == 0, out + err
    assert "Ceph's noout cleared" in out and client.get("/cluster/ceph/flags/noout") == 0
    assert not ha_maintenance(cluster, "pve4")


def test_a_node_that_never_wakes_is_reported_and_left_in_maintenance(cluster, tmp_path):
    assert keel(cluster, tmp_path, "sleep", "pve7", "--yes")[0] == 0
    cluster.control("POST", "nodes/pve7", {"next_wake": "fail"})
    status, out, err = keel(cluster, tmp_path, "wake", "pve7", wake_timeout="5s")
    assert status == ExitStatus.TASK_FAILED
    assert "pve7 did not come back within 5 s of its Wake-on-LAN packet" in err
    assert node_power(cluster, "pve7") == "off"
    assert ha_maintenance(cluster, "pve7")              # off: the HA manager must not fence it
    from keel.store import Store
    record = Store(tmp_path / "keel.db").get("power_nodes")["pve7"]
    assert record["state"] == "did not wake" and record["ha_maintenance"]
    status, out, _ = keel(cluster, tmp_path, "status")
    assert any(line.startswith("pve7") and "(did not wake)" in line for line in out.splitlines())
    # someone presses its power button; keel power wake then finishes the job
    cluster.control("POST", "nodes/pve7", {"power": "on"})
    status, out, err = keel(cluster, tmp_path, "wake", "pve7")
    assert status == 0, out + err
    assert not ha_maintenance(cluster, "pve7")


def test_a_sleep_the_gates_refuse_changes_nothing(cluster, tmp_path):
    status, out, err = keel(cluster, tmp_path, "sleep", "pve8", "--yes")
    assert status == ExitStatus.BUSY
    assert "pve8 stays awake: guests stay: 1 running guest cannot leave it: build-cache (250)" in err
    assert node_power(cluster, "pve8") == "online" and not ha_maintenance(cluster, "pve8")
    status, _, err = keel(cluster, tmp_path, "sleep", "pve7", "--yes", mode=False)
    assert status == ExitStatus.INVALID and "mode is off" in err


def test_a_guest_moved_away_by_someone_else_meanwhile_does_not_keep_the_node_awake(cluster, tmp_path):
    """The plan was made; before its move, the guest left the node another way (the
    balancer's own job, HA, an admin): the node is empty all the same, so it sleeps."""
    from keel.balance.power import plan_sleep
    from keel.balance.power_exec import PowerRun
    from keel.balance.settings import parse
    from keel.pve import power as pve_power
    from keel.pve import snapshot
    from keel.store import Store
    client = cluster.client(TOKEN)
    settings = parse({"guests": ["vm", "ct"], "power": {"mode": "recommend", "nodes": ["pve7"],
                                                         "wake_timeout": "20s", "wake_test_max_age": "off"}})
    snap = snapshot.collect(client)
    plan = plan_sleep(snap, pve_power.read_facts(client, snap), settings, only="pve7")
    assert plan.sleep == ("pve7",) and len(plan.moves) >= 2
    gone = next(m for m in plan.moves if m.type == "qemu" and not m.ha_sid)
    elsewhere = next(n for n in ("pve5", "pve6", "pve8") if n != gone.target)
    upid = client.post(f"/nodes/pve7/qemu/{gone.vmid}/migrate", target=elsewhere, online=1)
    for _ in range(600):
        if not [g for g in snapshot.collect(client).guests_on("pve7") if g.vmid == gone.vmid]:
            break
        cluster.advance(5)
    said, events = [], []
    run = PowerRun(client, settings, Store(tmp_path / "keel.db"), "test", say=said.append, on_event=events.append,
                   poll_s=0.05)
    run.sleep_node(plan)
    assert node_power(cluster, "pve7") == "off", said
    guests = client.get("/cluster/resources", type="vm")
    assert next(g for g in guests if g["vmid"] == gone.vmid)["node"] == elsewhere
    assert not [g for g in guests if g["node"] == "pve7" and g["status"] == "running"]
    moot = [e for e in events if e.get("vmid") == gone.vmid and e["event"] != "start"]
    assert [e["event"] for e in moot] == ["not_started"], events
    assert f"already on {elsewhere}" in moot[0]["error"], moot
