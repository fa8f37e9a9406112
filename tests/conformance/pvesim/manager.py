"""The HA manager's round (what the master CRM does each iteration), driving Keel's CRS.

Each round: refresh node states from membership and LRM modes, add and drop services,
rebuild the node usage (static: configured sizes; dynamic: the nodes' measured usage),
compile the rules, read queued commands, run the auto-rebalancer, then move every
service through its state machine (request_start, started, migrate/relocate, stopped,
request_stop, fence, recovery, error) until nothing changes.  Placement and
rebalancing decisions come from ``keel.balance.pvecrs*``; the rest is bookkeeping
that decides *when* those decisions happen.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from keel.balance.pvecrs import AutoRebalancer, RebalanceSettings, ResourceStats, score_nodes_to_start
from keel.balance.pvecrs_rules import (HaResourceState, compile_rules, migration_bundles,
                                       motion_in_progress, select_service_node)
from keel.balance.pvecrs_usage import ClusterUsage
from pvesim.nodestatus import NodeStatus
from pvesim.world import Env

SUCCESS, ERROR, ETRY_AGAIN, EWRONG_NODE, EINVALID_PARAMETER, IGNORED = 0, 1, 2, 3, 5, 8
_uids = itertools.count(1)


class Manager:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.world = env.world
        old = self.world.read_manager_status()
        self.ns = NodeStatus(env, old.get("node_status") or {})
        self.ss: dict[str, dict[str, Any]] = old.get("service_status") or {}
        self.ms: dict[str, Any] = {"master_node": env.node}
        if "node_request" in old:
            self.ms["node_request"] = old["node_request"]
        self.mode: str | None = None
        self.rebalancer = AutoRebalancer()
        self.rules = None
        self.usage: ClusterUsage | None = None
        self.update_crs()

    def log(self, msg: str, level: str = "info") -> None:
        self.env.log(level, msg)

    # configuration
    def update_crs(self) -> None:
        crs = self.world.datacenter()["crs"]
        self.rebalance_on_start = bool(crs.get("ha-rebalance-on-start"))
        self.auto_rebalance = bool(crs.get("ha-auto-rebalance"))
        settings = RebalanceSettings(
            threshold=float(crs.get("ha-auto-rebalance-threshold", 0.3)),
            hold_duration=int(crs.get("ha-auto-rebalance-hold-duration", 3)),
            margin=float(crs.get("ha-auto-rebalance-margin", 0.1)),
            method=crs.get("ha-auto-rebalance-method", "bruteforce"), normalised=False)
        self.rebalancer.settings = self.rebalancer.gate.settings = settings
        mode = crs.get("ha") or "basic"
        if mode not in ("static", "dynamic"):
            raise NotImplementedError(f"scheduler mode {mode!r} is not replayed")
        if self.mode is None:
            self.log(f"using scheduler mode '{mode}'")
        elif mode != self.mode:
            self.log(f"switching scheduler mode from '{self.mode}' to '{mode}'")
        self.mode = mode

    # usage
    def service_stats(self, sid: str) -> ResourceStats | None:
        if self.mode == "static":
            s = self.world.static_stats.get(sid)
            return None if s is None else ResourceStats.configured(s["maxcpu"], s["maxmem"])
        u = self.world.dynamic_service_usage(sid)
        if not all(k in u for k in ("cpu", "maxcpu", "mem", "maxmem")):
            return None
        return ResourceStats(u["cpu"], u["maxcpu"], u["mem"], u["maxmem"])

    def add_usage(self, sid: str, sd: dict[str, Any]) -> None:
        stats = self.service_stats(sid)
        if stats is None:
            self.log(f"unable to add service '{sid}'", "warning")
            return
        assert self.usage is not None
        self.usage.add_ha_resource(sid, stats, sd["state"], sd.get("node"), sd.get("target"),
                                   bool(sd.get("running")))

    def recompute_usage(self) -> None:
        usage = ClusterUsage(self.mode or "static")
        dynamic = self.world.dynamic_node_stats() if self.mode == "dynamic" else {}
        for node in self.ns.online_nodes():
            hw = self.world.hw[node]
            if self.mode == "dynamic":
                d = dynamic[node]
                usage.add_node(node, d["maxcpu"], d["maxmem"], d["cpu"], d["mem"])
            else:
                usage.add_node(node, hw["maxcpu"], hw["maxmem"])
        self.usage = usage
        for sid in sorted(self.ss):
            self.add_usage(sid, self.ss[sid])
        for sid, sd in sorted(self.world.cluster_service_stats().items()):
            if sid not in self.ss:
                self.add_usage(sid, sd)

    def scores(self, sid: str) -> dict[str, float]:
        stats = self.service_stats(sid)
        assert self.usage is not None
        return {} if stats is None else score_nodes_to_start(self.usage.start_nodes(), stats)

    def states(self) -> dict[str, HaResourceState]:
        return {sid: HaResourceState(sid, sd["state"], sd.get("node"), sd.get("target"),
                                     (sd.get("cmd") or [None])[0], tuple(sd.get("failed_nodes") or ()),
                                     sd.get("maintenance_node"))
                for sid, sd in self.ss.items()}

    def select_node(self, sid: str, cd: dict[str, Any], preference: str) -> str | None:
        assert self.usage is not None
        return select_service_node(self.rules, sid, self.states(), self.usage.node_names(),
                                   lambda: self.scores(sid), failback=bool(cd.get("failback", 1)),
                                   preference=preference)

    def change_state(self, sid: str, new: str, **params: Any) -> None:
        sd = self.ss[sid]
        old = sd["state"]
        assert old != new, "no state change"
        keep = {k: sd[k] for k in ("failed_nodes", "maintenance_node") if sd.get(k) is not None}
        node = sd.get("node")
        sd.clear()
        sd.update(state=new, node=node, **keep)
        sd.update(params)
        assert self.usage is not None
        self.usage.remove_resource(sid)
        self.add_usage(sid, sd)
        sd["uid"] = f"uid-{next(_uids)}"
        text = ", ".join(f"{k} = {params[k]}" for k in sorted(params))
        self.log(f"service '{sid}': state changed from '{old}' to '{new}'" + (f"  ({text})" if text else ""))

    # commands
    def queue_motion(self, cmd: str, task: str, sid: str, target: str) -> None:
        assert self.rules is not None
        for other in sorted(self.rules.negative.get(sid, ())):
            sd = self.ss.get(other)
            if sd is None or sd["state"] == "ignored":
                continue
            if (sd.get("node") and sd["node"] != target) or (sd.get("target") and sd["target"] != target):
                continue
            self.log(f"crm command '{cmd}' error - service '{other}' on node '{target}' in negative "
                     f"affinity with service '{sid}'", "err")
            return
        self.log(f"got crm command: {cmd}")
        self.ss[sid]["cmd"] = [task, target]
        for other in sorted(self.rules.positive.get(sid, ())):
            sd = self.ss.get(other)
            if sd is None or sd["state"] == "ignored":
                continue
            if sd.get("node") == target or sd.get("target") == target:
                continue
            self.log(f"crm command '{cmd}' - {task} service '{other}' to node '{target}' "
                     f"(service '{other}' in positive affinity with service '{sid}')")
            sd["cmd"] = [task, target]

    def update_crm_commands(self) -> None:
        for cmd in self.world.read_crm_commands():
            parts = cmd.split()
            if parts[0] in ("migrate", "relocate") and len(parts) == 3:
                task, sid, node = parts
                if sid not in self.ss:
                    self.log(f"crm command error - no such service: {cmd}", "err")
                elif not self.ns.is_online(node):
                    self.log(f"crm command error - node not online: {cmd}", "err")
                elif node == self.ss[sid]["node"]:
                    self.log(f"ignore crm command - service already on target node: {cmd}")
                else:
                    self.queue_motion(cmd, task, sid, node)
            elif parts[0] == "stop" and len(parts) == 3:
                if parts[1] in self.ss:
                    self.log(f"got crm command: {cmd}")
                    self.ss[parts[1]]["cmd"] = ["stop", parts[2]]
                else:
                    self.log(f"crm command error - no such service: {cmd}", "err")
            elif parts[0] == "enable-node-maintenance":
                state = self.ns.get(parts[1])
                if state == "online":
                    self.ms.setdefault("node_request", {}).setdefault(parts[1], {})["maintenance"] = 1
                elif state == "maintenance":
                    self.log(f"ignoring crm command - node {parts[1]} is already in maintenance state")
                else:
                    self.log(f"crm command error - node not online: {cmd}", "err")
            elif parts[0] == "disable-node-maintenance":
                if self.ns.get(parts[1]) != "maintenance":
                    self.log(f"clearing maintenance of node {parts[1]} requested, but it's in state "
                             f"{self.ns.get(parts[1])}", "warn")
                self.ms.setdefault("node_request", {}).setdefault(parts[1], {}).pop("maintenance", None)
            else:
                self.log(f"unable to parse crm command: {cmd}", "err")

    def load_balance(self) -> None:
        if not self.auto_rebalance or self.mode not in ("static", "dynamic"):
            return
        assert self.usage is not None and self.rules is not None
        states = self.states()
        usage, rules = self.usage, self.rules

        def candidates():
            bundles = migration_bundles(states, rules, usage.node_names())
            try:
                return usage.candidates((b.leader, b.resources, b.targets) for b in bundles)
            except ValueError as err:
                self.log(f"unable to score best balancing migration - {err}", "warning")
                return []

        decision = self.rebalancer.round(usage.balance_nodes(), candidates,
                                         busy=motion_in_progress(states))
        if decision is None:
            return
        self.log(decision.message())
        m = decision.migration
        self.queue_motion(f"{decision.command} {m.sid} {m.target}", decision.command, m.sid, m.target)

    # the round
    def manage(self) -> None:
        node_info, _ = self.world.node_info()
        changed_nodes = self.ns.changed_nodelist(node_info)
        results, modes = {}, {}
        for node in self.ns.list_nodes():
            lrm = self.world.read_lrm_status(node)
            modes[node] = lrm.get("mode") or "active"
            for uid, res in (lrm.get("results") or {}).items():
                results.setdefault(uid, res)
        self.ns.update(node_info, modes)
        if not self.ns.is_operational(self.env.node):
            self.log("master seems offline")
            return
        self.update_crs()
        sc = self.world.read_service_config()
        for sid in sorted(sc):
            cd = sc[sid]
            if sid in self.ss or cd["state"] == "ignored":
                continue
            self.log(f"adding new service '{sid}' on node '{cd['node']}'")
            self.ss[sid] = {"state": "request_start" if cd["state"] == "started" else "request_stop",
                            "node": cd["node"], "uid": f"uid-{next(_uids)}"}
        for sid in list(self.ss):
            if sid in sc and sc[sid]["state"] != "ignored":
                continue
            reason = "ignored state requested" if sid in sc else "no config"
            self.log(f"removing stale service '{sid}' ({reason})")
            del self.ss[sid]
        self.recompute_usage()
        if self.rules is None or changed_nodes:
            self.rules = compile_rules(self.world.case.rules, self.ns.list_nodes())
            for rule, why in self.rules.dropped:
                self.log(f"Drop rule '{rule}', because {why}.")
        self.update_crm_commands()
        self.load_balance()
        from pvesim.transitions import run_state_machine

        run_state_machine(self, sc, results, modes)
        self.ms.update(node_status=copy.deepcopy(self.ns.status), service_status=self.ss,
                       timestamp=self.env.get_time())
        self.world.write_manager_status(self.ms)
