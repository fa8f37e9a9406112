"""``make demo``'s second half: ``keel demo --harness www`` serves the web UI harness with
keel-engine and keel-web on the simulator (the runners on its fake GitHub, CI jobs
queued now and then), prints where and how to log in, and stops everything on Ctrl-C
(or TERM)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from conftest import DEMO_PASSWORD, ROOT, python_env

WWW = ROOT / "www"


@pytest.mark.skipif(not (WWW / "node_modules" / "extjs-gpl").exists(),
                    reason="ExtJS is not installed (npm ci --prefix www; make test does)")
def test_the_demo_serves_the_web_ui_until_stopped(tmp_path):
    subprocess.run(["make", "-s", "-C", str(ROOT), "ui"], check=True, stdout=subprocess.DEVNULL)
    out = open(tmp_path / "demo.out", "w+")
    process = subprocess.Popen([sys.executable, "-m", "keel", "demo", "--harness", str(WWW)], stdout=out,
                               stderr=subprocess.STDOUT, env=python_env(), cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C stops it all" not in (text := (tmp_path / "demo.out").read_text()):
            assert process.poll() is None and time.monotonic() < deadline, text
            time.sleep(0.5)
        assert "migrations done" in text                      # the CLI story came first, as before
        url = re.search(r"(https://127\.0\.0\.1:\d+)/harness/", text).group(1)
        assert "root@pam" in text and DEMO_PASSWORD in text
        page = requests.get(url + "/harness/", verify=False, timeout=30)
        assert page.status_code == 200 and "keel/keel.js" in page.text
        login = requests.post(url + "/harness/login", json={"username": "root@pam", "password": DEMO_PASSWORD},
                              verify=False, timeout=30).json()["data"]
        status = requests.get(url + "/api/status", headers={"Authorization": f"PVEAuthCookie={login['ticket']}"},
                              verify=False, timeout=30).json()["data"]
        assert status["leader_node"] == "pve1" and status["cluster"]["cluster"] == "demo"
        # the runners run on the scenario's fake GitHub, and the demo queues jobs for them
        auth = {"Authorization": f"PVEAuthCookie={login['ticket']}"}
        deadline = time.monotonic() + 60
        while not (runners := requests.get(url + "/api/runners", headers=auth, verify=False,
                                           timeout=30).json()["data"]).get("jobs"):
            assert time.monotonic() < deadline, runners
            time.sleep(1)
        assert runners["active"] and runners["scale_sets"][0]["name"] == "keel-demo-c2-m4"
        children = subprocess.run(["pgrep", "-s", str(process.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) >= 3                            # the demo, keel-engine, keel-web (and workers)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        out.close()
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-s", str(process.pid)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the demo left its services running"
        time.sleep(0.5)
