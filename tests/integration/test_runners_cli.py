"""``keel runners run`` in the foreground (Ctrl-C stops it cleanly), ``keel runners status`` and
``events``, ``keel runners run --once``: the real command over a simulator running in real time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from io import StringIO

import pytest
import requests
import yaml

from conftest import python_env
from keel.cli import Env, main
from runners_helpers import CLIENT_ID, INSTALLATION, TOKEN, scenario, write_private_key

SMALL = {"name": "keel-c2-m4", "max_runners": 2,
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}


@pytest.fixture
def setup(sim_factory, tmp_path):
    sim = sim_factory(scenario(start_time=None, boot="2s", github={"long_poll": "1s", "connect": "1s"}),
                      clock_factor=1.0)
    key = write_private_key(tmp_path / "app.pem")
    config = tmp_path / "keel.yaml"
    config.write_text(yaml.safe_dump({"runners": {
        "github": {"url": f"{sim.url}/my-org", "app_client_id": CLIENT_ID,
                   "app_installation_id": INSTALLATION, "app_private_key_path": str(key),
                   "tls": {"ca_file": sim.cert}},
        "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "runners"}}],
        "scale_sets": [SMALL], "reconcile_interval": "5s",
        "metrics": {"enable": True, "listen": "127.0.0.1:0"}}}))
    env = {"KEEL_PVE_URL": sim.url, "KEEL_PVE_CA_FILE": sim.cert, "KEEL_PVE_TOKEN": TOKEN}
    return sim, config, tmp_path / "keel.db", env


def gh(sim, method, path, body=None):
    response = requests.request(method, f"{sim.url}/_github/{path}", json=body, verify=sim.cert, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_run_in_the_foreground_and_stop_with_ctrl_c(setup):
    sim, config, store, env = setup
    process = subprocess.Popen([sys.executable, "-m", "keel", "runners", "run", "--config", str(config),
                                "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**python_env(), **env})
    try:
        deadline = time.monotonic() + 20
        while not gh(sim, "GET", "state")["sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        [job] = gh(sim, "POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 3})["ids"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = gh(sim, "GET", "state")
            if [j for j in state["jobs"] if j["id"] == job][0]["status"] == "completed" and not state["runners"]:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the job did not complete")
        client = sim.client(TOKEN)
        deadline = time.monotonic() + 30                        # the VM powers off, Keel deletes it
        while any(v.get("name", "").startswith("keel-c2-m4-") for v in client.get("/cluster/resources",
                                                                                 type="vm")):
            assert time.monotonic() < deadline, "the VM was not deleted"
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=90)
    assert process.returncode == 0, err
    assert "keel runners: 1 scale set(s) (keel-c2-m4); metrics on http://127.0.0.1:" in err
    assert "Stopping: no new runners" in err and err.rstrip().endswith("keel runners: stopped")
    assert gh(sim, "GET", "state")["sessions"] == []
    assert "BEGIN" not in err and "ghs_" not in err and "encodedJITConfig" not in err

    out, err = StringIO(), StringIO()
    assert main(["runners", "status", "--store", str(store)], Env(out, err, None, {})) == 0
    assert "keel-c2-m4" in out.getvalue() and "LISTENING" in out.getvalue()
    out = StringIO()
    assert main(["runners", "status", "--json", "--store", str(store)], Env(out, err, None, {})) == 0
    assert json.loads(out.getvalue())["scale_sets"][0]["name"] == "keel-c2-m4"
    out = StringIO()
    assert main(["runners", "events", "--store", str(store)], Env(out, err, None, {})) == 0
    kinds = [line.split()[2] for line in out.getvalue().splitlines()]
    assert kinds[0] == "listening" and "created" in kinds and "removed" in kinds


def test_run_once_and_the_errors_a_person_sees(setup, tmp_path):
    sim, config, store, env = setup
    out, err = StringIO(), StringIO()
    assert main(["runners", "run", "--once", "--config", str(config), "--store", str(store)],
                Env(out, err, None, env)) == 0
    assert "keel-c2-m4" in out.getvalue()
    assert main(["runners", "status", "--store", str(tmp_path / "none.db")], Env(out, err, None, {})) == 4
    empty = tmp_path / "empty.yaml"
    empty.write_text("proxmox: {}\n")
    err = StringIO()
    assert main(["runners", "run", "--once", "--config", str(empty), "--store", str(store)],
                Env(StringIO(), err, None, env)) == 3
    assert "has no runners: section" in err.getvalue()
    assert main(["runners"], Env(StringIO(), StringIO(), None, {})) == 2


def test_pause_drain_and_resume_a_scale_set_of_the_running_loop(setup):
    sim, config, store, env = setup
    process = subprocess.Popen([sys.executable, "-m", "keel", "runners", "run", "--config", str(config),
                                "--store", str(store)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**python_env(), **env})

    def status_word() -> str:
        out = StringIO()
        main(["runners", "status", "--json", "--store", str(store)], Env(out, StringIO(), None, {}))
        return json.loads(out.getvalue() or "{}").get("scale_sets", [{}])[0].get("state", "")

    def until(what, timeout=30):
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, "it did not happen in time"
            time.sleep(0.2)

    try:
        until(lambda: status_word() == "LISTENING")
        out = StringIO()
        assert main(["runners", "pause", "keel-c2-m4", "--store", str(store)], Env(out, StringIO(), None, {})) == 0
        assert out.getvalue().startswith("keel-c2-m4: paused: no new runners")
        until(lambda: status_word() == "PAUSED")
        until(lambda: gh(sim, "GET", "state")["scale_sets"][0]["capacity"] == 0)   # GitHub: no room
        out = StringIO()
        main(["runners", "status", "--store", str(store)], Env(out, StringIO(), None, {}))
        assert "paused by" in out.getvalue() and "(keel runners pause)" in out.getvalue()
        assert main(["runners", "drain", "keel-c2-m4", "--store", str(store)], Env(StringIO(), StringIO(), None, {})) == 0
        until(lambda: status_word() == "DRAINING")
        assert main(["runners", "resume", "keel-c2-m4", "--store", str(store)], Env(StringIO(), StringIO(), None, {})) == 0
        until(lambda: status_word() == "LISTENING")
        until(lambda: gh(sim, "GET", "state")["scale_sets"][0]["capacity"] == 2)
        err = StringIO()
        assert main(["runners", "pause", "keel-nope", "--store", str(store)], Env(StringIO(), err, None, {})) == 3
        assert "no scale set named 'keel-nope' (the scale sets are keel-c2-m4)" in err.getvalue()
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=90)
    assert process.returncode == 0
