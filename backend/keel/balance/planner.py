"""Keel's planner: a whole set of moves per round, each one worth its cost.

1. **Mandatory phase.** Units that must move (their node is in maintenance, or they
   break a rule where they are) go, largest first, to the allowed node where they help
   the balance most, if memory allows.
2. **Balance phase**, when the imbalance is over the threshold or a node is hot by itself
   (above ``hotspot``, or more than ``above_mean`` points above the cluster's mean on a
   weighted resource): greedy best improvement.  Every (unit, node) pair is scored at
   once (numpy): the change of the objective ``F = Σ_r w_r Σ_n (u_nr − ū_r)²``
   (utilisation against the level every node would have if the load were spread
   perfectly), divided by what the move costs (GiB that travel, plus a fixed cost per
   migration); of the moves within 10 % of the best per GiB, the one that does most is
   made (fewer migrations for the same GiB), and again, until the **level** is reached
   (the figure at half the threshold and no node hot by itself), no move cuts F by enough
   (0.2 % of what two average nodes contribute to it), or the plan's move or byte budget
   is spent — then the plan says so and later rounds go on.  Once the cluster is
   balanced (the figure within the threshold, no node hot by itself), the plan goes on
   towards the level only while returns hold: a move (or compound move) that cuts F by
   less than ``RETURNS`` (a tenth) of what the plan's moves have cut it by per GiB on
   average is not made, and the plan stops there ("returns diminish").  After each move only the
   scores it changed are computed again (its two nodes' rows and columns).  On a cluster
   small enough for it, each such choice looks ahead first (``lookahead``): where the
   greedy path runs into a dead end, a dearer move whose path levels the cluster for
   fewer GiB is made instead.  When no single move helps (memory too tight, or sizes that
   no one move evens out), compound moves are tried, in this order, each only if it can
   be carried out with a guest's memory held on both nodes while it moves:
   - a swap of a guest of the hottest node for one of a cold node;
   - making room: light guests moved off a full node so that one from the hottest fits;
   - a trade of up to three guests of one node for up to three of another, if need be
     after one light guest has moved out of the way (and perhaps one back after);
   and when none helps and a node is still hot by itself, a move that cools it: off the
   hottest node, leaving both nodes it touches below where that node was, while the
   figure stays under 1.25 times where it was.
   The sequence of moves never depends on the threshold, only where it stops: a looser
   threshold's plan is a prefix of a tighter one's.  Every move chosen is put to
   ``admit`` (what PVE's migration would check: local devices, CPU, storages) before it
   is made; a refused one is never tried again.
3. ``balancer.make_plan`` orders the moves into safe waves, plans again without any
   guest whose move could not be ordered, and drops a plan whose balance moves do not
   cut the imbalance of the nodes they touch by ``margin``, a plan its budget cut short
   too (mandatory moves stay either way).

Feasible means: an allowed node for every guest of the unit, room for its memory under
the node's limit, no anti-affinity partner there, not a node the guest left within a day.
The result is an unordered list of moves; ``sequence.order`` turns it into waves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from keel import words
from keel.balance import lookahead
from keel.balance.loads import LoadModel
from keel.balance.lookahead import Budget
from keel.balance.moving import GiB, MOVE_OVERHEAD_GIB, current_node, move_unit
from keel.balance.plan import Move, Skip
from keel.balance.rules import Constraints, Unit
from keel.balance.level import _figure, _triggered, level_reached, peak_ok
from keel.balance.scoring import _peak_move, _pct, _Scorer
from keel.balance.settings import BalancingSettings
from keel.balance.trades import exchange, make_room, swap

DISK_COST_FACTOR = 4.0       # a GiB of disk costs four of RAM (slower, and it wears)
MIN_RELATIVE_GAIN = 0.002    # a move must cut F by 0.2 % of its two nodes' share of it, at least
MAX_SWAP_ROUNDS = 5
MAX_PEAK_MOVES = 20
PEAK_RISE = 1.25             # ... and may raise the figure to 1.25 times where it was
PEAK_FLOOR = 0.05            # ... or to this figure, if higher
LOOKAHEAD_LEVEL = 0.005      # playouts look for the path to this figure
RETURNS = 0.1                # past the threshold, a move must do a tenth of the plan's gain per GiB


@dataclass
class Outcome:
    moves: list[Move]
    skipped: list[Skip]
    balance_from: float          # F after the mandatory phase
    balance_to: float            # F after the balance phase
    stuck: bool = False          # imbalanced, but nothing allowed helps
    margin_checked: bool = False  # the method applied its own margin (PVE's, per move)
    not_worth_it: bool = False   # ... and refused its best move
    budget_spent: bool = False   # stopped by the plan's limits with good moves left
    stop: str = ""               # what stopped the balance phase (words.LEVEL_REACHED, ...)


def plan_keel(model: LoadModel, cons: Constraints, settings: BalancingSettings,
              admit: Callable[[Unit, str], bool] | None = None) -> Outcome:
    """``admit(unit, node)``: whether what PVE will check before migrating (devices, CPU,
    storages: ``keel.balance.guestconfig``) lets the unit go there; asked once a move is
    chosen, so that configs are read only for guests the plan would move."""
    moves: list[Move] = []
    skipped: list[Skip] = []
    placed: dict[str, str] = {u.key: u.node for u in cons.units}
    anti = _anti_index(cons)
    _mandatory_phase(model, cons, anti, placed, moves, skipped, admit)
    start = model.objective()
    units = [u for u in cons.units if u.balance and u.mandatory is None and u.allowed]
    stuck = False
    budget_spent = False
    stop = words.LEVEL_REACHED
    if _triggered(model, settings) and units:
        stuck, budget_spent, stop = _balance_phase(model, units, anti, placed, moves, skipped, settings,
                                                   admit)
    elif _triggered(model, settings):
        stop = words.NOTHING_WORTH_IT
    return Outcome(_collapse(moves), skipped, start, model.objective(), stuck, budget_spent=budget_spent,
                   stop=stop)


def _anti_index(cons: Constraints) -> dict[str, set[str]]:
    """Unit key -> the other units it must not share a node with."""
    index: dict[str, set[str]] = {}
    for _, keys in cons.anti_groups:
        for key in keys:
            index.setdefault(key, set()).update(keys - {key})
    return index


def _blocked_by_anti(unit: Unit, node: str, anti: dict[str, set[str]], placed: dict[str, str]) -> bool:
    return any(placed.get(other) == node for other in anti.get(unit.key, ()))


EXTREMES_FIRST = True


def _heat(model: LoadModel) -> np.ndarray:
    """Per node, how far its fullest weighted resource is above that resource's level."""
    dev = model.utilisation() - model.fluid()
    weighted = model.weights > 0
    return np.where(weighted[None, :], dev, -np.inf).max(axis=1)


def _delta(model: LoadModel, demand: np.ndarray, source: str | None, target: str) -> float:
    """Change of F if ``demand`` leaves ``source`` (None: comes from nowhere) for ``target``."""
    before = model.objective()
    trial = model.copy()
    if source is not None:
        trial.load[trial.index[source]] -= demand
    trial.load[trial.index[target]] += demand
    return trial.objective() - before


def _mandatory_phase(model: LoadModel, cons: Constraints, anti: dict[str, set[str]],
                     placed: dict[str, str], moves: list[Move], skipped: list[Skip],
                     admit: Callable[[Unit, str], bool] | None = None) -> None:
    todo = [u for u in cons.units if u.mandatory is not None]
    todo.sort(key=lambda u: (u.mandatory != words.MAINTENANCE, -model.unit_footprint(u.vmids), u.key))
    for unit in todo:
        if admit is not None and not admit(unit, None):
            continue                # PVE would not migrate it anywhere; the plan says why
        demand = model.unit_demand(unit.vmids)
        footprint = model.unit_footprint(unit.vmids)
        best: tuple[float, str] | None = None
        full = apart = False
        for node in sorted(unit.allowed):
            i = model.index.get(node)
            if i is None or not model.eligible[i]:
                continue
            if node == unit.node and not unit.split:
                continue
            staying = sum(model.footprint[g.vmid] for g in unit.guests if current_node(g, moves) == node)
            if model.mem_used[i] + footprint - staying > model.mem_cap[i]:
                full = True
                continue
            if _blocked_by_anti(unit, node, anti, placed):
                apart = True
                continue
            if admit is not None and not admit(unit, node):
                continue
            source = unit.node if model.eligible[model.index[unit.node]] else None
            delta = _delta(model, demand, source, node) if unit.node in model.index else 0.0
            if best is None or (delta, node) < best:
                best = (delta, node)
        if best is None:
            reason = words.NO_ROOM if unit.allowed else words.CONFLICT
            why = "has room for it"
            if apart and not full:
                reason, why = words.CONFLICT, "is free of the guests it must be kept apart from"
            for guest in unit.guests:
                skipped.append(Skip(reason, f"must move ({unit.mandatory_detail}) but no allowed node {why}",
                                    guest.vmid, guest.name))
            continue
        move_unit(model, unit, best[1], unit.mandatory or words.RULE, unit.mandatory_detail,
                  placed, moves, -best[0])


def _balance_phase(model: LoadModel, units: list[Unit], anti: dict[str, set[str]],
                   placed: dict[str, str], moves: list[Move], skipped: list[Skip],
                   settings: BalancingSettings, admit: Callable[[Unit, str], bool] | None = None
                   ) -> tuple[bool, bool, str]:
    """Greedy best improvement, then compound moves, then moves that cool the hottest node,
    until the level is reached.  Returns (stuck: imbalanced but nothing could be done,
    budget_spent: the plan's limits stopped it while good moves remained, what stopped it).

    Which move comes next never depends on the threshold; the threshold only says where
    the sequence stops, so a looser threshold makes a plan that is a prefix of a tighter
    one's (it never moves more)."""
    nodes = model.nodes
    n = len(nodes)
    demand = np.zeros((len(units), model.load.shape[1]))                     # U x R
    for row, unit in enumerate(units):
        demand[row] = model.unit_demand(unit.vmids)
    footprint = np.array([model.unit_footprint(u.vmids) for u in units], dtype=float)
    disk = np.array([sum(model.disk_bytes[v] for v in u.vmids) for u in units], dtype=float)
    cost = footprint / GiB + DISK_COST_FACTOR * disk / GiB + MOVE_OVERHEAD_GIB
    allowed = np.zeros((len(units), n), dtype=bool)
    for row, unit in enumerate(units):
        for node in unit.allowed - unit.avoid:
            if node in model.index:
                allowed[row, model.index[node]] = True
    allowed &= model.eligible[None, :]
    scorer = _Scorer(model, units, demand, allowed, footprint, cost, anti, placed)
    budget = Budget(settings.limits.moves, settings.limits.bytes,
                    np.array([len(u.guests) for u in units], dtype=int), footprint + disk,
                    np.zeros(len(units), dtype=bool))
    look = lookahead.applies(model, len(units))
    # A move changes two nodes: its gain is weighed against their share of the objective, so
    # that on 64 nodes a move is not held to a fraction of the whole cluster's imbalance.
    eligible = max(2, int(model.eligible.sum()))
    min_gain = max(model.objective() * MIN_RELATIVE_GAIN * 2 / eligible, 1e-12)

    def done(state: LoadModel) -> bool:
        return level_reached(state, settings)

    def look_done(state: LoadModel) -> bool:
        # playouts aim at a fixed level, not the threshold: the choice of a move must not
        # depend on where the plan will stop
        return _figure(state.figures(), settings) <= LOOKAHEAD_LEVEL and peak_ok(state, settings)

    def checkpoint():
        return model.load.copy(), model.mem_used.copy(), len(moves), dict(placed), scorer.cur.copy()

    def rollback(saved) -> None:
        load, mem, count, where, cur = saved
        model.load[:] = load
        model.mem_used[:] = mem
        del moves[count:]
        placed.clear()
        placed.update(where)
        scorer.cur[:] = cur

    def refused(start: int) -> tuple[int, int] | None:
        """The first move since ``start`` that ``admit`` refuses, as (row, column)."""
        if admit is None:
            return None
        rows = {u.key: row for row, u in enumerate(units)}
        for move in moves[start:]:
            unit = next(u for u in units if move.vmid in u.vmids)
            if not admit(unit, move.target):
                return rows[unit.key], model.index[move.target]
        return None

    def home(row: int) -> None:
        # a unit that moved never goes back where it started within the plan: that move
        # and its way back would cancel out, and a plan cut shorter would keep only the first
        origin = model.index.get(units[row].node)
        if origin is not None:
            scorer.forbid(row, origin)

    swaps = peaks = 0
    got = paid = 0.0             # what the moves so far cut F by, and what they cost (GiB)
    made_any = False

    def diminished(gain_: float, cost_: float) -> bool:
        """Whether a move of this gain and cost does less than ``RETURNS`` of what the
        plan's moves have done per GiB (asked only once the cluster is balanced)."""
        return paid > 0 and gain_ / cost_ < RETURNS * got / paid
    budget_spent = False
    stop = words.NOTHING_WORTH_IT
    ceiling: float | None = None
    while True:
        if done(model):
            stop = words.LEVEL_REACHED
            break
        score, gain = scorer.scores()
        worth_more = False
        over = ~budget.fits()
        if units and over.any():
            unlimited = np.unravel_index(int(np.argmax(score)), score.shape)
            worth_more = bool(np.isfinite(score[unlimited]) and gain[unlimited] >= min_gain)
            score = score.copy()
            score[over, :] = -np.inf
        best = lookahead.greedy_pick(score, gain, _heat(model) if EXTREMES_FIRST else None, scorer.cur)
        if best is not None and look and gain[best] >= min_gain:
            best = lookahead.choose(scorer, score, gain, best, min_gain, budget, look_done)
        if best is not None and gain[best] >= min_gain and admit is not None \
                and not admit(units[best[0]], nodes[best[1]]):
            if admit(units[best[0]], None):
                scorer.forbid(*best)
            else:                                  # it may not move at all
                for col in range(n):
                    scorer.forbid(best[0], col)
            continue
        if best is not None and gain[best] >= min_gain and not _triggered(model, settings) \
                and diminished(float(gain[best]), float(cost[best[0]])):
            stop = words.DIMINISHING
            break
        if best is None or gain[best] < min_gain:
            if worth_more:
                budget_spent = True            # good moves remain: later rounds make them
                stop = words.BUDGET
                break
            pair = None
            cooled = False
            left = budget.moves - budget.used_moves
            saved = checkpoint()
            balanced = not _triggered(model, settings)
            before = model.objective()
            if swaps < MAX_SWAP_ROUNDS and left >= 2:
                pair = swap(model, units, demand, scorer.cur, allowed, footprint, anti, placed, moves,
                            min_gain, settings)
            if pair is None and swaps < MAX_SWAP_ROUNDS:
                pair = make_room(model, units, demand, scorer.cur, allowed, footprint, anti, placed,
                                 moves, min_gain, left)
            if pair is None and swaps < MAX_SWAP_ROUNDS:
                pair = exchange(model, units, demand, scorer.cur, allowed, footprint, anti, placed,
                                moves, min_gain, left)
            if pair is None and peaks < MAX_PEAK_MOVES and not peak_ok(model, settings):
                if ceiling is None:
                    w = float(model.weights.sum())
                    ceiling = max(model.objective() * PEAK_RISE ** 2, PEAK_FLOOR ** 2 * eligible * w)
                row = _peak_move(model, scorer, units, placed, moves, ceiling, budget.fits(), settings)
                if row is not None:
                    pair, cooled = [row], True
                    peaks += 1
            if pair is not None and balanced:
                spent = float(sum(cost[row] for row in set(pair)))
                if diminished(before - model.objective(), spent):
                    rollback(saved)
                    scorer.refresh()
                    stop = words.DIMINISHING
                    break
            if pair is not None:
                bad = refused(saved[2])
                if bad is not None:
                    rollback(saved)
                    scorer.refresh()
                    row, col = bad
                    for c in (range(n) if not admit(units[row], None) else [col]):
                        scorer.forbid(row, c)
                    continue
                for row in pair:
                    budget.take(row)
                    home(row)
                if not cooled:
                    swaps += 1
                got += before - model.objective()
                paid += float(sum(cost[row] for row in set(pair)))
                made_any = True
                scorer.refresh()
                continue
            break
        row, col = best
        unit = units[row]
        budget.take(row)
        source = int(scorer.cur[row])
        move_unit(model, unit, nodes[col], words.BALANCE,
                  f"{unit.node} {_pct(model, unit.node)} → {nodes[col]} {_pct(model, nodes[col])}",
                  placed, moves, float(gain[best]))
        scorer.cur[row] = col
        scorer.moved(row, source, col)
        home(row)
        got += float(gain[best])
        paid += float(cost[row])
        made_any = True
    still = _triggered(model, settings)
    if still and (budget_spent or budget.spent):
        budget_spent = True
        stop = words.BUDGET
        skipped.append(Skip(words.LIMIT, f"the plan's budget ({budget.moves} moves, "
                                         f"{budget.bytes / GiB:.0f} GiB) is spent; later rounds go on"))
    return still and not made_any, budget_spent, stop


def _collapse(moves: list[Move]) -> list[Move]:
    """A → B → C becomes A → C; A → B → A disappears."""
    first: dict[int, Move] = {}
    last: dict[int, Move] = {}
    order: list[int] = []
    for move in moves:
        if move.vmid not in first:
            first[move.vmid] = move
            order.append(move.vmid)
        last[move.vmid] = move
    result = []
    for vmid in order:
        start, end = first[vmid], last[vmid]
        if start.source == end.target:
            continue
        if start is end:
            result.append(start)
        else:
            reason = start.reason if start.reason != words.BALANCE else end.reason
            result.append(replace(end, source=start.source, reason=reason,
                                  gain=sum(m.gain for m in moves if m.vmid == vmid)))
    return result
