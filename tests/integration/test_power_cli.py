"""``keel power status`` and ``keel power plan`` against ``keel sim`` on the power bench's
cluster (sim/scenarios/power.yaml: eight nodes, Ceph on four, HA, Wake-on-LAN), over real
HTTPS through Keel's PVE client."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from conftest import BACKEND
from keel.cli import Env, main

POWER = BACKEND / "keel" / "sim" / "scenarios" / "power.yaml"
TOKEN = "keel@pve!keel=19191919-0000-4000-8000-000000000019"
COMPUTE = ["pve5", "pve6", "pve7", "pve8"]
CT = {"guests": ["vm", "ct"]}


@pytest.fixture(scope="module")
def power_sim(tmp_path_factory):
    from conftest import start_sim
    sim = start_sim(POWER, tmp_path_factory.mktemp("power-sim"))
    yield sim
    sim.stop()


@pytest.fixture
def cluster(power_sim):
    """The power cluster as its scenario starts, for each test."""
    power_sim.control("POST", "reset")
    return power_sim


def keel(sim, tmp_path: Path, *argv: str, power: dict | None = None, config: dict | None = None,
         balancing: dict | None = None):
    power = {"wake_test_max_age": "off", **(power or {})}       # the wake test: test_power_test.py
    data = {"balancing": {"power": {"mode": "recommend", "nodes": COMPUTE, **power}, **(balancing or {})}}
    data.update(config or {})
    path = tmp_path / "keel.yaml"
    path.write_text(yaml.safe_dump(data))
    out, err = io.StringIO(), io.StringIO()
    environ = {"KEEL_PVE_URL": sim.url, "KEEL_PVE_TOKEN": TOKEN, "KEEL_PVE_CA_FILE": sim.cert}
    status = main(["power", *argv, "--config", str(path), "--store", str(tmp_path / "keel.db")],
                  Env(stdout=out, stderr=err, environ=environ))
    return status, out.getvalue(), err.getvalue()


def plan_json(sim, tmp_path, *argv, **kw):
    status, out, err = keel(sim, tmp_path, "plan", "--json", *argv, **kw)
    assert status == 0, err
    return json.loads(out)


def test_status_shows_every_node_and_what_its_sleep_depends_on(cluster, tmp_path):
    status, out, err = keel(cluster, tmp_path, "status", "--json")
    assert status == 0, err
    data = json.loads(out)
    nodes = {n["node"]: n for n in data["nodes"]}
    assert set(nodes) == {f"pve{i}" for i in range(1, 9)}
    assert all(n["power"] == "awake" for n in nodes.values())
    assert [n for n, v in nodes.items() if v["may_sleep"]] == COMPUTE
    assert nodes["pve1"]["api_node"] and nodes["pve1"]["ceph_mon"] and nodes["pve1"]["ceph_osds"] == 2
    assert nodes["pve5"]["wakeonlan"] == "bc:24:11:19:00:05" and nodes["pve5"]["ceph_osds"] == 0
    assert nodes["pve8"]["lrm_mode"] == "active" and nodes["pve8"]["votes"] == 1
    assert data["quorum"] == {"expected_votes": 8, "awake_votes": 8, "quorum": 5, "quorate": True,
                              "allow_bare_majority": False}
    assert data["ceph"]["health"] == "HEALTH_OK" and data["asleep"] == [] and data["saving_watts"] == 0
    status, text, _ = keel(cluster, tmp_path, "status")
    assert status == 0 and text.startswith("Power saving: recommend; 4 nodes may sleep (pve5, pve6, pve7, pve8)")
    assert "Quorum: 8 of 8 corosync votes awake, quorum needs 5" in text
    assert any(line.startswith("pve1 ") and "no (API)" in line for line in text.splitlines())


def test_the_plan_empties_the_cheapest_nodes_and_names_why_the_others_stay(cluster, tmp_path):
    data = plan_json(cluster, tmp_path)
    assert data["verdict"] == "SLEEP" and data["mode"] == "recommend"
    assert data["sleep"] == ["pve7", "pve6"]                       # cheapest first: 18 GiB, then 22
    assert data["costs_gib"]["pve7"] < data["costs_gib"]["pve6"] < data["costs_gib"]["pve5"]
    moved = {m["vmid"]: m for m in data["moves"]}
    assert {m["from"] for m in moved.values()} == {"pve6", "pve7"}
    assert all(m["to"] not in ("pve6", "pve7") and m["reason"] == "maintenance" for m in moved.values())
    assert {211, 212} <= set(moved)                                 # HA guests go too, as HA moves
    assert moved[212]["ha_sid"] == "vm:212"
    refused = {r["node"]: r for r in data["refusals"]}
    assert refused["pve8"]["gate"] == "guests stay" and "build-cache (250): local disks" in refused["pve8"]["detail"]
    assert refused["pve5"]["gate"] == "quorum" and "bare majority" in refused["pve5"]["detail"]
    assert [(s["action"], s["node"]) for s in data["steps"]] == [
        ("migrate", "pve7"), ("migrate", "pve6"), ("ha-maintenance", "pve7"), ("shutdown", "pve7"),
        ("ha-maintenance", "pve6"), ("shutdown", "pve6")]
    assert {f["node"] for f in data["forecast"]} == {"pve1", "pve2", "pve3", "pve4", "pve5", "pve8"}
    assert all(f["cpu"] <= 0.75 and f["memory"] <= 0.80 for f in data["forecast"])
    assert data["summary"]["saving_watts"] == 300
    status, text, _ = keel(cluster, tmp_path, "plan")
    assert status == 0 and text.startswith("Power plan: SLEEP: pve6 and pve7 can sleep: 8 moves")
    assert "Staying awake" in text and "Nothing is done: this is a dry run." in text


def test_a_bare_majority_allowed_lets_a_third_node_sleep(cluster, tmp_path):
    data = plan_json(cluster, tmp_path, power={"allow_bare_majority": True})
    assert data["sleep"] == ["pve7", "pve6", "pve5"]
    assert {r["node"]: r["gate"] for r in data["refusals"]} == {"pve8": "guests stay"}


def test_nothing_sleeps_in_a_never_sleep_window_or_with_mode_off_it_is_a_preview(cluster, tmp_path):
    data = plan_json(cluster, tmp_path, power={"never_sleep": "00:00-24:00"})
    assert data["verdict"] == "ALL AWAKE" and data["refusals"][0]["gate"] == "schedule"
    data = plan_json(cluster, tmp_path, power={"mode": False})      # `mode: off` as YAML reads it
    assert data["verdict"] == "SLEEP" and any("mode is off" in n for n in data["notices"])


def test_a_node_without_a_wake_on_lan_mac_stays_awake(cluster, tmp_path):
    cluster.client(TOKEN).put("/nodes/pve7/config", delete="wakeonlan")
    data = plan_json(cluster, tmp_path)
    refused = {r["node"]: r for r in data["refusals"]}
    assert refused["pve7"]["gate"] == "Wake-on-LAN" and "pvenode config set --wakeonlan" in refused["pve7"]["detail"]
    assert "pve7" not in data["sleep"] and data["sleep"][0] == "pve6"


def test_the_node_holding_keels_lease_stays_awake(cluster, tmp_path):
    lock = tmp_path / "keel-leader"
    lock.mkdir()
    (lock / "owner").write_text("pve7:4242:0a1b2c3d\n")
    data = plan_json(cluster, tmp_path, config={"engine": {"lock": str(lock)}})
    assert {r["node"]: r["gate"] for r in data["refusals"]}["pve7"] == "leader lease"


def test_a_node_that_is_off_shows_asleep_and_the_saving(cluster, tmp_path):
    cluster.control("POST", "nodes/pve7", {"power": "off"})
    status, out, _ = keel(cluster, tmp_path, "status", "--json")
    data = json.loads(out)
    assert data["asleep"] == ["pve7"] and data["saving_watts"] == 150
    assert data["quorum"]["awake_votes"] == 7
    plan = plan_json(cluster, tmp_path)
    refused = {r["node"]: r["gate"] for r in plan["refusals"]}
    assert refused["pve7"] == "not awake"
    assert plan["sleep"] == ["pve6"] and refused["pve5"] == "quorum"   # 6 of 8 awake is the margin


def test_a_ceph_node_sleeps_with_noout_and_only_while_ceph_is_well(cluster, tmp_path):
    nodes = {"nodes": ["pve4"]}
    data = plan_json(cluster, tmp_path, power=nodes)
    # its HA dns and the print server are containers: they move only where containers may
    assert data["refusals"][0]["gate"] == "guests stay" and "dns (203): container" in data["refusals"][0]["detail"]
    data = plan_json(cluster, tmp_path, power=nodes, balancing=CT)
    assert data["sleep"] == ["pve4"]
    assert [s["action"] for s in data["steps"]] == ["migrate", "ha-maintenance", "ceph-noout", "shutdown"]
    client = cluster.client(TOKEN)
    client.put("/cluster/ceph/flags/noout", value=1)
    data = plan_json(cluster, tmp_path, power=nodes, balancing=CT)
    assert "set already" in data["steps"][2]["detail"]
    client.put("/cluster/ceph/flags/noout", value=0)
    cluster.control("POST", "ceph/osds/2", {"up": False})          # an OSD of pve2 fails
    data = plan_json(cluster, tmp_path, power=nodes, balancing=CT)
    assert data["verdict"] == "ALL AWAKE"
    assert data["refusals"][0]["gate"] == "Ceph" and "OSDs are down on pve2" in data["refusals"][0]["detail"]


def test_ceph_monitors_and_pools_keep_ceph_nodes_awake(cluster, tmp_path):
    data = plan_json(cluster, tmp_path, power={"nodes": ["pve2", "pve3", "pve4"]}, balancing=CT)
    refused = {r["node"]: r for r in data["refusals"]}
    # pve4 goes (no monitor); then pve2 or pve3 would leave a placement group 1 copy of 3
    assert data["sleep"] == ["pve4"]
    assert {n: r["gate"] for n, r in refused.items()} == {"pve2": "Ceph", "pve3": "Ceph"}
    assert "with pve2 and pve4 off" in refused["pve2"]["detail"]
    # a monitor's node alone: 2 of 3 monitors left is a bare majority
    data = plan_json(cluster, tmp_path, power={"nodes": ["pve3"]}, balancing=CT)
    assert data["refusals"][0]["detail"] == ("its monitor would leave 2 of 3 monitors in quorum, a bare "
                                             "majority (allow_bare_majority: true allows it)")


def test_one_node_asked_for(cluster, tmp_path):
    data = plan_json(cluster, tmp_path, "--node", "pve8")
    assert data["verdict"] == "ALL AWAKE" and data["refusals"][0]["gate"] == "guests stay"
    data = plan_json(cluster, tmp_path, "--node", "pve2")
    assert data["refusals"][0] == {"gate": "policy", "node": "pve2",
                                   "detail": "it is not one of balancing.power.nodes"}


def test_the_reading_stays_in_its_call_budget(cluster):
    from keel.pve import power, snapshot
    client = cluster.client(TOKEN)
    snap = snapshot.collect(client)
    facts = power.read_facts(client, snap)
    assert facts.api_calls == 8 + 6                                  # N + 6 with Ceph
    assert facts.local_node == "pve1" and facts.votes == {f"pve{i}": 1 for i in range(1, 9)}
    assert facts.ceph.osds == {"pve1": (2, 2), "pve2": (2, 2), "pve3": (2, 2), "pve4": (2, 2)}
    assert {p.name: (p.size, p.min_size) for p in facts.ceph.pools} == {".mgr": (3, 2), "ceph-vm": (3, 2)}


def test_power_without_a_subcommand_prints_its_help(tmp_path):
    out = io.StringIO()
    assert main(["power"], Env(stdout=out, stderr=io.StringIO(), environ={})) == 2
    assert "status" in out.getvalue() and "plan" in out.getvalue()
