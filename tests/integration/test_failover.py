"""Three engines, one cluster, one lock directory: one leads; when it is killed another
takes over within two lock periods, and at no moment do two lead."""

from __future__ import annotations

import os
import signal
import time

import yaml

from conftest import DEMO_SCENARIO
from keel.errors import KeelError
from service_helpers import start_engine, wait_for, write_config

EXPIRY_S = 4.0          # write_config's lock_expiry


def scenario_with_a_token_per_engine():
    """The demo cluster, with one API token per engine, so the request log tells who wrote."""
    data = yaml.safe_load(DEMO_SCENARIO.read_text())
    keel = next(u for u in data["users"] if u["userid"] == "keel@pve")
    for name in NODES:
        keel["tokens"].append({"id": name, "secret": SECRET, "privsep": True})
        data["acl"].append({"path": "/", "role": "Administrator", "token": f"keel@pve!{name}"})
    return data


NODES = ("pve1", "pve2", "pve3")
SECRET = "0f0e0d0c-0b0a-4908-8706-050403020100"


def test_a_killed_leader_is_replaced_within_two_lock_periods_and_never_two_lead(sim_factory, tmp_path):
    sim = sim_factory(scenario_with_a_token_per_engine(), clock_factor=10)
    lock, shared = tmp_path / "pmxcfs" / "lock" / "keel-leader", tmp_path / "pmxcfs" / "keel"
    engines = []
    try:
        for name in NODES:
            engines.append((name, *start_engine(write_config(
                tmp_path / name, sim, node=name, lock=lock, shared=shared,
                balancing={"enable": True, "hold": 1, "interval": "1s", "limits": {"moves": 3}},
                api_token=f"keel@pve!{name}={SECRET}"))))

        def leaders():
            found = []
            for name, service, client in engines:
                if service.process.poll() is not None:
                    continue
                try:
                    if client.call("GET", "/api/status")["leader"]:
                        found.append(name)
                except KeelError:
                    pass
            assert len(found) <= 1, f"two leaders at once: {found}"
            return found

        first = wait_for(leaders, timeout=30)[0]
        # the leader balances: wait until it has started migrating, then kill it mid-plan
        wait_for(lambda: any(e["method"] != "GET" and e["user"] == f"keel@pve!{first}"
                             for e in sim.requests_log()), timeout=60)
        assert leaders() == [first]
        service = next(s for n, s, _ in engines if n == first)
        os.killpg(service.process.pid, signal.SIGKILL)     # gunicorn master and worker, no goodbye
        service.process.wait()
        killed_at = time.monotonic()
        while True:
            now = leaders()
            if now:
                break
            assert time.monotonic() - killed_at < 2 * EXPIRY_S + 2, "nobody took over"
            time.sleep(0.1)
        took = time.monotonic() - killed_at
        assert now[0] != first and took <= 2 * EXPIRY_S + 2
        for _ in range(15):
            leaders()
            time.sleep(0.2)
        # the new leader acts too; in the request log, writes come from one engine at a time
        wait_for(lambda: any(e["method"] != "GET" and e["user"] == f"keel@pve!{now[0]}"
                             for e in sim.requests_log()), timeout=90)
        writers = [e["user"] for e in sim.requests_log() if e["method"] != "GET" and e["user"]
                   and e["user"].startswith("keel@pve!")]
        runs = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
        assert runs == [f"keel@pve!{first}", f"keel@pve!{now[0]}"], runs
        # the new leader says so in its status, and followers name it
        follower = next(c for n, s, c in engines if n not in (first, now[0]))
        assert follower.call("GET", "/api/status")["leader_node"] == now[0]
        # followers serve reads, and refuse to act, naming the leader
        assert follower.call("GET", "/api/plan")["verdict"]
        try:
            follower.call("POST", "/api/apply", {})
            raise AssertionError("a follower applied a plan")
        except KeelError as err:
            assert f"{now[0]} leads" in str(err)
    finally:
        for _, service, _ in engines:
            service.stop()
