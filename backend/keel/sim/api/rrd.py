"""``rrddata`` for nodes and guests: rows as pve-cluster's RRD.pm returns them.

PVE 9 keeps 1-minute rows for a day and has PSI, ``memavailable``, ``arcsize`` and the
guests' ``memhost`` (pmxcfs ``rrd_def_*_pve9_0``); PVE 8 keeps coarser rows (``pve2``
layout: hour 1 min × 60, day 30 min × 70, week 3 h × 70, month 12 h × 70, year 7 d × 70)
and none of those fields.  Rows are computed from the load model at each instant, so a
row's value is the average (or maximum, ``cf=MAX``) of a few samples in its bucket.
"""

from __future__ import annotations

from typing import Any, Callable

from keel.sim import load
from keel.sim.api.views import DISK_RATE, NET_RATE, boot_disk
from keel.sim.cluster import GiB, MiB, Cluster
from keel.sim.guests import SimGuest

TIMEFRAMES_PVE9 = {"hour": (60, 60), "day": (60, 1440), "week": (1800, 336),
                   "month": (1800, 1440), "year": (21600, 1440), "decade": (604800, 570)}
TIMEFRAMES_PVE8 = {"hour": (60, 60), "day": (1800, 70), "week": (10800, 70),
                   "month": (43200, 70), "year": (604800, 70)}


def _pve9(cluster: Cluster) -> bool:
    return cluster.scenario.pve_major >= 9


def _buckets(cluster: Cluster, timeframe: str) -> tuple[float, list[float]]:
    """(step, bucket start times, oldest first) ending with the newest complete bucket."""
    table = TIMEFRAMES_PVE9 if _pve9(cluster) else TIMEFRAMES_PVE8
    step, count = table.get(timeframe, table["year"])   # PVE 8 reads decade as year
    newest = (cluster.t // step) * step - step
    return step, [newest - step * i for i in range(count - 1, -1, -1)]


def _samples(step: float, t: float) -> list[float]:
    k = min(6, max(2, int(step // load.SAMPLE_S)))
    return [t + step * (i + 0.5) / k for i in range(k)]


def _consolidate(cf: str) -> Callable[[list[float]], float]:
    return max if cf == "MAX" else (lambda xs: sum(xs) / len(xs))


def node_rrd(cluster: Cluster, name: str, timeframe: str, cf: str) -> list[dict[str, Any]]:
    spec = cluster.nodes[name].spec
    guests = [g for g in cluster.guests.values() if g.node == name and g.status == "running"]
    pick = _consolidate(cf)
    step, buckets = _buckets(cluster, timeframe)
    pve9 = _pve9(cluster)
    rows = []
    for t in buckets:
        cpus, mems = [], []
        for s in _samples(step, t):
            cores, mem = spec.overhead_cpu, spec.overhead_mem
            for guest in guests:
                if guest.started_at is not None and guest.started_at > s:
                    continue
                cores += load.cpu_frac(guest.cpu_base, guest.profile, cluster.seed, guest.vmid, s) \
                    * cluster.guest_maxcpu(guest)
                mem += load.mem_bytes(guest.mem_base, guest.maxmem, guest.profile, s)
            cpus.append(min(1.0, cores / spec.cpus))
            mems.append(min(spec.memory, mem))
        cpu, mem = pick(cpus), pick(mems)
        row: dict[str, Any] = {
            "time": int(t), "loadavg": round(cpu * spec.cpus, 2), "maxcpu": spec.cpus,
            "cpu": round(cpu, 6), "iowait": 0.002, "memtotal": spec.memory, "memused": int(mem),
            "swaptotal": 8 * GiB, "swapused": 0, "roottotal": spec.rootfs,
            "rootused": spec.rootfs_used, "netin": 1_200_000.0, "netout": 900_000.0,
        }
        if pve9:
            row.update(memavailable=spec.memory - int(mem), arcsize=0,
                       pressurecpusome=load.cpu_pressure(cpu))
            row["pressureiosome"], row["pressureiofull"] = load.io_pressure(cluster.seed, -spec.cpus, t)
            row["pressurememorysome"], row["pressurememoryfull"] = load.mem_pressure(mem / spec.memory)
        rows.append(row)
    return rows


def guest_rrd(cluster: Cluster, guest: SimGuest, timeframe: str, cf: str) -> list[dict[str, Any]]:
    """A stopped guest's rows carry zeros (pvestatd reports it too) and no PSI."""
    pick = _consolidate(cf)
    step, buckets = _buckets(cluster, timeframe)
    maxcpu = cluster.guest_maxcpu(guest)
    pve9 = _pve9(cluster)
    maxdisk = boot_disk(guest)
    rows = []
    for t in buckets:
        running = guest.status == "running" and (guest.started_at is None or guest.started_at <= t)
        row: dict[str, Any] = {"time": int(t), "maxcpu": maxcpu, "maxmem": guest.maxmem,
                               "maxdisk": maxdisk, "cpu": 0, "mem": 0, "disk": 0, "netin": 0.0,
                               "netout": 0.0, "diskread": 0.0, "diskwrite": 0.0}
        if pve9 and guest.type == "qemu":
            row["memhost"] = 0
        if running:
            samples = _samples(step, t)
            cpu = pick([load.cpu_frac(guest.cpu_base, guest.profile, cluster.seed, guest.vmid, s)
                        for s in samples])
            mem = pick([load.mem_bytes(guest.mem_base, guest.maxmem, guest.profile, s) for s in samples])
            row.update(cpu=round(cpu, 6), mem=int(mem), netin=float(NET_RATE),
                       netout=float(NET_RATE / 2), diskread=float(DISK_RATE),
                       diskwrite=float(DISK_RATE / 3))
            if guest.type == "lxc":
                row["disk"] = int(maxdisk * 0.4)
            if pve9 and guest.type == "qemu":
                row["memhost"] = int(mem) + 64 * MiB
            if pve9:
                row["pressurecpusome"] = load.cpu_pressure(cpu)
                row["pressurecpufull"] = round(load.cpu_pressure(cpu) * 0.5, 2)
                row["pressureiosome"], row["pressureiofull"] = load.io_pressure(cluster.seed, guest.vmid, t)
                row["pressurememorysome"], row["pressurememoryfull"] = load.mem_pressure(
                    mem / guest.maxmem if guest.maxmem else 0)
        rows.append(row)
    return rows
