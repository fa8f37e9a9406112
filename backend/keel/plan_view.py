"""``keel plan``: a plan as a person reads it (the JSON form is ``Plan.to_json``)."""

from __future__ import annotations

from collections import Counter

from keel.balance.plan import Plan
from keel.status_view import IMBALANCE_MEANS, Style
from keel.units import format_bytes, format_duration

GiB = 1024**3


def render_plan(plan: Plan, style: Style, verbose: bool = False) -> str:
    dot = f" {style.dot} "
    arrow = "→" if style.dot == "·" else "->"
    b, a = plan.before.figures, plan.after.figures
    colour = {"PLANNED": "33", "BALANCED": "32"}.get(plan.verdict, "31")
    lines = [f"{style.paint(plan.verdict, colour)}: {plan.reason}",
             f"Imbalance {b.keel:.2f} {arrow} {a.keel:.2f} ({IMBALANCE_MEANS}){dot}"
             f"PVE's CRS figure {b.pve:.2f} {arrow} {a.pve:.2f}{dot}"
             f"fullest node {b.peak:.0%} {arrow} {a.peak:.0%}",
             f"method {plan.method}, mode {plan.config.get('mode')}, threshold "
             f"{plan.config.get('threshold', 0):.2f}"]
    if plan.moves:
        lines.append("")
        name_w = max(len(f"{m.vmid} {m.name}") for m in plan.moves) + 5
        lines.append(f"{'WAVE':<5} {'GUEST':<{name_w}} {'FROM':>8} {arrow:^2} {'TO':<8} "
                     f"{'REASON':<12} {'MOVES':>9} {'TIME':>6}  WHY")
        for m in plan.moves:
            kind = "VM" if m.type == "qemu" else "CT"
            guest = f"{m.vmid} {m.name} ({kind})"
            size = format_bytes(m.mem_bytes + m.disk_bytes, 1) if m.running or m.disk_bytes else "config"
            lines.append(f"{m.wave:<5} {guest:<{name_w}} {m.source:>8} {arrow:^2} {m.target:<8} "
                         f"{m.reason:<12} {size:>9} {format_duration(m.est_seconds):>6}  {m.detail}")
        lines.append("")
        lines.append(f"{len(plan.moves)} moves in {plan.waves} waves, {format_bytes(plan.bytes_moved)} "
                     f"to copy, about {format_duration(plan.est_seconds)}")
    lines.append("")
    lines.append(f"{'NODE':<10} {'CPU':>16} {'MEMORY':>16} {'DISK':>16} {'GUESTS':>10}")
    for name, before in plan.before.nodes.items():
        after = plan.after.nodes[name]
        note = "" if before.eligible else "  (not a target)"
        lines.append(f"{name:<10} {_change(before.cpu, after.cpu, arrow):>16} "
                     f"{_change(before.memory, after.memory, arrow):>16} "
                     f"{_change(before.disk, after.disk, arrow):>16} "
                     f"{_count(before.guests, after.guests, arrow):>10}{note}")
    if plan.skipped:
        counts = Counter(s.reason for s in plan.skipped)
        lines.append("")
        lines.append("Left alone: " + ", ".join(f"{n} {reason}" for reason, n in counts.most_common()))
        if verbose:
            for skip in plan.skipped:
                who = f"{skip.vmid} {skip.name}: " if skip.vmid else ""
                lines.append(f"  {who}{skip.reason} ({skip.detail})")
    for conflict in plan.conflicts:
        lines.append(style.paint(f"Conflict: {conflict}", "31"))
    for notice in plan.notices:
        lines.append(f"Note: {notice}")
    return "\n".join(lines) + "\n"


def _change(before: float, after: float, arrow: str) -> str:
    if abs(before - after) < 0.005:
        return f"{before:.0%}"
    return f"{before:.0%} {arrow} {after:.0%}"


def _count(before: int, after: int, arrow: str) -> str:
    return str(before) if before == after else f"{before} {arrow} {after}"
