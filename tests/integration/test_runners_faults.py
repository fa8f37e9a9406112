"""Faults, through the simulator and its fake GitHub.  Every test ends with no runner VM and
no runner registration left, and no limit exceeded (from the simulator's request log)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from keel.runners import fleet
from runners_helpers import scenario

SMALL = {"name": "keel-c2-m4", "max_runners": 3, "start_timeout": "60s",
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
FAST = {"lost_runner": "60s", "session_timeout": "60s"}


@pytest.fixture
def kit(kits):
    return kits([SMALL], scenario(github=FAST))


def run_until(kit, done, limit: int = 400, dt: float = 1.0) -> None:
    for _ in range(limit):
        kit.step(dt)
        if done():
            return
    raise AssertionError("it never settled")


def all_done(kit):
    return lambda: all(j["status"] == "completed" for j in kit.jobs().values()) and not kit.vms() \
        and not kit.registrations() and not kit.service.runners


def test_a_runner_that_never_connects_is_replaced(kit):
    kit.step()
    kit.gh("POST", "faults", {"never_connect": 1})
    [job] = kit.queue("keel-c2-m4", duration=20)
    kit.settle(30)
    assert kit.jobs()[job]["status"] == "queued" and len(kit.vms()) == 1
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    assert kit.service.meters.count("keel_runners_removed_total", reason="never_connected") == 1
    assert kit.service.meters.count("keel_runners_created_total") == 2
    kit.assert_clean()


def test_a_runner_that_crashes_mid_job_is_deleted_and_its_registration_swept(kit):
    kit.step()
    kit.gh("POST", "faults", {"crash_mid_job": 1})
    [job] = kit.queue("keel-c2-m4", duration=40)
    kit.settle(36)                      # boot, start, crash half-way: the VM is off, the job running
    crashed = kit.clones()[0]
    assert kit.jobs()[job]["status"] == "in_progress"
    assert int(crashed["params"]["newid"]) not in kit.vms()       # the ended VM is gone
    busy = [r for r in kit.registrations() if r["name"] == crashed["params"]["name"]]
    assert busy and busy[0]["busy"] and busy[0]["status"] == "offline"   # its registration still busy
    run_until(kit, all_done(kit))       # GitHub fails the job; the registration is then swept
    assert kit.jobs()[job]["result"] == "failed"
    assert kit.service.meters.count("keel_runners_lost_total", reason="ended") == 1
    assert kit.service.meters.count("keel_runners_removed_total", reason="orphaned") == 1
    kit.assert_clean()


def test_a_ghost_whose_vm_stays_up_is_deleted(kit):
    kit.step()
    kit.gh("POST", "faults", {"ghost": 1})
    [job] = kit.queue("keel-c2-m4", duration=10)
    kit.settle(30)
    assert kit.jobs()[job]["status"] == "completed" and kit.registrations() == []
    assert len(kit.vms()) == 1          # the runner exited; its VM did not power off
    run_until(kit, all_done(kit))
    assert kit.service.meters.count("keel_runners_removed_total", reason="job_completed") == 1
    kit.assert_clean()


def test_a_ghost_nobody_heard_of_is_found_by_its_missing_registration(kit):
    kit.step()
    kit.gh("POST", "faults", {"ghost": 1, "lose_messages": 3})
    kit.queue("keel-c2-m4", duration=10)
    run_until(kit, all_done(kit))       # JobAssigned/Started/Completed lost: statistics and the listing
    assert kit.service.meters.count("keel_runners_removed_total", reason="unregistered") == 1
    kit.assert_clean()


@pytest.mark.parametrize("fault", [{"status": 429, "retry_after": 40},
                                   {"status": 403, "reset_in": 40}])
def test_rate_limits_are_waited_out_without_a_single_call(kit, fault):
    kit.step()
    kit.gh("POST", "faults", {"rate_limit": {"count": 1, **fault}})
    seen = len(kit.github_requests())
    [job] = kit.queue("keel-c2-m4", duration=10)
    kit.step(0)
    limited = [r for r in kit.github_requests()[seen:] if r["status"] == fault["status"]]
    assert len(limited) == 1
    hit_at = limited[0]["time"]
    kit.settle(39)
    calls = [r for r in kit.github_requests() if r["seq"] > limited[0]["seq"]]
    assert calls == [], f"called GitHub while told to wait: {calls}"
    assert kit.service.status()["blocked_until"] == hit_at + 40
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    kit.assert_clean()


def test_an_expired_token_is_renewed_and_the_call_made_once_more(kit):
    kit.step()
    kit.gh("POST", "tokens/expire")
    seen = kit.github_requests()[-1]["seq"]
    [job] = kit.queue("keel-c2-m4", duration=10)
    run_until(kit, all_done(kit))
    after = kit.github_requests(seen)
    statuses = [(r["path"].split("/")[-1] if r["path"].startswith("/_msgq") else r["path"], r["status"])
                for r in after]
    assert any(s == 401 for _, s in statuses)                            # the queue token, then REST
    assert any(p.endswith("/access_tokens") and s == 201 for p, s in statuses)
    assert any("/sessions/" in p and s == 200 for p, s in statuses)      # the session refreshed
    assert kit.jobs()[job]["result"] == "succeeded"
    kit.assert_clean()


def test_lost_messages_are_made_up_by_the_reconcile_backstop(kit):
    kit.step()
    kit.gh("POST", "faults", {"lose_messages": 1})
    [job] = kit.queue("keel-c2-m4", duration=10)
    assert kit.service.poll_once() == 0          # the JobAssigned message never comes
    kit.service.reconcile_once()                 # the statistics say one job is assigned ...
    assert kit.clones() == []                    # ... that Keel knows nothing of: no runner yet
    assert kit.service.status()["scale_sets"][0]["unconfirmed"] == 1
    kit.advance(5)
    kit.service.reconcile_once()                 # GitHub's REST API shows it queued: a runner
    assert len(kit.clones()) == 1
    assert any(r["path"].endswith("/actions/runs") for r in kit.github_requests())
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    kit.assert_clean()


def test_a_lost_job_completed_message_is_made_up_by_the_rest_api(kit):
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=10)
    kit.settle(20)                                # assigned and started: both messages came
    kit.gh("POST", "faults", {"lose_messages": 5})
    run_until(kit, all_done(kit))                 # JobCompleted never comes; the VM powers off
    kit.settle(70)                                # two reconcile intervals later, GitHub is asked
    [seen] = kit.service.status()["jobs"]
    assert (seen["state"], seen["result"]) == ("completed", "succeeded")
    assert any(r["path"].endswith(f"/actions/jobs/{job}") for r in kit.github_requests())
    kit.assert_clean()


def test_duplicated_messages_change_nothing(kit):
    kit.step()
    kit.gh("POST", "faults", {"duplicate_messages": 10})
    kit.queue("keel-c2-m4", duration=10, count=2)
    run_until(kit, all_done(kit))
    assert len(kit.clones()) == 2
    assert kit.service.meters.count("keel_jobs_started_total") == 2
    assert kit.service.meters.count("keel_jobs_completed_total") == 2
    kit.assert_clean()


def changed(settings, **changes):
    """The settings with the (one) scale set changed, as a config reload would give them."""
    return replace(settings, scale_sets=(replace(settings.scale_sets[0], **changes),))


def test_github_refuses_to_remove_a_runner_it_just_gave_a_job(kit):
    kit.service.settings = kit.settings = changed(kit.settings, min_runners=1)
    kit.settle(25)
    [runner] = kit.service.status()["runners"]
    assert runner["state"] == "idle"
    [job] = kit.queue("keel-c2-m4", duration=30)    # GitHub gives it to the idle runner at once
    assert kit.jobs()[job]["status"] == "in_progress"
    kit.service.settings = changed(kit.settings, paused=True)
    with kit.service.lock:                            # light passes: Keel has not heard of the job yet
        fleet.run_pass(kit.service, full=False)
        fleet.run_pass(kit.service, full=False)
    [runner] = kit.service.status()["runners"]
    assert runner["state"] == "busy" and runner["reason"] is None          # 422: left to its job
    assert [e["kind"] for e in kit.service.store.events(5)][0] == "busy"
    assert [r["status"] for r in kit.github_requests() if r["method"] == "DELETE"] == [422]
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    kit.assert_clean()


def test_max_age_removes_even_a_busy_runner(kits):
    kit = kits([dict(SMALL, max_age="2m")], scenario(github=FAST))
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=3600)
    kit.settle(130)
    first = int(kit.clones()[0]["params"]["newid"])
    assert kit.jobs()[job]["status"] == "in_progress" and first not in kit.vms()
    run_until(kit, lambda: not kit.vms() and not kit.registrations() and
              kit.jobs()[job]["status"] == "completed")
    assert kit.service.meters.count("keel_runners_removed_total", reason="expired") == 1
    kit.assert_clean()


def test_a_failing_endpoint_mid_creation_is_retried(kit):
    kit.step()
    kit.sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/*/qemu/*/agent/file-write", "method": "POST", "error_rate": 1, "count": 2,
         "status": 500, "message": "simulated: agent busy"}]})
    [job] = kit.queue("keel-c2-m4", duration=10)
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    assert kit.service.meters.count("keel_runners_created_total") == 1
    kit.assert_clean()


def test_a_vmid_taken_between_nextid_and_the_clone_is_retried_with_the_next(kit):
    kit.step()
    kit.sim.control("POST", "faults", {"endpoints": [
        {"path": "/nodes/*/qemu/9000/clone", "method": "POST", "error_rate": 1, "count": 1,
         "status": 500, "message": "unable to create VM 100: config file already exists"}]})
    [job] = kit.queue("keel-c2-m4", duration=10)
    kit.step(0)
    clones = [r for r in kit.sim.requests_log(0) if r["path"].endswith("/clone")]
    assert [c["status"] for c in clones] == [500, 200]
    assert kit.service.meters.count("keel_runners_created_total") == 1
    run_until(kit, all_done(kit))
    assert kit.jobs()[job]["result"] == "succeeded"
    kit.assert_clean()


def test_a_size_that_can_never_fit_is_refused_as_never_and_holds_no_one(kits):
    huge = {"name": "keel-huge", "max_runners": 2, "priority": 10,
            "providers": [{"name": "pve", "runner": {"cores": 4, "memory": "200GiB"}}]}
    kit = kits([huge, SMALL], scenario(github=FAST))
    kit.step()
    kit.queue("keel-huge", duration=10)
    kit.queue("keel-c2-m4", duration=10)
    kit.step(0)
    pve = kit.service.status()["providers"][0]
    assert pve["last_refusal"]["kind"] == "never" and "could ever hold" in pve["last_refusal"]["message"]
    assert pve["state"] == "OK"                       # no hold: only "full" holds others back
    assert [c["params"]["name"].rsplit("-", 1)[0] for c in kit.clones()] == ["keel-c2-m4"]
    kit.gh("POST", f"jobs/{min(kit.jobs())}/cancel")
    run_until(kit, all_done(kit))
    kit.assert_clean()
