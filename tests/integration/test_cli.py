"""The ``keel`` command, whole: real ``main()``, real simulator, captured streams."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import yaml

from conftest import DEMO_TOKEN, ROOT, python_env
from keel import __version__
from keel.cli import Env, main
from keel.errors import ExitStatus


def run(argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, Env(stdout=out, stderr=err, environ=environ or {}))
    return status, out.getvalue(), err.getvalue()


def sim_env(sim, **extra):
    env = {"KEEL_PVE_URL": sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN, "KEEL_PVE_CA_FILE": sim.cert}
    env.update(extra)
    return env


def test_version():
    status, out, _ = run(["--version"])
    assert status == 0 and out.strip() == f"keel {__version__}"


def test_no_command_prints_help_and_usage_status():
    status, out, _ = run([])
    assert status == ExitStatus.USAGE and "status" in out and "sim" in out


def test_status_table(shared_sim):
    status, out, err = run(["status"], sim_env(shared_sim))
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Cluster demo") and "Proxmox VE 9.1.4" in lines[0]
    assert "5 nodes (5 online)" in lines[1] and "27 guests" in lines[1]
    assert lines[2].startswith("Imbalance ")
    assert sum(1 for line in lines if line.startswith("pve")) == 5
    assert "\033[" not in out           # not a terminal: no colour


def test_status_with_guests_lists_them_under_their_node(shared_sim):
    status, out, _ = run(["status", "--guests"], sim_env(shared_sim))
    assert status == 0
    lines = out.splitlines()
    pve2 = lines.index(next(line for line in lines if line.startswith("pve2")))
    pve3 = lines.index(next(line for line in lines if line.startswith("pve3")))
    under_pve2 = "\n".join(lines[pve2:pve3])
    assert "gpu-render" in under_pve2 and "db2" in under_pve2 and "web1" not in under_pve2


def test_status_json(shared_sim):
    status, out, _ = run(["status", "--json"], sim_env(shared_sim))
    assert status == 0
    data = json.loads(out)
    assert data["cluster"] == "demo"
    assert {n["node"] for n in data["nodes"]} == {"pve1", "pve2", "pve3", "pve4", "pve5"}
    assert len(data["guests"]) == 27
    assert 0 <= data["imbalance"]["pve"] <= 1


def test_status_with_flags_and_a_token_file(shared_sim, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(DEMO_TOKEN)
    status, out, err = run(["status", "--pve-url", shared_sim.url, "--pve-token-file", str(token_file),
                            "--ca-file", shared_sim.cert])
    assert status == 0, err


def test_status_with_a_password(shared_sim, tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("keel-demo\n")
    status, _, err = run(["status", "--pve-url", shared_sim.url, "--pve-user", "root@pam",
                          "--pve-password-file", str(password_file), "--insecure"])
    assert status == 0, err


def test_status_with_a_config_file(shared_sim, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(DEMO_TOKEN)
    config = tmp_path / "keel.yaml"
    config.write_text(yaml.safe_dump({"proxmox": {"url": shared_sim.url, "token_file": str(token_file),
                                              "ca_file": shared_sim.cert}}))
    status, _, err = run(["status", "--config", str(config)])
    assert status == 0, err


def test_a_bad_config_names_every_bad_key(tmp_path):
    config = tmp_path / "keel.yaml"
    config.write_text("proxmox:\n  url: 5\n  tokn_file: x\n")
    status, out, err = run(["status", "--config", str(config)])
    assert status == ExitStatus.INVALID and out == ""
    assert "proxmox.url" in err and "proxmox.tokn_file: unknown key" in err


def test_wrong_token_is_an_auth_failure_without_the_secret(shared_sim):
    bad = "keel@pve!keel=99999999-8888-7777-6666-555555555555"
    status, _, err = run(["status"], sim_env(shared_sim, KEEL_PVE_TOKEN=bad))
    assert status == ExitStatus.AUTH
    assert "99999999" not in err and "keel:" in err


def test_unreachable_pve_says_so():
    status, _, err = run(["status"], {"KEEL_PVE_URL": "https://127.0.0.1:9", "KEEL_PVE_TOKEN": DEMO_TOKEN,
                                      "KEEL_PVE_INSECURE": "1"})
    assert status == ExitStatus.UNAVAILABLE
    assert "cannot reach PVE at https://127.0.0.1:9" in err


def test_untrusted_certificate_explains_the_fix(shared_sim):
    status, _, err = run(["status"], {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert status == ExitStatus.UNAVAILABLE
    assert "TLS verification" in err and "ca_file" in err


def test_sim_generate_writes_a_loadable_scenario(tmp_path):
    out_file = tmp_path / "s.yaml"
    status, _, err = run(["sim", "generate", "--nodes", "3", "--guests", "40", "--seed", "5",
                          "--profile", "hotspot", "-o", str(out_file)])
    assert status == 0 and "wrote" in err
    from keel.sim import scenario
    loaded = scenario.load(out_file)
    assert len(loaded.nodes) == 3 and len(loaded.guests) == 40


def test_sim_generate_refuses_a_bad_profile():
    status, _, err = run(["sim", "generate", "--nodes", "3", "--guests", "4", "--profile", "lumpy"])
    assert status == ExitStatus.USAGE and "--profile must be one of" in err


def test_sim_without_a_scenario_is_a_usage_error():
    status, _, err = run(["sim"])
    assert status == ExitStatus.USAGE and "--scenario" in err


def test_sim_with_a_bad_scenario_names_the_problems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"nodes": [{"name": "a", "memory": "lots"}],
                                   "guests": [{"vmid": 100, "node": "b"}]}))
    status, _, err = run(["sim", "--scenario", str(bad), "--port", "0"])
    assert status == ExitStatus.INVALID
    assert "nodes[0].memory" in err and "guests[0].node: no node named 'b'" in err


def test_demo_runs_from_a_shell():
    result = subprocess.run([sys.executable, "-m", "keel", "demo"], capture_output=True, text=True,
                            env=python_env(), cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "keel status --guests" in result.stdout
    assert "pve1" in result.stdout and "runner-template" in result.stdout
    assert "API calls" in result.stdout
    # ... then balances it: a plan, its migrations in the simulator, the cluster after.
    assert "$ keel plan" in result.stdout and "PLANNED" in result.stdout
    done = re.search(r"(\d+) of (\d+) migrations done", result.stdout)
    assert done and done.group(1) == done.group(2) and int(done.group(1)) > 0, result.stdout
    assert "failed" not in result.stdout.split("$ keel apply")[1]


PROXLB_FIXTURES = ROOT / "tests" / "fixtures" / "proxlb"


def test_import_proxlb_prints_a_config_keel_accepts():
    from keel import config as cfg
    status, out, err = run(["import-proxlb", str(PROXLB_FIXTURES / "proxlb-2.x.yaml")])
    assert status == 0 and err == ""
    config = cfg.parse(yaml.safe_load(out), "import-proxlb output")
    assert config.proxmox.token_file == "/etc/pve/priv/keel/pve-token" and config.balancing.enable
    assert "7f3c9a12" not in out                     # the token secret stays in ProxLB's file
    assert "# Not carried over from ProxLB:" in out


def test_import_proxlb_writes_a_file(tmp_path):
    target = tmp_path / "keel.yaml"
    status, out, err = run(["import-proxlb", str(PROXLB_FIXTURES / "proxlb-0.9.conf"), "-o", str(target)])
    assert status == 0 and out == "" and f"wrote {target}" in err
    from keel import config as cfg
    assert cfg.load(target).balancing.weights["cpu"] == 1.0


def test_import_proxlb_names_a_bad_file(tmp_path):
    bad = tmp_path / "proxlb.yaml"
    bad.write_text("balancing:\n  balanciness: [\n")
    status, out, err = run(["import-proxlb", str(bad)])
    assert status == ExitStatus.INVALID and out == ""
    assert f"keel: {bad}: not valid YAML" in err
    status, _, err = run(["import-proxlb", str(tmp_path / "missing.conf")])
    assert status == ExitStatus.INVALID and "cannot read" in err and "missing.conf" in err


def test_import_proxlb_from_a_shell():
    result = subprocess.run([sys.executable, "-m", "keel", "import-proxlb",
                             str(PROXLB_FIXTURES / "proxlb-1.1.yaml")],
                            capture_output=True, text=True, env=python_env(), cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "imbalance: spread" in result.stdout and "yaml-Pa55" not in result.stdout
