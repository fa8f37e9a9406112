"""The CRM and LRM daemons of a simulated node, as state machines.

The CRM of every node competes for the manager lock; the one holding it runs the
``Manager`` once per iteration.  The LRM of a node holds that node's agent lock while
it has services, and carries out what the manager's service status asks for: start,
stop, migrate, relocate.  Both keep a watchdog open while they hold their lock; a node
that loses quorum loses its locks and is powered off once its watchdog runs out.
"""

from __future__ import annotations

from typing import Any

from pvesim.manager import ERROR, EWRONG_NODE, IGNORED, SUCCESS, ETRY_AGAIN, Manager
from pvesim.world import Env

CRM_IDLE_ROUNDS = 90
LRM_IDLE_ROUNDS = 60


def count_fenced(ss: dict[str, Any], node: str) -> int:
    return sum(1 for sd in ss.values() if sd.get("node") == node and sd.get("state") == "fence")


def count_active(ss: dict[str, Any], node: str) -> int:
    count = 0
    for sd in ss.values():
        if sd.get("node") != node and sd.get("target") != node:
            continue
        if sd.get("state") in (None, "stopped", "freeze", "error", "request_start"):
            continue
        count += 1
    return count


class Daemon:
    def __init__(self, env: Env, initial: str) -> None:
        self.env = env
        self.state = "startup"
        self.shutdown_requested = False
        self.wd: str | None = None
        self.idle_rounds = 0
        self.set_state(initial)

    def set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.env.log("info", f"status change {self.state} => {state}")
        self.state = state
        self.state_change_time = self.env.get_time()

    def protected_lock(self, name: str) -> bool:
        if not self.env.get_lock(name):
            return False
        if self.wd is not None:
            self.env.world.watchdog_update(self.wd)
        else:
            self.wd = self.env.world.watchdog_open(self.env.node)
        return True

    def give_up_watchdog(self) -> None:
        if self.wd is not None:
            self.env.world.watchdog_close(self.wd)
            self.wd = None

    def do_one_iteration(self) -> bool:
        self.env.loop_start_hook()
        result = self.work()
        self.env.loop_end_hook()
        return result

    def work(self) -> bool:
        raise NotImplementedError


class CRM(Daemon):
    LOCK = "ha_manager_lock"

    def __init__(self, env: Env) -> None:
        self.manager: Manager | None = None
        super().__init__(env, "wait_for_quorum")

    def set_state(self, state: str) -> None:
        if state == self.state:
            return
        super().set_state(state)
        self.manager = Manager(self.env) if state == "master" else None

    def shutdown_request(self) -> None:
        if not self.shutdown_requested:
            self.env.log("info", "server received shutdown request")
        self.shutdown_requested = True

    def healthy(self, ms: dict[str, Any]) -> bool:
        return self.env.quorate() and not count_fenced(ms.get("service_status", {}), self.env.node)

    def can_get_active(self, allow_no_service: bool = False) -> bool:
        world = self.env.world
        ms = world.read_manager_status()
        if not self.healthy(ms):
            return False
        if allow_no_service or world.read_service_config():
            return True
        master = ms.get("master_node")
        node_status = ms.get("node_status", {})
        if not master or node_status.get(master) != "online" or master == self.env.node:
            requests = ms.get("node_request") or {}
            for node, state in node_status.items():
                if state == "maintenance" and not (requests.get(node) or {}).get("maintenance"):
                    return True
            if world.crm_commands or ms.get("service_status") or ms.get("disarm"):
                return True
        return False

    def allowed_to_get_idle(self) -> bool:
        world = self.env.world
        ms = world.read_manager_status()
        if not self.healthy(ms) or ms.get("disarm"):
            return False
        return not world.read_service_config() and not ms.get("service_status")

    def work(self) -> bool:
        if self.state == "wait_for_quorum":
            if self.can_get_active():
                self.set_state("master" if self.protected_lock(self.LOCK) else "slave")
        elif self.state == "slave":
            if self.can_get_active():
                if self.protected_lock(self.LOCK):
                    self.set_state("master")
            else:
                self.set_state("wait_for_quorum")
        elif self.state == "lost_manager_lock":
            if self.can_get_active(True) and self.protected_lock(self.LOCK):
                self.set_state("master")
        elif self.state == "master":
            if not self.protected_lock(self.LOCK):
                self.set_state("lost_manager_lock")
            elif self.allowed_to_get_idle():
                self.idle_rounds += 1
                if self.idle_rounds > CRM_IDLE_ROUNDS:
                    self.idle_rounds = 0
                    self.env.release_lock(self.LOCK)
                    self.give_up_watchdog()
                    self.set_state("wait_for_quorum")
            else:
                self.idle_rounds = 0

        if self.state in ("wait_for_quorum", "slave"):
            return not self.shutdown_requested
        if self.state == "lost_manager_lock":
            self.give_up_watchdog()
            if self.shutdown_requested:
                return False
            self.set_state("wait_for_quorum")
            return True
        # master
        if self.shutdown_requested:
            self.give_up_watchdog()
            self.env.log("info", "voluntary release CRM lock")
            if not self.env.release_lock(self.LOCK):
                self.env.log("notice", "CRM lock release failed, let the lock timeout")
            return False
        assert self.manager is not None
        self.manager.manage()
        return True


class LRM(Daemon):
    def __init__(self, env: Env) -> None:
        self.mode = "active"
        self.results: dict[str, dict[str, Any]] = {}
        self.workers: dict[str, dict[str, Any]] = {}
        self.restart_tries: dict[str, int] = {}
        self.service_status: dict[str, Any] = {}
        self.node_status = "unknown"
        self.shutdown_errors = 0
        super().__init__(env, "wait_for_agent_lock")

    @property
    def lock(self) -> str:
        return self.env.agent_lock_name()

    def shutdown_request(self) -> None:
        if self.shutdown_requested:
            return
        world = self.env.world
        target = world.hw[self.env.node].get("shutdown")
        shutdown, reboot = target in ("shutdown", "reboot"), target == "reboot"
        policy = world.datacenter()["ha"].get("shutdown_policy", "conditional")
        if shutdown:
            self.env.log("info", f"got shutdown request with shutdown policy '{policy}'")
        maintenance = policy == "migrate"
        freeze_all = {"freeze": True, "failover": False}.get(policy, reboot)
        if not maintenance and shutdown:
            for sid, sd in self.service_status.items():
                if sd.get("node") == self.env.node:
                    self.queue(sid, None, "request_stop")
        kind = "reboot" if reboot else "shutdown"
        if shutdown:
            if self.mode == "maintenance":
                self.env.log("info", f"{kind} LRM, ignore maintenance policy, already in maintenance mode")
            elif maintenance:
                self.env.log("info", f"{kind} LRM, doing maintenance, removing this node from active list")
                self.mode = "maintenance"
            elif freeze_all:
                self.env.log("info", f"{kind} LRM, stop and freeze all services")
                self.mode = "restart"
            else:
                self.env.log("info", "shutdown LRM, stop all services")
                self.mode = "shutdown"
        else:
            self.env.log("info", "restart LRM, freeze all services")
            self.mode = "restart"
        self.shutdown_requested = True
        if not self.update_lrm_status():
            self.env.log("err", "unable to update lrm status file - not quorate?")

    def update_lrm_status(self) -> bool:
        if not self.env.quorate():
            return False
        self.env.world.write_lrm_status(self.env.node, {
            "state": self.state, "mode": self.mode, "results": self.results,
            "timestamp": self.env.get_time()})
        return True

    def update_service_status(self) -> None:
        ms = self.env.world.read_manager_status()
        self.service_status = ms.get("service_status") or {}
        self.node_status = (ms.get("node_status") or {}).get(self.env.node, "unknown")
        if not self.shutdown_requested:
            request = (ms.get("node_request") or {}).get(self.env.node) or {}
            if request.get("maintenance"):
                self.mode = "maintenance"
            elif ms.get("disarm"):
                self.mode = "disarm"
            elif self.mode in ("maintenance", "disarm"):
                self.mode = "active"

    def active_count(self) -> int:
        return count_active(self.service_status, self.env.node)

    def work(self) -> bool:
        world, env = self.env.world, self.env
        if not world.lrm_wrote_status_at_startup:
            if self.update_lrm_status():
                world.lrm_wrote_status_at_startup = True
            else:
                return not self.shutdown_requested
        self.update_service_status()
        fence = count_fenced(self.service_status, env.node) or self.node_status == "fence"
        if self.state == "wait_for_agent_lock":
            if self.mode != "disarm" and not fence and self.active_count() and env.quorate():
                if self.protected_lock(self.lock):
                    self.set_state("active")
        elif self.state == "lost_agent_lock":
            if not fence and env.quorate() and self.protected_lock(self.lock):
                self.set_state("active")
        elif self.state == "active":
            if fence:
                env.log("err", "node needs to be fenced - releasing agent_lock")
                self.set_state("lost_agent_lock")
            elif not self.protected_lock(self.lock):
                self.set_state("lost_agent_lock")
            elif self.mode == "maintenance":
                self.set_state("maintenance")
            elif not any(sd.get("node") == env.node for sd in self.service_status.values()) \
                    and not self.run_workers():
                self.idle_rounds += 1
                if self.idle_rounds > LRM_IDLE_ROUNDS:
                    env.log("info", f"node had no service configured for {LRM_IDLE_ROUNDS} rounds, going idle.")
                    env.release_lock(self.lock)
                    self.give_up_watchdog()
                    self.set_state("wait_for_agent_lock")
                    self.idle_rounds = 0
            else:
                self.idle_rounds = 0
        elif self.state == "maintenance":
            if fence:
                env.log("err", "node needs to be fenced during maintenance mode - releasing agent_lock")
                self.set_state("lost_agent_lock")
            elif self.active_count() or self.run_workers():
                if not self.protected_lock(self.lock):
                    self.set_state("lost_agent_lock")
            elif self.mode != "maintenance":
                self.set_state("active" if self.protected_lock(self.lock) else "lost_agent_lock")

        if self.state == "wait_for_agent_lock":
            if self.shutdown_requested:
                return False
            self.update_lrm_status()
            return True
        if self.state == "active":
            return self._work_active()
        if self.state == "lost_agent_lock":
            if self.shutdown_requested:
                if self.active_count() > 0:
                    env.log("err", "got shutdown request in state 'lost_agent_lock' - detected "
                                   f"{self.active_count()} running services")
                else:
                    self.give_up_watchdog()
                    return False
            return True
        # maintenance
        self.update_service_status()
        exit_lrm = False
        if self.active_count() == 0 and self.run_workers() == 0:
            self.give_up_watchdog()
            exit_lrm = self.shutdown_requested
            env.release_lock(self.lock)
        if not exit_lrm:
            self.manage_resources()
        self.update_lrm_status()
        return not exit_lrm

    def _work_active(self) -> bool:
        shutdown = False
        self.update_service_status()
        if self.shutdown_requested:
            if self.mode == "restart":
                workers = self.run_workers()
                if self.active_count() == 0 and workers == 0:
                    self.give_up_watchdog()
                    shutdown = True
                    self.env.release_lock(self.lock)
            elif self.run_workers() == 0:
                if self.shutdown_errors == 0:
                    self.give_up_watchdog()
                    self.env.release_lock(self.lock)
                shutdown = True
        else:
            self.manage_resources()
        self.update_lrm_status()
        return not shutdown

    # carrying out the manager's requests
    def queue(self, sid: str, uid: str | None, state: str, params: dict[str, Any] | None = None) -> None:
        if state != "stopped" and uid and uid in self.results:
            return
        self.workers[sid] = {"sid": sid, "uid": uid, "state": state, "params": params or {}}

    def manage_resources(self) -> int:
        for sid in list(self.restart_tries):
            if sid not in self.service_status:
                del self.restart_tries[sid]
        for sid, sd in self.service_status.items():
            if sd.get("node") != self.env.node or not sd.get("uid"):
                continue
            state = sd.get("state")
            if state in (None, "recovery", "freeze", "request_start"):
                continue
            self.queue(sid, sd["uid"], state, {"target": sd.get("target"), "timeout": sd.get("timeout")})
        return self.run_workers()

    def run_workers(self) -> int:
        from pvesim.resources import exec_resource_agent

        conf = self.env.world.read_service_config()
        for sid in sorted(self.workers):
            w = self.workers.pop(sid)
            code = exec_resource_agent(self.env, sid, conf.get(sid), w["state"], w["params"])
            if w["uid"] is None:
                if code != SUCCESS:
                    self.shutdown_errors += 1
                continue
            code = self._handle_exit_code(sid, w["state"], code, conf)
            if code == ETRY_AGAIN:
                continue
            self.results[w["uid"]] = {"sid": sid, "state": w["state"], "exit_code": code}
            valid = {sd.get("uid") for sd in self.service_status.values() if sd.get("uid")}
            self.results = {uid: r for uid, r in self.results.items() if uid in valid}
        return len(self.workers)

    def _handle_exit_code(self, sid: str, cmd: str, code: int, conf: dict[str, Any]) -> int:
        if cmd != "started":
            return code
        if code == SUCCESS:
            self.restart_tries[sid] = 0
        elif code == ERROR:
            max_restart = conf.get(sid, {}).get("max_restart", 0)
            tries = self.restart_tries.setdefault(sid, 0)
            if tries >= max_restart:
                self.env.log("err", f"unable to start service {sid} on local node after {tries} retries")
                self.restart_tries[sid] = 0
                return ERROR
            self.restart_tries[sid] = tries + 1
            self.env.log("warning", f"restart policy: retry number {tries + 1} for service '{sid}'")
            return ETRY_AGAIN
        return code


__all__ = ["CRM", "LRM", "EWRONG_NODE", "IGNORED"]
