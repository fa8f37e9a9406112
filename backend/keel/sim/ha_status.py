"""The HA status answers: ``/cluster/ha/status/current`` and ``.../manager_status``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from keel.sim.ha_rules import sid_key

if TYPE_CHECKING:
    from keel.sim.cluster import Cluster


class StatusViews:
    """The reporting half of ``HaManager`` (a mixin: it reads the manager's state)."""

    cluster: "Cluster"
    resources: dict[str, dict[str, Any]]
    service: dict[str, dict[str, Any]]
    node_status: dict[str, str]
    maintenance: set[str]
    master: str
    last_round: float

    def manager_status(self) -> dict[str, Any]:
        cluster = self.cluster
        services = {}
        for sid, status in sorted(self.service.items()):
            if self.resources.get(sid, {}).get("state") == "ignored":
                continue
            entry = {k: v for k, v in status.items()}
            guest = cluster.guests.get(int(sid.split(":")[1]))
            entry["running"] = int(guest is not None and guest.status == "running")
            services[sid] = entry
        node_status = {n: self.node_status.get(n, "online") for n in sorted(cluster.nodes)}
        data: dict[str, Any] = {
            "manager_status": {
                "master_node": self.master, "timestamp": int(self.last_round),
                "node_status": node_status, "service_status": services,
            },
            "quorum": {"node": cluster.scenario.local_node, "quorate": int(cluster.quorate)},
            "lrm_status": {
                n: {"mode": "maintenance" if n in self.maintenance else "active",
                    "state": "maintenance" if n in self.maintenance else
                    ("active" if any(s["node"] == n for s in self.service.values())
                     else "wait_for_agent_lock"),
                    "timestamp": int(self.last_round), "results": {}}
                for n, node in sorted(cluster.nodes.items()) if node.online},
        }
        return data

    def status_current(self) -> list[dict[str, Any]]:
        cluster = self.cluster
        local = cluster.scenario.local_node
        stamp = int(self.last_round)
        entries: list[dict[str, Any]] = [
            {"id": "quorum", "type": "quorum", "node": local,
             "status": "OK" if cluster.quorate else "No quorum on node '%s'!" % local,
             "quorate": int(cluster.quorate)}]
        if self.resources:
            entries.append({"id": "master", "type": "master", "node": self.master,
                            "status": f"{self.master} (active, {_ctime(stamp)})", "timestamp": stamp})
        for name, node in sorted(cluster.nodes.items()):
            if not node.online:
                state = "old timestamp - dead?"
            elif name in self.maintenance:
                state = "maintenance mode"
            elif any(s["node"] == name for s in self.service.values()):
                state = "active"
            else:
                state = "idle"
            entries.append({"id": f"lrm:{name}", "type": "lrm", "node": name,
                            "status": f"{name} ({state}, {_ctime(stamp)})", "timestamp": stamp})
        for sid, res in sorted(self.resources.items(), key=lambda kv: sid_key(kv[0])):
            status = self.service.get(sid, {})
            state = status.get("state", "ignored") if res["state"] != "ignored" else "ignored"
            entry = {"id": f"service:{sid}", "type": "service", "sid": sid,
                     "node": status.get("node", ""), "crm_state": state, "state": state,
                     "request_state": res["state"],
                     "status": f"{sid} ({status.get('node', '')}, {state})",
                     "failback": int(res.get("failback", 1)),
                     "max_restart": res.get("max_restart", 1),
                     "max_relocate": res.get("max_relocate", 1)}
            if res.get("comment"):
                entry["comment"] = res["comment"]
            entries.append(entry)
        return entries



def _ctime(stamp: int) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(stamp))
