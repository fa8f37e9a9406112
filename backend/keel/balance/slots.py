"""Streaming a plan's moves through the executor's slots (pure: no I/O, no clock).

The planner orders moves into waves (``keel.balance.sequence``): every move of a wave fits,
with memory held on both nodes, anti-affinity and the concurrency limits, once the moves
of the earlier waves are done.  A wave's slowest migration need not hold back the next
one, though: what a move's safety rests on is the state of its target (its source only
loses memory and guests by it).  So a move may start as soon as every move of an earlier
wave into or out of its target (and any earlier move of the same guest) has ended well,
and a slot is free:

* at most ``concurrent`` migrations at once, each guest of a bundle counted;
* at most ``per_node`` migrations into a node at once, and as many out of it;
* moves into one node start in the plan's order (a later one never takes the room an
  earlier one waits for).

A move whose prerequisite did not end well does not start (its reason names it).
``eta`` plays the rest of a run forward on the same rules with durations measured so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def touches(move: Any) -> set[str]:
    return {move.source, move.target}


def dependencies(moves: Sequence[Any]) -> list[set[int]]:
    """For each move (by index), the earlier-wave moves it waits for."""
    deps: list[set[int]] = []
    for i, move in enumerate(moves):
        deps.append({j for j, other in enumerate(moves[:i])
                     if other.vmid == move.vmid or (other.wave < move.wave and move.target in touches(other))})
    return deps


@dataclass
class Slots:
    concurrent: int
    per_node: int

    def startable(self, moves: Sequence[Any], deps: list[set[int]], waiting: Sequence[int],
                  running: Sequence[int], ended_ok: set[int]) -> list[int]:
        """Which of ``waiting`` (indices in plan order) start now, given what runs."""
        inflow: dict[str, int] = {}
        outflow: dict[str, int] = {}
        for i in running:
            inflow[moves[i].target] = inflow.get(moves[i].target, 0) + 1
            outflow[moves[i].source] = outflow.get(moves[i].source, 0) + 1
        busy = len(running)
        held: set[str] = set()            # targets an earlier waiting move is queued for
        chosen: list[int] = []
        for i in waiting:
            move = moves[i]
            if busy >= self.concurrent:
                break
            if move.target in held:
                continue
            if not deps[i] <= ended_ok:
                held.add(move.target)
                continue
            if inflow.get(move.target, 0) >= self.per_node or outflow.get(move.source, 0) >= self.per_node:
                held.add(move.target)
                continue
            chosen.append(i)
            busy += 1
            inflow[move.target] = inflow.get(move.target, 0) + 1
            outflow[move.source] = outflow.get(move.source, 0) + 1
        return chosen


def eta(moves: Sequence[Any], deps: list[set[int]], slots: Slots, waiting: Sequence[int],
        running: dict[int, float], ended_ok: set[int], duration: dict[int, float]) -> float:
    """Seconds until the last move ends, played forward: ``running`` maps each running move
    to the seconds it still needs, ``duration`` every waiting move's expected length."""
    now = 0.0
    left = dict(running)
    queue = list(waiting)
    done = set(ended_ok)
    while queue or left:
        for i in slots.startable(moves, deps, queue, list(left), done):
            left[i] = max(0.0, duration.get(i, 0.0))
            queue.remove(i)
        if not left:                      # what waits can never start: it will not run
            break
        step = min(left.values())
        now += step
        for i in [i for i, rest in left.items() if rest - step <= 1e-9]:
            del left[i]
            done.add(i)
        for i in left:
            left[i] -= step
    return now
