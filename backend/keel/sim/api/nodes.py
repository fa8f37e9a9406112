"""``/nodes`` and what hangs off a node that is not a guest: status, version, rrddata,
tasks, storage; plus the cluster-wide ``/storage`` config."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.api.rrd import node_rrd
from keel.sim.api.views import node_resource, storage_status
from keel.sim.errors import ApiError
from keel.sim.schema import split_list
from keel.sim.tasks import Task


def _node(call: Call) -> str:
    name = call.params["node"]
    call.cluster.node(name)
    return name


@route("GET", "/nodes")
def nodes(call: Call) -> list[dict[str, Any]]:
    cluster = call.cluster
    result = []
    for name in sorted(cluster.nodes):
        entry = node_resource(cluster, name, call.can(f"/nodes/{name}", ["Sys.Audit"]))
        for key in ("cgroup-mode", "hastate"):   # /cluster/resources only
            entry.pop(key, None)
        entry["ssl_fingerprint"] = ":".join(f"{(i * 37 + len(name)) % 256:02X}" for i in range(32))
        result.append(entry)
    return result


@route("GET", "/nodes/{node}")
def node_index(call: Call) -> list[dict[str, str]]:
    _node(call)
    return [{"name": n} for n in ("qemu", "lxc", "status", "version", "rrddata", "tasks",
                                  "storage", "network", "services", "syslog")]


@route("GET", "/nodes/{node}/status")
def status(call: Call) -> dict[str, Any]:
    from keel.sim.api.views import node_status
    return node_status(call.cluster, _node(call))


@route("GET", "/nodes/{node}/version")
def version(call: Call) -> dict[str, Any]:
    _node(call)
    cluster = call.cluster
    return {"version": cluster.version, "release": ".".join(cluster.version.split(".")[:2]),
            "repoid": cluster.repoid}


@route("GET", "/nodes/{node}/time")
def node_time(call: Call) -> dict[str, Any]:
    """The node's clock (the simulated one): what a client compares task start times with."""
    _node(call)
    now = int(call.cluster.t)
    return {"time": now, "localtime": now, "timezone": "UTC"}


@route("GET", "/nodes/{node}/rrddata")
def rrddata(call: Call) -> list[dict[str, Any]]:
    name = _node(call)
    if not call.cluster.nodes[name].online:
        return []
    return node_rrd(call.cluster, name, call.params["timeframe"], call.params.get("cf", "AVERAGE"))


# -- tasks --------------------------------------------------------------------------


def _visible(call: Call, task: Task) -> bool:
    """Its owner sees a task; so does whoever has Sys.Audit on the task's node."""
    if call.auth is None:
        return False
    return task.visible_to(call.auth.name) or call.can(f"/nodes/{task.node}", ["Sys.Audit"])


@route("GET", "/nodes/{node}/tasks")
def tasks(call: Call) -> list[dict[str, Any]]:
    """Active tasks first (status ``RUNNING``), then the archive, newest first; the filters
    of pve-manager's Tasks.pm, ``statusfilter`` on ok|warning|error|unknown."""
    node = _node(call)
    p = call.params
    source = p.get("source", "archive")
    wanted = {"ok", "warning", "error", "unknown"}
    if p.get("errors"):
        wanted.discard("ok")
    elif p.get("statusfilter") is not None:
        wanted = {s.lower() for s in split_list(p["statusfilter"], r"[,;\s]")}
    newest_first = sorted(call.cluster.tasks.values(), key=lambda t: (-t.starttime, t.upid))
    active = [t for t in newest_first if t.running] if source in ("active", "all") else []
    archive = [t for t in newest_first if not t.running] if source != "active" else []
    found = []
    for task in active + archive:
        if task.node != node or not _visible(call, task):
            continue
        if p.get("userfilter") and p["userfilter"].lower() not in task.user_fields()["user"].lower():
            continue
        if p.get("typefilter") and task.type != p["typefilter"]:
            continue
        if p.get("vmid") and task.id != str(p["vmid"]):
            continue
        if p.get("since") is not None and task.starttime < int(p["since"]):
            continue
        if p.get("until") is not None and task.starttime > int(p["until"]):
            continue
        if task.status_type not in wanted:
            continue
        entry = task.list_entry()
        if task.running:
            entry["status"] = "RUNNING"
        found.append(entry)
    start = int(p.get("start", 0))
    limit = int(p.get("limit", 50))
    return found[start:start + limit]


@route("GET", "/nodes/{node}/tasks/{upid}")
def task_index(call: Call) -> list[dict[str, str]]:
    call.cluster.task(call.params["upid"], _node(call))
    return [{"name": "log"}, {"name": "status"}]


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(call: Call) -> dict[str, Any]:
    task = call.cluster.task(call.params["upid"], _node(call))
    if not _visible(call, task):
        raise ApiError(403, "Permission check failed")
    return task.status()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(call: Call) -> list[dict[str, Any]]:
    task = call.cluster.task(call.params["upid"], _node(call))
    if not _visible(call, task):
        raise ApiError(403, "Permission check failed")
    lines = task.visible_lines(call.cluster.t)
    start = int(call.params.get("start", 0))
    limit = int(call.params.get("limit", 50))
    return [{"n": start + i + 1, "t": line} for i, line in enumerate(lines[start:start + limit])]


@route("DELETE", "/nodes/{node}/tasks/{upid}")
def task_stop(call: Call) -> None:
    task = call.cluster.task(call.params["upid"], _node(call))
    if not (call.auth and task.visible_to(call.auth.name)):
        call.require(f"/nodes/{task.node}", ["Sys.Modify"])
    if task.running:
        if task.on_abort:
            task.on_abort(call.cluster.t, "interrupted by signal")
        task.finish(call.cluster.t, "interrupted by signal")
    return None


# -- storage ------------------------------------------------------------------------


def _storage_visible(call: Call, name: str) -> bool:
    return call.can(f"/storage/{name}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True)


@route("GET", "/storage")
def storage_config(call: Call) -> list[dict[str, Any]]:
    result = []
    for name, storage in sorted(call.cluster.storages.items()):
        if call.params.get("type") and storage.spec.type != call.params["type"]:
            continue
        if not _storage_visible(call, name):
            continue
        entry: dict[str, Any] = {"storage": name, "type": storage.spec.type,
                                 "content": ",".join(storage.spec.content),
                                 "digest": "0" * 40}
        if storage.spec.shared:
            entry["shared"] = 1
        if storage.spec.nodes:
            entry["nodes"] = ",".join(storage.spec.nodes)
        result.append(entry)
    return result


@route("GET", "/storage/{storage}")
def storage_config_one(call: Call) -> dict[str, Any]:
    name = call.params["storage"]
    storage = call.cluster.storages.get(name)
    if storage is None:
        raise ApiError(500, f"storage '{name}' does not exist")
    entry: dict[str, Any] = {"storage": name, "type": storage.spec.type,
                             "content": ",".join(storage.spec.content), "digest": "0" * 40}
    if storage.spec.shared:
        entry["shared"] = 1
    if storage.spec.nodes:
        entry["nodes"] = ",".join(storage.spec.nodes)
    return entry


@route("GET", "/nodes/{node}/storage")
def node_storage(call: Call) -> list[dict[str, Any]]:
    node = _node(call)
    result = []
    for name, storage in sorted(call.cluster.storages.items()):
        if not storage.available_on(node) or not _storage_visible(call, name):
            continue
        if call.params.get("storage") and call.params["storage"] != name:
            continue
        status = storage_status(call.cluster, name, node)
        if call.params.get("content"):
            wanted = set(call.params["content"].split(","))
            if not wanted & set(storage.spec.content):
                continue
        result.append(status)
    return result


def _node_storage(call: Call) -> tuple[str, str]:
    node = _node(call)
    name = call.params["storage"]
    storage = call.cluster.storages.get(name)
    if storage is None or not storage.available_on(node):
        raise ApiError(500, f"storage '{name}' does not exist" if storage is None
                       else f"storage '{name}' is not available on node '{node}'")
    return node, name


@route("GET", "/nodes/{node}/storage/{storage}")
def node_storage_index(call: Call) -> list[dict[str, str]]:
    _node_storage(call)
    return [{"subdir": s} for s in ("content", "status", "rrd", "rrddata")]


@route("GET", "/nodes/{node}/storage/{storage}/status")
def node_storage_status(call: Call) -> dict[str, Any]:
    node, name = _node_storage(call)
    if not _storage_visible(call, name):
        raise ApiError(403, f"Permission check failed (/storage/{name}, Datastore.Audit)")
    status = storage_status(call.cluster, name, node)
    for key in ("storage", "used_fraction"):   # only the node's storage index adds these
        status.pop(key, None)
    return status


@route("GET", "/nodes/{node}/storage/{storage}/content")
def node_storage_content(call: Call) -> list[dict[str, Any]]:
    node, name = _node_storage(call)
    cluster = call.cluster
    shared = cluster.storages[name].spec.shared
    want_vmid = call.params.get("vmid")
    content_filter = call.params.get("content")
    result = []
    for vmid in sorted(cluster.guests):
        guest = cluster.guests[vmid]
        if want_vmid is not None and vmid != int(want_vmid):
            continue
        if not shared and guest.node != node:
            continue
        if not call.can(f"/vms/{vmid}", ["VM.Audit"]) and not _storage_visible(call, name):
            continue
        for volume in guest.volumes():
            if volume.storage != name or volume.cdrom:
                continue
            content = "images" if guest.type == "qemu" else "rootdir"
            if content_filter and content_filter != content:
                continue
            result.append({"volid": volume.volid, "vmid": vmid, "size": volume.size,
                           "format": "raw", "content": content, "ctime": int(cluster.t) - 86400 * 30,
                           "used": int(volume.size * 0.6)})
    if "iso" in cluster.storages[name].spec.content and content_filter in (None, "iso"):
        result.append({"volid": f"{name}:iso/debian.iso", "size": 600 * 1024 * 1024,
                       "format": "iso", "content": "iso", "ctime": int(cluster.t) - 86400 * 90})
    return result
