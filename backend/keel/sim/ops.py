"""What happens when a guest is started, stopped, cloned or destroyed (migrations are in
``migrate.py``).

Each operation checks what PVE checks before it forks a worker (and answers with an
HTTP error then), or starts a task whose log and outcome unfold in simulated time; the
checks PVE makes inside its worker (a lock, a template, a VM already running) end the
task with that error instead.  The HA manager uses the same operations.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

from keel.sim.cluster import Cluster
from keel.sim.errors import ApiError
from keel.sim.guests import SimGuest, format_disk_size
from keel.sim.tasks import Task

START_S = 1.0
STOP_S = 1.0
SHUTDOWN_S = 5.0
DESTROY_S = 1.0
LINKED_CLONE_S = 2.0
WORKER_ERROR_S = 0.1      # a worker that dies on its first check


def _label(guest: SimGuest) -> str:
    return "VM" if guest.type == "qemu" else "CT"


def lock_error(guest: SimGuest, skiplock: bool = False) -> str | None:
    """AbstractConfig::check_lock's words: the guest type, not its id (``VM is locked (backup)``)."""
    if guest.lock and not skiplock:
        return f"{_label(guest)} is locked ({guest.lock})"
    return None


def check_lock(guest: SimGuest, skiplock: bool = False) -> None:
    error = lock_error(guest, skiplock)
    if error:
        raise ApiError(500, error)


def _worker(cluster: Cluster, guest: SimGuest, kind: str, user: str, duration: float,
            error: str | None, action: Callable[[], str | None],
            on_done: Callable[[bool], None] | None, lines: list[str] | None = None) -> Task:
    """A task on the guest's node: it fails at once with ``error``, else runs ``action``
    after ``duration`` (which may still return an error); ``on_done(ok)`` follows."""
    def finish() -> str | None:
        result = error or action()
        if on_done:
            on_done(result is None)
        return result
    return cluster.quick_task(guest.node, kind, str(guest.vmid), user,
                              WORKER_ERROR_S if error else duration, [] if error else lines or [],
                              finish)


# -- power --------------------------------------------------------------------------


def start_guest(cluster: Cluster, guest: SimGuest, user: str, skiplock: bool = False,
                on_done: Callable[[bool], None] | None = None) -> Task:
    """qmstart (template, lock, already running: task errors) or vzstart (already running:
    500 before the worker)."""
    if guest.type == "lxc" and guest.status == "running":
        raise ApiError(500, f"CT {guest.vmid} already running")
    error = None
    if guest.template:
        error = ("you can't start a vm if it's a template" if guest.type == "qemu"
                 else "you can't start a CT if it's a template")
    error = error or lock_error(guest, skiplock)
    if not error and guest.status == "running":
        error = f"VM {guest.vmid} already running"

    def run() -> str | None:
        guest.status, guest.started_at = "running", cluster.t
        cluster.invalidate_usage()
        return None
    kind = "qmstart" if guest.type == "qemu" else "vzstart"
    return _worker(cluster, guest, kind, user, START_S, error, run, on_done)


def stop_guest(cluster: Cluster, guest: SimGuest, user: str, shutdown: bool = False,
               skiplock: bool = False, on_done: Callable[[bool], None] | None = None) -> Task:
    """qmstop/qmshutdown (lock: a task error) or vzstop/vzshutdown (not running: 500)."""
    if guest.type == "lxc" and guest.status != "running":
        raise ApiError(500, f"CT {guest.vmid} not running")
    if guest.type == "qemu":
        kind = "qmshutdown" if shutdown else "qmstop"
    else:
        kind = "vzshutdown" if shutdown else "vzstop"

    def run() -> str | None:
        guest.status, guest.started_at = "stopped", None
        cluster.invalidate_usage()
        return None
    return _worker(cluster, guest, kind, user, SHUTDOWN_S if shutdown else STOP_S,
                   lock_error(guest, skiplock), run, on_done)


def destroy_guest(cluster: Cluster, guest: SimGuest, user: str, purge: bool,
                  skiplock: bool = False) -> Task:
    """qmdestroy/vzdestroy: protection, HA without purge and running are refused (500);
    the config lock is checked by the worker."""
    label = _label(guest)
    if str(guest.config.get("protection", "0")) == "1":
        raise ApiError(500, f"can't remove {label} {guest.vmid} - protection mode enabled")
    if cluster.ha.managed(guest) and not purge:
        raise ApiError(500, f"unable to remove {label} {guest.vmid} - used in HA resources and "
                            f"purge parameter not set.")
    if guest.status == "running":
        raise ApiError(500, f"VM {guest.vmid} is running - destroy failed" if guest.type == "qemu"
                       else f"unable to destroy CT {guest.vmid} - container is running")
    error = lock_error(guest, skiplock)
    if not error:
        guest.config["lock"] = "destroyed"

    def run() -> str | None:
        cluster.guests.pop(guest.vmid, None)
        cluster.guest_pool.pop(guest.vmid, None)
        if purge:
            cluster.ha.remove_resource(guest.sid)
        cluster.invalidate_usage()
        return None
    lines = [f"Removing image: {v.volid}" for v in guest.volumes() if not v.cdrom and v.storage]
    return _worker(cluster, guest, "qmdestroy" if guest.type == "qemu" else "vzdestroy", user,
                   DESTROY_S, error, run, None, lines)


# -- clone --------------------------------------------------------------------------


def clone_guest(cluster: Cluster, source: SimGuest, user: str, params: dict[str, Any]) -> Task:
    """qmclone/vzclone, with qemu-server's early checks in its order (all 500).

    The new config exists at once holding only ``lock: clone``; the source config is not
    locked (PVE takes a file lock, shared for a stopped source).  The pool membership is
    added when the clone is done."""
    newid = int(params["newid"])
    target = params.get("target")
    if target == source.node:
        target = None
    pool = params.get("pool")
    storage = params.get("storage")
    if pool is not None and pool not in cluster.pools:
        raise ApiError(500, f"pool '{pool}' does not exist")
    if target and target not in cluster.nodes:
        raise ApiError(500, f"no such cluster node '{target}'")
    if storage and storage not in cluster.storages:
        raise ApiError(500, f"storage '{storage}' does not exist")
    check_lock(source)
    full = params.get("full")
    full = (not source.template) if full is None else bool(full)
    if storage and not full:
        raise ApiError(500, "parameter 'storage' not allowed for linked clones")
    if params.get("format") and not full:
        raise ApiError(500, "parameter 'format' not allowed for linked clones")
    disks = [v for v in source.volumes() if not v.cdrom and v.storage and not v.key.startswith("unused")]
    if not full and not source.template and disks:
        raise ApiError(500, f"Linked clone feature is not supported for '{disks[0].volid}' ({disks[0].key})")
    if target:
        from keel.sim.migrate import local_volumes
        if local_volumes(cluster, source):
            raise ApiError(500, f"can't clone VM to node '{target}' (VM uses local storage)")
        if not cluster.nodes[target].online:
            raise ApiError(500, f"target node '{target}' is not online")
    if newid in cluster.guests:
        raise ApiError(500, f"unable to create VM {newid}: config file already exists")
    clone = SimGuest(newid, source.type, source.node, {"lock": "clone"}, cpu_base=0.05,
                     mem_base=int(source.maxmem * 0.3), boot_s=source.boot_s)
    cluster.guests[newid] = clone
    disk_bytes = sum(v.size for v in disks)
    duration = (1.0 + disk_bytes / cluster.scenario.disk_speed) if full else LINKED_CLONE_S
    lines = [f"create {'full' if full else 'linked'} clone of drive {v.key} ({v.volid})" for v in disks]

    def done() -> str | None:
        if cluster.guests.get(newid) is not clone:
            return f"clone failed: unable to create VM {newid}"
        clone.config = _cloned_config(source, newid, params, full)
        if target:
            clone.node = target
        if pool:
            cluster.guest_pool[newid] = pool
        cluster.invalidate_usage()
        return None
    kind = "qmclone" if source.type == "qemu" else "vzclone"
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
    """assert_agent_available: configured, VM running, agent up (after the guest booted)."""
    if "agent" not in guest.config:
        raise ApiError(500, "No QEMU guest agent configured")
    if guest.status != "running":
        raise ApiError(500, f"VM {guest.vmid} is not running")
    if not guest.agent_enabled or guest.started_at is None or \
            cluster.t < guest.started_at + guest.boot_s:
        raise ApiError(500, "QEMU guest agent is not running")
