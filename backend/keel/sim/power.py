"""Nodes that shut down, reboot, sleep and wake (power saving, issue 19).

As PVE does it (pve-manager's Nodes.pm ``node_cmd``, pve-guests.service, pve-ha-manager's
LRM.pm ``shutdown_request``):

1. ``POST /nodes/{node}/status command=shutdown|reboot`` answers ``null`` at once and runs
   ``(sleep 2; /sbin/poweroff)&`` (``reboot``): no task of its own.
2. systemd stops pve-guests first: ``pvesh create /nodes/localhost/stopall`` runs a
   ``stopall`` task (root@pam) that shuts down every running guest that is *not* an HA
   resource, newest vmid first, at most ``max_workers`` at a time (datacenter.cfg, else
   the node's threads up to 8), each a ``qmshutdown``/``vzshutdown`` task.
3. Then pve-ha-lrm stops, with datacenter.cfg's ``ha: shutdown_policy``:
   ``conditional`` (default): ``failover`` on a poweroff, ``freeze`` on a reboot;
   ``failover``: the LRM stops its HA services; once the node is gone the CRM fences it
   and recovers them elsewhere; ``freeze``: it stops them and the CRM freezes them until
   the node is back; ``migrate``: the LRM enters maintenance, the CRM moves them away,
   and the shutdown waits until none is left.  A node in HA maintenance
   (``ha-manager crm-command node-maintenance enable``) keeps it, whatever the policy.
   The LRM then releases its agent lock.
4. The rest of the shutdown (``power.shutdown`` of the node's scenario entry): the node
   leaves the cluster and is off.  A reboot is back after its boot time.

``POST /nodes/{node}/wakeonlan`` (``wake``) boots an ``off`` node after its boot time,
unless the packet does not wake it (``wake_failure``, seeded per node) or it is late
(``late``); a node that is lost but still powered never wakes.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from keel.sim import ops
from keel.sim.errors import ApiError

if TYPE_CHECKING:
    from keel.sim.cluster import Cluster, SimNode

POWEROFF_DELAY_S = 2.0      # node_cmd: "(sleep 2;/sbin/poweroff)&"
RESET_S = 5.0               # a reboot: off (firmware, POST) this long before it boots
LRM_POLL_S = 5.0            # how often the shutdown looks whether the LRM is done
HISTORY = 1000
OUTCOMES = ("normal", "late", "fail")


class Power:
    """The power state machine of every node of one cluster."""

    def __init__(self, cluster: "Cluster"):
        self.cluster = cluster
        self.rng = {name: random.Random(f"{cluster.seed}:power:{name}") for name in cluster.nodes}
        self.forced: dict[str, str] = {}          # node -> the outcome of its next wake
        self.pending: dict[str, str] = {}         # node -> shutdown | reboot, while stopping
        self.ready_at: dict[str, float] = {}      # a booting node -> when it is back
        self.history: list[dict[str, Any]] = []   # shutdowns, power cuts, wakes and boots
        self.wakes: dict[str, int] = {name: 0 for name in cluster.nodes}
        for name, node in cluster.nodes.items():
            if node.power == "off":              # a machine that is off runs nothing
                for guest in cluster.guests.values():
                    if guest.node == name:
                        guest.status, guest.started_at = "stopped", None

    def _record(self, node: str, event: str, **extra: Any) -> None:
        self.history.append({"time": self.cluster.t, "node": node, "event": event, **extra})
        del self.history[:-HISTORY]

    def _set(self, node: "SimNode", power: str) -> None:
        node.power, node.power_since = power, self.cluster.t

    # -- shutdown and reboot ------------------------------------------------------------

    def shutdown(self, name: str, reboot: bool, user: str) -> None:
        """node_cmd: a second request while one runs changes nothing (systemd has a job)."""
        cluster = self.cluster
        node = cluster.nodes[name]
        if node.power != "on":
            return
        self._set(node, "stopping")
        self.pending[name] = "reboot" if reboot else "shutdown"
        self._record(name, "reboot" if reboot else "shutdown", user=user)
        cluster.schedule(cluster.t + POWEROFF_DELAY_S, lambda: self._stop_guests(name))

    def _max_workers(self, name: str) -> int:
        configured = self.cluster.options.get("max_workers")
        return int(configured) if configured else min(8, self.cluster.nodes[name].spec.cpus)

    def _stop_guests(self, name: str) -> None:
        """pve-guests.service ExecStop: the ``stopall`` task (HA resources are left to the LRM)."""
        cluster = self.cluster
        if not self._still_stopping(name):
            return
        task = cluster.new_task(name, "stopall", "", "root@pam")
        guests = sorted((g for g in cluster.guests.values()
                         if g.node == name and g.status == "running" and not cluster.ha.managed(g)),
                        key=lambda g: -g.vmid)
        width = self._max_workers(name)
        waves = [guests[i:i + width] for i in range(0, len(guests), width)]

        def wave(index: int) -> None:
            if not self._still_stopping(name) or not task.running:
                return
            if index == len(waves):
                task.finish(cluster.t, "OK")
                self._lrm_shutdown(name)
                return
            for guest in waves[index]:
                if guest.status != "running" or guest.node != name:
                    continue
                label = "VM" if guest.type == "qemu" else "CT"
                task.log(cluster.t, f"Stopping {label} {guest.vmid} (timeout = 180 seconds)")
                try:
                    ops.stop_guest(cluster, guest, "root@pam", shutdown=True)
                except ApiError as err:
                    task.log(cluster.t, err.message)
            cluster.schedule(cluster.t + (ops.SHUTDOWN_S if waves[index] else 0), lambda: wave(index + 1))
        wave(0)

    def _still_stopping(self, name: str) -> bool:
        node = self.cluster.nodes[name]
        return node.power == "stopping" and node.online

    def policy(self) -> str:
        ha = self.cluster.options.get("ha") or {}
        return str(ha.get("shutdown_policy", "conditional")) if isinstance(ha, dict) else "conditional"

    def _lrm_shutdown(self, name: str) -> None:
        """pve-ha-lrm stops: LRM.pm shutdown_request, then wait until the node holds no
        running HA service (it stopped them, or the CRM moved them away)."""
        cluster = self.cluster
        ha = cluster.ha
        policy = self.policy()
        reboot = self.pending.get(name) == "reboot"
        if policy == "migrate":
            ha.set_lrm_mode(name, "maintenance")
        elif name not in ha.maintenance:
            freeze = policy == "freeze" or (policy == "conditional" and reboot)
            ha.set_lrm_mode(name, "restart" if freeze else "shutdown")
            for sid in sorted(ha.service):
                guest = ha._guest_for_sid(sid)
                if guest.node != name or guest.status != "running" or ha.requested(sid) == "ignored":
                    continue
                try:
                    ops.stop_guest(cluster, guest, "root@pam", shutdown=True)
                except ApiError:
                    pass
        self._wait_lrm(name)

    def _wait_lrm(self, name: str) -> None:
        cluster = self.cluster
        if not self._still_stopping(name):
            return
        ha = cluster.ha
        busy = [sid for sid, status in ha.service.items() if ha.requested(sid) != "ignored" and (
            (g := ha._guest_for_sid(sid)).node == name and g.status == "running"
            or g.migration is not None and g.node == name)]
        if busy:
            cluster.schedule(cluster.t + LRM_POLL_S, lambda: self._wait_lrm(name))
            return
        spec = cluster.nodes[name].spec
        cluster.schedule(cluster.t + spec.power.shutdown_s, lambda: self._power_off(name))

    def _power_off(self, name: str) -> None:
        if not self._still_stopping(name):
            return
        reboot = self.pending.pop(name, "shutdown") == "reboot"
        self._off(name, clean=True)
        if reboot:
            self.cluster.schedule(self.cluster.t + RESET_S, lambda: self._boot(name, "reboot"))

    def _off(self, name: str, clean: bool) -> None:
        """The machine stops: whatever still runs on it stops with it."""
        cluster = self.cluster
        node = cluster.nodes[name]
        for guest in cluster.guests.values():
            if guest.node == name and guest.status == "running":
                guest.status, guest.started_at = "stopped", None
        self._set(node, "off")
        self._record(name, "off", clean=clean)
        if node.online:
            cluster.node_leaves(name, clean)
        cluster.invalidate_usage()

    # -- the control API: a power cut, the power button, the next wake -------------------

    def cut(self, name: str) -> None:
        """The power goes: the node is off at once, not shut down (its HA agent lock expires
        as for a lost node); Wake-on-LAN can wake it."""
        node = self.cluster.nodes[name]
        if node.power == "off":
            return
        self.pending.pop(name, None)
        self.ready_at.pop(name, None)
        self._off(name, clean=False)

    def reset(self, name: str, why: str) -> None:
        """A hard reset (the HA watchdog's): off at once, then it boots again."""
        node = self.cluster.nodes[name]
        if node.power == "off":
            return
        self.pending.pop(name, None)
        self.ready_at.pop(name, None)
        self._record(name, why)
        self._off(name, clean=False)
        self.cluster.schedule(self.cluster.t + RESET_S, lambda: self._boot(name, "reboot"))

    def press(self, name: str) -> None:
        """The power button of an ``off`` node: it boots, whatever its wake chances."""
        node = self.cluster.nodes[name]
        if node.power != "off":
            return
        self._record(name, "power-on")
        self._start_boot(name, node.spec.power.boot_s, "power-on")

    def force_next(self, name: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"next_wake must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        self.forced[name] = outcome

    # -- Wake-on-LAN and boot --------------------------------------------------------------

    def wake(self, name: str, sender: str) -> None:
        """A magic packet for ``name`` (sent by ``sender``): only an ``off`` node hears it;
        each packet draws (seeded, per node) whether it wakes and whether it is late."""
        cluster = self.cluster
        node = cluster.nodes[name]
        if node.power != "off":
            self._record(name, "wol", sender=sender, outcome=f"ignored ({node.state})")
            return
        rng = self.rng[name]
        fail, late = rng.random(), rng.random()       # always both: the sequence stays stable
        spec = node.spec.power
        outcome = self.forced.pop(name, None) or (
            "fail" if fail < spec.wake_failure else "late" if late < spec.late else "normal")
        self.wakes[name] += 1
        if outcome == "fail":
            self._record(name, "wol", sender=sender, outcome="did not wake")
            return
        boot = spec.boot_s + (spec.late_s if outcome == "late" else 0.0)
        self._record(name, "wol", sender=sender, outcome=outcome, ready_at=cluster.t + boot)
        self._start_boot(name, boot, "wol")

    def _start_boot(self, name: str, seconds: float, why: str) -> None:
        cluster = self.cluster
        node = cluster.nodes[name]
        self._set(node, "booting")
        self.ready_at[name] = cluster.t + seconds
        at = self.ready_at[name]
        cluster.schedule(at, lambda: self._boot(name, why, at))

    def _boot(self, name: str, why: str, at: float | None = None) -> None:
        """Booted: corosync joins, pveproxy answers, the LRM starts."""
        cluster = self.cluster
        node = cluster.nodes[name]
        if why == "reboot":
            if node.power != "off":
                return
            self._start_boot(name, node.spec.power.boot_s, "booted")
            return
        if node.power != "booting" or self.ready_at.get(name) != at:
            return                      # cut meanwhile, or an older boot
        self.ready_at.pop(name, None)
        self._set(node, "on")
        self._record(name, "up", via=why)
        if not node.online:
            cluster.node_joins(name)

    # -- what /_sim/state shows ------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        cluster = self.cluster
        result = {}
        for name, node in sorted(cluster.nodes.items()):
            entry: dict[str, Any] = {"state": node.state, "since": node.power_since,
                                     "votes": node.spec.votes, "wakes": self.wakes[name]}
            if name in self.ready_at:
                entry["ready_at"] = self.ready_at[name]
            if name in self.pending:
                entry["stopping_for"] = self.pending[name]
            if name in self.forced:
                entry["next_wake"] = self.forced[name]
            result[name] = entry
        return result
