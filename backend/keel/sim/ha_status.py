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
    lrm_mode: dict[str, str]
    master: str
    last_round: float

    def requested(self, sid: str) -> str: ...

    def unavailable(self) -> set[str]: ...

    def manager_status(self) -> dict[str, Any]:
        cluster = self.cluster
        services = {}
        for sid, status in sorted(self.service.items()):
            if sid in self.resources and self.requested(sid) == "ignored":
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
                n: {"mode": self.lrm_mode.get(n, "active"),
                    "state": "maintenance" if n in self.unavailable() else
                    ("active" if any(s["node"] == n for s in self.service.values())
                     else "wait_for_agent_lock"),
                    "timestamp": int(self.last_round), "results": {}}
                for n, node in sorted(cluster.nodes.items()) if node.online},
        }
        return data

    def status_current(self) -> list[dict[str, Any]]:
        """pve-ha-manager's API2/HA/Status.pm ``status``: quorum, master, fencing, one LRM
        per node, then the services with the verbose state the CLI shows."""
        cluster = self.cluster
        local = cluster.scenario.local_node
        stamp = int(self.last_round)
        entries: list[dict[str, Any]] = [
            {"id": "quorum", "type": "quorum", "node": local,
             "status": "OK" if cluster.quorate else "No quorum on node '%s'!" % local,
             "quorate": int(cluster.quorate)}]
        active = bool(self.resources) and cluster.quorate
        if self.master:
            crs = cluster.crs.get("ha", "basic")
            extra = f" - {crs} load CRS" if crs != "basic" else ""
            state = "active" if active else "idle"
            entries.append({"id": "master", "type": "master", "node": self.master,
                            "status": f"{self.master} ({state}, {_ctime(stamp)}){extra}",
                            "timestamp": stamp})
        armed = "armed" if active else "standby"
        entries.append({"id": "fencing", "type": "fencing", "node": self.master or local,
                        "status": f"{armed} (CRM watchdog {'active' if active else 'standby'})",
                        "armed-state": armed})
        for name, node in sorted(cluster.nodes.items()):
            busy = any(s["node"] == name for s in self.service.values())
            mode = self.lrm_mode.get(name, "active")
            if not node.online:
                state = "maintenance mode" if mode == "maintenance" else "old timestamp - dead?"
                watchdog = "watchdog standby"
            elif mode != "active":                   # maintenance, shutdown or restart
                state, watchdog = f"{mode} mode", "watchdog active"
            elif busy:
                state, watchdog = "active", "watchdog active"
            else:
                state, watchdog = "idle", "watchdog standby"
            entries.append({"id": f"lrm:{name}", "type": "lrm", "node": name,
                            "status": f"{name} ({state}, {watchdog}, {_ctime(stamp)})",
                            "timestamp": stamp})
        for sid, res in sorted(self.resources.items(), key=lambda kv: sid_key(kv[0])):
            status = self.service.get(sid, {})
            request = self.requested(sid)
            entry: dict[str, Any] = {"id": f"service:{sid}", "type": "service", "sid": sid,
                                     "node": status.get("node", "")}
            if request != "ignored":
                entry["crm_state"] = status.get("state")
            entry["state"] = self._verbose_state(sid, request, status)
            entry["status"] = f"{sid} ({entry['node'] or '---'}, {entry['state']})"
            entry["request_state"] = request
            for key in ("group", "max_restart", "max_relocate", "failback", "comment"):
                if res.get(key) not in (None, ""):
                    entry[key] = res[key]
            entry.setdefault("max_restart", 1)
            entry.setdefault("max_relocate", 1)
            entry.setdefault("failback", 1)
            entries.append(entry)
        return entries

    def _verbose_state(self, sid: str, request: str, status: dict[str, Any]) -> str:
        """get_verbose_service_state: what a service is doing, in words."""
        if request == "ignored":
            return "ignored"
        current = status.get("state")
        guest = self.cluster.guests.get(int(sid.split(":")[1]))
        running = guest is not None and guest.status == "running"
        if current in ("request_start", "starting"):
            return "starting"
        if current == "request_stop":
            return "stopping"
        if current == "stopped":
            return {"started": "starting", "disabled": "disabled"}.get(request, "stopped")
        if current == "started":
            if request in ("stopped", "disabled"):
                return "stopping"
            return "started" if running else "starting"
        return current or "queued"


def _ctime(stamp: int) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(stamp))
