"""Which privilege a guest config change needs, key by key (qemu-server's
check_vm_modify_config_perm, pve-container's check_ct_modify_config_perm).

The schema only checks that the caller holds *some* VM.Config.* privilege; the handler then
checks each key it is asked to set or delete.  ``tags`` are checked by ``tags.py``.
"""

from __future__ import annotations

import re

ROOT_ONLY = "root"

_QEMU: dict[str, tuple[str, ...]] = {}
for _keys, _privs in (
    ("cores cpu runningcpu cpulimit cpuunits numa smp sockets vcpus", ("VM.Config.CPU",)),
    ("memory balloon shares allow-ksm", ("VM.Config.Memory",)),
    ("acpi hotplug kvm machine runningmachine scsihw smbios1 tablet vga watchdog audio0 rng0",
     ("VM.Config.HWType",)),
    ("agent autostart bios description keyboard localtime migrate_downtime migrate_speed name "
     "onboot ostype protection reboot startdate startup tdf template", ("VM.Config.Options",)),
    ("freeze", ("VM.PowerMgmt",)),
    ("boot bootdisk vmstatestorage", ("VM.Config.Disk",)),
    ("cicustom cipassword citype ciuser ciupgrade nameserver searchdomain sshkeys",
     ("VM.Config.Cloudinit",)),
    ("vmstate", ("VM.Config.Disk", "VM.PowerMgmt")),
):
    for _key in _keys.split():
        _QEMU[_key] = _privs

_QEMU_DRIVE = re.compile(r"^(ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$|^unused\d+$|^cdrom$")
_QEMU_DEVICE = re.compile(r"^(serial|usb|hostpci|virtiofs)\d+$")


def qemu_privileges(key: str) -> tuple[str, ...] | str:
    """The privileges (all needed) to change ``key`` of a VM, or ROOT_ONLY."""
    if key in _QEMU:
        return _QEMU[key]
    if _QEMU_DRIVE.match(key):
        return ("VM.Config.Disk",)
    if re.match(r"^numa\d+$", key):
        return ("VM.Config.CPU",)
    if re.match(r"^net\d+$", key) or key == "running-nets-host-mtu":
        return ("VM.Config.Network",)
    if re.match(r"^ipconfig\d+$", key):
        return ("VM.Config.Cloudinit",)
    return ROOT_ONLY


def lxc_privileges(key: str) -> tuple[str, ...] | str:
    """The privileges to change ``key`` of a container, or ROOT_ONLY."""
    if key in ("cores", "cpuunits", "cpulimit"):
        return ("VM.Config.CPU",)
    if key == "rootfs" or re.match(r"^(mp|unused)\d+$", key):
        return ("VM.Config.Disk",)
    if key in ("memory", "swap"):
        return ("VM.Config.Memory",)
    if re.match(r"^net\d+$", key) or key in ("nameserver", "searchdomain", "hostname"):
        return ("VM.Config.Network",)
    if re.match(r"^dev\d+$", key) or key in ("hookscript", "features"):
        return ROOT_ONLY
    return ("VM.Config.Options",)


def root_only_message(kind: str, key: str) -> str:
    if kind == "qemu" and _QEMU_DEVICE.match(key):
        return f"only root can set '{key}' config for real devices"
    return f"only root can set '{key}' config"
