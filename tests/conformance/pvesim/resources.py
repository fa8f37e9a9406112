"""The simulated guests: starting, stopping and moving them takes no time and never fails.

A node's ``service_status`` holds which guests run there; a live migration moves the
guest's config to the target and leaves it running nowhere until the target's LRM
starts it (as PVE's simulator does); a relocation stops it first.
"""

from __future__ import annotations

from typing import Any

from pvesim.manager import EINVALID_PARAMETER, ERROR, EWRONG_NODE, IGNORED, SUCCESS
from pvesim.world import Env

EUNKNOWN_SERVICE = 7
EUNKNOWN_COMMAND = 4


def _running(env: Env, sid: str) -> bool:
    return bool(env.world.service_status[env.node].get(sid))


def _set_running(env: Env, sid: str, value: int) -> None:
    env.world.service_status[env.node][sid] = value


def _migrate(env: Env, sid: str, target: str, online: bool) -> bool:
    cmd = "migrate" if online else "relocate"
    env.log("info", f"service {sid} - start {cmd} to node '{target}'")
    if not online and _running(env, sid):
        env.log("info", f"stopping service {sid} (relocate)")
        _set_running(env, sid, 0)
        env.log("info", f"service status {sid} stopped")
    env.world.change_service_location(sid, env.node, target)
    env.log("info", f"service {sid} - end {cmd} to node '{target}'")
    env.world.service_status[env.node].pop(sid, None)
    return True


def exec_resource_agent(env: Env, sid: str, conf: dict[str, Any] | None, cmd: str,
                        params: dict[str, Any]) -> int:
    if conf is None:
        env.log("err", f"missing resource configuration for '{sid}'")
        return EUNKNOWN_SERVICE
    if cmd == "error":
        env.log("err", f"service {sid} is in an error state and needs manual intervention. "
                       "Look up 'ERROR RECOVERY' in the documentation.")
        return SUCCESS
    if conf["node"] != env.node:
        env.log("err", f"service '{sid}' not on this node")
        return EWRONG_NODE
    running = _running(env, sid)
    if cmd == "started":
        if running:
            return SUCCESS
        env.log("info", f"starting service {sid}")
        _set_running(env, sid, 1)
        env.log("info", f"service status {sid} started")
        return SUCCESS
    if cmd in ("request_stop", "stopped"):
        if not running:
            return SUCCESS
        timeout = params.get("timeout")
        env.log("info", f"stopping service {sid}" + (f" (timeout={timeout})" if timeout is not None else ""))
        _set_running(env, sid, 0)
        env.log("info", f"service status {sid} stopped")
        return SUCCESS
    if cmd in ("migrate", "relocate", "request_start_balance"):
        target = params.get("target")
        if target is None:
            return EINVALID_PARAMETER
        if conf["node"] == target:
            return SUCCESS
        if cmd == "request_start_balance" and running:
            env.log("info", f"ignoring rebalance-on-start for service {sid} - already running")
            return IGNORED
        return SUCCESS if _migrate(env, sid, target, cmd == "migrate") else ERROR
    env.log("err", f"implement me (cmd '{cmd}')")
    return EUNKNOWN_COMMAND
