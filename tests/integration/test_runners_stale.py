"""No decision on stale GitHub data: while GitHub is rate limited or not answering, no runner
is judged by its silence and the status says so with until or since when; GitHub's count of
assigned jobs is checked against the jobs Keel tracks, so phantom jobs get no VMs."""

from __future__ import annotations

import pytest

from runners_helpers import scenario

RESERVE = {"name": "keel-c2-m4", "max_runners": 4, "min_runners": 2, "start_timeout": "60s",
           "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
FAST = {"lost_runner": "60s", "session_timeout": "60s"}


@pytest.fixture
def kit(kits):
    return kits([RESERVE], scenario(github=FAST))


def removed(kit, reason: str) -> float:
    return kit.service.meters.count("keel_runners_removed_total", reason=reason)


def phases(kit) -> set[str]:
    return {r.phase for r in kit.service.runners.values()}


def test_a_rate_limit_keeps_runners_that_connected_while_keel_could_not_look(kit):
    kit.step()
    while phases(kit) != {"ready"}:                   # the reserve booted, JIT configs written ...
        kit.step(1)
    reserve = set(kit.service.runners)
    assert all(r.connected_at is None for r in kit.service.runners.values())   # ... not connected yet
    kit.gh("POST", "faults", {"rate_limit": {"count": 1, "status": 429, "retry_after": 90}})
    kit.step(1)                                       # the next call to GitHub is told to wait 90 s
    blocked = kit.service.status()
    [state] = blocked["scale_sets"]
    assert state["state"] == "RATE LIMITED" and "until" in state["details"][0]
    assert blocked["github_state"]["until"] == blocked["blocked_until"]
    kit.settle(85)                                    # past start_timeout: Keel heard nothing of them
    assert set(kit.service.runners) == reserve and removed(kit, "never_connected") == 0
    kit.settle(15)                                    # the block is over: the listing shows them online
    assert set(kit.service.runners) == reserve and removed(kit, "never_connected") == 0
    assert {r["state"] for r in kit.service.status()["runners"]} == {"idle"}
    assert kit.service.status()["scale_sets"][0]["state"] == "LISTENING"


def test_an_outage_neither_loses_runners_whose_jobs_succeeded_nor_says_listening(kit):
    kit.step()
    kit.queue("keel-c2-m4", duration=30, count=2)
    kit.settle(20)
    assert {r["state"] for r in kit.service.status()["runners"]} == {"busy", "idle"}
    kit.gh("POST", "faults", {"outage": {"seconds": 90}})
    kit.step(1)
    [state] = kit.service.status()["scale_sets"]
    assert state["state"] == "DEGRADED" and "no runner is judged" in state["details"][0]
    assert "keel_github_reachable 0" in kit.service.metrics()
    kit.settle(40)                                    # the jobs end behind the outage; their VMs stop
    busy_vms = [v for v in kit.vms().values() if v["status"] == "running"]
    assert len(busy_vms) == 2                         # the idle reserve; the two that ran jobs are gone
    assert removed(kit, "never_connected") == removed(kit, "disconnected") == 0
    assert kit.service.meters.count("keel_runners_lost_total") == 0
    assert kit.service.verdicts                       # why they ended waits for GitHub
    kit.settle(60)                                    # GitHub answers again
    assert kit.service.meters.count("keel_runners_lost_total") == 0
    assert removed(kit, "job_completed") == 2 and not kit.service.verdicts
    assert all(j["result"] == "succeeded" for j in kit.jobs().values())
    assert kit.service.status()["scale_sets"][0]["state"] == "LISTENING"
    assert {r["state"] for r in kit.service.status()["runners"]} == {"idle"}


def test_phantom_assigned_jobs_get_no_vms_and_idle_runners_beyond_demand_go(kits):
    small = dict(RESERVE, min_runners=0, max_runners=8)
    kit = kits([small], scenario(github=FAST))
    kit.step()
    kit.gh("POST", "faults", {"stale_assigned": 3})   # GitHub counts 3 jobs that are not there
    [job] = kit.queue("keel-c2-m4", duration=20)
    kit.settle(15)
    assert len(kit.clones()) == 1, "one job, one VM"
    [state] = kit.service.status()["scale_sets"]
    assert state["desired"] == 1 and state["unconfirmed"] == 3
    assert 'keel_jobs_unconfirmed{scale_set="keel-c2-m4"} 3' in kit.service.metrics()
    assert any("has not heard of" in d for d in state["details"])
    kit.settle(40)
    assert kit.jobs()[job]["result"] == "succeeded" and kit.vms() == {}
    assert len(kit.clones()) == 1                     # nothing kept idle for the phantoms
    assert any(r["path"].endswith("/actions/runs") for r in kit.github_requests())   # it looked


def test_the_queue_shows_waiting_jobs_with_their_age_repository_and_workflow(kits):
    small = dict(RESERVE, min_runners=0, max_runners=1)
    kit = kits([small], scenario(github=FAST))
    kit.step()
    kit.queue("keel-c2-m4", duration=60, count=3)
    kit.settle(5)
    status = kit.service.status()
    assert status["queued"] == 1            # GitHub assigns what there is room for (1); it waits for its runner
    [waiting] = status["queue"]
    assert waiting["repo"] == "my-org/app" and waiting["workflow"] == ".github/workflows/ci.yml"
    assert waiting["scale_set"] == "keel-c2-m4" and waiting["age_s"] >= 0
    assert status["scale_sets"][0]["waiting"] == 1
    from keel.runners.status import render
    text = render(status, status["time"])
    assert "WAITING JOB" in text and "my-org/app" in text and ".github/workflows/ci.yml" in text
