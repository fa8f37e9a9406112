"""The simulated hardware of PVE's HA regression tests, replayed round by round.

What ``ha-tester`` keeps in its status directory lives here in memory: node power and
network, the service config and which services each node runs, usage stats, the CRM
command queue, cluster locks (120 s timeout), watchdogs (60 s), the manager and LRM
status, and the log.  ``run()`` is the test loop: every loop each powered node runs its
CRM then its LRM, each iteration taking one time unit; a loop lasts at least 20 units;
every fifth loop applies the next batch of the command list.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from pvesim.case import MiB, Case

LOCK_TIMEOUT = 120
WATCHDOG_TIMEOUT = 60
MAX_SIM_TIME = 10000


@dataclass
class LogLine:
    time: int
    ident: str
    level: str
    msg: str

    def __str__(self) -> str:
        return f"{self.level:<5} {self.time:5d} {self.ident:>12}: {self.msg}"


class Env:
    """What one daemon (a node's CRM or LRM) sees: its clock, the log, locks, quorum."""

    def __init__(self, world: World, node: str, kind: str) -> None:
        self.world, self.node, self.kind = world, node, kind
        self.cur_time = 0

    def get_time(self) -> int:
        return self.cur_time

    def log(self, level: str, msg: str) -> None:
        self.world.log(self.cur_time, f"{self.node}/{self.kind}", level[:4], msg)

    def loop_start_hook(self) -> None:
        self.cur_time = self.world.time

    def loop_end_hook(self) -> None:
        self.cur_time += 1

    def quorate(self) -> bool:
        info, quorate = self.world.node_info()
        return bool(info[self.node]["online"]) and quorate

    def get_lock(self, name: str) -> bool:
        return self.world.sim_lock(self, name, unlock=False)

    def release_lock(self, name: str) -> bool:
        return self.world.sim_lock(self, name, unlock=True)

    def agent_lock_name(self, node: str | None = None) -> str:
        return f"ha_agent_{node or self.node}_lock"


class World:
    def __init__(self, case: Case) -> None:
        self.case = case
        self.time = 0
        self.lines: list[LogLine] = []
        self.hw = {n: dict(d) for n, d in case.hardware.items()}
        self.nodes = sorted(self.hw)
        self.service_config: dict[str, dict[str, Any]] = {}
        for sid, conf in case.services.items():
            self.service_config[sid] = dict(conf)
        self.service_status: dict[str, dict[str, int]] = {n: {} for n in self.nodes}
        self.static_stats = copy.deepcopy(case.static_stats)
        self.dynamic_stats = copy.deepcopy(case.dynamic_stats)
        self.crm_commands: list[str] = []
        self.locks: dict[str, dict[str, Any]] = {}
        self.watchdogs: dict[str, dict[str, Any]] = {}
        self._wd_counter = 0
        self._manager_status = copy.deepcopy(case.manager_status)
        self._lrm_status: dict[str, dict[str, Any]] = {}
        self.lrm_wrote_status_at_startup = False   # one flag for all LRMs, as in PVE's test run
        self.daemons: dict[str, dict[str, Any]] = {
            n: {"crm": None, "lrm": None, "crm_env": Env(self, n, "crm"),
                "lrm_env": Env(self, n, "lrm"), "crm_stop": False, "lrm_restart": False}
            for n in self.nodes}

    # log
    def log(self, time: int, ident: str, level: str, msg: str) -> None:
        self.lines.append(LogLine(time, ident, level, msg))

    def hw_log(self, msg: str, ident: str = "hardware") -> None:
        self.log(self.time, ident, "info", msg)

    # configuration and status files
    def read_service_config(self) -> dict[str, dict[str, Any]]:
        conf = copy.deepcopy(self.service_config)
        for sid, d in conf.items():
            d["type"], d["name"] = sid.split(":", 1)
            state = d.get("state") or "disabled"
            d["state"] = "started" if state == "enabled" else state
            d.setdefault("failback", 1)
            d.setdefault("max_restart", 1)
            d.setdefault("max_relocate", 1)
        return conf

    def change_service_location(self, sid: str, current: str, new: str) -> None:
        conf = self.service_config[sid]
        if conf["node"] != current:
            raise RuntimeError(f"current_node for '{sid}' does not match ({current} != {conf['node']})")
        conf["node"] = new

    def read_manager_status(self) -> dict[str, Any]:
        return copy.deepcopy(self._manager_status)

    def write_manager_status(self, status: dict[str, Any]) -> None:
        self._manager_status = copy.deepcopy(status)

    def read_lrm_status(self, node: str) -> dict[str, Any]:
        return copy.deepcopy(self._lrm_status.get(node, {}))

    def write_lrm_status(self, node: str, status: dict[str, Any]) -> None:
        self._lrm_status[node] = copy.deepcopy(status)

    def datacenter(self) -> dict[str, Any]:
        dc = self.case.datacenter
        return {"ha": dc.get("ha", {}), "crs": dc.get("crs", {})}

    def read_crm_commands(self) -> list[str]:
        cmds, self.crm_commands = self.crm_commands, []
        return cmds

    # cluster membership
    def node_info(self) -> tuple[dict[str, dict[str, int]], bool]:
        online = {n: int(d["power"] == "on" and d["network"] == "on") for n, d in self.hw.items()}
        quorate = sum(online.values()) > len(online) // 2
        if not quorate:
            online = {n: 0 for n in online}
        return {n: {"online": v} for n, v in online.items()}, quorate

    # locks and watchdogs
    def sim_lock(self, env: Env, name: str, unlock: bool) -> bool:
        if not env.quorate():
            return False
        now, held = env.get_time(), self.locks.get(name)
        if unlock:
            if held is None:
                return False
            if now - held["time"] > LOCK_TIMEOUT:
                return True
            if held["node"] == env.node:
                del self.locks[name]
                return True
            return False
        if held is not None and now - held["time"] <= LOCK_TIMEOUT:
            if held["node"] != env.node:
                return False
            held["time"] = now
            return True
        env.log("info", f"got lock '{name}'")
        self.locks[name] = {"node": env.node, "time": now}
        return True

    def watchdog_open(self, node: str) -> str:
        self._wd_counter += 1
        wid = f"WD:{node}:{self._wd_counter}"
        self.watchdogs[wid] = {"node": node, "update_time": self.time}
        return wid

    def watchdog_update(self, wid: str) -> None:
        wd = self.watchdogs[wid]
        if self.time - wd["update_time"] > WATCHDOG_TIMEOUT:
            raise RuntimeError("watchdog expired")
        wd["update_time"] = self.time

    def watchdog_close(self, wid: str) -> None:
        wd = self.watchdogs.pop(wid)
        if self.time - wd["update_time"] > WATCHDOG_TIMEOUT:
            raise RuntimeError("watchdog expired")

    def watchdog_check(self, node: str) -> bool:
        alive = True
        for wid, wd in list(self.watchdogs.items()):
            if wd["node"] == node and self.time - wd["update_time"] > WATCHDOG_TIMEOUT:
                alive = False
                del self.watchdogs[wid]
        return alive

    # usage figures, as the simulator hands them to the CRS
    def cluster_service_stats(self) -> dict[str, dict[str, Any]]:
        conf = self.read_service_config()
        return {sid: {"node": c["node"], "state": c["state"], "running": c["state"] == "started"}
                for sid, c in conf.items()}

    def dynamic_service_usage(self, sid: str) -> dict[str, float]:
        return {**self.static_stats.get(sid, {}), **self.dynamic_stats.get(sid, {})}

    def dynamic_node_stats(self) -> dict[str, dict[str, float]]:
        stats = {n: {"maxcpu": d.get("maxcpu", 24.0), "cpu": 0.0,
                     "maxmem": d.get("maxmem", 131072 * MiB), "mem": 0} for n, d in self.hw.items()}
        for sid, conf in self.service_config.items():
            node = conf["node"]
            if self.service_status.get(node, {}).get(sid):
                usage = self.dynamic_service_usage(sid)
                stats[node]["cpu"] += usage["cpu"]
                stats[node]["mem"] += usage["mem"]
        return stats

    # commands (the cmdlist grammar of PVE's simulator)
    def power(self, node: str, action: str) -> None:
        from pvesim.daemons import CRM, LRM

        d, hw = self.daemons[node], self.hw[node]
        if hw["power"] != action:
            if action == "on":
                d["crm"] = d["crm"] or CRM(d["crm_env"])
                d["lrm"] = d["lrm"] or LRM(d["lrm_env"])
                d["lrm_restart"] = False
            else:
                for kind in ("crm", "lrm"):
                    if d[kind] is not None:
                        d[f"{kind}_env"].log("info", "killed by poweroff")
                        d[kind] = None
                d["lrm_restart"] = False
                for wid in [w for w, wd in self.watchdogs.items() if wd["node"] == node]:
                    del self.watchdogs[wid]
                self.service_status[node] = {}
        hw["power"] = hw["network"] = action
        hw["shutdown"] = None

    def command(self, cmd: str, ident: str = "cmdlist") -> None:
        what, obj, *rest = cmd.split()
        action, params = (rest[0], rest[1:]) if rest else ("", [])
        self.hw_log(f"execute {cmd}", ident)
        if what == "power":
            self.power(obj, action)
        elif what == "network":
            self.hw[obj]["network"] = action
        elif what in ("reboot", "shutdown"):
            self.hw[obj]["shutdown"] = what
            if self.daemons[obj]["lrm"] is not None:
                self.daemons[obj]["lrm"].shutdown_request()
        elif what == "crm" and action == "stop":
            if self.daemons[obj]["crm"] is not None:
                self.daemons[obj]["crm_stop"] = True
                self.daemons[obj]["crm"].shutdown_request()
        elif what == "crm" and action in ("enable-node-maintenance", "disable-node-maintenance"):
            self.crm_commands.append(f"{action} {obj}")
        elif what == "service":
            self._service_command(obj, action, params)
        else:
            raise NotImplementedError(f"command not simulated: {cmd}")

    def _service_command(self, sid: str, action: str, params: list[str]) -> None:
        if action in ("started", "disabled", "stopped", "ignored"):
            self.service_config[sid]["state"] = action
        elif action in ("migrate", "relocate", "stop"):
            self.crm_commands.append(f"{action} {sid} {params[0]}")
        elif action == "add":
            self.service_config[sid] = {"state": params[1] if len(params) > 1 else "started",
                                        "node": params[0]}
            self.service_status[params[0]][sid] = int(params[2]) if len(params) > 2 else 0
        elif action in ("set-static-stats", "set-dynamic-stats"):
            target = self.static_stats if action == "set-static-stats" else self.dynamic_stats
            entry = target.setdefault(sid, {})
            for key, value in zip(params[::2], params[1::2]):
                entry[key] = float(value) * MiB if key in ("mem", "maxmem") else float(value)
        elif action == "delete":
            del self.service_config[sid]
            self.static_stats.pop(sid, None)
        else:
            raise NotImplementedError(f"service action not simulated: {action}")

    # the test loop
    def run(self) -> list[LogLine]:
        self.hw_log("starting simulation")
        cmdlist = [list(batch) for batch in self.case.cmdlist]
        last_command_time = next_cmd_at = loop_count = 0
        skip = {"crm": 0, "lrm": 0}
        while True:
            start = self.time
            looptime = max(20, 2 * len(self.nodes))
            first = True
            for node in self.nodes:
                for kind in ("crm", "lrm"):
                    self._iterate(node, kind, skip, first)
                for other in self.nodes:
                    if not self.watchdog_check(other):
                        self.command(f"power {other} off", "watchdog")
                        self.hw_log(f"server '{other}' stopped by poweroff (watchdog)")
                first = False
            skip = {k: max(0, v - 1) for k, v in skip.items()}
            if self.time - start < looptime:
                self.time = start + looptime
            if self.time > MAX_SIM_TIME:
                raise RuntimeError("simulation exceeded maximum time")
            for node in self.nodes:
                for kind in ("lrm", "crm"):
                    self.daemons[node][f"{kind}_env"].loop_start_hook()
            if self.time < next_cmd_at:
                continue
            if loop_count % 5 == 0:
                batch = cmdlist.pop(0) if cmdlist else None
                if batch is None and self.time - last_command_time > 500:
                    self.hw_log("exit simulation - done")
                    return self.lines
                for cmd in batch or []:
                    last_command_time = self.time
                    if m := re.match(r"^delay\s+(\d+)\s*$", cmd):
                        self.hw_log(f"execute {cmd}", "cmdlist")
                        next_cmd_at = self.time + int(m.group(1))
                    elif m := re.match(r"^skip-round\s+(lrm|crm)(?:\s+(\d+))?\s*$", cmd):
                        self.hw_log(f"execute {cmd}", "cmdlist")
                        skip[m.group(1)] += int(m.group(2) or 1)
                    else:
                        self.command(cmd)
            loop_count += 1

    def _iterate(self, node: str, kind: str, skip: dict[str, int], first: bool) -> None:
        d = self.daemons[node]
        daemon = d[kind]
        if daemon is None:
            return
        if skip[kind]:
            if first:
                self.hw_log(f"skipping {kind.upper()} round", "run-loop")
            return
        keep_going = daemon.do_one_iteration()
        self.time = max(self.time, d[f"{kind}_env"].get_time())
        if keep_going:
            return
        d[f"{kind}_env"].log("info", "exit (loop end)")
        d[kind] = None
        shutdown = self.hw[node].get("shutdown") or ""
        if kind == "crm":
            if shutdown == "reboot":
                self.command(f"power {node} off", "reboot")
                self.command(f"power {node} on", "reboot")
            elif shutdown == "shutdown":
                self.command(f"power {node} off", "shutdown")
            elif not d["crm_stop"]:
                raise RuntimeError("unexpected CRM exit")
            d["crm_stop"] = False
        elif d["lrm_restart"]:
            from pvesim.daemons import LRM

            d["lrm_restart"] = False
            d["lrm"] = LRM(d["lrm_env"])
        elif shutdown in ("reboot", "shutdown"):
            self.command(f"crm {node} stop", shutdown)
        else:
            raise RuntimeError("unexpected LRM exit")
