"""Seeded clusters for the planner benchmark: the same seed always gives the same cluster.

Every instance is a ``keel.model.Snapshot`` built with ``balance_helpers.cluster`` (the
planner's own test builders), plus what the round runner needs: the nodes in maintenance
and, for the trace, each guest's load hour by hour.

Guest sizes are drawn from the same mix as ``keel sim generate`` (1-32 GiB, 1-16 vCPUs);
CPU use is log-normal with a median of 18 %, 45-90 % of the memory is in use, 3 % are
stopped.  Nodes are sized from what they hold: the cluster ends up with about 55 % of
its memory and 40 % of its CPU in use; mixed clusters have nodes of half, once and
twice the base size.
Placement fills nodes at random, weighted, never above 85 % of a node's memory (Keel's
limit is 90 %) nor 90 % of its CPU, so every instance starts realistic and within limits.

* ``small``, ``medium``, ``large``: 3×30, 8×200, 16×1000, 64×10,000; the first node gets
  five times the guests of the last (a gradient, as ``keel sim generate --profile skewed``);
* ``skewed``: a quarter of the nodes get eight times the guests of the others;
* ``mixed``: nodes of three sizes, each given the same number of guests;
* ``rules``: affinity bundles (``keel-affinity-*``), anti-affinity groups
  (``plb_anti_affinity_*``), pins (``plb_pin_*``), ignored and locked guests; every rule
  holds at the start;
* ``maintenance``: the second-fullest node enters maintenance and must be emptied;
* ``swap``: memory so tight that no single move that fits helps (``single_moves``
  proves it), while trading a busy guest for a quiet one does;
* ``trace``: a day of hourly loads: office guests (peak 13:00) mostly on the first half
  of the nodes, batch guests (peak 01:00) on the second half, steady ones anywhere, each
  hour with ±20 % log-normal noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from balance_helpers import GiB, cluster, node, vm
from keel.balance import loads
from keel.balance.plan import Figures, Move
from keel.balance.settings import BalancingSettings
from keel.model import Snapshot

HOST_GIB = 2.0           # balance_helpers.cluster: memory a node uses for itself
HOST_CORES = 0.5         # ... and CPU
MEM_UTIL, CPU_UTIL = 0.55, 0.40
FILL_MEM, FILL_CPU = 0.85, 0.90
_MEM_GIB = [(1, 8), (2, 20), (4, 30), (8, 25), (16, 12), (32, 5)]
_CORES = [(1, 25), (2, 35), (4, 25), (8, 12), (16, 3)]
HOURS = 24


@dataclass
class Instance:
    name: str
    title: str
    snapshot: Snapshot
    maintenance: frozenset[str] = frozenset()
    milp: bool = True                      # small enough to try the MILP reference
    trace: list[dict[int, tuple[float, int]]] | None = None   # hour -> vmid -> (cpu_frac, mem)
    meta: dict = field(default_factory=dict)

    @property
    def size(self) -> str:
        return f"{len(self.snapshot.nodes)}x{len(self.snapshot.guests)}"

    def settings(self, **overrides) -> BalancingSettings:
        return BalancingSettings(maintenance=self.maintenance, hold=1, **overrides)


# -- building blocks ----------------------------------------------------------------------

def _pick(rng: random.Random, table: list[tuple[int, int]]) -> int:
    values, weights = zip(*table)
    return rng.choices(values, weights)[0]


def node_names(n: int) -> list[str]:
    return [f"pve{i + 1:02d}" if n >= 10 else f"pve{i + 1}" for i in range(n)]


def _guests(rng: random.Random, count: int, first: int = 100, stopped: float = 0.03) -> list[dict]:
    out = []
    for i in range(count):
        mem = _pick(rng, _MEM_GIB)
        cores = _pick(rng, _CORES)
        out.append(vm(first + i, None, cores=cores, mem_gib=mem,
                      cpu=round(min(0.9, rng.lognormvariate(-1.7, 0.7)), 3),
                      used_gib=round(mem * rng.uniform(0.45, 0.9), 3),
                      status="stopped" if rng.random() < stopped else "running"))
    return out


def _use(g: dict) -> tuple[float, float]:
    """(cores, GiB) a guest spec puts on its node."""
    return (g["cores"] * g["cpu"], g["used_gib"]) if g["status"] == "running" else (0.0, 0.0)


def _size(guests: list[dict], factors: Sequence[float], mem_util: float = MEM_UTIL,
          cpu_util: float = CPU_UTIL) -> list[tuple[int, int]]:
    """(threads, memory GiB) per node, so that the cluster is that full on average."""
    cores = sum(_use(g)[0] for g in guests)
    mem = sum(_use(g)[1] for g in guests)
    biggest = max((_use(g)[0] for g in guests), default=1.0)
    total = sum(factors)
    sizes = []
    for f in factors:
        threads = max(16, 8 * math.ceil(max(cores / cpu_util * f / total, 1.5 * biggest) / 8))
        mem_gib = 16 * math.ceil((mem / mem_util * f / total + HOST_GIB) / 16)
        sizes.append((threads, mem_gib))
    return sizes


@dataclass
class _Item:
    """What is placed as one: a guest, or a bundle that must share a node."""

    guests: list[dict]
    allowed: list[str] | None = None
    apart: str | None = None               # anti-affinity group: one per node

    @property
    def use(self) -> tuple[float, float]:
        c, m = zip(*(_use(g) for g in self.guests))
        return sum(c), sum(m)


def _place(rng: random.Random, items: list[_Item], names: list[str], sizes: list[tuple[int, int]],
           weight: Callable[[_Item, int], float]) -> None:
    """Biggest first, each to a node drawn by weight among those it fits on."""
    cpu = {n: HOST_CORES for n in names}
    mem = {n: HOST_GIB for n in names}
    groups: dict[str, set[str]] = {}
    cap = dict(zip(names, sizes))
    for item in sorted(items, key=lambda it: -it.use[1]):
        c, m = item.use
        fits = [i for i, n in enumerate(names)
                if (item.allowed is None or n in item.allowed)
                and mem[n] + m <= FILL_MEM * cap[n][1] and cpu[n] + c <= FILL_CPU * cap[n][0]
                and n not in groups.get(item.apart or "", set())]
        if not fits:
            raise ValueError("the instance does not fit its nodes; lower the fill")
        i = rng.choices(fits, [weight(item, j) for j in fits])[0]
        for g in item.guests:
            g["node"] = names[i]
        cpu[names[i]] += c
        mem[names[i]] += m
        if item.apart:
            groups.setdefault(item.apart, set()).add(names[i])


def _snapshot(names: list[str], sizes: list[tuple[int, int]], guests: list[dict]) -> Snapshot:
    nodes = [node(n, cpus=c, mem_gib=m) for n, (c, m) in zip(names, sizes)]
    return cluster(nodes, guests, overhead_gib=HOST_GIB)


def gradient(n: int, ratio: float = 5.0) -> Callable[[_Item, int], float]:
    """The first node is ``ratio`` times as likely as the last, linearly in between."""
    return lambda _item, i: ratio - (ratio - 1.0) * i / max(1, n - 1)


# -- the instances ------------------------------------------------------------------------

def plain(nodes: int, guests: int, seed: int = 1, name: str | None = None) -> Instance:
    rng = random.Random(seed)
    names = node_names(nodes)
    specs = _guests(rng, guests)
    sizes = _size(specs, [1.0] * nodes)
    _place(rng, [_Item([g]) for g in specs], names, sizes, gradient(nodes))
    return Instance(name or f"{nodes}x{guests}", "first node 5x the guests of the last",
                    _snapshot(names, sizes, specs), milp=nodes * guests <= 20_000)


def skewed(nodes: int = 8, guests: int = 200, seed: int = 2) -> Instance:
    rng = random.Random(seed)
    names = node_names(nodes)
    specs = _guests(rng, guests)
    sizes = _size(specs, [1.0] * nodes)
    hot = max(1, nodes // 4)
    _place(rng, [_Item([g]) for g in specs], names, sizes, lambda _it, i: 8.0 if i < hot else 1.0)
    return Instance("skewed", f"{hot} of {nodes} nodes get 8x the guests", _snapshot(names, sizes, specs))


def mixed(nodes: int = 8, guests: int = 200, seed: int = 3) -> Instance:
    rng = random.Random(seed)
    names = node_names(nodes)
    specs = _guests(rng, guests)
    factors = [(0.5, 1.0, 2.0)[i % 3] for i in range(nodes)]
    rng.shuffle(factors)
    sizes = _size(specs, factors)
    _place(rng, [_Item([g]) for g in specs], names, sizes, lambda _it, i: 1.0)
    return Instance("mixed", "nodes of 0.5x/1x/2x size, the same guest count on each",
                    _snapshot(names, sizes, specs), meta={"factors": factors})


def rules(nodes: int = 8, guests: int = 200, seed: int = 4, bundles: int = 8, groups: int = 4,
          pinned: int = 10, ignored: int = 3, locked: int = 2) -> Instance:
    """``bundles`` affinity bundles of 2-4 guests, ``groups`` anti-affinity groups of 3-5
    (at most one per node), ``pinned`` guests pinned to two nodes, ``ignored`` and ``locked``."""
    rng = random.Random(seed)
    names = node_names(nodes)
    specs = _guests(rng, guests, stopped=0.0)
    pool = list(range(len(specs)))
    rng.shuffle(pool)
    items: list[_Item] = []

    def take(k: int) -> list[dict]:
        return [specs[pool.pop()] for _ in range(k)]

    for b in range(bundles):                # affinity bundles of 2-4
        members = take(rng.randint(2, 4))
        for g in members:
            g["tags"] += (f"keel-affinity-b{b}",)
        items.append(_Item(members))
    for a in range(groups):                 # anti-affinity groups of 3-5
        for g in take(rng.randint(min(3, nodes), min(5, nodes))):
            g["tags"] += (f"plb_anti_affinity_a{a}",)
            items.append(_Item([g], apart=f"a{a}"))
    for g in take(pinned):                  # pinned to two nodes
        pins = rng.sample(names, 2)
        g["tags"] += tuple(f"plb_pin_{p}" for p in pins)
        items.append(_Item([g], allowed=pins))
    for g in take(ignored):
        g["tags"] += ("keel-ignore",)
        items.append(_Item([g]))
    for g in take(locked):
        g["lock"] = "backup"
        items.append(_Item([g]))
    items += [_Item([specs[i]]) for i in pool]
    sizes = _size(specs, [1.0] * nodes)
    _place(rng, items, names, sizes, gradient(nodes))
    return Instance("rules", f"{bundles} affinity bundles, {groups} anti-affinity groups, {pinned} pinned, "
                             f"{ignored + locked} fixed",
                    _snapshot(names, sizes, specs))


def maintenance(nodes: int = 8, guests: int = 200, seed: int = 5) -> Instance:
    inst = plain(nodes, guests, seed)
    target = node_names(nodes)[1]
    return Instance("maintenance", f"{target} enters maintenance (5:1 gradient)", inst.snapshot,
                    maintenance=frozenset({target}))


def swap(seed: int = 6) -> Instance:
    """pve1 is busy (six 8-GiB guests at half of 8 vCPUs) with 7.6 GiB free; pve2 and
    pve3 are quiet and have 3.6 GiB free: nothing of pve1's fits elsewhere, and moving a
    quiet guest onto pve1 only makes it worse.  Trading an 8-GiB busy guest for a 7-GiB
    quiet one fits both ways (the quiet one goes first)."""
    rng = random.Random(seed)
    names = node_names(3)
    specs, vmid = [], 100
    for _ in range(6):
        specs.append(vm(vmid, "pve1", cores=8, mem_gib=10, used_gib=8, cpu=round(rng.uniform(0.45, 0.55), 3)))
        vmid += 1
    for n in names[1:]:
        for mem in (7, 7, 7, 7, 4, 4, 4, 4, 4, 4):
            specs.append(vm(vmid, n, cores=2 if mem == 7 else 1, mem_gib=mem + 1, used_gib=mem,
                            cpu=round(rng.uniform(0.05, 0.15), 3)))
            vmid += 1
    sizes = [(32, 64)] * 3
    return Instance("swap", "memory so tight that only trading guests helps", _snapshot(names, sizes, specs))


def _shape(hour: float, peak: float) -> float:
    """A daily cycle between 0.35 and 1.45, highest at ``peak`` o'clock."""
    return 0.35 + 1.1 * (0.5 + 0.5 * math.cos(2 * math.pi * (hour - peak) / 24)) ** 2


PEAKS = {"office": 13.0, "batch": 1.0}


def trace(nodes: int = 8, guests: int = 200, seed: int = 7) -> Instance:
    rng = random.Random(seed)
    names = node_names(nodes)
    specs = _guests(rng, guests)
    kinds = {g["vmid"]: rng.choices(["office", "batch", "steady"], [4, 3, 3])[0] for g in specs}
    half = nodes // 2

    def weight(item: _Item, i: int) -> float:
        kind = kinds[item.guests[0]["vmid"]]
        return 1.0 if kind == "steady" else 3.0 if (i < half) == (kind == "office") else 1.0

    # size the nodes for the busiest hour, as if every guest peaked at once
    peak_specs = [dict(g, cpu=g["cpu"] * 1.45) for g in specs]
    sizes = _size(peak_specs, [1.0] * nodes, cpu_util=0.6)
    _place(rng, [_Item([g]) for g in specs], names, sizes, weight)
    hours: list[dict[int, tuple[float, int]]] = []
    for h in range(HOURS):
        row = {}
        for g in specs:
            if g["status"] != "running":
                continue
            kind = kinds[g["vmid"]]
            level = 1.0 if kind == "steady" else _shape(h, PEAKS[kind])
            cpu = min(0.98, g["cpu"] * level * rng.lognormvariate(0.0, 0.2))
            mem = min(0.98 * g["mem_gib"], g["used_gib"] * (0.95 + 0.1 * (level - 0.35) / 1.1)
                      * rng.lognormvariate(0.0, 0.02))
            row[g["vmid"]] = (round(cpu, 4), int(mem * GiB))
        hours.append(row)
    snap = _snapshot(names, sizes, specs)
    inst = Instance("trace", "24 hourly rounds: office and batch peaks on opposite halves",
                    snap, milp=False, trace=hours, meta={"kinds": kinds})
    for h in range(HOURS):
        over = [n for n in invalid(at_hour(inst, snap, h), inst.settings())]
        if over:
            raise ValueError(f"trace hour {h} is not realistic: {over}")
    return inst


def all_instances(large: bool = True) -> list[Instance]:
    found = [plain(3, 30, seed=11, name="small"), plain(8, 200, seed=12, name="medium"),
             plain(16, 1000, seed=13, name="medium")]
    if large:
        found.append(plain(64, 10_000, seed=14, name="large"))
    return found + [skewed(), mixed(), rules(), maintenance(), swap(), trace()]


# -- moving guests and reading figures ------------------------------------------------------

def rebuild(snapshot: Snapshot, guests: Mapping[int, object], taken_at: float | None = None) -> Snapshot:
    """The snapshot with these guests, node figures recomputed as ``cluster`` does."""
    cores = {n: HOST_CORES for n in snapshot.nodes}
    mem = {n: HOST_GIB * GiB for n in snapshot.nodes}
    for g in guests.values():
        if g.running:
            cores[g.node] += g.cpu_cores
            mem[g.node] += g.mem
    nodes = {n: replace(x, cpu_frac=min(1.0, cores[n] / x.maxcpu), mem=int(min(mem[n], x.maxmem)))
             for n, x in snapshot.nodes.items()}
    return replace(snapshot, nodes=nodes, guests=dict(guests),
                   taken_at=snapshot.taken_at if taken_at is None else taken_at)


def apply(snapshot: Snapshot, moves: Sequence[Move], taken_at: float | None = None) -> Snapshot:
    """Every guest where the plan's last move for it leaves it."""
    guests = dict(snapshot.guests)
    for m in moves:
        guests[m.vmid] = replace(guests[m.vmid], node=m.target)
    return rebuild(snapshot, guests, taken_at)


def at_hour(inst: Instance, snapshot: Snapshot, hour: int, taken_at: float | None = None) -> Snapshot:
    """The trace's loads of ``hour`` on the guests where they are now."""
    row = inst.trace[hour % HOURS]
    guests = {v: replace(g, cpu_frac=row[v][0], mem=row[v][1]) if v in row else g
              for v, g in snapshot.guests.items()}
    return rebuild(snapshot, guests, taken_at)


def model(snapshot: Snapshot, settings: BalancingSettings) -> loads.LoadModel:
    eligible = {n for n, x in snapshot.nodes.items() if x.online} - set(settings.maintenance)
    return loads.build(snapshot, settings, eligible)


def figures(snapshot: Snapshot, settings: BalancingSettings) -> Figures:
    return model(snapshot, settings).figures()


def invalid(snapshot: Snapshot, settings: BalancingSettings) -> list[str]:
    """What makes a state unrealistic or unsafe: CPU over a node's threads, memory over
    Keel's limit, a broken anti-affinity group, affinity bundle or pin."""
    problems = []
    demand = {n: HOST_CORES for n in snapshot.nodes}
    for g in snapshot.guests.values():
        if g.running:
            demand[g.node] += g.cpu_cores
    for n, x in snapshot.nodes.items():
        if demand[n] > x.maxcpu:
            problems.append(f"{n}: cpu {demand[n]:.1f} > {x.maxcpu} threads")
        if x.mem > x.maxmem * (1 - settings.headroom):
            problems.append(f"{n}: memory {x.mem / GiB:.1f} GiB over the limit")
    together: dict[str, set[str]] = {}
    apart: dict[str, list[str]] = {}
    for g in snapshot.guests.values():
        for tag in g.tags:
            if tag.startswith("keel-affinity-"):
                together.setdefault(tag, set()).add(g.node)
            elif tag.startswith("plb_anti_affinity_"):
                apart.setdefault(tag, []).append(g.node)
        pins = {t[len("plb_pin_"):] for t in g.tags if t.startswith("plb_pin_")}
        if pins and g.node not in pins:
            problems.append(f"{g.vmid} is off its pins")
    problems += [f"{t} split" for t, where in together.items() if len(where) > 1]
    problems += [f"{t} shares a node" for t, where in apart.items() if len(set(where)) < len(where)]
    return problems


def single_moves(snapshot: Snapshot, settings: BalancingSettings) -> list[tuple[int, str, float, float]]:
    """Every single move that fits in memory and lowers Keel's or PVE's figure:
    (vmid, target, Keel's figure after, PVE's after).  Empty for the swap instance."""
    m = model(snapshot, settings)
    base = m.figures()
    found = []
    for g in snapshot.guests.values():
        if not g.running:
            continue
        for target, i in m.index.items():
            if target == g.node or not m.eligible[i] or m.mem_used[i] + g.mem > m.mem_cap[i]:
                continue
            trial = m.copy()
            trial.move([g.vmid], g.node, target)
            f = trial.figures()
            if f.keel < base.keel - 1e-12 or f.pve < base.pve - 1e-12:
                found.append((g.vmid, target, f.keel, f.pve))
    return found


def improving_swaps(snapshot: Snapshot, settings: BalancingSettings) -> list[tuple[int, int]]:
    """Pairs of guests on different nodes whose trade lowers both figures and can be
    made one after the other without going over a memory limit."""
    m = model(snapshot, settings)
    base = m.figures()
    running = [g for g in snapshot.guests.values() if g.running]
    found = []
    for a in running:
        for b in running:
            if a.node >= b.node:
                continue
            i, j = m.index[a.node], m.index[b.node]
            final_ok = (m.mem_used[i] - a.mem + b.mem <= m.mem_cap[i]
                        and m.mem_used[j] - b.mem + a.mem <= m.mem_cap[j])
            first_ok = m.mem_used[j] + a.mem <= m.mem_cap[j] or m.mem_used[i] + b.mem <= m.mem_cap[i]
            if not (final_ok and first_ok):
                continue
            trial = m.copy()
            trial.move([a.vmid], a.node, b.node)
            trial.move([b.vmid], b.node, a.node)
            f = trial.figures()
            if f.keel < base.keel and f.pve < base.pve:
                found.append((a.vmid, b.vmid))
    return found


def fingerprint(inst: Instance) -> tuple:
    """Everything that makes an instance what it is, to compare two generations."""
    s = inst.snapshot
    return (tuple((n, x.maxcpu, x.maxmem, round(x.cpu_frac, 9), x.mem) for n, x in sorted(s.nodes.items())),
            tuple((v, g.node, g.maxcpu, g.cpu_frac, g.maxmem, g.mem, g.status, g.tags, g.lock)
                  for v, g in sorted(s.guests.items())),
            inst.maintenance,
            tuple(tuple(sorted(h.items())) for h in inst.trace) if inst.trace else None)


__all__ = ["Instance", "all_instances", "plain", "skewed", "mixed", "rules", "maintenance", "swap",
           "trace", "apply", "at_hour", "figures", "model", "invalid", "single_moves",
           "improving_swaps", "fingerprint"]
