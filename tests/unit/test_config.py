"""The config file's pve section, and how a connection target is put together."""

import pytest

from keel import config as cfg
from keel.errors import InvalidError

TOKEN = "keel@pve!keel=11111111-2222-3333-4444-555555555555"


def test_defaults():
    config = cfg.parse({})
    assert config.proxmox.url == "https://127.0.0.1:8006"
    assert config.proxmox.verify_tls is True


def test_every_bad_key_is_named():
    with pytest.raises(InvalidError) as caught:
        cfg.parse({"proxmox": {"url": 8006, "verify_tls": "yes", "tiemout": 5}, "balancer": {}})
    errors = caught.value.errors
    assert set(errors) == {"proxmox.url", "proxmox.verify_tls", "proxmox.tiemout", "balancer"}
    assert errors["proxmox.tiemout"] == "unknown key"


def test_secrets_in_the_config_file_are_refused_without_echoing_them():
    with pytest.raises(InvalidError) as caught:
        cfg.parse({"proxmox": {"token_secret": "s3cr3t-value"}})
    assert "token_file" in str(caught.value)
    assert "s3cr3t-value" not in str(caught.value)


def test_a_config_file_that_is_not_yaml_is_named(tmp_path):
    path = tmp_path / "keel.yaml"
    path.write_text("pve: [unclosed\n")
    with pytest.raises(InvalidError, match=f"{path}: not valid YAML"):
        cfg.load(path)


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(InvalidError, match="cannot read config .*nope.yaml"):
        cfg.load(tmp_path / "nope.yaml")


def test_token_from_the_environment_wins(tmp_path):
    settings = cfg.ProxmoxSettings(url="https://pve1:8006")
    target = cfg.target_from(settings, {"KEEL_PVE_TOKEN": TOKEN, "KEEL_PVE_INSECURE": "1"})
    assert (target.host, target.port, target.user, target.token_name) == ("pve1", 8006, "keel@pve", "keel")
    assert target.verify is False
    assert "5555" not in repr(target)


def test_token_from_a_file_and_a_ca_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    from keel.sim.tls import make_certificate
    ca_file, _ = make_certificate(tmp_path)
    settings = cfg.ProxmoxSettings(url="https://10.0.0.1:8443", token_file=str(token_file),
                                   ca_file=str(ca_file))
    target = cfg.target_from(settings, {})
    assert target.token_secret == TOKEN.split("=", 1)[1]
    assert target.verify == str(ca_file)
    assert target.url == "https://10.0.0.1:8443"


def test_password_login(tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("pa55\n")
    settings = cfg.ProxmoxSettings(user="root@pam", password_file=str(password_file))
    target = cfg.target_from(settings, {})
    assert (target.user, target.password, target.token_name) == ("root@pam", "pa55", None)


def test_no_credentials_says_how_to_give_them():
    with pytest.raises(InvalidError, match="KEEL_PVE_TOKEN"):
        cfg.target_from(cfg.ProxmoxSettings(), {})


@pytest.mark.parametrize("token", ["keel@pve", "keel@pve!keel", "secret-only"])
def test_malformed_tokens_are_refused(token):
    with pytest.raises(InvalidError, match=r"user@realm!name=secret"):
        cfg.target_from(cfg.ProxmoxSettings(), {"KEEL_PVE_TOKEN": token})


@pytest.mark.parametrize("url", ["http://pve1:8006", "ftp://x", "https://"])
def test_bad_urls_are_refused(url):
    with pytest.raises(InvalidError, match="https://host:8006"):
        cfg.target_from(cfg.ProxmoxSettings(url=url), {"KEEL_PVE_TOKEN": TOKEN})


def test_one_section_is_replaced_and_every_other_line_kept():
    from keel.config import replace_section
    text = ("# Keel\nproxmox:\n  url: https://x:8006  # here\n# the balancer\nbalancing:\n  hold: 1\n"
            "  # inner\n  limits:\n    moves: 2\n\n# web part\nweb:\n  listen: 0.0.0.0:8443\n")
    out = replace_section(text, "balancing", {"hold": 3, "limits": {"moves": 4}})
    assert out == ("# Keel\nproxmox:\n  url: https://x:8006  # here\n# the balancer\nbalancing:\n  hold: 3\n"
                   "  limits:\n    moves: 4\n# web part\nweb:\n  listen: 0.0.0.0:8443\n")
    assert replace_section("proxmox: {}", "balancing", {"hold": 3}) == "proxmox: {}\nbalancing:\n  hold: 3\n"
    with pytest.raises(InvalidError, match="not a mapping"):
        replace_section("- a\n", "balancing", {})
