"""keel-engine hosts the runners on its leader: a queued job gets a runner VM, runs and is
cleaned up; the engine's API and metrics show it; GitHub's webhooks reach the runners
through keel-web."""

from __future__ import annotations

import time

import requests
import yaml

from runners_helpers import CLIENT_ID, INSTALLATION, TOKEN, scenario, write_private_key
from service_helpers import start_engine, start_web, wait_for, write_config

SMALL = {"name": "keel-c2-m4", "max_runners": 2,
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}


def gh(sim, method, path, body=None):
    response = requests.request(method, f"{sim.url}/_github/{path}", json=body, verify=sim.cert, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_leader_runs_the_runners_and_the_api_shows_them(sim_factory, tmp_path):
    sim = sim_factory(scenario(start_time=None, boot="2s", github={"long_poll": "1s", "connect": "1s"}),
                      clock_factor=1.0)
    key = write_private_key(tmp_path / "app.pem")
    config = write_config(tmp_path / "node", sim, api_token=TOKEN)
    data = yaml.safe_load(config.read_text())
    data["runners"] = {
        "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID, "app_installation_id": INSTALLATION,
                   "app_private_key_path": str(key), "tls": {"ca_file": sim.cert}},
        "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
        "scale_sets": [SMALL], "reconcile_interval": "5s"}
    config.write_text(yaml.safe_dump(data))
    engine, client = start_engine(config)
    web, url = start_web(config)
    try:
        wait_for(lambda: client.call("GET", "/api/runners").get("active"), timeout=30)
        wait_for(lambda: gh(sim, "GET", "state")["sessions"], timeout=30)
        [job] = gh(sim, "POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 3})["ids"]
        wait_for(lambda: [j for j in gh(sim, "GET", "state")["jobs"] if j["id"] == job][0]["status"]
                 == "completed", timeout=90)
        jobs = wait_for(lambda: client.call("GET", "/api/runners/jobs"), timeout=30)
        assert any(str(j.get("id", j.get("job_id"))) == str(job) for j in jobs), jobs
        [scale_set] = client.call("GET", "/api/runners/scale-sets")
        assert scale_set["name"] == "keel-c2-m4"
        metrics = client.request("GET", "/api/metrics")[2].decode()
        assert "keel_runners_desired" in metrics and 'keel_leader{node="pve1"} 1' in metrics
        # a webhook through keel-web reaches the runners, which check its signature
        answer = requests.post(f"{url}/webhook", data=b'{"action": "queued"}', verify=sim.cert, timeout=30,
                               headers={"X-GitHub-Event": "workflow_job", "X-Hub-Signature-256": "sha256=00",
                                        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"})
        assert answer.status_code in (401, 404), answer.text     # 404 when no webhook secret is set
        assert "runners do not run" not in answer.text
    finally:
        web.stop()
        engine.stop()
    assert "ghs_" not in engine.log_text() and "BEGIN" not in engine.log_text()
    # stopping the engine stopped the runners cleanly: no session left open
    assert wait_for(lambda: gh(sim, "GET", "state")["sessions"] == [], timeout=30)
    time.sleep(0.1)
