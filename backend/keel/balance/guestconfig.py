"""What PVE checks before it migrates a guest, read from the guest's config, so that the
planner does not plan a move PVE would refuse.

``/cluster/resources`` (what every round reads) carries no config.  Reading every guest's
config each round would cost a call per guest, so configs are read only for the guests a
plan is about to move (the planner asks ``Admission`` when it chooses a move) and kept:

* per guest, until the guest is on another node, was started again (its boot instant,
  ``taken_at − uptime``, moved: a change to a device that is not hot-pluggable only takes
  effect then), or ``CONFIG_TTL_S`` has passed (hot-plugged changes: USB, CD-ROM media);
* per node, its CPU model (``GET /nodes/{node}/status``), read only when a guest with
  CPU type ``host`` may move there, until the node was booted again.

What ties a guest to its node or rules out a target (qemu-server's
``check_local_resources``, its local-disk test, ``config_to_command``):

* local devices: ``hostpciN``, ``usbN`` with a host device (not ``spice``), ``serialN``
  to a host device (not ``socket``), ``parallelN``, ``virtiofsN``, ``ivshmem``, and
  ``amd-sev``/``intel-tdx`` (no live migration); a device given by a cluster ``mapping``
  is not local (PVE checks the mapping on the target);
* a CD-ROM with a physical drive or an image on storage only its node has;
* CPU type ``host``: the target must have the same CPU model;
* vCPUs (sockets × cores): the target needs at least as many threads;
* every storage a volume is on must be available on the target.

A move PVE still refuses (what a config cannot show) is refused at execution time by the
migration precheck, and the executor blocks the guest for a while.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from keel import words
from keel.balance.plan import Skip
from keel.model import Guest, Snapshot

CONFIG_TTL_S = 900.0         # a config read is trusted this long at most
BOOT_SLACK_S = 120.0         # boot instants this close are the same boot
CPU_TIED = {"host", "max"}   # CPU types that take the host's CPU as it is

_QEMU_DISK = re.compile(r"^(ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$|^unused\d+$")
_LXC_DISK = re.compile(r"^rootfs$|^mp\d+$|^unused\d+$")
_DEVICE = re.compile(r"^(hostpci|usb|serial|parallel|virtiofs)\d+$|^ivshmem$|^amd-sev$|^intel-tdx$"
                     r"|^hostpci$|^hostusb$")


@dataclass(frozen=True)
class GuestConfig:
    """The parts of a guest's config that decide where PVE lets it migrate."""

    vmid: int
    digest: str = ""
    devices: tuple[str, ...] = ()        # config keys that tie it to its node
    cdrom: str = ""                      # a CD-ROM that does (its config key), or ""
    cpu_type: str = ""                   # the config's ``cpu`` type ("" = PVE's default)
    vcpus: int = 0                       # sockets × cores (0: not known)
    storages: tuple[str, ...] = ()       # every storage one of its volumes is on

    @property
    def tied(self) -> str:
        """Why it cannot move at all ("" if it can)."""
        if self.devices:
            return f"uses local devices: {', '.join(self.devices)}"
        if self.cdrom:
            return f"has a local CD-ROM ({self.cdrom})"
        return ""


def parse(vmid: int, kind: str, config: Mapping[str, Any], shared: Callable[[str], bool]) -> GuestConfig:
    """A guest's config (``GET .../config``) as a GuestConfig; ``shared(storage)`` says
    whether a storage is shared (an image there is not local)."""
    devices = []
    for key in sorted(config):
        if not _DEVICE.match(key):
            continue
        value = str(config[key])
        if key.startswith("usb") and "spice" in value:
            continue
        if key.startswith("serial") and value.strip() == "socket":
            continue
        if "mapping=" in value:
            continue
        devices.append(key)
    storages: list[str] = []
    cdrom = ""
    pattern = _QEMU_DISK if kind == "qemu" else _LXC_DISK
    for key in sorted(config):
        if not pattern.match(key):
            continue
        value = str(config[key])
        volid = value.split(",", 1)[0]
        if volid.startswith("volume="):
            volid = volid.split("=", 1)[1]
        is_cdrom = "media=cdrom" in value
        if ":" in volid:
            storage = volid.split(":", 1)[0]
            if storage not in storages:
                storages.append(storage)
            if is_cdrom and not shared(storage) and not cdrom:
                cdrom = key
        elif is_cdrom and volid not in ("none", "") and not cdrom:
            cdrom = key                 # a physical drive (cdrom) or a host path
    cpu = str(config.get("cpu", "")).split(",", 1)[0]
    if cpu.startswith("cputype="):
        cpu = cpu.split("=", 1)[1]
    try:
        vcpus = int(config.get("sockets", 1) or 1) * int(config.get("cores", 1) or 1)
    except (TypeError, ValueError):
        vcpus = 0
    return GuestConfig(vmid, str(config.get("digest", "")), tuple(devices), cdrom, cpu, vcpus,
                       tuple(storages))


class Source(Protocol):
    """Where guest configs and node CPU models come from."""

    def config(self, guest: Guest, snapshot: Snapshot) -> GuestConfig | None: ...

    def cpu_model(self, node: str, snapshot: Snapshot) -> str | None: ...


@dataclass
class Static:
    """Configs given as they are (tests, the benchmark)."""

    configs: Mapping[int, GuestConfig] = field(default_factory=dict)
    cpu_models: Mapping[str, str] = field(default_factory=dict)

    def config(self, guest: Guest, snapshot: Snapshot) -> GuestConfig | None:
        return self.configs.get(guest.vmid)

    def cpu_model(self, node: str, snapshot: Snapshot) -> str | None:
        return self.cpu_models.get(node)


# Configs and CPU models read from PVE, per cluster (API endpoint), for every plan the
# process makes: the engine's rounds and plans share what any of them read.
_CACHE: dict[tuple[str, str, Any], tuple[Any, ...]] = {}
_LOCK = threading.Lock()


class Reader:
    """Configs from PVE's API (``GET /nodes/{node}/{type}/{vmid}/config``), kept as the
    module says; ``calls`` counts the requests this reader made."""

    def __init__(self, client: Any, clock: Callable[[], float] = time.time):
        self.client = client
        self.clock = clock
        self.calls = 0
        target = getattr(client, "target", None)
        self.cluster = f"{getattr(target, 'host', id(client))}:{getattr(target, 'port', '')}"

    def config(self, guest: Guest, snapshot: Snapshot) -> GuestConfig | None:
        from keel.errors import KeelError, UnavailableError
        boot = snapshot.taken_at - guest.uptime_s if guest.running else None
        key = (self.cluster, "guest", guest.vmid)
        now = self.clock()
        with _LOCK:
            kept = _CACHE.get(key)
        if kept is not None:
            node, kept_boot, read_at, parsed = kept
            same_boot = (boot is None) == (kept_boot is None) and (
                boot is None or abs(boot - kept_boot) <= BOOT_SLACK_S)
            if node == guest.node and same_boot and now - read_at < CONFIG_TTL_S:
                return parsed
        try:
            self.calls += 1
            raw = self.client.get(f"/nodes/{guest.node}/{guest.type}/{guest.vmid}/config")
        except UnavailableError:
            raise
        except KeelError:
            return None          # not readable now: the migration precheck still guards it
        storages = snapshot.storages
        parsed = parse(guest.vmid, guest.type, raw or {},
                       lambda s: storages[s].shared if s in storages else False)
        with _LOCK:
            _CACHE[key] = (guest.node, boot, now, parsed)
        return parsed

    def cpu_model(self, node: str, snapshot: Snapshot) -> str | None:
        from keel.errors import KeelError, UnavailableError
        info = snapshot.nodes.get(node)
        if info is None or not info.online:
            return None
        boot = snapshot.taken_at - info.uptime_s
        key = (self.cluster, "node", node)
        with _LOCK:
            kept = _CACHE.get(key)
        if kept is not None and abs(kept[0] - boot) <= BOOT_SLACK_S:
            return kept[1]
        try:
            self.calls += 1
            status = self.client.get(f"/nodes/{node}/status")
        except UnavailableError:
            raise
        except KeelError:
            return None
        model = str(((status or {}).get("cpuinfo") or {}).get("model", "")) or None
        with _LOCK:
            _CACHE[key] = (boot, model)
        return model


def forget() -> None:
    """Drop every kept config (tests)."""
    with _LOCK:
        _CACHE.clear()


class Admission:
    """``admission(unit, node)``: whether PVE would let every guest of the unit migrate to
    ``node`` (``node=None``: anywhere at all), from the guests' configs.  What it found is
    kept for the plan: ``skips(moved)`` lists the guests it held back."""

    def __init__(self, snapshot: Snapshot, source: Source):
        self.snapshot = snapshot
        self.source = source
        self.tied: dict[int, str] = {}                   # vmid -> why it cannot move
        self.refused: dict[int, dict[str, set[str]]] = {}   # vmid -> reason -> targets refused
        self._facts: dict[int, GuestConfig | None] = {}

    def facts(self, guest: Guest) -> GuestConfig | None:
        if guest.vmid not in self._facts:
            self._facts[guest.vmid] = self.source.config(guest, self.snapshot)
            found = self._facts[guest.vmid]
            if found is not None and found.tied:
                self.tied[guest.vmid] = found.tied
        return self._facts[guest.vmid]

    def __call__(self, unit: Any, node: str | None) -> bool:
        ok = True
        for guest in unit.guests:
            facts = self.facts(guest)
            if facts is None:
                continue
            if facts.tied:
                return False
            if node is None:
                continue
            why = self._refusal(guest, facts, node)
            if why is not None:
                self.refused.setdefault(guest.vmid, {}).setdefault(why, set()).add(node)
                ok = False
        return ok

    def _refusal(self, guest: Guest, facts: GuestConfig, node: str) -> str | None:
        target = self.snapshot.nodes.get(node)
        if target is None:
            return None
        vcpus = facts.vcpus or int(guest.maxcpu)
        if guest.type == "qemu" and target.maxcpu and vcpus > target.maxcpu:
            return words.VCPUS
        for storage in facts.storages:
            known = self.snapshot.storages.get(storage)
            if known is not None and not known.on(node):
                return words.STORAGE
        if guest.type == "qemu" and facts.cpu_type in CPU_TIED and guest.running:
            here = self.source.cpu_model(guest.node, self.snapshot)
            there = self.source.cpu_model(node, self.snapshot)
            if here is not None and there is not None and here != there:
                return words.CPU_TYPE
        return None

    def skips(self, moved: set[int]) -> list[Skip]:
        """What the plan should say: every guest held back, and why."""
        guests = self.snapshot.guests
        found = [Skip(words.LOCAL_DEVICES, f"{why}: PVE does not migrate it", vmid, guests[vmid].name)
                 for vmid, why in sorted(self.tied.items()) if vmid in guests]
        texts = {words.VCPUS: "more vCPUs ({n}) than {nodes} {have} threads",
                 words.STORAGE: "a storage of its volumes is not available on {nodes}",
                 words.CPU_TYPE: "CPU type host, and {nodes} {have} another CPU model"}
        for vmid, reasons in sorted(self.refused.items()):
            if vmid in moved or vmid in self.tied or vmid not in guests:
                continue
            for why, nodes in sorted(reasons.items()):
                facts = self._facts.get(vmid)
                listed = ", ".join(sorted(nodes))
                detail = texts[why].format(n=(facts.vcpus if facts else 0) or int(guests[vmid].maxcpu),
                                           nodes=listed, have="have" if len(nodes) > 1 else "has")
                found.append(Skip(why, f"not moved to {listed}: {detail}", vmid, guests[vmid].name))
        return found
