"""The privilege matrix: PVE users and tokens × Keel's endpoints, through keel-web and the
real engine, with ACL entries on ``/``, on one guest (``/vms/110``), on a pool, without
propagation, and tokens with and without privilege separation.

Every caller is made in the simulator through its real API and logs in as the web UI
would (a ticket and its CSRF token, or an API token); keel-web asks PVE what they may do,
the engine decides per object.  docs/security.md, "Who can do what", is this table in words.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from service_helpers import node_stack
from .web_helpers import login

PASSWORD = "keel-demo"
ALLOWED, DENIED = 200, 403

# user -> [(path, role or None for a token's own, propagate)]
USERS = {
    "admin@pve": [("/", "Administrator", True)],
    "op@pve": [("/", "KeelOperator", True), ("/vms/110", "NoAccess", False)],
    "pool@pve": [("/", "Watcher", True), ("/pool/ci", "KeelOperator", True)],
    "flat@pve": [("/", "Watcher", True), ("/vms", "KeelOperator", False)],
    "audit@pve": [("/", "PVEAuditor", True)],
    "tuner@pve": [("/", "Tuner", True)],
    "nobody@pve": [],
    "power@pve": [("/", "Watcher", True), ("/nodes/pve5", "PowerOp", True)],
}
# tokens of admin@pve: with privilege separation it has only its own ACL (an auditor's)
TOKENS = {"admin@pve!priv": (True, [("/", "PVEAuditor", True)]), "admin@pve!full": (False, [])}

MATRIX = {
    # caller:          status history plan  validate  maint-pve1 maint-pve5
    "admin@pve":      (200,   200,    200,  200,      200,       200),
    "op@pve":         (200,   200,    200,  403,      403,       200),
    "pool@pve":       (200,   200,    200,  403,      403,       200),
    "flat@pve":       (200,   200,    200,  403,      403,       403),
    "audit@pve":      (200,   200,    403,  403,      403,       403),
    "tuner@pve":      (200,   200,    403,  200,      403,       403),
    "nobody@pve":     (403,   403,    403,  403,      403,       403),
    "admin@pve!priv": (200,   200,    403,  403,      403,       403),
    "admin@pve!full": (200,   200,    200,  200,      200,       200),
}
# which guests each caller's plan may move (None: any)
MOVABLE = {"admin@pve": None, "op@pve": "not 110", "pool@pve": {125}, "flat@pve": set(), "admin@pve!full": None}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with node_stack(tmp_path_factory.mktemp("matrix"), 20) as (sim, url):
        root = sim.proxmox(user="root@pam", password="keel-demo")
        root.access.roles.post(roleid="KeelOperator", privs="Sys.Audit,VM.Audit,VM.Migrate")
        root.access.roles.post(roleid="Watcher", privs="Sys.Audit")
        root.access.roles.post(roleid="Tuner", privs="Sys.Audit,Sys.Modify")
        root.access.roles.post(roleid="PowerOp", privs="Sys.PowerMgmt")
        for userid, acl in USERS.items():
            root.access.users.post(userid=userid, password=PASSWORD)
            for path, role, propagate in acl:
                root.access.acl.put(path=path, roles=role, users=userid, propagate=int(propagate))
        secrets = {}
        for tokenid, (privsep, acl) in TOKENS.items():
            userid, name = tokenid.split("!")
            made = root.access.users(userid).token(name).post(privsep=int(privsep))
            secrets[tokenid] = made["value"]
            for path, role, propagate in acl:
                root.access.acl.put(path=path, roles=role, tokens=tokenid, propagate=int(propagate))
        yield sim, url, secrets


def headers_for(stack: Any, caller: str) -> dict[str, str]:
    sim, _, secrets = stack
    if "!" in caller:
        return {"Authorization": f"PVEAPIToken={caller}={secrets[caller]}"}
    ticket, csrf = login(sim, caller, PASSWORD)
    return {"Authorization": f"PVEAuthCookie={ticket}", "CSRFPreventionToken": csrf}


def call(stack: Any, caller: str, method: str, path: str, body: Any = None) -> requests.Response:
    _, url, _ = stack
    return requests.request(method, url + path, json=body, headers=headers_for(stack, caller),
                            verify=stack[0].cert, timeout=120)


@pytest.mark.parametrize("caller", list(MATRIX))
def test_each_caller_gets_what_pve_would_give_them(stack, caller):
    status, history, plan, validate, maint1, maint5 = MATRIX[caller]
    got = [call(stack, caller, "GET", "/api/status").status_code,
           call(stack, caller, "GET", "/api/history").status_code]
    answer = call(stack, caller, "GET", "/api/plan")
    got.append(answer.status_code)
    got.append(call(stack, caller, "POST", "/api/config/validate", {"balancing": {}}).status_code)
    for node in ("pve1", "pve5"):
        entered = call(stack, caller, "POST", f"/api/maintenance/{node}", {"action": "enter", "evacuate": False})
        got.append(entered.status_code)
        if entered.status_code == 200:
            left = call(stack, caller, "POST", f"/api/maintenance/{node}", {"action": "leave"})
            assert left.status_code == 200, left.text
    assert got == [status, history, plan, validate, maint1, maint5], caller
    # maintenance's preview (what would move, nothing done) asks what maintenance itself asks
    previews = [call(stack, caller, "GET", f"/api/maintenance/{node}/preview") for node in ("pve1", "pve5")]
    assert [p.status_code for p in previews] == [maint1, maint5], (caller, [p.text[:200] for p in previews])
    for preview, node in zip(previews, ("pve1", "pve5")):
        if preview.status_code == 200:
            data = preview.json()["data"]
            assert data["node"] == node and not data["in_maintenance"] and data["moves"] is not None
    if answer.status_code == 200:
        moved = {m["vmid"] for m in answer.json()["data"]["moves"]}
        allowed = MOVABLE[caller]
        if allowed == "not 110":
            assert 110 not in moved
        elif allowed is not None:
            assert moved <= allowed, (caller, moved)


def test_nothing_the_matrix_refused_reached_pve(stack):
    """Every refusal above happened before any cluster-changing call."""
    sim, _, _ = stack
    writes = [r for r in sim.requests_log() if r["method"] in ("POST", "PUT", "DELETE")
              and "/migrate" in r["path"]]
    assert writes == []


@pytest.mark.parametrize("caller", list(MATRIX))
def test_only_sys_modify_on_root_pauses_resumes_or_drains_a_scale_set(stack, caller):
    """The runtime equivalent of editing ``paused``: ``Sys.Modify`` on ``/``, as the config.  This
    cluster runs no runners, so those allowed are told so (404); the others are refused (403)."""
    sim, url, _ = stack
    for action in ("pause", "resume", "drain"):
        answer = requests.post(f"{url}/api/runners/scale-sets/keel-c2-m4/{action}", json={},
                               headers=headers_for(stack, caller), verify=sim.cert, timeout=60)
        allowed = MATRIX[caller][3] == ALLOWED            # the callers that may validate the config
        assert answer.status_code == (404 if allowed else DENIED), (caller, action, answer.text)
        if not allowed and caller != "nobody@pve":
            assert "Sys.Modify" in answer.json()["message"]


# caller -> (GET /api/power, GET /api/power/plan, wake pve5, wake pve1): waking or sleeping a
# node needs Sys.PowerMgmt on /nodes/<node>, as PVE's own node shutdown and wakeonlan do
POWER = {
    "admin@pve": (200, 200, 202, 202), "admin@pve!full": (200, 200, 202, 202),
    "power@pve": (200, 200, 202, 403),
    "op@pve": (200, 200, 403, 403), "pool@pve": (200, 200, 403, 403), "flat@pve": (200, 200, 403, 403),
    "audit@pve": (200, 200, 403, 403), "tuner@pve": (200, 200, 403, 403), "admin@pve!priv": (200, 200, 403, 403),
    "nobody@pve": (403, 403, 403, 403),
}


@pytest.mark.parametrize("caller", list(POWER))
def test_sys_powermgmt_on_the_node_sleeps_or_wakes_it_and_sys_audit_reads_power(stack, caller):
    got = [call(stack, caller, "GET", "/api/power").status_code,
           call(stack, caller, "GET", "/api/power/plan").status_code]
    for node in ("pve5", "pve1"):
        answer = call(stack, caller, "POST", f"/api/power/nodes/{node}/wake", {})
        got.append(answer.status_code)
        if answer.status_code == DENIED and caller != "nobody@pve":
            assert "Sys.PowerMgmt" in answer.json()["message"], answer.text
    assert tuple(got) == POWER[caller], caller
    # a sleep, and a wake test (a sleep and a wake), ask the same, before anything else: here
    # power saving is off, so those allowed hear so
    for action in ("sleep", "test"):
        answer = call(stack, caller, "POST", f"/api/power/nodes/pve5/{action}", {})
        assert answer.status_code == (400 if POWER[caller][2] == 202 else DENIED), (caller, action, answer.text)
        if answer.status_code == DENIED and caller != "nobody@pve":
            assert "Sys.PowerMgmt" in answer.json()["message"], answer.text



def test_power_answers_name_no_guest_the_caller_may_not_see(stack):
    """power@pve has Sys.Audit on / and no VM.Audit: no vmid or name of a guest in its answers."""
    sim, _, _ = stack
    guests = sim.proxmox(user="root@pam", password=PASSWORD).cluster.resources.get(type="vm")
    for path in ("/api/power", "/api/power/plan"):
        answer = call(stack, "power@pve", "GET", path)
        assert answer.status_code == ALLOWED, answer.text
        for g in guests:
            assert f'"{g["name"]}' not in answer.text and f"({g['vmid']})" not in answer.text, (path, g["name"])


def test_no_power_request_reached_pve(stack):
    """The wakes above were of awake nodes (nothing to send); every sleep was refused."""
    sim, _, _ = stack
    assert not [r for r in sim.requests_log() if r["method"] == "POST"
                and (r["path"].endswith("/wakeonlan") or r["path"].endswith("/status"))]
