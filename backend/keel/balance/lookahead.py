"""Looking a few moves ahead before making one (a rollout of the greedy choice).

Greedy best-gain-per-GiB can take a cheap move that leaves no good follow-up, where a
dearer one would have levelled the cluster with fewer GiB in all: on three nodes, a 9-GiB
guest, small ones after it and swaps at the end (28 GiB), where one 16-GiB guest and a
few small ones do it (23 GiB).  So, while the cluster is small enough for it, each move
of the balance phase is chosen like this:

1. the greedy choice is played on, on a copy of the working state, for up to
   ``HORIZON`` moves, until the figure is at its target, or the plan's budget is spent.
   If it gets there, or is still going at the horizon, the greedy choice is made;
2. if it runs into a dead end instead (no single move worth making, short of the
   target: what is left needs compound moves), the best few other moves, by gain per
   GiB and by gain alone, are played on the same way;
3. the level every path that did not run into a dead end reaches (all of them, if each
   did) is the yardstick: the path that gets there for the fewest GiB (migration cost:
   memory, local disk, and a fixed cost per move) wins; on a tie, the greedy choice.

Only the winner's first move is made; the next is chosen afresh.  Looking ahead costs
up to ``2 × CANDIDATES × HORIZON`` scoring passes a move, so it is used only while units
× nodes is at most ``MAX_CELLS`` (a 64 × 10,000 plan stays greedy, and within its time).
Only when the greedy path is stuck does it change anything, so the first, cheapest moves
of a plan, the ones that do most per GiB, stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from keel.balance.loads import LoadModel

HORIZON = 8
CANDIDATES = 4               # best moves by gain per GiB, and as many by gain alone
NEAR_BEST = 0.9              # moves within 10 % of the best gain per GiB count as as good
MAX_CELLS = 20_000
HEAT_TIE = 0.01              # moves whose nodes are this close (1 point) count as as extreme


@dataclass
class Budget:
    """A plan's limits on moves and bytes, and what the moves so far have used.  A unit
    that moves twice counts once."""
    moves: int
    bytes: int
    guests: np.ndarray           # U: guests in each unit
    size: np.ndarray             # U: memory + local disk bytes each unit takes along
    moved: np.ndarray            # U bool
    used_moves: int = 0
    used_bytes: int = 0

    def fits(self) -> np.ndarray:
        """U bool: the units that can still move within the limits."""
        return ((self.used_moves + np.where(self.moved, 0, self.guests) <= self.moves)
                & (self.used_bytes + self.size <= self.bytes))

    def take(self, row: int) -> None:
        if not self.moved[row]:
            self.used_moves += int(self.guests[row])
            self.used_bytes += int(self.size[row])
            self.moved[row] = True

    @property
    def spent(self) -> bool:
        return self.used_moves >= self.moves or self.used_bytes >= self.bytes

    def copy(self) -> "Budget":
        return Budget(self.moves, self.bytes, self.guests, self.size, self.moved.copy(),
                      self.used_moves, self.used_bytes)


def greedy_pick(score: np.ndarray, gain: np.ndarray, heat: np.ndarray | None = None,
                cur: np.ndarray | None = None) -> tuple[int, int] | None:
    """The greedy choice: of the moves about as good per GiB as the best, the one that does
    most (fewer migrations for the same GiB); with ``heat`` (per node, how far it is above
    the level) and ``cur`` (each unit's node), the one from the hottest node to the coolest
    among them first: the extremes go first, as the spread and the peak want.  None when no
    move is allowed."""
    if not score.size:
        return None
    flat = score.ravel()
    top = int(np.argmax(flat))
    if not np.isfinite(flat[top]):
        return None
    near = np.flatnonzero(flat >= flat[top] * NEAR_BEST)
    gains = gain.ravel()[near]
    if heat is not None and cur is not None and len(near) > 1:
        rows, cols = np.divmod(near, score.shape[1])
        spread = heat[cur[rows]] - heat[cols]
        best = spread.max()
        gains = np.where(spread >= best - HEAT_TIE, gains, -np.inf)
    pick = int(near[int(np.argmax(gains))])
    row, col = divmod(pick, score.shape[1])
    return row, col


def applies(model: LoadModel, rows: int) -> bool:
    return rows * int(model.eligible.sum()) <= MAX_CELLS


def choose(scorer, score: np.ndarray, gain: np.ndarray, first: tuple[int, int], min_gain: float,
           budget: Budget, done: Callable[[LoadModel], bool]) -> tuple[int, int]:
    """The move to make now: ``first`` (the greedy choice) unless a playout from another
    candidate levels the cluster for fewer GiB.  ``score`` must already be −inf where the
    budget does not allow a move; ``done`` says when the figure is at its target."""
    greedy = _playout(scorer, first, budget, min_gain, done)
    if not greedy[1]:
        return first                 # the greedy path does not run into a dead end
    candidates = _candidates(score, gain, first, min_gain)
    curves = [greedy] + [_playout(scorer, move, budget, min_gain, done) for move in candidates[1:]]
    open_ended = [curve for curve, stalled in curves if not stalled]
    level = max(curve[-1][1] for curve in (open_ended or [curve for curve, _ in curves]))
    costs = [_cost_to(curve, level) for curve, _ in curves]
    best = min(range(len(candidates)), key=lambda i: (costs[i], curves[i][0][-1][1], i))
    return candidates[best] if costs[best] < costs[0] - 1e-9 else first


def _candidates(score: np.ndarray, gain: np.ndarray, first: tuple[int, int],
                min_gain: float) -> list[tuple[int, int]]:
    worth = np.isfinite(score) & (gain >= min_gain)
    found = [first]
    for ranking in (score, gain):
        flat = np.where(worth, ranking, -np.inf).ravel()
        if not flat.size:
            continue
        top = np.argpartition(-flat, min(CANDIDATES, flat.size - 1))[:CANDIDATES + 1]
        for index in sorted(top, key=lambda i: -flat[i]):
            if not np.isfinite(flat[index]):
                continue
            move = tuple(int(x) for x in np.unravel_index(int(index), score.shape))
            if move not in found:
                found.append(move)
    return found


def _playout(scorer, move: tuple[int, int], budget: Budget, min_gain: float,
             done: Callable[[LoadModel], bool]) -> tuple[list[tuple[float, float]], bool]:
    """(cost so far, objective) after each move of the playout that begins with ``move``,
    and whether it stalled: stopped short of its target and its horizon with no move
    worth making left (a budget spent is not a stall: later rounds go on)."""
    trial = scorer.fork()
    spend = budget.copy()
    cost, curve = 0.0, [(0.0, trial.model.objective())]
    for step in range(HORIZON):
        if step:
            if done(trial.model) or spend.spent:
                return curve, False
            score, gains = trial.scores()
            score[~spend.fits(), :] = -np.inf
            move = greedy_pick(score, gains)
            if move is None or gains[move] < min_gain:
                return curve, True
        row, col = move
        unit = trial.units[row]
        trial.model.move(unit.vmids, trial.model.nodes[trial.cur[row]], trial.model.nodes[col])
        trial.cur[row] = col
        trial.placed[unit.key] = trial.model.nodes[col]
        spend.take(row)
        cost += float(trial.cost[row])
        curve.append((cost, trial.model.objective()))
    return curve, False


def _cost_to(curve: list[tuple[float, float]], level: float) -> float:
    """What the playout pays until its objective is at or below ``level`` (inf: never)."""
    for cost, value in curve:
        if value <= level * (1 + 1e-9):
            return cost
    return float("inf")
