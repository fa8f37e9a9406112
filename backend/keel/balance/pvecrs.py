"""Proxmox VE's cluster resource scheduler (CRS) decisions, re-implemented.

What pve-ha-manager (``Manager.pm: load_balance``) and proxmox-resource-scheduling
decide, as pure functions over plain data, so that Keel can show "what would PVE do"
and make the same choices in its PVE-compatible methods:

* ``node_imbalance``: the coefficient of variation of the node loads
  ``(cpu/maxcpu + mem/maxmem) / 2``; ``normalised=True`` divides it by its maximum
  ``sqrt(n - 1)`` (crate 2.1, PVE 9.2), ``False`` is the raw figure of crate 2.0 that
  pve-ha-manager 5.2.0's test logs show ("1.41" for 3 nodes with all load on one).
* ``score_bruteforce`` / ``select_bruteforce``: the migration with the lowest imbalance
  after it, ties by (sid, source, target) on the imbalance truncated to 15 significant
  digits, as PVE orders them.
* ``select_topsis``: the migration whose resulting cluster state ranks first under
  TOPSIS with PVE's four criteria (``keel.balance.topsis``).
* ``score_nodes_to_start``: TOPSIS scores of the nodes to start (or recover) a resource on.
* ``AutoRebalancer``: the per-round gate (skip while anything moves, threshold with a
  hold counter, relative margin) in front of the selection.

Candidates (which bundles may go where under HA rules) come from
``keel.balance.pvecrs_rules``; node usage bookkeeping from ``keel.balance.pvecrs_usage``.

>>> nodes = [NodeStats("node1", cpu=4.0, maxcpu=24, mem=16 * GiB, maxmem=32 * GiB),
...          NodeStats("node2", cpu=0.0, maxcpu=24, mem=0, maxmem=32 * GiB),
...          NodeStats("node3", cpu=0.0, maxcpu=24, mem=0, maxmem=32 * GiB)]
>>> round(node_imbalance(nodes), 2), round(node_imbalance(nodes, normalised=False), 2)
(1.0, 1.41)
>>> vm = ResourceStats(cpu=1.0, maxcpu=2.0, mem=4 * GiB, maxmem=8 * GiB)
>>> candidates = [MigrationCandidate(Migration(sid, "node1", target), vm)
...               for sid in ("vm:101", "vm:102") for target in ("node2", "node3")]
>>> best = select_bruteforce(nodes, candidates, normalised=False)
>>> best.migration, round(best.imbalance, 2)
(Migration(sid='vm:101', source='node1', target='node2'), 0.94)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence, Union

from keel.balance.metrics import coefficient_of_variation, node_load, pve_imbalance
from keel.balance.topsis import PVE_CRITERIA, pve_alternative, rank_alternatives, score_alternatives
from keel.model import CrsOptions

GiB = 1024**3
METHODS = ("bruteforce", "topsis")


@dataclass(frozen=True)
class NodeStats:
    """A node's usage: ``cpu`` in cores used, ``maxcpu`` threads, ``mem``/``maxmem`` bytes."""

    name: str
    cpu: float
    maxcpu: int
    mem: float
    maxmem: int

    @property
    def cpu_load(self) -> float:
        return self.cpu / self.maxcpu if self.maxcpu else 0.0

    @property
    def mem_load(self) -> float:
        return self.mem / self.maxmem if self.maxmem else 0.0

    @property
    def load(self) -> float:
        return node_load(self.cpu_load, self.mem_load)

    def with_started(self, res: ResourceStats) -> NodeStats:
        """As if ``res`` were started here at its configured size (``maxcpu`` 0 = whole node)."""
        cpu = res.maxcpu if res.maxcpu != 0 else float(self.maxcpu)
        return replace(self, cpu=self.cpu + cpu, mem=self.mem + res.maxmem)

    def with_running(self, res: ResourceStats) -> NodeStats:
        """As if ``res`` ran here with its current usage."""
        return replace(self, cpu=self.cpu + res.cpu, mem=self.mem + res.mem)

    def without_running(self, res: ResourceStats) -> NodeStats:
        """As if ``res`` stopped running here (floored at zero, as PVE does)."""
        return replace(self, cpu=max(0.0, self.cpu - res.cpu), mem=max(0, self.mem - res.mem))


@dataclass(frozen=True)
class ResourceStats:
    """A guest's usage: ``cpu`` cores used and ``maxcpu`` assigned, ``mem``/``maxmem`` bytes.

    In static mode usage is the configured size: use ``ResourceStats.configured``.
    """

    cpu: float = 0.0
    maxcpu: float = 0.0
    mem: float = 0
    maxmem: float = 0

    @classmethod
    def configured(cls, maxcpu: float, maxmem: float) -> ResourceStats:
        return cls(cpu=maxcpu, maxcpu=maxcpu, mem=maxmem, maxmem=maxmem)

    def __add__(self, other: ResourceStats) -> ResourceStats:
        return ResourceStats(self.cpu + other.cpu, self.maxcpu + other.maxcpu,
                             self.mem + other.mem, self.maxmem + other.maxmem)


@dataclass(frozen=True, order=True)
class Migration:
    """Move the bundle led by ``sid`` from ``source`` to ``target``. Orders as PVE breaks ties."""

    sid: str
    source: str
    target: str


@dataclass(frozen=True)
class MigrationCandidate:
    """A possible migration and the summed stats of everything that moves with it."""

    migration: Migration
    stats: ResourceStats


@dataclass(frozen=True)
class ScoredMigration:
    """A migration and the imbalance expected after it (truncated as PVE truncates it)."""

    migration: Migration
    imbalance: float

    @classmethod
    def of(cls, migration: Migration, imbalance: float) -> ScoredMigration:
        return cls(migration, truncate_digits(imbalance))

    def sort_key(self) -> tuple[float, Migration]:
        return (self.imbalance, self.migration)


def truncate_digits(value: float, digits: int = 15) -> float:
    """Drop the digits beyond f64's 15 significant ones, so near-equal imbalances tie.

    >>> truncate_digits(0.7231749488916931) == truncate_digits(0.723174948891693)
    True
    """
    factor = 10.0**digits
    return math.trunc(factor * value) / factor


def imbalance_of_loads(loads: Sequence[float], normalised: bool = True) -> float:
    if normalised:
        return pve_imbalance(loads)
    if len(loads) < 2 or sum(loads) == 0.0:
        return 0.0
    return coefficient_of_variation(loads)


def node_imbalance(nodes: Sequence[NodeStats], normalised: bool = True) -> float:
    """The CRS imbalance of ``nodes`` (see the module docstring for ``normalised``)."""
    return imbalance_of_loads([n.load for n in nodes], normalised)


def nodes_after(nodes: Sequence[NodeStats], candidate: MigrationCandidate) -> list[NodeStats]:
    """The node stats as if the candidate had moved with the same usage."""
    m, res = candidate.migration, candidate.stats
    out = []
    for node in nodes:
        if node.name == m.source:
            node = node.without_running(res)
        elif node.name == m.target:
            node = node.with_running(res)
        out.append(node)
    return out


def imbalance_after(nodes: Sequence[NodeStats], candidate: MigrationCandidate,
                    normalised: bool = True) -> float:
    return node_imbalance(nodes_after(nodes, candidate), normalised)


def score_bruteforce(nodes: Sequence[NodeStats], candidates: Iterable[MigrationCandidate],
                     normalised: bool = True, limit: int | None = None) -> list[ScoredMigration]:
    """Every candidate with its resulting imbalance, best first (PVE's exhaustive search)."""
    scored = sorted((ScoredMigration.of(c.migration, imbalance_after(nodes, c, normalised))
                     for c in candidates), key=ScoredMigration.sort_key)
    return scored if limit is None else scored[:limit]


def select_bruteforce(nodes: Sequence[NodeStats], candidates: Iterable[MigrationCandidate],
                      normalised: bool = True) -> ScoredMigration | None:
    best = score_bruteforce(nodes, candidates, normalised, limit=1)
    return best[0] if best else None


def rank_topsis(nodes: Sequence[NodeStats],
                candidates: Sequence[MigrationCandidate]) -> list[int]:
    """Candidate indices, best first, by TOPSIS over the states the migrations lead to."""
    matrix = [pve_alternative((n.cpu_load, n.mem_load) for n in nodes_after(nodes, c))
              for c in candidates]
    return rank_alternatives(matrix, PVE_CRITERIA)


def select_topsis(nodes: Sequence[NodeStats], candidates: Iterable[MigrationCandidate],
                  normalised: bool = True) -> ScoredMigration | None:
    """PVE's ``topsis`` method: the best-ranked migration, with its resulting imbalance."""
    candidates = list(candidates)
    if not candidates:
        return None
    best = candidates[rank_topsis(nodes, candidates)[0]]
    return ScoredMigration.of(best.migration, imbalance_after(nodes, best, normalised))


def score_nodes_to_start(nodes: Sequence[NodeStats], stats: ResourceStats) -> dict[str, float]:
    """TOPSIS score per node (higher is better) for starting a resource of ``stats`` on it.

    Each alternative is the whole cluster with the resource added at its configured size
    to one node.  PVE picks the highest score, ties by node name.

    >>> nodes = [NodeStats("a", 0.0, 8, 0, 16 * GiB), NodeStats("b", 4.0, 8, 8 * GiB, 16 * GiB)]
    >>> best_start_node(score_nodes_to_start(nodes, ResourceStats.configured(2, 4 * GiB)))
    'a'
    """
    matrix = []
    for chosen in nodes:
        state = [n.with_started(stats) if n.name == chosen.name else n for n in nodes]
        matrix.append(pve_alternative((n.cpu_load, n.mem_load) for n in state))
    scores = score_alternatives(matrix, PVE_CRITERIA)
    return {node.name: score for node, score in zip(nodes, scores)}


def best_start_node(scores: Mapping[str, float]) -> str | None:
    ranked = sorted(scores, key=lambda name: (-scores[name], name))
    return ranked[0] if ranked else None


@dataclass(frozen=True)
class RebalanceSettings:
    """The ``crs`` auto-rebalance options, as fractions.

    The defaults are pve-ha-manager 5.2.0's (threshold 0.3, hold 3 rounds, margin 0.1,
    raw imbalance), the release the conformance cases come from.  PVE 9.2 takes
    percents in datacenter.cfg and compares them with the normalised imbalance:
    ``RebalanceSettings.from_percent(30, 10)``.
    """

    threshold: float = 0.3
    hold_duration: int = 3
    margin: float = 0.1
    method: str = "bruteforce"
    normalised: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown auto-rebalance method {self.method!r}")

    @classmethod
    def from_crs(cls, crs: CrsOptions, normalised: bool) -> RebalanceSettings:
        """From a snapshot's ``crs`` options (already fractions); ``normalised`` for PVE >= 9.2."""
        return cls(crs.auto_rebalance_threshold, int(crs.auto_rebalance_hold_duration),
                   crs.auto_rebalance_margin, crs.auto_rebalance_method, normalised)

    @classmethod
    def from_percent(cls, threshold_pct: float = 30, margin_pct: float = 10,
                     hold_duration: int = 3, method: str = "bruteforce") -> RebalanceSettings:
        return cls(threshold_pct / 100.0, hold_duration, margin_pct / 100.0, method, True)


class AutoRebalanceGate:
    """PVE's round gate: one motion at a time, a sustained threshold, a relative margin.

    ``opens(imbalance, busy)`` is called once per round.  While any HA resource moves
    (``busy``) it answers no and leaves the counter alone; at or below the threshold it
    resets the counter; above it the counter counts rounds and the gate opens (and the
    counter resets) once it reaches ``hold_duration``.  The counter lives in memory only,
    as in PVE, where a CRM failover resets it.

    >>> gate = AutoRebalanceGate(RebalanceSettings(hold_duration=3))
    >>> [gate.opens(0.9) for _ in range(4)]
    [False, False, True, False]
    >>> gate.accepts(1.0, 0.95), gate.accepts(1.0, 0.8)
    (False, True)
    """

    def __init__(self, settings: RebalanceSettings = RebalanceSettings()) -> None:
        self.settings = settings
        self.sustained_rounds = 0

    def opens(self, imbalance: float, busy: bool = False) -> bool:
        if busy:
            return False
        if imbalance <= self.settings.threshold:
            self.sustained_rounds = 0
            return False
        self.sustained_rounds += 1
        if self.sustained_rounds < self.settings.hold_duration:
            return False
        self.sustained_rounds = 0
        return True

    def accepts(self, imbalance: float, target_imbalance: float) -> bool:
        """Whether the move cuts the imbalance by at least the margin (relative)."""
        return (imbalance - target_imbalance) / imbalance >= self.settings.margin


@dataclass(frozen=True)
class RebalanceDecision:
    """A migration the auto-rebalancer commits to, and the imbalance it expects."""

    migration: Migration
    imbalance: float
    target_imbalance: float

    @property
    def command(self) -> str:
        """``migrate`` for VMs (live), ``relocate`` (stop, move, start) for containers."""
        return "migrate" if self.migration.sid.startswith("vm:") else "relocate"

    def message(self) -> str:
        """The line PVE's CRM logs for this decision."""
        m = self.migration
        return (f"auto rebalance - {self.command} {m.sid} to {m.target} (expected change for "
                f"imbalance from {self.imbalance:.2f} to {self.target_imbalance:.2f})")


Candidates = Union[Sequence[MigrationCandidate], Callable[[], Sequence[MigrationCandidate]]]


class AutoRebalancer:
    """One PVE auto-rebalance decision per round: gate, select, margin.

    ``candidates`` may be a callable, evaluated only when the gate opens (PVE builds
    them only then).

    >>> nodes = [NodeStats("n1", 4.0, 24, 16 * GiB, 32 * GiB),
    ...          NodeStats("n2", 0.0, 24, 0, 32 * GiB), NodeStats("n3", 0.0, 24, 0, 32 * GiB)]
    >>> vm = ResourceStats(1.0, 2.0, 4 * GiB, 8 * GiB)
    >>> cands = [MigrationCandidate(Migration("vm:101", "n1", t), vm) for t in ("n2", "n3")]
    >>> balancer = AutoRebalancer(RebalanceSettings(hold_duration=1))
    >>> balancer.round(nodes, cands).message()
    'auto rebalance - migrate vm:101 to n2 (expected change for imbalance from 1.41 to 0.94)'
    """

    def __init__(self, settings: RebalanceSettings = RebalanceSettings()) -> None:
        self.settings = settings
        self.gate = AutoRebalanceGate(settings)

    def select(self, nodes: Sequence[NodeStats],
               candidates: Sequence[MigrationCandidate]) -> ScoredMigration | None:
        if self.settings.method == "topsis":
            return select_topsis(nodes, candidates, self.settings.normalised)
        return select_bruteforce(nodes, candidates, self.settings.normalised)

    def round(self, nodes: Sequence[NodeStats], candidates: Candidates,
              busy: bool = False) -> RebalanceDecision | None:
        imbalance = node_imbalance(nodes, self.settings.normalised)
        if not self.gate.opens(imbalance, busy):
            return None
        found = self.select(nodes, candidates() if callable(candidates) else candidates)
        if found is None or not self.gate.accepts(imbalance, found.imbalance):
            return None
        return RebalanceDecision(found.migration, imbalance, found.imbalance)
