"""A simulated guest: its PVE config (the source of truth for sizes, disks, tags) and
its runtime state (where it runs, since when, what it has been told)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from keel.sim import scenario as sc

MiB = 1024**2
GiB = 1024**3

QEMU_DISK_KEY = re.compile(r"^(ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$|^unused\d+$")
LXC_DISK_KEY = re.compile(r"^rootfs$|^mp\d+$|^unused\d+$")
LOCAL_DEVICE_KEY = re.compile(
    r"^(hostpci|usb|serial|parallel|virtiofs)\d+$|^ivshmem$|^amd-sev$|^intel-tdx$|^hostpci$|^hostusb$")
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")


def parse_disk_size(text: str) -> int:
    match = _SIZE_RE.match(text)
    if not match:
        return 0
    scale = {"": 1, "K": 1024, "M": MiB, "G": GiB, "T": 1024 * GiB}[match.group(2)]
    return int(float(match.group(1)) * scale)


def format_disk_size(size: int) -> str:
    for unit, scale in (("T", 1024 * GiB), ("G", GiB), ("M", MiB), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


class Config(dict):
    """A guest's config; ``version`` grows with every change, so parses can be cached."""

    version = 0

    def _touch(self) -> None:
        self.version += 1

    def __setitem__(self, key: str, value: Any) -> None:
        self._touch()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._touch()
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self._touch()
        return super().pop(key, *default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._touch()
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._touch()
        super().clear()

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._touch()
        return super().setdefault(key, default)


@dataclass
class Volume:
    key: str
    volid: str          # storage:volname, or "none"
    storage: str | None
    size: int
    cdrom: bool
    shared_flag: bool   # the drive carries shared=1


@dataclass
class Migration:
    target: str
    upid: str
    online: bool


@dataclass
class SimGuest:
    vmid: int
    type: str                     # qemu|lxc
    node: str
    config: dict[str, Any]
    status: str = "stopped"       # running|stopped
    started_at: float | None = None
    cpu_base: float = 0.1
    mem_base: int = 0
    profile: sc.Profile | None = None
    boot_s: float = 20.0
    files: dict[str, str] = field(default_factory=dict)
    migration: Migration | None = None
    busy_upid: str | None = None  # a task that holds the guest (clone of a running source, ...)
    _volumes: tuple[int, int, list["Volume"]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            self.config = Config(self.config)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "config" and not isinstance(value, Config):
            value = Config(value)
        super().__setattr__(name, value)

    # -- config-derived ----------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.config.get("name" if self.type == "qemu" else "hostname", f"{self.vmid}"))

    @property
    def template(self) -> bool:
        return str(self.config.get("template", "0")) == "1"

    @property
    def lock(self) -> str | None:
        value = self.config.get("lock")
        return str(value) if value else None

    @property
    def tags(self) -> str:
        return str(self.config.get("tags", ""))

    @property
    def maxcpu(self) -> float:
        if self.type == "qemu":
            if self.config.get("vcpus"):
                return float(self.config["vcpus"])
            return float(int(self.config.get("sockets", 1)) * int(self.config.get("cores", 1)))
        if self.config.get("cores"):
            return float(self.config["cores"])
        if self.config.get("cpulimit"):
            return float(self.config["cpulimit"])
        return 0.0  # the node's threads; the caller fills that in

    @property
    def vcpus(self) -> int:
        """sockets × cores: the vCPUs a VM starts with at most (qemu-server's maxcpus)."""
        return int(self.config.get("sockets", 1)) * int(self.config.get("cores", 1))

    @property
    def cpu_type(self) -> str:
        return str(self.config.get("cpu", "")).split(",", 1)[0].replace("cputype=", "")

    @property
    def maxmem(self) -> int:
        value = str(self.config.get("memory", "512"))
        if "=" in value or "," in value:
            parts = dict(p.split("=", 1) if "=" in p else ("current", p) for p in value.split(","))
            value = parts.get("current", "512")
        try:
            return int(float(value)) * MiB
        except ValueError:
            return 512 * MiB

    @property
    def agent_enabled(self) -> bool:
        value = str(self.config.get("agent", "0"))
        first = value.split(",")[0]
        return first in ("1", "enabled=1") or "enabled=1" in value

    def volumes(self) -> list[Volume]:
        key = (id(self.config), self.config.version)
        if self._volumes is None or self._volumes[:2] != key:
            self._volumes = (*key, self._parse_volumes())
        return self._volumes[2]

    def _parse_volumes(self) -> list[Volume]:
        pattern = QEMU_DISK_KEY if self.type == "qemu" else LXC_DISK_KEY
        result = []
        for key in sorted(self.config):
            if not pattern.match(key):
                continue
            value = str(self.config[key])
            parts = value.split(",")
            volid = parts[0]
            opts = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if volid.startswith("volume="):
                volid = volid.split("=", 1)[1]
            storage = volid.split(":", 1)[0] if ":" in volid else None
            result.append(Volume(
                key=key, volid=volid, storage=storage,
                size=parse_disk_size(opts.get("size", "0")),
                cdrom=opts.get("media") == "cdrom",
                shared_flag=opts.get("shared") == "1"))
        return result

    def local_devices(self) -> list[str]:
        found = []
        for key in sorted(self.config):
            if not LOCAL_DEVICE_KEY.match(key):
                continue
            value = str(self.config[key])
            if key.startswith("usb") and "spice" in value:
                continue
            if key.startswith("serial") and value == "socket":
                continue
            if "mapping=" in value:
                continue
            found.append(key)
        return found

    def digest(self) -> str:
        text = "\n".join(f"{k}: {v}" for k, v in sorted(self.config.items()))
        return hashlib.sha1(text.encode()).hexdigest()

    @property
    def sid(self) -> str:
        return f"{'vm' if self.type == 'qemu' else 'ct'}:{self.vmid}"


def config_from_spec(spec: sc.Guest) -> dict[str, Any]:
    """A PVE config file's keys for a scenario guest."""
    mac = f"BC:24:11:{(spec.vmid >> 16) & 0xFF:02X}:{(spec.vmid >> 8) & 0xFF:02X}:{spec.vmid & 0xFF:02X}"
    config: dict[str, Any]
    if spec.type == "qemu":
        config = {
            "name": spec.name, "cores": spec.cores, "sockets": spec.sockets,
            "memory": str(spec.memory // MiB), "ostype": "l26", "scsihw": "virtio-scsi-single",
            "net0": f"virtio={mac},bridge=vmbr0", "boot": "order=scsi0",
            "vmgenid": f"00000000-0000-4000-8000-{spec.vmid:012d}",
            "smbios1": f"uuid=00000000-0000-4000-8000-{spec.vmid:012d}",
        }
        if spec.agent:
            config["agent"] = "1"
        if spec.cpu_type:
            config["cpu"] = spec.cpu_type
    else:
        config = {
            "hostname": spec.name, "cores": spec.cores, "memory": spec.memory // MiB,
            "swap": 512, "ostype": "debian", "arch": "amd64",
            "net0": f"name=eth0,bridge=vmbr0,hwaddr={mac},ip=dhcp,type=veth",
        }
    for index, disk in enumerate(spec.disks):
        if disk.cdrom:
            config[disk.key] = f"{disk.storage}:iso/debian.iso,media=cdrom,size=600M"
            continue
        volname = f"{'base' if spec.template else 'vm'}-{spec.vmid}-disk-{index}"
        config[disk.key] = f"{disk.storage}:{volname},size={format_disk_size(disk.size)}"
    config.update(spec.devices)
    if spec.tags:
        config["tags"] = ";".join(spec.tags)
    if spec.template:
        config["template"] = 1
    if spec.protection:
        config["protection"] = 1
    if spec.description:
        config["description"] = spec.description
    if spec.lock:
        config["lock"] = spec.lock
    return config
