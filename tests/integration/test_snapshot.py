"""A cluster snapshot over real HTTPS: what it contains, and that it costs O(nodes) calls."""

from __future__ import annotations

import pytest
import yaml

from keel.pve import snapshot
from keel.pve.client import PveClient, Target
from keel.sim.generate import generate

GiB = 1024**3


@pytest.fixture(scope="module")
def demo(shared_sim):
    return snapshot.collect(shared_sim.client())


def test_nodes_and_guests(demo):
    assert list(demo.nodes) == ["pve1", "pve2", "pve3", "pve4", "pve5"]
    assert len(demo.guests) == 27
    pve1 = demo.nodes["pve1"]
    assert pve1.online and pve1.maxcpu == 64 and pve1.maxmem == 256 * GiB
    assert 0 < pve1.cpu_frac < 1 and 0 < pve1.mem < pve1.maxmem
    assert demo.cluster_name == "demo" and demo.pve_version == "9.1.4" and demo.quorate
    web1 = demo.guests[100]
    assert (web1.node, web1.type, web1.maxcpu, web1.maxmem) == ("pve1", "qemu", 4, 8 * GiB)
    assert web1.tags == ("web",) and web1.pool == "prod" and web1.running
    assert demo.guests[9000].template and not demo.guests[9000].running
    assert demo.guests[109].type == "lxc"


def test_node_usage_is_the_sum_of_its_guests(demo):
    pve1 = demo.nodes["pve1"]
    cores = sum(g.cpu_cores for g in demo.guests_on("pve1"))
    mem = sum(g.mem for g in demo.guests_on("pve1"))
    # plus the host's own overhead (0.3 cores, 3 GiB by default)
    assert pve1.cpu_cores == pytest.approx(cores + 0.3, abs=0.05)
    assert pve1.mem == pytest.approx(mem + 3 * GiB, rel=0.01)


def test_ha_resources_rules_and_storages(demo):
    db1 = demo.guests[110]
    assert db1.ha is not None and db1.ha.sid == "vm:110" and db1.ha.state == "started"
    assert db1.ha.crm_state == "started"
    assert demo.guests[103].ha is None
    rules = {r.rule: r for r in demo.ha_rules}
    assert rules["db-apart"].affinity == "negative" and rules["db-apart"].resources == ("vm:110", "vm:111")
    assert dict(rules["erp-prefers-big"].nodes) == {"pve1": 2, "pve2": 2, "pve5": 1}
    assert demo.storages["ceph"].shared and not demo.storages["local-lvm"].shared
    assert demo.pools == ("ci", "dev", "prod")
    assert demo.crs.ha == "static" and not demo.crs.auto_rebalance
    assert demo.ha_master == "pve1"


def test_local_disks_come_from_the_node_local_storage(demo):
    files = demo.guests[112]
    assert files.local_disk_bytes == 200 * GiB
    assert files.local_disks[0].storage == "local-lvm"
    assert demo.guests[100].local_disks == ()


def test_the_snapshot_never_asks_per_guest(sim):
    before = sim.requests_log()[-1]["seq"] if sim.requests_log() else 0
    snap = snapshot.collect(sim.client())
    paths = [r["path"] for r in sim.requests_log(before)]
    assert len(paths) == snap.api_calls == 8 + 5
    assert not [p for p in paths if "/qemu" in p or "/lxc" in p]


def test_psi_adds_one_call_per_node(sim):
    snap = snapshot.collect(sim.client(), psi=True)
    assert snap.api_calls == 8 + 5 + 5
    assert all(n.psi is not None for n in snap.nodes.values())


def test_pve8_groups_become_node_affinity_rules(sim_factory):
    scenario = {
        "pve_version": "8.4.1",
        "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "users": [{"userid": "root@pam", "password": "pw"}],
        "ha": {"groups": [{"group": "prefer-a", "nodes": "a:2,b", "restricted": True}]},
        "guests": [{"vmid": 100, "node": "a", "ha": {"state": "started", "group": "prefer-a"}},
                   {"vmid": 101, "node": "b"}],
    }
    sim = sim_factory(scenario)
    client = PveClient(Target.from_url(sim.url, verify=sim.cert, user="root@pam", password="pw"))
    sim.clients.append(client)                          # closed when the sim stops
    snap = snapshot.collect(client)
    assert snap.ha_groups_used and snap.pve_major == 8
    (rule,) = snap.ha_rules
    assert rule.rule == "ha-group-prefer-a" and rule.strict and dict(rule.nodes) == {"a": 2, "b": 0}
    assert rule.resources == ("vm:100",)
    assert snap.guests[100].ha.group == "prefer-a"
    # PVE 8 has no /cluster/ha/rules (501): its groups are read at once, the rules never
    # asked for (issue 25: every read of a PVE 8 cluster made one request that failed)
    assert snap.api_calls == 8 + 3
    assert not [e for e in sim.requests_log() if "/cluster/ha/rules" in e.get("path", "")]


def test_a_node_that_is_down(sim):
    sim.control("POST", "nodes/pve4", {"online": False})
    snap = snapshot.collect(sim.client())
    assert not snap.nodes["pve4"].online
    assert snap.guests[123].status == "unknown"
    assert snap.api_calls == 8 + 4


def test_64_nodes_and_10000_guests_take_at_most_nodes_plus_10_calls(sim_factory):
    scenario = generate(nodes=64, guests=10000, seed=1, profile="skewed")
    sim = sim_factory(scenario)
    client = PveClient(Target.from_url(sim.url, verify=sim.cert, user="root@pam", password="keel-sim"))
    sim.clients.append(client)                          # closed when the sim stops
    calls_before = client.calls
    snap = snapshot.collect(client)
    assert len(snap.nodes) == 64 and len(snap.guests) == 10000
    assert client.calls - calls_before == snap.api_calls <= 64 + 10
