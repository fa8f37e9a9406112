"""Maintenance elsewhere needs room: keel-engine in ``mode: automatic`` against ``keel sim``.
A node Keel put to sleep is woken when another node goes into Keel's maintenance and its
guests fit on no awake node; then the balancer empties the node in maintenance onto it."""

from __future__ import annotations

import yaml

from runners_helpers import TOKEN, scenario
from service_helpers import start_engine, wait_for, write_config


def cluster():
    """Four nodes of 64 GiB (60 for guests); 40 GiB guests on pve1-3; pve4 empty, able to sleep."""
    data = scenario(nodes=4, start_time=None,
                    guests=[{"vmid": 100 + i, "name": f"app-{i}", "node": node, "memory": "40GiB", "mem_used": 1.0,
                             "cpus": 4, "cpu": 0.05, "storage": "ceph"}
                            for i, node in enumerate(("pve1", "pve2", "pve3"))])
    data["nodes"][3].update({"wakeonlan": "bc:24:11:19:00:04", "power": {"shutdown": "2s", "boot": "5s"}})
    data["migration"] = {"speed": "8GiB", "setup": "1s"}
    return data


def test_maintenance_whose_guests_fit_nowhere_wakes_a_sleeping_node_and_empties_onto_it(sim_factory, tmp_path):
    sim = sim_factory(cluster(), clock_factor=1.0)
    config = write_config(tmp_path / "node", sim, api_token=TOKEN, balancing={"interval": "1s", "window": "3s"})
    data = yaml.safe_load(config.read_text())
    data["balancing"].update({"enable": False, "power": {
        "mode": "automatic", "nodes": ["pve4"], "hold": "2s", "allow_bare_majority": True,
        "headroom": {"spare_nodes": 0}, "wake_timeout": "60s", "wake_test_max_age": "off"}})
    config.write_text(yaml.safe_dump(data))
    engine, client = start_engine(config)

    def power():
        return {n: v["state"] for n, v in sim.control("GET", "state")["power"].items()}

    def guests_on(node):
        return [g["vmid"] for g in sim.client(TOKEN).get("/cluster/resources", type="vm")
                if g["node"] == node and g["status"] == "running"]
    try:
        wait_for(lambda: power()["pve4"] == "off", timeout=60)
        wait_for(lambda: any(n["node"] == "pve4" and n["state"] == "sleeping"
                             for n in client.call("GET", "/api/power")["nodes"]), timeout=30)
        seen = sim.control("GET", "requests?since=0")[-1]["seq"]
        # pve3 into maintenance: its 40 GiB guest fits on neither pve1 nor pve2
        data["balancing"].update({"enable": True, "maintenance": ["pve3"]})
        config.write_text(yaml.safe_dump(data))
        wait_for(lambda: not guests_on("pve3"), timeout=90)
        assert power()["pve4"] == "online"
        assert guests_on("pve4") == [102]
        log = sim.control("GET", f"requests?since={seen}")
        assert [r["path"] for r in log if r["path"].endswith("/wakeonlan")] == ["/nodes/pve4/wakeonlan"]
        moves = [r for r in log if r["method"] == "POST" and r["path"].endswith("/migrate")]
        assert moves and all(r["path"] == "/nodes/pve3/qemu/102/migrate" for r in moves)
        events = [e for e in client.call("GET", "/api/power")["events"] if e["node"] == "pve4"]
        waking = [e for e in events if e["event"] == "waking"]
        assert waking and waking[-1]["reason"].startswith("maintenance on pve3 needs room")
        assert "app-2 (102)" in waking[-1]["reason"]
        assert events[-1]["event"] == "awake"
    finally:
        engine.stop()
