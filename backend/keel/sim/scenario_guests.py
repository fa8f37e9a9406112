"""A scenario's ``guests``: each VM or container with its disks, devices, load and HA
settings (docs/simulator.md, "guests").  ``scenario.py`` reads the rest."""

from __future__ import annotations

import re
from typing import Any

from keel.errors import InvalidError
from keel.sim.scenario_types import (
    DEVICE_KEYS, GUEST_STATUSES, GUEST_TYPES, HA_STATES, GiB, Disk, Guest, HaSpec, Profile,
)
from keel.units import parse_size
from keel.validate import Problems, Reader

# The disk keys qemu-server and pve-container accept (ide0-3, sata0-5, scsi0-30, virtio0-15).
QEMU_DISK_KEY = re.compile(r"^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])"
                           r"|efidisk0|tpmstate0|unused\d+)$")
LXC_DISK_KEY = re.compile(r"^(rootfs|mp\d+|unused\d+)$")
# Where a CD-ROM goes without a key: ide2 as PVE's wizard puts it, then the other IDE slots.
CDROM_SLOTS = ("ide2", "ide3", "ide0", "ide1")
DEFAULT_MEM_USED_FRACTION = 0.5


def mem_used_bytes(value: Any, memory: int, what: str = "mem_used") -> int:
    """Memory in use from a fraction of ``memory`` (a number from 0 to 1: ``0.75``, ``1``), a
    percentage (``"50%"``) or a size (``6GiB``, a number of bytes above 1); never more than
    ``memory``.  Raises ``InvalidError`` naming ``what``."""
    if isinstance(value, bool):
        raise InvalidError(f"{what}: expected a size, a fraction from 0 to 1 or a percentage, "
                           f"got {value!r}")
    if isinstance(value, (int, float)) and 0 <= value <= 1:
        return int(memory * value)
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            percent = float(value.strip()[:-1])
        except ValueError:
            raise InvalidError(f"{what}: expected a percentage such as 50%, got {value!r}") from None
        if not 0 <= percent <= 100:
            raise InvalidError(f"{what}: a percentage must be from 0% to 100%, got {value!r}")
        return int(memory * percent / 100)
    return min(memory, parse_size(value, what))


def read_guest(r: Reader, problems: Problems, default_storage: str, profiles: dict[str, Profile],
               node_names: list[str], storages: set[str]) -> Guest:
    vmid = r.integer("vmid", low=100, high=999999999)
    kind = r.choice("type", GUEST_TYPES, "qemu")
    memory = r.size("memory", 2 * GiB) or 0
    node = r.get("node", str)
    if node is not None and node_names and node not in node_names:
        problems.add(r.sub("node"), f"no node named {node!r}")
    disks = _disks(r, problems, kind or "qemu", default_storage, storages)
    devices: dict[str, str] = {}
    for dpath, item in r.items("devices"):
        key, _, value = str(item).partition(":")
        key = key.strip()
        if not DEVICE_KEYS.match(key):
            problems.add(dpath, f"not a local device key (hostpciN, usbN, serialN, ...): {key!r}")
        devices[key] = value.strip() or _default_device(key)
    profile = r.get("profile", str, None)
    if profile is not None and profile not in profiles:
        problems.add(r.sub("profile"), f"no profile named {profile!r}")
    mem_used = int(memory * DEFAULT_MEM_USED_FRACTION)
    given = r.get("mem_used", (float, str), None)
    if given is not None:
        try:
            mem_used = mem_used_bytes(given, memory, r.sub("mem_used"))
        except InvalidError as err:
            problems.add(r.sub("mem_used"), err.message.split(": ", 1)[-1])
    cores = r.integer("cpus", 1, 1)
    guest = Guest(
        vmid=vmid or 0, name=r.get("name", str, f"{'vm' if kind == 'qemu' else 'ct'}{vmid}"),
        type=kind or "qemu", node=node or "", status=r.choice("status", GUEST_STATUSES, "running"),
        cores=cores or 1, sockets=r.integer("sockets", 1, 1) or 1, memory=memory,
        cpu=r.number("cpu", 0.1, 0, 1), mem_used=mem_used,
        disks=disks, devices=devices, tags=r.string_list("tags"),
        pool=r.get("pool", str, None), template=r.get("template", bool, False),
        agent=r.get("agent", bool, kind == "qemu"), profile=profile, ha=_ha(r),
        protection=r.get("protection", bool, False), boot_s=r.duration("boot", 20.0) or 0.0,
        description=r.get("description", str, ""), lock=r.get("lock", str, None),
        cpu_type=r.get("cpu_type", str, ""),
    )
    if guest.cpu_type and guest.type != "qemu":
        problems.add(r.sub("cpu_type"), "only a VM has a CPU type")
    if guest.template and guest.status == "running":
        problems.add(r.sub("status"), "a template cannot be running")
    r.done()
    return guest


def _ha(r: Reader) -> HaSpec | None:
    value = r.raw("ha", None)
    if value is None or value is False:
        return None
    if isinstance(value, str):
        value = {"state": value}
    elif value is True:
        value = {}
    h = Reader(value, r.sub("ha"), r.problems)
    spec = HaSpec(state=h.choice("state", HA_STATES, "started"), group=h.get("group", str, None),
                  failback=h.get("failback", bool, True),
                  max_restart=h.integer("max_restart", 1, 0),
                  max_relocate=h.integer("max_relocate", 1, 0),
                  comment=h.get("comment", str, ""))
    h.done()
    return spec


def _disks(r: Reader, problems: Problems, kind: str, default_storage: str,
           storages: set[str]) -> list[Disk]:
    disks: list[tuple[str, Disk]] = []
    for dpath, item in r.items("disks"):
        d = Reader(item, dpath, problems)
        disk = Disk(key=d.get("key", str, ""), storage=d.get("storage", str, default_storage),
                    size=d.size("size", 32 * GiB), cdrom=d.get("cdrom", bool, False))
        d.done()
        if disk.storage not in storages:
            problems.add(d.sub("storage"), f"no storage named {disk.storage!r}")
        if disk.cdrom and kind == "lxc":
            problems.add(d.sub("cdrom"), "a container has no CD drive")
        disks.append((dpath, disk))
    if not r.has("disks"):
        size = r.size("disk", 32 * GiB if kind == "qemu" else 8 * GiB)
        storage = r.get("storage", str, default_storage)
        if storage not in storages:
            problems.add(r.sub("storage"), f"no storage named {storage!r}")
        disks = [(r.sub("disk"), Disk("", storage, size or 0))]
    else:
        r.raw("disk")
        r.raw("storage")
    _name_disks(kind, disks, problems)
    return [disk for _, disk in disks]


def _name_disks(kind: str, disks: list[tuple[str, Disk]], problems: Problems) -> None:
    """Automatic keys in order (scsi0, scsi1, ... or rootfs, mp0, ...; CD-ROMs ide2, ide3,
    ide0, ide1); an explicit key must be one PVE knows, and no two disks may share a key."""
    used: dict[str, str] = {}
    index = cdroms = 0
    pattern = QEMU_DISK_KEY if kind == "qemu" else LXC_DISK_KEY
    for path, disk in disks:
        explicit = bool(disk.key)
        if explicit:
            if not pattern.match(disk.key):
                problems.add(f"{path}.key", f"not a disk key of a {'VM' if kind == 'qemu' else 'container'}"
                                            f": {disk.key!r}")
        elif kind == "lxc":
            disk.key = "rootfs" if index == 0 else f"mp{index - 1}"
            index += 1
        elif disk.cdrom:
            if cdroms == len(CDROM_SLOTS):
                problems.add(path, "no IDE slot left for another CD-ROM (ide0 to ide3): "
                                   "give it a key such as sata0")
                continue
            disk.key = CDROM_SLOTS[cdroms]
            cdroms += 1
        else:
            disk.key = f"scsi{index}"
            index += 1
        if disk.key in used:
            problems.add(f"{path}.key" if explicit else path,
                         f"{'key' if explicit else 'automatic key'} {disk.key!r} is already used "
                         f"by {used[disk.key]}")
        used.setdefault(disk.key, path)


def _default_device(key: str) -> str:
    if key.startswith("hostpci"):
        return "0000:01:00.0"
    if key.startswith("usb"):
        return "host=1234:5678"
    if key.startswith("serial"):
        return "/dev/ttyS0"
    return "1"
