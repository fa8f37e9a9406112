"""How simulated objects look in API answers (the field sets PVE documents)."""

from __future__ import annotations

from typing import Any

from keel.sim import load
from keel.sim.cluster import GiB, MiB, Cluster
from keel.sim.guests import SimGuest

NET_RATE = 40_000        # bytes/s a running guest moves on its NIC, for the counters
DISK_RATE = 120_000


def _uptime(cluster: Cluster, guest: SimGuest) -> int:
    if guest.status != "running" or guest.started_at is None:
        return 0
    return max(0, int(cluster.t - guest.started_at))


def boot_disk(guest: SimGuest) -> int:
    for volume in guest.volumes():
        if not volume.cdrom and not volume.key.startswith("unused"):
            return volume.size
    return 0


def guest_usage_fields(cluster: Cluster, guest: SimGuest) -> dict[str, Any]:
    """The usage fields shared by /cluster/resources, the node lists and status/current."""
    cpu, mem = cluster.guest_usage(guest)
    uptime = _uptime(cluster, guest)
    maxdisk = boot_disk(guest)
    fields: dict[str, Any] = {
        "cpu": round(cpu, 6), "maxcpu": cluster.guest_maxcpu(guest),
        "mem": mem, "maxmem": guest.maxmem,
        "disk": int(maxdisk * 0.4) if guest.type == "lxc" and guest.status == "running" else 0,
        "maxdisk": maxdisk, "uptime": uptime,
        "netin": uptime * NET_RATE, "netout": uptime * NET_RATE // 2,
        "diskread": uptime * DISK_RATE, "diskwrite": uptime * DISK_RATE // 3,
    }
    if guest.type == "qemu":
        fields["memhost"] = mem + (64 * MiB if guest.status == "running" else 0)
    return fields


def guest_status(cluster: Cluster, guest: SimGuest) -> str:
    if not cluster.nodes[guest.node].online:
        return "unknown"
    return guest.status


def guest_resource(cluster: Cluster, guest: SimGuest) -> dict[str, Any]:
    """A guest as ``/cluster/resources`` and pool members show it (extract_vm_stats)."""
    entry: dict[str, Any] = {
        "id": f"{guest.type}/{guest.vmid}", "type": guest.type, "vmid": guest.vmid,
        "node": guest.node, "name": guest.name, "status": guest_status(cluster, guest),
        "template": int(guest.template),
    }
    if cluster.nodes[guest.node].online:
        entry.update(guest_usage_fields(cluster, guest))
        # extract_vm_stats reads memhost from PVE 9's RRD layout only (pve-vm-9.0), where a
        # container's column is empty: PVE 8 has no memhost, PVE 9 says 0 for a container.
        if cluster.scenario.pve_major < 9:
            entry.pop("memhost", None)
        elif guest.type == "lxc":
            entry["memhost"] = 0
    else:
        entry.update(maxcpu=cluster.guest_maxcpu(guest), maxmem=guest.maxmem,
                     maxdisk=boot_disk(guest))
    if guest.tags:
        entry["tags"] = guest.tags
    if guest.lock:
        entry["lock"] = guest.lock
    pool = cluster.pool_of(guest.vmid)
    if pool:
        entry["pool"] = pool
    hastate = cluster.ha.hastate(guest)
    if hastate:
        entry["hastate"] = hastate
    return entry


def node_resource(cluster: Cluster, name: str, with_usage: bool = True) -> dict[str, Any]:
    """A node as ``/cluster/resources`` has it (pve-manager's extract_node_stats): without
    Sys.Audit on the node only its name, status and level; ``host-arch`` only for non-x86
    nodes (the simulator has none); ``hastate`` once the HA manager runs."""
    node = cluster.nodes[name]
    entry: dict[str, Any] = {
        "id": f"node/{name}", "type": "node", "node": name,
        "status": "online" if node.online else "offline", "level": node.spec.level,
    }
    if with_usage:
        entry.update(maxcpu=node.spec.cpus, maxmem=node.spec.memory, maxdisk=node.spec.rootfs)
        if node.online:
            cpu, mem = cluster.node_usage(name)
            entry.update(cpu=round(cpu, 6), mem=mem, disk=node.spec.rootfs_used,
                         uptime=int(cluster.t - node.booted_at))
    entry["cgroup-mode"] = 2
    if cluster.ha.active() or cluster.ha.maintenance:
        entry["hastate"] = cluster.ha.node_status.get(name, "online")
    return entry


def storage_used(cluster: Cluster, storage: str, node: str | None) -> int:
    """Thin-provisioned: 60 % of every volume's size on the storage (and node, if local)."""
    totals = cluster.memo.get("storage_used")
    if totals is None:
        totals = {}
        for guest in cluster.guests.values():
            for volume in guest.volumes():
                if volume.storage is None or volume.cdrom:
                    continue
                for key in ((volume.storage, guest.node), (volume.storage, None)):
                    totals[key] = totals.get(key, 0) + volume.size
        cluster.memo["storage_used"] = totals
    return int(totals.get((storage, node), 0) * 0.6)


def storage_status(cluster: Cluster, name: str, node: str) -> dict[str, Any]:
    storage = cluster.storages[name]
    spec = storage.spec
    used = storage_used(cluster, name, None if spec.shared else node)
    if spec.type == "dir" and not spec.shared:
        used += 20 * GiB
    total = spec.size
    return {"storage": name, "type": spec.type, "content": ",".join(spec.content),
            "shared": int(spec.shared), "active": 1, "enabled": 1, "total": total,
            "used": min(used, total), "avail": max(0, total - used),
            "used_fraction": round(min(used, total) / total, 6) if total else 0.0}


def storage_resources(cluster: Cluster) -> list[dict[str, Any]]:
    entries = []
    for node_name in sorted(cluster.nodes):
        node = cluster.nodes[node_name]
        for name in sorted(cluster.storages):
            storage = cluster.storages[name]
            if not storage.available_on(node_name):
                continue
            status = storage_status(cluster, name, node_name)
            entry: dict[str, Any] = {
                "id": f"storage/{node_name}/{name}", "type": "storage", "storage": name,
                "node": node_name, "status": "available" if node.online else "unknown",
                "content": status["content"], "shared": status["shared"],
                "plugintype": storage.spec.type,
            }
            if node.online:
                entry.update(disk=status["used"], maxdisk=status["total"])
            entries.append(entry)
    return entries


def guest_list_entry(cluster: Cluster, guest: SimGuest) -> dict[str, Any]:
    """An entry of ``GET /nodes/{node}/qemu`` or ``/lxc`` (no ``node`` field)."""
    entry: dict[str, Any] = {"vmid": guest.vmid, "status": guest.status, "name": guest.name}
    fields = guest_usage_fields(cluster, guest)
    entry.update(fields)
    entry["cpus"] = entry.pop("maxcpu")     # vmstatus says cpus; maxcpu is /cluster/resources'
    if cluster.scenario.pve_major < 9:
        entry.pop("memhost", None)          # qemu-server reports memhost since PVE 9
    if guest.type == "lxc":
        entry["type"] = "lxc"
        entry["maxswap"] = int(guest.config.get("swap", 512)) * MiB
        entry["swap"] = 0
    if guest.status == "running":
        entry["pid"] = 10000 + guest.vmid
        if cluster.scenario.pve_major >= 9:
            cpu = fields["cpu"]
            entry["pressurecpusome"] = load.cpu_pressure(cpu)
            entry["pressurecpufull"] = round(load.cpu_pressure(cpu) * 0.5, 2)
            some, full = load.io_pressure(cluster.seed, guest.vmid, cluster.t)
            entry["pressureiosome"], entry["pressureiofull"] = some, full
            msome, mfull = load.mem_pressure(fields["mem"] / guest.maxmem if guest.maxmem else 0)
            entry["pressurememorysome"], entry["pressurememoryfull"] = msome, mfull
    if guest.tags:
        entry["tags"] = guest.tags
    if guest.lock:
        entry["lock"] = guest.lock
    if guest.template:
        entry["template"] = 1
    return entry


def node_status(cluster: Cluster, name: str) -> dict[str, Any]:
    node = cluster.nodes[name]
    spec = node.spec
    cpu, mem = cluster.node_usage(name)
    threads = spec.cpus
    load1 = cpu * threads
    return {
        "uptime": int(cluster.t - node.booted_at), "idle": 0,
        "loadavg": [f"{load1:.2f}", f"{load1 * 0.95:.2f}", f"{load1 * 0.9:.2f}"],
        "cpu": round(cpu, 6), "wait": 0.002,
        "cpuinfo": {"cpus": threads, "cores": spec.cores, "sockets": spec.sockets,
                    "model": spec.cpu_model, "mhz": "2999.998", "hvm": "1", "user_hz": 100,
                    "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr svm"},
        "memory": {"total": spec.memory, "used": mem, "free": spec.memory - mem,
                   "available": spec.memory - mem},
        "swap": {"total": 8 * GiB, "used": 0, "free": 8 * GiB},
        "ksm": {"shared": 0},
        "rootfs": {"total": spec.rootfs, "used": spec.rootfs_used,
                   "free": spec.rootfs - spec.rootfs_used, "avail": spec.rootfs - spec.rootfs_used},
        "kversion": "Linux 6.14.11-4-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4",
        "current-kernel": {"sysname": "Linux", "release": "6.14.11-4-pve",
                           "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.14.11-4", "machine": "x86_64"},
        "boot-info": {"mode": "efi", "secureboot": 0},
        "pveversion": f"pve-manager/{cluster.version}/{cluster.repoid}",
    }
