"""keel.sim.access without a server: ACL resolution, tokens, tickets, CSRF tokens."""

from __future__ import annotations

import pytest

from keel.sim import scenario as sc
from keel.sim.access import ALL_PRIVS, Access, Auth
from keel.sim.errors import ApiError


def acl(path: str, role: str, ugid: str, kind: str = "user", propagate: bool = True) -> sc.Acl:
    return sc.Acl(path, role, ugid, kind, propagate)


USERS = [
    sc.User("root@pam", "rootpw", True, (), []),
    sc.User("alice@pve", "alicepw", True, ("ops",), [sc.Token("sep", "s3cret", True),
                                                      sc.Token("full", "f00", False)]),
    sc.User("bob@pve", "bobpw", True, ("ops",), []),
    sc.User("off@pve", "offpw", False, (), [sc.Token("t", "x", False)]),
]
ROLES = {"Mover": ("VM.Audit", "VM.Migrate")}


def make(entries: list[sc.Acl], pools: dict[str, set[int]] | None = None) -> Access:
    access = Access(USERS, ROLES, entries)
    pools = pools or {}
    access.pools_of = lambda path: sorted(p for p, vmids in pools.items()
                                          if path.startswith("/vms/") and int(path[5:]) in vmids)
    access.pool_member_paths = lambda: [f"/vms/{v}" for vmids in pools.values() for v in vmids]
    return access


ALICE = Auth("alice@pve")
BOB = Auth("bob@pve")


# -- privilege resolution --------------------------------------------------------------


def test_root_has_every_privilege_everywhere():
    access = make([])
    assert set(access.privileges(Auth("root@pam"), "/vms/100")) == ALL_PRIVS


def test_no_acl_means_no_privileges():
    assert make([]).privileges(ALICE, "/") == {}


def test_a_propagating_acl_reaches_paths_below_with_propagate_flag_1():
    access = make([acl("/vms", "PVEAuditor", "alice@pve")])
    assert access.privileges(ALICE, "/vms/100")["VM.Audit"] == 1
    assert access.privileges(ALICE, "/") == {}


def test_a_non_propagating_acl_counts_only_on_its_own_path():
    access = make([acl("/vms", "PVEAuditor", "alice@pve", propagate=False)])
    assert access.privileges(ALICE, "/vms")["VM.Audit"] == 0
    assert access.privileges(ALICE, "/vms/100") == {}


def test_the_most_specific_acl_replaces_what_is_inherited():
    access = make([acl("/", "Administrator", "alice@pve"), acl("/vms/100", "PVEAuditor", "alice@pve")])
    assert "VM.Migrate" in access.privileges(ALICE, "/vms/101")
    assert set(access.privileges(ALICE, "/vms/100")) == set(access.roles["PVEAuditor"])


def test_a_users_own_acl_beats_its_groups_on_the_same_path():
    access = make([acl("/vms", "Administrator", "ops", kind="group"), acl("/vms", "PVEAuditor", "alice@pve")])
    assert "VM.Migrate" not in access.privileges(ALICE, "/vms/1")
    assert "VM.Migrate" in access.privileges(BOB, "/vms/1")


def test_no_access_beats_other_roles_on_the_same_path():
    access = make([acl("/vms", "NoAccess", "alice@pve"), acl("/vms", "PVEVMAdmin", "alice@pve")])
    assert access.privileges(ALICE, "/vms/100") == {}


def test_custom_roles_from_the_scenario():
    access = make([acl("/", "Mover", "alice@pve")])
    assert set(access.privileges(ALICE, "/vms/7")) == {"VM.Audit", "VM.Migrate"}


def test_a_disabled_user_has_nothing():
    access = make([acl("/", "Administrator", "off@pve")])
    assert access.privileges(Auth("off@pve"), "/") == {}


def test_pool_roles_reach_the_pools_guests_without_propagating():
    access = make([acl("/pool/prod", "PVEVMUser", "alice@pve")], pools={"prod": {100}})
    assert access.privileges(ALICE, "/vms/100")["VM.PowerMgmt"] == 0
    assert access.privileges(ALICE, "/vms/101") == {}


def test_a_direct_acl_keeps_its_propagate_flag_over_a_pools_role():
    access = make([acl("/pool/prod", "PVEAuditor", "alice@pve"), acl("/vms", "PVEAuditor", "alice@pve")],
                  pools={"prod": {100}})
    assert access.privileges(ALICE, "/vms/100")["VM.Audit"] == 1


def test_no_access_on_the_pool_beats_the_guests_own_acl():
    access = make([acl("/pool/prod", "NoAccess", "alice@pve"), acl("/vms", "PVEAuditor", "alice@pve")],
                  pools={"prod": {100}})
    assert access.privileges(ALICE, "/vms/100") == {}
    assert "VM.Audit" in access.privileges(ALICE, "/vms/101")


# -- tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("token_acl, user_acl, path, expected", [
    # the token's own ACL ∩ the user's
    ([acl("/", "PVEAuditor", "alice@pve!sep", "token")], [acl("/vms", "PVEVMAdmin", "alice@pve")],
     "/vms/1", {"VM.Audit", "VM.GuestAgent.Audit"}),
    # nothing of its own: nothing at all
    ([], [acl("/", "Administrator", "alice@pve")], "/vms/1", set()),
    # the user lacks what the token has: not granted
    ([acl("/", "Administrator", "alice@pve!sep", "token")], [acl("/nodes", "PVEAuditor", "alice@pve")],
     "/vms/1", set()),
])
def test_privsep_token_gets_the_intersection(token_acl, user_acl, path, expected):
    access = make(token_acl + user_acl)
    assert set(access.privileges(Auth("alice@pve", "sep"), path)) == expected


def test_intersected_privileges_propagate_only_if_both_do():
    access = make([acl("/vms", "PVEAuditor", "alice@pve!sep", "token", propagate=False),
                   acl("/vms", "PVEAuditor", "alice@pve")])
    assert access.privileges(Auth("alice@pve", "sep"), "/vms")["VM.Audit"] == 0


def test_token_without_privsep_has_its_users_privileges():
    access = make([acl("/", "PVEVMAdmin", "alice@pve")])
    assert access.privileges(Auth("alice@pve", "full"), "/vms/1") == access.privileges(ALICE, "/vms/1")


def test_a_users_group_acl_does_not_reach_its_privsep_token():
    access = make([acl("/", "Administrator", "ops", kind="group"),
                   acl("/", "PVEAuditor", "alice@pve!sep", "token")])
    assert "VM.Audit" in access.privileges(Auth("alice@pve", "sep"), "/vms/1")


@pytest.mark.parametrize("value, ok", [
    ("alice@pve!sep=s3cret", True),
    ("alice@pve!sep=wrong", False),
    ("alice@pve!nope=s3cret", False),
    ("nobody@pve!sep=s3cret", False),
    ("alice@pve", False),
    ("off@pve!t=x", False),
])
def test_check_token(value, ok):
    auth = make([]).check_token(value)
    assert (auth == Auth("alice@pve", "sep")) if ok else auth is None


def test_missing_names_the_first_missing_privilege():
    access = make([acl("/", "PVEAuditor", "alice@pve")])
    assert access.missing(ALICE, "/vms/1", ["VM.Audit", "VM.Migrate", "VM.Allocate"]) == "VM.Migrate"
    assert access.missing(ALICE, "/vms/1", ["VM.Audit"]) is None


def test_has_any_of():
    access = make([acl("/", "PVEAuditor", "alice@pve")])
    assert access.has(ALICE, "/", ["Sys.Modify", "Sys.Audit"], any_of=True)
    assert not access.has(ALICE, "/", ["Sys.Modify", "Sys.Audit"])


# -- tickets and CSRF ------------------------------------------------------------------


def test_login_makes_a_ticket_that_checks_and_renews():
    access = make([])
    user = access.login("alice@pve", "alicepw")
    ticket, csrf = access.make_ticket(user.userid)
    assert ticket.startswith("PVE:alice@pve:") and "::" in ticket
    assert access.check_ticket(ticket) == "alice@pve"
    assert access.login("alice@pve", ticket).userid == "alice@pve"
    assert access.check_csrf("alice@pve", csrf)
    assert not access.check_csrf("bob@pve", csrf)
    assert not access.check_csrf("alice@pve", None)


def test_login_with_a_realm_parameter():
    assert make([]).login("alice", "alicepw", realm="pve").userid == "alice@pve"


@pytest.mark.parametrize("username, password", [
    ("alice@pve", "wrong"), ("ghost@pve", "x"), ("off@pve", "offpw"), ("alice@pve", "PVE:alice@pve:0::x"),
])
def test_bad_logins_are_401_authentication_failure(username, password):
    with pytest.raises(ApiError) as err:
        make([]).login(username, password)
    assert (err.value.status, err.value.message) == (401, "authentication failure")


def test_a_ticket_from_another_simulator_is_not_valid():
    ticket, _ = make([]).make_ticket("alice@pve")
    assert make([]).check_ticket(ticket) is None


def test_tampered_ticket_is_not_valid():
    access = make([])
    ticket, _ = access.make_ticket("alice@pve")
    assert access.check_ticket(ticket.replace("alice@pve", "root@pam")) is None


# -- listings --------------------------------------------------------------------------


def test_effective_permissions_list_top_levels_acl_paths_and_pool_members_with_privileges():
    access = make([acl("/vms", "PVEAuditor", "alice@pve"), acl("/storage/ceph", "PVEAuditor", "bob@pve")],
                  pools={"prod": {100}})
    perms = access.effective_permissions(ALICE)
    assert set(perms) == {"/vms", "/vms/100"}
    assert "/storage/ceph" not in perms   # an ACL path, but alice has nothing there


def test_capabilities_of_a_login():
    access = make([acl("/", "PVEAuditor", "alice@pve")])
    caps = access.capabilities(ALICE)
    assert set(caps) == {"vms", "access", "storage", "nodes", "sdn", "dc", "mapping"}
    assert caps["vms"] == {"VM.Audit": 1, "VM.GuestAgent.Audit": 1}
    assert caps["dc"] == {"SDN.Audit": 1, "Sys.Audit": 1}
    assert caps["nodes"] == {"Sys.Audit": 1}
