"""The state of a simulated cluster and its clock-driven events.

Everything happens under one lock and in simulated time: ``sync()`` runs every event
that is due (a migration ending, an HA round) before a request reads or writes state,
so no thread runs the cluster in the background and a run is reproducible.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import itertools
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from keel.sim import load, scenario as sc
from keel.sim.access import Access, Auth, new_www_key
from keel.sim.clock import Clock
from keel.sim.errors import ApiError
from keel.sim.guests import SimGuest, config_from_spec
from keel.sim.schema import Schema
from keel.sim.tasks import Task, format_upid

GiB = 1024**3
MiB = 1024**2
TASK_HISTORY = 2000


@dataclass
class SimNode:
    spec: sc.Node
    nodeid: int
    online: bool
    booted_at: float
    next_pid: int
    # The machine itself (power saving): on, stopping (a shutdown or reboot under way),
    # off (powered off: Wake-on-LAN wakes it) or booting; ``online`` is its membership.
    power: str = "on"
    power_since: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> str:
        """online, shutting-down, off, booting, or lost (powered but not in the cluster)."""
        if self.power in ("off", "booting"):
            return self.power
        if not self.online:
            return "lost"
        return "shutting-down" if self.power == "stopping" else "online"


@dataclass
class Storage:
    spec: sc.Storage

    @property
    def name(self) -> str:
        return self.spec.storage

    def available_on(self, node: str) -> bool:
        return self.spec.nodes is None or node in self.spec.nodes


class Cluster:
    """One simulated Proxmox VE cluster."""

    def __init__(self, scenario: sc.Scenario, clock: Clock | None = None,
                 schema: Schema | None = None):
        # One lock for the cluster's whole life: requests and the control API wait on it,
        # and a reset rebuilds the state under it (it must never be replaced).
        self.lock = threading.RLock()
        # The CSRF key (pve-www.key) outlives a reset, as the file a client read does.
        self.www_key = new_www_key()
        self._build(scenario, clock or Clock(scenario.start_time, 1.0), schema or Schema.load())

    def _build(self, scenario: sc.Scenario, clock: Clock, schema: Schema) -> None:
        """The state as the scenario starts it (also what ``reset`` puts back)."""
        self.scenario = scenario
        self.schema = schema
        self.clock = clock
        self.t = self.clock.now()
        self.seed = scenario.seed
        self.rng = random.Random(scenario.seed)
        self.version = scenario.pve_version
        self.repoid = "a1b2c3d4e5f60718"
        self.forced_quorum_loss = False
        self.quorum_losses: list[float] = []     # when quorum went, for /_sim/state
        self.access = Access(scenario.users, scenario.roles, scenario.acl, self.www_key)
        self.nodes: dict[str, SimNode] = {}
        for index, spec in enumerate(scenario.nodes):
            self.nodes[spec.name] = SimNode(spec, index + 1, spec.online,
                                            self.t - 86400 * (3 + index), 0x1000 + 0x100 * index,
                                            "off" if spec.powered_off else "on", self.t)
        # Each node's config (/etc/pve/nodes/<node>/config): what GET /nodes/{node}/config reads.
        self.node_config: dict[str, dict[str, Any]] = {
            spec.name: ({"wakeonlan": spec.wakeonlan} if spec.wakeonlan else {})
            for spec in scenario.nodes}
        self.storages = {s.storage: Storage(s) for s in scenario.storages}
        self.pools: dict[str, dict[str, Any]] = {
            name: {"comment": comment, "storage": set()} for name, comment in scenario.pools.items()}
        self.guest_pool: dict[int, str] = {}
        self.access.pools_of = self._pools_of
        self.access.pool_member_paths = self._pool_member_paths
        self.guests: dict[int, SimGuest] = {}
        for spec in scenario.guests:
            guest = SimGuest(spec.vmid, spec.type, spec.node, config_from_spec(spec),
                             cpu_base=spec.cpu, mem_base=spec.mem_used,
                             profile=scenario.profiles.get(spec.profile) if spec.profile else None,
                             boot_s=spec.boot_s)
            if spec.status == "running":
                guest.status = "running"
                guest.started_at = self.t - 3600 * 24 - spec.vmid % 7919
            self.guests[spec.vmid] = guest
            if spec.pool:
                self.guest_pool[spec.vmid] = spec.pool
        self.options: dict[str, Any] = copy.deepcopy(scenario.cluster_options)
        self.tasks: dict[str, Task] = {}
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.memo: dict[Any, Any] = {}   # figures computed once per request (see sync)
        self._usage_sample: int | None = None
        self._node_usage: dict[str, tuple[float, int]] = {}
        self.requests: list[dict[str, Any]] = []
        self.request_seq = itertools.count(1)
        # copies: an endpoint fault counts down, and the scenario must stay as loaded (reset)
        self.endpoint_faults = [dataclasses.replace(f) for f in scenario.faults.endpoints]
        self.migration_faults = [dataclasses.replace(f) for f in scenario.faults.migrations]
        self.auth_delay_s = scenario.faults.auth_delay_s
        self.fault_rng = random.Random(scenario.seed + 1)
        from keel.sim.ha import HaManager  # late: ha imports this module
        self.ha = HaManager(self, scenario)
        for node in self.nodes.values():
            if node.spec.maintenance:
                self.ha.node_maintenance(node.name, True)
        from keel.sim.power import Power   # late: these import this module
        from keel.sim.ceph import CephCluster
        self.power = Power(self)
        self.ceph = CephCluster(self, scenario.ceph) if scenario.ceph is not None else None
        self.github = None
        if scenario.github is not None:
            from keel.sim.github.state import FakeGitHub   # late: it schedules on this cluster
            self.github = FakeGitHub(self, scenario.github)

    # -- options -----------------------------------------------------------------

    @property
    def crs(self) -> dict[str, Any]:
        return dict(self.options.get("crs", {}))

    # -- time and events ---------------------------------------------------------

    def sync(self) -> float:
        """Run every event due by now; return now.  Called at the start of every request."""
        self.memo.clear()
        self.access.memo.clear()
        now = self.clock.now()
        while self._events and self._events[0][0] <= now:
            at, _, action = heapq.heappop(self._events)
            self.t = max(self.t, at)
            action()
        self.t = max(self.t, now)
        return self.t

    def schedule(self, at: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (at, next(self._seq), action))

    def next_event_at(self) -> float | None:
        return self._events[0][0] if self._events else None

    # -- lookups -----------------------------------------------------------------

    def node(self, name: str) -> SimNode:
        node = self.nodes.get(name)
        if node is None:
            raise ApiError(500, f"no such cluster node '{name}'")
        return node

    def guest(self, vmid: int, node: str | None = None, kind: str | None = None) -> SimGuest:
        guest = self.guests.get(int(vmid))
        if guest is None or (node is not None and guest.node != node) or (
                kind is not None and guest.type != kind):
            where = node or (guest.node if guest else "localhost")
            folder = "qemu-server" if (kind or "qemu") == "qemu" else "lxc"
            raise ApiError(500, f"Configuration file 'nodes/{where}/{folder}/{vmid}.conf' does not exist")
        return guest

    def pool_of(self, vmid: int) -> str | None:
        return self.guest_pool.get(vmid)

    def _pools_of(self, path: str) -> list[str]:
        """The pools holding the object at an ACL path: a guest is in at most one."""
        kind, _, ident = path.strip("/").partition("/")
        if kind == "vms" and ident.isdigit():
            pool = self.guest_pool.get(int(ident))
            return [pool] if pool else []
        if kind == "storage" and ident:
            return sorted(p for p, data in self.pools.items() if ident in data["storage"])
        return []

    def _pool_member_paths(self) -> list[str]:
        paths = [f"/vms/{vmid}" for vmid in self.guest_pool]
        paths += [f"/storage/{s}" for data in self.pools.values() for s in data["storage"]]
        return paths

    def votes(self) -> tuple[int, int]:
        """(votes of the nodes in the cluster, expected votes): corosync's votequorum with
        expected_votes the sum of every node's quorum_votes, as PVE configures it."""
        online = sum(n.spec.votes for n in self.nodes.values() if n.online)
        return online, sum(n.spec.votes for n in self.nodes.values())

    @property
    def quorate(self) -> bool:
        """Quorate while the members hold more than half the expected votes (votequorum's
        quorum = expected / 2 + 1)."""
        if self.forced_quorum_loss:
            return False
        online, expected = self.votes()
        return online >= expected // 2 + 1

    def require_quorum(self) -> None:
        if not self.quorate:
            raise ApiError(500, "cluster not ready - no quorum?")

    # -- usage -------------------------------------------------------------------

    def guest_usage(self, guest: SimGuest, at: float | None = None) -> tuple[float, int]:
        """(cpu fraction of its own cpus, memory bytes) at ``at`` (default: the current sample)."""
        if guest.status != "running" or not self.nodes[guest.node].online:
            return 0.0, 0
        t = self._sample_time() if at is None else at
        cpu = load.cpu_frac(guest.cpu_base, guest.profile, self.seed, guest.vmid, t)
        mem = load.mem_bytes(guest.mem_base, guest.maxmem, guest.profile, t)
        return cpu, mem

    def guest_maxcpu(self, guest: SimGuest) -> float:
        return guest.maxcpu or float(self.nodes[guest.node].spec.cpus)

    def node_usage(self, name: str) -> tuple[float, int]:
        """(cpu fraction of all threads, memory bytes), refreshed every 10 s of simulated time."""
        sample = int(self.t // load.SAMPLE_S)
        if sample != self._usage_sample:
            self._usage_sample = sample
            self._node_usage = self._compute_node_usage(self._sample_time())
        return self._node_usage.get(name, (0.0, 0))

    def _compute_node_usage(self, t: float) -> dict[str, tuple[float, int]]:
        cores = {name: n.spec.overhead_cpu for name, n in self.nodes.items()}
        mem = {name: n.spec.overhead_mem for name, n in self.nodes.items()}
        for guest in self.guests.values():
            if guest.status != "running":
                continue
            cpu, used = self.guest_usage(guest, t)
            cores[guest.node] += cpu * self.guest_maxcpu(guest)
            mem[guest.node] += used
            if guest.migration is not None and guest.migration.online:
                mem[guest.migration.target] += used
        result = {}
        for name, node in self.nodes.items():
            if not node.online:
                result[name] = (0.0, 0)
                continue
            result[name] = (min(1.0, cores[name] / node.spec.cpus), min(node.spec.memory, mem[name]))
        return result

    def invalidate_usage(self) -> None:
        """Memory reservations (a migration starting) show at once, not at the next sample."""
        self._usage_sample = None

    def _sample_time(self) -> float:
        return (self.t // load.SAMPLE_S) * load.SAMPLE_S

    def node_usage_at(self, name: str, t: float) -> tuple[float, int]:
        """Usage of ``name`` at a past instant, from the guests it holds now (for rrddata)."""
        node = self.nodes[name]
        cores = node.spec.overhead_cpu
        mem = node.spec.overhead_mem
        for guest in self.guests.values():
            if guest.node != name or guest.status != "running":
                continue
            if guest.started_at is not None and guest.started_at > t:
                continue
            cpu = load.cpu_frac(guest.cpu_base, guest.profile, self.seed, guest.vmid, t)
            cores += cpu * self.guest_maxcpu(guest)
            mem += load.mem_bytes(guest.mem_base, guest.maxmem, guest.profile, t)
        return min(1.0, cores / node.spec.cpus), min(node.spec.memory, mem)

    # -- tasks -------------------------------------------------------------------

    def new_task(self, node: str, kind: str, ident: str, user: str) -> Task:
        sim_node = self.nodes[node]
        sim_node.next_pid += 1 + self.rng.randrange(40)
        pid = sim_node.next_pid
        pstart = int((self.t - sim_node.booted_at) * 100) & 0xFFFFFFFF
        start = int(self.t)
        upid = format_upid(node, pid, pstart, start, kind, ident, user)
        task = Task(upid, node, pid, pstart, start, kind, ident, user)
        self.tasks[upid] = task
        if len(self.tasks) > TASK_HISTORY:
            for old in [u for u, t in self.tasks.items() if not t.running][: len(self.tasks) - TASK_HISTORY]:
                del self.tasks[old]
        return task

    def task(self, upid: str, node: str | None = None) -> Task:
        task = self.tasks.get(upid)
        if task is None or (node is not None and task.node != node):
            from keel.sim.errors import param_error
            valid = re.fullmatch(r"UPID:[^:]+:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:[^:]+:[^:]*:[^:]+:",
                                 upid)
            raise param_error({"upid": "no such task" if valid else "unable to parse worker upid"})
        return task

    def quick_task(self, node: str, kind: str, ident: str, user: str, duration: float,
                   lines: list[str], on_done: Callable[[], str | None] | None = None) -> Task:
        """A task that logs ``lines`` and ends after ``duration``; ``on_done`` may return an error."""
        task = self.new_task(node, kind, ident, user)
        for line in lines:
            task.log(self.t, line)

        def finish() -> None:
            if not task.running:
                return
            error = on_done() if on_done else None
            task.finish(self.t, error or "OK")
        self.schedule(self.t + duration, finish)
        return task

    # -- node faults -------------------------------------------------------------

    def set_node_online(self, name: str, online: bool) -> None:
        """Lose a node (it stays powered: it does not wake) or bring a lost one back."""
        node = self.node(name)
        if node.online == online:
            return
        if not online:
            self.node_leaves(name, clean=False)
        elif node.power in ("off", "booting"):
            raise ValueError(f"node {name} is {node.power}: wake it (POST /nodes/<local>/wakeonlan "
                             f"with its name) or power it on ({{\"power\": \"on\"}})")
        else:
            self.node_joins(name)

    def node_leaves(self, name: str, clean: bool) -> None:
        """The node drops out of the cluster: a shutdown that ends (``clean``, its HA agent
        lock released) or a loss (power cut, network)."""
        node = self.nodes[name]
        was_quorate = self.quorate
        node.online = False
        if was_quorate and not self.quorate:
            self.quorum_losses.append(self.t)
        self.invalidate_usage()
        for task in list(self.tasks.values()):
            if task.running and (task.node == name or task.info.get("target") == name):
                if task.on_abort:
                    task.on_abort(self.t, f"node '{name}' lost")
                task.finish(self.t, f"migration aborted: connection to node '{name}' lost"
                            if task.type in ("qmigrate", "vzmigrate") else f"node '{name}' lost")
        self.ha.node_lost(name, clean=clean)
        if self.ceph is not None:
            self.ceph.host_down(name, clean)

    def node_joins(self, name: str) -> None:
        """The node (freshly booted) is a member again: its guests that are not HA resources
        are stopped (nothing starts them: ``onboot`` is not simulated)."""
        node = self.nodes[name]
        node.online = True
        node.booted_at = self.t
        self.invalidate_usage()
        for guest in self.guests.values():
            if guest.node == name and guest.status == "running" and not self.ha.managed(guest):
                guest.status, guest.started_at = "stopped", None
        self.ha.node_back(name)
        if self.ceph is not None:
            self.ceph.host_up(name)

    # -- request log -------------------------------------------------------------

    def log_request(self, method: str, path: str, user: str | None, status: int,
                    params: dict[str, Any] | None = None) -> None:
        entry = {"seq": next(self.request_seq), "time": self.t, "wall": round(time.time(), 3), "method": method,
                 "path": path, "user": user, "status": status}
        if params:
            entry["params"] = params
        self.requests.append(entry)
        if len(self.requests) > 100000:
            del self.requests[:50000]

    def reset(self) -> None:
        """Back to the scenario as loaded, at its start time (a clean slate for a test without
        a new process); the clock keeps its factor.  The caller holds ``self.lock``, which
        stays the same object, so no request can slip in while the state is rebuilt."""
        with self.lock:
            self._build(self.scenario, Clock(self.scenario.start_time, self.clock.factor),
                        self.schema)

    def next_vmid(self) -> int:
        bounds = self.options.get("next-id", {})
        lower, upper = int(bounds.get("lower", 100)), int(bounds.get("upper", 1000000))
        vmid = lower
        while vmid in self.guests:
            vmid += 1
        if vmid >= upper:
            raise ApiError(500, "unable to get any free VMID in range [%d, %d)" % (lower, upper))
        return vmid

    def auth_node_name(self) -> str:
        return self.scenario.local_node


def describe(auth: Auth | None) -> str:
    return auth.name if auth else "-"
