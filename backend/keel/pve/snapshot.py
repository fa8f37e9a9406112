"""The whole cluster in one ``Snapshot``, in O(nodes) API calls, never one per guest.

Calls (for a cluster of N online nodes with one node-local image storage each):

| call                                            | gives                                  |
|-------------------------------------------------|----------------------------------------|
| GET /version                                    | PVE version (units of crs options)     |
| GET /cluster/status                             | cluster name, quorum                   |
| GET /cluster/resources                          | nodes, guests, storages, pools, usage  |
| GET /cluster/options                            | crs (PVE's own balancer settings)      |
| GET /storage                                    | which storages are shared              |
| GET /cluster/ha/resources                       | HA resources and their requested state |
| GET /cluster/ha/status/manager_status           | CRM states, HA node states, master     |
| GET /cluster/ha/rules (PVE 9) or /groups (8)    | placement rules                        |
| GET /nodes/{n}/storage/{s}/content, per node and node-local image storage | local disks |
| GET /nodes/{n}/rrddata, per node, only with ``psi=True`` | pressure stall figures        |

That is N + 8 calls (on PVE 8, groups in place of rules).  Local
devices (PCI/USB passthrough) are not visible this way; the executor checks each
planned move with ``GET .../migrate`` before it starts it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from keel.errors import KeelError, NotFoundError, UnavailableError
from keel.model import (CrsOptions, Guest, HaResource, HaRule, LocalDisk, Node, Psi, Snapshot, Storage,
                        StorageUsage)
from keel.pve.client import PveClient

log = logging.getLogger("keel.pve")

IMAGE_CONTENT = {"images", "rootdir"}


def collect(client: PveClient, psi: bool = False, now: float | None = None) -> Snapshot:
    """Read the cluster; raise if any part of it cannot be read (never guess)."""
    calls0 = client.calls
    taken_at = time.time() if now is None else now
    version = client.get("/version")
    pve_version = str(version.get("version", "0"))
    status = client.get("/cluster/status")
    resources = client.get("/cluster/resources")
    options = client.get("/cluster/options")
    storage_cfg = client.get("/storage")
    ha_resources = client.get("/cluster/ha/resources")
    manager = client.get("/cluster/ha/status/manager_status")
    ha_rules, from_groups = _ha_rules(client, ha_resources, _major(pve_version))

    cluster_entry = next((e for e in status if e.get("type") == "cluster"), {})
    storages = _storages(storage_cfg)
    manager_status = (manager or {}).get("manager_status", {}) or {}
    node_states = manager_status.get("node_status", {}) or {}
    services = manager_status.get("service_status", {}) or {}

    nodes: dict[str, Node] = {}
    for entry in sorted((e for e in resources if e.get("type") == "node"), key=lambda e: e["node"]):
        nodes[entry["node"]] = _node(entry, node_states.get(entry["node"]))

    local_disks = _local_disks(client, nodes, storages)
    if psi:
        nodes = {name: _with_psi(client, node) for name, node in nodes.items()}

    ha_config = {r["sid"]: r for r in ha_resources}
    guests: dict[int, Guest] = {}
    for entry in resources:
        if entry.get("type") not in ("qemu", "lxc"):
            continue
        guest = _guest(entry, ha_config, services, local_disks.get(int(entry["vmid"]), ()))
        guests[guest.vmid] = guest

    pools = tuple(sorted(e["pool"] for e in resources if e.get("type") == "pool"))
    usage = tuple(
        StorageUsage(node=e["node"], storage=e["storage"], used=int(e.get("disk", 0)),
                     total=int(e.get("maxdisk", 0)), shared=bool(int(e.get("shared", 0))))
        for e in sorted(resources, key=lambda e: e.get("id", ""))
        if e.get("type") == "storage" and "maxdisk" in e)
    return Snapshot(
        taken_at=taken_at,
        cluster_name=str(cluster_entry.get("name", "")),
        pve_version=pve_version,
        quorate=bool(cluster_entry.get("quorate", 1)),
        nodes=nodes,
        guests=dict(sorted(guests.items())),
        storages=storages,
        pools=pools,
        ha_rules=ha_rules,
        ha_groups_used=from_groups,
        ha_master=manager_status.get("master_node") or None,
        crs=_crs(options.get("crs") or {}, pve_version),
        api_calls=client.calls - calls0,
        storage_usage=usage,
    )


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def _ha_rules(client: PveClient, ha_resources: list[dict[str, Any]],
              major: int) -> tuple[tuple[HaRule, ...], bool]:
    """PVE 9's rules; on PVE 8, its groups as the node-affinity rules PVE 9 makes of them.
    PVE 8 has no rules endpoint (501): it is not asked; a version it cannot read (0) is."""
    rules = None
    if major == 0 or major >= 9:
        try:
            rules = client.get("/cluster/ha/rules")
        except NotFoundError:
            rules = None
    if rules is not None:
        return tuple(_rule(r) for r in sorted(rules, key=lambda r: (r.get("order", 0), r["rule"]))), False
    groups = client.get("/cluster/ha/groups")
    result = []
    for group in sorted(groups, key=lambda g: g["group"]):
        members = tuple(sorted(r["sid"] for r in ha_resources if r.get("group") == group["group"]))
        result.append(HaRule(rule=f"ha-group-{group['group']}", type="node-affinity",
                             resources=members, nodes=_parse_nodes(group.get("nodes", "")),
                             strict=bool(int(group.get("restricted", 0))),
                             comment=str(group.get("comment", ""))))
    return tuple(result), True


def _rule(entry: dict[str, Any]) -> HaRule:
    return HaRule(
        rule=entry["rule"], type=entry["type"],
        resources=tuple(s for s in str(entry.get("resources", "")).split(",") if s),
        disabled=bool(int(entry.get("disable", 0))),
        nodes=_parse_nodes(entry.get("nodes", "")),
        strict=bool(int(entry.get("strict", 0))),
        affinity=entry.get("affinity"),
        comment=str(entry.get("comment", "")),
    )


def _parse_nodes(text: str) -> dict[str, int]:
    result = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        name, _, prio = part.partition(":")
        result[name] = int(prio) if prio else 0
    return result


def _storages(cfg: list[dict[str, Any]]) -> dict[str, Storage]:
    result = {}
    for entry in cfg:
        nodes = entry.get("nodes")
        result[entry["storage"]] = Storage(
            storage=entry["storage"], type=entry.get("type", ""),
            content=frozenset(c for c in str(entry.get("content", "")).split(",") if c),
            shared=bool(int(entry.get("shared", 0))) or entry.get("type") in _SHARED_TYPES,
            nodes=frozenset(n for n in str(nodes).split(",") if n) if nodes else None)
    return dict(sorted(result.items()))


# Storage plugins that are shared by nature, whatever the ``shared`` flag says.
_SHARED_TYPES = {"rbd", "cephfs", "nfs", "cifs", "glusterfs", "iscsi", "iscsidirect", "pbs", "zfs", "drbd"}


def _local_disks(client: PveClient, nodes: dict[str, Node], storages: dict[str, Storage]
                 ) -> dict[int, tuple[LocalDisk, ...]]:
    found: dict[int, list[LocalDisk]] = {}
    local = [s for s in storages.values() if not s.shared and s.content & IMAGE_CONTENT]
    for name, node in nodes.items():
        if not node.online:
            continue
        for storage in local:
            if not storage.on(name):
                continue
            try:
                content = client.get(f"/nodes/{name}/storage/{storage.storage}/content")
            except UnavailableError:
                raise
            except KeelError as err:
                log.warning("cannot list %s on %s: %s", storage.storage, name, err)
                continue
            for volume in content:
                if volume.get("vmid") is None or volume.get("content") not in IMAGE_CONTENT:
                    continue
                found.setdefault(int(volume["vmid"]), []).append(
                    LocalDisk(volume["volid"], storage.storage, int(volume.get("size", 0))))
    return {vmid: tuple(disks) for vmid, disks in found.items()}


def _node(entry: dict[str, Any], ha_state: str | None) -> Node:
    return Node(
        name=entry["node"], online=entry.get("status") == "online",
        maxcpu=int(entry.get("maxcpu", 0)), cpu_frac=float(entry.get("cpu", 0.0)),
        maxmem=int(entry.get("maxmem", 0)), mem=int(entry.get("mem", 0)),
        maxdisk=int(entry.get("maxdisk", 0)), disk=int(entry.get("disk", 0)),
        uptime_s=int(entry.get("uptime", 0)),
        ha_state=ha_state or entry.get("hastate"), level=str(entry.get("level", "")))


def _with_psi(client: PveClient, node: Node) -> Node:
    if not node.online:
        return node
    rows = client.get(f"/nodes/{node.name}/rrddata", timeframe="hour", cf="AVERAGE")
    latest = next((r for r in reversed(rows) if "pressurecpusome" in r), None)
    if latest is None:
        return node
    psi = Psi(cpu_some=float(latest.get("pressurecpusome", 0)),
              io_some=float(latest.get("pressureiosome", 0)),
              io_full=float(latest.get("pressureiofull", 0)),
              mem_some=float(latest.get("pressurememorysome", 0)),
              mem_full=float(latest.get("pressurememoryfull", 0)))
    from dataclasses import replace
    return replace(node, psi=psi)


def _guest(entry: dict[str, Any], ha_config: dict[str, dict[str, Any]],
           services: dict[str, dict[str, Any]], local_disks: tuple[LocalDisk, ...]) -> Guest:
    kind = entry["type"]
    vmid = int(entry["vmid"])
    sid = f"{'vm' if kind == 'qemu' else 'ct'}:{vmid}"
    ha = None
    if sid in ha_config:
        res = ha_config[sid]
        service = services.get(sid, {})
        ha = HaResource(
            sid=sid, state=str(res.get("state", "started")),
            crm_state=service.get("state") or entry.get("hastate"),
            failback=bool(int(res.get("failback", 1))),
            max_restart=int(res.get("max_restart", 1)), max_relocate=int(res.get("max_relocate", 1)),
            group=res.get("group"), auto_rebalance=bool(int(res.get("auto-rebalance", 1))),
            target=service.get("target"))
    tags = tuple(t for t in str(entry.get("tags", "")).replace(",", ";").split(";") if t)
    return Guest(
        vmid=vmid, type=kind, name=str(entry.get("name", "")), node=entry["node"],
        status=str(entry.get("status", "unknown")), maxcpu=float(entry.get("maxcpu", 0)),
        cpu_frac=float(entry.get("cpu", 0.0)), maxmem=int(entry.get("maxmem", 0)),
        mem=int(entry.get("mem", 0)), maxdisk=int(entry.get("maxdisk", 0)),
        disk=int(entry.get("disk", 0)), uptime_s=int(entry.get("uptime", 0)),
        template=bool(int(entry.get("template", 0))), tags=tags, pool=entry.get("pool"),
        lock=entry.get("lock") or None, ha=ha, local_disks=local_disks)


def _crs(crs: dict[str, Any], version: str) -> CrsOptions:
    """PVE 9.2 takes threshold and margin in percent; 9.1 and the 5.2.0 HA manager in fractions."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    percent = (major, minor) >= (9, 2)

    def fraction(key: str, default: float) -> float:
        value = float(crs.get(key, default * (100 if percent else 1)))
        return value / 100 if percent else value

    return CrsOptions(
        ha=str(crs.get("ha", "basic")),
        rebalance_on_start=bool(int(crs.get("ha-rebalance-on-start", 0))),
        auto_rebalance=bool(int(crs.get("ha-auto-rebalance", 0))),
        auto_rebalance_threshold=fraction("ha-auto-rebalance-threshold", 0.3),
        auto_rebalance_method=str(crs.get("ha-auto-rebalance-method", "bruteforce")),
        auto_rebalance_hold_duration=float(crs.get("ha-auto-rebalance-hold-duration", 3)),
        auto_rebalance_margin=fraction("ha-auto-rebalance-margin", 0.1),
    )
