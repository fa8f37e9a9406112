"""``/pools``: resource pools and their members."""

from __future__ import annotations

import re
from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.api.views import guest_resource, storage_status
from keel.sim.errors import ApiError


def _members(call: Call, poolid: str, kind: str | None = None) -> list[dict[str, Any]]:
    cluster = call.cluster
    members = []
    for vmid in sorted(v for v, p in cluster.guest_pool.items() if p == poolid):
        guest = cluster.guests.get(vmid)
        if guest is None or (kind and kind != guest.type):
            continue
        members.append(guest_resource(cluster, guest))
    if kind in (None, "storage"):
        for name in sorted(cluster.pools[poolid]["storage"]):
            node = cluster.scenario.local_node
            status = storage_status(cluster, name, node)
            members.append({"id": f"storage/{node}/{name}", "type": "storage", "storage": name,
                            "node": node, "disk": status["used"], "maxdisk": status["total"],
                            "status": "available", "content": status["content"],
                            "shared": status["shared"], "plugintype": status["type"]})
    return members


def _pool(call: Call, poolid: str) -> dict[str, Any]:
    pool = call.cluster.pools.get(poolid)
    if pool is None:
        raise ApiError(500, f"pool '{poolid}' does not exist")
    return pool


@route("GET", "/pools")
def pools(call: Call) -> list[dict[str, Any]]:
    cluster = call.cluster
    wanted = call.params.get("poolid")
    result = []
    for poolid in sorted(cluster.pools):
        if wanted and poolid != wanted:
            continue
        if not call.can(f"/pool/{poolid}", ["Pool.Audit"]):
            continue
        entry: dict[str, Any] = {"poolid": poolid}
        if cluster.pools[poolid]["comment"]:
            entry["comment"] = cluster.pools[poolid]["comment"]
        if wanted:
            entry["members"] = _members(call, poolid, call.params.get("type"))
        result.append(entry)
    if wanted and not result:
        _pool(call, wanted)
    return result


@route("GET", "/pools/{poolid}")
def pool(call: Call) -> dict[str, Any]:
    data = _pool(call, call.params["poolid"])
    entry: dict[str, Any] = {"members": _members(call, call.params["poolid"], call.params.get("type"))}
    if data["comment"]:
        entry["comment"] = data["comment"]
    return entry


@route("POST", "/pools")
def create(call: Call) -> None:
    poolid = call.params["poolid"]
    if poolid in call.cluster.pools:
        raise ApiError(500, f"create pool failed: pool '{poolid}' already exists")
    call.cluster.pools[poolid] = {"comment": call.params.get("comment", ""), "storage": set()}
    return None


def _update(call: Call, poolid: str) -> None:
    cluster = call.cluster
    data = _pool(call, poolid)
    if "comment" in call.params:
        data["comment"] = call.params["comment"]
    remove = call.flag("delete")
    vmids = [int(v) for v in re.split(r"[,;\s]+", str(call.params.get("vms", ""))) if v]
    for vmid in vmids:
        if vmid not in cluster.guests:
            raise ApiError(500, f"VM {vmid} does not exist")
        current = cluster.guest_pool.get(vmid)
        if remove:
            if current == poolid:
                del cluster.guest_pool[vmid]
        else:
            if current and current != poolid and not call.flag("allow-move"):
                raise ApiError(500, f"VM {vmid} is already a pool member")
            cluster.guest_pool[vmid] = poolid
    for name in [s for s in re.split(r"[,;\s]+", str(call.params.get("storage", ""))) if s]:
        if name not in cluster.storages:
            raise ApiError(500, f"storage '{name}' does not exist")
        (data["storage"].discard if remove else data["storage"].add)(name)


@route("PUT", "/pools")
def update(call: Call) -> None:
    _update(call, call.params["poolid"])
    return None


@route("PUT", "/pools/{poolid}")
def update_deprecated(call: Call) -> None:
    _update(call, call.params["poolid"])
    return None


def _delete(call: Call, poolid: str) -> None:
    _pool(call, poolid)
    if any(p == poolid for p in call.cluster.guest_pool.values()) or call.cluster.pools[poolid]["storage"]:
        raise ApiError(500, "delete pool failed: pool not empty")
    del call.cluster.pools[poolid]


@route("DELETE", "/pools")
def delete(call: Call) -> None:
    _delete(call, call.params["poolid"])
    return None


@route("DELETE", "/pools/{poolid}")
def delete_deprecated(call: Call) -> None:
    _delete(call, call.params["poolid"])
    return None
