"""The HA stack in miniature: resources, rules (PVE 9) or groups (PVE 8), and a CRM that
works in rounds every 10 s of simulated time.

What it does, as pve-ha-manager does: queued ``migrate``/``relocate`` commands become
real migrations started by the LRM on the source node (``qmigrate`` as root@pam);
requested states are enforced (start/stop); services leave a node in maintenance and
come back afterwards; services follow their node-affinity (failback) and positive
resource-affinity partners move along; services of a lost node are fenced and
recovered elsewhere.  Proxmox's own auto-rebalancer is not emulated.
"""

from __future__ import annotations

import hashlib
from typing import Any

from keel.sim import migrate, ops, scenario as sc
from keel.sim.cluster import Cluster
from keel.sim.errors import ApiError
from keel.sim.guests import SimGuest
from keel.sim.ha_rules import Placement, normalise_sid, parse_nodes, rule_entry, sid_key
from keel.sim.ha_status import StatusViews

ROUND_S = 10.0
FENCE_DELAY_S = 60.0          # NodeStatus.pm $fence_delay: offline this long -> fence
LOCK_TIMEOUT_S = 120.0        # pmxcfs lock lifetime: a lost node's agent lock expires after it
WATCHDOG_S = 60.0             # watchdog-mux: a node that cannot renew its HA lock resets after it
RESOURCE_KEYS = ("state", "failback", "max_restart", "max_relocate", "comment", "group")


def _digest(data: Any) -> str:
    return hashlib.sha1(repr(data).encode()).hexdigest()


class HaManager(Placement, StatusViews):
    def __init__(self, cluster: Cluster, scenario: sc.Scenario):
        self.cluster = cluster
        self.pve9 = scenario.pve_major >= 9
        self.resources: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.service: dict[str, dict[str, Any]] = {}
        self.commands: list[tuple[str, str, str]] = []
        self.node_status: dict[str, str] = {
            n: "online" if node.online else "unknown" for n, node in cluster.nodes.items()}
        self.maintenance: set[str] = set()
        # The LRM's mode per node (LRM.pm): active, shutdown (stop all, then recover
        # elsewhere), restart (stop and freeze all) or maintenance (move all away).
        self.lrm_mode: dict[str, str] = {n: "active" for n in cluster.nodes}
        self.lost_at: dict[str, float] = {}
        # When the CRM can take a gone node's agent lock (fence_node): at once after a clean
        # shutdown (the LRM released it), LOCK_TIMEOUT_S after a loss.
        self.lock_free_at: dict[str, float] = {}
        self.quorum_lost_at: float | None = None
        self.self_fenced: set[str] = set()      # reset by their watchdog since quorum went
        self.fenced: list[dict[str, Any]] = []  # each node the CRM marked for fencing: time, node
        self.armed: set[str] = set()
        self.round_scheduled = False
        self.master = next((n for n, node in cluster.nodes.items() if node.online), "")
        self.last_round = cluster.t
        self.uid = 0
        for rule in scenario.ha_rules:
            self.rules[rule.rule] = rule_entry(rule)
        for group in scenario.ha_groups:
            self.groups[group.group] = {"nodes": group.nodes, "restricted": int(group.restricted),
                                        "nofailback": int(group.nofailback), "comment": group.comment}
        for spec in scenario.guests:
            if spec.ha is not None:
                sid = f"{'vm' if spec.type == 'qemu' else 'ct'}:{spec.vmid}"
                self.resources[sid] = {
                    "type": sid[:2], "state": spec.ha.state, "failback": int(spec.ha.failback),
                    "max_restart": spec.ha.max_restart, "max_relocate": spec.ha.max_relocate,
                    "comment": spec.ha.comment}
                if spec.ha.group:
                    self.resources[sid]["group"] = spec.ha.group
                guest = cluster.guests[spec.vmid]
                self.service[sid] = {"node": guest.node, "state": self._initial_state(sid, guest),
                                     "uid": self._uid()}
        self._ensure_round()

    # -- bookkeeping ---------------------------------------------------------------

    def _uid(self) -> str:
        self.uid += 1
        return hashlib.md5(f"{self.cluster.seed}:{self.uid}".encode()).hexdigest()[:22]

    def _initial_state(self, sid: str, guest: SimGuest) -> str:
        request = self.requested(sid)
        if request == "ignored":
            return "ignored"
        if request in ("started", "enabled"):
            return "started" if guest.status == "running" else "request_start"
        return "stopped"

    def managed(self, guest: SimGuest) -> bool:
        return guest.sid in self.resources

    def active(self) -> bool:
        return bool(self.resources)

    def rules_changed(self) -> None:
        """Rules or groups changed: the next CRM round applies them."""
        self._ensure_round()

    def _ensure_round(self) -> None:
        if self.round_scheduled or not self.resources:
            return
        self.round_scheduled = True
        at = (self.cluster.t // ROUND_S + 1) * ROUND_S
        self.cluster.schedule(at, self._round)

    def hastate(self, guest: SimGuest) -> str | None:
        sid = guest.sid
        if sid not in self.resources:
            return None
        if self.requested(sid) == "ignored":
            return "ignored"
        return self.service.get(sid, {}).get("state", "started")

    # -- API-facing ----------------------------------------------------------------

    def requested(self, sid: str) -> str:
        """The resource's requested state (read_and_check_resources_config's default)."""
        state = self.resources[sid].get("state", "started")
        return "started" if state == "enabled" else state

    def parse_sid(self, sid: str) -> str:
        """``100`` → ``vm:100`` or ``ct:100`` by the guest's type (HA::Config::parse_sid)."""
        sid = str(sid)
        if sid.isdigit():
            guest = self.cluster.guests.get(int(sid))
            if guest is None:
                raise ApiError(500, f"unable to detect SID from VMID - VM/CT {sid} does not exist")
            return guest.sid
        return sid

    def resource_entries(self) -> list[dict[str, Any]]:
        """The configured keys of each resource, its sid, type and the file's digest."""
        digest = _digest(self.resources)
        entries = []
        for sid, res in sorted(self.resources.items(), key=lambda kv: sid_key(kv[0])):
            entry = {"sid": sid, **{k: v for k, v in res.items() if v != ""}}
            entry["digest"] = digest
            entries.append(entry)
        return entries

    def add_resource(self, sid: str, params: dict[str, Any]) -> None:
        sid = self.parse_sid(sid)
        self._check_group(params.get("group"))
        kind, _, vmid = sid.partition(":")
        guest = self.cluster.guests.get(int(vmid)) if vmid.isdigit() else None
        if guest is None or guest.sid != sid:
            raise ApiError(500, f"resource '{sid}' does not exist in cluster")
        if sid in self.resources:
            raise ApiError(500, f"create resource failed: resource ID '{sid}' already defined")
        self.resources[sid] = {"type": kind, **{k: v for k, v in params.items() if k in RESOURCE_KEYS}}
        self.service[sid] = {"node": guest.node, "state": self._initial_state(sid, guest),
                             "uid": self._uid()}
        self._ensure_round()

    def update_resource(self, sid: str, params: dict[str, Any]) -> None:
        sid = self.parse_sid(sid)
        self._check_group(params.get("group"))
        if sid not in self.resources:
            raise ApiError(500, f"update resources config failed: no such resource '{sid}'")
        res = self.resources[sid]
        res.update({k: v for k, v in params.items() if k in RESOURCE_KEYS})
        for key in (k.strip() for k in str(params.get("delete", "")).split(",") if k.strip()):
            if key not in RESOURCE_KEYS:
                raise ApiError(500, f"update resources config failed: no such option '{key}'")
            res.pop(key, None)
        if self.requested(sid) == "ignored":
            self.service[sid]["state"] = "ignored"
        elif self.service[sid]["state"] == "ignored":
            guest = self._guest_for_sid(sid)
            self.service[sid] = {"node": guest.node, "state": self._initial_state(sid, guest),
                                 "uid": self._uid()}
        self._ensure_round()

    def _check_group(self, group: str | None) -> None:
        if group is None:
            return
        if self.pve9:
            raise ApiError(500, "invalid parameter 'group': ha groups have been migrated to rules")
        if group not in self.groups:
            raise ApiError(500, f"HA group '{group}' does not exist")

    def delete_resource(self, sid: str, purge: bool = True) -> None:
        """Remove a resource; with ``purge`` (the default) also from its rules, deleting a
        rule left without resources."""
        sid = self.parse_sid(sid)
        if sid not in self.resources:
            raise ApiError(500, f"cannot delete service '{sid}', not HA managed!")
        self.remove_resource(sid)
        if purge:
            for name in list(self.rules):
                members = [s for s in self.rules[name]["resources"].split(",") if s and s != sid]
                if members:
                    self.rules[name]["resources"] = ",".join(members)
                else:
                    del self.rules[name]

    def remove_resource(self, sid: str) -> None:
        self.resources.pop(sid, None)
        self.service.pop(sid, None)
        self.commands = [c for c in self.commands if c[1] != sid]

    def _guest_for_sid(self, sid: str) -> SimGuest:
        kind, _, vmid = sid.partition(":")
        guest = self.cluster.guests.get(int(vmid)) if vmid.isdigit() else None
        if guest is None or (kind == "vm") != (guest.type == "qemu"):
            raise ApiError(500, f"{'VM' if kind == 'vm' else 'CT'} {vmid} does not exist")
        return guest

    def queue(self, command: str, sid: str, node: str) -> dict[str, Any] | None:
        """``ha-manager crm-command migrate|relocate``: queued for the next CRM round (which
        refuses, with a log line only, what affinity forbids).  PVE 9 answers what moves
        along and what blocks; PVE 8 answers null."""
        sid = self.parse_sid(sid)
        if not self._routed(sid):
            raise ApiError(500, f"resource '{sid}' is not HA managed")
        if self.service.get(sid, {}).get("state") == "error":
            raise ApiError(500, f"service '{sid}' in error state, must be disabled and fixed first")
        if node not in self.cluster.nodes:
            raise ApiError(500, f"no such cluster node '{node}'")
        guest = self._guest_for_sid(sid)
        blocking = self.blocking_resources(guest, node)
        comigrated = self.dependent_resources(guest) or []
        self.commands.append((command, sid, node))
        self._ensure_round()
        if not self.pve9:
            return None
        answer: dict[str, Any] = {"sid": sid, "requested-node": node}
        if comigrated:
            answer["comigrated-resources"] = comigrated
        if blocking:
            answer["blocking-resources"] = blocking
        return answer

    def request_state(self, guest: SimGuest, state: str) -> None:
        self.resources[guest.sid]["state"] = state
        self._ensure_round()

    def unavailable(self) -> set[str]:
        """Nodes in maintenance: by ``ha-manager crm-command node-maintenance enable`` or
        because their LRM shuts down with the ``migrate`` policy."""
        return self.maintenance | {n for n, mode in self.lrm_mode.items() if mode == "maintenance"}

    def node_maintenance(self, node: str, enable: bool) -> None:
        if enable:
            self.maintenance.add(node)
            self.lrm_mode[node] = "maintenance"
            self.node_status[node] = "maintenance"
        else:
            self.maintenance.discard(node)
            if self.lrm_mode.get(node) == "maintenance" and self.cluster.nodes[node].power == "on":
                self.lrm_mode[node] = "active"
            if self.cluster.nodes[node].online and node not in self.unavailable():
                self.node_status[node] = "online"
        self._ensure_round()

    def set_lrm_mode(self, node: str, mode: str) -> None:
        """The node's LRM got a shutdown request (LRM.pm shutdown_request)."""
        if node in self.maintenance:     # manual maintenance wins: it is kept over the shutdown
            return
        self.lrm_mode[node] = mode
        if mode == "maintenance":
            self.node_status[node] = "maintenance"
        self._ensure_round()

    def node_lost(self, node: str, clean: bool = False) -> None:
        self.lost_at[node] = self.cluster.t
        self.lock_free_at[node] = self.cluster.t + (0.0 if clean else LOCK_TIMEOUT_S)
        # NodeStatus::update: a node in maintenance whose LRM says so stays in maintenance.
        if node not in self.unavailable():
            self.node_status[node] = "unknown"
        if self.master == node:
            online = [n for n, x in self.cluster.nodes.items() if x.online]
            self.master = online[0] if online else ""
        self._ensure_round()

    def node_back(self, node: str) -> None:
        """A (re)booted node: its LRM starts active, or in maintenance if that was asked."""
        self.lost_at.pop(node, None)
        self.lock_free_at.pop(node, None)
        self.lrm_mode[node] = "maintenance" if node in self.maintenance else "active"
        self.node_status[node] = "maintenance" if node in self.maintenance else "online"
        if not self.master:
            self.master = node
        self._ensure_round()

    # -- the CRM round ---------------------------------------------------------------

    def _round(self) -> None:
        self.round_scheduled = False
        cluster = self.cluster
        self.last_round = cluster.t
        if not self.resources:
            return
        self._watchdogs()
        if cluster.quorate and self.master:
            self._freeze()
            self._fence_lost_nodes()
            commands, self.commands = self.commands, []
            for command, sid, node in commands:
                self._run_command(command, sid, node)
            for sid in sorted(self.resources, key=sid_key):
                self._manage(sid)
        # Keep rounds going while anything is configured; skip ahead if the clock jumped.
        self.round_scheduled = True
        cluster.schedule(max(cluster.t + ROUND_S, (cluster.clock.now() // ROUND_S) * ROUND_S),
                         self._round)

    def _watchdogs(self) -> None:
        """Without quorum no LRM nor CRM can renew its lock: each node whose watchdog was
        armed when quorum went (its LRM had HA services, or it was the CRM master) resets
        after WATCHDOG_S (self-fencing).  Rebooted, or booted since, a node waits for quorum
        with its watchdog disarmed."""
        cluster = self.cluster
        if cluster.quorate:
            self.quorum_lost_at = None
            self.self_fenced.clear()
            return
        if self.quorum_lost_at is None:       # who held an armed watchdog when quorum went
            self.quorum_lost_at = cluster.t
            self.armed = {name for name, node in cluster.nodes.items() if node.online and (
                name == self.master or any(
                    st["node"] == name and self.requested(sid) != "ignored" and st["state"] != "freeze"
                    for sid, st in self.service.items()))}
            return
        if cluster.t - self.quorum_lost_at < WATCHDOG_S:
            return
        for name in sorted(self.armed - self.self_fenced):
            if cluster.nodes[name].online:
                self.self_fenced.add(name)
                cluster.power.reset(name, "watchdog reset")

    def _freeze(self) -> None:
        """Manager.pm: services on a node whose LRM restarts are frozen (never fenced nor
        recovered); once that LRM is active again they go on as requested."""
        for sid, status in self.service.items():
            mode = self.lrm_mode.get(status["node"], "active")
            if status["state"] == "freeze":
                if mode == "active" and self.cluster.nodes[status["node"]].online:
                    status["state"] = "started" if self.requested(sid) == "started" else "request_stop"
                    status["uid"] = self._uid()
            elif mode == "restart" and status["state"] in ("started", "stopped", "request_stop"):
                status["state"] = "freeze"
                status["uid"] = self._uid()

    def _fence_lost_nodes(self) -> None:
        """Manager.pm: a service on a node offline for FENCE_DELAY_S goes to ``fence`` (a
        stopped one not on a node in maintenance); the CRM fences the node once it gets the
        node's agent lock, and the services are recovered on the best other node (state
        ``recovery`` until one qualifies)."""
        t = self.cluster.t
        fencing: set[str] = set()
        for sid, status in self.service.items():
            node = status["node"]
            since = self.lost_at.get(node)
            if since is None or t - since < FENCE_DELAY_S or self.requested(sid) == "ignored":
                continue
            state = status["state"]
            if state in ("freeze", "recovery", "error"):
                continue
            if state == "stopped" and node in self.unavailable():
                continue
            if state == "stopped" and self.requested(sid) == "disabled":
                continue
            status["state"] = "fence"
            fencing.add(node)
        for node in sorted(fencing):
            if self.node_status.get(node) != "fence":
                self.fenced.append({"time": t, "node": node})
                del self.fenced[:-1000]
            self.node_status[node] = "fence"
            if t < self.lock_free_at.get(node, t):
                continue               # the agent lock has not expired yet: wait
            self.node_status[node] = "unknown"
            for status in self.service.values():
                if status["node"] == node and status["state"] == "fence":
                    status.update(state="recovery", uid=self._uid())
        for sid, status in sorted(self.service.items()):
            if status["state"] == "recovery":
                self._recover(sid, status)
        self.cluster.invalidate_usage()

    def _recover(self, sid: str, status: dict[str, Any]) -> None:
        """next_state_recovery: steal the service to the best node (the guest, stopped, moves
        with its config); without one it stays in ``recovery`` and is tried again."""
        guest = self._guest_for_sid(sid)
        fenced = status["node"]
        target = self.select_node(sid, exclude={fenced} if not self.cluster.nodes[fenced].online else set())
        if target is None:
            return
        guest.node = target
        guest.migration = None
        guest.config.pop("lock", None)
        guest.status, guest.started_at = "stopped", None
        state = "started" if self.requested(sid) == "started" else "request_stop"
        status.update(node=target, state=state, uid=self._uid())
        status.pop("maintenance_node", None)

    def _run_command(self, command: str, sid: str, node: str) -> None:
        """A queued migrate/relocate: refused (a log line in PVE) for a node that is not an
        online HA node or that holds a negative-affinity partner; positive-affinity
        partners move along; containers always relocate."""
        status = self.service.get(sid)
        if status is None or status["state"] not in ("started", "stopped", "request_start"):
            return
        if node == status["node"] or self.node_status.get(node) != "online":
            return
        guest = self._guest_for_sid(sid)
        if self.blocking_resources(guest, node):
            return
        for member in [sid] + (self.dependent_resources(guest) or []):
            member_status = self.service.get(member)
            if member_status is None or member_status["node"] == node:
                continue
            if member_status["state"] in ("stopped", "request_start"):
                self._guest_for_sid(member).node = node
                member_status["node"] = node
            elif member_status["state"] == "started":
                self._migrate(member, node, relocate=(command == "relocate"))

    def _migrate(self, sid: str, node: str, relocate: bool = False) -> None:
        status = self.service[sid]
        guest = self._guest_for_sid(sid)
        if guest.lock or guest.migration is not None:
            return
        source = status["node"]
        status.update(state="relocate" if relocate or guest.type == "lxc" else "migrate",
                      target=node, uid=self._uid())

        def done(ok: bool) -> None:
            status.pop("target", None)
            status["state"] = "started"
            status["node"] = guest.node
            if ok and source in self.unavailable():
                status["maintenance_node"] = source
        # The LRM migrates a VM live; a container it relocates (PVECT.pm: online=0, restart).
        migrate.start_migration(self.cluster, guest, node, "root@pam", online=guest.type == "qemu",
                                with_local_disks=True, force=True, restart=guest.type == "lxc",
                                on_done=done)

    def _manage(self, sid: str) -> None:
        cluster = self.cluster
        status = self.service[sid]
        request = self.requested(sid)
        if request == "ignored" or status["state"] in ("migrate", "relocate", "freeze", "fence",
                                                       "recovery"):
            return
        guest = self._guest_for_sid(sid)
        status["node"] = guest.node
        if not cluster.nodes[guest.node].online:
            return
        if self.lrm_mode.get(guest.node, "active") in ("shutdown", "restart"):
            return       # its LRM is shutting down: it starts and stops nothing any more
        if guest.lock:
            return
        if request in ("stopped", "disabled"):
            if guest.status == "running":
                status["state"] = "request_stop"
                ops.stop_guest(cluster, guest, "root@pam", shutdown=True,
                               on_done=lambda ok: status.update(state="stopped"))
            else:
                status["state"] = "stopped"
            return
        # requested started
        if guest.status != "running":
            if status["state"] != "starting":
                status["state"] = "starting"

                def started(ok: bool) -> None:
                    status["state"] = "started" if ok else "error"
                ops.start_guest(cluster, guest, "root@pam", on_done=started)
            return
        status["state"] = "started"
        online = self._online_nodes()
        if guest.node in self.unavailable():
            target = self.select_node(sid, exclude={guest.node})
            if target:
                self._migrate(sid, target)
            return
        back = status.get("maintenance_node")
        if back and back in online:
            status.pop("maintenance_node", None)
            if back != guest.node:
                self._migrate(sid, back)
            return
        allowed = self.allowed_nodes(sid, online)
        rules = self._rules_for(sid, "node-affinity")
        if rules and allowed and guest.node not in allowed:
            strict = int(rules[0].get("strict", 0))
            node_prio = parse_nodes(rules[0]["nodes"])
            if strict or guest.node not in node_prio or self._failback(sid):
                target = self.select_node(sid)
                if target and target != guest.node:
                    self._migrate(sid, target)
