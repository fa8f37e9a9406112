"""keel-web's pure parts: whom its limits count, the refused-credential budget, what it
asks of a caller before forwarding, and how a caller's privileges read (keel.web.app,
keel.web.limits, keel.pve.access).  The processes: tests/security/test_web_*.py."""

from __future__ import annotations

import pytest

from keel.errors import AuthError
from keel.pve.access import Caller, parse_authorization
from keel.web import limits
from keel.web.app import Gate, Throttled, required


@pytest.mark.parametrize("address, key", [
    ("192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    ("fe80::1%eth0", "fe80::/64"),
    ("", "?"),
    (None, "?"),
    ("not an address", "not an address"),
])
def test_address_key(address, key):
    assert limits.address_key(address) == key


class FakePve:
    """Stands in for PVE's permission check: a set of valid credentials, and a count."""

    def __init__(self, valid):
        self.valid, self.asked = valid, 0

    def __call__(self, url, authorization, verify):
        self.asked += 1
        if authorization not in self.valid:
            raise AuthError("refused")
        user, ticket = parse_authorization(authorization)
        return Caller(user, {"/": {"Sys.Audit": 1}}, ticket)


GOOD = "PVEAPIToken=alice@pve!t=s3cret"


def test_five_refusals_a_minute_then_429_without_asking_pve():
    pve = FakePve({GOOD})
    gate = Gate("https://pve", True, 60, check=pve)
    gate.caller(GOOD, "192.0.2.1")                       # checked, cached
    for i in range(limits.FAILURES_FREE):
        with pytest.raises(AuthError):
            gate.caller(f"PVEAPIToken=alice@pve!t=wrong{i}", "192.0.2.1")
    asked = pve.asked
    with pytest.raises(Throttled) as err:
        gate.caller("PVEAPIToken=alice@pve!t=wrong-again", "192.0.2.1")
    assert pve.asked == asked and 0 < err.value.retry_after_s <= limits.FAILURE_WINDOW_S
    assert gate.caller(GOOD, "192.0.2.1").user == "alice@pve!t"      # cached: still fine
    with pytest.raises(AuthError):                        # another address has its own budget
        gate.caller("PVEAPIToken=alice@pve!t=wrong", "192.0.2.2")


def test_an_ipv6_host_shares_its_64s_budget():
    gate = Gate("https://pve", True, 60, check=FakePve(set()))
    for i in range(limits.FAILURES_FREE):
        with pytest.raises(AuthError):
            gate.caller(f"PVEAPIToken=a@pve!t=w{i}", f"2001:db8::{i + 1}")
    with pytest.raises(Throttled):
        gate.caller("PVEAPIToken=a@pve!t=w", "2001:db8::ffff")


@pytest.mark.parametrize("method, path, privilege, where", [
    ("GET", "/api/status", "Sys.Audit", "/"),
    ("GET", "/api/plan", "VM.Migrate", None),
    ("POST", "/api/apply", "VM.Migrate", None),
    ("POST", "/api/maintenance/pve1", "VM.Migrate", None),
    ("DELETE", "/api/jobs/7", None, "/"),
    ("PUT", "/api/config", "Sys.Modify", "/"),
    ("POST", "/api/runners/test", "Sys.Modify", "/"),
])
def test_what_keel_web_asks_first(method, path, privilege, where):
    need = required(method, path)
    assert (need.privilege, need.path) == (privilege, where)


def test_a_privilege_without_propagation_holds_on_its_own_path_only():
    caller = Caller("flat@pve", {"/": {"Sys.Audit": 0}, "/vms/110": {"VM.Migrate": 0}})
    assert caller.can("Sys.Audit", "/")
    assert not caller.can("Sys.Audit", "/nodes")
    assert not caller.can("VM.Migrate", "/vms")
    assert caller.anywhere("VM.Migrate") and not caller.anywhere("Sys.Modify")
    assert parse_authorization("PVEAuthCookie=PVE:flat@pve:6500AAAA::c2ln") == ("flat@pve", True)
    assert parse_authorization(GOOD) == ("alice@pve!t", False)
