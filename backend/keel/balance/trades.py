"""Compound moves, for when no single move helps the balance: memory too tight for any
guest to arrive where it should, or guest sizes that no one move evens out.

* ``swap``: a guest of the hottest node for one of a cold node;
* ``make_room``: light guests moved off a full node so that a busy one of the hottest fits;
* ``exchange``: up to three guests of one node for up to three of another, if need be
  after one light guest has stepped out of the way to a third node (and one came back).

Each is made only if it can be carried out one guest at a time with every moving guest's
memory held on both nodes (``can_order``), and is emitted in that order: ``sequence``
starts the moves into a node in the order they were made.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from keel import words
from keel.balance.loads import LoadModel
from keel.balance.moving import GiB, MOVE_OVERHEAD_GIB, move_unit
from keel.balance.plan import Move
from keel.balance.rules import Unit
from keel.balance.settings import BalancingSettings

SWAP_CANDIDATES = 16
MAX_EVICTIONS = 3            # light guests moved off a node to make room for one from the hottest
EXCHANGE_NODES = 2           # trades between the two nodes at each end of the load order
EXCHANGE_CANDIDATES = 12     # guests of a node a trade picks from: half heaviest, half smallest
EXCHANGE_TRIES = 2000        # best trades checked for an order that fits, per pair of nodes
EVICTION_TRIES = 32          # best trades tried again with a light guest moved out of the way


def swap(model: LoadModel, units: list[Unit], demand: np.ndarray, cur: np.ndarray,
         allowed: np.ndarray, footprint: np.ndarray, anti: dict[str, set[str]],
         placed: dict[str, str], moves: list[Move], min_gain: float,
         settings: BalancingSettings) -> tuple[int, int] | None:
    """Trade a guest of the hottest node for one of a colder node when no single move fits;
    returns the two units' rows, or None."""
    u = model.utilisation()
    w = model.weights
    load = (u * w).sum(axis=1) / (w.sum() or 1.0)
    order = [i for i in np.argsort(load) if model.eligible[i]]
    if len(order) < 2:
        return None
    hot = order[-1]
    best: tuple[float, int, int] | None = None
    base = model.objective()
    on_hot = [i for i in np.argsort(-footprint) if cur[i] == hot][:SWAP_CANDIDATES]
    for cold in order[:3]:
        if cold == hot:
            continue
        on_cold = [i for i in np.argsort(footprint) if cur[i] == cold][:SWAP_CANDIDATES]
        for a in on_hot:
            if not allowed[a, cold]:
                continue
            for b in on_cold:
                if not allowed[b, hot] or footprint[b] >= footprint[a]:
                    continue
                if model.mem_used[cold] - footprint[b] + footprint[a] > model.mem_cap[cold]:
                    continue
                if model.mem_used[hot] - footprint[a] + footprint[b] > model.mem_cap[hot]:
                    continue
                # while a guest moves its memory is held on both nodes: one of the two must fit
                # before the other has left
                if (model.mem_used[hot] + footprint[b] > model.mem_cap[hot]
                        and model.mem_used[cold] + footprint[a] > model.mem_cap[cold]):
                    continue
                if any(placed.get(o) == model.nodes[cold] for o in anti.get(units[a].key, ())) or \
                        any(placed.get(o) == model.nodes[hot] for o in anti.get(units[b].key, ())):
                    continue
                trial = model.copy()
                trial.load[hot] += demand[b] - demand[a]
                trial.load[cold] += demand[a] - demand[b]
                gain = base - trial.objective()
                if gain > min_gain and (best is None or gain > best[0]):
                    best = (gain, a, b)
    if best is None:
        return None
    gain, a, b = best
    cold = cold_of(cur, b)
    hot_name, cold_name = model.nodes[hot], model.nodes[cold]
    pair = [(units[a], cold_name, units[b]), (units[b], hot_name, units[a])]
    if model.mem_used[hot] + footprint[b] <= model.mem_cap[hot]:
        pair.reverse()                     # the smaller one fits first: it goes first
    for unit, target, other in pair:
        move_unit(model, unit, target, words.BALANCE, f"swapped with {other.name}", placed, moves, gain / 2)
    return a, b


def make_room(model: LoadModel, units: list[Unit], demand: np.ndarray, cur: np.ndarray,
              allowed: np.ndarray, footprint: np.ndarray, anti: dict[str, set[str]],
              placed: dict[str, str], moves: list[Move], min_gain: float,
              moves_left: int) -> list[int] | None:
    """When neither a single move nor a swap helps: move a guest of the hottest node to a
    node that has no room for it yet, after moving up to ``MAX_EVICTIONS`` light guests off
    that node to nodes where they fit now.  A swap is the case where the light guest goes
    to the hot node; here it may go anywhere, which is what a full cluster needs once the
    hot node itself has filled up.  Returns the rows moved (the light ones first), or None."""
    u = model.utilisation()
    w = model.weights
    load = (u * w).sum(axis=1) / (w.sum() or 1.0)
    order = [int(i) for i in np.argsort(load) if model.eligible[i]]
    if len(order) < 3 or moves_left < 2:
        return None
    hot = order[-1]
    base = model.objective()
    weight = (demand / np.maximum(model.cap[cur], 1e-12) * w).sum(axis=1)   # a unit's weighted share
    on_hot = sorted((i for i in range(len(units)) if cur[i] == hot), key=lambda i: -weight[i])
    best: tuple[float, int, list[tuple[int, int]]] | None = None
    for a in on_hot[:SWAP_CANDIDATES]:
        for t in order[:-1]:
            if not allowed[a, t] or _anti_blocks(units[a], t, model, anti, placed):
                continue
            need = model.mem_used[t] + footprint[a] - model.mem_cap[t]
            if need <= 0:
                continue                          # a single move: already judged
            trial = model.copy()
            evicted: list[tuple[int, int]] = []
            light = sorted((i for i in range(len(units)) if cur[i] == t and i != a),
                           key=lambda i: (weight[i], footprint[i]))
            for e in light:
                if need <= 0 or len(evicted) >= min(MAX_EVICTIONS, moves_left - 1):
                    break
                dest = _best_room(trial, units[e], e, t, hot, demand, footprint, allowed, anti, placed)
                if dest is None:
                    continue
                trial.load[t] -= demand[e]
                trial.load[dest] += demand[e]
                trial.mem_used[t] -= footprint[e]
                trial.mem_used[dest] += footprint[e]
                evicted.append((e, dest))
                need -= footprint[e]
            if need > 0:
                continue
            trial.load[hot] -= demand[a]
            trial.load[t] += demand[a]
            gain = base - trial.objective()
            if gain > min_gain * (len(evicted) + 1) and (best is None or gain > best[0]):
                best = (gain, a, evicted + [(a, t)])
    if best is None:
        return None
    gain, a, steps = best
    for row, dest in steps:
        why = f"makes room for {units[a].name}" if row != a else f"after {len(steps) - 1} made room"
        move_unit(model, units[row], model.nodes[dest], words.BALANCE, why, placed, moves,
                  gain / len(steps))
        cur[row] = dest
    return [row for row, _ in steps]


def exchange(model: LoadModel, units: list[Unit], demand: np.ndarray, cur: np.ndarray,
             allowed: np.ndarray, footprint: np.ndarray, anti: dict[str, set[str]],
             placed: dict[str, str], moves: list[Move], min_gain: float,
             moves_left: int) -> list[int] | None:
    """The last resort of a round: guests of one node traded for guests of another, up to
    two for three (sizes that no single move or one-for-one swap can even out), between the
    nodes furthest from the level, best gain per GiB.  Only trades that can be carried out
    with the memory held on both nodes while a guest moves: the guests fit where they go
    in some order, one guest at a time (``_can_order``)."""
    dev = ((model.utilisation() - model.fluid()) * model.weights).sum(axis=1)
    order = [int(i) for i in np.argsort(dev) if model.eligible[i]]
    if len(order) < 2 or moves_left < 2:
        return None
    ends = order[:EXCHANGE_NODES] + order[-EXCHANGE_NODES:]
    level, util, w = model.fluid(), model.utilisation(), model.weights
    share = (demand / np.maximum(model.cap[cur], 1e-12) * w).sum(axis=1)
    best: tuple[float, float, list[tuple[int, int]]] | None = None
    for i, j in sorted({(i, j) for i in ends for j in ends if i != j}):
        go = _trade_sets(i, j, units, cur, allowed, footprint, share, anti, model, placed, 3)
        come = _trade_sets(j, i, units, cur, allowed, footprint, share, anti, model, placed, 3)
        if not go or not come:
            continue
        go_dem = np.array([demand[list(g)].sum(axis=0) for g in go])         # G x R, i -> j
        come_dem = np.array([demand[list(c)].sum(axis=0) for c in come])     # C x R, j -> i
        go_mem = np.array([footprint[list(g)].sum() for g in go])
        come_mem = np.array([footprint[list(c)].sum() for c in come])
        net = go_dem[:, None, :] - come_dem[None, :, :]                       # G x C x R
        terms = (((model.load[i] - net) / model.cap[i] - level) ** 2
                 + ((model.load[j] + net) / model.cap[j] - level) ** 2) * w
        gain = float((((util[[i, j]] - level) ** 2) * w).sum()) - terms.sum(axis=2)
        used_i, used_j, cap_i, cap_j = model.mem_used[i], model.mem_used[j], model.mem_cap[i], model.mem_cap[j]
        gm, cm = go_mem[:, None], come_mem[None, :]
        count = np.array([len(g) for g in go])[:, None] + np.array([len(c) for c in come])[None, :]
        ok = ((used_i - gm + cm <= cap_i) & (used_j + gm - cm <= cap_j)
              & (count <= moves_left) & (gain > min_gain * count))
        if not ok.any():
            continue
        score = np.where(ok, gain / (gm + cm + MOVE_OVERHEAD_GIB * GiB * count), -np.inf)
        flat = np.argsort(-score, axis=None)[:EXCHANGE_TRIES]
        fits = False
        for x, y in zip(*np.unravel_index(flat, score.shape)):
            if not np.isfinite(score[x, y]) or (best is not None and score[x, y] <= best[0]):
                break
            steps = sorted([(r, i) for r in come[y]] + [(r, j) for r in go[x]], key=lambda st: footprint[st[0]])
            order = can_order(steps, footprint, cur, model)
            if order is not None:
                best = (float(score[x, y]), float(gain[x, y]), order)
                fits = True
                break
        if not fits:
            # none of them fits in any order: the best few again, after one light guest of
            # either node has gone to a third node with room
            for x, y in zip(*np.unravel_index(flat[:EVICTION_TRIES], score.shape)):
                if not np.isfinite(score[x, y]):
                    break
                steps = [(r, i) for r in come[y]] + [(r, j) for r in go[x]]
                found = _with_eviction(model, units, demand, cur, allowed, footprint, share, anti, placed,
                                       steps, (i, j), min_gain, moves_left)
                if found is not None and (best is None or found[0] > best[0]):
                    best = found
    if best is None:
        return None
    _, gain, steps = best
    for row, dest in steps:
        others = [units[r].name for r, d in steps if d != dest]
        move_unit(model, units[row], model.nodes[dest], words.BALANCE,
                  "traded for " + ", ".join(others), placed, moves, gain / len(steps))
        cur[row] = dest
    return [row for row, _ in steps]


def _with_eviction(model: LoadModel, units: list[Unit], demand: np.ndarray, cur: np.ndarray,
                   allowed: np.ndarray, footprint: np.ndarray, share: np.ndarray,
                   anti: dict[str, set[str]], placed: dict[str, str], steps: list[tuple[int, int]],
                   pair: tuple[int, ...], min_gain: float, moves_left: int
                   ) -> tuple[float, float, list[tuple[int, int]]] | None:
    """A trade between the nodes of ``pair`` made possible by first moving one light guest
    of one of them, not in the trade, to a node with room (and perhaps one of that node's
    back at the end): (score, gain, steps), the best such, or None."""
    if len(steps) + 1 > moves_left:
        return None
    trading = {row for row, _ in steps}
    roomy = sorted((k for k in range(len(model.nodes)) if model.eligible[k]),
                   key=lambda k: model.mem_used[k] - model.mem_cap[k])[:4]
    base = model.objective()
    best = None
    for node in pair:
        light = sorted((int(r) for r in np.flatnonzero(cur == node) if int(r) not in trading),
                       key=lambda r: (share[r], footprint[r]))[:4]
        for e in light:
            for k in roomy:
                if (k == node or not allowed[e, k] or model.mem_used[k] + footprint[e] > model.mem_cap[k]
                        or _anti_blocks(units[e], k, model, anti, placed)):
                    continue
                # ... and perhaps a light guest of that node back, once the trade is done, to
                # even out the memory the first one took there
                back = [None] + sorted((int(r) for r in np.flatnonzero(cur == k)
                                        if int(r) not in trading and int(r) != e and allowed[r, node]),
                                       key=lambda r: (share[r], abs(footprint[r] - footprint[e])))[:3]
                for r in back:
                    trial_steps = [(e, k)] + steps + ([] if r is None else [(r, node)])
                    if len(trial_steps) > moves_left:
                        continue
                    trial_steps = can_order(trial_steps, footprint, cur, model)
                    if trial_steps is None:
                        continue
                    trial = model.copy()
                    for row, dest in trial_steps:
                        trial.load[cur[row]] -= demand[row]
                        trial.load[dest] += demand[row]
                    gain = base - trial.objective()
                    if gain <= min_gain * len(trial_steps):
                        continue
                    score = gain / (sum(footprint[q] for q, _ in trial_steps)
                                    + MOVE_OVERHEAD_GIB * GiB * len(trial_steps))
                    if best is None or score > best[0]:
                        best = (score, gain, trial_steps)
    return best


def can_order(steps: list[tuple[int, int]], footprint: np.ndarray, cur: np.ndarray,
              model: LoadModel) -> list[tuple[int, int]] | None:
    """An order in which the moves of a compound can be made one after another without
    passing a node's memory limit, counting a moving guest on both nodes until it has
    arrived (the first in the given order that fits goes next), or None.  When none can go,
    one may wait on a third node with room, as ``sequence.order`` parks it."""
    used = model.mem_used.copy()
    at = {row: int(cur[row]) for row, _ in steps}
    pending = list(steps)
    found: list[tuple[int, int]] = []
    parked = 0
    while pending:
        for k, (row, dest) in enumerate(pending):
            if used[dest] + footprint[row] <= model.mem_cap[dest]:
                used[dest] += footprint[row]
                used[at[row]] -= footprint[row]
                found.append(pending.pop(k))
                break
        else:
            ends = {dest for _, dest in steps} | {int(cur[row]) for row, _ in steps}
            spare = [n for n in range(len(model.nodes)) if model.eligible[n] and n not in ends]
            move = next(((row, n) for row, _ in pending for n in spare
                         if used[n] + footprint[row] <= model.mem_cap[n]), None)
            if move is None or parked >= 1:
                return None
            row, n = move
            used[n] += footprint[row]
            used[at[row]] -= footprint[row]
            at[row] = n
            parked += 1
    return found


def _trade_sets(src: int, dst: int, units: list[Unit], cur: np.ndarray, allowed: np.ndarray,
                footprint: np.ndarray, share: np.ndarray, anti: dict[str, set[str]],
                model: LoadModel, placed: dict[str, str], most: int) -> list[tuple[int, ...]]:
    """Sets of up to ``most`` units of ``src`` that may go to ``dst`` together: from the
    heaviest and the smallest there, no two of one anti-affinity group."""
    rows = [int(r) for r in np.flatnonzero(cur == src)
            if allowed[r, dst] and not _anti_blocks(units[r], dst, model, anti, placed)]
    half = EXCHANGE_CANDIDATES // 2
    picked = sorted(set(sorted(rows, key=lambda r: -share[r])[:half])
                    | set(sorted(rows, key=lambda r: footprint[r])[:half]))
    sets = []
    for k in range(1, most + 1):
        for combo in combinations(picked, k):
            keys = {units[r].key for r in combo}
            if all(not (anti.get(units[r].key, set()) & (keys - {units[r].key})) for r in combo):
                sets.append(combo)
    return sets


def _anti_blocks(unit: Unit, node: int, model: LoadModel, anti: dict[str, set[str]],
                 placed: dict[str, str]) -> bool:
    return any(placed.get(o) == model.nodes[node] for o in anti.get(unit.key, ()))


def _best_room(trial: LoadModel, unit: Unit, row: int, source: int, hot: int, demand: np.ndarray,
               footprint: np.ndarray, allowed: np.ndarray, anti: dict[str, set[str]],
               placed: dict[str, str]) -> int | None:
    """Where a light guest leaving ``source`` fits now and does the least harm; the hot node
    counts only if it has room before its own guest leaves."""
    best: tuple[float, int] | None = None
    for d in range(len(trial.nodes)):
        if d == source or not allowed[row, d] or not trial.eligible[d]:
            continue
        if trial.mem_used[d] + footprint[row] > trial.mem_cap[d]:
            continue
        if _anti_blocks(unit, d, trial, anti, placed):
            continue
        trial.load[source] -= demand[row]
        trial.load[d] += demand[row]
        value = trial.objective()
        trial.load[source] += demand[row]
        trial.load[d] -= demand[row]
        if best is None or value < best[0]:
            best = (value, d)
    return None if best is None else best[1]


def cold_of(cur: np.ndarray, b: int) -> int:
    return int(cur[b])
