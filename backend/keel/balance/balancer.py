"""One planning round, start to finish: rules → load model → method → margin → order.

``make_plan(snapshot, settings, history, now)`` is a pure function: the same inputs give
the same plan, which is what ``keel plan`` shows, ``keel apply`` runs and the benchmark
measures.  ``best_node`` answers "where would Keel put a new guest of this size?".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from keel import words
from keel.balance import guestconfig, loads, sequence
from keel.balance.history import History
from keel.balance.loads import LoadModel, Samples
from keel.balance.plan import Figures, Move, NodeLoad, Plan, Skip, State
from keel.balance.level import _figure, _triggered, full_resources, node_excess
from keel.balance.planner import RETURNS, plan_keel
from keel.balance.rules import Constraints, compile_rules, eligible_nodes
from keel.balance.settings import BalancingSettings
from keel.model import Guest, Snapshot

GiB = 1024**3


def make_plan(snapshot: Snapshot, settings: BalancingSettings, history: History | None = None,
              now: float | None = None, samples: Samples | None = None,
              method: str | None = None, may_move: Callable[[Guest], bool] | None = None,
              oneshot: bool = False, configs: guestconfig.Source | None = None) -> Plan:
    """``may_move``: for a plan asked for by a user, whether that user may migrate the guest
    (the others stay, skipped as not permitted).  ``oneshot``: a plan that ``keel plan`` /
    ``keel apply`` (and the tab's Plan and Apply) make, which goes as far as the level within
    the one-shot limits (``limits.oneshot``; none by default) instead of one round's budget.
    ``configs``: where guest configs come from (``guestconfig.Reader`` on a client); a move
    PVE would refuse over a guest's devices, CPU or storages is not planned, and the guests
    held back are listed in ``skipped`` (without: the executor's precheck finds them)."""
    history = history or History()
    now = snapshot.taken_at if now is None else now
    method = method or settings.method
    if oneshot:
        settings = settings.oneshot()
    if method != "keel":
        # Proxmox's methods judge by Proxmox's figure and know no hotspot or above-mean limit.
        settings = replace(settings, imbalance="pve", hotspot=None, above_mean=None)
    cons = compile_rules(snapshot, settings, history, now, may_move)
    model = loads.build(snapshot, settings, cons.eligible, samples)
    before = _state(model, cons, snapshot)
    config = _summary(settings, method)
    if not snapshot.quorate:
        return Plan(words.NO_QUORUM, method, "the cluster has no quorum: nothing is moved", (),
                    before, before, tuple(cons.skipped), tuple(cons.conflicts), tuple(cons.notices),
                    config, now)
    if settings.mode == "assigned":
        for resource, ratio in model.provisioning().items():
            if ratio > 1.0:
                cons.notices.append(f"the cluster is over-provisioned: running guests are assigned "
                                    f"{ratio:.0%} of the eligible nodes' {resource}")
    if settings.mode == "psi" and snapshot.pve_major < 9:
        cons.notices.append("psi mode needs Proxmox VE 9 (pressure figures); using used load")
    full = full_resources(model, settings)
    if full:
        cons.notices.append(_full_sentence(model, settings, full) + ": add capacity, or raise the hotspot")
    admission = guestconfig.Admission(snapshot, configs) if configs is not None else None
    outcome, ordered, dropped, left_out = _plan_and_order(model, cons, settings, snapshot, method, admission)
    held = admission.skips({m.vmid for m in ordered}) if admission is not None else []
    skipped = list(cons.skipped) + held + outcome.skipped + dropped + [
        Skip(words.NO_SAFE_ORDER, "left out: no order of the plan's moves would keep memory and every "
                                  "rule safe with it in the plan", g.vmid, g.name)
        for g in snapshot.guests.values() if g.vmid in left_out]
    balance = [m for m in ordered if m.reason == words.BALANCE]
    verdict, reason = words.PLANNED, ""
    stopped = getattr(outcome, "stop", "") or (words.NOTHING_WORTH_IT if outcome.not_worth_it else "")
    if outcome.not_worth_it:
        verdict = words.NOT_WORTH_IT
        reason = next((s.detail for s in outcome.skipped if s.reason == words.LIMIT), "not worth it")
    elif balance and outcome.margin_checked:
        reason = balance[0].detail
    elif balance:
        cluster_gain, touched_gain, touched, change = _gain(model, ordered)
        whole = None       # a round its budget cut short: what the whole plan would gain
        if outcome.budget_spent and touched_gain < settings.margin and cluster_gain > 1e-9 and method == "keel":
            whole = _gain(model, plan_keel(model.copy(), cons, settings.oneshot(), admission).moves)[1]
        if not _pays(touched_gain, cluster_gain, whole, settings):
            # the moves that cool a hot node may cost some of the gain: the longest beginning
            # of the plan that is worth it goes ahead (a looser threshold stops earlier on
            # the same sequence, so it never moves more than this)
            kept = _worth_beginning(model, outcome.moves, settings.margin)
            if kept is not None:
                ordered, extra = _order(kept, model, cons, settings)
                skipped += [s for s in extra if s not in skipped]
                balance = [m for m in ordered if m.reason == words.BALANCE]
                cluster_gain, touched_gain, touched, change = _gain(model, ordered)
                whole = None
        nodes = int(model.eligible.sum())
        share = (f"the imbalance of the {touched} nodes it touches by {touched_gain:.0%}, the cluster's by "
                 f"{cluster_gain:.0%}" if touched < nodes else f"the imbalance by {cluster_gain:.0%}")
        share += f" ({change[0]:.2f} → {change[1]:.2f})"
        mandatory = len(_net([m for m in ordered if m.vmid not in _balance_only(ordered)]))
        first = (f"{mandatory} mandatory move{'s' if mandatory != 1 else ''}: imbalance "
                 f"{before.figures.keel:.2f} → {change[0]:.2f}; then " if mandatory else "")
        if not _pays(touched_gain, cluster_gain, whole, settings):
            ordered, extra = _order(_without_balance(ordered), model, cons, settings)
            skipped += extra
            verdict = words.NOT_WORTH_IT
            stopped = words.NOTHING_WORTH_IT
            reason = (f"{first}the best plan cuts {share}, less than the margin of {settings.margin:.0%}"
                      if cluster_gain > 1e-9 else f"{first}the best plan within the round's budget would not "
                      f"lower the cluster's imbalance ({change[0]:.2f} → {change[1]:.2f})")
        elif outcome.budget_spent:
            whole_said = "" if whole is None else f" (the whole plan cuts them by {whole:.0%})"
            reason = (f"{first}cuts {share} with {len(balance)} balancing moves; the plan's budget is spent, "
                      f"later rounds go on{whole_said}")
        else:
            reason = f"{first}cuts {share} with {len(balance)} balancing moves{_why_stopped(stopped, settings)}"
    after_model = model.copy()
    for move in _net(ordered):
        after_model.move([move.vmid], move.source, move.target)
    after = _state(after_model, cons, snapshot, ordered)
    if verdict == words.PLANNED:
        if not ordered:
            value = _figure(before.figures, settings)
            figure = f"{FIGURE_NAMES[settings.imbalance]} {value:.2f}"
            if full and not _triggered(model, settings):
                verdict, stopped = words.STUCK, words.CLUSTER_FULL
                reason = _full_sentence(model, settings, full) + ": no move would cool a node; nothing is moved"
            elif outcome.stuck:
                verdict, reason = words.STUCK, "imbalanced, but no allowed move helps (see skipped)"
            elif _triggered(model, settings) and value <= settings.threshold:
                verdict = words.STUCK
                reason = f"{_hot_sentence(model, settings)}, but no allowed move cools it"
            elif _triggered(model, settings):
                verdict = words.STUCK
                reason = f"{figure} is over the threshold, but no move is allowed"
            else:
                verdict = words.BALANCED
                reason = (f"{figure} is within the threshold {settings.threshold:.2f}"
                          + (f" and no node is above {settings.hotspot:.0%}" if settings.hotspot else ""))
        elif not reason:
            kinds = sorted({m.reason for m in ordered})
            reason = f"{len(ordered)} moves ({', '.join(kinds)})"
    if not balance and stopped in (words.LEVEL_REACHED, "") and not _triggered(model, settings):
        stopped = words.CLUSTER_FULL if full else words.LEVEL_REACHED
    return Plan(verdict, method, reason, tuple(ordered), before, after, tuple(skipped),
                tuple(cons.conflicts), tuple(cons.notices), config, now, stopped)


def _why_stopped(stopped: str, settings: BalancingSettings) -> str:
    """What stopped a plan's balancing, as the end of its reason."""
    figure = FIGURE_NAMES[settings.imbalance]
    if stopped == words.LEVEL_REACHED:
        return f"; level reached ({figure} at most {settings.threshold / 2:.2f}, no node hot by itself)"
    if stopped == words.DIMINISHING:
        return (f"; balanced ({figure} within {settings.threshold:.2f}, no node hot by itself) and returns "
                f"diminish: the next move would cut it by less than {RETURNS:.0%} as much per GiB as these")
    if stopped == words.NOTHING_WORTH_IT:
        return "; no further move is worth it"
    return ""


def _full_sentence(model: LoadModel, settings: BalancingSettings, full: list[int]) -> str:
    fluid = model.fluid()
    uses = " and ".join(f"{loads.RESOURCES[r]} {fluid[r]:.0%}" for r in full)
    return (f"the cluster is full: its mean use ({uses}) is above the hotspot of "
            f"{settings.hotspot:.0%}, so no placement brings every node under it")


def _hot_sentence(model: LoadModel, settings: BalancingSettings) -> str:
    """Which node is hot by itself, and why."""
    excess = node_excess(model, settings)
    i = int(np.argmax(excess))
    u, fluid = model.utilisation()[i], model.fluid()
    weighted = [r for r in range(len(u)) if model.weights[r] > 0]
    r = max(weighted, key=lambda k: u[k] - fluid[k])
    if settings.hotspot is not None and max(u[k] for k in weighted) > settings.hotspot:
        r = max(weighted, key=lambda k: u[k])
        return f"{model.nodes[i]} is at {u[r]:.0%} {loads.RESOURCES[r]}, above the hotspot of {settings.hotspot:.0%}"
    return (f"{model.nodes[i]} is at {u[r]:.0%} {loads.RESOURCES[r]}, {(u[r] - fluid[r]) * 100:.0f} points "
            f"above the mean ({fluid[r]:.0%})")


MAX_REPLANS = 3


def _plan_and_order(model: LoadModel, cons: Constraints, settings: BalancingSettings, snapshot: Snapshot,
                    method: str, admit: Callable[..., bool] | None = None
                    ) -> tuple[Any, list[Move], list[Skip], set[int]]:
    """Plan, then order into waves.  A balancing move that cannot be ordered safely is not
    simply dropped (what remains could be worse than nothing): its guest is left out and the
    plan made again without it."""
    left_out: set[int] = set()
    for attempt in range(MAX_REPLANS):
        work = model.copy()
        if method == "keel":
            outcome = plan_keel(work, cons, settings, admit)
        else:
            from keel.balance.pvemethods import plan_pve
            outcome = plan_pve(work, cons, settings, snapshot, method)
        ordered, dropped = _order(outcome.moves, model, cons, settings)
        unordered = {s.vmid for s in dropped if s.reason == words.NO_SAFE_ORDER and s.vmid is not None}
        retry = unordered & _balance_only(outcome.moves)
        if not retry:
            break
        if attempt == MAX_REPLANS - 1:
            ordered, dropped = _order(_without_balance(outcome.moves), model, cons, settings)
            left_out |= _balance_only(outcome.moves)
            break
        left_out |= retry
        for unit in cons.units:
            if any(g.vmid in retry for g in unit.guests):
                unit.balance = False
    return outcome, ordered, dropped, left_out


def _pays(touched_gain: float, cluster_gain: float, whole: float | None, settings: BalancingSettings) -> bool:
    """Whether a plan's balancing moves are worth their migrations: they cut the imbalance
    of the nodes they touch by the margin.  A round its budget cut short pays too when it
    lowers the cluster's figure and is the beginning of a plan that pays (``whole``: that
    plan's cut, the same moves continued past the budget), so that a cluster far from level
    gets there over rounds.  Never skipped (issue 25: a round whose budget was spent ran
    whatever it had, one predicted to raise the figure from 0.18 to 0.19)."""
    if touched_gain >= settings.margin:
        return True
    return whole is not None and cluster_gain > 1e-9 and whole >= settings.margin


def _worth_beginning(model: LoadModel, moves: list[Move], margin: float) -> list[Move] | None:
    """The plan's mandatory moves and the longest beginning of its balancing moves (in the
    planner's order) that cuts the imbalance of the nodes it touches by ``margin``."""
    only = _balance_only(moves)
    must = [m for m in moves if m.vmid not in only]
    seq = [m for m in moves if m.vmid in only]
    for k in range(len(seq) - 1, 0, -1):
        candidate = must + seq[:k]
        if _gain(model, candidate)[1] >= margin:
            return [replace(m, wave=0) for m in candidate]
    return None


def _balance_only(moves: list[Move]) -> set[int]:
    """Guests that move only to balance (not for maintenance or a rule)."""
    must = {m.vmid for m in moves if m.reason in (words.MAINTENANCE, words.RULE)}
    return {m.vmid for m in moves if m.reason == words.BALANCE} - must


def _without_balance(moves: list[Move]) -> list[Move]:
    only = _balance_only(moves)
    return [replace(m, wave=0) for m in moves if m.vmid not in only]


# What the threshold is compared with, as plans name it (docs/balancing.md, "The imbalance").
FIGURE_NAMES = {"keel": "imbalance", "pve": "PVE's CRS figure", "spread": "spread"}


def imbalance(snapshot: Snapshot, settings: BalancingSettings, maintenance: Any = (),
              samples: Samples | None = None) -> Figures:
    """The cluster's figures as a plan made now shows them before its moves
    (``plan.before.figures``): over the nodes Keel may balance onto, in the settings' mode.
    ``maintenance``: nodes in maintenance besides the settings' (the engine's store)."""
    eligible = eligible_nodes(snapshot, settings, set(maintenance))
    return loads.build(snapshot, settings, eligible, samples).figures()


def _gain(model: LoadModel, ordered: list[Move]) -> tuple[float, float, int, tuple[float, float]]:
    """How much the balancing moves cut the imbalance (the figure shown, not the squared
    objective): over the cluster, and over the nodes they touch (so that on 64 nodes a plan
    moving guests between 4 of them is judged by those 4), and how many nodes they touch.
    The figure is a root mean square, so over a set of nodes it falls as the square root of
    the sum of their terms.  Last, the cluster's imbalance before and after them (after any
    mandatory moves), for the plan's reason: the percentage is taken on those two."""
    only = _balance_only(ordered)
    before = model.copy()
    for move in _net([m for m in ordered if m.vmid not in only]):
        before.move([move.vmid], move.source, move.target)
    after = before.copy()
    touched: set[str] = set()
    for move in _net([m for m in ordered if m.vmid in only]):
        after.move([move.vmid], move.source, move.target)
        touched |= {move.source, move.target}
    terms_before, terms_after = before.node_terms(), after.node_terms()
    index = [before.index[n] for n in touched if n in before.index]
    total = float(terms_before.sum())
    part = float(terms_before[index].sum())
    cluster = 1.0 - math.sqrt(max(0.0, float(terms_after.sum())) / total) if total > 0 else 0.0
    local = 1.0 - math.sqrt(max(0.0, float(terms_after[index].sum())) / part) if part > 0 else 0.0
    return cluster, local, len(index), (before.figures().keel, after.figures().keel)


def _net(moves: list[Move]) -> list[Move]:
    """Where each guest ends up, as one move per guest (parking folded away)."""
    first: dict[int, Move] = {}
    last: dict[int, Move] = {}
    for move in moves:
        first.setdefault(move.vmid, move)
        last[move.vmid] = move
    result = []
    for vmid, start in first.items():
        end = last[vmid]
        if start.source != end.target:
            result.append(replace(start, target=end.target))
    return result


def _order(moves: list[Move], model: LoadModel, cons: Constraints, settings: BalancingSettings
           ) -> tuple[list[Move], list[Skip]]:
    if not moves:
        return [], []
    anti_of: dict[int, set[str]] = {}
    placement: dict[int, str] = {}
    unit_of = {g.vmid: u for u in cons.units for g in u.guests}
    for name, keys in cons.anti_groups:
        for unit in cons.units:
            if unit.key in keys:
                for guest in unit.guests:
                    anti_of.setdefault(guest.vmid, set()).add(name)
                    placement[guest.vmid] = guest.node
    used = {n: float(model.mem_used[i]) for n, i in model.index.items()}
    cap = {n: float(model.mem_cap[i]) if model.eligible[i] else float("inf")
           for n, i in model.index.items()}
    # Nodes being emptied may be over their limit already; what matters is the targets.
    allowed = {vmid: set(unit.allowed) for vmid, unit in unit_of.items()}
    priority = {words.MAINTENANCE: 0, words.RULE: 1, words.BALANCE: 2}
    ordered = sorted(moves, key=lambda m: priority.get(m.reason, 3))
    return sequence.order(ordered, used, cap, anti_of, placement, settings.limits.concurrent,
                          settings.limits.per_node, allowed, judge=lambda: _LoadJudge(model))


class _LoadJudge:
    """``sequence.Judge`` on the load model: the planner's objective before and after."""

    def __init__(self, model: LoadModel) -> None:
        self.model = model.copy()

    def worsens(self, started: list[Move], moves: list[Move]) -> bool:
        trial = self.model.copy()
        for move in started:
            trial.move([move.vmid], move.source, move.target)
        before = trial.objective()
        for move in moves:
            trial.move([move.vmid], move.source, move.target)
        return trial.objective() > before + 1e-12

    def made(self, moves: list[Move]) -> None:
        for move in moves:
            self.model.move([move.vmid], move.source, move.target)


def _state(model: LoadModel, cons: Constraints, snapshot: Snapshot,
           moves: list[Move] | None = None) -> State:
    u = model.utilisation()
    counts = {name: 0 for name in model.nodes}
    ends = {m.vmid: m.target for m in (moves or [])}
    for guest in snapshot.guests.values():
        node = ends.get(guest.vmid, guest.node)
        if node in counts:
            counts[node] += 1
    nodes = {name: NodeLoad(name, float(u[i][0]), float(u[i][1]), float(u[i][2]), counts[name],
                            bool(model.eligible[i]))
             for name, i in model.index.items()}
    return State(nodes, model.figures())


def _summary(settings: BalancingSettings, method: str) -> dict[str, Any]:
    return {
        "method": method, "mode": settings.mode, "weights": dict(settings.weights),
        "guests": sorted(settings.guest_types), "scope": settings.scope,
        "imbalance": settings.imbalance, "threshold": settings.threshold,
        "hotspot": settings.hotspot, "above_mean": settings.above_mean, "hold": settings.hold,
        "margin": settings.margin,
        "cooldown_s": settings.cooldown_s, "headroom": settings.headroom,
        "limits": {"moves": settings.limits.moves, "gib": settings.limits.bytes / GiB,
                   "concurrent": settings.limits.concurrent, "per_node": settings.limits.per_node,
                   "oneshot_moves": settings.limits.oneshot_moves,
                   "oneshot_gib": None if settings.limits.oneshot_bytes is None
                   else settings.limits.oneshot_bytes / GiB},
        "with_local_disks": settings.with_local_disks,
        "maintenance": sorted(settings.maintenance),
    }


@dataclass(frozen=True)
class Placement:
    node: str
    fits: bool
    reason: str
    figure_after: float


def best_node(snapshot: Snapshot, settings: BalancingSettings, cores: float, memory: int,
              history: History | None = None, now: float | None = None) -> list[Placement]:
    """Every node ranked for a new guest of ``cores`` vCPUs and ``memory`` bytes, best first.

    The guest is assumed to use what it is given (as in ``assigned`` mode): a node fits if
    its memory stays under its limit with the guest on it.
    """
    now = snapshot.taken_at if now is None else now
    cons = compile_rules(snapshot, settings, history or History(), now)
    model = loads.build(snapshot, settings, cons.eligible, None)
    demand = np.array([float(cores), float(memory), 0.0])
    ranked = []
    for name, i in model.index.items():
        if not model.eligible[i]:
            why = "in maintenance" if name in cons.maintenance else "not a target (ignored)"
            ranked.append(Placement(name, False, why, float("inf")))
            continue
        trial = model.copy()
        trial.load[i] += demand
        trial.mem_used[i] += memory
        fits = trial.mem_used[i] <= trial.mem_cap[i]
        figure = _figure(trial.figures(), settings)
        u = trial.utilisation()[i]
        reason = (f"cpu {u[0]:.0%}, memory {u[1]:.0%} with it" if fits
                  else f"memory would reach {trial.mem_used[i] / model.cap[i][1]:.0%} (limit "
                       f"{model.mem_cap[i] / model.cap[i][1]:.0%})")
        ranked.append(Placement(name, bool(fits), reason, figure))
    for name, node in snapshot.nodes.items():
        if not node.online:
            ranked.append(Placement(name, False, "offline", float("inf")))
    ranked.sort(key=lambda p: (not p.fits, p.figure_after, p.node))
    return ranked
