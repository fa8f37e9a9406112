#!/usr/bin/env python3
"""``make bench``, part three: one ``keel apply`` against ProxLB 2.3.0, side by side, on the
same simulated clusters, scored by one evaluator.

For every instance (skewed, mixed and rules clusters of 3 to 16 nodes, from
``tests/bench/instances.py``) a ``keel sim`` serves the cluster over HTTPS on loopback.
Keel reads it as it reads a real cluster (``snapshot.collect``, then the configs of the
guests its plan would move) and makes one one-shot plan, as ``keel apply`` does, with its
defaults; ``keel mem`` the same with memory alone weighted (ProxLB's default method);
``keel*`` with its limits lifted; ``bruteforce`` and ``topsis`` (PVE's methods) run round
after round until they stop.  ProxLB runs unmodified, from PyPI, in its own venv
(``build/proxlb-venv``, made by ``make bench``), as its users run it for a look before they
let it act: ``python -m proxlb -c proxlb.yaml --dry-run --json``, with its defaults
(``method: memory``, ``mode: used``, ``balanciness: 10``) and the settings it needs to plan
VMs at all; its plan is the guests whose ``node_target`` differs from ``node_current``, in
the order it would migrate them (one at a time: ``parallel`` is off by default).

The evaluator replays every plan move by move (Keel's wave by wave, a migrating guest's
memory held on both nodes) on the cluster as Keel read it and reports: the final load CV
(per node the mean of CPU % and memory %, its coefficient of variation), the memory spread
(highest minus lowest memory %, ProxLB's "balanciness"), the peak (highest CPU or memory
%), the GiB moved, violations in any state on the way (a node's memory above 90 %, Keel's
limit; anti-affinity partners on one node; a guest off its pins; a locked or ignored guest
moved; an affinity group left split), the API calls and the wall time.

Targets (Keel's defaults, one apply; a miss makes the run exit non-zero):

* per class, the load CV summed over its instances once Keel's plan has moved as many GiB
  as ProxLB's (its moves in order, each instance at ProxLB's GiB there) ≤ 0.7 × ProxLB's
  final one; Keel's final load CV ≤ 0.7 × ProxLB's too, with at most ProxLB's GiB moved
  (summed over the class; beside it, the least any plan that passes Keel's hottest-node
  test could move), and on no instance above ProxLB's (beside it, Keel's own figure of
  both final states);
* ``keel mem`` (memory alone, planned on to a figure of 0.01): ProxLB's final memory spread
  reached for at most ProxLB's GiB, on every instance (the GiB after which Keel's spread
  was first at or below ProxLB's, move by move);
* no violation in any state of any Keel plan;
* Keel's reading of the cluster within nodes + 10 API calls.

Without ProxLB (no network when ``make bench`` tried to install it) the run says so and
scores Keel's methods alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

import yaml  # noqa: E402

from bench import instances as gen  # noqa: E402
from bench.rounds import converge  # noqa: E402
from conftest import start_sim  # noqa: E402
from keel.balance import guestconfig  # noqa: E402
from keel.balance.balancer import make_plan  # noqa: E402
from keel.balance.history import History  # noqa: E402
from keel.balance.settings import BalancingSettings, Limits  # noqa: E402
from keel.model import Snapshot  # noqa: E402
from keel.pve import snapshot as snapshots  # noqa: E402
from keel.pve.client import PveClient, Target  # noqa: E402

GiB = 1024**3
PROXLB_VENV = ROOT / "build" / "proxlb-venv"
PROXLB_VERSION = "2.3.0"
PASSWORD = "bench-secret"
SIZES = ((3, 30), (6, 60), (10, 100), (16, 160))
CLASSES = ("skewed", "mixed", "rules")
CV_RATIO, GIB_RATIO = 0.7, 1.0
HEADROOM = 0.10              # Keel's memory limit, the one every plan is held to here
PROXLB_TIMEOUT_S = 900


def instance(kind: str, nodes: int, guests: int) -> gen.Instance:
    seed = 100 + nodes
    if kind == "skewed":
        return gen.skewed(nodes, guests, seed=seed)
    if kind == "mixed":
        return gen.mixed(nodes, guests, seed=seed)
    return gen.rules(nodes, guests, seed=seed, bundles=max(1, guests // 25), groups=max(1, guests // 50),
                     pinned=max(2, guests // 20), ignored=max(1, guests // 70), locked=max(1, guests // 100))


def proxlb_tags(tags: tuple[str, ...]) -> list[str]:
    """The instance's rules as tags both tools read (ProxLB knows only its plb_* tags)."""
    out = []
    for tag in tags:
        if tag.startswith("keel-affinity-"):
            out.append("plb_affinity_" + tag[len("keel-affinity-"):])
        elif tag == "keel-ignore":
            out.append("plb_ignore_bench")
        else:
            out.append(tag)
    return out


def scenario_of(snap: Snapshot) -> dict:
    """A ``keel sim`` scenario that serves the instance: the same nodes, guests and loads."""
    nodes = [{"name": n.name, "cpus": n.maxcpu, "memory": n.maxmem, "overhead_cpu": gen.HOST_CORES,
              "overhead_mem": int(gen.HOST_GIB * GiB)} for n in snap.nodes.values()]
    guests = []
    for g in snap.guests.values():
        entry = {"vmid": g.vmid, "name": g.name, "node": g.node, "cpus": int(g.maxcpu),
                 "memory": g.maxmem, "cpu": round(g.cpu_frac, 6), "status": g.status,
                 "mem_used": max(1, g.mem) if g.running else "50%", "disk": 8 * GiB}
        if g.tags:
            entry["tags"] = proxlb_tags(g.tags)
        if g.lock:
            entry["lock"] = g.lock
        guests.append(entry)
    return {"nodes": nodes, "storages": [{"storage": "ceph", "type": "rbd", "shared": True}],
            "users": [{"userid": "root@pam", "password": PASSWORD}], "guests": guests}


# -- the evaluator ------------------------------------------------------------------------------


@dataclass
class Score:
    label: str
    method: str
    cv: float = 0.0
    mem_spread: float = 0.0
    peak: float = 0.0
    gib: float = 0.0
    moves: int = 0
    violations: list[str] = field(default_factory=list)
    calls: int | None = None
    collect_calls: int | None = None
    seconds: float = 0.0
    note: str = ""
    trajectory: list[tuple[float, float, float]] = field(default_factory=list)   # (GiB, load CV, memory spread)
    error: str = ""
    keel_figure: float = 0.0     # Keel's own imbalance figure of the final state, with its defaults

    def gib_to_spread(self, spread: float) -> float | None:
        """The GiB after which the memory spread was first at or below ``spread``."""
        for gib, _, value in self.trajectory:
            if value <= spread + 1e-9:
                return gib
        return None

    def cv_after(self, gib: float) -> float:
        """The load CV once the moves made within ``gib`` are done (move by move)."""
        value = self.trajectory[0][1]
        for moved, cv, _ in self.trajectory:
            if moved > gib + 1e-9:
                break
            value = cv
        return value

    def to_json(self) -> dict:
        return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in self.__dict__.items()
                if k != "trajectory"}


class State:
    """Node use (cores, bytes) as guests move, with the instance's rules from its tags."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.nodes = [n for n in snap.nodes.values() if n.online]
        self.cores = {n.name: n.cpu_cores for n in self.nodes}
        self.mem = {n.name: float(n.mem) for n in self.nodes}
        self.where = {v: g.node for v, g in snap.guests.items()}

    def move(self, vmid: int, target: str) -> None:
        g = self.snap.guests[vmid]
        source = self.where[vmid]
        if g.running:
            self.cores[source] -= g.cpu_cores
            self.cores[target] += g.cpu_cores
            self.mem[source] -= g.mem
            self.mem[target] += g.mem
        self.where[vmid] = target

    def figures(self) -> tuple[float, float, float]:
        """(load CV, memory spread in points, peak)."""
        loads, mems, peak = [], [], 0.0
        for n in self.nodes:
            cpu, mem = min(1.0, self.cores[n.name] / n.maxcpu), self.mem[n.name] / n.maxmem
            loads.append((cpu + mem) / 2)
            mems.append(mem)
            peak = max(peak, cpu, mem)
        mean = statistics.fmean(loads)
        cv = statistics.pstdev(loads) / mean if mean else 0.0
        return cv, (max(mems) - min(mems)) * 100, peak


def _tag_sets(snap: Snapshot, prefix: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for g in snap.guests.values():
        for tag in proxlb_tags(g.tags):
            if tag.startswith(prefix):
                found.setdefault(tag[len(prefix):], set()).add(g.vmid)
    return found


def evaluate(label: str, method: str, snap: Snapshot, steps: list[list[tuple[int, str]]]) -> Score:
    """Replay ``steps`` (each a list of (vmid, target) that run at once) and score them."""
    state = State(snap)
    score = Score(label, method)
    anti = _tag_sets(snap, "plb_anti_affinity_")
    together = _tag_sets(snap, "plb_affinity_")
    split_before = {name for name, members in together.items() if len({state.where[v] for v in members}) > 1}
    cap = {n.name: n.maxmem * (1 - HEADROOM) for n in state.nodes}
    cv, spread, _ = state.figures()
    score.trajectory.append((0.0, cv, spread))
    for wave, batch in enumerate(steps, 1):
        incoming: dict[str, float] = {}
        for vmid, target in batch:
            g = snap.guests[vmid]
            if g.lock or g.template or any(t.startswith("plb_ignore_") for t in proxlb_tags(g.tags)):
                score.violations.append(f"moved {vmid}, which must stay ({g.lock or 'ignored'})")
            pins = {t[len("plb_pin_"):] for t in g.tags if t.startswith("plb_pin_")}
            if pins and target not in pins:
                score.violations.append(f"{vmid} off its pins to {target}")
            incoming[target] = incoming.get(target, 0.0) + (g.mem if g.running else 0)
            if state.mem[target] + incoming[target] > cap[target] + 1:
                score.violations.append(f"step {wave}: {target} over 90 % memory while {vmid} arrives")
        for vmid, target in batch:
            state.move(vmid, target)
            score.gib += snap.guests[vmid].mem / GiB if snap.guests[vmid].running else 0.0
            score.moves += 1
            cv, spread, _ = state.figures()
            score.trajectory.append((score.gib, cv, spread))
        for name, members in anti.items():
            nodes = [state.where[v] for v in members]
            if len(set(nodes)) < len(nodes):
                score.violations.append(f"step {wave}: anti-affinity {name} shares a node")
    for name, members in together.items():
        if name not in split_before and len({state.where[v] for v in members}) > 1:
            score.violations.append(f"affinity {name} left split")
    score.cv, score.mem_spread, score.peak = state.figures()
    model = gen.model(snap, BalancingSettings())
    for vmid, node in state.where.items():
        if node != snap.guests[vmid].node:
            model.move([vmid], snap.guests[vmid].node, node)
    score.keel_figure = model.figures().keel
    return score


def peak_bound_gib(snap: Snapshot, settings: BalancingSettings) -> float:
    """The least GiB any plan must move for no node to be more than ``above_mean`` above
    the mean memory use (the test Keel's "balanced" includes): each node's memory above
    mean + above_mean, as if guests could be cut to fit (a lower bound; CPU not counted)."""
    model = gen.model(snap, settings)
    use, level = model.utilisation()[:, 1], model.fluid()[1]
    over = (use - level - (settings.above_mean or 0.0)).clip(min=0) * model.cap[:, 1]
    return float(over[model.eligible].sum()) / GiB


def steps_of(plan) -> list[list[tuple[int, str]]]:
    waves: dict[int, list[tuple[int, str]]] = {}
    for m in plan.moves:
        waves.setdefault(m.wave, []).append((m.vmid, m.target))
    return [waves[w] for w in sorted(waves)]


# -- the contestants ---------------------------------------------------------------------------


def keel_runs(label: str, sim, settings_for: dict[str, BalancingSettings]) -> tuple[Snapshot, list[Score]]:
    client = PveClient(Target.from_url(sim.url, verify=sim.cert, user="root@pam", password=PASSWORD))
    start = time.perf_counter()
    snap = snapshots.collect(client)
    collect_s = time.perf_counter() - start
    scores = []
    for method, settings in settings_for.items():
        guestconfig.forget()
        reader = guestconfig.Reader(client)
        start = time.perf_counter()
        plan = make_plan(snap, settings, History(), snap.taken_at, oneshot=True, configs=reader)
        seconds = time.perf_counter() - start + collect_s
        score = evaluate(label, method, snap, steps_of(plan))
        score.calls, score.collect_calls = snap.api_calls + reader.calls, snap.api_calls
        score.seconds = seconds
        score.note = f"{plan.verdict}, {plan.stopped}"
        scores.append(score)
    return snap, scores


def pve_runs(label: str, snap: Snapshot) -> list[Score]:
    scores = []
    inst = gen.Instance("bench", "", snap)
    for method in ("bruteforce", "topsis"):
        start = time.perf_counter()
        run = converge(inst, method, inst.settings(threshold=0.01), cap=50)
        score = Score(label, method, moves=run.moves, gib=run.gib, violations=list(run.violations),
                      seconds=time.perf_counter() - start, note=f"{run.rounds} rounds, {run.verdict}")
        final = State(run.final)
        score.cv, score.mem_spread, score.peak = final.figures()
        scores.append(score)
    return scores


def proxlb_python() -> Path | None:
    python = PROXLB_VENV / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('proxlb'))"],
                           capture_output=True, text=True)
    return python if found.returncode == 0 and found.stdout.strip() == PROXLB_VERSION else None


def proxlb_config(sim) -> dict:
    return {
        "proxmox_api": {"hosts": [f"127.0.0.1:{sim.port}"], "user": "root@pam", "pass": PASSWORD,
                        "ssl_verification": False, "timeout": 30},
        "proxmox_cluster": {"maintenance_nodes": [], "ignore_nodes": []},
        # the balancing section of the example config ProxLB ships (proxlb_example.yaml), which
        # users start from, without its example pools and nodes
        "balancing": {"enable": True, "enforce_affinity": False, "enforce_pinning": False, "parallel": False,
                      "live": True, "with_local_disks": True, "balance_types": ["vm", "ct"],
                      "memory_threshold": 75, "cpu_threshold": 75, "balanciness": 5, "method": "memory",
                      "mode": "used", "balance_larger_guests_first": False,
                      "node_resource_reserve": {"defaults": {"memory": 4}}},
        "service": {"daemon": False, "log_level": "WARNING"},
    }


def proxlb_run(label: str, sim, snap: Snapshot, python: Path, work: Path) -> Score:
    config = work / "proxlb.yaml"
    config.write_text(yaml.safe_dump(proxlb_config(sim)))
    seq = max((r["seq"] for r in sim.requests_log()), default=0)
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEL_", "PYTHON"))}
    done = subprocess.run([str(python), "-m", "proxlb", "-c", str(config), "--dry-run", "--json"],
                          capture_output=True, text=True, timeout=PROXLB_TIMEOUT_S, env=env, cwd=work)
    seconds = time.perf_counter() - start
    calls = len(sim.requests_log(seq))
    score = Score(label, "proxlb", calls=calls, seconds=seconds)
    data = _json_block(done.stdout)
    if done.returncode != 0 or data is None:
        score.error = f"exit {done.returncode}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        return score
    by_name = {g.name: g.vmid for g in snap.guests.values()}
    steps = []
    for name, guest in data.get("guests", {}).items():
        if guest.get("node_target") and guest["node_target"] != guest.get("node_current"):
            steps.append([(int(guest.get("id") or by_name[name]), guest["node_target"])])
    scored = evaluate(label, "proxlb", snap, steps)
    scored.calls, scored.seconds = calls, seconds
    return scored


def _json_block(stdout: str) -> dict | None:
    """The JSON object ProxLB prints among its log lines."""
    decoder = json.JSONDecoder()
    index = stdout.find("{")
    while index != -1:
        try:
            value, _ = decoder.raw_decode(stdout[index:])
            if isinstance(value, dict) and "guests" in value:
                return value
        except ValueError:
            pass
        index = stdout.find("{", index + 1)
    return None


# -- the table and the targets -----------------------------------------------------------------

HEADER = ("instance", "method", "load CV", "mem spread", "peak", "moves", "GiB", "viol.", "API calls",
          "s", "notes")


def row(before: tuple[float, float, float], s: Score) -> tuple[str, ...]:
    if s.error:
        return (s.label, s.method, "", "", "", "", "", "", "", f"{s.seconds:.1f}", s.error)
    calls = "" if s.calls is None else (f"{s.calls} ({s.collect_calls} + {s.calls - s.collect_calls} configs)"
                                        if s.collect_calls is not None else str(s.calls))
    return (s.label, s.method, f"{before[0]:.3f} → {s.cv:.3f}", f"{before[1]:.1f} → {s.mem_spread:.1f}",
            f"{before[2]:.1%} → {s.peak:.1%}", str(s.moves), f"{s.gib:.1f}", str(len(s.violations)), calls,
            f"{s.seconds:.2f}", s.note)


def judge(scores: dict[str, dict[str, Score]], snaps: dict[str, Snapshot], have_proxlb: bool) -> list[tuple]:
    targets: list[tuple] = []       # (what, value, limit, ok, note)
    for label, by in scores.items():
        for method, s in by.items():
            if method.startswith("keel") and s.violations:
                targets.append((f"{label} {method}: violations in any state", str(len(s.violations)), "0",
                                False, "; ".join(s.violations[:2])))
        keel = by["keel"]
        n = len(snaps[label].nodes)
        targets.append((f"{label} keel: API calls to read the cluster", str(keel.collect_calls),
                        f"<= {n + 10}", keel.collect_calls is not None and keel.collect_calls <= n + 10,
                        f"and {keel.calls - keel.collect_calls} config reads for the plan"))
    if not have_proxlb:
        return targets
    for kind in CLASSES:
        labels = [label for label in scores if label.startswith(kind + " ")]
        if not labels:
            continue
        pairs = [(scores[label]["keel"], scores[label].get("proxlb")) for label in labels]
        if any(p is None or p.error for _, p in pairs):
            targets.append((f"{kind}: against ProxLB", "ProxLB failed", "", None, ""))
            continue
        keel_cv, plb_cv = sum(k.cv for k, _ in pairs), sum(p.cv for _, p in pairs)
        keel_gib, plb_gib = sum(k.gib for k, _ in pairs), sum(p.gib for _, p in pairs)
        matched = sum(k.cv_after(p.gib) for k, p in pairs)
        targets.append((f"{kind}: summed load CV once keel has moved ProxLB's GiB", f"{matched:.3f} "
                        f"({matched / plb_cv:.2f}x)", f"<= {CV_RATIO * plb_cv:.3f} (0.7 x {plb_cv:.3f})",
                        matched <= CV_RATIO * plb_cv + 1e-9,
                        f"{len(pairs)} instances; the moves of keel's plan, in order, within {plb_gib:.0f} GiB"))
        targets.append((f"{kind}: summed final load CV, keel vs ProxLB", f"{keel_cv:.3f} ({keel_cv / plb_cv:.2f}x)",
                        f"<= {CV_RATIO * plb_cv:.3f}", keel_cv <= CV_RATIO * plb_cv + 1e-9,
                        f"for {keel_gib:.0f} GiB, {keel_gib / max(plb_gib, 1e-9):.2f}x ProxLB's {plb_gib:.0f} "
                        f"(ProxLB stops short of the level; keel goes on to it)"))
        bound = sum(peak_bound_gib(snaps[label], BalancingSettings()) for label in labels)
        targets.append((f"{kind}: summed GiB of keel's final plan vs ProxLB's", f"{keel_gib:.0f} "
                        f"({keel_gib / max(plb_gib, 1e-9):.2f}x)", f"<= {GIB_RATIO * plb_gib:.0f}",
                        keel_gib <= GIB_RATIO * plb_gib + 1e-9,
                        f"no plan that leaves every node within 10 points of the mean memory use moves "
                        f"less than {bound:.0f} GiB here ({bound / max(plb_gib, 1e-9):.2f}x ProxLB's)"))
        worse = [label for label, (k, p) in zip(labels, pairs) if k.cv > p.cv + 1e-9]
        targets.append((f"{kind}: instances where keel ends less level than ProxLB", str(len(worse)), "0",
                        not worse, "; ".join(f"{label}: load CV {scores[label]['keel'].cv:.4f} vs "
                                             f"{scores[label]['proxlb'].cv:.4f}, Keel's figure "
                                             f"{scores[label]['keel'].keel_figure:.3f} vs "
                                             f"{scores[label]['proxlb'].keel_figure:.3f}" for label in worse)))
    for label, by in scores.items():
        plb, mem = by.get("proxlb"), by["keel mem"]
        if plb is None or plb.error:
            continue
        need = mem.gib_to_spread(plb.mem_spread)
        targets.append((f"{label} keel mem: GiB to ProxLB's memory spread {plb.mem_spread:.1f}",
                        "never" if need is None else f"{need:.1f}", f"<= {plb.gib:.1f}",
                        need is not None and need <= plb.gib * GIB_RATIO + 1e-9,
                        f"keel mem ends at {mem.mem_spread:.1f} after {mem.gib:.1f} GiB"))
    return targets


def table(header: tuple, rows: list[tuple], md: bool) -> str:
    rows = [tuple(str(c) for c in r) for r in rows]
    if md:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows])
    width = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, width)).rstrip(), "  ".join("-" * w for w in width)]
    return "\n".join(lines + ["  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--only", action="append", metavar="CLASS", help="skewed, mixed or rules")
    parser.add_argument("--parallel", type=int, default=4, help="ProxLB runs at once (each sleeps 0.1 s a call)")
    args = parser.parse_args()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    python = proxlb_python()
    if python is None:
        print(f"ProxLB {PROXLB_VERSION} is not installed in {PROXLB_VENV.relative_to(ROOT)} (make bench installs "
              f"it from PyPI; without network it cannot): Keel's methods are scored alone, the targets "
              f"against ProxLB are not judged.\n")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="keel-bench-proxlb-"))
    cases = [(kind, n, g) for kind in (args.only or CLASSES) for n, g in SIZES]
    sims, snaps, scores, befores = {}, {}, {}, {}
    lock = threading.Lock()

    def prepare(case):
        kind, n, g = case
        label = f"{kind} {n}x{g}"
        inst = instance(kind, n, g)
        folder = work / label.replace(" ", "-")
        folder.mkdir()
        path = folder / "scenario.yaml"
        path.write_text(yaml.safe_dump(scenario_of(inst.snapshot), sort_keys=False))
        sim = start_sim(path, folder / "sim")
        with lock:
            sims[label] = sim
        return label

    with ThreadPoolExecutor(max_workers=4) as pool:
        labels = list(pool.map(prepare, cases))
    try:
        lifted = BalancingSettings(threshold=0.0001, margin=0.0, limits=Limits(moves=10**9, bytes=2**62))
        settings_for = {"keel": BalancingSettings(),
                        # on to 0.01, so that its path can be followed as far as ProxLB's spread:
                        # its plan with the default threshold is where this one would stop first
                        "keel mem": BalancingSettings(weights={"cpu": 0.0, "memory": 1.0, "disk": 0.0},
                                                      threshold=0.01),
                        "keel*": lifted}
        for label in labels:
            snap, found = keel_runs(label, sims[label], settings_for)
            snaps[label] = snap
            befores[label] = State(snap).figures()
            scores[label] = {s.method: s for s in found}
            for s in pve_runs(label, snap):
                scores[label][s.method] = s
            log(f"  {label}: keel done")
        if python is not None:
            def contest(label):
                folder = work / label.replace(" ", "-")
                score = proxlb_run(label, sims[label], snaps[label], python, folder)
                log(f"  {label}: proxlb {score.error or 'done'} ({score.seconds:.0f} s)")
                return label, score
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                for label, score in pool.map(contest, labels):
                    scores[label]["proxlb"] = score
    finally:
        for sim in sims.values():
            sim.stop()
    order = ("keel", "keel mem", "keel*", "bruteforce", "topsis", "proxlb")
    rows = [row(befores[label], scores[label][m]) for label in labels for m in order if m in scores[label]]
    print(table(HEADER, rows, args.markdown))
    targets = judge(scores, snaps, python is not None)
    print()
    print("Targets:")
    print(table(("target", "value", "limit", "ok", "note"),
                [(t[0], t[1], t[2], {True: "yes", False: "NO", None: "—"}[t[3]], t[4]) for t in targets], args.markdown))
    missed = [t for t in targets if t[3] is False]
    print(f"\n{len(missed)} targets missed; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "proxlb": PROXLB_VERSION if python else None,
            "scores": {label: {m: s.to_json() for m, s in by.items()} for label, by in scores.items()},
            "targets": [dict(zip(("target", "value", "limit", "ok", "note"), t)) for t in targets]}, indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
