"""Promised and achieved: what a job's plan said the cluster would look like after it, and
what it looked like when the job ended (docs/ui.md, "Promised and achieved").

``promise(plan)`` is recorded with the job before its first move starts; ``measure(...)``
when it ends, from a fresh reading of the cluster.  Both are plain data kept in the store
(``Store.job_outcome``) and shown in the Rebalancing tab's title and history, with why
they differ: moves that were not made, and load that moved on its own (the plan judged
load averaged over ``balancing.window``; the measure is the load of the moment).
"""

from __future__ import annotations

import logging
from typing import Any

from keel.balance import loads
from keel.balance.plan import Plan
from keel.balance.rules import eligible_nodes
from keel.balance.settings import BalancingSettings
from keel.errors import KeelError

log = logging.getLogger("keel.engine")

SAME = 0.005           # figures closer than this read the same at two decimals


def _nodes(utilisation: dict[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    return {name: {"cpu": round(cpu, 4), "memory": round(mem, 4)} for name, (cpu, mem) in utilisation.items()}


def promise(plan: Plan) -> dict[str, Any]:
    """The plan's predicted after-state: the imbalance, the fullest node, each node's load."""
    return {"imbalance": round(plan.after.figures.keel, 4), "before": round(plan.before.figures.keel, 4),
            "peak": round(plan.after.figures.peak, 4), "moves": len(plan.moves),
            "nodes": _nodes({n: (load.cpu, load.memory) for n, load in plan.after.nodes.items()
                             if load.eligible})}


def measure(snapshot: Any, settings: BalancingSettings, maintenance: Any, promised: dict[str, Any],
            made: int, planned: int, at: float) -> dict[str, Any]:
    """The cluster as it is now, in the plan's terms (Keel's figure over the nodes it balances
    onto), and why it differs from ``promised``.  ``made``: moves that ended well."""
    eligible = eligible_nodes(snapshot, settings, set(maintenance))
    model = loads.build(snapshot, settings, eligible, None)
    figures = model.figures()
    u = model.utilisation()
    nodes = {name: (float(u[i][0]), float(u[i][1])) for name, i in model.index.items() if model.eligible[i]}
    why: list[str] = []
    if made < planned:
        why.append(f"{planned - made} of {planned} moves were not made")
    worst = None
    for name, (cpu, mem) in nodes.items():
        want = (promised.get("nodes") or {}).get(name)
        if not want:
            continue
        for resource, got, planned_value in (("CPU", cpu, want["cpu"]), ("memory", mem, want["memory"])):
            off = got - planned_value
            if worst is None or abs(off) > abs(worst[3]):
                worst = (name, resource, got, off, planned_value)
    if worst is not None and abs(worst[3]) >= 0.02:
        name, resource, got, off, planned_value = worst
        why.append(f"load moved: {name}'s {resource} is {got:.0%} against {planned_value:.0%} planned "
                   f"({'+' if off > 0 else '-'}{abs(off) * 100:.0f} points)")
    if abs(figures.keel - promised.get("imbalance", figures.keel)) >= SAME and settings.mode != "assigned":
        why.append(f"the plan judged load averaged over {settings.window_s / 60:.0f} min; this is the "
                   f"load when the job ended")
    return {"imbalance": round(figures.keel, 4), "peak": round(figures.peak, 4), "made": made,
            "planned": planned, "measured_at": at, "nodes": _nodes(nodes),
            "why": why if abs(figures.keel - promised.get("imbalance", figures.keel)) >= SAME or made < planned
            else []}


def record_promise(store: Any, job_id: str, plan: Plan) -> None:
    """Before a job's first move: what its plan promises, kept with the job."""
    try:
        store.job_outcome(job_id, promised=promise(plan))
    except KeelError as err:             # the job goes on; only the comparison is lost
        log.warning("job %s: cannot record its promise: %s", job_id, err)


def record_achieved(engine: Any, job_id: str, execution: Any) -> dict[str, Any] | None:
    """After a job: the cluster read afresh, in the plan's terms, beside the promise."""
    try:
        promised = next((j["promised"] for j in engine.store.jobs(limit=50) if j["id"] == job_id), None)
        if promised is None or execution is None:
            return None
        snap = engine.reading.get(0.0)
        achieved = measure(snap, engine.config.balancing, engine.store.maintenance_nodes(), promised,
                           sum(1 for r in execution.results if r.ok), promised["moves"], engine.clock())
        engine.store.job_outcome(job_id, achieved=achieved)
        return {"promised": promised, "achieved": achieved}
    except KeelError as err:
        log.warning("job %s: cannot measure what it achieved: %s", job_id, err)
        return None
