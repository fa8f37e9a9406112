"""``keel setup`` against the simulator: it makes the user, role, token, ACLs and config,
again without changing anything, and what it makes is enough to run Keel."""

from __future__ import annotations

import io
import os

from keel.cli import Env, main
from keel.errors import ExitStatus
from keel.pve.provision import PRIVILEGES


def run(argv, sim, tmp_path, extra_env=None):
    out, err = io.StringIO(), io.StringIO()
    env = {"KEEL_PVE_CA_FILE": sim.cert, "KEEL_STORE": str(tmp_path / "keel.db"), **(extra_env or {})}
    status = main(argv, Env(stdout=out, stderr=err, environ=env))
    return status, out.getvalue(), err.getvalue()


def test_setup_makes_what_keel_needs_and_is_idempotent(sim, tmp_path):
    password = tmp_path / "root-password"
    password.write_text("keel-demo\n")
    config, token = tmp_path / "keel.yaml", tmp_path / "priv" / "pve-token"
    argv = ["setup", "--pve-url", sim.url, "--pve-user", "root@pam", "--pve-password-file", str(password),
            "--config", str(config), "--token-file", str(token)]
    status, out, err = run(argv, sim, tmp_path)
    assert status == 0, err
    assert "role Keel: made" in out and "token keel@pve!keel: made" in out and "written" in out
    assert "keel@pve: exists" in out                    # the demo scenario has the user already
    secret = token.read_text().strip()
    assert secret.startswith("keel@pve!keel=") and secret.split("=", 1)[1] not in out + err
    assert os.stat(token).st_mode & 0o777 == 0o600
    # the token it made, with the role it made, runs Keel
    status, out2, err2 = run(["plan", "--config", str(config)], sim, tmp_path)
    assert status == 0 and out2.startswith("PLANNED"), err2
    roles = {r["roleid"]: r for r in sim.proxmox(user="root@pam", password="keel-demo").access.roles.get()}
    assert set(roles["Keel"]["privs"].split(",")) == set(PRIVILEGES)
    # again: nothing changes
    status, out, err = run(argv, sim, tmp_path)
    assert status == 0, err
    assert "made" not in out and ": set" not in out and "left as it is" in out, out
    assert token.read_text().strip() == secret
    # the secret lost: a new token, and it works
    token.unlink()
    status, out, err = run(argv, sim, tmp_path)
    assert status == 0 and "made again" in out
    assert run(["plan", "--config", str(config)], sim, tmp_path)[0] == 0


def test_setup_without_an_administrator_says_what_it_needs(sim, tmp_path):
    password = tmp_path / "pw"
    password.write_text("keel-demo\n")
    status, out, err = run(["setup", "--pve-url", sim.url, "--pve-user", "auditor@pve", "--pve-password-file",
                            str(password), "--config", str(tmp_path / "k.yaml"), "--token-file",
                            str(tmp_path / "t")], sim, tmp_path)
    assert status == ExitStatus.AUTH
    assert "needs an administrator" in err and "Permission check failed" in err
    assert not (tmp_path / "k.yaml").exists() and not (tmp_path / "t").exists()


def test_on_pve_8_the_guest_agent_privilege_is_vm_monitor():
    from keel.pve.provision import privileges_for
    assert "VM.GuestAgent.FileWrite" in privileges_for("9.1.4") and "VM.Monitor" not in privileges_for("9.1.4")
    assert "VM.Monitor" in privileges_for("8.4.1") and "VM.GuestAgent.FileWrite" not in privileges_for("8.4.1")
