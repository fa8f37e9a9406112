"""Migrations: the precondition PVE reports, the checks before the worker starts, and a
qmigrate/vzmigrate task that unfolds in simulated time (qemu-server QemuMigrate.pm,
pve-container LXC/Migrate.pm).  The HA manager's LRM uses the same ``start_migration``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from keel.sim.cluster import GiB, MiB, Cluster
from keel.sim.errors import ApiError, param_error
from keel.sim.guests import Migration, SimGuest, Volume
from keel.sim.ops import check_lock, lock_error
from keel.sim.tasks import Task

OFFLINE_MIGRATION_S = 1.5
MAX_PROGRESS_LINES = 30


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _gib(value: float) -> str:
    if value >= GiB:
        return f"{value / GiB:.1f} GiB"
    return f"{value / MiB:.1f} MiB"


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
    """GET .../migrate: which nodes are possible and what ties the guest to its node
    (qemu-server and pve-container's migrate_vm_precondition; containers in kebab-case
    and without storage or device checks)."""
    check_lock(guest)
    running = int(guest.status == "running")
    allowed, not_allowed = [], {}
    for name in sorted(cluster.nodes):
        if name == guest.node:
            continue
        reasons: dict[str, Any] = {}
        storages = unavailable_storages(cluster, guest, name) if guest.type == "qemu" else []
        if storages:
            reasons["unavailable_storages"] = storages
        blocking = cluster.ha.blocking_resources(guest, name)
        if blocking:
            reasons["blocking-ha-resources"] = blocking
        if reasons:
            not_allowed[name] = reasons
        else:
            allowed.append(name)
    dependent = cluster.ha.dependent_resources(guest)
    if guest.type == "lxc":
        result: dict[str, Any] = {"running": running, "allowed-nodes": allowed,
                                  "not-allowed-nodes": not_allowed}
    else:
        result = {
            "running": running,
            "allowed_nodes": allowed,
            "not_allowed_nodes": not_allowed,
            "local_disks": [_local_disk(v) for v in local_volumes(cluster, guest)],
            "local_resources": guest.local_devices(),
            "mapped-resources": [],
            "mapped-resource-info": {},
            "has-dbus-vmstate": 1,
        }
    if dependent is not None:
        result["dependent-ha-resources"] = dependent
    return result


def _local_disk(volume: Volume) -> dict[str, Any]:
    """A volume's attributes as foreach_volid collects them (flags only when set)."""
    disk: dict[str, Any] = {"volid": volume.volid, "size": volume.size, "drivename": volume.key}
    if volume.cdrom:
        disk["cdrom"] = 1
    if volume.key.startswith("unused"):
        disk["is_unused"] = 1
    else:
        disk["is_attached"] = 1
    return disk


def _migration_fault(cluster: Cluster, vmid: int) -> str | None:
    for fault in cluster.migration_faults:
        if fault.vmid is None or fault.vmid == vmid:
            if cluster.fault_rng.random() < fault.rate:
                return fault.message
    return None


def check_migrate_request(cluster: Cluster, guest: SimGuest, target: str) -> None:
    """The checks PVE makes before it starts a migration worker (an offline target is only
    found by the worker, when it cannot reach the node over SSH)."""
    if target == guest.node:
        raise param_error({"target": "target is local node."})
    if target not in cluster.nodes:
        raise ApiError(500, f"no such cluster node '{target}'")
    check_lock(guest)
    storages = unavailable_storages(cluster, guest, target)
    if storages:
        raise ApiError(500, f"storage '{storages[0]}' is not available on node '{target}'")


class _Log:
    """A migration task's log: AbstractMigrate prefixes each line with the local time."""

    def __init__(self, task: Task):
        self.task = task

    def __call__(self, at: float, text: str, error: bool = False) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
        self.task.log(at, f"{stamp}{' ERROR:' if error else ''} {text}")


def start_migration(cluster: Cluster, guest: SimGuest, target: str, user: str, *,
                    online: bool = False, with_local_disks: bool = False, force: bool = False,
                    restart: bool = False,
                    on_done: Callable[[bool], None] | None = None) -> Task:
    """Start a qmigrate/vzmigrate task; ``on_done(ok)`` runs when it ends either way.

    As in AbstractMigrate: an error while preparing or copying disks ends the task with
    ``migration aborted``; one while the RAM moves (phase 2) with ``migration problems``;
    either way the guest stays where it was (a container moved in restart mode is started
    again on the source).  While the RAM moves the guest's memory counts on both nodes.
    """
    kind = "qmigrate" if guest.type == "qemu" else "vzmigrate"
    running = guest.status == "running"
    task = cluster.new_task(guest.node, kind, str(guest.vmid), user)
    task.info["target"] = target
    log = _Log(task)
    t0 = cluster.t
    live = running and guest.type == "qemu"
    restarted = running and guest.type == "lxc"     # restart mode (online fails in prepare)
    _, mem_used = cluster.guest_usage(guest, cluster.t)
    label = "VM" if guest.type == "qemu" else "CT"
    starting = (f"starting migration of {label} {guest.vmid} to node '{target}' "
                f"({cluster.nodes[target].spec.ip})")

    def release() -> None:
        guest.migration = None
        if guest.lock == "migrate":
            guest.config.pop("lock", None)
        cluster.invalidate_usage()

    def end(outcome: str, error: str = "", exitstatus: str | None = None) -> None:
        if not task.running:
            return
        release()
        duration = _hms(cluster.t - t0)
        if outcome == "ok":
            guest.node = target
            log(cluster.t, f"migration finished successfully (duration {duration})")
        elif outcome == "problems":
            log(cluster.t, f"online migrate failure - {error}", error=True)
            log(cluster.t, "aborting phase 2 - cleanup resources")
            log(cluster.t, f"migration finished with problems (duration {duration})", error=True)
        else:
            log(cluster.t, f"migration aborted (duration {duration}): {error}", error=True)
        if outcome != "ok" and restarted and guest.status != "running":
            guest.status, guest.started_at = "running", cluster.t   # restarted on the source
        task.finish(cluster.t, exitstatus or {"ok": "OK", "problems": "migration problems"}.get(
            outcome, "migration aborted"))
        if on_done:
            on_done(outcome == "ok")

    def abort(at: float, reason: str) -> None:
        release()
        if on_done:
            on_done(False)
    task.on_abort = abort

    error, lines = _precheck_in_worker(cluster, guest, target, online, with_local_disks, force)
    if error:
        if lines:   # the local-disk scan is phase 1's: it comes after its first line
            for line in [starting] + lines:
                log(t0, line)
            log(t0, error, error=True)
        cluster.schedule(t0 + 0.5, lambda: end("aborted", error))
        return task
    # the target's free memory before this migration reserves the guest's there
    target_free = cluster.nodes[target].spec.memory - cluster.node_usage(target)[1]
    if restarted:   # restart mode shuts the container down at the end of prepare
        log(t0, f"shutdown CT {guest.vmid}")
    log(t0 + (3.0 if restarted else 0.0), starting)
    guest.config["lock"] = "migrate"
    guest.migration = Migration(target, task.upid, online=live)
    cluster.invalidate_usage()

    locals_ = [v for v in local_volumes(cluster, guest) if not v.cdrom]
    t = t0 + (cluster.scenario.migration_setup_s if live else 0.5)
    if restarted:
        cluster.schedule(t0 + 3.0, lambda: _stop(cluster, guest) if task.running else None)
        t += 3.0
    if live:
        refused = _target_start_error(cluster, guest, target)
        if refused:
            cluster.schedule(t, lambda: end("problems", refused))
            return task
        if mem_used > target_free:
            cluster.schedule(t, lambda: end("problems", "failed to start VM on target node: kvm: "
                                                        "cannot set up guest memory 'pc.ram': "
                                                        "Cannot allocate memory"))
            return task
    if locals_:
        for volume in locals_:
            log(t, f"{volume.key}: start migration to {target} ({_gib(volume.size)})")
        t += sum(v.size for v in locals_) / cluster.scenario.disk_speed
        log(t, f"mirror-{locals_[0].key}: Completing block job...")
    fault = _migration_fault(cluster, guest.vmid)
    if live:
        speed = cluster.scenario.migration_speed
        ram_s = max(0.5, mem_used / speed)
        step = max(1.0, ram_s / MAX_PROGRESS_LINES)
        log(t, "migration downtime limit: 100 ms")
        elapsed = step
        while elapsed < ram_s:
            log(t + elapsed, f"migration active, transferred {_gib(mem_used * elapsed / ram_s)} of "
                             f"{_gib(guest.maxmem)} VM-state, {_gib(speed)}/s")
            elapsed += step
        if fault:   # an injected fault's message is the task's exit status (docs/simulator.md)
            cluster.schedule(t + ram_s / 2, lambda: end("problems", fault, fault))
            return task
        t += ram_s
        log(t, f"average migration speed: {_gib(speed)}/s - downtime 45 ms")
        log(t, f"migration completed, transferred {_gib(mem_used)} VM-state")
    else:
        if fault:
            cluster.schedule(t, lambda: end("aborted", fault, fault))
            return task
        t += OFFLINE_MIGRATION_S
    if restarted:
        log(t, "start container on target node")
        t += 2.0

        def start_on_target() -> None:
            if task.running:
                guest.status, guest.started_at = "running", cluster.t
        cluster.schedule(t - 0.01, start_on_target)
    cluster.schedule(t, lambda: end("ok"))
    return task


def _target_start_error(cluster: Cluster, guest: SimGuest, target: str) -> str:
    """Why the VM cannot start on the target for a live migration ("" if it can):
    qemu-server's config_to_command refuses more vCPUs than the node has threads, and a
    VM with CPU type ``host`` cannot take its CPU state to a node of another CPU model."""
    spec = cluster.nodes[target].spec
    if guest.vcpus > spec.cpus:
        return f"failed to start VM on target node: MAX {spec.cpus} vcpus allowed per VM on this node"
    source = cluster.nodes[guest.node].spec
    if guest.cpu_type in ("host", "max") and source.cpu_model != spec.cpu_model:
        return ("load of migration failed: Invalid argument (error while loading state for "
                "instance 0x0 of device 'cpu': the target's CPU model is not the source's)")
    return ""


def _stop(cluster: Cluster, guest: SimGuest) -> None:
    guest.status, guest.started_at = "stopped", None
    cluster.invalidate_usage()


def _precheck_in_worker(cluster: Cluster, guest: SimGuest, target: str, online: bool,
                        with_local_disks: bool, force: bool) -> tuple[str, list[str]]:
    """What QemuMigrate/LXC::Migrate's prepare and volume scan refuse, in their order:
    (error, lines logged before it; lines only for the volume scan); no error: ("", [])."""
    running = guest.status == "running"
    unreachable = "Can't connect to destination address using public key"
    if guest.type == "lxc":
        # LXC::Migrate::prepare: the config lock (not checked before the worker), then a
        # running container with ``online`` (even with ``restart``), then the target.
        locked = lock_error(guest)
        if locked:
            return locked, []
        if running and online:
            return "lxc live migration is currently not implemented", []
        return ("" if cluster.nodes[target].online else unreachable), []
    devices = guest.local_devices()
    if devices and not force:
        return f"can't migrate VM which uses local devices: {', '.join(devices)}", []
    if not cluster.nodes[target].online:
        return unreachable, []
    problems = []
    for volume in local_volumes(cluster, guest):
        if volume.cdrom:
            problems.append((volume.volid, "local cdrom image"))
        elif running and not with_local_disks:
            problems.append((volume.volid, "can't live migrate attached local disks without "
                                           "with-local-disks option"))
    if problems:
        return "can't migrate VM - check log", [f"can't migrate local disk '{volid}': {why}"
                                                for volid, why in problems]
    return "", []
