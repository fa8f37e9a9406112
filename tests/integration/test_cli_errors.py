"""Every bad path, URL, token, CA file or config a newcomer gives ``keel``: one line that
names the input and the fix, the right exit status, never a traceback (issue 18).  The
real ``main()`` against the real simulator; ``keel`` from a shell where the traceback would
show."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest
import yaml

from conftest import DEMO_PASSWORD, DEMO_TOKEN, ROOT, python_env
from keel import config as cfg
from keel.cli import Env, main
from keel.errors import ExitStatus

WRONG = "keel@pve!keel=99999999-8888-7777-6666-555555555555"


def run(argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, Env(stdout=out, stderr=err, environ=environ or {}))
    return status, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("keel: "), err
    assert "Traceback" not in err
    return lines[0]


def shell(argv, environ, cwd=ROOT):
    env = {k: v for k, v in python_env().items() if not k.startswith("KEEL_")}
    return subprocess.run([sys.executable, "-m", "keel", *argv], capture_output=True, text=True,
                          env={**env, **environ}, cwd=cwd, timeout=60)


# -- the CA file: flag, environment, config ------------------------------------------------

def test_a_ca_file_that_is_not_there_given_as_a_flag_is_named(shared_sim):
    status, _, err = run(["status", "--ca-file", "/nonexistent.pem"],
                         {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN})
    line = one_line(err)
    assert status == ExitStatus.INVALID
    assert "/nonexistent.pem (--ca-file) does not exist" in line
    assert "/etc/pve/pve-root-ca.pem" in line and "--insecure" in line


def test_a_ca_file_that_is_not_there_given_in_the_environment_is_named(shared_sim):
    result = shell(["status"], {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN,
                                "KEEL_PVE_CA_FILE": "/nonexistent.pem"})
    assert result.returncode == ExitStatus.INVALID
    assert "/nonexistent.pem (KEEL_PVE_CA_FILE) does not exist" in one_line(result.stderr)


def test_a_ca_file_that_is_not_there_given_in_the_config_is_named(shared_sim, tmp_path):
    config = tmp_path / "keel.yaml"
    config.write_text(yaml.safe_dump({"proxmox": {"url": shared_sim.url, "ca_file": "/nonexistent.pem"}}))
    result = shell(["status", "--config", str(config)], {"KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert result.returncode == ExitStatus.INVALID
    assert "/nonexistent.pem (proxmox.ca_file) does not exist" in one_line(result.stderr)


def test_a_ca_file_that_holds_no_certificate_is_named(shared_sim, tmp_path):
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    status, _, err = run(["status", "--ca-file", str(junk)],
                         {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert status == ExitStatus.INVALID
    assert f"{junk} (--ca-file) cannot be read as PEM certificates" in one_line(err)


def test_insecure_needs_no_ca_file(shared_sim):
    status, _, err = run(["status", "--ca-file", "/nonexistent.pem", "--insecure"],
                         {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert status == 0, err


# -- TLS, token, URL, no config --------------------------------------------------------------

def test_a_tls_failure_is_said_whole_and_names_the_switches(shared_sim):
    status, _, err = run(["status"], {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN})
    line = one_line(err)
    assert status == ExitStatus.UNAVAILABLE
    assert "(certificate verify failed: self-signed certificate" in line or \
        "(certificate verify failed: self signed certificate" in line, line
    assert "--insecure" in line and "KEEL_PVE_INSECURE" in line and "--ca-file" in line
    assert "HTTPSConnectionPool" not in line and "Max retries" not in line


def test_a_wrong_token_secret_names_the_token_where_it_came_from_and_what_to_check(shared_sim, tmp_path):
    status, _, err = run(["status"], {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": WRONG,
                                      "KEEL_PVE_CA_FILE": shared_sim.cert})
    line = one_line(err)
    assert status == ExitStatus.AUTH and "99999999" not in err
    assert "refused the API token keel@pve!keel (from KEEL_PVE_TOKEN)" in line
    assert "pveum user token list keel@pve" in line and "keel setup" in line
    token = tmp_path / "token"
    token.write_text(WRONG + "\n")
    token.chmod(0o600)
    status, _, err = run(["status", "--pve-token-file", str(token)],
                         {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_CA_FILE": shared_sim.cert})
    assert status == ExitStatus.AUTH and f"(from --pve-token-file {token})" in one_line(err)


@pytest.mark.parametrize("url, what", [("ftp://pve1", "must look like https://host:8006"),
                                       ("https://127.0.0.1:99999", "Port out of range"),
                                       ("https://[::1", "Invalid IPv6 URL")])
def test_a_bad_url_is_named_with_where_it_was_given(url, what, tmp_path):
    result = shell(["status", "--pve-url", url, "--insecure"], {"KEEL_PVE_TOKEN": DEMO_TOKEN})
    line = one_line(result.stderr)
    assert result.returncode == ExitStatus.INVALID and line.startswith("keel: --pve-url: ") and what in line
    config = tmp_path / "keel.yaml"
    config.write_text(yaml.safe_dump({"proxmox": {"url": url}}))
    status, _, err = run(["status", "--config", str(config), "--insecure"], {"KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert status == ExitStatus.INVALID and one_line(err).startswith("keel: proxmox.url: ")


@pytest.mark.skipif(cfg.DEFAULT_CONFIG_FILE.exists() or cfg.DEFAULT_TOKEN_FILE.exists(),
                    reason="this machine has Keel's config")
def test_bare_plan_without_a_config_says_none_was_found_and_where_it_looked(tmp_path):
    result = shell(["plan"], {}, cwd=tmp_path)
    line = one_line(result.stderr)
    assert result.returncode == ExitStatus.INVALID
    assert "no config file and no PVE URL or token given" in line
    assert "$KEEL_CONFIG" in line and str(cfg.DEFAULT_CONFIG_FILE) in line and "keel setup" in line


@pytest.mark.parametrize("argv", [["status", "--config", "/nonexistent.yaml"],
                                  ["status", "--pve-token-file", "/nonexistent-token"],
                                  ["status", "--pve-user", "root@pam", "--pve-password-file", "/nonexistent"]])
def test_a_file_that_is_not_there_is_named(argv):
    result = shell(argv, {"KEEL_PVE_URL": "https://127.0.0.1:9", "KEEL_PVE_TOKEN": DEMO_TOKEN})
    assert result.returncode == ExitStatus.INVALID
    assert argv[-1] in one_line(result.stderr) and "No such file" in result.stderr


def test_a_malformed_token_says_where_it_came_from(tmp_path):
    token = tmp_path / "token"
    token.write_text("just-a-secret\n")
    token.chmod(0o600)
    status, _, err = run(["status", "--pve-token-file", str(token), "--pve-url", "https://127.0.0.1:9"], {})
    assert status == ExitStatus.INVALID
    assert f"user@realm!name=secret (the one from --pve-token-file {token} does not)" in one_line(err)


# -- secret files others may read ----------------------------------------------------------

def test_a_token_file_others_may_read_is_warned_about_and_still_used(shared_sim, tmp_path, caplog):
    token = tmp_path / "token"
    token.write_text(DEMO_TOKEN + "\n")
    token.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="keel"):
        status, _, err = run(["status", "--pve-token-file", str(token)],
                             {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_CA_FILE": shared_sim.cert})
    assert status == 0, err
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{token} may be read by its group or others (mode 0644)" in warning and f"chmod 600 {token}" in warning
    # from a shell, it is one line on stderr
    result = shell(["status", "--pve-token-file", str(token)],
                   {"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_CA_FILE": shared_sim.cert})
    assert result.returncode == 0 and result.stderr.count("\n") == 1 and "chmod 600" in result.stderr


def test_the_engine_refuses_a_token_file_others_may_read_unless_told_to_warn(tmp_path):
    token = tmp_path / "token"
    token.write_text(DEMO_TOKEN + "\n")
    token.chmod(0o640)
    settings = cfg.ProxmoxSettings(url="https://127.0.0.1:9", token_file=str(token))
    with pytest.raises(cfg.InvalidError) as refused:
        cfg.target_from(settings, {}, strict=True)
    assert "keel-engine refuses it" in str(refused.value) and "engine.open_secret_files: warn" in str(refused.value)
    assert cfg.target_from(settings, {}).token_name == "keel"          # the CLI warns
    assert cfg.parse({"engine": {"open_secret_files": "warn"}}).engine.open_secret_files == "warn"
    token.chmod(0o600)
    assert cfg.target_from(settings, {}, strict=True).token_name == "keel"


# -- keel setup ----------------------------------------------------------------------------

def test_setup_writes_absolute_paths_so_the_config_works_from_anywhere(sim, tmp_path):
    work = tmp_path / "work"
    (work / "setup").mkdir(parents=True)
    (work / "setup" / "pw").write_text(DEMO_PASSWORD + "\n")
    (work / "setup" / "pw").chmod(0o600)
    ca = os.path.relpath(sim.cert, work)
    result = shell(["setup", "--pve-url", sim.url, "--pve-user", "root@pam", "--pve-password-file", "setup/pw",
                    "--ca-file", ca, "--config", "setup/keel.yaml", "--token-file", "setup/pve-token"],
                   {}, cwd=work)
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load((work / "setup" / "keel.yaml").read_text())["proxmox"]
    assert written["token_file"] == str(work / "setup" / "pve-token")
    assert written["ca_file"] == str((work / ca).absolute())
    elsewhere = shell(["status", "--config", str(work / "setup" / "keel.yaml")], {}, cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr


def test_keel_engine_refuses_to_start_on_a_token_file_others_may_read(sim, tmp_path):
    from service_helpers import write_config
    config = write_config(tmp_path / "node", sim)
    token = tmp_path / "node" / "token"
    token.chmod(0o644)
    result = shell(["engine", "--config", str(config)], {})
    assert result.returncode == ExitStatus.INVALID
    line = one_line(result.stderr)
    assert f"the API token file {token} may be read by its group or others (mode 0644)" in line
    assert f"chmod 600 {token}" in line and "engine.open_secret_files: warn" in line
    assert not (tmp_path / "node" / "engine.sock").exists()
