"""CSRF as Proxmox VE has it, through keel-web: a write made with a ticket needs the
CSRFPreventionToken PVE handed out with it (finding 6: keel-web let a ticket write without
one).  keel-web checks it against the simulator's pve-www.key, as pveproxy against
/etc/pve/pve-www.key; API tokens need none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from conftest import DEMO_TOKEN
from service_helpers import request_from
from keel.pve import csrf

from .web_helpers import login

REFUSED = "Permission denied - invalid csrf token"
# Writes a caller with Sys.Modify and VM.Migrate may make, each harmless on the demo cluster.
WRITES = [
    ("POST", "/api/config/validate", {"balancing": {}}),
    ("PUT", "/api/runners/settings", {"bogus": 1}),
    ("DELETE", "/api/jobs/999999", None),
    ("POST", "/api/maintenance/pve4", {"action": "leave"}),
]


def secret_of(sim) -> str:
    return csrf.secret((Path(sim.cert).parent / "pve-www.key").read_bytes())


def write(sim, url, method, path, body, authorization, token=None):
    headers = {"Authorization": authorization}
    if token is not None:
        headers["CSRFPreventionToken"] = token
    return requests.request(method, url + path, json=body, headers=headers, verify=sim.cert, timeout=60)


@pytest.fixture(scope="module")
def root(web_stack):
    sim, _ = web_stack
    return login(sim, "root@pam")


def bad_tokens(sim, good: str) -> dict[str, str | None]:
    secret = secret_of(sim)
    now = time.time()
    return {
        "none": None,
        "empty": "",
        "bogus": "bogus",
        "bogus signature": good.split(":")[0] + ":AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "expired": csrf.make_token(secret, "root@pam", now - 7300),
        "from the future": csrf.make_token(secret, "root@pam", now + 400),
        "another user's": login(sim, "auditor@pve")[1],
        "lower case": good.lower(),
        "another key": csrf.make_token(csrf.secret(b"not the cluster's key"), "root@pam", now),
    }


@pytest.mark.parametrize("method, path, body", WRITES)
def test_a_ticket_write_without_a_valid_token_is_refused_as_pve_does(web_stack, root, method, path, body):
    sim, url = web_stack
    ticket, good = root
    for name, token in bad_tokens(sim, good).items():
        answer = write(sim, url, method, path, body, f"PVEAuthCookie={ticket}", token)
        assert answer.status_code == 401, (name, answer.text)
        assert answer.json() == {"data": None, "message": REFUSED, "errors": {}}, name


@pytest.mark.parametrize("method, path, body", WRITES)
def test_the_token_pve_handed_out_passes(web_stack, root, method, path, body):
    sim, url = web_stack
    ticket, good = root
    answer = write(sim, url, method, path, body, f"PVEAuthCookie={ticket}", good)
    assert answer.status_code not in (401, 403), answer.text
    assert answer.json().get("message") != REFUSED


def test_a_token_made_from_the_key_file_passes_keel_web_and_the_simulator_alike(web_stack, root):
    """keel-web and the simulator derive the secret from pve-www.key the same way."""
    sim, url = web_stack
    ticket, _ = root
    made = csrf.make_token(secret_of(sim), "root@pam")
    assert write(sim, url, "POST", "/api/config/validate", {"balancing": {}},
                 f"PVEAuthCookie={ticket}", made).status_code == 200
    pool = requests.post(f"{sim.url}/api2/json/pools", data={"poolid": "csrf-check"}, verify=sim.cert, timeout=30,
                         headers={"Authorization": f"PVEAuthCookie={ticket}", "CSRFPreventionToken": made})
    assert pool.status_code == 200, pool.text
    refused = requests.post(f"{sim.url}/api2/json/pools", data={"poolid": "csrf-check2"}, verify=sim.cert,
                            timeout=30, headers={"Authorization": f"PVEAuthCookie={ticket}",
                                                 "CSRFPreventionToken": made.lower()})
    assert refused.status_code == 401


def test_api_tokens_and_reads_need_no_csrf_token(web_stack, root):
    sim, url = web_stack
    ticket, _ = root
    answer = write(sim, url, "POST", "/api/config/validate", {"balancing": {}}, f"PVEAPIToken={DEMO_TOKEN}")
    assert answer.status_code == 200, answer.text
    read = requests.get(url + "/api/status", headers={"Authorization": f"PVEAuthCookie={ticket}"},
                        verify=sim.cert, timeout=60)
    assert read.status_code == 200, read.text


def test_the_csrf_check_comes_after_the_ticket_check(web_stack, root):
    """A forged ticket is refused as a forged ticket, whatever token comes with it."""
    sim, url = web_stack
    ticket, good = root
    forged = ticket[:-4] + ("AAAA" if not ticket.endswith("AAAA") else "BBBB")
    answer = request_from("127.0.0.21", url, sim.cert, "POST", "/api/config/validate", body=b'{"text": ""}',
                          headers={"Authorization": f"PVEAuthCookie={forged}", "CSRFPreventionToken": good,
                                   "Content-Type": "application/json"})
    assert answer.status == 401 and answer.json()["message"] != REFUSED
