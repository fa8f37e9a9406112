"""The ``leader lease`` gate's hand-over (docs/power.md): in ``mode: automatic`` the node to
sleep may be the one whose keel-engine leads.  Two real engines on one lease directory and
one shared directory (pmxcfs's stand-ins) against ``keel sim`` on the power cluster, each
with its own API token so that the simulator's request log says who did what: the leader's
node is the only candidate; once the hold has passed the leader gives its lease up, the
other engine takes it and sleeps the old leader's node, and the old leader sends nothing to
PVE after its release."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import start_sim
from service_helpers import start_engine, wait_for, write_config
from .test_power_engine import busy, off, quiet
from .test_power_sleep import fake_ha_manager, POWER

SECRET = "19191919-0000-4000-8000-0000000000aa"
OLD, NEW = "pve7", "pve2"           # the leader's node, the only one that may sleep; another node
OTHER = "pve6"                      # dearer to empty than pve7


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    data = yaml.safe_load(POWER.read_text())
    keel = next(u for u in data["users"] if u["userid"] == "keel@pve")
    for name in (OLD, NEW):
        keel["tokens"].append({"id": name, "secret": SECRET, "privsep": True})
        data["acl"].append({"path": "/", "role": "Administrator", "token": f"keel@pve!{name}"})
    scenario = tmp_path / "power.yaml"
    scenario.write_text(yaml.safe_dump(data))
    sim = start_sim(scenario, tmp_path / "sim", clock_factor=60)
    sim.control("POST", f"nodes/{OLD}", {"next_wake": "normal"})
    monkeypatch.setenv("PATH", fake_ha_manager(sim, tmp_path / "bin"))      # test_power_sleep's
    yield sim
    sim.stop()


def config(tmp_path, sim, name, nodes=(OLD,)):
    power = {"mode": "automatic", "nodes": list(nodes), "hold": "3s", "wake_timeout": "15s",
             "headroom": {"cpu": "40%"}, "wake_test_max_age": "off"}
    pmxcfs = tmp_path / "pmxcfs"
    return write_config(tmp_path / name, sim, node=name, lock=pmxcfs / "lock" / "keel-leader", shared=pmxcfs / "keel",
                        api_token=f"keel@pve!{name}={SECRET}",
                        balancing={"interval": "1s", "hold": 2, "window": "3s", "guests": ["vm", "ct"], "power": power})


def leads(client):
    try:
        return client.call("GET", "/api/status")["leader"]
    except Exception:       # noqa: BLE001 - not answering is not leading
        return False


def test_the_leader_hands_its_lease_over_and_the_next_leader_sleeps_its_node(cluster, tmp_path):
    busy(cluster)                                    # no node may sleep until both engines run
    old, old_client = start_engine(config(tmp_path, cluster, OLD))
    new = None
    try:
        wait_for(lambda: leads(old_client), timeout=30)
        new, new_client = start_engine(config(tmp_path, cluster, NEW))
        wait_for(lambda: new_client.call("GET", "/api/status"), timeout=30)
        assert leads(old_client) and not leads(new_client)
        quiet(cluster)

        wait_for(lambda: leads(new_client), timeout=90)
        wait_for(lambda: off(cluster) == [OLD], timeout=120)
        assert not leads(old_client)

        book = tmp_path / "pmxcfs" / "keel" / "power.json"
        shared = wait_for(lambda: (data := json.loads(book.read_text()))["power_nodes"][OLD]["state"] == "asleep"
                          and data, timeout=60)
        handed = [e for e in shared["power_events"] if e["event"] == "lease handed over"]
        assert len(handed) == 1 and handed[0]["node"] == OLD and handed[0]["by"] == f"keel engine on {OLD}"
        assert "load stayed low" in handed[0]["reason"]
        released = handed[0]["time"]
        assert shared["power_handed_over"]["node"] == OLD

        log = cluster.requests_log()
        shutdowns = [e for e in log if e["method"] == "POST" and e["path"] == f"/nodes/{OLD}/status"]
        assert shutdowns and {e["user"] for e in shutdowns} == {f"keel@pve!{NEW}"}
        assert all(e["wall"] > released for e in shutdowns)
        late = [e for e in log if e["method"] != "GET" and e["user"] == f"keel@pve!{OLD}" and e["wall"] > released]
        assert late == [], late                     # the old leader wrote nothing after its release
        status = old_client.call("GET", "/api/status")
        assert "handed over" in json.dumps(status)
    finally:
        old.stop()
        if new is not None:
            new.stop()


def test_a_hand_over_no_engine_takes_lets_another_node_sleep_instead(cluster, tmp_path):
    """The only engine leads on pve7, the cheaper of pve7 and pve6 to empty: it hands its
    lease over, nobody takes it, it leads again after the expiry, and then plans with the
    lease gate (for the quiet time after a hand-over), so pve6 sleeps in its stead."""
    cluster.control("POST", f"nodes/{OTHER}", {"next_wake": "normal"})
    quiet(cluster)
    engine, client = start_engine(config(tmp_path, cluster, OLD, nodes=(OLD, OTHER)))
    try:
        wait_for(lambda: off(cluster) == [OTHER], timeout=150)
        assert leads(client)
        book = json.loads((tmp_path / "pmxcfs" / "keel" / "power.json").read_text())
        handed = [e for e in book["power_events"] if e["event"] == "lease handed over"]
        assert [e["node"] for e in handed] == [OLD]
        shutdowns = [e["path"] for e in cluster.requests_log() if e["method"] == "POST"
                     and e["path"].endswith("/status")]
        assert shutdowns and set(shutdowns) == {f"/nodes/{OTHER}/status"}
    finally:
        engine.stop()
