"""The planner's scores for every (unit, node) move, kept up move by move, and the move
that cools the hottest node when no move lowers the objective enough."""

from __future__ import annotations

import copy

import numpy as np

from keel import words
from keel.balance.level import node_excess
from keel.balance.loads import LoadModel
from keel.balance.moving import move_unit
from keel.balance.plan import Move
from keel.balance.rules import Unit
from keel.balance.settings import BalancingSettings

PEAK_STEP = 0.001            # a peak move must lower the hottest node by 0.1 point at least


def _pct(model: LoadModel, node: str) -> str:
    u = model.utilisation()[model.index[node]]
    return f"(cpu {u[0]:.0%}, mem {u[1]:.0%})"


class _Scorer:
    """(score, gain) for every (unit, node): gain = −ΔF, score = gain / cost; −inf where the
    move is not allowed.  What does not change between moves (each unit's share of every
    node, its square) is computed once.  After a single move (``moved``) only what it
    changed is computed again: the rows of the units on its two nodes and the two nodes'
    columns (F is a sum over nodes and the level is fixed, so no other entry changes); any
    other change of the working state (``refresh``) has the next ``scores`` compute all.
    What ``scores`` returns is the scorer's own: read it, copy it to change it."""

    def __init__(self, model: LoadModel, units: list[Unit], demand: np.ndarray, allowed: np.ndarray,
                 footprint: np.ndarray, cost: np.ndarray, anti: dict[str, set[str]],
                 placed: dict[str, str]):
        self.model, self.units, self.demand, self.allowed = model, units, demand, allowed
        self.footprint, self.cost, self.anti, self.placed = footprint, cost, anti, placed
        w = model.weights
        share = demand[:, None, :] / model.cap[None, :, :]                # U x N x R
        self.share = share
        self.share_w = share * w                                          # U x N x R
        self.share_sq = (share ** 2 * w).sum(axis=2)                      # U x N
        self.with_anti = [row for row, u in enumerate(units) if anti.get(u.key)]
        self.with_soft = [row for row, u in enumerate(units) if u.soft_away]
        self.special = np.array(sorted(set(self.with_anti) | set(self.with_soft)), dtype=int)
        self.anti_rows = set(self.with_anti)
        self.rows = np.arange(len(units))
        self._ready = False
        self._pending: list[tuple[int, int, int]] = []
        self.incremental = True        # a fork (a playout moves its units itself) computes all
        self.refresh()

    def refresh(self) -> None:
        self.cur = np.array([self.model.index[self.placed[u.key]] for u in self.units], dtype=int)
        self._ready = False

    def fork(self) -> "_Scorer":
        """The same scorer over a copy of its working state (the model, where each unit is),
        for looking ahead without touching the plan."""
        trial = copy.copy(self)
        trial.model, trial.cur, trial.placed = self.model.copy(), self.cur.copy(), dict(self.placed)
        trial._ready, trial._pending, trial.incremental = False, [], False
        return trial

    def forbid(self, row: int, col: int) -> None:
        """The unit may not go to that node after all (PVE would refuse it, or it came from there)."""
        self.allowed[row, col] = False
        if self._ready:
            self._base_feasible[row, col] = False
            self._view(np.array([row]), None)

    def moved(self, row: int, source: int, target: int) -> None:
        """``row`` went from ``source`` to ``target`` (model and ``cur`` already updated)."""
        if self._ready:
            self._pending.append((row, source, target))

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        model = self.model
        if not len(self.rows):
            return np.zeros((0, len(model.nodes))), np.zeros((0, len(model.nodes)))
        if not self._ready or not self.incremental:
            self._pending = []
            self._d_source = self._source_terms(self.rows)
            self._d_target = self._target_terms(self.rows, None)
            self._base_feasible = self._feasibility(self.rows, None)
            self.gain = np.empty_like(self._d_target)
            self.feasible = np.empty_like(self._base_feasible)
            self.score = np.empty_like(self._d_target)
            self._view(self.rows, None)
            self._ready = True
        else:
            for row, source, target in self._pending:
                self._update(source, target)
            self._pending = []
            if len(self.special):
                self._view(self.special, None)
        if not self.incremental:
            return self.score.copy(), self.gain.copy()
        return self.score, self.gain

    def _view(self, rows: np.ndarray, cols: np.ndarray | None) -> None:
        """gain, feasible and score of ``rows`` × ``cols`` (None: all) from the base terms,
        with anti-affinity and soft rules on top."""
        if cols is None:
            gain = -(self._d_source[rows][:, None] + self._d_target[rows])
            feasible = self._base_feasible[rows].copy()
        else:
            gain = -(self._d_source[rows][:, None] + self._d_target[np.ix_(rows, cols)])
            feasible = self._base_feasible[np.ix_(rows, cols)].copy()
        model = self.model
        hits = np.flatnonzero(np.isin(rows, self.special)) if len(self.special) else ()
        for k in hits:
            row = int(rows[k])
            if row in self.anti_rows:
                free = self._anti_free(row)
                feasible[k] &= free if cols is None else free[cols]
            if self.units[row].soft_away:
                full = -(self._d_source[row] + self._d_target[row])
                for node in self.units[row].soft_away:
                    if node in model.index:
                        j = model.index[node]
                        if cols is None:
                            gain[k, j] -= abs(full).max() * 0.5
                        elif j in cols:
                            gain[k, list(cols).index(j)] -= abs(full).max() * 0.5
        score = np.where(feasible & (gain > 0), gain / self.cost[rows][:, None], -np.inf)
        if cols is None:
            self.gain[rows], self.feasible[rows], self.score[rows] = gain, feasible, score
        else:
            self.gain[np.ix_(rows, cols)] = gain
            self.feasible[np.ix_(rows, cols)] = feasible
            self.score[np.ix_(rows, cols)] = score


    def _source_terms(self, rows: np.ndarray) -> np.ndarray:
        """ΔF of each unit of ``rows`` leaving the node it is on."""
        model, cur = self.model, self.cur[rows]
        dev = model.utilisation() - model.fluid()                          # N x R
        return (self.share_sq[rows, cur]
                - 2 * np.einsum("ur,ur->u", self.share_w[rows, cur], dev[cur])) * model.eligible[cur]

    def _target_terms(self, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
        """ΔF of each unit of ``rows`` arriving on each node of ``cols`` (None: all)."""
        model = self.model
        dev = model.utilisation() - model.fluid()
        if cols is None:
            return self.share_sq[rows] + 2 * np.einsum("unr,nr->un", self.share_w[rows], dev)
        return (self.share_sq[np.ix_(rows, cols)]
                + 2 * np.einsum("unr,nr->un", self.share_w[np.ix_(rows, cols)], dev[cols]))

    def _feasibility(self, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
        model = self.model
        index = np.arange(len(model.nodes)) if cols is None else cols
        feasible = self.allowed[np.ix_(rows, index)].copy()
        feasible &= self.cur[rows][:, None] != index[None, :]
        feasible &= (model.mem_used[index][None, :] + self.footprint[rows][:, None]) <= model.mem_cap[index][None, :]
        return feasible

    def _anti_free(self, row: int) -> np.ndarray:
        free = np.ones(len(self.model.nodes), dtype=bool)
        for other in self.anti[self.units[row].key]:
            node = self.placed.get(other)
            if node is not None and node in self.model.index:
                free[self.model.index[node]] = False
        return free

    def _update(self, source: int, target: int) -> None:
        model = self.model
        dev = model.utilisation() - model.fluid()
        for c in (source, target):
            # one node's column for every unit: views and a matrix-vector product, no copies
            self._d_target[:, c] = self.share_sq[:, c] + 2 * (self.share_w[:, c, :] @ dev[c])
            self._base_feasible[:, c] = (self.allowed[:, c] & (self.cur != c)
                                         & (model.mem_used[c] + self.footprint <= model.mem_cap[c]))
        rows = np.flatnonzero((self.cur == source) | (self.cur == target))
        if len(rows):
            self._d_source[rows] = self._source_terms(rows)
            self._d_target[rows] = self._target_terms(rows, None)
            self._base_feasible[rows] = self._feasibility(rows, None)
        for c in (source, target):
            gain = -(self._d_source + self._d_target[:, c])
            feasible = self._base_feasible[:, c]
            self.gain[:, c] = gain
            self.feasible[:, c] = feasible
            self.score[:, c] = np.where(feasible & (gain > 0), gain / self.cost, -np.inf)
        if len(rows):
            self._view(rows, None)
        # the rows of units with anti-affinity or soft rules are laid over by ``scores``


def _peak_move(model: LoadModel, scorer: "_Scorer", units: list[Unit], placed: dict[str, str],
               moves: list[Move], ceiling: float, fits: np.ndarray,
               settings: BalancingSettings) -> int | None:
    """When no move cuts the objective enough and a node is still hot by itself (above the
    hotspot, or more than ``above_mean`` above the mean): a move off the hottest node that
    leaves both nodes it touches below where the hottest was, makes no node fuller than
    the fullest is, and keeps the objective under ``ceiling``.  Returns the unit's row, or
    None."""
    if not len(units):
        return None
    _, gain = scorer.scores()
    u = model.utilisation()
    weighted = model.weights > 0
    if not weighted.any():
        return None
    excess = node_excess(model, settings, u)
    hot = int(np.argmax(excess))
    peak = float(excess[hot])
    if peak <= 1e-12:
        return None
    rows = np.flatnonzero((scorer.cur == hot) & fits)
    if not len(rows):
        return None
    # a node's excess is max over weighted r of u_r − bound_r, bound_r the lower of
    # mean + above_mean and the hotspot (where the cluster is not full)
    fluid = model.fluid()
    bound = np.full(len(fluid), np.inf)
    if settings.above_mean is not None:
        bound = np.minimum(bound, fluid + settings.above_mean)
    if settings.hotspot is not None:
        bound = np.minimum(bound, np.where(fluid < settings.hotspot, settings.hotspot, np.inf))
    share = scorer.share[rows]                                             # r x N x R
    new_target = (u[None, :, :] + share - bound)[:, :, weighted].max(axis=2)   # r x N
    new_source = (u[hot][None, :] - share[:, hot, :] - bound)[:, weighted].max(axis=1)
    after = np.maximum(new_target, new_source[:, None])
    # ... and it does not make any node fuller than the fullest one is now
    fullest = float(np.where(model.eligible[:, None], u, -np.inf)[:, weighted].max())
    target_use = (u[None, :, :] + share)[:, :, weighted].max(axis=2)          # r x N
    ok = (scorer.feasible[rows] & (after < peak - PEAK_STEP) & (target_use <= fullest + 1e-12)
          & (model.objective() - gain[rows] <= ceiling))
    if not ok.any():
        return None
    choice = np.where(ok, gain[rows], -np.inf)
    r, col = np.unravel_index(int(np.argmax(choice)), choice.shape)
    row = int(rows[r])
    unit = units[row]
    move_unit(model, unit, model.nodes[col], words.BALANCE,
              f"cools the hottest node, {unit.node} {_pct(model, unit.node)}", placed, moves,
              float(gain[row, col]))
    scorer.cur[row] = col
    return row
