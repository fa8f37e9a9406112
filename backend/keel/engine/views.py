"""What the web UI asks of the engine besides the plan itself (docs/ui.md): the
maintenance preview, the inputs a plan depends on, and the config's node names checked
against the cluster.  Functions of an ``Engine``; ``engine.core`` and ``engine.api`` call
them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keel import config as cfg
from keel.authz import Principal
from keel.errors import InvalidError, KeelError, NotFoundError

if TYPE_CHECKING:
    from keel.engine.core import Engine

FRESH_S = 2.0             # as engine.core's: a preview may use a reading this old


def maintenance_preview(engine: "Engine", node: str, principal: Principal | None = None) -> dict[str, Any]:
    """What entering maintenance on ``node`` would do, without doing it: the moves (guest,
    where to, why) and the guests that stay, with the reason.  The same privilege check
    as maintenance itself (VM.Migrate on every guest of the node)."""
    snap = engine.snapshot(max_age_s=FRESH_S)
    if node not in snap.nodes:
        raise NotFoundError(f"no node {node!r} in cluster {snap.cluster_name} (nodes: {', '.join(snap.nodes)})")
    engine._may_empty(principal, node, snap)
    plan = engine._evacuation(snap, node)
    leaving = {m.vmid for m in plan.moves if m.source == node}
    reasons = {s.vmid: s for s in plan.skipped if s.vmid is not None}
    stays = []
    for guest in sorted(snap.guests_on(node), key=lambda g: g.vmid):
        if guest.vmid in leaving:
            continue
        skip = reasons.get(guest.vmid)
        stays.append({"vmid": guest.vmid, "name": guest.name, "type": guest.type,
                      "reason": skip.reason if skip else "stays",
                      "detail": skip.detail if skip else "no allowed node has room for it"})
    return {"node": node, "in_maintenance": node in engine.store.maintenance_nodes(),
            "moves": [m.to_json() for m in plan.moves], "stays": stays,
            "conflicts": list(plan.conflicts),
            "summary": {"moves": len(plan.moves), "stays": len(stays),
                        "gib_moved": round(plan.bytes_moved / 1024**3, 2),
                        "est_seconds": round(plan.est_seconds, 1)}}


def add_model(engine: "Engine", snap: Any, maintenance: Any, cluster: dict[str, Any]) -> None:
    """The plan's own figures in a status's ``cluster`` (one set: docs/ui.md), smoothed as a
    plan made now smooths them; its imbalance is the status's."""
    from keel.status_view import model_view
    settings = engine.config.balancing
    samples = engine.store.samples(engine.clock() - settings.window_s) or None
    cluster["model"] = model_view(snap, settings, maintenance, samples)
    cluster["imbalance"]["keel"] = cluster["model"]["imbalance"]["keel"]
    cluster["imbalance"]["keel_now"] = cluster["model"]["imbalance"]["now"]


def plan_inputs(engine: "Engine", maintenance: dict[str, Any], running: Any) -> dict[str, Any]:
    """What a plan depends on besides the load: the config file's version, the nodes in
    maintenance and the last job.  A panel holding a plan made under other inputs shows it
    as out of date and plans again (docs/ui.md, "When a plan goes stale")."""
    last = engine.store.jobs(limit=1)
    job = running.id if running else (f"{last[0]['id']}:{last[0]['state']}" if last else "")
    return {"config": engine._config_stamp[:16], "maintenance": sorted(maintenance), "job": job}


def _problems(errors: dict[str, str]) -> InvalidError:
    return InvalidError(f"config: {len(errors)} problem(s): " +
                        "; ".join(f"{path}: {message}" for path, message in errors.items()), errors=errors)


def parse_config(engine: "Engine", data: Any) -> cfg.Config:
    """The config from its YAML data, with every problem said at once: the file's own and
    node names the cluster does not have."""
    unknown = unknown_nodes(engine, data)
    try:
        config = cfg.parse(data, "config")
    except InvalidError as err:
        if not unknown:
            raise
        raise _problems({**err.errors, **unknown}) from None
    if unknown:
        raise _problems(unknown)
    return config


def unknown_nodes(engine: "Engine", data: Any) -> dict[str, str]:
    """Node names in pins, ignore lists, maintenance and reservations must be the
    cluster's (a typo would pin a guest nowhere).  Read from the file as written, so that
    they are said beside its other problems; unchecked while PVE cannot be read."""
    b = data.get("balancing") if isinstance(data, dict) else None
    if not isinstance(b, dict):
        return {}
    try:
        snap = engine.snapshot()
    except KeelError:
        return {}
    nodes = set(snap.nodes)

    def names(value: Any) -> list[str]:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return [str(v) for v in value] if isinstance(value, list) else []

    named: list[tuple[str, list[str]]] = []
    if isinstance(b.get("pin"), dict):
        named += [(f"balancing.pin.{guest}", names(value)) for guest, value in b["pin"].items()]
    if isinstance(b.get("ignore"), dict):
        named.append(("balancing.ignore.nodes", names(b["ignore"].get("nodes"))))
    named.append(("balancing.maintenance", names(b.get("maintenance"))))
    reserve = b["memory"].get("reserve") if isinstance(b.get("memory"), dict) else None
    if isinstance(reserve, dict):
        named.append(("balancing.memory.reserve", [str(n) for n in reserve if str(n) != "default"]))
    if isinstance(b.get("pools"), dict):
        named += [(f"balancing.pools.{name}.pin", names(rule.get("pin"))) for name, rule in b["pools"].items()
                  if isinstance(rule, dict)]
    errors = {}
    for path, given in named:
        unknown = sorted(set(given) - nodes)
        if unknown:
            errors[path] = (f"no node {', '.join(repr(n) for n in unknown)} in cluster "
                            f"{snap.cluster_name or '(standalone)'}; its nodes are {', '.join(sorted(nodes))}")
    return errors
