"""``/_sim``: the simulator's control API for tests and demos (JSON in, JSON out).

| method and path                  | body / query                         | does                         |
|----------------------------------|--------------------------------------|------------------------------|
| GET  /_sim/state                 |                                      | time, nodes, counts          |
| GET  /_sim/requests?since=N      |                                      | request log after seq N      |
| DELETE /_sim/requests            |                                      | clear the request log        |
| POST /_sim/reset                 |                                      | back to the scenario's start |
| POST /_sim/clock                 | {"advance": s} or {"factor": f}      | move or rescale the clock    |
| POST /_sim/faults                | {"endpoints": [...], "migrations": [...]} | replace the fault set   |
| DELETE /_sim/faults              |                                      | no faults                    |
| POST /_sim/nodes/<name>          | {"online": bool, "maintenance": bool} | lose/return a node, HA maint |
|                                  | {"power": "off"|"on", "next_wake": s} | power cut/button, next WoL   |
| GET  /_sim/power                 |                                      | shutdowns, wakes, boots      |
| POST /_sim/ceph/osds/<id>        | {"up": bool}                         | an OSD daemon dies or starts |
| POST /_sim/quorum                | {"quorate": bool}                    | lose or regain quorum        |
| POST /_sim/guests/<vmid>         | {"cpu": f, "mem_used": m, "profile": name} | change a guest's load |
| GET  /_sim/guests/<vmid>/files   |                                      | files written by the agent   |

The fault entries have the scenario's form, and ``mem_used`` a size, a fraction of the
guest's memory or a percentage, as in a scenario (docs/simulator.md).
"""

from __future__ import annotations

import json
from typing import Any

from werkzeug.wrappers import Request, Response

from keel.errors import KeelError
from keel.sim import scenario as sc
from keel.sim.cluster import Cluster
from keel.validate import Problems, Reader


def _reply(status: int, body: Any) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


def control(cluster: Cluster, request: Request) -> Response:
    parts = [p for p in request.path.split("/") if p][1:]
    method = request.method.upper()
    body = request.get_json(silent=True) if request.get_data() else {}
    if not isinstance(body, dict):
        return _reply(400, {"error": "the body must be a JSON object"})
    try:
        with cluster.lock:
            cluster.sync()
            return _reply(200, _handle(cluster, method, parts, body, request))
    except KeelError as err:
        return _reply(400, {"error": str(err)})
    except (KeyError, ValueError, TypeError) as err:
        return _reply(400, {"error": f"bad request: {err}"})
    except LookupError as err:
        return _reply(404, {"error": str(err)})


def _handle(cluster: Cluster, method: str, parts: list[str], body: dict[str, Any],
            request: Request) -> Any:
    head = parts[0] if parts else ""
    if method == "GET" and head == "state":
        return _state(cluster)
    if head == "requests":
        if method == "DELETE":
            cluster.requests.clear()
            return {"cleared": True}
        since = int(request.args.get("since", 0))
        return [r for r in cluster.requests if r["seq"] > since]
    if method == "POST" and head == "reset":
        cluster.reset()
        return _state(cluster)
    if method == "POST" and head == "clock":
        if "factor" in body:
            cluster.clock.set_factor(float(body["factor"]))
        if "advance" in body:
            cluster.clock.advance(float(body["advance"]))
        return {"time": cluster.sync(), "factor": cluster.clock.factor}
    if head == "faults":
        if method == "DELETE":
            cluster.endpoint_faults, cluster.migration_faults = [], []
            return {"endpoints": 0, "migrations": 0}
        if method == "POST":
            problems = Problems("faults")
            faults = sc._faults(Reader(body, "", problems), problems)
            problems.raise_if_any()
            cluster.endpoint_faults = faults.endpoints
            cluster.migration_faults = faults.migrations
            if "auth_delay" in body:
                cluster.auth_delay_s = faults.auth_delay_s
            return {"endpoints": len(faults.endpoints), "migrations": len(faults.migrations)}
    if method == "POST" and head == "nodes" and len(parts) == 2:
        name = parts[1]
        if name not in cluster.nodes:
            raise LookupError(f"no node named {name!r}")
        if "online" in body:
            cluster.set_node_online(name, bool(body["online"]))
        if "maintenance" in body:
            cluster.ha.node_maintenance(name, bool(body["maintenance"]))
        if "power" in body:
            if body["power"] not in ("off", "on"):
                raise ValueError(f"power must be \"off\" (a power cut) or \"on\" (the power "
                                 f"button), got {body['power']!r}")
            (cluster.power.cut if body["power"] == "off" else cluster.power.press)(name)
        if "next_wake" in body:
            cluster.power.force_next(name, str(body["next_wake"]))
        cluster.invalidate_usage()
        return {"node": name, "online": cluster.nodes[name].online,
                "maintenance": name in cluster.ha.maintenance, "state": cluster.nodes[name].state}
    if method == "GET" and head == "power":
        return cluster.power.history
    if method == "POST" and head == "ceph" and len(parts) == 3 and parts[1] == "osds":
        if cluster.ceph is None:
            raise LookupError("this scenario has no ceph section")
        cluster.ceph.fail_osd(int(parts[2]), bool(body.get("up", False)))
        return cluster.ceph.state()
    if method == "POST" and head == "quorum":
        if cluster.quorate and not body.get("quorate", True):
            cluster.quorum_losses.append(cluster.t)
        cluster.forced_quorum_loss = not bool(body.get("quorate", True))
        return {"quorate": cluster.quorate}
    if head == "guests" and len(parts) >= 2:
        vmid = int(parts[1])
        guest = cluster.guests.get(vmid)
        if guest is None:
            raise LookupError(f"no guest {vmid}")
        if method == "GET" and parts[2:] == ["files"]:
            return guest.files
        if method == "POST" and len(parts) == 2:
            if "cpu" in body:
                guest.cpu_base = min(1.0, max(0.0, float(body["cpu"])))
            if "mem_used" in body:
                guest.mem_base = sc.mem_used_bytes(body["mem_used"], guest.maxmem)
            if "profile" in body:
                name = body["profile"]
                if name is not None and name not in cluster.scenario.profiles:
                    raise LookupError(f"no profile named {name!r}")
                guest.profile = cluster.scenario.profiles.get(name) if name else None
            cluster.invalidate_usage()
            return {"vmid": vmid, "cpu": guest.cpu_base, "mem_used": guest.mem_base}
    raise LookupError(f"no control endpoint {method} /_sim/{'/'.join(parts)}")


def _state(cluster: Cluster) -> dict[str, Any]:
    return {
        "time": cluster.t, "clock_factor": cluster.clock.factor, "version": cluster.version,
        "quorate": cluster.quorate,
        "nodes": {name: {"online": n.online, "maintenance": name in cluster.ha.maintenance,
                         "guests": sum(1 for g in cluster.guests.values() if g.node == name)}
                  for name, n in sorted(cluster.nodes.items())},
        "guests": len(cluster.guests),
        "running_tasks": sum(1 for t in cluster.tasks.values() if t.running),
        "requests": len(cluster.requests),
        "next_event": cluster.next_event_at(),
        "power": cluster.power.state(),
        "quorum": dict(zip(("votes", "expected"), cluster.votes()),
                       quorum=cluster.votes()[1] // 2 + 1),
        "quorum_losses": list(cluster.quorum_losses),
        "fencing": list(cluster.ha.fenced),
        **({"ceph": cluster.ceph.state()} if cluster.ceph is not None else {}),
    }
