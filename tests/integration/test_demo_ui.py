"""``make demo``'s second half: ``keel demo --harness www`` serves the web UI harness with
keel-engine and keel-web on the simulator (the runners on its fake GitHub, CI jobs
queued now and then), prints where and how to log in, and stops everything on Ctrl-C
(or TERM)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

from conftest import DEMO_PASSWORD, ROOT, python_env

WWW = ROOT / "www"


@pytest.mark.skipif(not (WWW / "node_modules" / "extjs-gpl").exists(),
                    reason="ExtJS is not installed (make extjs; make test does)")
def test_the_demo_serves_the_web_ui_until_stopped(tmp_path):
    subprocess.run(["make", "-s", "-C", str(ROOT), "ui"], check=True, stdout=subprocess.DEVNULL)
    out = open(tmp_path / "demo.out", "w+")
    # 8443 is taken (by this test, or by whatever holds it already): the demo says so and
    # shows the port it took instead
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8443))
        holder.listen()
    except OSError:
        pass
    process = subprocess.Popen([sys.executable, "-m", "keel", "demo", "--harness", str(WWW)], stdout=out,
                               stderr=subprocess.STDOUT, env=python_env(), cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C stops it all" not in (text := (tmp_path / "demo.out").read_text()):
            assert process.poll() is None and time.monotonic() < deadline, text
            time.sleep(0.5)
        done = int(re.search(r"(\d+) of \d+ migrations done", text).group(1))   # the CLI story came first
        url = re.search(r"(https://127\.0\.0\.1:(\d+))/harness/", text).group(1)
        port = re.search(r"https://127\.0\.0\.1:(\d+)/harness/", text).group(1)
        assert port != "8443" and f"(port 8443 is in use by another program, so the web UI is on port {port}" in text
        assert re.search(rf"^=+\n  https://127\.0\.0\.1:{port}/harness/\n=+$", text, re.M), text
        # how to use the CLI it installed, on the same cluster
        config = re.search(r"export KEEL_CONFIG=(\S+)", text).group(1)
        assert "./keel status" in text and ". .venv/bin/activate" in text
        assert "root@pam" in text and DEMO_PASSWORD in text
        page = requests.get(url + "/harness/", verify=False, timeout=30)
        assert page.status_code == 200 and "keel/keel.js" in page.text
        login = requests.post(url + "/harness/login", json={"username": "root@pam", "password": DEMO_PASSWORD},
                              verify=False, timeout=30).json()["data"]
        status = requests.get(url + "/api/status", headers={"Authorization": f"PVEAuthCookie={login['ticket']}"},
                              verify=False, timeout=30).json()["data"]
        assert status["leader_node"] == "pve1" and status["cluster"]["cluster"] == "demo"
        # one store for the whole demo: the web History has the CLI part's migrations
        history = requests.get(url + "/api/history", headers={"Authorization": f"PVEAuthCookie={login['ticket']}"},
                               verify=False, timeout=30).json()["data"]
        demo_moves = [m for m in history["moves"] if m["requested_by"] == "keel demo"]
        assert done > 0 and len(demo_moves) == done and all(m["status"] == "ok" for m in demo_moves), history
        # the CLI it names reads the same cluster through the running engine
        shown = subprocess.run([str(ROOT / "keel"), "history"], capture_output=True, text=True, timeout=60,
                               env={**python_env(), "KEEL_CONFIG": config})
        assert shown.returncode == 0 and shown.stdout.count("keel demo") >= done, shown.stderr
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
        # Ctrl-C in a terminal: SIGINT to the whole process group
        stopping = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        took = time.monotonic() - stopping
        out.close()
        holder.close()
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-s", str(process.pid)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the demo left its services running"
        time.sleep(0.5)
    text = (tmp_path / "demo.out").read_text()
    assert "Stopping keel-web, keel-engine and the simulator ..." in text and "Stopped in " in text
    assert took < 5.0 and process.returncode == 0, (took, text[-2000:])
    assert "Traceback" not in text


@pytest.mark.skipif(not (WWW / "node_modules" / "extjs-gpl").exists(),
                    reason="ExtJS is not installed (make extjs; make test does): without it the demo "
                           "serves no web UI and --port is not used (Debian 13's chroot run has none)")
def test_a_busy_port_given_with_port_is_named_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "keel", "demo", "--harness", str(WWW), "--port", str(port)],
                                capture_output=True, text=True, env=python_env(), cwd=ROOT, timeout=60)
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.strip() == f"keel: port {port} (--port) is in use: give another with --port, " \
                                    f"or stop what listens there"


def test_without_extjs_the_demo_runs_the_cli_story_and_says_what_to_get(tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<html></html>")
    process = subprocess.Popen([sys.executable, "-m", "keel", "demo", "--harness", str(www)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=python_env(), cwd=ROOT,
                               start_new_session=True)
    lines = []
    deadline = time.monotonic() + 120
    while not any("until Ctrl-C" in line for line in lines):
        assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
        lines.append(process.stdout.readline())
    os.killpg(process.pid, signal.SIGINT)
    rest, _ = process.communicate(timeout=30)
    text = "".join(lines) + rest
    assert "migrations done" in text
    [line] = [line for line in text.splitlines() if line.startswith("The web UI cannot start")]
    assert "extjs-gpl/build/ext-all.js is missing" in line and "make extjs" in line
    assert "Stopping the simulator" in text and process.returncode == 0
