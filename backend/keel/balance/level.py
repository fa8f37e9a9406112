"""When a cluster is level: the figure ``threshold`` applies to, and the tests that make a
node hot by itself (above ``hotspot`` where the cluster is not full, or more than
``above_mean`` points above the cluster's mean on a weighted resource)."""

from __future__ import annotations

import numpy as np

from keel.balance.loads import LoadModel
from keel.balance.settings import BalancingSettings


def full_resources(model: LoadModel, settings: BalancingSettings) -> list[int]:
    """The weighted resources whose cluster-wide mean use is at or above the hotspot: no
    placement brings every node under it there (the cluster is full)."""
    if settings.hotspot is None:
        return []
    fluid = model.fluid()
    return [r for r in range(len(model.weights)) if model.weights[r] > 0 and fluid[r] >= settings.hotspot]


def node_excess(model: LoadModel, settings: BalancingSettings, u: np.ndarray | None = None) -> np.ndarray:
    """Per node (N), how far it is past what makes a node hot by itself: its use above the
    hotspot (on a resource where the cluster is not full), or above the mean by more than
    ``above_mean``, on any weighted resource; ≤ 0 where it is neither.  -inf for nodes that
    are not eligible."""
    u = model.utilisation() if u is None else u
    fluid = model.fluid()
    excess = np.full(u.shape, -np.inf)
    weighted = model.weights > 0
    if settings.above_mean is not None:
        excess = np.maximum(excess, u - fluid[None, :] - settings.above_mean)
    if settings.hotspot is not None:
        hot = np.where(fluid < settings.hotspot, settings.hotspot, np.inf)
        excess = np.maximum(excess, u - hot[None, :])
    excess = np.where(weighted[None, :], excess, -np.inf).max(axis=1)
    return np.where(model.eligible, excess, -np.inf)


def peak_ok(model: LoadModel, settings: BalancingSettings) -> bool:
    """No node is hot by itself: none above the hotspot (where the cluster is not full),
    none more than ``above_mean`` above the mean on a weighted resource."""
    if not model.eligible.any():
        return True
    return bool(node_excess(model, settings).max() <= 1e-12)


def _triggered(model: LoadModel, settings: BalancingSettings) -> bool:
    if not peak_ok(model, settings):
        return True
    return _figure(model.figures(), settings) > settings.threshold


def level_reached(model: LoadModel, settings: BalancingSettings) -> bool:
    """Where the balance phase stops: the figure at half the threshold, no node hot."""
    return _figure(model.figures(), settings) <= settings.threshold / 2 and peak_ok(model, settings)


def _figure(figures, settings: BalancingSettings) -> float:
    if settings.imbalance == "pve":
        return figures.pve
    if settings.imbalance == "spread":
        weighted = [k for k, w in zip(("cpu", "memory", "disk"), (settings.weights.get("cpu", 0),
                                                                    settings.weights.get("memory", 0),
                                                                    settings.weights.get("disk", 0))) if w]
        return max(figures.spread[k] for k in weighted) / 100.0
    return figures.keel
