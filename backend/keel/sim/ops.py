"""What happens when a guest is migrated, cloned, started, stopped or destroyed.

Each operation checks what PVE checks before it forks a worker (and answers with an
HTTP error then), or starts a task whose log and outcome unfold in simulated time.
The HA manager uses the same operations for the migrations its LRM runs.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

from keel.sim.cluster import GiB, MiB, Cluster
from keel.sim.errors import ApiError, param_error
from keel.sim.guests import Migration, SimGuest, Volume, format_disk_size
from keel.sim.tasks import Task

OFFLINE_MIGRATION_S = 1.5
START_S = 1.0
STOP_S = 1.0
SHUTDOWN_S = 5.0
DESTROY_S = 1.0
LINKED_CLONE_S = 2.0
MAX_PROGRESS_LINES = 30


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _gib(value: float) -> str:
    if value >= GiB:
        return f"{value / GiB:.1f} GiB"
    return f"{value / MiB:.1f} MiB"


def check_lock(guest: SimGuest, skiplock: bool = False) -> None:
    if guest.lock and not skiplock:
        kind = "VM" if guest.type == "qemu" else "CT"
        raise ApiError(500, f"{kind} {guest.vmid} is locked ({guest.lock})")


def local_volumes(cluster: Cluster, guest: SimGuest) -> list[Volume]:
    """Volumes that live on storage only this node reaches (qemu-server's local-disk test)."""
    found = []
    for volume in guest.volumes():
        if volume.volid == "none" or volume.storage is None:
            continue
        storage = cluster.storages.get(volume.storage)
        if volume.shared_flag or (storage is not None and storage.spec.shared):
            continue
        found.append(volume)
    return found


def unavailable_storages(cluster: Cluster, guest: SimGuest, target: str) -> list[str]:
    names = []
    for volume in guest.volumes():
        storage = cluster.storages.get(volume.storage or "")
        if storage is not None and not storage.available_on(target) and storage.name not in names:
            names.append(storage.name)
    return sorted(names)


def migrate_precondition(cluster: Cluster, guest: SimGuest, target: str | None) -> dict[str, Any]:
    check_lock(guest)
    allowed, not_allowed = [], {}
    for name in sorted(cluster.nodes):
        if name == guest.node:
            continue
        reasons: dict[str, Any] = {}
        storages = unavailable_storages(cluster, guest, name)
        if storages:
            reasons["unavailable_storages"] = storages
        blocking = cluster.ha.blocking_resources(guest, name)
        if blocking:
            reasons["blocking-ha-resources"] = blocking
        if reasons:
            not_allowed[name] = reasons
        else:
            allowed.append(name)
    locals_ = local_volumes(cluster, guest)
    devices = guest.local_devices()
    running = guest.status == "running"
    dependent = cluster.ha.dependent_resources(guest)
    if guest.type == "lxc":
        result: dict[str, Any] = {"running": running, "allowed-nodes": allowed,
                                  "not-allowed-nodes": not_allowed}
        if dependent:
            result["dependent-ha-resources"] = dependent
        return result
    result = {
        "running": running,
        "allowed_nodes": allowed,
        "not_allowed_nodes": not_allowed,
        "local_disks": [{"volid": v.volid, "size": v.size, "cdrom": int(v.cdrom),
                         "is_unused": int(v.key.startswith("unused")), "drivename": v.key}
                        for v in locals_],
        "local_resources": devices,
        "mapped-resources": [],
        "mapped-resource-info": {},
        "has-dbus-vmstate": 1,
    }
    if dependent:
        result["dependent-ha-resources"] = dependent
    return result


def _migration_fault(cluster: Cluster, vmid: int) -> str | None:
    for fault in cluster.migration_faults:
        if fault.vmid is None or fault.vmid == vmid:
            if cluster.fault_rng.random() < fault.rate:
                return fault.message
    return None


def check_migrate_request(cluster: Cluster, guest: SimGuest, target: str) -> None:
    """The checks PVE makes before it starts a migration worker."""
    if target == guest.node:
        raise param_error({"target": "target is local node."})
    if target not in cluster.nodes:
        raise ApiError(500, f"no such cluster node '{target}'")
    if not cluster.nodes[target].online:
        raise ApiError(500, f"target node '{target}' is not online")
    check_lock(guest)
    storages = unavailable_storages(cluster, guest, target)
    if storages:
        raise ApiError(500, f"storage '{storages[0]}' is not available on node '{target}'")


def start_migration(cluster: Cluster, guest: SimGuest, target: str, user: str, *,
                    online: bool = False, with_local_disks: bool = False, force: bool = False,
                    restart: bool = False,
                    on_done: Callable[[bool], None] | None = None) -> Task:
    """Start a qmigrate/vzmigrate task; ``on_done(ok)`` runs when it ends either way."""
    kind = "qmigrate" if guest.type == "qemu" else "vzmigrate"
    running = guest.status == "running"
    task = cluster.new_task(guest.node, kind, str(guest.vmid), user)
    task.info["target"] = target
    source = guest.node
    t0 = cluster.t
    label = "VM" if guest.type == "qemu" else "CT"
    task.log(t0, f"starting migration of {label} {guest.vmid} to node '{target}' "
                 f"({cluster.nodes[target].spec.ip})")
    guest.config["lock"] = "migrate"
    live = running and guest.type == "qemu"
    _, mem_used = cluster.guest_usage(guest, cluster.t)
    guest.migration = Migration(target, task.upid, online=live)
    cluster.invalidate_usage()

    def end(ok: bool, error: str | None = None) -> None:
        if not task.running:
            return
        guest.migration = None
        guest.config.pop("lock", None)
        cluster.invalidate_usage()
        if ok:
            guest.node = target
            task.log(cluster.t, f"migration finished successfully (duration {_hms(cluster.t - t0)})")
            task.finish(cluster.t, "OK")
        else:
            task.log(cluster.t, f"ERROR: {error}")
            task.log(cluster.t, f"aborting phase 2 - cleanup resources")
            task.finish(cluster.t, f"migration aborted (duration {_hms(cluster.t - t0)}): {error}")
        if on_done:
            on_done(ok)

    def abort(at: float, reason: str) -> None:
        guest.migration = None
        guest.config.pop("lock", None)
        cluster.invalidate_usage()
        if on_done:
            on_done(False)
    task.on_abort = abort

    error = _precheck_in_worker(cluster, guest, online, with_local_disks, force, restart)
    if error:
        cluster.schedule(t0 + 0.5, lambda: end(False, error))
        return task

    locals_ = local_volumes(cluster, guest)
    disk_bytes = sum(v.size for v in locals_ if not v.cdrom)
    t = t0 + (cluster.scenario.migration_setup_s if live else 0.5)
    if guest.type == "lxc" and running:
        task.log(t0 + 0.1, f"shutdown CT {guest.vmid}")
        t += 3.0

        def stop_for_move() -> None:
            guest.status, guest.started_at = "stopped", None
        cluster.schedule(t0 + 3.0, stop_for_move)
    if live:
        need = mem_used
        target_cpu, target_mem = cluster.node_usage(target)
        free = cluster.nodes[target].spec.memory - target_mem
        if need > free:
            message = ("failed to start VM on target node: kvm: cannot set up guest memory "
                       "'pc.ram': Cannot allocate memory")
            cluster.schedule(t, lambda: end(False, message))
            return task
    if disk_bytes:
        copy_s = disk_bytes / cluster.scenario.disk_speed
        for volume in locals_:
            task.log(t, f"{volume.key}: start migration to {target} ({_gib(volume.size)})")
        t += copy_s
        task.log(t, f"mirror-{locals_[0].key}: Completing block job...")
    if live:
        ram_s = max(0.5, mem_used / cluster.scenario.migration_speed)
        step = max(1.0, ram_s / MAX_PROGRESS_LINES)
        task.log(t, "migration downtime limit: 100 ms")
        elapsed = step
        while elapsed < ram_s:
            done = mem_used * elapsed / ram_s
            task.log(t + elapsed, f"migration active, transferred {_gib(done)} of "
                                  f"{_gib(guest.maxmem)} VM-state, "
                                  f"{_gib(cluster.scenario.migration_speed)}/s")
            elapsed += step
        fault = _migration_fault(cluster, guest.vmid)
        if fault:
            cluster.schedule(t + ram_s / 2, lambda: end(False, fault))
            return task
        t += ram_s
        task.log(t, f"average migration speed: {_gib(cluster.scenario.migration_speed)}/s - "
                    f"downtime 45 ms")
        task.log(t, f"migration completed, transferred {_gib(mem_used)} VM-state")
    else:
        fault = _migration_fault(cluster, guest.vmid)
        if fault:
            cluster.schedule(t, lambda: end(False, fault))
            return task
        t += OFFLINE_MIGRATION_S
    if guest.type == "lxc" and running:
        task.log(t, "start container on target node")
        t += 2.0

        def restart_on_target() -> None:
            if task.running:
                guest.status, guest.started_at = "running", cluster.t
        cluster.schedule(t - 0.01, restart_on_target)
    cluster.schedule(t, lambda: end(True))
    return task


def _precheck_in_worker(cluster: Cluster, guest: SimGuest, online: bool, with_local_disks: bool,
                        force: bool, restart: bool) -> str | None:
    running = guest.status == "running"
    if guest.type == "lxc":
        if running and online and not restart:
            return "lxc live migration is currently not implemented"
        return None
    devices = guest.local_devices()
    if devices and not force:
        return f"can't migrate VM which uses local devices: {', '.join(devices)}"
    for volume in local_volumes(cluster, guest):
        if volume.cdrom:
            return f"can't migrate local cdrom drive (drive {volume.key})"
    if running and local_volumes(cluster, guest) and not with_local_disks:
        return "can't live migrate attached local disks without with-local-disks option"
    return None


# -- power --------------------------------------------------------------------------


def start_guest(cluster: Cluster, guest: SimGuest, user: str,
                on_done: Callable[[bool], None] | None = None) -> Task:
    kind = "qmstart" if guest.type == "qemu" else "vzstart"
    if guest.template:
        raise ApiError(500, "you can't start a vm if it's a template")
    check_lock(guest)

    def done() -> str | None:
        if guest.status == "running":
            result = f"VM {guest.vmid} already running"
        else:
            guest.status, guest.started_at = "running", cluster.t
            cluster.invalidate_usage()
            result = None
        if on_done:
            on_done(result is None)
        return result
    return cluster.quick_task(guest.node, kind, str(guest.vmid), user, START_S, [], done)


def stop_guest(cluster: Cluster, guest: SimGuest, user: str, shutdown: bool = False,
               timeout: float | None = None, force_stop: bool = True,
               on_done: Callable[[bool], None] | None = None) -> Task:
    check_lock(guest)
    if guest.type == "qemu":
        kind = "qmshutdown" if shutdown else "qmstop"
    else:
        kind = "vzshutdown" if shutdown else "vzstop"

    def done() -> str | None:
        guest.status, guest.started_at = "stopped", None
        cluster.invalidate_usage()
        if on_done:
            on_done(True)
        return None
    return cluster.quick_task(guest.node, kind, str(guest.vmid), user,
                              SHUTDOWN_S if shutdown else STOP_S, [], done)


def destroy_guest(cluster: Cluster, guest: SimGuest, user: str, purge: bool) -> Task:
    kind = "VM" if guest.type == "qemu" else "CT"
    if str(guest.config.get("protection", "0")) == "1":
        raise ApiError(500, f"can't remove {kind} {guest.vmid} - protection mode enabled")
    if cluster.ha.managed(guest) and not purge:
        raise ApiError(500, f"unable to remove {kind} {guest.vmid} - used in HA resources and "
                            f"purge parameter not set.")
    check_lock(guest)
    if guest.status == "running":
        raise ApiError(500, f"{kind} {guest.vmid} is running - destroy failed")
    guest.config["lock"] = "destroyed"

    def done() -> str | None:
        cluster.guests.pop(guest.vmid, None)
        cluster.guest_pool.pop(guest.vmid, None)
        if purge:
            cluster.ha.remove_resource(guest.sid)
        return None
    lines = [f"Removing image: {v.volid}" for v in guest.volumes() if not v.cdrom and v.storage]
    return cluster.quick_task(guest.node, "qmdestroy" if guest.type == "qemu" else "vzdestroy",
                              str(guest.vmid), user, DESTROY_S, lines, done)


# -- clone --------------------------------------------------------------------------


def clone_guest(cluster: Cluster, source: SimGuest, user: str, params: dict[str, Any]) -> Task:
    newid = int(params["newid"])
    full = params.get("full")
    if full is None:
        full = 0 if source.template else 1
    target = params.get("target") or source.node
    if newid in cluster.guests:
        raise ApiError(500, f"unable to create VM {newid}: config file already exists")
    if not full and params.get("storage"):
        raise param_error({"storage": "parameter 'storage' not allowed for linked clones"})
    if not full and not source.template:
        raise ApiError(500, "Linked clone feature is not supported for a VM that is not a template "
                            "- use a full clone")
    if target != source.node:
        if target not in cluster.nodes:
            raise ApiError(500, f"no such cluster node '{target}'")
        if local_volumes(cluster, source):
            raise ApiError(500, f"can't clone VM to node '{target}' (VM uses local storage)")
        if not cluster.nodes[target].online:
            raise ApiError(500, f"target node '{target}' is not online")
    pool = params.get("pool")
    if pool and pool not in cluster.pools:
        raise ApiError(500, f"pool '{pool}' does not exist")
    storage = params.get("storage")
    if storage and storage not in cluster.storages:
        raise ApiError(500, f"storage '{storage}' does not exist")
    if source.lock and not (source.lock == "clone" and source.template):
        check_lock(source)
    clone = SimGuest(newid, source.type, target, {"lock": "clone"}, cpu_base=0.05,
                     mem_base=int(source.maxmem * 0.3), boot_s=source.boot_s)
    cluster.guests[newid] = clone
    if pool:
        cluster.guest_pool[newid] = pool
    if source.status == "running":
        source.config["lock"] = "clone"
    disk_bytes = sum(v.size for v in source.volumes() if not v.cdrom)
    duration = (1.0 + disk_bytes / cluster.scenario.disk_speed) if full else LINKED_CLONE_S
    kind = "qmclone" if source.type == "qemu" else "vzclone"
    lines = [f"create {'full' if full else 'linked'} clone of drive {v.key} ({v.volid})"
             for v in source.volumes() if not v.cdrom]

    def done() -> str | None:
        if source.status == "running" and source.lock == "clone":
            source.config.pop("lock", None)
        if newid not in cluster.guests:
            return f"clone target VM {newid} vanished"
        clone.config = _cloned_config(source, newid, params, bool(full))
        return None
    return cluster.quick_task(source.node, kind, str(source.vmid), user, duration, lines, done)


def _cloned_config(source: SimGuest, newid: int, params: dict[str, Any], full: bool) -> dict[str, Any]:
    config = copy.deepcopy(source.config)
    for key in ("template", "lock", "protection"):
        config.pop(key, None)
    name_key = "name" if source.type == "qemu" else "hostname"
    config[name_key] = params.get("name") or params.get("hostname") or f"Copy-of-VM-{source.name}"
    if params.get("description"):
        config["description"] = params["description"]
    index = 0
    for volume in source.volumes():
        if volume.cdrom or volume.storage is None:
            continue
        storage = params.get("storage") if full and params.get("storage") else volume.storage
        base = "" if full else f"{volume.volid.split(':', 1)[1]}/"
        config[volume.key] = f"{storage}:{base}vm-{newid}-disk-{index},size={format_disk_size(volume.size)}"
        index += 1
    mac = f"BC:24:11:{(newid >> 16) & 0xFF:02X}:{(newid >> 8) & 0xFF:02X}:{newid & 0xFF:02X}"
    for key in list(config):
        if re.match(r"^net\d+$", key):
            config[key] = re.sub(r"([0-9A-F]{2}:){5}[0-9A-F]{2}", mac, str(config[key]))
    if "vmgenid" in config:
        config["vmgenid"] = f"00000000-0000-4000-8000-{newid:012d}"
    return config


# -- agent --------------------------------------------------------------------------


def agent_check(cluster: Cluster, guest: SimGuest) -> None:
    if guest.status != "running":
        raise ApiError(500, f"VM {guest.vmid} is not running")
    if not guest.agent_enabled:
        raise ApiError(500, "No QEMU guest agent configured")
    if guest.started_at is None or cluster.t < guest.started_at + guest.boot_s:
        raise ApiError(500, "QEMU guest agent is not running")
