"""Ordering a set of moves into waves that never overcommit memory or break a rule.

While a guest migrates its memory is held on both nodes, so a move may start only when
its target has room for it on top of everything already there and on its way there.
A move also waits while its target holds a guest it must be kept apart from, until that
guest has left.  Each wave respects the cluster-wide and per-node concurrency limits;
members of a bundle start in the same wave.  When nothing can start (two full nodes
trading guests), one guest is parked on a third node with room, and goes on from there
in a later wave.  A move that cannot be ordered safely is dropped and reported.
Moves into one node start in the order the planner made them, so that a later move never
takes the room an earlier one is waiting for (the planner's order is one that fits).

The executor stops after a wave with a failure, so the state after every wave is one the
cluster may stay in.  A balancing move that would start ahead of an earlier one still
waiting (to fill a free slot) therefore does so only if it does not, by itself, make the
imbalance worse (a ``Judge`` says); otherwise it waits for the plan's order, unless
nothing else could start.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from keel import words
from keel.balance.plan import Move, Skip


@dataclass
class Step:
    """One or more moves that start together (a bundle) towards one node."""

    moves: list[Move]
    target: str
    memory: int
    anti: set[str] = field(default_factory=set)       # anti-affinity groups of the moving guests

    @property
    def sources(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for move in self.moves:
            counts[move.source] = counts.get(move.source, 0) + 1
        return counts


class Judge(Protocol):
    """The cluster's load as the waves go: does a step make the imbalance worse now?"""

    def worsens(self, started: list[Move], moves: list[Move]) -> bool:
        """Would ``moves``, on top of the waves made and ``started``, raise the imbalance?"""

    def made(self, moves: list[Move]) -> None:
        """``moves`` are part of a wave now."""


def order(moves: list[Move], mem_used: dict[str, float], mem_cap: dict[str, float],
          anti_of: dict[int, set[str]], placement: dict[int, str], concurrent: int,
          per_node: int, allowed: dict[int, set[str]] | None = None,
          judge: Callable[[], Judge] | None = None) -> tuple[list[Move], list[Skip]]:
    """Give every move a wave; return the ordered moves (parking moves included) and drops.

    ``anti_of`` maps a vmid to its anti-affinity groups; ``placement`` is where every guest
    in such a group is now.  A guest parked on the way to a target it then cannot reach
    would be worse off than before: such moves are dropped whole and the rest re-ordered.
    ``judge`` makes a fresh ``Judge`` on the starting state (none: any move may fill a slot).
    """
    dropped: set[int] = set()
    skipped: list[Skip] = []
    while True:
        kept = [m for m in moves if m.vmid not in dropped]
        done, failed = _order_once(kept, mem_used, mem_cap, anti_of, placement, concurrent,
                                   per_node, allowed, judge() if judge else None)
        stranded = {s.vmid for s in failed if s.vmid is not None} & \
            {m.vmid for m in done if m.reason == words.PARK}
        if not stranded:
            return done, skipped + failed
        dropped |= stranded
        skipped += [s for s in failed if s.vmid in stranded]


def _order_once(moves: list[Move], mem_used: dict[str, float], mem_cap: dict[str, float],
                anti_of: dict[int, set[str]], placement: dict[int, str], concurrent: int,
                per_node: int, allowed: dict[int, set[str]] | None, judge: Judge | None
                ) -> tuple[list[Move], list[Skip]]:
    used = dict(mem_used)
    where = dict(placement)
    pending = _steps(moves, anti_of)
    done: list[Move] = []
    skipped: list[Skip] = []
    wave = 0
    parked: set[tuple[int, ...]] = set()
    while pending:
        wave += 1
        started = _wave(pending, used, mem_cap, where, anti_of, concurrent, per_node, judge)
        if not started and judge is not None:
            started = _wave(pending, used, mem_cap, where, anti_of, concurrent, per_node, None)
        if not started:
            park = _park(pending, used, mem_cap, allowed or {}, parked, where, anti_of)
            if park is None:
                for step in pending:
                    for move in step.moves:
                        skipped.append(Skip(words.NO_SAFE_ORDER,
                                            f"no order of the moves keeps {step.target} under its "
                                            f"memory limit and every rule", move.vmid, move.name))
                break
            index, parking = park
            pending.insert(index, parking)
            wave -= 1
            continue
        for step in started:
            pending.remove(step)
            if judge is not None:
                judge.made(step.moves)
            for move in step.moves:
                held = move.mem_bytes if move.running else 0
                used[move.source] -= held
                used[step.target] += held
                where[move.vmid] = step.target
                done.append(replace(move, wave=wave))
    return done, skipped


def _wave(pending: list[Step], used: dict[str, float], mem_cap: dict[str, float], where: dict[int, str],
          anti_of: dict[int, set[str]], concurrent: int, per_node: int, judge: Judge | None) -> list[Step]:
    """The steps that start in the next wave, in the plan's order."""
    inflow: dict[str, int] = {}
    outflow: dict[str, int] = {}
    incoming: dict[str, float] = {}
    arriving: dict[str, set[str]] = {}
    started: list[Step] = []
    waiting: set[str] = set()           # targets where an earlier step waits for room

    def fits(step: Step) -> bool:
        # A bundle bigger than a limit may still go, alone.
        count = len(step.moves)
        busy = sum(len(s.moves) for s in started)
        if busy and busy + count > concurrent:
            return False
        if any(outflow.get(src, 0) and outflow[src] + n > per_node for src, n in step.sources.items()):
            return False
        if inflow.get(step.target, 0) and inflow[step.target] + count > per_node:
            return False
        if step.target in waiting:
            return False                # moves into a node start in the plan's order: a later
                                        # one must not take the room an earlier one waits for
        if used[step.target] + incoming.get(step.target, 0.0) + step.memory > mem_cap[step.target]:
            waiting.add(step.target)
            return False
        if step.anti:
            own = {m.vmid for m in step.moves}
            if step.anti & arriving.get(step.target, set()) or any(
                    where.get(v) == step.target and anti_of.get(v, set()) & step.anti
                    for v in where if v not in own):
                return False
        return True

    behind = False                      # an earlier step does not start in this wave
    for step in pending:
        ok = fits(step)
        if ok and behind and judge is not None and all(m.reason == words.BALANCE for m in step.moves):
            ok = not judge.worsens([m for s in started for m in s.moves], step.moves)
        if not ok:
            behind = True
            continue
        started.append(step)
        inflow[step.target] = inflow.get(step.target, 0) + len(step.moves)
        for src, n in step.sources.items():
            outflow[src] = outflow.get(src, 0) + n
        incoming[step.target] = incoming.get(step.target, 0.0) + step.memory
        arriving.setdefault(step.target, set()).update(step.anti)
    return started


def _steps(moves: list[Move], anti_of: dict[int, set[str]]) -> list[Step]:
    steps: dict[tuple[str, str], Step] = {}
    ordered: list[Step] = []
    for move in moves:
        key = (move.group or f"vm:{move.vmid}", move.target)
        step = steps.get(key)
        if step is None:
            step = Step([], move.target, 0)
            steps[key] = step
            ordered.append(step)
        step.moves.append(move)
        step.memory += move.mem_bytes if move.running else 0
        step.anti |= anti_of.get(move.vmid, set())
    return ordered


def _park(pending: list[Step], used: dict[str, float], mem_cap: dict[str, float],
          allowed: dict[int, set[str]], parked: set[tuple[int, ...]], where: dict[int, str],
          anti_of: dict[int, set[str]]) -> tuple[int, Step] | None:
    """Break a deadlock: move one waiting step's guests to a third node with room first."""
    for index, step in enumerate(pending):
        ids = tuple(m.vmid for m in step.moves)
        if ids in parked:
            continue
        candidates = set.intersection(*(allowed.get(v, set(mem_cap)) for v in ids)) \
            if ids else set(mem_cap)
        for node in sorted(candidates, key=lambda n: used[n] - mem_cap[n]):
            if node in step.sources or node == step.target:
                continue
            if used[node] + step.memory > mem_cap[node]:
                continue
            if step.anti and any(where.get(v) == node and anti_of.get(v, set()) & step.anti
                                 for v in where if v not in ids):
                continue
            parked.add(ids)
            park_moves = [replace(m, target=node, reason=words.PARK,
                                  detail=f"parked on {node} so that {step.target} can make room")
                          for m in step.moves]
            onward = [replace(m, source=node) for m in step.moves]
            pending[index] = Step(onward, step.target, step.memory, step.anti)
            return index, Step(park_moves, node, step.memory, step.anti)
    return None
