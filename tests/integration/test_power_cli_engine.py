"""``keel power`` on a node where keel-engine runs: status, plan, sleep, wake and test go
through the engine (its leader acts and keeps the power book, the history says who asked),
as ``keel plan``/``apply`` do (test_cli_engine.py); ``--direct`` still talks to PVE.
Against ``keel sim`` on the power cluster (its clock 60 times real time)."""

from __future__ import annotations

import io
import json

import yaml

from keel.cli import Env, main
from keel.errors import ExitStatus
from keel.store import Store
from service_helpers import start_engine, wait_for
from .test_power_engine import cluster, engine_config, off, quiet, state_of  # noqa: F401


def run(tmp_path, config, *argv):
    out, err = io.StringIO(), io.StringIO()
    env = {"USER": "tester", "KEEL_STORE": str(tmp_path / "cli.db")}
    status = main(["power", *argv, "--config", str(config)], Env(stdout=out, stderr=err, environ=env))
    return status, out.getvalue(), err.getvalue()


def test_power_commands_go_through_the_engine_and_show_what_it_knows(cluster, tmp_path):  # noqa: F811
    quiet(cluster)
    config = engine_config(tmp_path / "e1", cluster, mode="recommend")
    data = yaml.safe_load(config.read_text())
    data["balancing"]["interval"] = "30s"         # a failed Wake-on-LAN waits an interval: long enough to see
    config.write_text(yaml.safe_dump(data))
    service, engine = start_engine(config)
    try:
        wait_for(lambda: engine.call("GET", "/api/status")["leader"], timeout=30)
        status, out, err = run(tmp_path, config, "plan", "--json")
        assert status == 0, err
        plan = json.loads(out)
        assert plan["verdict"] == "SLEEP" and plan["sleep"], plan
        node = plan["sleep"][0]
        status, out, err = run(tmp_path, config, "plan", "--node", node)
        assert status == 0 and out.startswith("Power plan: SLEEP:") and "Steps" in out, out + err

        status, out, err = run(tmp_path, config, "sleep", node, "--yes")
        assert status == 0, out + err
        assert f"{node} is off" in out or "powered off" in out or "shut" in out, out
        assert node in off(cluster) and state_of(engine, node) == "sleeping"
        jobs = engine.call("GET", "/api/jobs")
        jobs = jobs if isinstance(jobs, list) else jobs["jobs"]
        sleep_job = next(j for j in jobs if j["kind"] == "power-sleep")
        assert sleep_job["requested_by"] == "cli:tester" and sleep_job["state"] == "done"
        assert Store(tmp_path / "cli.db").get("power_records") is None     # the engine keeps the book

        # PVE does not send the packet: the CLI says so, and status shows when Keel tries again
        cluster.control("POST", "faults", {"endpoints": [{"path": f"/nodes/{node}/wakeonlan", "method": "POST",
                                                          "status": 500, "error_rate": 1,
                                                          "message": "simulated: no route to the NIC"}]})
        status, out, err = run(tmp_path, config, "wake", node)
        assert status == ExitStatus.TASK_FAILED and "simulated: no route to the NIC" in err, out + err
        status, out, err = run(tmp_path, config, "status", "--json")
        assert status == 0, err
        data = json.loads(out)
        row = next(n for n in data["nodes"] if n["node"] == node)
        assert row["state"] == "sleeping" and row["retry_at"] and "no route to the NIC" in row["wake_error"]
        assert data["energy"]["node_hours_asleep"] >= 0 and data["leader"] is True
        status, out, err = run(tmp_path, config, "status")
        assert status == 0 and f"{node}: Wake-on-LAN not sent" in out and "no route to the NIC" in out, out + err

        cluster.control("POST", "faults", {"endpoints": []})
        status, out, err = run(tmp_path, config, "wake", node)
        assert status == 0, out + err
        assert node not in off(cluster) and state_of(engine, node) == "awake"
        events = engine.call("GET", "/api/power")["events"]
        assert [e["by"] for e in events if e["node"] == node][-1] == "cli:tester"

        status, out, err = run(tmp_path, config, "status", "--direct", "--json")      # PVE itself, no engine
        assert status == 0, err
        assert next(n for n in json.loads(out)["nodes"] if n["node"] == node)["power"] == "awake"
    finally:
        service.stop()
