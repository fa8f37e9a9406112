"""Imbalance figures.

* ``pve_imbalance``: Proxmox VE's CRS figure (proxmox-resource-scheduling 2.1): per
  node ``load = (cpu/maxcpu + mem/maxmem) / 2``; the coefficient of variation of those
  loads (population standard deviation over mean) divided by ``sqrt(n - 1)``, its
  largest possible value, so it lies in [0, 1].  0 for fewer than two nodes or no load.
* ``spread``: ProxLB's "balanciness", the highest minus the lowest node usage of one
  resource, in percentage points.

>>> round(pve_imbalance([1/3, 0.0, 0.0]), 3)
1.0
>>> spread([0.80, 0.35, 0.50])
45.0
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def node_load(cpu_frac: float, mem_frac: float) -> float:
    return (cpu_frac + mem_frac) / 2.0


def coefficient_of_variation(values: Sequence[float]) -> float:
    n = len(values)
    if n == 0:
        return 0.0
    mean = sum(values) / n
    if mean <= 0:
        return 0.0
    variance = sum((v - mean) ** 2 for v in values) / n
    return math.sqrt(variance) / mean


def pve_imbalance(loads: Sequence[float]) -> float:
    n = len(loads)
    if n < 2 or sum(loads) <= 0:
        return 0.0
    return coefficient_of_variation(loads) / math.sqrt(n - 1)


def spread(fractions: Iterable[float]) -> float:
    values = list(fractions)
    if not values:
        return 0.0
    return round((max(values) - min(values)) * 100.0, 6)
