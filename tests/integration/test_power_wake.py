"""keel-engine's wakes in ``mode: automatic`` against ``keel sim`` on the power cluster (its
clock 60 times real time): a ``wake_all`` moment wakes every sleeping node at once; a node
whose Wake-on-LAN PVE does not send is backed off from, and another is woken."""

from __future__ import annotations

import math
import time

import yaml

from service_helpers import start_engine, wait_for
from .test_power_engine import busy, cluster, engine_config, off, quiet, sleeping, state_of  # noqa: F401
from .test_power_sleep import TOKEN  # noqa: F401

BOOT_S = 120.0              # the power scenario's boot time (sim seconds)


def wakeonlan_posts(sim, node=None):
    return [r for r in sim.control("GET", "requests?since=0")
            if r["method"] == "POST" and r["path"].endswith("/wakeonlan")
            and (node is None or r["path"] == f"/nodes/{node}/wakeonlan")]


def ups(sim):
    return {e["node"]: e["time"] for e in sim.control("GET", "power") if e["event"] == "up"}


def test_a_wake_all_moment_wakes_every_sleeping_node_at_once(cluster, tmp_path):  # noqa: F811
    quiet(cluster)
    config = engine_config(tmp_path / "e1", cluster)
    service, client = start_engine(config)
    try:
        asleep = [n for _, n in wait_for(lambda: len(sleeping(client)) >= 2 and sleeping(client), timeout=150)]
        # no more sleeps; every sleeping node wakes at the next whole minute (the engine's clock)
        moment = time.gmtime(math.ceil(time.time() / 60) * 60)
        data = yaml.safe_load(config.read_text())
        data["balancing"]["power"].update({"hold": "1h", "wake_all": time.strftime("%H:%M", moment)})
        config.write_text(yaml.safe_dump(data))
        wait_for(lambda: wakeonlan_posts(cluster), timeout=75)
        wait_for(lambda: not off(cluster) and all(state_of(client, n) == "awake" for n in asleep), timeout=60)
        sent = {r["path"].split("/")[2]: r for r in wakeonlan_posts(cluster) if r["status"] == 200}
        assert set(asleep) <= set(sent) and len(sent) == len(wakeonlan_posts(cluster))   # once each
        back = ups(cluster)
        first_back = min(back[n] for n in sent)
        assert max(r["time"] for r in sent.values()) < first_back, (sent, back)      # all sent before any is back
        assert max(back[n] for n in sent) - min(r["time"] for r in sent.values()) <= BOOT_S + 30
        power = client.call("GET", "/api/power")
        assert power["last"] is not None
        woken = [e for e in power["events"] if e["event"] == "waking"]
        assert {e["node"] for e in woken} == set(sent)
        assert all("wake_all moment" in e["reason"] for e in woken)
        assert len({e["job"] for e in woken}) == 1                                 # one job for all
    finally:
        service.stop()


def test_a_wake_pve_does_not_send_backs_off_and_another_node_is_woken(cluster, tmp_path):  # noqa: F811
    quiet(cluster)
    service, client = start_engine(engine_config(tmp_path / "e1", cluster))
    try:
        asleep = wait_for(lambda: len(sleeping(client)) == 2 and sleeping(client), timeout=150)
        first, second = asleep[0][1], asleep[1][1]          # the longest asleep is tried first
        cluster.control("POST", "faults", {"endpoints": [{"path": f"/nodes/{first}/wakeonlan", "method": "POST",
                                                          "status": 500, "error_rate": 1,
                                                          "message": "simulated: no route to the NIC"}]})
        busy(cluster)
        wait_for(lambda: second not in off(cluster) and state_of(client, second) == "awake", timeout=90)
        node = next(n for n in client.call("GET", "/api/power")["nodes"] if n["node"] == first)
        assert node["state"] == "sleeping" and first in off(cluster)
        # the load stays over the line: first is tried again, each time after a longer wait
        tries = wait_for(lambda: len(wakeonlan_posts(cluster, first)) >= 4 and wakeonlan_posts(cluster, first),
                         timeout=60)
        assert all(r["status"] == 500 for r in tries)
        gaps = [b["wall"] - a["wall"] for a, b in zip(tries, tries[1:])]
        interval = 1.0                                      # balancing.interval of engine_config
        for k, gap in enumerate(gaps[:3]):
            assert gap >= interval * 2 ** k * 0.9, gaps     # one interval, two, four...
        power = client.call("GET", "/api/power")
        node = next(n for n in power["nodes"] if n["node"] == first)
        if node["retry_at"] is None:                        # between a try and its record: read again
            power = client.call("GET", "/api/power")
            node = next(n for n in power["nodes"] if n["node"] == first)
        assert node["retry_at"] > time.time() - 1 and "simulated: no route to the NIC" in node["wake_error"]
        failed = [e for e in power["events"] if e["node"] == first and e["event"] == "wake failed"]
        assert failed and "simulated: no route to the NIC" in failed[0]["detail"]
        reasons = wait_for(lambda: (r := client.call("GET", "/api/power")["last"]["decision"]["reason"])
                           and f"{first} is not woken again for" in r and r, timeout=30, step=0.05)
        assert "headroom line" in reasons and "did not send its Wake-on-LAN packet" in reasons
        assert state_of(client, first) == "sleeping"        # never "did not wake": it was not woken
    finally:
        service.stop()
