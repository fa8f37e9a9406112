"""The reference for the planner benchmark: the best final placement a MILP solver finds.

``solve(snapshot, settings)`` asks scipy's HiGHS (``scipy.optimize.milp``) where every
guest should end up.  What it models, from Keel's own rule compiler and load model, so
that both answer the same question:

* a binary ``x[unit, node]`` for every unit that may move (a guest, or an affinity bundle
  that moves as one) and every node it may go to (pins, HA rules, not a node in
  maintenance, not a node holding a fixed member of its anti-affinity group); units that
  may not move (locked, ignored, stopped) stay where they are and count as load;
* every unit on exactly one node;
* memory: each node's used memory at most ``(total − reserve) × (1 − headroom)``, Keel's
  limit;
* anti-affinity: at most one member of a group per node;
* utilisation of CPU and memory (Keel's weights) on every eligible node at most ``z``.

Stage 1 minimises ``z``, the peak.  Peak-optimal placements are many, and most are badly
levelled below the peak, so stage 2 keeps ``z`` at its optimum and minimises the weighted
sum of every node's distance from the level (|u − ū|, a linear stand-in for Keel's
quadratic figure); Keel's figure of that solution is the imbalance reference.  Stage 3,
on its own, minimises the spread (max − min, ProxLB's "balanciness") per resource.

What it does not model: the order of the moves (memory held on two nodes during a
migration, parking), what moving costs, per-round limits, cooldown and ping-pong.  It
is the best end state, not a plan; Keel is compared with it with its limits lifted.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from keel.balance import loads
from keel.balance.history import History
from keel.balance.rules import compile_rules
from keel.balance.settings import BalancingSettings
from keel.model import Snapshot

STATUS = {0: "optimal", 1: "timeout", 2: "infeasible", 3: "unbounded", 4: "failed"}
MIP_GAP = 1e-3              # "optimal": proven within 0.1 %


@dataclass
class Stage:
    status: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    seconds: float = 0.0
    keel: float | None = None          # Keel's figure of the solution
    pve: float | None = None
    peak: float | None = None
    spread: dict = field(default_factory=dict)
    moved_gib: float | None = None     # memory that would move to get there

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    def to_json(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass
class Reference:
    units: int
    variables: int
    peak: Stage                        # stage 1 (min peak), figures of its solution
    level: Stage | None = None         # stage 2 (min L1 distance from the level at that peak)
    spread: Stage | None = None        # stage 3 (min max-min)

    def to_json(self) -> dict:
        return {"units": self.units, "variables": self.variables, "peak": self.peak.to_json(),
                "level": self.level.to_json() if self.level else None,
                "spread": self.spread.to_json() if self.spread else None}


class _Problem:
    def __init__(self, snapshot: Snapshot, settings: BalancingSettings):
        cons = compile_rules(snapshot, settings, History(), snapshot.taken_at)
        model = loads.build(snapshot, settings, cons.eligible)
        self.snapshot, self.model = snapshot, model
        self.free = [u for u in cons.units if (u.balance or u.mandatory) and u.allowed]
        self.elig = [i for i in range(len(model.nodes)) if model.eligible[i]]
        self.res = [r for r in range(len(loads.RESOURCES)) if model.weights[r] > 0]
        base, mem_base = model.load.copy(), model.mem_used.astype(float).copy()
        for unit in self.free:
            for g in unit.guests:
                i = model.index[g.node]
                base[i] -= model.demand[g.vmid]
                mem_base[i] -= model.footprint[g.vmid]
        self.base, self.mem_base = base, mem_base
        self.cols: list[tuple[int, int]] = []          # (unit row, node index)
        for row, unit in enumerate(self.free):
            for name in sorted(unit.allowed):
                i = model.index.get(name)
                if i is not None and model.eligible[i]:
                    self.cols.append((row, i))
        self.nx = len(self.cols)
        self.by_unit: dict[int, list[int]] = {}
        self.by_node: dict[int, list[int]] = {}
        for col, (row, i) in enumerate(self.cols):
            self.by_unit.setdefault(row, []).append(col)
            self.by_node.setdefault(i, []).append(col)
        self.demand = np.array([model.unit_demand(u.vmids) for u in self.free]
                               or np.zeros((0, len(loads.RESOURCES))))
        self.fp = np.array([model.unit_footprint(u.vmids) for u in self.free], dtype=float)
        e = self.elig
        self.fluid = (base[e].sum(axis=0) + self.demand.sum(axis=0)) / model.cap[e].sum(axis=0)
        self.anti = []
        keys = {u.key: row for row, u in enumerate(self.free)}
        fixed_node = {u.key: u.node for u in cons.units if u.key not in keys}
        for _, members in cons.anti_groups:
            rows = {keys[k] for k in members if k in keys}
            taken = {fixed_node[k] for k in members if k in fixed_node}
            if len(rows) > 1 or taken:
                self.anti.append((rows, taken))

    def rows(self) -> tuple[list, list, list, list, list]:
        """The constraints every stage shares, over the x-columns: (row, col, value)
        triplets and the lower and upper bound of each row."""
        r, c, v, lo, hi = [], [], [], [], []
        n_rows = 0
        by_unit, by_node = self.by_unit, self.by_node
        for row in range(len(self.free)):                 # each unit on one node
            for col in by_unit.get(row, []):
                r.append(n_rows), c.append(col), v.append(1.0)
            lo.append(1.0), hi.append(1.0)
            n_rows += 1
        m = self.model
        for i in self.elig:                               # memory limit
            for col in by_node.get(i, []):
                r.append(n_rows), c.append(col), v.append(self.fp[self.cols[col][0]])
            lo.append(-np.inf), hi.append(float(m.mem_cap[i] - self.mem_base[i]))
            n_rows += 1
        for rows, taken in self.anti:                      # anti-affinity
            for i in self.elig:
                cols = [col for col in by_node.get(i, []) if self.cols[col][0] in rows]
                if not cols:
                    continue
                for col in cols:
                    r.append(n_rows), c.append(col), v.append(1.0)
                lo.append(-np.inf), hi.append(0.0 if m.nodes[i] in taken else 1.0)
                n_rows += 1
        return r, c, v, lo, hi

    def util_terms(self, i: int, res: int) -> tuple[list[int], list[float], float]:
        """Utilisation of resource ``res`` on node ``i`` = Σ coef·x + const."""
        cap = self.model.cap[i][res]
        cols = self.by_node.get(i, [])
        return cols, [self.demand[self.cols[col][0]][res] / cap for col in cols], self.base[i][res] / cap

    def solve(self, objective: np.ndarray, r, c, v, lo, hi, n_extra: int, extra_bounds, limit: float):
        n = self.nx + n_extra
        a = coo_array((v, (r, c)), shape=(len(lo), n)).tocsr()
        integrality = np.concatenate([np.ones(self.nx), np.zeros(n_extra)])
        lb = np.concatenate([np.zeros(self.nx), [b[0] for b in extra_bounds]])
        ub = np.concatenate([np.ones(self.nx), [b[1] for b in extra_bounds]])
        start = time.perf_counter()
        with _quiet():
            res = milp(objective, constraints=[LinearConstraint(a, lo, hi)], integrality=integrality,
                       bounds=Bounds(lb, ub), options={"time_limit": max(1.0, limit), "mip_rel_gap": MIP_GAP,
                                                       "disp": False})
        seconds = time.perf_counter() - start
        stage = Stage(STATUS.get(res.status, str(res.status)), seconds=seconds)
        if res.x is not None:
            stage.objective = float(res.fun)
            stage.bound = getattr(res, "mip_dual_bound", None)
            stage.gap = getattr(res, "mip_gap", None)
            self.describe(stage, res.x)
        return stage, res.x

    def describe(self, stage: Stage, x: np.ndarray) -> None:
        trial = self.model.copy()
        moved = 0.0
        chosen = {row: i for col, (row, i) in enumerate(self.cols) if x[col] > 0.5}
        for row, unit in enumerate(self.free):
            target = self.model.nodes[chosen[row]]
            for g in unit.guests:
                if g.node != target:
                    trial.move([g.vmid], g.node, target)
                    moved += self.model.footprint[g.vmid]
        f = trial.figures()
        stage.keel, stage.pve, stage.peak = f.keel, f.pve, f.peak
        stage.spread = {k: round(val, 3) for k, val in f.spread.items() if k in ("cpu", "memory")}
        stage.moved_gib = moved / 1024**3


@contextlib.contextmanager
def _quiet():
    """HiGHS sometimes writes to the process's stdout even with ``disp`` off: send it to
    stderr, so that the benchmark's tables stay clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve(snapshot: Snapshot, settings: BalancingSettings, time_limit: float = 20.0,
          spread: bool = True) -> Reference:
    """Stages 1-3 within ``time_limit`` seconds in all: stage 1 gets up to 60 %, stage 2
    two thirds of what is left, stage 3 the rest."""
    deadline = time.perf_counter() + time_limit
    p = _Problem(snapshot, settings)
    nx = p.nx
    # stage 1: x..., z
    r, c, v, lo, hi = p.rows()
    for i in p.elig:
        for res in p.res:
            cols, coefs, const = p.util_terms(i, res)
            row = len(lo)
            for col, coef in zip(cols, coefs):
                r.append(row), c.append(col), v.append(coef)
            r.append(row), c.append(nx), v.append(-1.0)
            lo.append(-np.inf), hi.append(-const)
    objective = np.zeros(nx + 1)
    objective[nx] = 1.0
    peak, x = p.solve(objective, r, c, v, lo, hi, 1, [(0.0, np.inf)], time_limit * 0.6)
    ref = Reference(len(p.free), nx, peak)
    if x is None:
        return ref

    # stage 2: x..., z, then (plus, minus) per eligible node and weighted resource
    z_max = float(x[nx]) + 1e-7
    r, c, v, lo, hi = p.rows()
    n_dev = 2 * len(p.elig) * len(p.res)
    objective = np.zeros(nx + 1 + n_dev)
    col = nx + 1
    for i in p.elig:
        for res in p.res:
            cols, coefs, const = p.util_terms(i, res)
            peak_row, level_row = len(lo), len(lo) + 1
            for cc, coef in zip(cols, coefs):
                r += [peak_row, level_row]
                c += [cc, cc]
                v += [coef, coef]
            r += [peak_row, level_row, level_row]
            c += [nx, col, col + 1]
            v += [-1.0, -1.0, 1.0]
            lo += [-np.inf, p.fluid[res] - const]
            hi += [-const, p.fluid[res] - const]
            objective[col] = objective[col + 1] = p.model.weights[res]
            col += 2
    left = deadline - time.perf_counter()
    ref.level, _ = p.solve(objective, r, c, v, lo, hi, 1 + n_dev,
                           [(0.0, z_max)] + [(0.0, np.inf)] * n_dev, left * (2 / 3 if spread else 1.0))
    if not spread:
        return ref

    # stage 3: x..., then (hi, lo) per weighted resource
    r, c, v, lo, hi = p.rows()
    objective = np.zeros(nx + 2 * len(p.res))
    for k, res in enumerate(p.res):
        top, bottom = nx + 2 * k, nx + 2 * k + 1
        objective[top], objective[bottom] = p.model.weights[res], -p.model.weights[res]
        for i in p.elig:
            cols, coefs, const = p.util_terms(i, res)
            for sign, extra in ((1.0, top), (-1.0, bottom)):
                row = len(lo)
                for cc, coef in zip(cols, coefs):
                    r.append(row), c.append(cc), v.append(sign * coef)
                r.append(row), c.append(extra), v.append(-sign)
                lo.append(-np.inf), hi.append(-sign * const)
    left = deadline - time.perf_counter()
    if left > 1.0:
        ref.spread, _ = p.solve(objective, r, c, v, lo, hi, 2 * len(p.res),
                                [(-np.inf, np.inf)] * (2 * len(p.res)), left)
    return ref
