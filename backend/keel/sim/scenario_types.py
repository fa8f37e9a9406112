"""The parts of a scenario (see ``scenario.py``, which reads them from YAML)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GiB = 1024**3
MiB = 1024**2

GUEST_TYPES = ("qemu", "lxc")
GUEST_STATUSES = ("running", "stopped")
HA_STATES = ("started", "stopped", "enabled", "disabled", "ignored")
RULE_TYPES = ("node-affinity", "resource-affinity")
PRIVSEP_DEFAULT = True
# The qemu/lxc config keys that make a guest depend on its node (qemu-server's
# check_local_resources); accepted in a guest's ``devices`` list.
DEVICE_KEYS = re.compile(r"^(hostpci|usb|serial|parallel|virtiofs)\d+$|^ivshmem$|^amd-sev$|^intel-tdx$")
# Storage plugins PVE treats as shared whatever storage.cfg says (pve-storage's
# Plugin.pm @SHARED_STORAGE; glusterfs only until PVE 9 dropped the plugin).
SHARED_STORAGE_TYPES = frozenset({"iscsi", "nfs", "cifs", "rbd", "cephfs", "iscsidirect", "glusterfs",
                                  "zfs", "drbd", "pbs"})


@dataclass
class Profile:
    """How a guest's load moves over time; every component is optional."""

    daily_amplitude: float = 0.0    # cpu × (1 ± amplitude) over a day
    peak_hour: float = 14.0         # UTC hour of the daily peak
    noise: float = 0.0              # relative standard deviation per 10 s sample
    burst_per_hour: float = 0.0     # expected bursts per hour
    burst_duration_s: float = 300.0
    burst_level: float = 0.95       # cpu fraction during a burst
    mem_amplitude: float = 0.0      # memory × (1 ± amplitude) over a day


@dataclass
class Disk:
    key: str                        # scsi0, virtio1, rootfs, mp0, ...
    storage: str
    size: int
    cdrom: bool = False


@dataclass
class HaSpec:
    state: str = "started"
    group: str | None = None
    failback: bool = True
    max_restart: int = 1
    max_relocate: int = 1
    comment: str = ""


@dataclass
class Guest:
    vmid: int
    name: str
    type: str
    node: str
    status: str
    cores: int
    sockets: int
    memory: int                     # configured, bytes
    cpu: float                      # fraction of its cpus in use
    mem_used: int                   # bytes in use when running
    disks: list[Disk]
    devices: dict[str, str]         # config key -> value (hostpci0: 0000:01:00.0)
    tags: tuple[str, ...]
    pool: str | None
    template: bool
    agent: bool
    profile: str | None
    ha: HaSpec | None
    protection: bool
    boot_s: float
    description: str
    lock: str | None
    cpu_type: str = ""              # the config's ``cpu`` (host, x86-64-v2-AES, ...); "" = none


@dataclass
class Node:
    name: str
    cpus: int                       # logical threads
    sockets: int
    cores: int                      # physical cores, all sockets
    cpu_model: str
    memory: int
    rootfs: int
    rootfs_used: int
    online: bool
    maintenance: bool
    overhead_cpu: float             # cores the host itself uses
    overhead_mem: int
    ip: str
    level: str


@dataclass
class Storage:
    storage: str
    type: str
    content: tuple[str, ...]
    shared: bool
    nodes: tuple[str, ...] | None
    size: int                       # per node for local storage, total for shared


@dataclass
class Token:
    tokenid: str
    secret: str
    privsep: bool
    comment: str = ""


@dataclass
class User:
    userid: str
    password: str | None
    enable: bool
    groups: tuple[str, ...]
    tokens: list[Token]
    comment: str = ""


@dataclass
class Acl:
    path: str
    role: str
    ugid: str                       # user@realm, user@realm!token, or a group name
    kind: str                       # user|token|group
    propagate: bool


@dataclass
class HaRule:
    rule: str
    type: str
    resources: tuple[str, ...]
    nodes: str = ""                 # node[:priority],...
    strict: bool | None = None      # None: not given (the rule then has no ``strict`` key)
    affinity: str = ""
    disable: bool = False
    comment: str = ""


@dataclass
class HaGroup:
    group: str
    nodes: str
    restricted: bool = False
    nofailback: bool = False
    comment: str = ""


@dataclass
class EndpointFault:
    path: str                       # glob on the API path, e.g. /nodes/*/qemu/*/migrate
    method: str | None = None
    error_rate: float = 0.0         # 0..1, share of matching requests that fail
    status: int = 500
    message: str = "simulated failure"
    latency_s: float = 0.0
    reply_latency_s: float = 0.0    # the request is carried out, then its answer held back this long
    count: int | None = None        # fail this many times, then stop (None: forever)


@dataclass
class MigrationFault:
    vmid: int | None = None         # None: any guest
    rate: float = 1.0
    message: str = "migration aborted: simulated failure"


@dataclass
class Faults:
    endpoints: list[EndpointFault] = field(default_factory=list)
    migrations: list[MigrationFault] = field(default_factory=list)
    auth_delay_s: float = 0.0       # pveproxy waits 3 s before a 401; the simulator 0 by default


@dataclass
class Scenario:
    name: str
    description: str
    pve_version: str
    cluster_name: str
    seed: int
    start_time: float | None
    local_node: str
    migration_speed: int            # bytes/s for RAM
    migration_setup_s: float
    disk_speed: int                 # bytes/s for disks (local-disk migration, full clones)
    nodes: list[Node]
    guests: list[Guest]
    storages: list[Storage]
    pools: dict[str, str]           # poolid -> comment
    ha_rules: list[HaRule]
    ha_groups: list[HaGroup]
    cluster_options: dict[str, Any]  # datacenter.cfg, checked; property strings as mappings
    users: list[User]
    roles: dict[str, tuple[str, ...]]
    acl: list[Acl]
    profiles: dict[str, Profile]
    faults: Faults
    github: Any = None              # sim.github.scenario.GitHubSpec: the fake GitHub, if any

    @property
    def pve_major(self) -> int:
        return int(self.pve_version.split(".")[0])
