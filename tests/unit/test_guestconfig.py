"""What PVE checks before a migration, read from guest configs, and the planner keeping to
it: local devices, local CD-ROMs, CPU type host, vCPUs, storages."""

from __future__ import annotations

import pytest

from balance_helpers import cluster, node, vm
from keel import words
from keel.balance import guestconfig
from keel.balance.balancer import make_plan
from keel.balance.guestconfig import GuestConfig, Static, parse
from keel.balance.history import History
from keel.balance.settings import BalancingSettings
from keel.model import Storage

NOW = 1_800_000_000.0


def shared(storage):
    return storage in ("ceph", "nfs")


@pytest.mark.parametrize("config,devices,cdrom", [
    ({"hostpci0": "0000:41:00.0"}, ("hostpci0",), ""),
    ({"usb0": "host=046d:c52b", "usb1": "spice"}, ("usb0",), ""),
    ({"serial0": "/dev/ttyS0", "serial1": "socket"}, ("serial0",), ""),
    ({"virtiofs0": "dirid=share", "ivshmem": "size=32"}, ("ivshmem", "virtiofs0"), ""),
    ({"hostpci0": "mapping=gpu"}, (), ""),
    ({"ide2": "local:iso/debian.iso,media=cdrom"}, (), "ide2"),
    ({"ide2": "nfs:iso/debian.iso,media=cdrom"}, (), ""),
    ({"ide2": "none,media=cdrom"}, (), ""),
    ({"ide2": "cdrom,media=cdrom"}, (), "ide2"),
    ({"amd-sev": "type=std"}, ("amd-sev",), ""),
])
def test_what_ties_a_vm_to_its_node(config, devices, cdrom):
    parsed = parse(100, "qemu", config, shared)
    assert parsed.devices == devices and parsed.cdrom == cdrom
    assert bool(parsed.tied) == bool(devices or cdrom)


def test_cpu_vcpus_and_storages_are_read():
    parsed = parse(100, "qemu", {"cpu": "host,flags=+aes", "sockets": 2, "cores": 4,
                                 "scsi0": "ceph:vm-100-disk-0,size=32G", "scsi1": "fast:vm-100-disk-1,size=8G",
                                 "efidisk0": "ceph:vm-100-disk-2,size=1M", "digest": "abc"}, shared)
    assert (parsed.cpu_type, parsed.vcpus, parsed.storages, parsed.digest) == ("host", 8, ("ceph", "fast"), "abc")
    assert parse(101, "lxc", {"rootfs": "local-lvm:vm-101-disk-0,size=8G", "cores": 2}, shared).storages == ("local-lvm",)


def hot(extra=(), nodes=None):
    """Node a is busy: ten movable guests plus ``extra``; b and c idle."""
    guests = [vm(100 + i, "a", cpu=0.6, mem_gib=8) for i in range(10)] + list(extra)
    return cluster(nodes or [node("a"), node("b"), node("c")], guests)


def plan(snap, configs, cpu_models=None, **settings):
    return make_plan(snap, BalancingSettings(**settings), History(), NOW, oneshot=True,
                     configs=Static(configs, cpu_models or {}))


def test_a_vm_with_local_devices_is_not_planned_and_the_plan_says_why():
    snap = hot([vm(200, "a", cores=8, cpu=0.9, mem_gib=8)])
    free = make_plan(snap, BalancingSettings(), History(), NOW, oneshot=True)
    assert 200 in {m.vmid for m in free.moves}          # the busiest guest: moved first without configs
    p = plan(snap, {200: GuestConfig(200, devices=("hostpci0",))})
    assert 200 not in {m.vmid for m in p.moves} and p.moves
    skip = next(s for s in p.skipped if s.vmid == 200)
    assert skip.reason == words.LOCAL_DEVICES and "hostpci0" in skip.detail


def test_a_vm_with_more_vcpus_than_a_node_has_threads_goes_elsewhere():
    nodes = [node("a", cpus=32), node("b", cpus=8), node("c", cpus=32)]
    snap = hot([vm(200, "a", cores=16, cpu=0.9, mem_gib=8)], nodes)
    p = plan(snap, {200: GuestConfig(200, vcpus=16)})
    assert all(m.target != "b" for m in p.moves if m.vmid == 200)
    if 200 not in {m.vmid for m in p.moves}:
        assert any(s.vmid == 200 and s.reason == words.VCPUS for s in p.skipped)


def test_cpu_type_host_moves_only_to_the_same_cpu_model():
    snap = hot([vm(200 + i, "a", cores=4, cpu=0.9, mem_gib=8) for i in range(4)])
    configs = {200 + i: GuestConfig(200 + i, cpu_type="host") for i in range(4)}
    p = plan(snap, configs, {"a": "EPYC 7313P", "b": "Xeon E-2388G", "c": "EPYC 7313P"})
    assert all(m.target == "c" for m in p.moves if m.vmid >= 200)
    assert any(m.vmid >= 200 for m in p.moves)


def test_a_storage_the_target_lacks_rules_it_out():
    snap = hot([vm(200, "a", cores=8, cpu=0.9, mem_gib=8)])
    storages = dict(snap.storages, fast=Storage("fast", "nfs", frozenset({"images"}), True, frozenset({"a", "c"})))
    from dataclasses import replace
    snap = replace(snap, storages=storages)
    p = plan(snap, {200: GuestConfig(200, storages=("ceph", "fast"))})
    assert all(m.target == "c" for m in p.moves if m.vmid == 200)


def test_a_guest_that_must_leave_maintenance_but_cannot_is_reported_not_moved():
    snap = hot([vm(200, "a", mem_gib=4)])
    p = plan(snap, {200: GuestConfig(200, devices=("usb0",))}, maintenance=frozenset({"a"}))
    assert 200 not in {m.vmid for m in p.moves}
    assert {m.vmid for m in p.moves} == set(range(100, 110))
    assert any(s.vmid == 200 and s.reason == words.LOCAL_DEVICES for s in p.skipped)


class Counting:
    """A client that answers configs and node status and counts the calls."""

    def __init__(self, configs, models):
        self.configs, self.models, self.paths = configs, models, []

    def get(self, path, **params):
        self.paths.append(path)
        parts = path.strip("/").split("/")
        if parts[-1] == "status":
            return {"cpuinfo": {"model": self.models[parts[1]], "cpus": 32}}
        return self.configs[int(parts[3])]


def test_configs_are_read_only_for_guests_about_to_move_and_kept():
    guestconfig.forget()
    snap = hot([vm(200, "a", cores=8, cpu=0.9, mem_gib=8)])
    configs = {v: {"cores": 4, "scsi0": f"ceph:vm-{v}-disk-0,size=32G"} for v in snap.guests}
    configs[200] = {"cores": 8, "cpu": "host", "scsi0": "ceph:vm-200-disk-0,size=32G"}
    client = Counting(configs, {"a": "X", "b": "Y", "c": "X"})
    reader = guestconfig.Reader(client, clock=lambda: NOW)
    p = make_plan(snap, BalancingSettings(), History(), NOW, oneshot=True, configs=reader)
    read = [path for path in client.paths if path.endswith("/config")]
    moved = {m.vmid for m in p.moves}
    assert moved and len(read) < len(snap.guests)
    assert {int(path.split("/")[4]) for path in read} >= moved
    assert all(m.target == "c" for m in p.moves if m.vmid == 200)
    before = len(client.paths)
    make_plan(snap, BalancingSettings(), History(), NOW, oneshot=True, configs=guestconfig.Reader(client, clock=lambda: NOW))
    assert len(client.paths) == before                 # kept: the same boot, within the TTL
    later = guestconfig.Reader(client, clock=lambda: NOW + guestconfig.CONFIG_TTL_S + 1)
    make_plan(snap, BalancingSettings(), History(), NOW, oneshot=True, configs=later)
    assert len(client.paths) > before                  # too old: read again
    guestconfig.forget()
