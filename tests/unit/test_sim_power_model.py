"""The simulator's power-saving parts as pure code (issue 19): the scenario keys, each bad
one named; corosync votes; the Ceph model's placement, PG states and health."""

from __future__ import annotations

from pathlib import Path

import pytest

from keel.errors import InvalidError
from keel.sim import scenario as sc
from keel.sim.clock import Clock
from keel.sim.cluster import Cluster

POWER = Path(sc.__file__).parent / "scenarios" / "power.yaml"
GiB = 1024**3


def problems(data) -> dict[str, str]:
    with pytest.raises(InvalidError) as err:
        sc.parse(data)
    return err.value.errors


def cluster(data: dict) -> Cluster:
    scenario = sc.parse(data)
    return Cluster(scenario, Clock(1_700_000_000, 0))


def advance(c: Cluster, seconds: float) -> None:
    c.clock.advance(seconds)
    c.sync()


def ceph_cluster(nodes: int = 4, **ceph) -> Cluster:
    names = [f"n{i + 1}" for i in range(nodes)]
    return cluster({
        "nodes": [{"name": n} for n in names],
        "storages": [{"storage": "rbd", "type": "rbd"}],
        "guests": [{"vmid": 100 + i, "node": names[i % nodes], "storage": "rbd", "disk": "100GiB"}
                   for i in range(8)],
        "ceph": {"osds": {n: 2 for n in names}, **ceph},
    })


# -- scenario keys -------------------------------------------------------------------


def test_the_power_scenario_loads_with_votes_macs_power_and_ceph():
    scenario = sc.load(POWER)
    assert [n.name for n in scenario.nodes] == [f"pve{i}" for i in range(1, 9)]
    assert all(n.wakeonlan and n.votes == 1 for n in scenario.nodes)
    assert scenario.nodes[7].power.wake_failure == 0.2 and scenario.nodes[7].power.late_s == 180
    assert scenario.nodes[0].power.boot_s == 120 and scenario.nodes[0].power.shutdown_s == 20
    assert sorted(scenario.ceph.osds) == ["pve1", "pve2", "pve3", "pve4"]
    assert [(p.name, p.size, p.min_size, p.storages) for p in scenario.ceph.pools] == [
        ("ceph-vm", 3, 2, ("ceph-vm",))]
    assert scenario.cluster_options["ha"] == {"shutdown_policy": "conditional"}


def test_node_power_keys_default_and_parse():
    [node] = sc.parse({"nodes": [{"name": "a", "votes": 2, "status": "off",
                                  "wakeonlan": {"mac": "aa:bb:cc:dd:ee:ff", "broadcast-address": "10.0.0.255"},
                                  "power": {"shutdown": "1m", "boot": "5m", "wake_failure": 0.5,
                                            "late": {"chance": 0.25, "by": "2m"}}}]}).nodes
    assert (node.votes, node.powered_off, node.online) == (2, True, False)
    assert node.wakeonlan == "mac=aa:bb:cc:dd:ee:ff,broadcast-address=10.0.0.255"
    p = node.power
    assert (p.shutdown_s, p.boot_s, p.wake_failure, p.late, p.late_s) == (60, 300, 0.5, 0.25, 120)
    [plain] = sc.parse({"nodes": [{"name": "b"}]}).nodes
    assert (plain.votes, plain.wakeonlan, plain.powered_off, plain.power.boot_s) == (1, None, False, 120)


@pytest.mark.parametrize("node, path, message", [
    ({"votes": -1}, "nodes[0].votes", "must be at least 0"),
    ({"wakeonlan": "01:00:5e:00:00:01"}, "nodes[0].wakeonlan", "unicast MAC"),
    ({"wakeonlan": "mac=zz"}, "nodes[0].wakeonlan", "unicast MAC"),
    ({"wakeonlan": "aa:bb:cc:dd:ee:ff,port=9"}, "nodes[0].wakeonlan", "'port' is not defined"),
    ({"status": "asleep"}, "nodes[0].status", "online, offline, off"),
    ({"power": {"boot": "soon"}}, "nodes[0].power.boot", ""),
    ({"power": {"wake_failure": 2}}, "nodes[0].power.wake_failure", "at most 1"),
    ({"power": {"late": {"chance": 0.1, "after": "1m"}}}, "nodes[0].power.late.after", "unknown key"),
    ({"power": {"sleep": "1m"}}, "nodes[0].power.sleep", "unknown key"),
])
def test_bad_node_power_keys_are_named(node, path, message):
    errors = problems({"nodes": [{"name": "a", **node}]})
    assert path in errors and message in errors[path], errors


@pytest.mark.parametrize("ceph, path, message", [
    ({}, "ceph.osds", "at least one node"),
    ({"osds": {"n9": 2}}, "ceph.osds.n9", "no node named 'n9'"),
    ({"osds": {"n1": "two"}}, "ceph.osds.n1", "expected a number of OSDs"),
    ({"osds": {"n1": {"count": 2, "class": "tape"}}}, "ceph.osds.n1.class", "must be one of"),
    ({"osds": {"n1": 1}, "mons": ["n7"]}, "ceph.mons", "no node named 'n7'"),
    ({"osds": {"n1": 1}, "flags": ["noout", "nofun"]}, "ceph.flags", "not an OSD flag"),
    ({"osds": {"n1": 1}, "pools": [{"name": "p", "size": 2, "min_size": 3}]}, "ceph.pools[0].min_size",
     "at most size"),
    ({"osds": {"n1": 1}, "pools": [{"name": "p", "size": 9}]}, "ceph.pools[0].size", "at most 7"),
    ({"osds": {"n1": 1}, "pools": [{"name": "a/b"}]}, "ceph.pools[0].name", "not a pool name"),
    ({"osds": {"n1": 1}, "pools": [{"name": "p", "storages": ["local"]}]}, "ceph.pools[0].storages",
     "not rbd"),
    ({"osds": {"n1": 1}, "pools": [{"name": "p", "storages": ["nope"]}]}, "ceph.pools[0].storages",
     "no storage named"),
    ({"osds": {"n1": 1}, "recovery": "fast"}, "ceph.recovery", "unknown key"),
])
def test_bad_ceph_keys_are_named(ceph, path, message):
    errors = problems({"nodes": [{"name": "n1"}], "ceph": ceph,
                       "storages": [{"storage": "local", "type": "dir"}]})
    assert path in errors and message in errors[path], errors


def test_ceph_defaults_a_pool_on_the_rbd_storages_and_three_monitors():
    spec = sc.parse({"nodes": [{"name": f"n{i}"} for i in range(1, 6)],
                     "storages": [{"storage": "rbd", "type": "rbd"}],
                     "ceph": {"osds": {"n2": 1, "n3": 1, "n4": 1, "n5": 1}}}).ceph
    assert spec.mons == ("n2", "n3", "n4")
    assert [(p.name, p.size, p.min_size, p.pg_num, p.storages) for p in spec.pools] == [
        ("ceph-vm", 3, 2, 128, ("rbd",))]
    assert spec.version == "19.2.3"
    assert sc.parse({"pve_version": "8.4.1", "nodes": [{"name": "n1"}],
                     "ceph": {"osds": {"n1": 1}}}).ceph.version == "18.2.7"


# -- quorum ------------------------------------------------------------------------------


def test_quorum_counts_corosync_votes_against_all_expected_votes():
    c = cluster({"nodes": [{"name": "a", "votes": 3}, {"name": "b"}, {"name": "c"}, {"name": "d"}]})
    assert c.votes() == (6, 6) and c.quorate
    c.set_node_online("a", False)
    assert c.votes() == (3, 6) and not c.quorate            # half is not a majority
    c.set_node_online("a", True)
    c.set_node_online("b", False)
    c.set_node_online("c", False)
    assert c.votes() == (4, 6) and c.quorate                # 4 >= 6 // 2 + 1


def test_an_even_cluster_loses_quorum_at_half():
    c = cluster({"nodes": [{"name": f"n{i}"} for i in range(8)]})
    for i in range(3):
        c.power.cut(f"n{i}")
    assert c.quorate
    c.power.cut("n3")
    assert c.votes() == (4, 8) and not c.quorate


# -- power -------------------------------------------------------------------------------


def test_wake_draws_are_seeded_per_node_and_repeat():
    def outcomes() -> list[str]:
        c = cluster({"seed": 5, "nodes": [{"name": "a"}, {"name": "b", "status": "off",
                     "power": {"wake_failure": 0.5, "boot": 10}}]})
        seen = []
        for _ in range(12):
            c.power.wake("b", "a")
            seen.append(c.power.history[-1]["outcome"])
            advance(c, 11)
            if c.nodes["b"].power == "on":
                c.power.cut("b")
        return seen
    first = outcomes()
    assert first == outcomes()
    assert {"did not wake", "normal"} <= set(first)


def test_a_lost_node_does_not_wake_and_an_online_one_ignores_the_packet():
    c = cluster({"nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})
    c.set_node_online("b", False)
    c.power.wake("b", "a")
    c.power.wake("c", "a")
    advance(c, 600)
    assert c.nodes["b"].state == "lost" and c.nodes["c"].state == "online"
    assert [h["outcome"] for h in c.power.history] == ["ignored (lost)", "ignored (online)"]


def test_a_node_that_starts_off_runs_no_guest():
    c = cluster({"nodes": [{"name": "a"}, {"name": "b", "status": "off"}],
                 "guests": [{"vmid": 100, "node": "b"}]})
    assert c.nodes["b"].state == "off" and c.guests[100].status == "stopped"


# -- ceph --------------------------------------------------------------------------------


def pools(c: Cluster) -> dict:
    return c.ceph.state()["pools"]["ceph-vm"]["pgs"]


def test_every_pg_has_size_copies_on_distinct_hosts():
    c = ceph_cluster()
    ceph = c.ceph
    for (pool_id, pg), osds in ceph.holders.items():
        hosts = [ceph.osds[o].host for o in osds]
        assert len(hosts) == 3 and len(set(hosts)) == 3
    assert pools(c) == {"active+clean": 128}
    assert ceph.health() == {"status": "HEALTH_OK", "checks": {}, "mutes": []}


def test_a_host_down_degrades_then_backfills_after_the_down_out_interval():
    c = ceph_cluster(down_out_interval="10m", recovery_speed="1GiB")
    c.power.cut("n4")                                # not a monitor (n1-n3 are)
    advance(c, 25)                                   # past the heartbeat grace
    checks = c.ceph.health()["checks"]
    assert set(checks) == {"OSD_DOWN", "OSD_HOST_DOWN", "PG_DEGRADED"}
    assert checks["OSD_HOST_DOWN"]["summary"]["message"] == "1 host (2 osds) down"
    assert "pgs undersized" not in checks["PG_DEGRADED"]["summary"]["message"]   # not stuck yet
    assert set(pools(c)) <= {"active+undersized+degraded", "active+clean"}
    advance(c, 60)
    assert "pgs undersized" in c.ceph.health()["checks"]["PG_DEGRADED"]["summary"]["message"]
    advance(c, 600)                                  # marked out: copies move to the others
    assert not any(o.in_ for o in c.ceph.osds if o.host == "n4")
    advance(c, 3600)
    assert pools(c) == {"active+clean": 128}
    assert set(c.ceph.health()["checks"]) == {"OSD_DOWN", "OSD_HOST_DOWN"}


def test_noout_keeps_a_sleeping_hosts_osds_in_and_the_pgs_clean_once_it_is_back():
    c = ceph_cluster(flags=["noout"])
    assert c.ceph.health()["checks"]["OSDMAP_FLAGS"]["summary"]["message"] == "noout flag(s) set"
    c.power.cut("n2")
    advance(c, 3600)
    assert all(o.in_ and not o.up for o in c.ceph.osds if o.host == "n2")
    assert "active+undersized+degraded" in pools(c)
    c.power.press("n2")
    advance(c, 130)
    assert pools(c) == {"active+clean": 128}


def test_two_hosts_down_leave_some_pgs_below_min_size_blocked_and_reported():
    c = ceph_cluster(flags=["noout"])
    c.power.cut("n1")
    c.power.cut("n2")
    advance(c, 25)
    state = c.ceph.state()
    assert state["pools"]["ceph-vm"]["blocked"] is True
    assert any(s == "undersized+degraded+peered" for s in pools(c))
    blocked = state["blocked_guests"]
    assert blocked and all(c.guests[v].node in ("n3", "n4") for v in blocked)
    assert "PG_AVAILABILITY" not in c.ceph.health()["checks"]          # stuck only after 60 s
    advance(c, 60)
    health = c.ceph.health()
    assert health["status"] == "HEALTH_WARN"                           # as Ceph: a warning
    assert health["checks"]["PG_AVAILABILITY"]["summary"]["message"].startswith(
        "Reduced data availability: ")
    assert "slow ops, oldest one blocked for" in health["checks"]["SLOW_OPS"]["summary"]["message"]


def test_without_a_monitor_majority_ceph_calls_time_out():
    from keel.sim.errors import ApiError
    c = ceph_cluster(mons=["n1", "n2", "n3"])
    c.power.cut("n1")
    c.ceph.check("n3")
    c.power.cut("n2")
    with pytest.raises(ApiError, match="got timeout"):
        c.ceph.check("n3")
    with pytest.raises(ApiError, match="binary not installed"):
        cluster({"nodes": [{"name": "a"}, {"name": "b"}], "ceph": {"osds": {"a": 1}}}).ceph.check("b")


def test_without_quorum_the_nodes_with_an_armed_ha_watchdog_reset_themselves():
    c = cluster({"nodes": [{"name": f"n{i}", "power": {"boot": "1m"}} for i in range(1, 5)],
                 "guests": [{"vmid": 100, "node": "n2", "ha": "started"}, {"vmid": 101, "node": "n4"}]})
    advance(c, 20)
    assert c.ha.master == "n1"
    c.power.cut("n3")
    c.set_node_online("n4", False)                   # 2 of 4 votes: no quorum
    advance(c, 40)
    assert c.nodes["n2"].state == "online"           # the watchdog gives it 60 s
    advance(c, 40)
    resets = [h["node"] for h in c.power.history if h["event"] == "watchdog reset"]
    assert resets == ["n1", "n2"]                    # the CRM master and the LRM with a service
    assert c.guests[100].status == "stopped"
    advance(c, 600)
    assert c.nodes["n1"].state == c.nodes["n2"].state == "online"
    assert [h["node"] for h in c.power.history if h["event"] == "watchdog reset"] == ["n1", "n2"]
    c.set_node_online("n4", True)                    # quorum is back: the CRM starts it again
    advance(c, 30)
    assert c.guests[100].status == "running"


def test_the_state_keeps_every_quorum_loss_and_every_node_marked_for_fencing():
    from keel.sim.control import _state
    c = cluster({"nodes": [{"name": f"n{i}"} for i in range(1, 5)],
                 "guests": [{"vmid": 100, "node": "n2", "ha": "started"}]})
    advance(c, 20)
    assert _state(c)["quorum_losses"] == [] and _state(c)["fencing"] == []
    c.power.cut("n2")                                 # lost with an HA service: fenced after 60 s
    advance(c, 200)
    assert [f["node"] for f in _state(c)["fencing"]] == ["n2"]
    assert _state(c)["quorum_losses"] == []
    c.power.cut("n3")                                 # 2 of 4 votes
    lost_at = c.t
    assert _state(c)["quorum_losses"] == [lost_at]
    c.power.cut("n4")                                 # still lost: not a new loss
    assert _state(c)["quorum_losses"] == [lost_at]
    assert [f["node"] for f in _state(c)["fencing"]] == ["n2"]
