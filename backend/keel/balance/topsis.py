"""TOPSIS: ranking alternatives by their distance to an ideal best and an ideal worst.

Proxmox VE's HA stack (proxmox-resource-scheduling) scores where to start a resource
and, with ``ha-auto-rebalance-method topsis``, which migration to make, with TOPSIS
over four criteria computed from the node loads of each alternative cluster state
(``PVE_CRITERIA``, all minimised)::

    average CPU     1 + RMS(cpu_load)   weight 1
    highest CPU     1 + max(cpu_load)   weight 2
    average memory  1 + RMS(mem_load)   weight 5
    highest memory  1 + max(mem_load)   weight 10

The ``1 +`` keeps 0.004 against 0.002 from looking like a factor of two.  The steps:
weights normalised to sum 1; each criterion column divided by its L2 norm over the
alternatives (an all-zero column stays zero); ideal best and worst per column; the
score of an alternative is ``d_worst / (d_best + d_worst)`` with weighted Euclidean
distances, in [0, 1], higher is better, 0 when every alternative is the same.

>>> crit = (Criterion("cost", 1.0, maximize=False),)
>>> [round(s, 3) for s in score_alternatives([(1.0,), (2.0,), (3.0,)], crit)]
[1.0, 0.5, 0.0]
>>> rank_alternatives([(2.0,), (1.0,), (2.0,)], crit)
[1, 0, 2]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Criterion:
    """One column of the decision matrix: a name, a relative weight, and its direction."""

    name: str
    weight: float
    maximize: bool = False


# proxmox-resource-scheduling's four criteria, in the order of its alternative tuple.
PVE_CRITERIA: tuple[Criterion, ...] = (
    Criterion("average CPU", 1.0),
    Criterion("highest CPU", 2.0),
    Criterion("average memory", 5.0),
    Criterion("highest memory", 10.0),
)


def normalised_weights(criteria: Sequence[Criterion]) -> list[float]:
    total = sum(c.weight for c in criteria)
    if total <= 0:
        raise ValueError("no criterion has a positive weight")
    return [c.weight / total for c in criteria]


def _l2(values: Iterable[float]) -> float:
    return math.sqrt(sum(v * v for v in values))


def score_alternatives(matrix: Sequence[Sequence[float]],
                       criteria: Sequence[Criterion]) -> list[float]:
    """One score in [0, 1] per row of ``matrix`` (higher is better)."""
    if not matrix:
        return []
    width = len(criteria)
    weights = normalised_weights(criteria)
    columns = []
    for n in range(width):
        column = [row[n] for row in matrix]
        norm = _l2(column)
        columns.append([v / norm for v in column] if norm != 0.0 else column)
    best, worst = [], []
    for n, criterion in enumerate(criteria):
        low, high = min(columns[n]), max(columns[n])
        best.append(high if criterion.maximize else low)
        worst.append(low if criterion.maximize else high)
    scores = []
    for i in range(len(matrix)):
        row = [columns[n][i] for n in range(width)]
        d_best = _l2((row[n] - best[n]) * weights[n] for n in range(width))
        d_worst = _l2((row[n] - worst[n]) * weights[n] for n in range(width))
        total = d_best + d_worst
        scores.append(d_worst / total if total != 0.0 else 0.0)
    return scores


def rank_alternatives(matrix: Sequence[Sequence[float]],
                      criteria: Sequence[Criterion]) -> list[int]:
    """Row indices from best to worst score; equal scores keep their input order."""
    scores = score_alternatives(matrix, criteria)
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def pve_alternative(loads: Iterable[tuple[float, float]]) -> tuple[float, float, float, float]:
    """PVE's four criteria for one cluster state, from its nodes' ``(cpu_load, mem_load)``.

    >>> pve_alternative([(0.5, 0.25), (0.0, 0.25)])
    (1.3535533905932737, 1.5, 1.25, 1.25)
    """
    count = 0
    highest_cpu = squares_cpu = highest_mem = squares_mem = 0.0
    for cpu, mem in loads:
        count += 1
        highest_cpu = max(highest_cpu, cpu)
        squares_cpu += cpu * cpu
        highest_mem = max(highest_mem, mem)
        squares_mem += mem * mem
    if count == 0:
        return (1.0, 1.0, 1.0, 1.0)
    return (1.0 + math.sqrt(squares_cpu / count), 1.0 + highest_cpu,
            1.0 + math.sqrt(squares_mem / count), 1.0 + highest_mem)
