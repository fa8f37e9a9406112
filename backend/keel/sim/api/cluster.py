"""``/version``, ``/cluster/status``, ``/cluster/resources``, ``/cluster/nextid``,
``/cluster/options`` and ``/cluster/tasks``."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.api.views import guest_resource, node_resource, storage_resources
from keel.sim.errors import ApiError, param_error
from keel.sim.schema import parse_property_string


@route("GET", "/version")
def version(call: Call) -> dict[str, Any]:
    cluster = call.cluster
    return {"version": cluster.version, "release": ".".join(cluster.version.split(".")[:2]),
            "repoid": cluster.repoid, "console": "xtermjs"}


@route("GET", "/cluster")
def cluster_index(call: Call) -> list[dict[str, str]]:
    return [{"name": n} for n in ("log", "options", "resources", "tasks", "backup", "ha", "status",
                                  "nextid", "firewall", "config", "replication", "sdn")]


@route("GET", "/cluster/status")
def cluster_status(call: Call) -> list[dict[str, Any]]:
    cluster = call.cluster
    entries: list[dict[str, Any]] = [{
        "type": "cluster", "id": "cluster", "name": cluster.scenario.cluster_name,
        "nodes": len(cluster.nodes), "quorate": int(cluster.quorate), "version": 7}]
    for name, node in sorted(cluster.nodes.items(), key=lambda kv: kv[1].nodeid):
        entries.append({"type": "node", "id": f"node/{name}", "name": name, "nodeid": node.nodeid,
                        "ip": node.spec.ip, "online": int(node.online),
                        "local": int(name == cluster.scenario.local_node), "level": node.spec.level})
    return entries


@route("GET", "/cluster/resources")
def resources(call: Call) -> list[dict[str, Any]]:
    cluster = call.cluster
    kind = call.params.get("type")
    result: list[dict[str, Any]] = []
    if kind in (None, "vm"):
        for vmid in sorted(cluster.guests):
            if call.can(f"/vms/{vmid}", ["VM.Audit"], vmid=vmid):
                result.append(guest_resource(cluster, cluster.guests[vmid]))
    if kind in (None, "node"):
        for name in sorted(cluster.nodes):
            result.append(node_resource(cluster, name, call.can(f"/nodes/{name}", ["Sys.Audit"])))
    if kind in (None, "storage"):
        for entry in storage_resources(cluster):
            if call.can(f"/storage/{entry['storage']}", ["Datastore.Audit", "Datastore.AllocateSpace"],
                        any_of=True):
                result.append(entry)
    if kind is None:
        for pool in sorted(cluster.pools):
            if call.can(f"/pool/{pool}", ["Pool.Audit"]):
                result.append({"id": f"/pool/{pool}", "type": "pool", "pool": pool})
    return result


@route("GET", "/cluster/nextid")
def nextid(call: Call) -> str:
    cluster = call.cluster
    wanted = call.params.get("vmid")
    if wanted is not None:
        if int(wanted) in cluster.guests:
            raise param_error({"vmid": f"VM {wanted} already exists"})
        return str(wanted)
    return str(cluster.next_vmid())


@route("GET", "/cluster/options")
def get_options(call: Call) -> dict[str, Any]:
    cluster = call.cluster
    if not call.can("/", ["Sys.Audit"]):
        return {key: value for key, value in cluster.options.items()
                if key in ("console", "keyboard", "language", "tag-style", "user-tag-access")}
    return {key: value for key, value in sorted(cluster.options.items())}


@route("PUT", "/cluster/options")
def put_options(call: Call) -> None:
    cluster = call.cluster
    props = call.endpoint.properties
    updates: dict[str, Any] = {}
    for key, value in call.params.items():
        if key == "delete":
            continue
        fmt = props[key].get("format")
        updates[key] = parse_property_string(fmt, value) if isinstance(fmt, dict) else value
    deletes = [k.strip() for k in str(call.params.get("delete", "")).split(",") if k.strip()]
    for key in deletes:
        if key not in props or key == "delete":
            raise param_error({"delete": f"invalid option '{key}'"})
        if key in updates:
            raise ApiError(500, f"cannot set and delete property '{key}' at the same time!")
    for key in deletes:
        cluster.options.pop(key, None)
    cluster.options.update(updates)
    return None


@route("GET", "/cluster/tasks")
def cluster_tasks(call: Call) -> list[dict[str, Any]]:
    cluster = call.cluster
    tasks = sorted(cluster.tasks.values(), key=lambda t: (-t.starttime, t.upid))
    visible = [t for t in tasks if t.user.split("!")[0] == (call.auth.userid if call.auth else "")
               or call.can(f"/nodes/{t.node}", ["Sys.Audit"])]
    running = [t for t in visible if t.running]
    finished = [t for t in visible if not t.running][:50]
    return [t.list_entry() for t in running + finished]
