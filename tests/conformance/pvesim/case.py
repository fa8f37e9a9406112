"""Reading a pve-ha-manager test case folder (the files ``ha-tester`` reads).

Missing files get the defaults PVE's simulator gives them: three nodes, six VMs,
4 cores / 4 GiB configured and 2 cores / 2 GiB used per service.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keel.model import HaRule

MiB = 1024**2

DEFAULT_NODE = {"power": "off", "network": "off", "maxcpu": 24, "maxmem": 131072 * MiB}
DEFAULT_SERVICES = {"vm:101": "node1", "vm:102": "node2", "vm:103": "node3",
                    "vm:104": "node1", "vm:105": "node2", "vm:106": "node3"}
DEFAULT_STATIC = {"maxcpu": 4.0, "maxmem": 4096 * MiB}
DEFAULT_DYNAMIC = {"cpu": 2.0, "mem": 2048 * MiB}


@dataclass
class Case:
    name: str
    hardware: dict[str, dict[str, Any]]
    services: dict[str, dict[str, Any]]
    static_stats: dict[str, dict[str, float]]
    dynamic_stats: dict[str, dict[str, float]]
    datacenter: dict[str, Any]
    rules: list[HaRule]
    manager_status: dict[str, Any]
    cmdlist: list[list[str]]
    expected_log: list[str] = field(default_factory=list)


def _json(path: Path, default: Any) -> Any:
    if not path.exists():
        return default
    text = path.read_text().strip()
    return json.loads(text) if text else default


def parse_rules(text: str) -> list[HaRule]:
    """PVE's section-config rules (``/etc/pve/ha/rules.cfg``) as ``HaRule``s.

    >>> parse_rules("node-affinity: r1\\n\\tnodes node1:2,node2\\n\\tresources vm:101\\n\\tstrict 1\\n")
    [HaRule(rule='r1', type='node-affinity', resources=('vm:101',), disabled=False, \
nodes={'node1': 2, 'node2': 0}, strict=True, affinity=None, comment='')]
    """
    rules: list[HaRule] = []
    current: dict[str, Any] | None = None

    def flush() -> None:
        if current is None:
            return
        nodes: dict[str, int] = {}
        for item in filter(None, current.get("nodes", "").split(",")):
            node, _, prio = item.partition(":")
            nodes[node.strip()] = int(prio) if prio else 0
        rules.append(HaRule(
            rule=current["id"], type=current["type"],
            resources=tuple(s.strip() for s in current.get("resources", "").split(",") if s.strip()),
            disabled=current.get("disable", "0") not in ("0", ""),
            nodes=nodes, strict=current.get("strict", "0") == "1",
            affinity=current.get("affinity"), comment=current.get("comment", "")))

    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            flush()
            kind, _, rule_id = line.partition(":")
            current = {"type": kind.strip(), "id": rule_id.strip()}
        elif current is not None:
            key, _, value = line.strip().partition(" ")
            current[key] = value.strip() if value else "1"
    flush()
    return rules


def load_case(folder: Path) -> Case:
    folder = Path(folder)
    hardware = _json(folder / "hardware_status", None) or {
        n: dict(DEFAULT_NODE) for n in ("node1", "node2", "node3")}
    services = _json(folder / "service_config", None)
    if services is None:
        services = {sid: {"node": node} for sid, node in DEFAULT_SERVICES.items()}
    static = _json(folder / "static_service_stats", None)
    if static is None:
        static = {sid: dict(DEFAULT_STATIC) for sid in services}
    dynamic = _json(folder / "dynamic_service_stats", None)
    if dynamic is None:
        dynamic = {sid: dict(DEFAULT_DYNAMIC) for sid in static}
    rules_file = folder / "rules_config"
    expected = folder / "log.expect"
    return Case(
        name=folder.name, hardware=hardware, services=services, static_stats=static,
        dynamic_stats=dynamic, datacenter=_json(folder / "datacenter.cfg", {}),
        rules=parse_rules(rules_file.read_text()) if rules_file.exists() else [],
        manager_status=_json(folder / "manager_status", {}),
        cmdlist=_json(folder / "cmdlist", []),
        expected_log=expected.read_text().splitlines() if expected.exists() else [])
