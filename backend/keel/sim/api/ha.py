"""``/cluster/ha``: resources, their migrate/relocate, status, rules (9.x) or groups (8.x)."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.errors import ApiError
from keel.sim.ha import _digest, normalise_sid, parse_nodes

RULE_KEYS = ("type", "resources", "nodes", "strict", "affinity", "disable", "comment")
GROUP_KEYS = ("nodes", "restricted", "nofailback", "comment")


@route("GET", "/cluster/ha")
def index(call: Call) -> list[dict[str, str]]:
    names = ["status", "resources", "rules"] if call.cluster.ha.pve9 else ["status", "resources", "groups"]
    return [{"id": n} for n in names]


@route("GET", "/cluster/ha/resources")
def resources(call: Call) -> list[dict[str, Any]]:
    entries = call.cluster.ha.resource_entries()
    kind = call.params.get("type")
    return [e for e in entries if kind is None or e["type"] == kind]


@route("GET", "/cluster/ha/resources/{sid}")
def resource(call: Call) -> dict[str, Any]:
    sid = normalise_sid(call.params["sid"])
    for entry in call.cluster.ha.resource_entries():
        if entry["sid"] == sid:
            return entry
    raise ApiError(500, f"no such resource '{sid}'")


@route("POST", "/cluster/ha/resources")
def add_resource(call: Call) -> None:
    params = {k: v for k, v in call.params.items() if k not in ("sid", "type")}
    call.cluster.ha.add_resource(normalise_sid(call.params["sid"]), params)
    return None


@route("PUT", "/cluster/ha/resources/{sid}")
def update_resource(call: Call) -> None:
    call.cluster.ha.update_resource(normalise_sid(call.params["sid"]),
                                    {k: v for k, v in call.params.items() if k != "sid"})
    return None


@route("DELETE", "/cluster/ha/resources/{sid}")
def delete_resource(call: Call) -> None:
    sid = normalise_sid(call.params["sid"])
    call.cluster.ha._resource(sid)
    call.cluster.ha.remove_resource(sid)
    return None


@route("POST", "/cluster/ha/resources/{sid}/migrate")
def migrate(call: Call) -> Any:
    return call.cluster.ha.queue("migrate", call.params["sid"], call.params["node"])


@route("POST", "/cluster/ha/resources/{sid}/relocate")
def relocate(call: Call) -> Any:
    return call.cluster.ha.queue("relocate", call.params["sid"], call.params["node"])


@route("GET", "/cluster/ha/status")
def status_index(call: Call) -> list[dict[str, str]]:
    return [{"name": "current"}, {"name": "manager_status"}]


@route("GET", "/cluster/ha/status/current")
def status_current(call: Call) -> list[dict[str, Any]]:
    return call.cluster.ha.status_current()


@route("GET", "/cluster/ha/status/manager_status")
def manager_status(call: Call) -> dict[str, Any]:
    return call.cluster.ha.manager_status()


# -- rules (PVE 9) ---------------------------------------------------------------------


def _require_pve9(call: Call) -> None:
    if not call.cluster.ha.pve9:
        raise ApiError(501, f"Method '{call.endpoint.method} {call.endpoint.path}' not implemented")


def _rule_entry(name: str, rule: dict[str, Any], order: int, digest: str) -> dict[str, Any]:
    entry = {"rule": name, "order": order, "digest": digest}
    entry.update({k: v for k, v in rule.items() if v not in ("", None)})
    entry.setdefault("disable", 0)
    return entry


def _check_rule(call: Call, rule: dict[str, Any]) -> None:
    ha = call.cluster.ha
    errors = {}
    sids = [normalise_sid(s) for s in str(rule.get("resources", "")).split(",") if s]
    rule["resources"] = ",".join(sids)
    missing = [s for s in sids if s not in ha.resources]
    if missing:
        errors["resources"] = f"resource '{missing[0]}' is not configured as HA resource"
    if rule["type"] == "node-affinity":
        if not rule.get("nodes"):
            errors["nodes"] = "property is missing and it is not optional"
        else:
            unknown = [n for n in parse_nodes(rule["nodes"]) if n not in call.cluster.nodes]
            if unknown:
                errors["nodes"] = f"node '{unknown[0]}' does not exist"
    elif rule.get("affinity") not in ("positive", "negative"):
        errors["affinity"] = "property is missing and it is not optional"
    if rule["type"] == "resource-affinity" and len(sids) < 2:
        errors["resources"] = "rule must have at least two resources"
    if errors:
        raise ApiError(400, f"Rule '{call.params.get('rule')}' is invalid.", errors)


@route("GET", "/cluster/ha/rules")
def rules(call: Call) -> list[dict[str, Any]]:
    _require_pve9(call)
    ha = call.cluster.ha
    digest = _digest(ha.rules)
    result = []
    for order, (name, rule) in enumerate(sorted(ha.rules.items()), start=1):
        if call.params.get("type") and rule["type"] != call.params["type"]:
            continue
        if call.params.get("resource") and normalise_sid(call.params["resource"]) not in \
                rule["resources"].split(","):
            continue
        result.append(_rule_entry(name, rule, order, digest))
    return result


@route("GET", "/cluster/ha/rules/{rule}")
def rule(call: Call) -> dict[str, Any]:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    if name not in ha.rules:
        raise ApiError(500, f"no such ha rule '{name}'")
    order = sorted(ha.rules).index(name) + 1
    return _rule_entry(name, ha.rules[name], order, _digest(ha.rules))


@route("POST", "/cluster/ha/rules")
def add_rule(call: Call) -> None:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    if name in ha.rules:
        raise ApiError(500, f"ha rule '{name}' already defined")
    entry = {k: call.params[k] for k in RULE_KEYS if k in call.params}
    _check_rule(call, entry)
    ha.rules[name] = entry
    return None


@route("PUT", "/cluster/ha/rules/{rule}")
def update_rule(call: Call) -> None:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    if name not in ha.rules:
        raise ApiError(500, f"no such ha rule '{name}'")
    if call.params["type"] != ha.rules[name]["type"]:
        raise ApiError(500, f"rule type mismatch - cannot change the type of rule '{name}'")
    entry = dict(ha.rules[name])
    for key in (k.strip() for k in str(call.params.get("delete", "")).split(",") if k.strip()):
        entry.pop(key, None)
    entry.update({k: call.params[k] for k in RULE_KEYS if k in call.params})
    _check_rule(call, entry)
    ha.rules[name] = entry
    return None


@route("DELETE", "/cluster/ha/rules/{rule}")
def delete_rule(call: Call) -> None:
    _require_pve9(call)
    name = call.params["rule"]
    if name not in call.cluster.ha.rules:
        raise ApiError(500, f"no such ha rule '{name}'")
    del call.cluster.ha.rules[name]
    return None


# -- groups (PVE 8) ----------------------------------------------------------------------


def _require_pve8(call: Call) -> None:
    if call.cluster.ha.pve9:
        raise ApiError(500, "cannot index groups: ha groups have been migrated to rules")


@route("GET", "/cluster/ha/groups")
def groups(call: Call) -> list[dict[str, Any]]:
    _require_pve8(call)
    ha = call.cluster.ha
    digest = _digest(ha.groups)
    return [{"group": name, "type": "group", "digest": digest,
             **{k: v for k, v in group.items() if v not in ("", None)}}
            for name, group in sorted(ha.groups.items())]


@route("GET", "/cluster/ha/groups/{group}")
def group(call: Call) -> dict[str, Any]:
    _require_pve8(call)
    ha = call.cluster.ha
    name = call.params["group"]
    if name not in ha.groups:
        raise ApiError(500, f"no such ha group '{name}'")
    return {"group": name, "type": "group", "digest": _digest(ha.groups),
            **{k: v for k, v in ha.groups[name].items() if v not in ("", None)}}


@route("POST", "/cluster/ha/groups")
def add_group(call: Call) -> None:
    _require_pve8(call)
    ha = call.cluster.ha
    name = call.params["group"]
    if name in ha.groups:
        raise ApiError(500, f"ha group '{name}' already defined")
    ha.groups[name] = {k: call.params[k] for k in GROUP_KEYS if k in call.params}
    return None


@route("PUT", "/cluster/ha/groups/{group}")
def update_group(call: Call) -> None:
    _require_pve8(call)
    ha = call.cluster.ha
    name = call.params["group"]
    if name not in ha.groups:
        raise ApiError(500, f"no such ha group '{name}'")
    ha.groups[name].update({k: call.params[k] for k in GROUP_KEYS if k in call.params})
    return None


@route("DELETE", "/cluster/ha/groups/{group}")
def delete_group(call: Call) -> None:
    _require_pve8(call)
    ha = call.cluster.ha
    name = call.params["group"]
    if name not in ha.groups:
        raise ApiError(500, f"no such ha group '{name}'")
    if any(r.get("group") == name for r in ha.resources.values()):
        raise ApiError(500, f"ha group '{name}' is used by resources")
    del ha.groups[name]
    return None
