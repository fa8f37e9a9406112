"""The manager's view of node states: online, maintenance, unknown, fence, gone."""

from __future__ import annotations

from typing import Any

from pvesim.world import Env

FENCE_DELAY = 60


class NodeStatus:
    def __init__(self, env: Env, status: dict[str, str]) -> None:
        self.env = env
        self.status = dict(status)
        self.last_online: dict[str, int] = {}

    def get(self, node: str) -> str:
        return self.status.get(node, "unknown")

    def is_online(self, node: str | None) -> bool:
        return node is not None and self.get(node) == "online"

    def is_operational(self, node: str) -> bool:
        return self.is_online(node) or self.get(node) == "maintenance"

    def offline_delayed(self, node: str, delay: int = FENCE_DELAY) -> bool:
        if self.get(node) == "online":
            return False
        now = self.env.get_time()
        if node not in self.last_online:
            self.last_online[node] = now
            return False
        return now - self.last_online[node] >= delay

    def list_nodes(self) -> list[str]:
        return sorted(self.status)

    def online_nodes(self) -> list[str]:
        return [n for n in sorted(self.status) if self.status[n] == "online"]

    def changed_nodelist(self, node_info: dict[str, Any]) -> bool:
        return set(node_info) != set(self.status)

    def _set(self, node: str, state: str) -> None:
        last = self.get(node)
        if state == last:
            return
        self.status[node] = state
        self.env.log("info", f"node '{node}': state changed from '{last}' => '{state}'")

    def update(self, node_info: dict[str, dict[str, int]], lrm_modes: dict[str, str]) -> None:
        for node in sorted(node_info):
            if not node_info[node]["online"]:
                continue
            mode = lrm_modes.get(node, "unknown")
            self.last_online[node] = self.env.get_time()
            state = self.get(node)
            if state == "online":
                if mode == "maintenance":
                    self._set(node, "maintenance")
            elif state in ("unknown", "gone"):
                self._set(node, "online")
            elif state == "maintenance" and mode != "maintenance":
                self._set(node, "online")
        for node in sorted(self.status):
            info = node_info.get(node)
            if info and info["online"]:
                continue
            state = self.get(node)
            if state == "online":
                self._set(node, "unknown")
            elif state == "maintenance":
                if lrm_modes.get(node, "unknown") != "maintenance":
                    self._set(node, "unknown")
            elif state == "unknown" and info is None:
                self._set(node, "gone")
            elif state == "gone" and self.offline_delayed(node, 3600):
                del self.status[node]
                self.last_online.pop(node, None)

    def fence(self, node: str) -> bool:
        if self.get(node) != "fence":
            self._set(node, "fence")
            self.env.log("emai", f"FENCE: Try to fence node '{node}'")
        if not self.env.get_lock(self.env.agent_lock_name(node)):
            return False
        msg = f"fencing: acknowledged - got agent lock for node '{node}'"
        self.env.log("info", msg)
        self._set(node, "unknown")
        self.env.log("emai", f"SUCCEED: {msg}")
        return True
