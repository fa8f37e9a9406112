"""Hand-made clusters for the planner's tests: ``cluster(nodes, guests)`` → Snapshot; and
``violations(snapshot, config, plan)``, the replay of a plan's waves that the property
tests and the planner benchmark both check every intermediate state with."""

from __future__ import annotations

from keel.model import (CrsOptions, Guest, HaResource, HaRule, LocalDisk, Node, Snapshot, Storage,
                        StorageUsage)

GiB = 1024**3


def node(name, cpus=32, mem_gib=128, online=True, ha_state=None, cpu=None, mem_used_gib=None):
    return dict(name=name, cpus=cpus, mem_gib=mem_gib, online=online, ha_state=ha_state,
                cpu=cpu, mem_used_gib=mem_used_gib)


def vm(vmid, node, cores=4, mem_gib=8, cpu=0.5, used_gib=None, kind="qemu", status="running",
       tags=(), pool=None, ha=None, lock=None, template=False, local_gib=0, name=None):
    return dict(vmid=vmid, node=node, cores=cores, mem_gib=mem_gib, cpu=cpu,
                used_gib=mem_gib * 0.75 if used_gib is None else used_gib, kind=kind, status=status,
                tags=tuple(tags), pool=pool, ha=ha, lock=lock, template=template, local_gib=local_gib,
                name=name or f"g{vmid}")


def cluster(nodes, guests, rules=(), crs=None, overhead_gib=2.0, pve_version="9.1.4", quorate=True,
            taken_at=1_800_000_000.0):
    made_guests = {}
    for g in guests:
        ha = None
        if g["ha"]:
            state = g["ha"] if isinstance(g["ha"], str) else "started"
            ha = HaResource(f"{'vm' if g['kind'] == 'qemu' else 'ct'}:{g['vmid']}", state, "started")
        local = ()
        if g["local_gib"]:
            local = (LocalDisk(f"local-lvm:vm-{g['vmid']}-disk-0", "local-lvm", int(g["local_gib"] * GiB)),)
        running = g["status"] == "running"
        made_guests[g["vmid"]] = Guest(
            vmid=g["vmid"], type=g["kind"], name=g["name"], node=g["node"], status=g["status"],
            maxcpu=g["cores"], cpu_frac=g["cpu"] if running else 0.0, maxmem=int(g["mem_gib"] * GiB),
            mem=int(g["used_gib"] * GiB) if running else 0, maxdisk=32 * GiB, uptime_s=3600,
            template=g["template"], tags=g["tags"], pool=g["pool"], lock=g["lock"], ha=ha,
            local_disks=local)
    made_nodes = {}
    usage = []
    for n in nodes:
        on = [x for x in made_guests.values() if x.node == n["name"] and x.running]
        cores = sum(x.cpu_cores for x in on) + 0.5
        mem = sum(x.mem for x in on) + overhead_gib * GiB
        cpu_frac = n["cpu"] if n["cpu"] is not None else min(1.0, cores / n["cpus"])
        if n["mem_used_gib"] is not None:
            mem = n["mem_used_gib"] * GiB
        made_nodes[n["name"]] = Node(n["name"], n["online"], n["cpus"], cpu_frac, int(n["mem_gib"] * GiB),
                                     int(min(mem, n["mem_gib"] * GiB)) if n["online"] else 0,
                                     100 * GiB, 10 * GiB, 86400, n["ha_state"])
        local_used = sum(x.local_disk_bytes for x in made_guests.values() if x.node == n["name"])
        usage.append(StorageUsage(n["name"], "local-lvm", local_used, 2048 * GiB, False))
        usage.append(StorageUsage(n["name"], "ceph", 0, 100 * 1024 * GiB, True))
    storages = {"local-lvm": Storage("local-lvm", "lvmthin", frozenset({"images", "rootdir"}), False),
                "ceph": Storage("ceph", "rbd", frozenset({"images", "rootdir"}), True)}
    return Snapshot(taken_at=taken_at, cluster_name="test", pve_version=pve_version, quorate=quorate,
                    nodes=made_nodes, guests=dict(sorted(made_guests.items())), storages=storages,
                    ha_rules=tuple(rules), crs=crs or CrsOptions(), storage_usage=tuple(usage))


def rule_node_affinity(name, sids, nodes, strict=False):
    return HaRule(name, "node-affinity", tuple(sids), nodes=dict(nodes), strict=strict)


def rule_resource_affinity(name, sids, affinity):
    return HaRule(name, "resource-affinity", tuple(sids), affinity=affinity)


def violations(snapshot, config, plan):
    """Replay a plan's waves on ``snapshot`` and list every rule or memory limit it breaks,
    in any state on the way (empty if none).  Rules are read from the tags
    (``plb_anti_affinity_*``, ``plb_pin_*``, ``keel-affinity-*``, ``keel-ignore``) and
    ``config.maintenance``; memory is held on both nodes while a guest moves and must stay
    under ``maxmem × (1 − headroom)``.  Shared by the property tests and the benchmark."""
    found = []
    guests = snapshot.guests
    cap = {n: node.maxmem * (1 - config.headroom) for n, node in snapshot.nodes.items()}
    used = {n: float(node.mem) for n, node in snapshot.nodes.items()}
    where = {v: g.node for v, g in guests.items()}
    moving = {m.vmid for m in plan.moves}
    anti = {v: {t for t in guests[v].tags if t.startswith("plb_anti_affinity_")} for v in moving}
    pins = {v: {t[len("plb_pin_"):] for t in guests[v].tags if t.startswith("plb_pin_")} for v in moving}
    anti_on: dict = {}          # node -> anti-affinity tag -> guests there
    for v, g in guests.items():
        for tag in g.tags:
            if tag.startswith("plb_anti_affinity_"):
                anti_on.setdefault(g.node, {}).setdefault(tag, set()).add(v)
    for move in plan.moves:
        g = guests[move.vmid]
        if g.template or g.lock or "keel-ignore" in g.tags:
            found.append(f"moved a guest that must stay: {move}")
        if move.target in config.maintenance:
            found.append(f"moved onto a node in maintenance: {move}")
        if pins[move.vmid] and move.target not in pins[move.vmid]:
            found.append(f"moved off its pins: {move}")
    for wave in sorted({m.wave for m in plan.moves}):
        batch = [m for m in plan.moves if m.wave == wave]
        incoming: dict = {}
        for move in batch:
            # memory: held on both nodes while it moves
            incoming[move.target] = incoming.get(move.target, 0.0) + move.mem_bytes
            if used[move.target] + incoming[move.target] > cap[move.target] + 1:
                found.append(f"wave {wave}: {move.target} over its memory limit: {move}")
            # anti-affinity: nobody of its groups there, now or arriving in this wave
            for tag in anti[move.vmid]:
                if anti_on.get(move.target, {}).get(tag, set()) - {move.vmid}:
                    found.append(f"wave {wave}: {move.vmid} joins its {tag} group on {move.target}")
            for other in batch:
                if other is not move and other.target == move.target and anti[move.vmid] & anti[other.vmid]:
                    found.append(f"wave {wave}: {move.vmid} and {other.vmid} arrive together on {move.target}")
        for move in batch:
            used[move.source] -= move.mem_bytes
            used[move.target] += move.mem_bytes
            for tag in anti[move.vmid]:
                anti_on.get(where[move.vmid], {}).get(tag, set()).discard(move.vmid)
                anti_on.setdefault(move.target, {}).setdefault(tag, set()).add(move.vmid)
            where[move.vmid] = move.target
    # bundles that moved ended together
    groups: dict = {}
    for v, g in guests.items():
        for tag in g.tags:
            if tag.startswith("keel-affinity-"):
                groups.setdefault(tag, set()).add(v)
    for tag, members in groups.items():
        if members & moving and all(not guests[v].lock and "keel-ignore" not in guests[v].tags
                                    and not guests[v].template for v in members):
            if len({where[v] for v in members}) != 1:
                found.append(f"affinity {tag} ends split: {sorted((v, where[v]) for v in members)}")
    return found


def streamed_violations(snapshot, config, plan, durations):
    """Play a plan through the executor's slots (``keel.balance.slots``) with the given
    duration for each move, and list every rule, memory or concurrency limit it breaks at
    any moment: memory is held on both nodes from a move's start to its end; a guest of an
    anti-affinity group counts on its source until it has left and on its target from the
    moment it starts; at most ``concurrent`` moves at once, ``per_node`` into and out of a
    node."""
    from keel.balance import slots
    found = []
    moves = list(plan.moves)
    guests = snapshot.guests
    cap = {n: node.maxmem * (1 - config.headroom) for n, node in snapshot.nodes.items()}
    used = {n: float(node.mem) for n, node in snapshot.nodes.items()}
    anti = {v: {t for t in g.tags if t.startswith("plb_anti_affinity_")} for v, g in guests.items()}
    on = {n: set() for n in snapshot.nodes}          # guests that count on a node
    for v, g in guests.items():
        on[g.node].add(v)
    deps = slots.dependencies(moves)
    limits = slots.Slots(config.limits.concurrent, config.limits.per_node)
    waiting, running, ended = list(range(len(moves))), {}, set()
    now = 0.0
    while waiting or running:
        for i in limits.startable(moves, deps, waiting, list(running), ended):
            move = moves[i]
            waiting.remove(i)
            running[i] = now + durations[i]
            used[move.target] += move.mem_bytes
            if used[move.target] > cap[move.target] + 1:
                found.append(f"t={now:.0f}: {move.target} over its memory limit as {move.vmid} starts")
            for other in on[move.target]:
                if other != move.vmid and anti[move.vmid] & anti[other]:
                    found.append(f"t={now:.0f}: {move.vmid} joins {other} of its group on {move.target}")
            on[move.target].add(move.vmid)
        if len(running) > config.limits.concurrent:
            found.append(f"t={now:.0f}: {len(running)} moves at once")
        for node in snapshot.nodes:
            into = sum(1 for i in running if moves[i].target == node)
            out = sum(1 for i in running if moves[i].source == node)
            if max(into, out) > config.limits.per_node:
                found.append(f"t={now:.0f}: {into} into and {out} out of {node} at once")
        if not running:
            break                                     # the rest can never start
        now = min(running.values())
        for i in [i for i, end in running.items() if end <= now]:
            move = moves[i]
            del running[i]
            ended.add(i)
            used[move.source] -= move.mem_bytes
            on[move.source].discard(move.vmid)
    if waiting:
        found.append(f"moves never started: {[moves[i].vmid for i in waiting]}")
    return found
