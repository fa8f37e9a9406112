"""After a restart or a leader change Keel adopts its runner VMs by their tags and loses track
of none; one message session per scale set, so a second Keel stands by and touches nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from keel.runners.service import RunnerService
from keel.runners.settings import parse
from runners_helpers import TOKEN, scenario

SMALL = {"name": "keel-c2-m4", "max_runners": 4, "start_timeout": "60s",
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
FAST = {"lost_runner": "60s", "session_timeout": "60s"}


@pytest.fixture
def kit(kits):
    return kits([SMALL], scenario(github=FAST))


def run_until_clean(kit, limit: int = 300) -> None:
    for _ in range(limit):
        kit.step(1)
        if all(j["status"] == "completed" for j in kit.jobs().values()) and not kit.vms() \
                and not kit.registrations() and not kit.service.runners:
            return
    raise AssertionError("it never settled")


def tracked(kit) -> set[int]:
    return {r.vmid for r in kit.service.runners.values()}


def test_a_restart_picks_up_where_it_left(kit):
    kit.step()
    kit.queue("keel-c2-m4", duration=60, count=3)
    kit.settle(20)
    assert len(kit.vms()) == 3 and {r["state"] for r in kit.service.status()["runners"]} == {"busy"}
    kit.restart()                                    # same store, sessions closed cleanly
    kit.step()
    assert tracked(kit) == set(kit.vms())
    assert {r["state"] for r in kit.service.status()["runners"]} == {"busy"}
    run_until_clean(kit)
    assert kit.service.meters.count("keel_runners_removed_total", reason="job_completed") == 3
    kit.assert_clean()


def test_a_new_leader_adopts_the_vms_by_their_tags(kit, tmp_path):
    kit.step()
    kit.queue("keel-c2-m4", duration=60, count=2)
    kit.settle(20)
    vms = set(kit.vms())
    kit.service.close()
    other = RunnerService(kit.settings, kit.sim.client(TOKEN), tmp_path / "other-node.db", clock=kit.clock,
                          owner="keel@pve2")
    kit.service = other
    kit.step()
    assert tracked(kit) == vms
    assert all(r["adopted"] for r in other.status()["runners"])
    events = [e["kind"] for e in other.store.events(10)]
    assert events.count("adopted") == 2
    run_until_clean(kit)
    kit.assert_clean()


def test_a_crash_mid_creation_loses_nothing(kit, tmp_path):
    kit.step()
    kit.queue("keel-c2-m4", duration=30, count=2)
    kit.step(0)
    while {r["phase"] for r in kit.service.status()["runners"]} != {"boot"}:
        kit.step(1)                                  # VMs booting: their JIT configs are in memory only
    assert len(kit.vms()) == 2 and all(v["status"] == "running" for v in kit.vms().values())
    crashed = kit.service                            # no close(): its sessions stay open on GitHub
    kit.service = RunnerService(kit.settings, kit.sim.client(TOKEN), tmp_path / "after-crash.db",
                                clock=kit.clock, owner="keel@pve3")
    kit.step()
    assert kit.service.status()["scale_sets"][0]["state"] == "STANDBY"    # the old session is alive
    assert tracked(kit) == set()                     # not its scale set yet: touched not
    run_until_clean(kit)                             # the session times out; the adopted VMs that never
    assert kit.service.meters.count("keel_runners_removed_total", reason="never_connected") == 2
    assert all(j["result"] == "succeeded" for j in kit.jobs().values())  # got their JIT go; new ones run
    assert kit.service.meters.count("keel_runners_created_total") == 2
    kit.assert_clean()
    crashed.store.close()


def test_a_second_keel_stands_by_and_touches_nothing(kit, tmp_path):
    kit.step()
    second = RunnerService(kit.settings, kit.sim.client(TOKEN), tmp_path / "second.db", clock=kit.clock,
                           owner="keel@pve2")
    try:
        second.reconcile_once()
        kit.queue("keel-c2-m4", duration=20, count=2)
        for _ in range(30):
            kit.step(1)
            second.poll_once()
            second.reconcile_once()
        assert second.status()["scale_sets"][0]["state"] == "STANDBY"
        assert [e["kind"] for e in second.store.events(10)] == ["standby"]
        clones = kit.clones()
        assert len(clones) == 2 and all(c["user"] == "keel@pve!keel" for c in clones)
        assert {r.name for r in kit.service.runners.values()} >= {c["params"]["name"] for c in clones} or \
            not kit.service.runners
    finally:
        second.close()
    run_until_clean(kit)
    kit.assert_clean()


def test_the_runners_of_a_scale_set_that_left_the_config_are_removed(kit):
    spare = dict(SMALL, name="keel-spare", min_runners=1)
    both = parse({"github": {"url": kit.settings.github.url, "app_client_id": kit.settings.github.app_client_id,
                             "app_installation_id": kit.settings.github.app_installation_id,
                             "app_private_key_path": kit.settings.github.app_private_key_path,
                             "tls": {"ca_file": kit.settings.github.ca_file}},
                  "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000}}],
                  "scale_sets": [SMALL, spare]})
    kit.service.close()
    kit.settings = both
    kit.service = RunnerService(both, kit.sim.client(TOKEN), kit.store, clock=kit.clock)
    kit.settle(25)
    assert [r["state"] for r in kit.service.status()["runners"]] == ["idle"]
    kit.settings = replace(both, scale_sets=both.scale_sets[:1])      # keel-spare leaves the config
    kit.restart()
    run_until_clean(kit)
    assert kit.service.meters.count("keel_runners_removed_total", reason="requested") == 1
    kit.assert_clean()


def test_after_kill_9_the_next_keel_reclaims_the_session_and_adopts_the_runners(sim_factory, tmp_path):
    """``keel runners run`` killed with SIGKILL while jobs run: GitHub still holds its session.
    The next ``keel runners run`` on the same node closes that session at once (its process is
    gone) instead of standing by until GitHub times it out, and adopts the runners."""
    import signal
    import subprocess
    import sys
    import time

    import requests
    import yaml

    from conftest import python_env
    from runners_helpers import CLIENT_ID, INSTALLATION, write_private_key

    sim = sim_factory(scenario(start_time=None, boot="2s",
                               github={"long_poll": "1s", "connect": "1s", "session_timeout": "120s"}),
                      clock_factor=1.0)
    config = tmp_path / "keel.yaml"
    config.write_text(yaml.safe_dump({"runners": {
        "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID, "app_installation_id": INSTALLATION,
                   "app_private_key_path": str(write_private_key(tmp_path / "app.pem")),
                   "tls": {"ca_file": sim.cert}},
        "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
        "scale_sets": [SMALL], "reconcile_interval": "5s"}}))
    env = {**python_env(), "KEEL_PVE_URL": sim.url, "KEEL_PVE_CA_FILE": sim.cert, "KEEL_PVE_TOKEN": TOKEN}
    command = [sys.executable, "-m", "keel", "runners", "run", "--config", str(config),
               "--store", str(tmp_path / "keel.db")]

    def gh(method, path, body=None):
        return requests.request(method, f"{sim.url}/_github/{path}", json=body, verify=sim.cert, timeout=30).json()

    def until(what, timeout=60):
        deadline = time.monotonic() + timeout
        while not (value := what()):
            assert time.monotonic() < deadline, "it did not happen in time"
            time.sleep(0.1)
        return value

    first = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        [old] = until(lambda: gh("GET", "state")["sessions"])
        jobs = gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 20, "count": 3})["ids"]
        until(lambda: sum(1 for j in gh("GET", "state")["jobs"] if j["status"] == "in_progress") == 3)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    killed_at = gh("GET", "state")["time"]
    second = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        [new] = until(lambda: [s for s in gh("GET", "state")["sessions"] if s["id"] != old["id"]])
        assert new["last_poll"] - killed_at < 120, "it waited for GitHub to time the old session out"
        assert [s["id"] for s in gh("GET", "state")["sessions"]] == [new["id"]]
        until(lambda: all(j["status"] == "completed" for j in gh("GET", "state")["jobs"] if j["id"] in jobs)
              and not gh("GET", "state")["runners"] and not [
                  v for v in sim.client(TOKEN).get("/cluster/resources", type="vm")
                  if str(v.get("name", "")).startswith("keel-c2-m4-")], timeout=90)
    finally:
        second.send_signal(signal.SIGINT)
        second.wait(timeout=90)
    assert all(j["result"] == "succeeded" for j in gh("GET", "state")["jobs"] if j["id"] in jobs)
    from keel.runners.store import RunnerStore
    store = RunnerStore(tmp_path / "keel.db")
    try:
        events = store.events(200)
    finally:
        store.close()
    assert [e for e in events if e["kind"] == "reclaimed"]
    assert sum(1 for e in events if e["kind"] == "adopted") == 0     # the same store: it knew them
    assert sum(1 for e in events if e["kind"] == "removed" and e["detail"] == "job_completed") == 3


def test_a_new_leader_takes_over_the_session_a_lost_node_left(kit, tmp_path):
    """Under the engine the session is recorded in engine.shared_dir (pmxcfs): the next leader,
    on another node, closes the one the lost leader left and adopts its runners at once."""
    import json

    from keel.runners.shared import shared_path
    shared = tmp_path / "shared"
    old = RunnerService(kit.settings, kit.sim.client(TOKEN), tmp_path / "pve1.db", clock=kit.clock,
                        owner="keel@pve1", shared_dir=shared)
    old.reconcile_once()
    kit.queue("keel-c2-m4", duration=60, count=2)
    for _ in range(20):
        old.poll_once()
        old.reconcile_once()
        kit.advance(1)
    vms = set(kit.vms())
    assert len(vms) == 2
    data = json.loads(shared_path(shared).read_text())
    data["sessions"]["keel-c2-m4"]["host"] = "pve1"          # as pve1 wrote it, before it was lost
    shared_path(shared).write_text(json.dumps(data))
    old.store.close()                                         # pve1 is gone: its session stays on GitHub
    kit.service.close()
    kit.service = RunnerService(kit.settings, kit.sim.client(TOKEN), tmp_path / "pve2.db", clock=kit.clock,
                                owner="keel@pve2", shared_dir=shared)
    kit.step()
    assert kit.service.status()["scale_sets"][0]["state"] == "LISTENING"
    assert tracked(kit) == vms and [e["kind"] for e in kit.service.store.events(50)].count("reclaimed") == 1
    run_until_clean(kit)
    kit.assert_clean()
