"""Guests: ``/nodes/{node}/qemu/...`` and ``/nodes/{node}/lxc/...``.

Both kinds share one set of handlers, registered once per kind.
"""

from __future__ import annotations

from typing import Any, Callable

from keel.sim import configperm, migrate, ops, tags
from keel.sim.api.base import Call, route
from keel.sim.api.rrd import guest_rrd
from keel.sim.api.views import guest_list_entry
from keel.sim.errors import ApiError, param_error
from keel.sim.guests import SimGuest
from keel.sim.schema import split_list

KINDS = ("qemu", "lxc")


def _both(method: str, suffix: str) -> Callable[[Callable[[Call, str], Any]], Callable[[Call, str], Any]]:
    """Register a handler taking (call, kind) for both qemu and lxc."""
    def register(handler: Callable[[Call, str], Any]) -> Callable[[Call, str], Any]:
        for kind in KINDS:
            route(method, f"/nodes/{{node}}/{kind}{suffix}")(
                lambda call, _kind=kind: handler(call, _kind))
        return handler
    return register


def _guest(call: Call, kind: str) -> SimGuest:
    node = call.params["node"]
    call.cluster.node(node)
    return call.cluster.guest(call.params["vmid"], node, kind)


@_both("GET", "")
def guest_list(call: Call, kind: str) -> list[dict[str, Any]]:
    node = call.params["node"]
    call.cluster.node(node)
    cluster = call.cluster
    return [guest_list_entry(cluster, g) for vmid, g in sorted(cluster.guests.items())
            if g.node == node and g.type == kind and call.can(f"/vms/{vmid}", ["VM.Audit"])]


@_both("GET", "/{vmid}")
def guest_index(call: Call, kind: str) -> list[dict[str, str]]:
    _guest(call, kind)
    names = ["config", "status", "migrate", "clone", "rrddata", "snapshot"]
    if kind == "qemu":
        names.append("agent")
    return [{"subdir": n} for n in names]


@_both("GET", "/{vmid}/config")
def get_config(call: Call, kind: str) -> dict[str, Any]:
    guest = _guest(call, kind)
    config = dict(sorted(guest.config.items()))
    config["digest"] = guest.digest()
    return config


def _apply_config(call: Call, guest: SimGuest) -> None:
    """A config update as qemu-server's update_vm_api / pve-container's update_vm do it.

    VM: parameter conflicts (400), the privilege for each key but tags (403), then under the
    config lock the digest and the guest's lock (500), then, as the changes are applied, the
    tags (VM.Config.Options and the tag rules, 403).  Container: under the config lock the
    guest's lock and the digest (500) first, then conflicts and each key's privilege, tags
    among them."""
    cluster = call.cluster
    params = dict(call.params)
    for key in ("node", "vmid", "skiplock", "digest", "delete", "revert", "force", "background_delay"):
        params.pop(key, None)
    if call.flag("skiplock") and not (call.auth and call.auth.is_root):
        raise param_error({"skiplock": "Only root may use this option."})
    deletes = split_list(str(call.params.get("delete", "")), r"[,;\s]")
    if not params and not deletes and not call.params.get("revert"):
        raise ApiError(500, "no options specified")
    digest = call.params.get("digest")
    if guest.type == "lxc":
        ops.check_lock(guest, call.flag("skiplock"))
        if digest and digest != guest.digest():
            raise ApiError(500, "detected modified configuration - file changed by other user? "
                                "Try again.")
    for key in deletes:
        if key in params:
            raise param_error({"delete": f"you can't use '-{key}' and -delete {key}' at the same time"})
    _check_config_privileges(call, guest, list(params) + deletes)
    if guest.type == "qemu":
        if digest and digest != guest.digest():
            raise ApiError(500, "checksum mismatch (file change by other user?)")
        ops.check_lock(guest, call.flag("skiplock"))
    if "tags" in params or "tags" in deletes:
        tags.check_tag_change(cluster, call.auth, guest.vmid, guest.config.get("tags"),
                              params.get("tags"))
    if "tags" in params:
        params["tags"] = tags.unique_tags(cluster, params["tags"])
        if not params["tags"]:
            del params["tags"]
            deletes.append("tags")
    if "memory" in params and guest.type == "lxc":
        params["memory"] = int(params["memory"])
    for key in deletes:
        guest.config.pop(key, None)
    guest.config.update(params)
    cluster.invalidate_usage()


def _check_config_privileges(call: Call, guest: SimGuest, keys: list[str]) -> None:
    if call.auth is None or call.auth.is_root:
        return
    lookup = configperm.qemu_privileges if guest.type == "qemu" else configperm.lxc_privileges
    for key in sorted(set(keys) - {"tags"}):
        privs = lookup(key)
        if privs == configperm.ROOT_ONLY:
            raise ApiError(500 if guest.type == "qemu" else 403,
                           configperm.root_only_message(guest.type, key) if guest.type == "qemu"
                           else f"Permission check failed (changing '{key}' is only allowed "
                                f"for root@pam)")
        call.require(f"/vms/{guest.vmid}", privs)


@_both("PUT", "/{vmid}/config")
def put_config(call: Call, kind: str) -> None:
    guest = _guest(call, kind)
    _apply_config(call, guest)
    return None


@route("POST", "/nodes/{node}/qemu/{vmid}/config")
def post_config(call: Call) -> str:
    guest = _guest(call, "qemu")
    _apply_config(call, guest)
    return call.cluster.quick_task(guest.node, "qmconfig", str(guest.vmid), call.user, 0.2, []).upid


@_both("GET", "/{vmid}/status")
def status_index(call: Call, kind: str) -> list[dict[str, str]]:
    _guest(call, kind)
    return [{"subdir": s} for s in ("current", "start", "stop", "shutdown", "reboot")]


@_both("GET", "/{vmid}/status/current")
def status_current(call: Call, kind: str) -> dict[str, Any]:
    """vmstatus of one guest plus ``ha`` (managed, and the CRM's state when managed)."""
    cluster = call.cluster
    guest = _guest(call, kind)
    entry = guest_list_entry(cluster, guest)
    hastate = cluster.ha.hastate(guest)
    entry["ha"] = {"managed": 1, "state": hastate} if hastate not in (None, "ignored") \
        else {"managed": 0}
    if kind == "qemu":
        entry["qmpstatus"] = "running" if guest.status == "running" else "stopped"
        if guest.agent_enabled:
            entry["agent"] = 1
        if guest.status == "running":
            entry["running-machine"] = "pc-q35-9.2+pve1"
            entry["running-qemu"] = "9.2.0"
    return entry


def _ha_routed(call: Call, guest: SimGuest) -> bool:
    """vm_is_ha_managed: an HA resource that is not ``ignored`` (those act as unmanaged)."""
    return call.cluster.ha.hastate(guest) not in (None, "ignored")


def _only_root(call: Call, *names: str) -> None:
    for name in names:
        if call.params.get(name) not in (None, 0, "0", "") and not (call.auth and call.auth.is_root):
            raise param_error({name: "Only root may use this option."})


def _power(call: Call, kind: str, action: str) -> str:
    """start/stop/shutdown: hastart/hastop for HA guests, else the guest's own task."""
    cluster = call.cluster
    guest = _guest(call, kind)
    _only_root(call, "skiplock", "keepActive")
    if kind == "lxc" and action == "start" and guest.status == "running":
        raise ApiError(500, f"CT {guest.vmid} already running")
    if kind == "lxc" and action != "start" and guest.status != "running":
        raise ApiError(500, f"CT {guest.vmid} not running")
    if _ha_routed(call, guest):
        label = "VM" if kind == "qemu" else "CT"
        task = cluster.quick_task(guest.node, "hastart" if action == "start" else "hastop",
                                  str(guest.vmid), call.user, 0.5,
                                  [f"Requesting HA {'start' if action == 'start' else 'stop'} "
                                   f"for {label} {guest.vmid}"])
        cluster.ha.request_state(guest, "started" if action == "start" else "stopped")
        return task.upid
    if action == "start":
        return ops.start_guest(cluster, guest, call.user, skiplock=call.flag("skiplock")).upid
    return ops.stop_guest(cluster, guest, call.user, shutdown=(action == "shutdown"),
                          skiplock=call.flag("skiplock")).upid


for _kind in KINDS:
    for _action in ("start", "stop", "shutdown"):
        route("POST", f"/nodes/{{node}}/{_kind}/{{vmid}}/status/{_action}")(
            lambda call, k=_kind, a=_action: _power(call, k, a))


@_both("GET", "/{vmid}/migrate")
def get_migrate(call: Call, kind: str) -> dict[str, Any]:
    guest = _guest(call, kind)
    target = call.params.get("target")
    if target is not None:
        call.cluster.node(target)
    return migrate.migrate_precondition(call.cluster, guest, target)


@_both("POST", "/{vmid}/migrate")
def post_migrate(call: Call, kind: str) -> str:
    """qemu-server's migrate_vm / pve-container's migrate_vm: early checks (400/500), then a
    hamigrate task for HA guests (the CRM moves them later) or the migration itself."""
    cluster = call.cluster
    guest = _guest(call, kind)
    target = call.params["target"]
    if target == guest.node:
        raise param_error({"target": "target is local node."})
    cluster.node(target)
    running = guest.status == "running"
    if kind == "qemu":
        _only_root(call, "force", "migration_type", "migration_network")
        ops.check_lock(guest)
        if running and not call.flag("online"):
            raise ApiError(500, "can't migrate running VM without --online")
        migrate.check_migrate_request(cluster, guest, target)
    elif running and not (call.flag("restart") or call.flag("online")):
        raise ApiError(500, "can't migrate running container without --online or --restart")
    if _ha_routed(call, guest):
        label = "VM" if kind == "qemu" else "CT"
        task = cluster.quick_task(guest.node, "hamigrate", str(guest.vmid), call.user, 0.5,
                                  [f"Requesting HA migration for {label} {guest.vmid} to node {target}"])
        cluster.ha.queue("migrate", guest.sid, target)
        return task.upid
    if kind == "qemu":
        return migrate.start_migration(cluster, guest, target, call.user,
                                       online=call.flag("online") and running,
                                       with_local_disks=call.flag("with-local-disks"),
                                       force=call.flag("force")).upid
    return migrate.start_migration(cluster, guest, target, call.user, online=call.flag("online"),
                                   restart=call.flag("restart")).upid


@_both("POST", "/{vmid}/clone")
def clone(call: Call, kind: str) -> str:
    guest = _guest(call, kind)
    return ops.clone_guest(call.cluster, guest, call.user, call.params).upid


@_both("DELETE", "/{vmid}")
def destroy(call: Call, kind: str) -> str:
    guest = _guest(call, kind)
    _only_root(call, "skiplock")
    return ops.destroy_guest(call.cluster, guest, call.user, call.flag("purge"),
                             skiplock=call.flag("skiplock")).upid


@_both("GET", "/{vmid}/rrddata")
def rrddata(call: Call, kind: str) -> list[dict[str, Any]]:
    """The guest's RRD file, ``pve-vm-9.0/<vmid>`` (``pve2-vm`` on PVE 8): qemu-server and
    pve-container read it by vmid alone on the node that takes the call (no proxyto), and
    pmxcfs keeps every guest's file on every node, so the path's node and kind do not
    matter. Without a file, RRDs' error."""
    cluster = call.cluster
    guest = cluster.guests.get(int(call.params["vmid"]))
    if guest is None:
        folder = "pve-vm-9.0" if cluster.scenario.pve_major >= 9 else "pve2-vm"
        raise ApiError(500, f"RRD error: opening '/var/lib/rrdcached/db/{folder}/"
                            f"{call.params['vmid']}': No such file or directory")
    return guest_rrd(cluster, guest, call.params["timeframe"], call.params.get("cf", "AVERAGE"))


# -- guest agent (qemu only) ------------------------------------------------------------


@route("GET", "/nodes/{node}/qemu/{vmid}/agent")
def agent_index(call: Call) -> list[dict[str, str]]:
    _guest(call, "qemu")
    return [{"name": n} for n in ("ping", "file-read", "file-write", "get-osinfo", "info")]


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping")
def agent_ping(call: Call) -> dict[str, Any]:
    guest = _guest(call, "qemu")
    ops.agent_check(call.cluster, guest)
    return {"result": {}}


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write")
def agent_file_write(call: Call) -> None:
    import base64
    guest = _guest(call, "qemu")
    ops.agent_check(call.cluster, guest)
    content = call.params["content"]
    if not call.flag("encode", True):
        try:
            content = base64.b64decode(content, validate=True).decode("utf-8", "replace")
        except ValueError:
            raise ApiError(500, "content is not valid base64") from None
    guest.files[call.params["file"]] = content
    if call.cluster.github is not None:      # a JIT config starts the fake runner agent
        from keel.sim.github.agent import jit_written
        jit_written(call.cluster.github, guest, call.params["file"], content)
    return None


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/file-read")
def agent_file_read(call: Call) -> dict[str, Any]:
    guest = _guest(call, "qemu")
    ops.agent_check(call.cluster, guest)
    name = call.params["file"]
    if name not in guest.files:
        raise ApiError(500, f"Agent error: Failed to open file '{name}': No such file or directory")
    return {"content": guest.files[name], "bytes-read": len(guest.files[name].encode())}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/get-osinfo")
def agent_osinfo(call: Call) -> dict[str, Any]:
    guest = _guest(call, "qemu")
    ops.agent_check(call.cluster, guest)
    return {"result": {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12",
                       "kernel-release": "6.1.0-28-amd64", "machine": "x86_64"}}
