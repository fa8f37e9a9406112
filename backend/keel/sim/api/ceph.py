"""Ceph as PVE's API shows it: ``/cluster/ceph/status`` and ``flags`` (answered by the
node the API runs on), ``/nodes/{node}/ceph/status``, ``osd`` and ``pool`` (pve-manager's
API2/Cluster/Ceph.pm, API2/Ceph.pm, API2/Ceph/OSD.pm and API2/Ceph/Pool.pm)."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.ceph import FLAG_TEXT, NOT_INSTALLED, CephCluster
from keel.sim.errors import ApiError

SET_FLAGS_S = 0.5


def _ceph(call: Call, node: str | None = None) -> CephCluster:
    """The Ceph cluster, as seen from ``node`` (default: the node the API runs on)."""
    ceph = call.cluster.ceph
    if ceph is None:
        raise ApiError(500, NOT_INSTALLED)
    ceph.check(node or call.cluster.scenario.local_node)
    return ceph


@route("GET", "/cluster/ceph")
def index(call: Call) -> list[dict[str, str]]:
    return [{"name": n} for n in ("flags", "metadata", "status")]


@route("GET", "/cluster/ceph/status")
def cluster_status(call: Call) -> dict[str, Any]:
    return _ceph(call).status()


@route("GET", "/cluster/ceph/flags")
def get_all_flags(call: Call) -> list[dict[str, Any]]:
    ceph = _ceph(call)
    return [{"name": name, "description": text, "value": int(name in ceph.flags)}
            for name, text in sorted(FLAG_TEXT.items())]


@route("PUT", "/cluster/ceph/flags")
def set_flags(call: Call) -> str:
    """A ``cephsetflags`` task that sets or unsets each flag given (one that is already so
    is left alone)."""
    ceph = _ceph(call)
    cluster = call.cluster
    changes = {k: bool(v) for k, v in sorted(call.params.items()) if k in FLAG_TEXT}
    lines = [f"{'set' if v else 'unset'} {k}" for k, v in changes.items()
             if v != (k in ceph.flags)]

    def done() -> None:
        for flag, value in changes.items():
            if value != (flag in ceph.flags):
                ceph.set_flag(flag, value)
    task = cluster.quick_task(cluster.scenario.local_node, "cephsetflags", "", call.user,
                              SET_FLAGS_S, lines, lambda: done())
    return task.upid


@route("GET", "/cluster/ceph/flags/{flag}")
def get_flag(call: Call) -> int:
    return int(call.params["flag"] in _ceph(call).flags)


@route("PUT", "/cluster/ceph/flags/{flag}")
def update_flag(call: Call) -> None:
    _ceph(call).set_flag(call.params["flag"], bool(call.params["value"]))
    return None


@route("GET", "/nodes/{node}/ceph")
def node_index(call: Call) -> list[dict[str, str]]:
    call.cluster.node(call.params["node"])
    return [{"name": n} for n in ("cfg", "cmd-safety", "crush", "fs", "init", "log", "mds", "mgr",
                                  "mon", "osd", "pool", "restart", "rules", "start", "status", "stop")]


@route("GET", "/nodes/{node}/ceph/status")
def node_status(call: Call) -> dict[str, Any]:
    return _ceph(call, call.params["node"]).status()


@route("GET", "/nodes/{node}/ceph/osd")
def osd_tree(call: Call) -> dict[str, Any]:
    return _ceph(call, call.params["node"]).osd_tree()


@route("GET", "/nodes/{node}/ceph/pool")
def pools(call: Call) -> list[dict[str, Any]]:
    return _ceph(call, call.params["node"]).pool_list()
