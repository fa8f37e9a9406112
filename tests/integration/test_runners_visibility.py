"""What people see: Prometheus metrics, ``status`` in plain words, and never a secret in any of
it (logs, status, metrics, the database, reprs, error messages)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

import pytest
import requests

from keel.runners.endpoint import Endpoint
from keel.runners.status import render
from runners_helpers import TOKEN, scenario

SMALL = {"name": "keel-c2-m4", "max_runners": 2,
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
LINE = re.compile(r'^[a-z_][a-z0-9_]*(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+-]+(Inf)?$|^[a-z_][a-z0-9_]*'
                  r'(\{([a-z_]+="[^"]*",?)*\})? \+Inf$')
WEBHOOK_SECRET = "hush-hush-webhook"


def run_job(kit, duration: float = 10) -> int:
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=duration)
    for _ in range(80):
        kit.step(1)
        if kit.jobs()[job]["status"] == "completed" and not kit.vms() and not kit.service.runners:
            return job
    raise AssertionError("the job did not go through")


def test_the_metrics_in_prometheus_text_format(kits):
    kit = kits([SMALL])
    run_job(kit)
    text = kit.service.metrics()
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or LINE.match(line), line
    assert '# TYPE keel_job_runner_wait_seconds histogram' in text
    assert 'keel_runners_desired{scale_set="keel-c2-m4"} 0' in text
    for state in ("creating", "starting", "idle", "busy", "removing"):
        assert f'keel_runners_current{{scale_set="keel-c2-m4",state="{state}"}} 0' in text
    assert 'keel_job_runner_wait_seconds_count{scale_set="keel-c2-m4"} 1' in text
    assert 'keel_job_runner_wait_seconds_bucket{scale_set="keel-c2-m4",le="15"} 1' in text
    assert 'keel_job_runner_wait_seconds_bucket{scale_set="keel-c2-m4",le="10"} 0' in text
    assert 'keel_runners_removed_total{provider="pve",reason="job_completed",scale_set="keel-c2-m4"} 1' in text
    assert 'keel_provider_calls_total{call="create",provider="pve",result="ok"} 1' in text
    assert 'keel_jobs_completed_total{result="succeeded",scale_set="keel-c2-m4"} 1' in text
    assert re.search(r'keel_github_requests_total\{code="200"\} \d+', text)
    assert 'keel_provider_reachable{provider="pve"} 1' in text
    endpoint = Endpoint(kit.service, "127.0.0.1:0", ("metrics",)).start()
    try:
        response = requests.get(endpoint.url + "/metrics", timeout=5)
        assert response.status_code == 200 and "keel_runners_desired" in response.text
        assert requests.post(endpoint.url + "/webhook", data=b"{}", timeout=5).status_code == 404
    finally:
        endpoint.stop()


def test_refusals_and_backoff_are_counted(kits):
    huge = dict(SMALL, name="keel-huge", providers=[{"name": "pve", "runner": {"cores": 2, "memory": "300GiB"}}])
    kit = kits([huge])
    kit.step()
    kit.queue("keel-huge", duration=10)
    kit.step(0)
    text = kit.service.metrics()
    assert 'keel_provider_refusals_total{kind="never",provider="pve",scale_set="keel-huge"} 1' in text
    assert 'keel_provider_backoff_seconds{provider="pve",scale_set="keel-huge"} 15' in text
    assert 'keel_scale_up_failures_total{reason="no_capacity",scale_set="keel-huge"} 1' in text
    status = kit.service.status()["scale_sets"][0]
    assert status["state"] == "BACKING OFF" and "could ever hold" in status["details"][0]
    kit.gh("POST", f"jobs/{min(kit.jobs())}/cancel")


def test_paused_and_off_schedule_in_plain_words(kits):
    paused = kits([dict(SMALL, paused=True, min_runners=1)])
    paused.step()
    paused.queue("keel-c2-m4", duration=10)
    paused.settle(3)
    [entry] = paused.service.status()["scale_sets"]
    assert (entry["state"], entry["desired"], entry["max"]) == ("PAUSED", 0, 0) and paused.clones() == []
    assert paused.github_state()["scale_sets"][0]["capacity"] == 0        # GitHub is told it has no room
    weekend = {"timezone": "UTC", "windows": [{"days": ["mon"], "from": "00:00", "to": "24:00",
                                               "max_runners": 0}]}        # 2 March 2026 is a Monday
    off = kits([dict(SMALL, schedule=weekend)])
    off.step()
    [entry] = off.service.status()["scale_sets"]
    assert entry["state"] == "OFF SCHEDULE" and entry["off_schedule"]
    text = render(off.service.status(), off.clock.t)
    assert "OFF SCHEDULE" in text and "a schedule window with max_runners 0 is in force" in text
    assert 'keel_scale_set_paused{scale_set="keel-c2-m4"} 1' in off.service.metrics()


def test_no_secret_ever_shows(kits, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secret_file = tmp_path / "hook-secret"
    secret_file.write_text(WEBHOOK_SECRET)
    kit = kits([SMALL], scenario(github={"lost_runner": "30s"}),
               webhook={"secret_path": str(secret_file), "listen": "127.0.0.1:0"})
    endpoint = Endpoint(kit.service, "127.0.0.1:0").start()
    try:
        kit.gh("POST", "hooks", {"url": endpoint.url + "/webhook", "secret": WEBHOOK_SECRET})
        kit.step()
        kit.gh("POST", "tokens/expire")
        kit.gh("POST", "faults", {"rate_limit": {"count": 1, "status": 429, "retry_after": 5},
                                  "webhook_bad_signature": 1})
        run_job(kit)
        kit.gh("POST", "deliveries/flush")
    finally:
        endpoint.stop()
    key_lines = [line for line in (tmp_path / "kit0" / "app.pem").read_text().splitlines()
                 if line and not line.startswith("-----")]
    seen = "\n".join([
        caplog.text, json.dumps(kit.service.status()), kit.service.metrics(), repr(kit.settings),
        repr(kit.service.github), repr([s.session for s in kit.service.sets.values()]),
        render(kit.service.status(), kit.clock.t), json.dumps(kit.service.store.events(1000)),
        (kit.store).read_bytes().decode("latin-1"),
        *[p.read_bytes().decode("latin-1") for p in kit.store.parent.glob("keel.db-*")],
    ])
    forbidden = [WEBHOOK_SECRET, TOKEN.split("=")[1], "ghs_", "eyJydW5uZXJfaWQi", "RemoteAuth A",
                 *key_lines[:3]]
    for secret in forbidden:
        assert secret not in seen, f"a secret shows: {secret[:12]}..."
    assert "encodedJITConfig" not in seen and "queue_token" not in repr(kit.service.sets)
    config = kit.sim.client(TOKEN).get("/cluster/resources", type="vm")
    assert config == [] or all("eyJ" not in str(v.get("description", "")) for v in config)
    broken = replace(kit.settings.github, app_private_key_path=str(tmp_path / "missing.pem"))
    from keel.runners.github import GitHubClient
    with pytest.raises(Exception) as caught:
        GitHubClient(broken, kit.clock).list_runners()
    assert "missing.pem" in str(caught.value) and "BEGIN" not in str(caught.value)


def test_on_a_pve_node_files_outside_pmxcfs_are_named_with_where_to_copy_them(kits, tmp_path, monkeypatch):
    from keel.runners import state
    monkeypatch.setattr(state, "PMXCFS", tmp_path)            # as if on a node: /etc/pve is there
    kit = kits([SMALL])
    status = kit.service.status()
    [notice] = [n for n in status["notices"] if "app_private_key_path" in n]
    assert "is on this node only" in notice and "/etc/pve/priv/keel/github-app.pem" in notice
    assert any("tls.ca_file" in n and "/etc/pve/keel/github-ca.pem" in n for n in status["notices"])
    assert notice in render(status, status["time"])
