"""``/cluster/ha``: resources, their migrate/relocate, status, rules (9.x) or groups (8.x)."""

from __future__ import annotations

from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.errors import ApiError
from keel.sim.ha import _digest, parse_nodes
from keel.sim.schema import split_list

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
    sid = call.cluster.ha.parse_sid(call.params["sid"])
    for entry in call.cluster.ha.resource_entries():
        if entry["sid"] == sid:
            return entry
    raise ApiError(500, f"no such resource '{sid}'")


@route("POST", "/cluster/ha/resources")
def add_resource(call: Call) -> None:
    params = {k: v for k, v in call.params.items() if k not in ("sid", "type")}
    call.cluster.ha.add_resource(call.params["sid"], params)
    return None


@route("PUT", "/cluster/ha/resources/{sid}")
def update_resource(call: Call) -> None:
    call.cluster.ha.update_resource(call.params["sid"],
                                    {k: v for k, v in call.params.items() if k != "sid"})
    return None


@route("DELETE", "/cluster/ha/resources/{sid}")
def delete_resource(call: Call) -> None:
    call.cluster.ha.delete_resource(call.params["sid"], purge=call.flag("purge", True))
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
#
# Errors inside PVE's HA config lock reach the client as plain 500s prefixed with what
# failed ("create ha rule failed: ..."), even the 400 an infeasible rule raises: the
# lock helper stringifies the exception (pve-ha-manager's lock_ha_domain).


def _require_pve9(call: Call) -> None:
    if not call.cluster.ha.pve9:
        raise ApiError(501, f"Method '{call.endpoint.method} {call.url_path}' not implemented")


def _rule_entry(name: str, rule: dict[str, Any], order: int, digest: str,
                errors: dict[str, list[str]] | None) -> dict[str, Any]:
    entry = {"rule": name, **{k: v for k, v in rule.items() if v not in ("", None)},
             "order": order, "digest": digest}
    if errors:
        entry["errors"] = {opt: ", ".join(texts) for opt, texts in errors.items()}
    return entry


def _check_names(call: Call, rule: dict[str, Any], failed: str) -> None:
    """Resources must be HA resources and nodes cluster nodes (500, in the lock)."""
    ha = call.cluster.ha
    sids = [ha.parse_sid(s) for s in split_list(str(rule.get("resources", "")), r"[,;\s]")]
    if not sids:
        raise ApiError(500, f"{failed}: no resources were specified")
    rule["resources"] = ",".join(sids)
    unmanaged = [s for s in sids if s not in ha.resources]
    if unmanaged:
        raise ApiError(500, f"{failed}: cannot use unmanaged resource(s) {', '.join(unmanaged)}.")
    if rule["type"] == "node-affinity" or "nodes" in rule:
        nodes = parse_nodes(rule.get("nodes", ""))
        if not nodes:
            raise ApiError(500, f"{failed}: no nodes were specified")
        unknown = [n for n in sorted(nodes) if n not in call.cluster.nodes]
        if unknown:
            raise ApiError(500, f"{failed}: cannot use non-existent node(s) {', '.join(unknown)}.")


def feasibility(call: Call, rules: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """PVE::HA::Rules::check_feasibility for resource-affinity rules: rule → option → errors."""
    errors: dict[str, dict[str, list[str]]] = {}
    nodes = len(call.cluster.nodes)
    affinity = {name: (r.get("affinity"), set(r["resources"].split(",")))
                for name, r in rules.items() if r["type"] == "resource-affinity"}
    for name, (kind, sids) in affinity.items():
        problems = []
        if len(sids) < 2:
            problems.append("rule is ineffective as there are less than two resources")
        if kind == "negative" and len(sids) > nodes:
            problems.append("rule defines more resources than available nodes")
        for other, (other_kind, other_sids) in affinity.items():
            if other != name and other_kind != kind and len(sids & other_sids) >= 2:
                problems.append(f"rule shares two or more resources with a {other_kind} "
                                f"resource affinity rule")
                break
        if problems:
            errors[name] = {"resources": problems}
    return errors


def _assert_feasible(call: Call, rules: dict[str, dict[str, Any]], name: str, failed: str) -> None:
    problems = feasibility(call, rules).get(name)
    if problems:
        details = "".join(f"{opt}: {', '.join(texts)}\n" for opt, texts in problems.items())
        raise ApiError(500, f"{failed}: 400 Rule '{name}' is invalid.\n{details}")


@route("GET", "/cluster/ha/rules")
def rules(call: Call) -> list[dict[str, Any]]:
    _require_pve9(call)
    ha = call.cluster.ha
    digest = _digest(ha.rules)
    errors = feasibility(call, ha.rules)
    result = []
    for order, (name, rule) in enumerate(ha.rules.items(), start=1):
        if call.params.get("type") and rule["type"] != call.params["type"]:
            continue
        if call.params.get("resource") and ha.parse_sid(call.params["resource"]) not in \
                rule["resources"].split(","):
            continue
        result.append(_rule_entry(name, rule, order, digest, errors.get(name)))
    return result


@route("GET", "/cluster/ha/rules/{rule}")
def rule(call: Call) -> dict[str, Any]:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    if name not in ha.rules:
        raise ApiError(500, f"no such ha rule '{name}'")
    order = list(ha.rules).index(name) + 1
    return _rule_entry(name, ha.rules[name], order, _digest(ha.rules),
                       feasibility(call, ha.rules).get(name))


@route("POST", "/cluster/ha/rules")
def add_rule(call: Call) -> None:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    failed = "create ha rule failed"
    entry = {k: call.params[k] for k in RULE_KEYS if k in call.params}
    if not entry.get("disable"):
        entry.pop("disable", None)
    if name in ha.rules:
        raise ApiError(500, f"{failed}: HA rule '{name}' already defined")
    _check_names(call, entry, failed)
    _assert_feasible(call, {**ha.rules, name: entry}, name, failed)
    ha.rules[name] = entry
    ha.rules_changed()
    return None


@route("PUT", "/cluster/ha/rules/{rule}")
def update_rule(call: Call) -> None:
    _require_pve9(call)
    ha = call.cluster.ha
    name = call.params["rule"]
    failed = "update HA rules failed"
    if name not in ha.rules:
        raise ApiError(500, f"{failed}: HA rule '{name}' does not exist")
    if call.params.get("digest") and call.params["digest"] != _digest(ha.rules):
        raise ApiError(500, f"{failed}: detected modified configuration - file changed by other "
                            f"user? Try again.")
    entry = dict(ha.rules[name])
    # As on create, a false ``disable`` is dropped: it leaves the rule as it was (re-enable
    # a rule with ``delete=disable``).
    entry.update({k: call.params[k] for k in RULE_KEYS if k in call.params and k != "type"
                  and (k != "disable" or call.params[k])})
    for key in split_list(str(call.params.get("delete", "")), r"[,;\s]"):
        entry.pop(key, None)
    _check_names(call, entry, failed)
    _assert_feasible(call, {**ha.rules, name: entry}, name, failed)
    ha.rules[name] = entry
    ha.rules_changed()
    return None


@route("DELETE", "/cluster/ha/rules/{rule}")
def delete_rule(call: Call) -> None:
    _require_pve9(call)
    call.cluster.ha.rules.pop(call.params["rule"], None)
    return None


# -- groups (PVE 8) ----------------------------------------------------------------------


def _require_pve8(call: Call, what: str) -> None:
    if call.cluster.ha.pve9:
        raise ApiError(500, f"cannot {what}: ha groups have been migrated to rules")


@route("GET", "/cluster/ha/groups")
def groups(call: Call) -> list[dict[str, Any]]:
    _require_pve8(call, "index groups")
    ha = call.cluster.ha
    digest = _digest(ha.groups)
    return [{"group": name, "type": "group", "digest": digest,
             **{k: v for k, v in group.items() if v not in ("", None)}}
            for name, group in sorted(ha.groups.items())]


@route("GET", "/cluster/ha/groups/{group}")
def group(call: Call) -> dict[str, Any]:
    _require_pve8(call, "read group")
    ha = call.cluster.ha
    name = call.params["group"]
    if name not in ha.groups:
        raise ApiError(500, f"no such ha group '{name}'")
    return {"group": name, "type": "group", "digest": _digest(ha.groups),
            **{k: v for k, v in ha.groups[name].items() if v not in ("", None)}}


@route("POST", "/cluster/ha/groups")
def add_group(call: Call) -> None:
    _require_pve8(call, "create group")
    ha = call.cluster.ha
    name = call.params["group"]
    if name in ha.groups:
        raise ApiError(500, f"create ha group failed: ha group ID '{name}' already defined")
    ha.groups[name] = {k: call.params[k] for k in GROUP_KEYS if k in call.params}
    ha.rules_changed()
    return None


@route("PUT", "/cluster/ha/groups/{group}")
def update_group(call: Call) -> None:
    _require_pve8(call, "update group")
    ha = call.cluster.ha
    name = call.params["group"]
    if name not in ha.groups:
        raise ApiError(500, f"update ha group failed: no such ha group '{name}'")
    ha.groups[name].update({k: call.params[k] for k in GROUP_KEYS if k in call.params})
    for key in split_list(str(call.params.get("delete", "")), r"[,;\s]"):
        ha.groups[name].pop(key, None)
    ha.rules_changed()
    return None


@route("DELETE", "/cluster/ha/groups/{group}")
def delete_group(call: Call) -> None:
    _require_pve8(call, "delete group")
    ha = call.cluster.ha
    name = call.params["group"]
    for sid, res in sorted(ha.resources.items()):
        if res.get("group") == name:
            raise ApiError(500, f"delete ha group failed: ha group is used by service '{sid}'")
    ha.groups.pop(name, None)
    return None
