"""The numbers the planner works on: node capacity and load, guest demand, per resource.

Resources are ``cpu`` (cores), ``memory`` (bytes) and ``disk`` (bytes on node-local image
storage).  Demand depends on the mode:

* ``used`` (and ``psi``): what guests use now, averaged over the smoothing window when
  samples are given: cpu = cpu fraction × vCPUs, memory = memory in use, disk = local disk;
* ``assigned``: what guests are configured with: vCPUs and configured memory.

A node's load is its own base (the host, and what Keel cannot attribute to a guest) plus
the demand of the running guests on it.  Utilisation is load ÷ capacity, so nodes of
different sizes are compared in percent.  Memory safety is separate and always in real
bytes: a node's used memory plus what moves in must stay under
(total − reservation) × (1 − headroom).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from keel.balance.metrics import node_load, pve_imbalance
from keel.balance.plan import Figures
from keel.balance.settings import BalancingSettings
from keel.model import Guest, Snapshot

RESOURCES = ("cpu", "memory", "disk")
CPU, MEM, DISK = 0, 1, 2
IMAGE_CONTENT = {"images", "rootdir"}

# (cpu cores, memory bytes) samples per guest and per node, oldest first.
Samples = Mapping[str, Sequence[tuple[float, float]]]


@dataclass
class LoadModel:
    nodes: list[str]                 # online nodes, sorted
    index: dict[str, int]
    cap: np.ndarray                  # N x R capacity
    load: np.ndarray                 # N x R current load
    mem_used: np.ndarray             # N, real bytes in use
    mem_cap: np.ndarray              # N, the most a plan may bring a node to
    weights: np.ndarray              # R
    eligible: np.ndarray             # N bool: counts in the figures, may receive guests
    demand: dict[int, np.ndarray]    # vmid -> R
    footprint: dict[int, int]        # vmid -> real memory bytes it takes along
    disk_bytes: dict[int, int]       # vmid -> local disk bytes it takes along

    def unit_demand(self, vmids: Sequence[int]) -> np.ndarray:
        return sum((self.demand[v] for v in vmids), np.zeros(len(RESOURCES)))

    def unit_footprint(self, vmids: Sequence[int]) -> int:
        return sum(self.footprint[v] for v in vmids)

    def copy(self) -> "LoadModel":
        return LoadModel(self.nodes, self.index, self.cap, self.load.copy(), self.mem_used.copy(),
                         self.mem_cap, self.weights, self.eligible, self.demand, self.footprint,
                         self.disk_bytes)

    def move(self, vmids: Sequence[int], source: str, target: str) -> None:
        d = self.unit_demand(vmids)
        s, t = self.index[source], self.index[target]
        self.load[s] -= d
        self.load[t] += d
        m = self.unit_footprint(vmids)
        self.mem_used[s] -= m
        self.mem_used[t] += m

    def provisioning(self) -> dict[str, float]:
        """Total cpu and memory demand over the eligible nodes' capacity (1.0 = exactly full)."""
        cap = self.cap[self.eligible].sum(axis=0)
        total = self.load.sum(axis=0)
        return {name: float(total[r] / cap[r]) if cap[r] else float("inf")
                for name, r in (("cpu", CPU), ("memory", MEM))}

    # -- figures --------------------------------------------------------------------

    def utilisation(self) -> np.ndarray:
        return self.load / self.cap

    def fluid(self) -> np.ndarray:
        """The utilisation every eligible node would have if load were spread perfectly."""
        e = self.eligible
        return self.load[e].sum(axis=0) / self.cap[e].sum(axis=0)

    def node_terms(self) -> np.ndarray:
        """Each node's share of the objective (0 for nodes that are not eligible)."""
        terms = np.zeros(len(self.nodes))
        e = self.eligible
        if e.any():
            dev = self.utilisation()[e] - self.fluid()
            terms[e] = (self.weights * dev ** 2).sum(axis=1)
        return terms

    def objective(self) -> float:
        e = self.eligible
        if not e.any():
            return 0.0
        dev = self.utilisation()[e] - self.fluid()
        return float((self.weights * (dev ** 2)).sum())

    def figures(self) -> Figures:
        e = self.eligible
        n = int(e.sum())
        weight_sum = float(self.weights.sum()) or 1.0
        objective = self.objective()
        keel = float(np.sqrt(objective / (n * weight_sum))) if n else 0.0
        u = self.utilisation()[e]
        spread = {name: float((u[:, r].max() - u[:, r].min()) * 100) if n else 0.0
                  for r, name in enumerate(RESOURCES)}
        weighted = [r for r in range(len(RESOURCES)) if self.weights[r] > 0]
        peak = float(u[:, weighted].max()) if n and weighted else 0.0
        pve = pve_imbalance([node_load(min(1.0, c), min(1.0, m)) for c, m in u[:, [CPU, MEM]]])
        return Figures(keel=keel, pve=pve, spread=spread, peak=peak, objective=objective)


def _average(samples: Sequence[tuple[float, float]] | None, current: tuple[float, float]) -> tuple[float, float]:
    if not samples:
        return current
    cpu = sum(s[0] for s in samples) / len(samples)
    mem = sum(s[1] for s in samples) / len(samples)
    return cpu, mem


def guest_demand(guest: Guest, mode: str, samples: Samples | None = None) -> tuple[float, float]:
    """(cpu cores, memory bytes) a guest puts on its node in this mode."""
    if not guest.running:
        return 0.0, 0.0
    if mode == "assigned":
        return float(guest.maxcpu), float(guest.maxmem)
    current = (guest.cpu_frac * guest.maxcpu, float(guest.mem))
    return _average((samples or {}).get(f"guest/{guest.vmid}"), current)


def build(snapshot: Snapshot, settings: BalancingSettings, eligible: set[str],
          samples: Samples | None = None) -> LoadModel:
    nodes = sorted(name for name, node in snapshot.nodes.items() if node.online)
    index = {name: i for i, name in enumerate(nodes)}
    n, r = len(nodes), len(RESOURCES)
    cap = np.ones((n, r))
    load = np.zeros((n, r))
    mem_used = np.zeros(n)
    mem_cap = np.zeros(n)
    local_cap: dict[str, int] = {}
    local_used: dict[str, int] = {}
    for usage in snapshot.storage_usage:
        storage = snapshot.storages.get(usage.storage)
        if usage.shared or storage is None or storage.shared or not (storage.content & IMAGE_CONTENT):
            continue
        local_cap[usage.node] = local_cap.get(usage.node, 0) + usage.total
        local_used[usage.node] = local_used.get(usage.node, 0) + usage.used

    demand: dict[int, np.ndarray] = {}
    footprint: dict[int, int] = {}
    disk_bytes: dict[int, int] = {}
    guest_sum = np.zeros((n, r))
    for guest in snapshot.guests.values():
        cpu, mem = guest_demand(guest, settings.mode, samples)
        disk = float(guest.local_disk_bytes)
        demand[guest.vmid] = np.array([cpu, mem, disk])
        footprint[guest.vmid] = int(guest.mem) if guest.running else 0
        disk_bytes[guest.vmid] = int(guest.local_disk_bytes)
        if guest.node in index:
            guest_sum[index[guest.node]] += demand[guest.vmid]

    for name, i in index.items():
        node = snapshot.nodes[name]
        reserve = settings.reserve_for(name)
        usable_mem = max(1, node.maxmem - reserve)
        cap[i] = [max(1, node.maxcpu), usable_mem, max(1, local_cap.get(name, 0))]
        if settings.mode == "assigned":
            base = np.zeros(r)
        else:
            cpu_now, mem_now = _average((samples or {}).get(f"node/{name}"), (node.cpu_cores, float(node.mem)))
            base = np.array([max(0.0, cpu_now - guest_sum[i][CPU]), max(0.0, mem_now - guest_sum[i][MEM]), 0.0])
        base[DISK] = max(0.0, local_used.get(name, 0) - guest_sum[i][DISK])
        load[i] = base + guest_sum[i]
        mem_used[i] = node.mem
        mem_cap[i] = usable_mem * (1.0 - settings.headroom)
    weights = np.array([settings.weights.get(name, 0.0) for name in RESOURCES], dtype=float)
    if not any(local_cap.values()):
        weights[DISK] = 0.0      # no node-local image storage: nothing to balance there
    return LoadModel(nodes, index, cap, load, mem_used, mem_cap, weights,
                     np.array([name in eligible for name in nodes], dtype=bool),
                     demand, footprint, disk_bytes)
