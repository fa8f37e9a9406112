"""``keel status``: the cluster as an operator wants to see it, from a ``Snapshot``.

    Cluster demo · Proxmox VE 9.1.4 · quorate · HA master pve1
    4 nodes (4 online) · 24 guests (20 running, 1 template) · 8 HA resources
    Imbalance 0.21 (typical distance of a node from the cluster average) · PVE's CRS figure 0.38 · spread: CPU 46, memory 52, disk 3 points

    NODE   STATE    CPU                    MEMORY                 DISK                GUESTS
    pve1   online   ████████████░░░░  74%  ███████████░░░░░  70%  ██░░░░░░░░░░░░░░ 12%  9 (8 running, 3 HA)
"""

from __future__ import annotations

from typing import Any, Iterable

from keel.balance.balancer import imbalance
from keel.balance.metrics import node_load, pve_imbalance, spread
from keel.balance.settings import BalancingSettings
from keel.model import Guest, Node, Snapshot
from keel.units import format_bytes, format_duration

BAR_WIDTH = 16


# The imbalance (docs/balancing.md, "The imbalance"): what `keel status`, `keel plan`, the
# API and the web UI call "imbalance", and what it means in a few words.
IMBALANCE_MEANS = "typical distance of a node from the cluster average"


def summary(snapshot: Snapshot, settings: BalancingSettings | None = None,
            maintenance: Iterable[str] = ()) -> dict[str, Any]:
    """The figures both views show, as plain data (this is also the JSON output).  The
    imbalance is the one a plan shows before its moves, with these balancing settings
    (default: Keel's defaults) and nodes in maintenance."""
    figures = imbalance(snapshot, settings or BalancingSettings(), maintenance)
    online = [n for n in snapshot.nodes.values() if n.online]
    loads = [node_load(n.cpu_frac, n.mem_frac) for n in online]
    nodes = []
    for node in snapshot.nodes.values():
        guests = snapshot.guests_on(node.name)
        nodes.append({
            "node": node.name, "online": node.online, "ha_state": node.ha_state,
            "maintenance": node.in_maintenance,
            "cpu_frac": round(node.cpu_frac, 4), "maxcpu": node.maxcpu,
            "mem": node.mem, "maxmem": node.maxmem, "disk": node.disk, "maxdisk": node.maxdisk,
            "load": round(node_load(node.cpu_frac, node.mem_frac), 4) if node.online else None,
            "guests": len(guests), "running": sum(1 for g in guests if g.running),
            "ha_guests": sum(1 for g in guests if g.ha is not None),
            "psi": node.psi.__dict__ if node.psi else None,
        })
    guests = [_guest_json(g) for g in snapshot.guests.values()]
    crs = snapshot.crs
    return {
        "cluster": snapshot.cluster_name, "pve_version": snapshot.pve_version,
        "quorate": snapshot.quorate, "ha_master": snapshot.ha_master, "taken_at": snapshot.taken_at,
        "api_calls": snapshot.api_calls,
        "imbalance": {
            "keel": round(figures.keel, 4),
            "pve": round(pve_imbalance(loads), 4),
            "spread_cpu": spread(n.cpu_frac for n in online),
            "spread_mem": spread(n.mem_frac for n in online),
            "spread_disk": spread(n.disk_frac for n in online),
        },
        "crs": {"ha": crs.ha, "auto_rebalance": crs.auto_rebalance,
                "threshold": crs.auto_rebalance_threshold, "method": crs.auto_rebalance_method},
        "nodes": nodes,
        "guests": guests,
        "ha_rules": [{"rule": r.rule, "type": r.type, "resources": list(r.resources),
                      "nodes": dict(r.nodes), "strict": r.strict, "affinity": r.affinity,
                      "disabled": r.disabled} for r in snapshot.ha_rules],
    }


def _guest_json(guest: Guest) -> dict[str, Any]:
    return {
        "vmid": guest.vmid, "type": guest.type, "name": guest.name, "node": guest.node,
        "status": guest.status, "cpu_frac": round(guest.cpu_frac, 4), "maxcpu": guest.maxcpu,
        "mem": guest.mem, "maxmem": guest.maxmem, "maxdisk": guest.maxdisk,
        "template": guest.template, "tags": list(guest.tags), "pool": guest.pool,
        "lock": guest.lock, "ha_state": guest.ha.crm_state if guest.ha else None,
        "local_disk_bytes": guest.local_disk_bytes,
    }


class Style:
    """Bars and colours; plain ASCII and no colour when the terminal cannot show them."""

    def __init__(self, color: bool, unicode: bool):
        self.color = color
        self.full, self.empty = ("█", "░") if unicode else ("#", ".")
        self.dot = "·" if unicode else "-"

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def bar(self, frac: float, width: int = BAR_WIDTH) -> str:
        frac = min(1.0, max(0.0, frac))
        filled = int(round(frac * width))
        text = self.full * filled + self.empty * (width - filled)
        code = "31" if frac >= 0.9 else "33" if frac >= 0.75 else "32"
        return self.paint(text, code)


def render(snapshot: Snapshot, style: Style, show_guests: bool = False,
           settings: BalancingSettings | None = None) -> str:
    data = summary(snapshot, settings)
    dot = f" {style.dot} "
    lines = []
    head = [f"Cluster {snapshot.cluster_name or '(standalone)'}", f"Proxmox VE {snapshot.pve_version}",
            "quorate" if snapshot.quorate else style.paint("NO QUORUM", "31")]
    if snapshot.ha_master:
        head.append(f"HA master {snapshot.ha_master}")
    lines.append(dot.join(head))
    online = sum(1 for n in snapshot.nodes.values() if n.online)
    guests = list(snapshot.guests.values())
    running = sum(1 for g in guests if g.running)
    templates = sum(1 for g in guests if g.template)
    ha_count = sum(1 for g in guests if g.ha is not None)
    counts = [f"{len(snapshot.nodes)} nodes ({online} online)",
              f"{len(guests)} guests ({running} running" + (f", {templates} template"
                                                            f"{'s' if templates != 1 else ''}"
                                                            if templates else "") + ")"]
    if ha_count:
        counts.append(f"{ha_count} HA resources")
    lines.append(dot.join(counts))
    imb = data["imbalance"]
    lines.append(f"Imbalance {imb['keel']:.2f} ({IMBALANCE_MEANS}){dot}PVE's CRS figure {imb['pve']:.2f}"
                 f"{dot}spread: CPU {imb['spread_cpu']:.0f}, memory {imb['spread_mem']:.0f}, "
                 f"disk {imb['spread_disk']:.0f} points")
    crs = snapshot.crs
    if crs.auto_rebalance:
        lines.append(style.paint(
            f"Proxmox's own HA auto-rebalance is ON (crs ha={crs.ha}, method "
            f"{crs.auto_rebalance_method}, threshold {crs.auto_rebalance_threshold:.0%}): "
            f"Keel leaves HA guests to it", "33"))
    lines.append("")
    name_w = max([4] + [len(n) for n in snapshot.nodes])
    lines.append(f"{'NODE':<{name_w}}  {'STATE':<11}  {'CPU':<{BAR_WIDTH + 13}}  "
                 f"{'MEMORY':<{BAR_WIDTH + 20}}  {'DISK':<{BAR_WIDTH + 5}}  GUESTS")
    for node in snapshot.nodes.values():
        lines.append(_node_line(node, snapshot, style, name_w))
        if show_guests:
            for guest in snapshot.guests_on(node.name):
                lines.append("    " + _guest_line(guest, style))
    return "\n".join(lines) + "\n"


def _node_line(node: Node, snapshot: Snapshot, style: Style, name_w: int) -> str:
    guests = snapshot.guests_on(node.name)
    running = sum(1 for g in guests if g.running)
    ha = sum(1 for g in guests if g.ha is not None)
    state = "online" if node.online else "offline"
    if node.in_maintenance:
        state = "maintenance"
    elif node.ha_state in ("fence", "unknown", "gone") and node.online:
        state = node.ha_state
    state_text = style.paint(f"{state:<11}", "32" if state == "online" else "33"
                             if state == "maintenance" else "31")
    guest_text = f"{len(guests)} ({running} running" + (f", {ha} HA" if ha else "") + ")"
    if not node.online:
        return f"{node.name:<{name_w}}  {state_text}  {'-':<{BAR_WIDTH + 13}}  " \
               f"{'-':<{BAR_WIDTH + 20}}  {'-':<{BAR_WIDTH + 5}}  {guest_text}"
    cpu = f"{style.bar(node.cpu_frac)} {node.cpu_frac:>4.0%} of {node.maxcpu:<3}"
    mem = (f"{style.bar(node.mem_frac)} {node.mem_frac:>4.0%} "
           f"{format_bytes(node.maxmem, 0):>9}")
    disk = f"{style.bar(node.disk_frac)} {node.disk_frac:>4.0%}"
    return f"{node.name:<{name_w}}  {state_text}  {cpu}  {mem}  {disk}  {guest_text}"


def _guest_line(guest: Guest, style: Style) -> str:
    kind = "VM" if guest.type == "qemu" else "CT"
    status = guest.status
    if guest.template:
        status = "template"
    parts = [f"{guest.vmid:>6} {kind} {guest.name[:20]:<20} {status:<8}"]
    if guest.running:
        parts.append(f"cpu {guest.cpu_frac:>4.0%} of {guest.maxcpu:g}"
                     f"  mem {format_bytes(guest.mem)} / {format_bytes(guest.maxmem)}"
                     f"  up {format_duration(guest.uptime_s)}")
    else:
        parts.append(f"{'':<15}  mem {'-':>7} / {format_bytes(guest.maxmem)}")
    if guest.ha is not None:
        parts.append(f"HA {guest.ha.crm_state or guest.ha.state}")
    if guest.lock:
        parts.append(style.paint(f"lock {guest.lock}", "33"))
    if guest.local_disks:
        parts.append(f"local disk {format_bytes(guest.local_disk_bytes, 0)}")
    if guest.pool:
        parts.append(f"pool {guest.pool}")
    if guest.tags:
        parts.append("tags " + ",".join(guest.tags))
    return "  ".join(parts)


def model_view(snapshot: Snapshot, settings: BalancingSettings, maintenance: Iterable[str] = (),
               samples: Any = None) -> dict[str, Any]:
    """Each node's load in the plan's own terms (docs/ui.md, "One set of figures"): the
    utilisation a plan made now starts from (averaged over ``balancing.window`` when samples
    are given: ``smoothed``), the same of the moment (``*_now``), capacity after the
    reservation, the cluster's average per resource, and which nodes are over the
    thresholds in force: ``hot`` (more than ``threshold`` above the average) and
    ``hotspot`` (at or above ``balancing.hotspot``)."""
    from keel.balance import loads
    from keel.balance.rules import eligible_nodes
    eligible = eligible_nodes(snapshot, settings, set(maintenance))
    smooth = loads.build(snapshot, settings, eligible, samples)
    now = loads.build(snapshot, settings, eligible, None) if samples else smooth
    u, u_now = smooth.utilisation(), now.utilisation()
    average = smooth.fluid() if smooth.eligible.any() else None
    names = loads.RESOURCES
    weighted = [r for r in range(len(names)) if smooth.weights[r] > 0]
    nodes: dict[str, Any] = {}
    hottest: dict[str, Any] | None = None
    for name, i in smooth.index.items():
        row: dict[str, Any] = {"eligible": bool(smooth.eligible[i]), "hot": [], "hotspot": []}
        for r, resource in enumerate(names):
            row[resource] = round(float(u[i][r]), 4)
            row[f"{resource}_now"] = round(float(u_now[i][r]), 4)
            row[f"{resource}_used"] = round(float(smooth.load[i][r]), 3 if r == 0 else 0)
            row[f"{resource}_cap"] = round(float(smooth.cap[i][r]), 3 if r == 0 else 0)
            if r not in weighted or not smooth.eligible[i]:
                continue
            if settings.hotspot is not None and u[i][r] >= settings.hotspot:
                row["hotspot"].append(resource)
            if average is not None and u[i][r] - average[r] > settings.threshold:
                row["hot"].append(resource)
            if smooth.eligible[i] and (hottest is None or u[i][r] > hottest["value"]):
                hottest = {"node": name, "resource": resource, "value": round(float(u[i][r]), 4),
                           "average": round(float(average[r]), 4) if average is not None else None}
        nodes[name] = row
    figures, figures_now = smooth.figures(), now.figures()
    return {"smoothed": bool(samples), "window_s": settings.window_s, "mode": settings.mode,
            "threshold": settings.threshold, "hotspot": settings.hotspot,
            "weights": {n: float(smooth.weights[r]) for r, n in enumerate(names)},
            "average": {n: round(float(average[r]), 4) for r, n in enumerate(names)} if average is not None else None,
            "imbalance": {"keel": round(figures.keel, 4), "now": round(figures_now.keel, 4),
                          "peak": round(figures.peak, 4)},
            "nodes": nodes, "hottest": hottest}
