"""Authentication and authorisation as pveproxy and pve-access-control do them: tickets,
CSRF tokens, API tokens with privilege separation, ACLs with pool inheritance."""

from __future__ import annotations

import pytest
import requests
from proxmoxer import ResourceException

try:
    from proxmoxer import AuthenticationError
except ImportError:  # proxmoxer 1.x (Debian 12)
    from proxmoxer.backends.https import AuthenticationError

from conftest import DEMO_PASSWORD, DEMO_TOKEN

API = "/api2/json"
ALICE_SEP = "alice@pve!sep=11111111-2222-4333-8444-555555555555"
ALICE_FULL = "alice@pve!full=66666666-7777-4888-9999-000000000000"

ACCESS_SCENARIO = {
    "pve_version": "9.1.4",
    "nodes": [{"name": "pve1"}, {"name": "pve2"}],
    "pools": [{"poolid": "prod"}, {"poolid": "dev"}],
    "guests": [
        {"vmid": 100, "node": "pve1", "pool": "prod"},
        {"vmid": 101, "node": "pve1", "pool": "dev"},
        {"vmid": 102, "node": "pve2"},
    ],
    "users": [
        {"userid": "root@pam", "password": "secret"},
        {"userid": "alice@pve", "password": "alice-pw", "tokens": [
            {"id": "sep", "secret": ALICE_SEP.split("=", 1)[1], "privsep": True},
            {"id": "full", "secret": ALICE_FULL.split("=", 1)[1], "privsep": False}]},
        {"userid": "bob@pve", "password": "bob-pw"},
        {"userid": "carol@pve", "password": "carol-pw"},
    ],
    "acl": [
        # alice may manage VMs and audit nodes; her privsep token only audits.
        {"path": "/vms", "role": "PVEVMAdmin", "user": "alice@pve"},
        {"path": "/nodes", "role": "PVEAuditor", "user": "alice@pve"},
        {"path": "/", "role": "PVEAuditor", "token": "alice@pve!sep"},
        # bob gets VM user rights through the pool only.
        {"path": "/pool/prod", "role": "PVEVMUser", "user": "bob@pve"},
        # carol may audit /access (and so read other users' permissions).
        {"path": "/access", "role": "PVEAuditor", "user": "carol@pve"},
    ],
}


def url(sim, path: str) -> str:
    return f"{sim.url}{API}{path}"


def login(sim, username: str = "root@pam", password: str = DEMO_PASSWORD) -> requests.Response:
    return requests.post(url(sim, "/access/ticket"), data={"username": username, "password": password},
                         verify=sim.cert, timeout=30)


def ticket_for(sim, username: str = "root@pam", password: str = DEMO_PASSWORD) -> tuple[str, str]:
    response = login(sim, username, password)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    return data["ticket"], data["CSRFPreventionToken"]


def token_header(token: str) -> dict[str, str]:
    return {"Authorization": f"PVEAPIToken={token}"}


@pytest.fixture
def sim(fresh_sim):
    """The demo cluster, reset for each test (cheaper than a new process)."""
    return fresh_sim


# -- tickets -------------------------------------------------------------------------


def test_login_with_the_right_password_returns_ticket_csrf_token_and_caps(shared_sim):
    response = login(shared_sim)
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["username"] == "root@pam"
    assert data["ticket"].startswith("PVE:root@pam:")
    stamp, _, signature = data["CSRFPreventionToken"].partition(":")
    assert len(stamp) == 8 and int(stamp, 16) > 0 and signature
    assert data["cap"]["vms"]["VM.Migrate"] == 1
    assert data["clustername"] == "demo"


@pytest.mark.parametrize("username, password", [
    ("root@pam", "wrong"),
    ("nobody@pve", "keel-demo"),
    ("root@pam", ""),
])
def test_login_with_bad_credentials_is_401_authentication_failure(shared_sim, username, password):
    response = login(shared_sim, username, password)
    assert response.status_code == 401
    assert response.reason == "authentication failure"


def test_login_with_a_wrong_password_makes_proxmoxer_raise(shared_sim):
    with pytest.raises(AuthenticationError):
        shared_sim.proxmox(user="root@pam", password="wrong")


def test_login_without_clustername_for_a_user_without_sys_audit(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    data = login(sim, "bob@pve", "bob-pw").json()["data"]
    assert data["username"] == "bob@pve"
    assert "clustername" not in data


def test_ticket_is_accepted_as_a_cookie(shared_sim):
    ticket, _ = ticket_for(shared_sim)
    response = requests.get(url(shared_sim, "/cluster/status"), cookies={"PVEAuthCookie": ticket},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 200
    assert response.json()["data"][0]["type"] == "cluster"


def test_ticket_is_accepted_in_the_authorization_header(shared_sim):
    ticket, _ = ticket_for(shared_sim)
    response = requests.get(url(shared_sim, "/cluster/status"),
                            headers={"Authorization": f"PVEAuthCookie={ticket}"},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 200


def test_a_ticket_can_renew_itself_as_password(shared_sim):
    ticket, _ = ticket_for(shared_sim)
    renewed = login(shared_sim, "root@pam", ticket)
    assert renewed.status_code == 200
    assert renewed.json()["data"]["ticket"].startswith("PVE:root@pam:")


@pytest.mark.parametrize("ticket", [
    "PVE:root@pam:6A000000::forged",
    "garbage",
])
def test_forged_ticket_is_401_authentication_failed(shared_sim, ticket):
    response = requests.get(url(shared_sim, "/cluster/status"), cookies={"PVEAuthCookie": ticket},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 401
    assert response.reason == "Authentication failed!"


@pytest.mark.parametrize("csrf", [None, "", "5F000000:bad"])
def test_write_with_ticket_needs_a_valid_csrf_token(shared_sim, csrf):
    ticket, _ = ticket_for(shared_sim)
    headers = {} if csrf is None else {"CSRFPreventionToken": csrf}
    response = requests.put(url(shared_sim, "/cluster/options"), data={"description": "x"},
                            cookies={"PVEAuthCookie": ticket}, headers=headers,
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 401
    assert response.reason == "Permission denied - invalid csrf token"


def test_csrf_token_of_another_user_is_refused(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    ticket, _ = ticket_for(sim, "alice@pve", "alice-pw")
    _, other_csrf = ticket_for(sim, "root@pam", "secret")
    response = requests.post(url(sim, "/nodes/pve1/qemu/100/status/start"),
                             cookies={"PVEAuthCookie": ticket},
                             headers={"CSRFPreventionToken": other_csrf}, verify=sim.cert, timeout=30)
    assert response.status_code == 401
    assert response.reason == "Permission denied - invalid csrf token"


def test_write_with_ticket_and_csrf_token_succeeds(sim):
    ticket, csrf = ticket_for(sim)
    response = requests.put(url(sim, "/cluster/options"), data={"description": "hello"},
                            cookies={"PVEAuthCookie": ticket}, headers={"CSRFPreventionToken": csrf},
                            verify=sim.cert, timeout=30)
    assert response.status_code == 200
    assert response.json() == {"data": None}


def test_proxmoxer_ticket_session_reads_and_writes(sim):
    pve = sim.proxmox(user="root@pam", password=DEMO_PASSWORD)
    upid = pve.nodes("pve3").qemu(121).status.start.post()
    assert upid.startswith("UPID:pve3:")
    assert ":qmstart:121:root@pam:" in upid


def test_get_reads_need_no_csrf_token(shared_sim):
    ticket, _ = ticket_for(shared_sim)
    response = requests.get(url(shared_sim, "/nodes/pve1/qemu"), cookies={"PVEAuthCookie": ticket},
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 200


# -- API tokens ----------------------------------------------------------------------


def test_api_token_reads_without_csrf(shared_sim):
    pve = shared_sim.proxmox()
    assert {n["node"] for n in pve.nodes.get()} == {"pve1", "pve2", "pve3", "pve4", "pve5"}


def test_api_token_writes_without_csrf(sim):
    response = requests.post(url(sim, "/nodes/pve3/qemu/121/status/start"),
                             headers=token_header(DEMO_TOKEN), verify=sim.cert, timeout=30)
    assert response.status_code == 200
    assert ":qmstart:121:keel@pve!keel:" in response.json()["data"]


@pytest.mark.parametrize("token", [
    "keel@pve!keel=00000000-0000-0000-0000-000000000000",   # wrong secret
    "keel@pve!nope=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f",   # no such token
    "ghost@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f",  # no such user
    "keel@pve!keel",                                         # no secret at all
])
def test_bad_api_token_is_401_authentication_failed(shared_sim, token):
    response = requests.get(url(shared_sim, "/version"), headers=token_header(token),
                            verify=shared_sim.cert, timeout=30)
    assert response.status_code == 401
    assert response.reason == "Authentication failed!"


def test_bad_api_token_makes_proxmoxer_raise_401(shared_sim):
    pve = shared_sim.proxmox(token="keel@pve!keel=00000000-0000-0000-0000-000000000000")
    with pytest.raises(ResourceException) as err:
        pve.cluster.status.get()
    assert err.value.status_code == 401


def test_api_token_cannot_ask_for_a_ticket(shared_sim):
    response = requests.post(url(shared_sim, "/access/ticket"),
                             data={"username": "root@pam", "password": DEMO_PASSWORD},
                             headers=token_header(DEMO_TOKEN), verify=shared_sim.cert, timeout=30)
    assert response.status_code == 403
    # PVE's message has a line break before its closing parenthesis; the reason is line one.
    assert response.reason == ("Permission check failed (URI '/access/ticket' not available "
                               "with API token, need proper ticket.")


@pytest.mark.parametrize("path", ["/version", "/cluster/status", "/nodes/pve1/status",
                                  "/nodes/pve1/frobnicate"])
def test_no_credentials_is_401_no_ticket(shared_sim, path):
    response = requests.get(url(shared_sim, path), verify=shared_sim.cert, timeout=30)
    assert response.status_code == 401
    assert response.reason == "No ticket"


def test_login_page_needs_no_credentials(shared_sim):
    response = requests.get(url(shared_sim, "/access/ticket"), verify=shared_sim.cert, timeout=30)
    assert response.status_code == 200


# -- privileges ----------------------------------------------------------------------


def test_auditor_reads_but_cannot_write(sim):
    auditor = sim.proxmox(user="auditor@pve", password=DEMO_PASSWORD)
    assert len(auditor.cluster.resources.get(type="vm")) == 27
    with pytest.raises(ResourceException) as err:
        auditor.nodes("pve1").qemu(100).status.start.post()
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/vms/100, VM.PowerMgmt)"


@pytest.mark.parametrize("method, path, data, failed", [
    ("PUT", "/cluster/options", {"description": "x"}, "/, Sys.Modify"),
    ("POST", "/nodes/pve1/qemu/100/migrate", {"target": "pve2", "online": 1}, "/vms/100, VM.Migrate"),
    ("PUT", "/nodes/pve1/qemu/100/config", {"tags": "x"},
     "/vms/100, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|"
     "VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit"),
    ("POST", "/cluster/ha/resources/vm:100/migrate", {"node": "pve2"}, "/, Sys.Console"),
    ("DELETE", "/nodes/pve3/qemu/121", {}, "/vms/121, VM.Allocate"),
])
def test_auditor_writes_are_403_naming_path_and_privilege(sim, method, path, data, failed):
    ticket, csrf = ticket_for(sim, "auditor@pve")
    response = requests.request(method, url(sim, path), data=data, cookies={"PVEAuthCookie": ticket},
                                headers={"CSRFPreventionToken": csrf}, verify=sim.cert, timeout=30)
    assert response.status_code == 403
    assert response.reason == f"Permission check failed ({failed})"


def test_clone_without_rights_on_newid_or_pool_is_a_bare_403(sim):
    ticket, csrf = ticket_for(sim, "auditor@pve")
    response = requests.post(url(sim, "/nodes/pve5/qemu/9000/clone"), data={"newid": 500},
                             cookies={"PVEAuthCookie": ticket}, headers={"CSRFPreventionToken": csrf},
                             verify=sim.cert, timeout=30)
    assert response.status_code == 403
    assert response.reason == "Permission check failed (/vms/9000, VM.Clone)"


def test_permission_check_comes_before_parameter_check(sim):
    ticket, csrf = ticket_for(sim, "auditor@pve")
    response = requests.put(url(sim, "/cluster/options"), data={"colour": "blue"},
                            cookies={"PVEAuthCookie": ticket}, headers={"CSRFPreventionToken": csrf},
                            verify=sim.cert, timeout=30)
    assert response.status_code == 403


def test_privsep_token_gets_the_intersection_of_its_and_its_users_privileges(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    sep = sim.proxmox(token=ALICE_SEP)
    # VM.Audit is in both (PVEAuditor on / for the token, PVEVMAdmin on /vms for alice).
    assert [g["vmid"] for g in sep.cluster.resources.get(type="vm")] == [100, 101, 102]
    # VM.PowerMgmt is only alice's.
    with pytest.raises(ResourceException) as err:
        sep.nodes("pve1").qemu(100).status.start.post()
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/vms/100, VM.PowerMgmt)"
    # Sys.Audit on / is only the token's: alice has nothing on /, so neither has the token.
    with pytest.raises(ResourceException) as err:
        sep.cluster.ha.resources.get()
    assert err.value.status_code == 403
    # Sys.Audit on /nodes is in both.
    assert sep.nodes("pve1").status.get()["cpuinfo"]["cpus"] == 16


def test_token_without_privsep_has_all_its_users_privileges(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    full = sim.proxmox(token=ALICE_FULL)
    upid = full.nodes("pve1").qemu(100).status.stop.post()
    assert ":qmstop:100:alice@pve!full:" in upid


ROOT_FULL = "root@pam!full=aaaaaaaa-1111-4222-8333-444444444444"
ROOT_SEP = "root@pam!sep=bbbbbbbb-1111-4222-8333-444444444444"
ROOT_TOKENS = {
    "nodes": [{"name": "pve1"}, {"name": "pve2"}],
    "guests": [{"vmid": 100, "node": "pve1"}],
    "users": [{"userid": "root@pam", "password": "secret", "tokens": [
        {"id": "full", "secret": ROOT_FULL.split("=", 1)[1], "privsep": False},
        {"id": "sep", "secret": ROOT_SEP.split("=", 1)[1]}]}],
    # root@pam has no ACL entry of its own (it needs none); its privsep token audits.
    "acl": [{"path": "/", "role": "PVEAuditor", "token": "root@pam!sep"}],
}


def test_root_token_without_privsep_has_every_privilege(sim_factory):
    sim = sim_factory(ROOT_TOKENS)
    full = sim.proxmox(token=ROOT_FULL)
    upid = full.nodes("pve1").qemu(100).status.stop.post()
    assert ":qmstop:100:root@pam!full:" in upid
    root = sim.proxmox(user="root@pam", password="secret")
    assert root.access.permissions.get(userid="root@pam!full", path="/vms/100") == \
        root.access.permissions.get(userid="root@pam", path="/vms/100")
    # Still a token, not root@pam itself: root-only options stay closed to it.
    with pytest.raises(ResourceException) as err:
        full.nodes("pve1").qemu(100).migrate.post(target="pve2", force=1)
    assert err.value.status_code == 400


def test_root_token_with_privsep_has_its_own_privileges_only(sim_factory):
    sim = sim_factory(ROOT_TOKENS)
    sep = sim.proxmox(token=ROOT_SEP)
    assert [g["vmid"] for g in sep.cluster.resources.get(type="vm")] == [100]
    with pytest.raises(ResourceException) as err:
        sep.nodes("pve1").qemu(100).status.stop.post()
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/vms/100, VM.PowerMgmt)"


CONFIG_RIGHTS = {
    "nodes": [{"name": "pve1"}],
    "guests": [{"vmid": 100, "node": "pve1", "tags": ["web"]},
               {"vmid": 101, "node": "pve1", "type": "lxc", "tags": ["web"]}],
    "users": [{"userid": "root@pam", "password": "secret"},
              {"userid": "cpu@pve", "password": "cpu-pw"}],
    "roles": {"CpuOnly": ["VM.Audit", "VM.Config.CPU"]},
    "acl": [{"path": "/vms", "role": "CpuOnly", "user": "cpu@pve"}],
}


@pytest.mark.parametrize("kind, vmid", [("qemu", 100), ("lxc", 101)])
def test_changing_tags_needs_vm_config_options(sim_factory, kind, vmid):
    # GuestHelpers::assert_tag_permissions checks VM.Config.Options before the tag rules.
    sim = sim_factory(CONFIG_RIGHTS)
    guest = getattr(sim.proxmox(user="cpu@pve", password="cpu-pw").nodes("pve1"), kind)(vmid)
    guest.config.put(cores=2)
    for change in ({"tags": "web;db"}, {"delete": "tags"}):
        with pytest.raises(ResourceException) as err:
            guest.config.put(**change)
        assert err.value.status_code == 403
        assert err.value.content == f"Permission check failed (/vms/{vmid}, VM.Config.Options)"
    assert guest.config.get()["tags"] == "web"


def test_privsep_token_permissions_show_the_intersection(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    root = sim.proxmox(user="root@pam", password="secret")
    sep = root.access.permissions.get(userid="alice@pve!sep", path="/vms/100")
    user = root.access.permissions.get(userid="alice@pve", path="/vms/100")
    assert "VM.Audit" in sep["/vms/100"] and "VM.PowerMgmt" not in sep["/vms/100"]
    assert {"VM.Audit", "VM.PowerMgmt", "VM.Migrate"} <= set(user["/vms/100"])
    assert set(sep["/vms/100"]) <= set(user["/vms/100"])


def test_pool_acl_gives_rights_on_the_pools_guests_only(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    bob = sim.proxmox(user="bob@pve", password="bob-pw")
    assert [g["vmid"] for g in bob.cluster.resources.get(type="vm")] == [100]
    assert bob.nodes("pve1").qemu(100).status.stop.post().startswith("UPID:pve1:")
    with pytest.raises(ResourceException) as err:
        bob.nodes("pve1").qemu(101).status.stop.post()
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/vms/101, VM.PowerMgmt)"


def test_pool_inherited_privileges_do_not_propagate(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    bob = sim.proxmox(user="bob@pve", password="bob-pw")
    perms = bob.access.permissions.get(path="/vms/100")
    assert perms["/vms/100"]["VM.PowerMgmt"] == 0
    assert bob.access.permissions.get(path="/vms/101") == {"/vms/101": {}}


def test_pool_membership_change_moves_the_rights(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    root = sim.proxmox(user="root@pam", password="secret")
    root.pools.put(poolid="prod", vms="101", **{"allow-move": 1})
    bob = sim.proxmox(user="bob@pve", password="bob-pw")
    assert [g["vmid"] for g in bob.cluster.resources.get(type="vm")] == [100, 101]


# -- GET /access/permissions ---------------------------------------------------------


def test_permissions_of_oneself_list_the_acl_paths(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    alice = sim.proxmox(user="alice@pve", password="alice-pw")
    perms = alice.access.permissions.get()
    assert perms["/vms"]["VM.Migrate"] == 1
    assert perms["/nodes"]["Sys.Audit"] == 1
    assert "/" not in perms                     # nothing on /: paths without privileges are left out
    assert perms["/vms/100"]["VM.Migrate"] == 1  # pool member paths are listed too


def test_permissions_with_a_path_are_the_effective_set_there(shared_sim):
    pve = shared_sim.proxmox()
    perms = pve.access.permissions.get(path="/vms/100")
    assert list(perms) == ["/vms/100"]
    assert perms["/vms/100"]["VM.Migrate"] == 1


def test_root_has_every_privilege(shared_sim):
    root = shared_sim.proxmox(user="root@pam", password=DEMO_PASSWORD)
    perms = root.access.permissions.get(path="/")["/"]
    assert {"Sys.Modify", "VM.Allocate", "Permissions.Modify", "Datastore.Allocate"} <= set(perms)


def test_permissions_of_own_token_need_no_sys_audit(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    alice = sim.proxmox(user="alice@pve", password="alice-pw")
    perms = alice.access.permissions.get(userid="alice@pve!sep", path="/nodes/pve1")
    assert "Sys.Audit" in perms["/nodes/pve1"]


def test_permissions_of_another_user_need_sys_audit_on_access(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    bob = sim.proxmox(user="bob@pve", password="bob-pw")
    with pytest.raises(ResourceException) as err:
        bob.access.permissions.get(userid="alice@pve")
    assert err.value.status_code == 403
    assert err.value.content == "Permission check failed (/access, Sys.Audit)"
    carol = sim.proxmox(user="carol@pve", password="carol-pw")
    perms = carol.access.permissions.get(userid="bob@pve", path="/vms/100")
    assert "VM.PowerMgmt" in perms["/vms/100"]


def test_a_token_asking_for_its_users_permissions_needs_sys_audit(sim_factory):
    sim = sim_factory(ACCESS_SCENARIO)
    sep = sim.proxmox(token=ALICE_SEP)
    with pytest.raises(ResourceException) as err:
        sep.access.permissions.get(userid="alice@pve")
    assert err.value.status_code == 403


def test_permissions_reject_a_malformed_userid(shared_sim):
    response = requests.get(url(shared_sim, "/access/permissions"), params={"userid": "no realm"},
                            headers=token_header(DEMO_TOKEN), verify=shared_sim.cert, timeout=30)
    assert response.status_code == 400
    assert "userid" in response.json()["errors"]
