"""``workflow_job`` webhooks over HTTP from the fake GitHub: HMAC-SHA256 checked on the exact
bytes, a faster signal than the message session, idempotent; and the loop (``run``) whole."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from keel.runners import fleet
from keel.runners.endpoint import Endpoint
from keel.runners.webhooks import signature
from runners_helpers import scenario

SMALL = {"name": "keel-c2-m4", "max_runners": 3,
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
SECRET = "s3cr3t-webhook-value"


@pytest.fixture
def kit(kits, tmp_path):
    secret = tmp_path / "webhook-secret"
    secret.write_text(SECRET + "\n")
    kit = kits([SMALL], scenario(github={"lost_runner": "60s"}),
               webhook={"secret_path": str(secret), "listen": "127.0.0.1:0"})
    endpoint = Endpoint(kit.service, "127.0.0.1:0").start()
    kit.gh("POST", "hooks", {"url": f"{endpoint.url}/webhook", "secret": SECRET})
    kit.extra["endpoint"] = endpoint
    yield kit
    endpoint.stop()


def light_pass(kit) -> None:
    """What the loop does when a webhook arrives: take it in, and a pass without GitHub's listing
    or statistics."""
    with kit.service.lock:
        kit.service._drain()
        fleet.run_pass(kit.service, full=False)


def deliveries(kit) -> list[dict]:
    kit.gh("POST", "deliveries/flush")
    return kit.gh("GET", "deliveries")


def test_a_webhook_brings_a_runner_before_any_message(kit):
    kit.step()
    kit.gh("POST", "faults", {"lose_messages": 5})     # the session hears nothing
    kit.queue("keel-c2-m4", duration=10)
    [queued] = deliveries(kit)
    assert (queued["action"], queued["status"]) == ("queued", 202)
    light_pass(kit)
    assert len(kit.clones()) == 1
    assert kit.service.meters.count("keel_webhooks_total", outcome="accepted") == 1


def test_a_bad_signature_is_refused_and_changes_nothing(kit):
    kit.step()
    kit.gh("POST", "faults", {"lose_messages": 5, "webhook_bad_signature": 1})
    kit.queue("keel-c2-m4", duration=10)
    [queued] = deliveries(kit)
    assert queued["status"] == 401
    light_pass(kit)
    assert kit.clones() == [] and kit.service.status()["scale_sets"][0]["desired"] == 0
    body = b'{"action": "queued", "workflow_job": {"id": 1, "labels": ["keel-c2-m4"]}}'
    url = kit.extra["endpoint"].url + "/webhook"
    good = {"X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "d-1",
            "X-Hub-Signature-256": signature(SECRET.encode(), body)}
    assert requests.post(url, data=body + b" ", headers=good, timeout=5).status_code == 401   # other bytes
    assert requests.post(url, data=body, headers={**good, "X-Hub-Signature-256": "sha1=00"},
                         timeout=5).status_code == 401
    assert requests.post(url, data=body, headers={"X-GitHub-Event": "workflow_job"}, timeout=5).status_code == 401
    assert kit.service.meters.count("keel_webhooks_total", outcome="bad_signature") == 4
    assert kit.service.meters.count("keel_webhooks_total", outcome="accepted") == 0


def test_a_delivery_seen_twice_is_taken_once(kit):
    kit.step()
    kit.gh("POST", "faults", {"lose_messages": 5, "webhook_duplicate": 1})
    kit.queue("keel-c2-m4", duration=10)
    first, second = deliveries(kit)
    assert first["guid"] == second["guid"] and (first["status"], second["status"]) == (202, 200)
    light_pass(kit)
    light_pass(kit)
    assert len(kit.clones()) == 1
    assert kit.service.meters.count("keel_webhooks_total", outcome="duplicate") == 1


def test_webhooks_follow_the_job_and_the_vm_goes(kit):
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=10)
    for _ in range(80):
        kit.step(1)
        if kit.jobs()[job]["status"] == "completed" and not kit.vms() and not kit.service.runners:
            break
    actions = [d["action"] for d in deliveries(kit)]
    assert actions == ["queued", "in_progress", "completed"]
    assert all(d["status"] in (200, 202) for d in deliveries(kit))
    kit.assert_clean()


def test_the_loop_runs_and_stops_cleanly(kit):
    kit.gh("POST", "faults", {})
    stop = threading.Event()
    thread = threading.Thread(target=kit.service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not kit.github_state()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        [job] = kit.queue("keel-c2-m4", duration=10)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kit.advance(1)
            time.sleep(0.1)
            if kit.jobs()[job]["status"] == "completed" and not kit.vms() and not kit.service.runners:
                break
        assert kit.jobs()[job]["result"] == "succeeded"
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert kit.github_state()["sessions"] == []              # closed on the way out
    assert kit.service.store.get("status")["scale_sets"][0]["name"] == "keel-c2-m4"
    kit.assert_clean()


def test_a_signed_body_replayed_under_a_new_delivery_id_or_none_is_not_acted_on_again(kit):
    """An attacker who captured one signed delivery cannot make Keel act on it twice: the
    delivery id is required, and the job id with its action is remembered too."""
    kit.step()
    body = b'{"action": "queued", "workflow_job": {"id": 4242, "labels": ["keel-c2-m4"]}}'
    url = kit.extra["endpoint"].url + "/webhook"
    signed = {"X-GitHub-Event": "workflow_job", "X-Hub-Signature-256": signature(SECRET.encode(), body)}
    assert requests.post(url, data=body, headers={**signed, "X-GitHub-Delivery": "d-a"}, timeout=5).status_code == 202
    replay = requests.post(url, data=body, headers={**signed, "X-GitHub-Delivery": "d-b"}, timeout=5)
    assert replay.status_code == 200 and "seen before" in replay.text
    missing = requests.post(url, data=body, headers=signed, timeout=5)
    assert missing.status_code == 400 and "X-GitHub-Delivery" in missing.text
    assert kit.service.meters.count("keel_webhooks_total", outcome="accepted") == 1
    assert kit.service.meters.count("keel_webhooks_total", outcome="duplicate") == 1
