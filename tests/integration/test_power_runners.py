"""Runner demand wakes a node: keel-engine runs the runners and power saving against ``keel
sim`` (a fake GitHub in it). A node sleeps while the cluster is quiet; then a job asks for a
runner that fits on no awake node (refused as full): the power loop wakes the sleeping node
and the job starts within the node's boot time + 60 s (the sim's clock)."""

from __future__ import annotations

import requests
import yaml

from runners_helpers import CLIENT_ID, INSTALLATION, TOKEN, scenario, write_private_key
from service_helpers import start_engine, wait_for, write_config

BOOT_S = 20.0
BIG = {"name": "keel-c2-m24", "max_runners": 1,
       "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "24GiB"}}]}


def gh(sim, method, path, body=None):
    response = requests.request(method, f"{sim.url}/_github/{path}", json=body, verify=sim.cert, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def cluster():
    data = scenario(nodes=4, start_time=None, boot="2s", github={"long_poll": "1s", "connect": "1s"},
                    guests=[{"vmid": 100 + i, "name": f"app-{i}", "node": node, "memory": "40GiB", "mem_used": 1.0,
                             "cpus": 4, "cpu": 0.05, "storage": "ceph"}
                            for i, node in enumerate(("pve1", "pve2", "pve4"))])
    data["nodes"][2].update({"wakeonlan": "bc:24:11:19:00:03", "power": {"shutdown": "2s", "boot": f"{BOOT_S:.0f}s"}})
    return data


def test_a_runner_that_fits_nowhere_wakes_a_sleeping_node_and_its_job_starts_in_time(sim_factory, tmp_path):
    sim = sim_factory(cluster(), clock_factor=1.0)
    key = write_private_key(tmp_path / "app.pem")
    config = write_config(tmp_path / "node", sim, api_token=TOKEN, balancing={"interval": "1s", "window": "3s"})
    data = yaml.safe_load(config.read_text())
    data["balancing"]["power"] = {"mode": "automatic", "nodes": ["pve3"], "hold": "2s", "allow_bare_majority": True,
                                  "wake_test_max_age": "off",
                                  "headroom": {"spare_nodes": 0}, "wake_timeout": "90s"}
    data["runners"] = {
        "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID, "app_installation_id": INSTALLATION,
                   "app_private_key_path": str(key), "tls": {"ca_file": sim.cert}},
        "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
        "scale_sets": [BIG], "reconcile_interval": "5s"}
    config.write_text(yaml.safe_dump(data))
    engine, client = start_engine(config)
    try:
        wait_for(lambda: client.call("GET", "/api/runners").get("active"), timeout=30)
        wait_for(lambda: gh(sim, "GET", "state")["sessions"], timeout=30)
        wait_for(lambda: sim.control("GET", "state")["power"]["pve3"]["state"] == "off", timeout=90)
        data["balancing"]["power"]["hold"] = "1h"          # it stays awake once woken, for this test
        config.write_text(yaml.safe_dump(data))
        [job] = gh(sim, "POST", "jobs", {"labels": ["keel-c2-m24"], "duration": 3})["ids"]

        def the_job():
            return next(j for j in gh(sim, "GET", "state")["jobs"] if j["id"] == job)
        started = wait_for(lambda: the_job()["started_at"] and the_job(), timeout=BOOT_S + 120)
        print(f"job started {started['started_at'] - started['queued_at']:.1f} s after it was queued")
        assert started["started_at"] - started["queued_at"] <= BOOT_S + 60, started
        runner = next(r for r in gh(sim, "GET", "state")["runners"] if r["job_id"] == job)
        vm = next(g for g in sim.client(TOKEN).get("/cluster/resources", type="vm") if g["vmid"] == runner["vmid"])
        assert vm["node"] == "pve3"
        events = client.call("GET", "/api/power")["events"]
        assert any(e["node"] == "pve3" and e["event"] == "waking" and e["reason"].startswith("runner demand")
                   for e in events), events
    finally:
        engine.stop()


def test_runner_demand_wakes_the_sleeping_node_its_provider_may_use_and_no_other(sim_factory, tmp_path):
    # five nodes: pve1-3 full of guests, pve4 and pve5 asleep; the provider may not use pve4
    data = scenario(nodes=5, start_time=None, boot="2s", github={"long_poll": "1s", "connect": "1s"},
                    guests=[{"vmid": 100 + i, "name": f"app-{i}", "node": node, "memory": "40GiB", "mem_used": 1.0,
                             "cpus": 4, "cpu": 0.05, "storage": "ceph"}
                            for i, node in enumerate(("pve1", "pve2", "pve3"))])
    for i in (3, 4):
        data["nodes"][i].update({"wakeonlan": f"bc:24:11:19:00:0{i + 1}", "power": {"shutdown": "2s", "boot": "5s"}})
    sim = sim_factory(data, clock_factor=1.0)
    key = write_private_key(tmp_path / "app.pem")
    config = write_config(tmp_path / "node", sim, api_token=TOKEN, balancing={"interval": "1s", "window": "3s"})
    data = yaml.safe_load(config.read_text())
    data["balancing"]["power"] = {"mode": "automatic", "nodes": ["pve4", "pve5"], "hold": "2s",
                                  "wake_test_max_age": "off",
                                  "allow_bare_majority": True, "headroom": {"spare_nodes": 0}, "wake_timeout": "60s"}
    data["runners"] = {
        "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID, "app_installation_id": INSTALLATION,
                   "app_private_key_path": str(key), "tls": {"ca_file": sim.cert}},
        "providers": [{"name": "pve", "type": "proxmox", "nodes": ["pve1", "pve2", "pve3", "pve5"],
                       "runner": {"template": 9000, "pool": "runners"}}],
        "scale_sets": [BIG], "reconcile_interval": "5s"}
    config.write_text(yaml.safe_dump(data))
    engine, client = start_engine(config)

    def power():
        return {n: v["state"] for n, v in sim.control("GET", "state")["power"].items()}
    try:
        wait_for(lambda: client.call("GET", "/api/runners").get("active"), timeout=30)
        def sleeping():
            return {n["node"]: n["since"] for n in client.call("GET", "/api/power")["nodes"]
                    if n["state"] == "sleeping"}
        asleep = wait_for(lambda: len(sleeping()) == 2 and sleeping(), timeout=90)
        assert asleep["pve4"] < asleep["pve5"]            # pve4 is the longest asleep: it would be woken first
        data["balancing"]["power"]["hold"] = "1h"          # no node sleeps again, for this test
        config.write_text(yaml.safe_dump(data))
        seen = sim.control("GET", "requests?since=0")[-1]["seq"]
        [job] = gh(sim, "POST", "jobs", {"labels": ["keel-c2-m24"], "duration": 3})["ids"]

        def the_job():
            return next(j for j in gh(sim, "GET", "state")["jobs"] if j["id"] == job)
        wait_for(lambda: the_job()["started_at"], timeout=120)
        runner = next(r for r in gh(sim, "GET", "state")["runners"] if r["job_id"] == job)
        vm = next(g for g in sim.client(TOKEN).get("/cluster/resources", type="vm") if g["vmid"] == runner["vmid"])
        assert vm["node"] == "pve5"
        woken = [r["path"] for r in sim.control("GET", f"requests?since={seen}")
                 if r["method"] == "POST" and r["path"].endswith("/wakeonlan")]
        assert woken == ["/nodes/pve5/wakeonlan"], woken
        assert power()["pve4"] == "off"
        events = client.call("GET", "/api/power")["events"]
        assert [e["node"] for e in events if e["event"] == "waking"] == ["pve5"]
    finally:
        engine.stop()
