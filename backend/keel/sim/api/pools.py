"""``/pools``: resource pools and their members."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.api.views import guest_resource, storage_resources
from keel.sim.errors import ApiError
from keel.sim.schema import split_list


def _members(call: Call, poolid: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Guests as extract_vm_stats has them (no tags, lock or HA state), then storage on the
    local node (or the first node the storage is restricted to)."""
    cluster = call.cluster
    members = []
    for vmid in sorted(v for v, p in cluster.guest_pool.items() if p == poolid):
        guest = cluster.guests.get(vmid)
        if guest is None or (kind and kind != guest.type):
            continue
        entry = guest_resource(cluster, guest)
        for key in ("tags", "lock", "hastate", "pool"):
            entry.pop(key, None)
        members.append(entry)
    if kind in (None, "storage"):
        for name in sorted(cluster.pools[poolid]["storage"]):
            storage = cluster.storages.get(name)
            if storage is None:
                continue
            node = cluster.scenario.local_node
            if not storage.available_on(node):
                node = sorted(storage.spec.nodes or [node])[0]
            members += [e for e in storage_resources(cluster) if e["id"] == f"storage/{node}/{name}"]
    return members


def _pool(call: Call, poolid: str, failed: str = "") -> dict[str, Any]:
    pool = call.cluster.pools.get(poolid)
    if pool is None:
        raise ApiError(500, f"{failed}pool '{poolid}' does not exist")
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
    if not poolid[:1].isalpha():
        raise ApiError(500, "create pool failed: pool name must start with a letter")
    call.cluster.pools[poolid] = {"comment": call.params.get("comment", ""), "storage": set()}
    return None


def _update(call: Call, poolid: str) -> None:
    """PVE's update_pool: each vmid/storage added (or removed with ``delete``); a guest in
    another pool moves only with ``allow-move``.  Errors say "update pools failed: ..."."""
    cluster = call.cluster
    failed = "update pools failed: "
    data = _pool(call, poolid, failed)
    if "comment" in call.params:
        data["comment"] = call.params["comment"]
    remove = call.flag("delete")
    for vmid in (int(v) for v in split_list(str(call.params.get("vms", "")), r"[,;\s]")):
        current = cluster.guest_pool.get(vmid)
        if remove:
            if current != poolid:
                raise ApiError(500, f"{failed}VM {vmid} is not a pool member")
            del cluster.guest_pool[vmid]
        elif current == poolid:
            raise ApiError(500, f"{failed}VM {vmid} is already a pool member")
        else:
            if current is not None and not call.flag("allow-move"):
                raise ApiError(500, f"{failed}VM {vmid} belongs already to pool '{current}' and "
                                    f"'allow-move' is not set")
            cluster.guest_pool[vmid] = poolid
    for name in split_list(str(call.params.get("storage", "")), r"[,;\s]"):
        if remove:
            if name not in data["storage"]:
                raise ApiError(500, f"{failed}Storage '{name}' is not a pool member")
            data["storage"].discard(name)
        elif name in data["storage"]:
            raise ApiError(500, f"{failed}Storage '{name}' is already a pool member")
        else:
            data["storage"].add(name)


@route("PUT", "/pools")
def update(call: Call) -> None:
    _update(call, call.params["poolid"])
    return None


@route("PUT", "/pools/{poolid}")
def update_deprecated(call: Call) -> None:
    _update(call, call.params["poolid"])
    return None


def _delete(call: Call, poolid: str) -> None:
    cluster = call.cluster
    data = _pool(call, poolid, "delete pool failed: ")
    for vmid in sorted(v for v, p in cluster.guest_pool.items() if p == poolid):
        if vmid in cluster.guests:
            raise ApiError(500, f"delete pool failed: pool '{poolid}' is not empty (contains VM {vmid})")
    for name in sorted(data["storage"]):
        if name in cluster.storages:
            raise ApiError(500, f"delete pool failed: pool '{poolid}' is not empty (contains "
                                f"storage '{name}')")
    del cluster.pools[poolid]


@route("DELETE", "/pools")
def delete(call: Call) -> None:
    _delete(call, call.params["poolid"])
    return None


@route("DELETE", "/pools/{poolid}")
def delete_deprecated(call: Call) -> None:
    _delete(call, call.params["poolid"])
    return None
