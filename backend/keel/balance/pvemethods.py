"""``bruteforce`` and ``topsis``: Keel deciding as Proxmox VE's CRS auto-rebalancer does.

Per round: at most one balancing migration, the one PVE's method picks (lowest imbalance
after the move, or best TOPSIS rank), made only if PVE's imbalance figure (normalised,
as PVE 9.2) is over the threshold and the move cuts it by at least ``margin``
(relative).  The hold duration is the guard's, as in continuous mode.

Unlike PVE, candidates are every guest Keel may move (non-HA guests too, unless
``scope: ha``), checked against all of Keel's rules and memory limits; and the
mandatory phase (maintenance, broken rules) runs first, as with Keel's own method.
"""

from __future__ import annotations

import numpy as np

from keel import words
from keel.balance.loads import CPU, MEM, LoadModel
from keel.balance.moving import move_unit
from keel.balance.planner import Outcome, _anti_index, _blocked_by_anti, _mandatory_phase
from keel.balance.plan import Move, Skip
from keel.balance.pvecrs import (Migration, MigrationCandidate, NodeStats, ResourceStats,
                                 node_imbalance, select_bruteforce, select_topsis)
from keel.balance.rules import Constraints, Unit
from keel.balance.settings import BalancingSettings
from keel.model import Snapshot


def node_stats(model: LoadModel) -> list[NodeStats]:
    return [NodeStats(name, cpu=float(model.load[i][CPU]), maxcpu=float(model.cap[i][CPU]),
                      mem=float(model.load[i][MEM]), maxmem=float(model.cap[i][MEM]))
            for name, i in model.index.items() if model.eligible[i]]


def plan_pve(model: LoadModel, cons: Constraints, settings: BalancingSettings, snapshot: Snapshot,
             method: str) -> Outcome:
    moves: list[Move] = []
    skipped: list[Skip] = []
    placed = {u.key: u.node for u in cons.units}
    anti = _anti_index(cons)
    _mandatory_phase(model, cons, anti, placed, moves, skipped)
    nodes = node_stats(model)
    before = node_imbalance(nodes)
    start = model.objective()
    outcome = Outcome(moves, skipped, start, start, margin_checked=True)
    if before <= settings.threshold:
        return outcome
    units = {u.key: u for u in cons.units if u.balance and u.mandatory is None and u.allowed}
    candidates = list(_candidates(model, units.values(), anti, placed))
    if not candidates:
        outcome.stuck = True
        return outcome
    choose = select_bruteforce if method == "bruteforce" else select_topsis
    best = choose(nodes, candidates, normalised=True)
    if best is None:
        outcome.stuck = True
        return outcome
    if (before - best.imbalance) / before < settings.margin:
        skipped.append(Skip(words.LIMIT, f"PVE's {method} would move {best.migration.sid} to "
                                         f"{best.migration.target}, but that cuts PVE's CRS figure from "
                                         f"{before:.2f} only to {best.imbalance:.2f} (margin "
                                         f"{settings.margin:.0%})"))
        outcome.not_worth_it = True
        return outcome
    unit = units[best.migration.sid]
    move_unit(model, unit, best.migration.target, words.BALANCE,
              f"{method}: PVE's CRS figure {before:.2f} → {best.imbalance:.2f}", placed, moves,
              before - best.imbalance)
    outcome.balance_to = model.objective()
    return outcome


def _candidates(model: LoadModel, units, anti: dict[str, set[str]], placed: dict[str, str]):
    for unit in sorted(units, key=lambda u: u.key):
        demand = model.unit_demand(unit.vmids)
        footprint = model.unit_footprint(unit.vmids)
        stats = ResourceStats(cpu=float(demand[CPU]), maxcpu=sum(g.maxcpu for g in unit.guests),
                              mem=float(demand[MEM]), maxmem=float(sum(g.maxmem for g in unit.guests)))
        for target in sorted(unit.allowed - unit.avoid):
            i = model.index.get(target)
            if i is None or not model.eligible[i] or target == placed[unit.key]:
                continue
            if model.mem_used[i] + footprint > model.mem_cap[i]:
                continue
            if _blocked_by_anti(unit, target, anti, placed):
                continue
            yield MigrationCandidate(Migration(unit.key, placed[unit.key], target), stats)


def pve_figure(model: LoadModel) -> float:
    return node_imbalance(node_stats(model)) if np.any(model.eligible) else 0.0


__all__ = ["plan_pve", "node_stats", "pve_figure", "Unit"]
