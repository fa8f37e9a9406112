"""The simulator against the PVE API schema: every route it serves is a PVE route, and its
answers carry only fields PVE documents (or that PVE's code is known to send anyway)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from keel.sim.api.handlers import ROUTES
from keel.sim.schema import Schema

SCHEMA = Schema.load()

# Fields real PVE sends that its schema does not list, with the code that sends them.
UNDOCUMENTED_BUT_REAL = {
    # pve-manager PVE/API2Tools.pm extract_node_stats
    "/nodes": {"id", "type", "disk", "maxdisk"},
    # qemu-server QemuServer.pm vmstatus: disk is always set (0)
    "/nodes/{node}/qemu": {"disk"},
    "/nodes/{node}/qemu/{vmid}/status/current": {"disk"},
    # pve-container LXC.pm vmstatus: type from config_list, swap, pid, full cpu pressure
    "/nodes/{node}/lxc": {"type", "swap", "pid", "pressurecpufull"},
    "/nodes/{node}/lxc/{vmid}/status/current": {"type", "swap", "pid", "pressurecpufull"},
    # pve-manager PVE/API2/Tasks.pm convert_token_task splits user!token
    "/nodes/{node}/tasks": {"tokenid"},
    "/nodes/{node}/tasks/{upid}/status": {"tokenid"},
    # pve-storage Plugin list_volumes: the volume's content type
    "/nodes/{node}/storage/{storage}/content": {"content"},
}

# (schema path, concrete path, query): the GET answers whose fields are checked.
ANSWERS = [
    ("/version", "/version", {}),
    ("/cluster/status", "/cluster/status", {}),
    ("/cluster/resources", "/cluster/resources", {}),
    ("/cluster/options", "/cluster/options", {}),
    ("/cluster/tasks", "/cluster/tasks", {}),
    ("/nodes", "/nodes", {}),
    ("/nodes/{node}/status", "/nodes/pve1/status", {}),
    ("/nodes/{node}/version", "/nodes/pve1/version", {}),
    ("/nodes/{node}/rrddata", "/nodes/pve1/rrddata", {"timeframe": "hour"}),
    ("/nodes/{node}/qemu", "/nodes/pve1/qemu", {}),
    ("/nodes/{node}/qemu", "/nodes/pve3/qemu", {}),
    ("/nodes/{node}/lxc", "/nodes/pve1/lxc", {}),
    ("/nodes/{node}/qemu/{vmid}/status/current", "/nodes/pve1/qemu/100/status/current", {}),
    ("/nodes/{node}/qemu/{vmid}/status/current", "/nodes/pve3/qemu/121/status/current", {}),
    ("/nodes/{node}/lxc/{vmid}/status/current", "/nodes/pve1/lxc/109/status/current", {}),
    ("/nodes/{node}/qemu/{vmid}/config", "/nodes/pve2/qemu/116/config", {}),
    ("/nodes/{node}/lxc/{vmid}/config", "/nodes/pve1/lxc/109/config", {}),
    ("/nodes/{node}/qemu/{vmid}/migrate", "/nodes/pve1/qemu/112/migrate", {}),
    ("/nodes/{node}/qemu/{vmid}/migrate", "/nodes/pve1/qemu/110/migrate", {}),
    ("/nodes/{node}/lxc/{vmid}/migrate", "/nodes/pve1/lxc/109/migrate", {}),
    ("/nodes/{node}/qemu/{vmid}/rrddata", "/nodes/pve1/qemu/100/rrddata", {"timeframe": "hour"}),
    ("/nodes/{node}/storage", "/nodes/pve1/storage", {}),
    ("/nodes/{node}/storage/{storage}/content", "/nodes/pve1/storage/local-lvm/content", {}),
    ("/nodes/{node}/storage/{storage}/content", "/nodes/pve1/storage/local/content", {}),
    ("/nodes/{node}/storage/{storage}/status", "/nodes/pve1/storage/ceph/status", {}),
    ("/nodes/{node}/tasks", "/nodes/pve5/tasks", {"source": "all"}),
    ("/storage", "/storage", {}),
    ("/pools", "/pools", {}),
    ("/pools", "/pools", {"poolid": "prod"}),
    ("/cluster/ha/resources", "/cluster/ha/resources", {}),
    ("/cluster/ha/resources/{sid}", "/cluster/ha/resources/vm:100", {}),
    ("/cluster/ha/rules", "/cluster/ha/rules", {}),
    ("/cluster/ha/status/current", "/cluster/ha/status/current", {}),
    ("/cluster/ha/status/manager_status", "/cluster/ha/status/manager_status", {}),
    ("/access/permissions", "/access/permissions", {}),
]


def undocumented(schema: dict[str, Any], value: Any) -> set[str]:
    """Keys of ``value`` that ``schema`` (a returns spec) does not list.  Nothing is checked
    where the schema lists no properties, allows any, or is an index that documents only
    its key (``/storage`` lists ``storage``, the full entries come from the config)."""
    if schema.get("type") == "array" and isinstance(value, list):
        found: set[str] = set()
        for item in value:
            found |= undocumented(schema.get("items", {}), item)
        return found
    props = schema.get("properties")
    if not props or len(props) == 1 or not isinstance(value, dict) \
            or schema.get("additionalProperties") in (1, True):
        return set()
    return {key for key in value if key not in props and _indexed(key) not in props}


def _indexed(key: str) -> str:
    """``net0`` is documented as ``net[n]``."""
    return re.sub(r"\d+$", "[n]", key)


def test_every_simulated_route_is_a_pve_route():
    missing = [f"{method} {path}" for method, path in ROUTES
               if path not in SCHEMA.paths or method not in SCHEMA.paths[path]]
    assert missing == []


def test_the_simulator_serves_the_endpoints_keel_and_proxlb_use():
    needed = {("GET", "/cluster/resources"), ("GET", "/nodes/{node}/qemu/{vmid}/migrate"),
              ("POST", "/nodes/{node}/qemu/{vmid}/migrate"), ("POST", "/nodes/{node}/lxc/{vmid}/migrate"),
              ("POST", "/nodes/{node}/qemu/{vmid}/clone"), ("GET", "/cluster/nextid"),
              ("GET", "/nodes/{node}/tasks/{upid}/status"), ("GET", "/cluster/ha/status/manager_status"),
              ("POST", "/cluster/ha/resources/{sid}/migrate"), ("PUT", "/cluster/options"),
              ("GET", "/nodes/{node}/rrddata"), ("GET", "/access/permissions")}
    assert needed <= set(ROUTES)


@pytest.mark.parametrize("schema_path, path, query", ANSWERS, ids=[f"{a[1]}{a[2] or ''}" for a in ANSWERS])
def test_answer_fields_are_documented(shared_sim, schema_path, path, query):
    endpoint = SCHEMA.endpoint("GET", schema_path)
    data = shared_sim.proxmox().get(path.lstrip("/"), **query)
    extra = undocumented(endpoint.returns, data) - UNDOCUMENTED_BUT_REAL.get(schema_path, set())
    assert extra == set(), f"{path}: fields the PVE schema does not document: {sorted(extra)}"


def test_config_keys_are_config_options(shared_sim):
    """Every key of a guest config is a documented config option (or digest)."""
    pve = shared_sim.proxmox()
    for kind, node, vmid in (("qemu", "pve1", 100), ("qemu", "pve5", 9000), ("lxc", "pve1", 109)):
        endpoint = SCHEMA.endpoint("PUT", f"/nodes/{{node}}/{kind}/{{vmid}}/config")
        config = pve.get(f"nodes/{node}/{kind}/{vmid}/config")
        for key in set(config) - {"digest"}:
            assert endpoint.properties.get(key) or endpoint.properties.get(_indexed(key)), \
                f"{kind} {vmid}: {key} is no config option"


def test_answers_with_a_task_are_upids_of_the_documented_type(shared_sim):
    for method, path in ROUTES:
        if method in ("POST", "DELETE") and path.endswith(("/migrate", "/clone", "/status/start")):
            returns = SCHEMA.endpoint(method, path).returns
            if path.startswith("/cluster/ha"):
                assert returns.get("type") == "object"
            else:
                assert returns.get("type") == "string", f"{method} {path}"
