"""The CLI on a node where keel-engine runs: plan, apply, maintenance, best-node and
history go through the engine (its leader acts, its history records who asked);
keel balance refuses to act beside it; --direct still talks to PVE."""

from __future__ import annotations

import io

import pytest

from keel.cli import Env, main
from keel.errors import ExitStatus
from keel.store import Store
from service_helpers import start_engine, wait_for, write_config


@pytest.fixture
def node(sim_factory, tmp_path):
    sim = sim_factory(clock_factor=40)
    config = write_config(tmp_path / "node", sim)
    service, engine = start_engine(config)
    wait_for(lambda: engine.call("GET", "/api/status")["leader"])
    yield config, engine, tmp_path
    service.stop()


def run(argv, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    env = {"USER": "tester", "KEEL_STORE": str(tmp_path / "cli.db")}
    status = main(argv, Env(stdout=out, stderr=err, environ=env))
    return status, out.getvalue(), err.getvalue()


def test_apply_goes_through_the_engine_and_says_who_asked(node):
    config, engine, tmp_path = node
    status, out, err = run(["plan", "--config", str(config)], tmp_path)
    assert status == 0 and out.startswith("PLANNED"), err
    status, out, err = run(["apply", "--yes", "--config", str(config)], tmp_path)
    assert status == 0, out + err
    assert " at a time, about " in out and ": ok" in out and "FAILED" not in out
    moves = engine.call("GET", "/api/history")["moves"]
    assert moves and {m["requested_by"] for m in moves} == {"cli:tester"}
    assert Store(tmp_path / "cli.db").moves() == []          # nothing went around the engine
    status, out, _ = run(["history", "--config", str(config)], tmp_path)
    assert status == 0 and "cli:tester" in out


def test_maintenance_best_node_and_balance_with_the_engine(node):
    config, engine, tmp_path = node
    status, out, err = run(["maintenance", "enter", "pve4", "--yes", "--config", str(config)], tmp_path)
    assert status == 0, out + err
    assert "pve4 is in maintenance" in out
    status, out, _ = run(["maintenance", "list", "--config", str(config)], tmp_path)
    assert "pve4" in out and "by cli:tester" in out
    assert engine.call("GET", "/api/status")["maintenance"]["pve4"]["requested_by"] == "cli:tester"
    status, out, _ = run(["best-node", "--cores", "2", "--memory", "4GiB", "--config", str(config)], tmp_path)
    assert status == 0 and out.split()[0] != "pve4"
    run(["maintenance", "leave", "pve4", "--config", str(config)], tmp_path)
    status, _, err = run(["balance", "--config", str(config)], tmp_path)
    assert status == ExitStatus.INVALID and "keel-engine runs on this node" in err
    status, out, err = run(["plan", "--direct", "--config", str(config)], tmp_path)
    assert status == 0 and out.split(":")[0] in ("PLANNED", "BALANCED", "NOT WORTH IT"), err
