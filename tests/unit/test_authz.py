"""Per-object privileges from PVE's effective-permissions map (keel.authz)."""

import pytest

from keel.authz import HEADER_PRIVILEGES, Principal, decode, encode
from keel.errors import InvalidError


def web(tree):
    return Principal("alice@pve", decode(encode(tree)), via_web=True)


def test_a_privilege_on_vms_that_propagates_reaches_each_guest():
    alice = web({"/vms": {"VM.Migrate": 1, "VM.Audit": 1}})
    assert alice.can("VM.Migrate", "/vms/110")
    assert alice.can("VM.Audit", "/vms/110", considered={"/vms/120"})


def test_a_privilege_that_does_not_propagate_holds_on_its_own_path_only():
    # PVE answers 0 for "granted here, not passed down": it is still granted here.
    alice = web({"/": {"Sys.Audit": 0}, "/vms": {"VM.Migrate": 0}})
    assert alice.can("Sys.Audit", "/")
    assert alice.can("VM.Migrate", "/vms")
    assert not alice.can("VM.Migrate", "/vms/110")


def test_a_guest_with_its_own_noaccess_entry_is_not_inherited_into():
    # VM.Migrate on / but NoAccess on /vms/110: PVE leaves /vms/110 out of its answer.
    alice = web({"/": {"VM.Migrate": 1, "Sys.Audit": 1}, "/vms": {"VM.Migrate": 1, "Sys.Audit": 1}})
    acl_paths = {"/", "/vms/110"}
    assert not alice.can("VM.Migrate", "/vms/110", considered=acl_paths)
    assert alice.can("VM.Migrate", "/vms/111", considered=acl_paths)


def test_a_pool_member_gets_what_pve_computed_for_it():
    bob = web({"/pool/ci": {"VM.Migrate": 1}, "/vms/200": {"VM.Migrate": 0, "VM.Audit": 0}})
    members = {"/vms/200", "/vms/201"}
    assert bob.can("VM.Migrate", "/vms/200", considered=members)
    assert not bob.can("VM.Migrate", "/vms/201", considered=members)   # a member with nothing
    assert not bob.can("VM.Migrate", "/vms/300", considered=members)   # /vms itself gives nothing
    assert bob.anywhere("VM.Migrate") and not bob.anywhere("Sys.Modify")


def test_root_on_the_node_may_do_everything():
    root = Principal.root()
    assert root.is_root and root.can("Sys.Modify") and root.can("VM.Migrate", "/vms/1", {"/vms/1"})


def test_only_the_privileges_keel_checks_are_passed_on():
    assert decode(encode({"/": {"Sys.Audit": 1, "Permissions.Modify": 1}, "/nodes": {"Sys.Console": 1}})) == \
        {"/": {"Sys.Audit": 1}}


@pytest.mark.parametrize("text", ["", "[]", '{"vms": {}}', '{"/": {"Sys.Audit": 2}}', '{"/": []}',
                                  "[" * 100_000 + "]" * 100_000])
def test_a_malformed_header_is_refused_by_name(text):
    with pytest.raises(InvalidError, match=HEADER_PRIVILEGES):
        decode(text)
