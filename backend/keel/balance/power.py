"""The consolidation plan: which quiet nodes to empty and power off, where their guests go,
and what the awake nodes would carry then.  Pure: a snapshot, what ``keel.pve.power`` read
besides it, the settings and the time in; a ``PowerPlan`` out.

1. Each node of ``power.nodes`` passes the gates that depend on it alone
   (``power_gates``: awake, not in maintenance, not the API node nor the lease holder,
   a Wake-on-LAN MAC, the HA stack settled); a ``never_sleep`` window keeps them all.
2. The candidates are tried cheapest first (fewest GiB of running guests to move, then
   by name), each added to the nodes already chosen if, with all of them asleep,
   ``min_awake``, corosync's quorum and Ceph still hold, the balancer's own planner
   (``make_plan`` with the nodes in maintenance: every rule, pin, affinity, local disk,
   device and HA rule it knows) finds a place for every running guest, and the awake
   nodes stay under the headroom line with N+1 kept.  A candidate that fails is refused
   with the gate's reason, and the next one is tried.
3. The steps: the migrations, then for each node HA maintenance (so that the CRM neither
   fences nor recovers it), Ceph's ``noout``, and the shutdown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

from keel import words
from keel.balance import guestconfig, loads
from keel.balance.balancer import make_plan
from keel.balance.history import History
from keel.balance.loads import CPU, MEM, Samples
from keel.balance.plan import Plan
from keel.balance.power_auto import maintenance_demand
from keel.balance.power_gates import Forecast, Refusal
from keel.balance import power_gates as gates
from keel.balance.rules import eligible_nodes
from keel.balance.settings import BalancingSettings
from keel.model import PowerFacts, Snapshot

GiB = 1024**3


@dataclass(frozen=True)
class Step:
    action: str                 # migrate | ha-maintenance | ceph-noout | shutdown
    node: str | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PowerPlan:
    verdict: str                          # words.SLEEP | ALL_AWAKE | NO_QUORUM
    reason: str
    mode: str
    sleep: tuple[str, ...]                # the nodes to empty and power off, in this order
    evacuation: Plan | None               # the balancer's plan that empties them
    refusals: tuple[Refusal, ...] = ()    # why each other candidate stays awake
    steps: tuple[Step, ...] = ()
    forecast: tuple[Forecast, ...] = ()   # the awake nodes once the guests have moved
    costs: dict[str, float] = field(default_factory=dict)   # candidate -> GiB to move off it
    notices: tuple[str, ...] = ()
    saving_watts: float = 0.0
    created_at: float = 0.0

    @property
    def moves(self) -> tuple[Any, ...]:
        return self.evacuation.moves if self.evacuation is not None else ()

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "reason": self.reason, "mode": self.mode, "sleep": list(self.sleep),
            "created_at": self.created_at,
            "moves": [m.to_json() for m in self.moves],
            "summary": {"nodes": len(self.sleep), "moves": len(self.moves),
                        "gib_moved": round(sum(m.mem_bytes + m.disk_bytes for m in self.moves) / GiB, 2),
                        "saving_watts": round(self.saving_watts, 1)},
            "steps": [s.to_json() for s in self.steps],
            "refusals": [r.to_json() for r in self.refusals],
            "forecast": [f.to_json() for f in self.forecast],
            "costs_gib": {n: round(v, 2) for n, v in self.costs.items()},
            "skipped": [s.to_json() for s in self.evacuation.skipped] if self.evacuation else [],
            "notices": list(self.notices),
        }


def cost_bytes(snapshot: Snapshot, node: str, settings: BalancingSettings) -> int:
    """What emptying ``node`` moves: its running guests' memory (and local disks, where
    Keel may move them)."""
    total = 0
    for guest in snapshot.guests_on(node):
        if guest.running:
            total += guest.mem + (guest.local_disk_bytes if settings.with_local_disks else 0)
    return total


def evacuation_settings(settings: BalancingSettings, nodes: Iterable[str]) -> BalancingSettings:
    """The balancer's settings for emptying ``nodes``: they are in maintenance, and only the
    moves maintenance and the rules require are planned (the balancer levels the awake nodes
    afterwards, in its own rounds)."""
    return replace(settings, maintenance=frozenset(settings.maintenance) | set(nodes),
                   limits=replace(settings.limits, moves=0), threshold=float("inf"),
                   hotspot=None, above_mean=None)


def forecast(snapshot: Snapshot, settings: BalancingSettings, asleep: Iterable[str], plan: Plan | None,
             history: History, samples: Samples | None = None) -> list[Forecast]:
    """The awake nodes' load (those Keel may place guests on) once ``plan``'s moves are made."""
    chosen = set(asleep)
    eligible = eligible_nodes(snapshot, evacuation_settings(settings, chosen), set(history.maintenance))
    model = loads.build(snapshot, settings, eligible, samples)
    ends: dict[int, tuple[str, str]] = {}
    for move in plan.moves if plan is not None else ():
        source = ends[move.vmid][0] if move.vmid in ends else move.source
        ends[move.vmid] = (source, move.target)
    for vmid, (source, target) in ends.items():
        if source != target and source in model.index and target in model.index:
            model.move([vmid], source, target)
    return [Forecast(name, float(model.load[i][CPU]), float(model.cap[i][CPU]), float(model.load[i][MEM]),
                     float(model.cap[i][MEM]), float(model.mem_cap[i]))
            for name, i in model.index.items() if model.eligible[i]]


def plan_sleep(snapshot: Snapshot, facts: PowerFacts, settings: BalancingSettings,
               now: float | None = None, history: History | None = None, samples: Samples | None = None,
               lease_holder: str | None = None, configs: guestconfig.Source | None = None,
               only: str | None = None, wake_tests: Mapping[str, Any] | None = None,
               wake_test: bool = True) -> PowerPlan:
    """The nodes that can sleep now and how.  ``only``: consider that node alone (``keel
    power sleep NODE``), which must be one of ``power.nodes`` all the same.  ``lease_holder``
    None sets the lease gate aside; ``wake_tests``: each node's last successful wake by Keel
    (``power_exec.WAKE_TESTS``); ``wake_test`` False sets that gate aside (``keel power test``,
    the sleep that makes the test)."""
    power = settings.power
    history = history or History()
    now = snapshot.taken_at if now is None else now
    refusals: list[Refusal] = []
    notices: list[str] = []
    unknown = [n for n in power.nodes if n not in snapshot.nodes]
    if unknown:
        notices.append(f"balancing.power.nodes names nodes this cluster does not have: {', '.join(unknown)}")
    if power.mode == "off":
        notices.append("balancing.power.mode is off: Keel powers no node off (this plan is a preview)")
    current = forecast(snapshot, settings, (), None, history, samples)

    def finish(verdict: str, reason: str, sleep: tuple[str, ...] = (), evac: Plan | None = None,
               steps: tuple[Step, ...] = (), fc: list[Forecast] | None = None,
               costs: dict[str, float] | None = None) -> PowerPlan:
        return PowerPlan(verdict, reason, power.mode, sleep, evac, tuple(refusals), steps,
                         tuple(fc if fc is not None else current), costs or {}, tuple(notices),
                         sum(power.watts_for(n) for n in sleep), now)

    if not snapshot.quorate:
        return finish(words.NO_QUORUM, "the cluster has no quorum: no node sleeps")
    if only is not None and only not in snapshot.nodes:
        refusals.append(Refusal(words.GATE_POLICY, only, "no such node in this cluster"))
        return finish(words.ALL_AWAKE, f"{only} is not a node of this cluster")
    listed = [n for n in power.nodes if n in snapshot.nodes]
    if only is not None:
        if only not in listed:
            refusals.append(Refusal(words.GATE_POLICY, only, "it is not one of balancing.power.nodes"))
            return finish(words.ALL_AWAKE, f"{only} may not sleep: it is not one of balancing.power.nodes")
        listed = [only]
    if not listed:
        return finish(words.ALL_AWAKE, "no node may sleep: balancing.power.nodes names none")
    window = gates.schedule(power, now)
    if window is not None:
        refusals.append(window)
        return finish(words.ALL_AWAKE, f"no node sleeps now: {window.detail}")

    awake = {name for name, node in snapshot.nodes.items() if node.online}
    candidates = []
    for name in listed:
        refusal = _node_gate(name, snapshot, facts, settings, history, lease_holder, awake)
        if refusal is None and wake_test:
            refusal = gates.wake_test(name, wake_tests, power.wake_test_max_age_s, now)
        if refusal is not None:
            if refusal not in refusals:
                refusals.append(refusal)
        else:
            candidates.append(name)
    costs = {n: cost_bytes(snapshot, n, settings) / GiB for n in candidates}
    chosen: list[str] = []
    evac: Plan | None = None
    best = current
    for name in sorted(candidates, key=lambda n: (costs[n], n)):
        trial = chosen + [name]
        after = awake - set(trial)
        refusal = (gates.min_awake(after, name, power.min_awake)
                   or gates.quorum(facts.votes, after, set(trial), name, power.allow_bare_majority)
                   or gates.ceph(name, after, facts.ceph, power.allow_bare_majority))
        plan = None
        if refusal is None:
            plan = make_plan(snapshot, evacuation_settings(settings, trial), history, now, samples,
                             configs=configs)
            refusal = next((r for r in (gates.guests_stay(n, snapshot, plan) for n in trial) if r), None)
            if refusal is not None and refusal.node != name:
                refusal = replace(refusal, node=name, detail=f"with {name} asleep too, {refusal.node}'s "
                                                             f"guests have nowhere to go: {refusal.detail}")
            refusal = refusal or _maintenance_room(name, snapshot, settings, history, plan)
        fc: list[Forecast] = []
        if refusal is None:
            fc = forecast(snapshot, settings, trial, plan, history, samples)
            refusal = gates.headroom(fc, power, name)
        if refusal is not None:
            refusals.append(refusal)
            continue
        chosen, evac, best = trial, plan, fc
    if not chosen:
        first = next((r for r in refusals if r.node is not None), None)
        reason = f"no node can sleep now: {first.node}: {first.detail}" if first else "no node can sleep now"
        return finish(words.ALL_AWAKE, reason, costs=costs)
    assert evac is not None
    evac = _sleep_words(evac, chosen)
    _stays(snapshot, chosen, evac, notices)
    steps = _steps(snapshot, facts, chosen, evac)
    peak_cpu = max((f.cpu_frac for f in best), default=0.0)
    peak_mem = max((f.mem_frac for f in best), default=0.0)
    moved = sum(m.mem_bytes + m.disk_bytes for m in evac.moves) / GiB
    reason = (f"{gates._names(chosen)} can sleep: {len(evac.moves)} move{'s' if len(evac.moves) != 1 else ''} "
              f"({moved:.0f} GiB); the awake nodes would peak at {peak_cpu:.0%} CPU and {peak_mem:.0%} memory "
              f"(lines {power.cpu_line:.0%} and {power.memory_line:.0%}"
              + (f", N+{power.spare_nodes} kept" if power.spare_nodes else "") + ")")
    return finish(words.SLEEP, reason, tuple(chosen), evac, steps, best, costs)


def _sleep_words(evac: Plan, chosen: list[str]) -> Plan:
    """The evacuation plans these nodes as in maintenance; its moves say why they really go."""
    def told(m: Any) -> Any:
        if m.reason == words.MAINTENANCE and m.source in chosen:
            return replace(m, detail=f"{m.source} goes to sleep (power saving)")
        return m
    return replace(evac, moves=tuple(told(m) for m in evac.moves))


def _node_gate(name: str, snapshot: Snapshot, facts: PowerFacts, settings: BalancingSettings,
               history: History, lease_holder: str | None, awake: set[str]) -> Refusal | None:
    """The gates that depend on the node alone."""
    node = snapshot.nodes[name]
    if name not in awake:
        return Refusal(words.GATE_AWAKE, name, "it is off already")
    if name in settings.ignore.nodes:
        return Refusal(words.GATE_POLICY, name, "balancing.ignore.nodes names it: Keel leaves it alone")
    if name in settings.maintenance or name in history.maintenance or node.in_maintenance:
        return Refusal(words.GATE_MAINTENANCE, name, "it is in maintenance: someone is working on it")
    return (gates.api_node(name, facts) or gates.lease(name, lease_holder) or gates.wake_on_lan(name, facts)
            or gates.ha(name, snapshot))


def _maintenance_room(name: str, snapshot: Snapshot, settings: BalancingSettings, history: History,
                      plan: Plan) -> Refusal | None:
    """Guests of a node in Keel's maintenance that, with ``name`` asleep, would find no room."""
    why = maintenance_demand(snapshot, set(settings.maintenance) | set(history.maintenance), plan)
    return Refusal(words.GATE_MAINTENANCE, name, f"with it asleep, {why}") if why else None


def _stays(snapshot: Snapshot, chosen: list[str], evac: Plan, notices: list[str]) -> None:
    """What stays on a node that sleeps: templates, and stopped guests that could not move."""
    ends = {m.vmid: m.target for m in evac.moves}
    for name in chosen:
        left = [g for g in snapshot.guests_on(name) if not g.running and ends.get(g.vmid, name) == name]
        templates = [g for g in left if g.template]
        stopped = [g for g in left if not g.template]
        if templates:
            notices.append(f"template{'s' if len(templates) > 1 else ''} "
                           f"{', '.join(f'{g.name} ({g.vmid})' for g in templates)} stay{'s' if len(templates) == 1 else ''} "
                           f"on {name}: clones from {'it' if len(templates) == 1 else 'them'} fail while it sleeps")
        if stopped:
            notices.append(f"stopped guest{'s' if len(stopped) > 1 else ''} "
                           f"{', '.join(f'{g.name} ({g.vmid})' for g in stopped)} stay{'s' if len(stopped) == 1 else ''} "
                           f"on {name}: {'it' if len(stopped) == 1 else 'they'} cannot start while it sleeps")


def _steps(snapshot: Snapshot, facts: PowerFacts, chosen: list[str], evac: Plan) -> tuple[Step, ...]:
    steps: list[Step] = []
    for name in chosen:
        off = [m for m in evac.moves if m.source == name]
        if off:
            gib = sum(m.mem_bytes + m.disk_bytes for m in off) / GiB
            targets = sorted({m.target for m in off})
            steps.append(Step("migrate", name, f"{len(off)} guest{'s' if len(off) != 1 else ''} ({gib:.0f} GiB) "
                                               f"to {gates._names(targets)}"))
    ha = gates.uses_ha(snapshot)
    osd_nodes = [n for n in chosen if gates.has_osds(n, facts.ceph)]
    for name in chosen:
        if ha:
            steps.append(Step("ha-maintenance", name, f"ha-manager crm-command node-maintenance enable {name}: "
                                                      f"the HA manager neither fences nor recovers it while off"))
        if name == (osd_nodes[0] if osd_nodes else None):
            assert facts.ceph is not None
            if "noout" in facts.ceph.flags:
                steps.append(Step("ceph-noout", None, "noout is set already: Keel leaves it as it is"))
            else:
                steps.append(Step("ceph-noout", None, f"set noout (cluster-wide: PVE's API sets no per-host flag), "
                                                      f"so that the OSDs of {gates._names(osd_nodes)} are not "
                                                      f"marked out while asleep; cleared once they are back"))
        steps.append(Step("shutdown", name, f"POST /nodes/{name}/status command=shutdown, then wait until it "
                                            f"has left the cluster"))
    return tuple(steps)


def status(snapshot: Snapshot, facts: PowerFacts, settings: BalancingSettings, now: float | None = None
           ) -> dict[str, Any]:
    """Each node's power state and what its sleep would depend on; quorum; the schedule now;
    the saving while nodes sleep.  ``keel power status --json`` prints it as it is."""
    power = settings.power
    now = snapshot.taken_at if now is None else now
    c = facts.ceph
    nodes = []
    asleep = []
    for name, node in snapshot.nodes.items():
        guests = snapshot.guests_on(name)
        state = words.AWAKE if node.online else words.ASLEEP if name in power.nodes else words.DOWN
        if state == words.ASLEEP:
            asleep.append(name)
        nodes.append({
            "node": name, "power": state, "may_sleep": name in power.nodes,
            "votes": facts.votes.get(name), "wakeonlan": facts.wol.get(name),
            "ceph_osds": c.osds.get(name, (0, 0))[0] if c else 0, "ceph_mon": bool(c and name in c.mons),
            "ha_state": node.ha_state, "lrm_mode": facts.lrm_modes.get(name),
            "api_node": name == facts.local_node,
            "guests": len(guests), "running": sum(1 for g in guests if g.running),
            "cpu": round(node.cpu_frac, 4) if node.online else None,
            "memory": round(node.mem_frac, 4) if node.online else None,
        })
    expected = sum(facts.votes.values())
    awake_votes = sum(v for n, v in facts.votes.items() if n in snapshot.nodes and snapshot.nodes[n].online)
    window = power.never_sleep_window(now)
    next_wake = power.next_wake_all(now)
    return {
        "mode": power.mode, "may_sleep": list(power.nodes), "min_awake": power.min_awake,
        "nodes": nodes,
        "quorum": {"expected_votes": expected, "awake_votes": awake_votes, "quorum": expected // 2 + 1,
                   "quorate": snapshot.quorate, "allow_bare_majority": power.allow_bare_majority},
        "ceph": None if c is None else {"health": c.health, "flags": sorted(c.flags), "error": c.error},
        "never_sleep_open": window.text if window else None,
        "next_wake_all": next_wake, "timezone": power.timezone,
        "asleep": asleep, "saving_watts": sum(power.watts_for(n) for n in asleep),
        "time": now,
    }
