"""``/version``, ``/cluster/status``, ``/cluster/resources``, ``/cluster/nextid``,
``/cluster/options`` and ``/cluster/tasks``."""

from __future__ import annotations

from typing import Any

from keel.sim import tags
from keel.sim.api.base import Call, route
from keel.sim.api.views import guest_resource, node_resource, storage_resources
from keel.sim.errors import param_error
from keel.sim.schema import parse_property_string, split_list


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
    """Pools, guests, nodes, storage, in that order, each filtered by the caller's privileges
    (pve-manager's API2/Cluster.pm); a pool adds up its running members, seen or not."""
    cluster = call.cluster
    kind = call.params.get("type")
    pools: dict[str, dict[str, Any]] = {}
    if kind is None:
        for pool in sorted(cluster.pools):
            if call.can(f"/pool/{pool}", ["Pool.Audit"]):
                pools[pool] = {"id": f"/pool/{pool}", "pool": pool, "type": "pool"}
    guests: list[dict[str, Any]] = []
    if kind in (None, "vm"):
        for vmid in sorted(cluster.guests):
            entry = guest_resource(cluster, cluster.guests[vmid])
            pool = entry.get("pool")
            if pool in pools and entry.get("uptime"):
                _add_to_pool(pools[pool], entry)
            if not call.can(f"/vms/{vmid}", ["VM.Audit"]):
                continue
            if pool and not call.can(f"/pool/{pool}", ["Pool.Audit"]):
                del entry["pool"]
            guests.append(entry)
    result = list(pools.values()) + guests
    if kind in (None, "node"):
        for name in sorted(cluster.nodes):
            result.append(node_resource(cluster, name, call.can(f"/nodes/{name}", ["Sys.Audit"])))
    if kind in (None, "storage"):
        result += [entry for entry in storage_resources(cluster)
                   if call.can(f"/storage/{entry['storage']}", ["Datastore.Audit"])]
    return result


def _add_to_pool(pool: dict[str, Any], guest: dict[str, Any]) -> None:
    """Sum a running member into its pool entry; cpu is weighted by each member's maxcpu."""
    pool["uptime"] = max(pool.get("uptime", 0), guest["uptime"])
    pool["mem"] = pool.get("mem", 0) + guest["mem"]
    pool["maxmem"] = pool.get("maxmem", 0) + guest["maxmem"]
    cores = pool.get("cpu", 0) * pool.get("maxcpu", 0) + guest["cpu"] * guest["maxcpu"]
    pool["maxcpu"] = pool.get("maxcpu", 0) + guest["maxcpu"]
    pool["cpu"] = cores / pool["maxcpu"] if pool["maxcpu"] else 0


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
    """datacenter.cfg (only ``console`` and ``tag-style`` without Sys.Audit on /), plus the
    tags the caller may set."""
    cluster = call.cluster
    if call.can("/", ["Sys.Audit"]):
        options = dict(sorted(cluster.options.items()))
    else:
        options = {k: v for k, v in cluster.options.items() if k in ("console", "tag-style")}
    options["allowed-tags"] = sorted(tags.allowed_tags(cluster, call.auth))
    return options


@route("PUT", "/cluster/options")
def put_options(call: Call) -> None:
    """Set what is given, then delete what ``delete`` names (a key in both ends up deleted)."""
    cluster = call.cluster
    props = call.endpoint.properties
    updates: dict[str, Any] = {}
    for key, value in call.params.items():
        if key == "delete":
            continue
        fmt = props[key].get("format")
        updates[key] = parse_property_string(fmt, value) if isinstance(fmt, dict) else value
    cluster.options.update(updates)
    for key in split_list(str(call.params.get("delete", "")), r"[,;\s]"):
        cluster.options.pop(key, None)
    return None


@route("GET", "/cluster/tasks")
def cluster_tasks(call: Call) -> list[dict[str, Any]]:
    """Recent tasks of every node: all with Sys.Audit on /, else the caller's own (a token's
    entries carry the user apart from the token, so a token never matches: as in PVE)."""
    cluster = call.cluster
    tasks = sorted(cluster.tasks.values(), key=lambda t: (-t.starttime, t.upid))
    running = [t for t in tasks if t.running]
    finished = [t for t in tasks if not t.running][:50]
    everything = call.can("/", ["Sys.Audit"])
    entries = [t.list_entry() for t in running + finished]
    return [e for e in entries if everything or (call.auth and e["user"] == call.auth.name)]
