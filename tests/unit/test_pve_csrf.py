"""CSRF prevention tokens as Proxmox VE makes and checks them (keel.pve.csrf, the
simulator's keel.sim.access): the reference is Perl's Digest::SHA, which PVE itself uses
(pve-common PVE::Ticket, pve-access-control PVE::AccessControl)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from keel.errors import UnavailableError
from keel.pve import csrf
from keel.sim.access import Access

KEY = b"-----BEGIN RSA PRIVATE KEY-----\nnot really a key, only its bytes count\n-----END RSA PRIVATE KEY-----\n"
NOW = 1_760_000_000


def perl_token(key: bytes, userid: str, stamp: int) -> str:
    """What pveproxy hands out: AccessControl's secret, then Ticket's token, in Perl."""
    script = r"""
use Digest::SHA;
local $/; my $input = <STDIN>;
my $secret = Digest::SHA::hmac_sha256_base64($input);
my $timestamp = sprintf("%08X", $ARGV[1]);
print "$timestamp:" . Digest::SHA::hmac_sha256_base64("$timestamp:$ARGV[0]", $secret);
"""
    return subprocess.run(["perl", "-e", script, userid, str(stamp)], input=key, capture_output=True,
                          check=True).stdout.decode()


@pytest.mark.skipif(shutil.which("perl") is None, reason="no perl to compute PVE's reference token")
def test_tokens_are_pves_to_the_byte():
    secret = csrf.secret(KEY)
    expected = perl_token(KEY, "alice@pve", NOW)
    assert csrf.make_token(secret, "alice@pve", NOW) == expected
    assert csrf.verify_token(secret, "alice@pve", expected, NOW + 60)
    access = Access([], {}, [], KEY)
    assert access.make_csrf("alice@pve", f"{NOW:08X}") == expected
    assert access.check_csrf("alice@pve", perl_token(KEY, "alice@pve", int(__import__("time").time())))


@pytest.mark.parametrize("token, userid, now, ok", [
    ("good", "alice@pve", NOW, True),
    ("good", "alice@pve", NOW + 7199, True),
    ("good", "alice@pve", NOW + 7200, False),          # as old as the ticket's lifetime
    ("good", "alice@pve", NOW - 299, True),            # made by a node whose clock is ahead
    ("good", "alice@pve", NOW - 300, False),
    ("good", "bob@pve", NOW, False),                   # another user's
    (None, "alice@pve", NOW, False),
    ("", "alice@pve", NOW, False),
    ("bogus", "alice@pve", NOW, False),
    (f"{NOW:08x}:abc", "alice@pve", NOW, False),       # lower-case hex is not PVE's
    ("lower", "alice@pve", NOW, False),
    ("resigned", "alice@pve", NOW, False),             # signed with another key
])
def test_verify(token, userid, now, ok):
    secret = csrf.secret(KEY)
    made = csrf.make_token(secret, "alice@pve", NOW)
    token = {"good": made, "lower": made.lower(),
             "resigned": csrf.make_token(csrf.secret(b"other"), "alice@pve", NOW)}.get(token, token)
    assert csrf.verify_token(secret, userid, token, now) is ok


def test_the_key_file_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "pve-www.key"
    key = csrf.KeyFile(str(path), recheck_s=0)
    with pytest.raises(UnavailableError) as err:
        key.secret()
    assert str(path) in err.value.message and "web.www_key" in err.value.message
    path.write_bytes(KEY)
    assert key.secret() == csrf.secret(KEY)
    path.write_bytes(b"another key, longer than the first one was\n" * 3)
    assert key.secret() == csrf.secret(path.read_bytes())
