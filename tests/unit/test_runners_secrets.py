# SPDX-License-Identifier: AGPL-3.0-or-later
"""The runners' secrets as the web UI sets them (keel.runners.secrets), and the runners:
section replaced in a config file without touching the rest (keel.engine.runners_admin)."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from keel.engine.runners_admin import replace_section
from keel.errors import InvalidError
from keel.runners import secrets

RUNNERS = {"github": {"url": "https://github.com/o", "token_path": "/s/github-token"},
           "providers": [{"name": "pve"}, {"name": "other", "url": "https://b:8006"}]}


def slot(secret_id):
    return secrets.slot(RUNNERS, secret_id)


def test_every_secret_has_a_slot_named_by_its_config_key():
    ids = {s.id: s.config_key for s in secrets.slots(RUNNERS)}
    assert ids == {"github.app_private_key": "runners.github.app_private_key_path",
                   "github.token": "runners.github.token_path",
                   "webhook.secret": "runners.webhook.secret_path",
                   "providers.pve.token_secret": "runners.providers[0].token_secret_path",
                   "providers.other.token_secret": "runners.providers[1].token_secret_path"}
    with pytest.raises(InvalidError, match="no provider named 'nope'"):
        slot("providers.nope.token_secret")
    with pytest.raises(InvalidError, match="no secret"):
        slot("password")


@pytest.mark.parametrize("secret_id,value,ok", [
    ("github.token", "ghp_" + "A1b2" * 9, True),
    ("github.token", "github_pat_" + "x" * 60, True),
    ("github.token", "0123456789abcdef" * 2 + "01234567", True),
    ("github.token", "password123", False),
    ("github.token", "ghp_short", False),
    ("webhook.secret", "a-long-enough-webhook-secret", True),
    ("webhook.secret", "short", False),
    ("webhook.secret", " padded-webhook-secret-value ", False),
    ("webhook.secret", "line\nbreak-in-the-webhook-secret", False),
    ("providers.pve.token_secret", "6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f", True),
    ("providers.pve.token_secret", "not-a-uuid", False),
])
def test_values_are_checked_and_errors_name_the_field_never_the_value(secret_id, value, ok):
    found = slot(secret_id)
    if ok:
        assert secrets.check(found, value) == value.strip()
        return
    with pytest.raises(InvalidError) as caught:
        secrets.check(found, value)
    assert set(caught.value.errors) == {found.field}
    assert value.strip() not in str(caught.value)


def test_a_private_key_must_be_an_unencrypted_rsa_key_in_pem():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    assert secrets.check(slot("github.app_private_key"), pem).endswith("-----END RSA PRIVATE KEY-----\n")
    locked = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.BestAvailableEncryption(b"pass")).decode()
    for value, message in ((locked, "encrypted"), ("ghp_" + "a" * 36, "not a private key in PEM"),
                           (pem.replace("MII", "XII"), "does not parse"), ("x" * 20000, "too long")):
        with pytest.raises(InvalidError, match=message):
            secrets.check(slot("github.app_private_key"), value)


def test_written_atomically_with_mode_0600_inside_the_directory_only(tmp_path):
    directory = tmp_path / "secrets"
    path = secrets.inside(directory, str(directory / "github-token"), "runners.github.token")
    old = os.umask(0)
    try:
        secrets.write(path, "ghp_" + "a" * 36)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "ghp_" + "a" * 36
    assert [p.name for p in directory.iterdir()] == ["github-token"]
    for outside in ("/etc/shadow", str(directory / ".." / "elsewhere")):
        with pytest.raises(InvalidError, match="outside the secrets directory"):
            secrets.inside(directory, outside, "runners.github.token")
    with pytest.raises(InvalidError, match="not an absolute path"):
        secrets.inside(directory, "github-token", "runners.github.token")
    (directory / "link").symlink_to(tmp_path / "target")
    with pytest.raises(InvalidError, match="outside|not a plain file"):
        secrets.inside(directory, str(directory / "link"), "runners.github.token")


def test_state_says_set_or_not_and_nothing_more(tmp_path):
    token = tmp_path / "github-token"
    token.write_text("ghp_" + "b" * 36)
    runners = {"github": {"token_path": str(token)}}
    state = {s["id"]: s for s in secrets.state(runners)}
    assert state["github.token"]["set"] is True and state["webhook.secret"]["set"] is False
    assert "ghp_" not in repr(state)


def test_the_runners_section_is_replaced_and_the_rest_kept_byte_for_byte():
    text = ("# Keel\nproxmox:\n  url: https://127.0.0.1:8006   # here\n\nrunners:\n  github: {url: a}\n"
            "  # gone with the section\n\n# the balancer\nbalancing:\n  interval: 2s\n")
    replaced = replace_section(text, "runners", {"github": {"url": "b"}})
    assert replaced == ("# Keel\nproxmox:\n  url: https://127.0.0.1:8006   # here\n\nrunners:\n  github:\n"
                        "    url: b\n# the balancer\nbalancing:\n  interval: 2s\n")
    removed = replace_section(text, "runners", None)
    assert "runners" not in removed and removed.startswith("# Keel\nproxmox:") and "# the balancer" in removed
    assert replace_section("proxmox: {}", "runners", {"a": 1}) == "proxmox: {}\nrunners:\n  a: 1\n"
