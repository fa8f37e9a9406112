"""What Keel knows about a cluster: plain, immutable data with no I/O.

Everything here is built by ``keel.pve.snapshot`` from API answers (or by tests by
hand) and read by the planner, the CLI and the UI.  Units are in the names where they
matter: ``mem`` and ``maxmem`` are bytes, ``cpu_frac`` is a fraction of ``maxcpu``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Psi:
    """Pressure stall information, in percent (the kernel's avg10), as PVE 9 reports it."""

    cpu_some: float = 0.0
    io_some: float = 0.0
    io_full: float = 0.0
    mem_some: float = 0.0
    mem_full: float = 0.0


@dataclass(frozen=True)
class Node:
    name: str
    online: bool
    maxcpu: int                 # logical CPU threads
    cpu_frac: float             # busy fraction of all threads, 0..1
    maxmem: int
    mem: int
    maxdisk: int = 0            # root file system
    disk: int = 0
    uptime_s: int = 0
    ha_state: str | None = None  # online|maintenance|unknown|fence|gone; None without HA
    level: str = ""
    psi: Psi | None = None

    @property
    def cpu_cores(self) -> float:
        return self.cpu_frac * self.maxcpu

    @property
    def mem_frac(self) -> float:
        return self.mem / self.maxmem if self.maxmem else 0.0

    @property
    def disk_frac(self) -> float:
        return self.disk / self.maxdisk if self.maxdisk else 0.0

    @property
    def in_maintenance(self) -> bool:
        return self.ha_state == "maintenance"


@dataclass(frozen=True)
class LocalDisk:
    """A guest volume on storage only its node can reach."""

    volid: str
    storage: str
    size: int


@dataclass(frozen=True)
class HaResource:
    """A guest's HA resource config joined with the CRM's view of it."""

    sid: str                    # vm:100 / ct:101
    state: str                  # requested: started|stopped|disabled|ignored
    crm_state: str | None = None  # started|migrate|relocate|fence|recovery|freeze|error|...
    failback: bool = True
    max_restart: int = 1
    max_relocate: int = 1
    group: str | None = None    # PVE 8 only
    auto_rebalance: bool = True  # PVE 9.2 per-resource flag
    target: str | None = None   # during migrate/relocate


@dataclass(frozen=True)
class Guest:
    vmid: int
    type: str                   # qemu|lxc
    name: str
    node: str
    status: str                 # running|stopped|paused|unknown|...
    maxcpu: float
    cpu_frac: float             # fraction of the guest's own maxcpu
    maxmem: int
    mem: int
    maxdisk: int = 0
    disk: int = 0
    uptime_s: int = 0
    template: bool = False
    tags: tuple[str, ...] = ()
    pool: str | None = None
    lock: str | None = None
    ha: HaResource | None = None
    local_disks: tuple[LocalDisk, ...] = ()

    @property
    def sid(self) -> str:
        return f"{'vm' if self.type == 'qemu' else 'ct'}:{self.vmid}"

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def cpu_cores(self) -> float:
        return self.cpu_frac * self.maxcpu

    @property
    def local_disk_bytes(self) -> int:
        return sum(disk.size for disk in self.local_disks)


@dataclass(frozen=True)
class Storage:
    storage: str
    type: str
    content: frozenset[str]
    shared: bool
    nodes: frozenset[str] | None = None   # None: every node

    def on(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes


@dataclass(frozen=True)
class StorageUsage:
    """One storage as seen from one node (``/cluster/resources`` type storage)."""

    node: str
    storage: str
    used: int
    total: int
    shared: bool


@dataclass(frozen=True)
class HaRule:
    """A PVE 9 HA rule (or a PVE 8 group turned into the equivalent node-affinity rule)."""

    rule: str
    type: str                   # node-affinity|resource-affinity
    resources: tuple[str, ...]  # sids
    disabled: bool = False
    nodes: Mapping[str, int] = field(default_factory=dict)  # node -> priority (node-affinity)
    strict: bool = False        # node-affinity
    affinity: str | None = None  # positive|negative (resource-affinity)
    comment: str = ""


@dataclass(frozen=True)
class CrsOptions:
    """``crs`` from datacenter.cfg. Threshold and margin are fractions (0.3 = 30 %)."""

    ha: str = "basic"
    rebalance_on_start: bool = False
    auto_rebalance: bool = False
    auto_rebalance_threshold: float = 0.3
    auto_rebalance_method: str = "bruteforce"
    auto_rebalance_hold_duration: float = 3
    auto_rebalance_margin: float = 0.1


@dataclass(frozen=True)
class Snapshot:
    """The cluster as seen at one instant (``taken_at``, epoch seconds)."""

    taken_at: float
    cluster_name: str
    pve_version: str            # full pve-manager version, e.g. 9.1.4
    quorate: bool
    nodes: Mapping[str, Node]
    guests: Mapping[int, Guest]
    storages: Mapping[str, Storage] = field(default_factory=dict)
    pools: tuple[str, ...] = ()
    ha_rules: tuple[HaRule, ...] = ()
    ha_groups_used: bool = False  # PVE 8: rules came from HA groups
    ha_master: str | None = None
    crs: CrsOptions = CrsOptions()
    api_calls: int = 0          # how many API requests the snapshot took
    storage_usage: tuple[StorageUsage, ...] = ()

    @property
    def pve_major(self) -> int:
        try:
            return int(self.pve_version.split(".")[0])
        except ValueError:
            return 0

    def guests_on(self, node: str) -> list[Guest]:
        return sorted((g for g in self.guests.values() if g.node == node), key=lambda g: g.vmid)


# -- power saving (issue 19): what the gates of a node's sleep read -------------------------


@dataclass(frozen=True)
class CephPool:
    name: str
    size: int                   # copies, each on another host
    min_size: int               # copies that must be up for I/O


@dataclass(frozen=True)
class CephFacts:
    """A hyperconverged Ceph as ``/cluster/ceph/status``, ``/nodes/{n}/ceph/osd`` and
    ``/nodes/{n}/ceph/pool`` show it."""

    health: str                                 # HEALTH_OK | HEALTH_WARN | HEALTH_ERR
    checks: tuple[str, ...] = ()                # the health checks' codes (OSD_DOWN, ...)
    osds: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # host -> (OSDs, up)
    mons: tuple[str, ...] = ()
    mons_in_quorum: tuple[str, ...] = ()
    pools: tuple[CephPool, ...] = ()
    pg_states: Mapping[str, int] = field(default_factory=dict)    # "active+clean" -> count
    flags: frozenset[str] = frozenset()         # OSD map flags (noout, ...)
    error: str = ""                             # why Ceph could not be read (then nothing is known)


@dataclass(frozen=True)
class PowerFacts:
    """What a node's sleep depends on besides the snapshot: corosync's votes, the nodes'
    Wake-on-LAN MACs, the HA agents' modes and Ceph."""

    local_node: str | None                      # the node Keel's PVE endpoint runs on
    votes: Mapping[str, int]                    # corosync quorum_votes of every node
    wol: Mapping[str, str | None]               # online node -> its wakeonlan MAC, None if unset
    ceph: CephFacts | None = None               # None: no Ceph on this cluster
    lrm_modes: Mapping[str, str] = field(default_factory=dict)   # node -> active|maintenance|...
    api_calls: int = 0
