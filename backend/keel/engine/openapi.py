"""The local API described (OpenAPI 3.0, served at ``/api/openapi.json``), and the two
renderings the API needs besides JSON: the balancing settings and Prometheus metrics."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from keel import __version__


def _envelope(data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": ["data"],
            "properties": {"data": data or {}}}


ERROR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _op(summary: str, ok_status: str = "200", body: str | None = None, params: list[dict] | None = None,
        text: bool = False, errors: tuple[str, ...] = ("400", "409", "503")) -> dict[str, Any]:
    errors = ("403",) + errors          # every route checks who asks (engine.peer, engine.api)
    content = ({"text/plain": {"schema": {"type": "string"}}} if text
               else {"application/json": {"schema": _envelope()}})
    op: dict[str, Any] = {"summary": summary, "responses": {ok_status: {"description": "ok", "content": content}}}
    for status in errors:
        op["responses"][status] = ERROR
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    if params:
        op["parameters"] = params
    return op


def _q(name: str, schema: dict[str, Any], required: bool = False, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path", "schema": schema}


METHOD = {"type": "string", "enum": ["keel", "bruteforce", "topsis"]}

SPEC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Keel local API", "version": __version__,
             "description": "keel-engine's API on its Unix socket, for root and keel-web only (checked "
                            "with SO_PEERCRED). keel-web forwards to it after checking the caller's "
                            "Proxmox VE ticket, with the user in X-Keel-User and their privileges in "
                            "X-Keel-Privileges; the engine then checks each route per object "
                            "(docs/security.md). Answers use Proxmox's envelope: "
                            "{\"data\": ...}, or {\"data\": null, \"message\", \"errors\"} on error."},
    "paths": {
        "/api/status": {"get": _op("Leader, last round, errors, the cluster's load and imbalance")},
        "/api/plan": {"get": _op("A dry-run plan from fresh state", params=[_q("method", METHOD)])},
        "/api/apply": {"post": _op("Plan and carry it out (leader only): returns a job", "202", "ApplyRequest")},
        "/api/jobs": {"get": _op("Recent jobs", errors=())},
        "/api/jobs/{job_id}": {
            "get": _op("A job's state and its events from index `since`",
                       params=[_q("job_id", {"type": "string"}, where="path"),
                               _q("since", {"type": "integer", "minimum": 0})], errors=("400", "404")),
            "delete": _op("Cancel a job: no new migration starts",
                          params=[_q("job_id", {"type": "string"}, where="path")], errors=("404",))},
        "/api/maintenance": {"get": _op("Nodes in maintenance, since when, by whom", errors=())},
        "/api/maintenance/{node}/preview": {"get": _op(
            "What entering maintenance would move where and what would stay, with why, without acting",
            params=[_q("node", {"type": "string"}, where="path")], errors=("404", "503"))},
        "/api/maintenance/{node}": {"post": _op(
            "Enter (and empty) or leave maintenance (leader only)", "200", "MaintenanceRequest",
            params=[_q("node", {"type": "string"}, where="path")], errors=("400", "404", "409", "503"))},
        "/api/charts/nodes": {"get": _op("Each node's CPU and memory over the last hour or day (PVE's RRD)",
                                         params=[_q("timeframe", {"type": "string", "enum": ["hour", "day"]})])},
        "/api/history": {"get": _op("Moves, decisions and jobs", params=[_q("limit", {"type": "integer", "minimum": 1,
                                                                                "maximum": 1000})])},
        "/api/best-node": {"get": _op("The node Keel would pick for a new guest", params=[
            _q("cores", {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1024}, True),
            _q("memory", {"type": "string", "example": "8GiB"}, True)])},
        "/api/config": {
            "get": _op("The config file, its last error, the balancing settings in force, the "
                       "file's balancing section as written (sections.balancing)", errors=()),
            "put": _op("Replace the config file (validated first; written atomically)", "200", "ConfigRequest")},
        "/api/config/validate": {"post": _op("Check a config without writing it", "200", "ConfigRequest")},
        "/api/pve/crs": {"get": _op("Proxmox VE's own CRS settings (is its auto-rebalance on?)", errors=("503",))},
        "/api/runners": {"get": _op("Runner scale sets, runners and recent jobs", errors=())},
        "/api/runners/scale-sets": {"get": _op("Scale sets: desired, current, idle, busy, state", errors=())},
        "/api/runners/runners": {"get": _op("Runners: VMID, node, state, age, job", errors=())},
        "/api/runners/jobs": {"get": _op("Recent jobs and how long they waited for a runner", errors=())},
        "/api/runners/scale-sets/{name}/{action}": {"post": _op(
            "Pause, resume or drain a scale set at run time (Sys.Modify on /): kept, with who and when, "
            "until resumed; the leader's runners act on it at once", errors=("400", "404"),
            params=[_q("name", {"type": "string"}, where="path"),
                    _q("action", {"type": "string", "enum": ["pause", "resume", "drain"]}, where="path")])},
        "/api/runners/waits": {"get": _op(
            "Job wait times (queued to started) of the last jobs that started, and p50/p95 per scale set",
            params=[_q("limit", {"type": "integer", "minimum": 1, "maximum": 1000})], errors=("400",))},
        "/api/runners/activity": {"get": _op(
            "Each scale set's queue depth and busy runners over the last hour or day: 61 points "
            "[time, most jobs waiting, most runners busy] per scale set, each the peak of its step",
            params=[_q("span", {"type": "string", "enum": ["1h", "1d", "3600", "86400"]})], errors=("400",))},
        "/api/runners/settings": {
            "get": _op("The runners: section as written, and whether each secret is set (never its value)",
                       errors=("400",)),
            "put": _op("Replace the runners: section and set secrets (validated first, errors keyed by config "
                       "path; secrets written 0600 to engine.secrets_dir; the runners restart)",
                       "200", "RunnerChange")},
        "/api/runners/settings/validate": {"post": _op(
            "Check runner settings and secrets without writing: {valid, message, errors by config path}",
            "200", "RunnerChange")},
        "/api/runners/secrets/{secret_id}": {"put": _op(
            "Set or replace one secret (write-only): github.app_private_key, github.token, webhook.secret or "
            "providers.<name>.token_secret; a default file is named in the config if it names none",
            "200", "SecretRequest", params=[_q("secret_id", {"type": "string"}, where="path")])},
        "/api/runners/test": {"post": _op(
            "Test connection: GitHub credentials, runners and scale sets; each provider and its templates. "
            "A list of {check, target, ok, message}", "200", "Empty", errors=("400",))},
        "/api/runners/webhook": {"post": {
            "summary": "A GitHub workflow_job webhook (raw body; X-Hub-Signature-256 checked)",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"202": {"description": "accepted", "content": {"application/json": {
                "schema": _envelope()}}}, "200": {"description": "ping or duplicate", "content": {
                    "application/json": {"schema": _envelope()}}},
                "401": ERROR, "404": ERROR, "409": ERROR}}},
        "/api/power": {"get": _op(
            "Power saving: each node's power state (awake, emptying, shutting down, sleeping since, waking, did "
            "not wake), quorum, Ceph, the energy estimate (node-hours asleep x watts), the last sleeps and wakes "
            "with their reasons, and the power loop's last decision", errors=("503",))},
        "/api/power/plan": {"get": _op("The consolidation plan now (a dry run): which nodes could sleep, the "
                                       "moves, the steps, and why each other node stays awake; ?node= that node "
                                       "alone, as its sleep would plan it (&test=1: as its wake test would)",
                                       params=[_q("node", {"type": "string"}), _q("test", {"type": "string"})],
                                       errors=("404", "503"))},
        "/api/power/nodes/{node}/{action}": {"post": _op(
            "Sleep (empty and power off, if every gate lets it), wake (Wake-on-LAN) or test (a sleep, then at once "
            "the wake, recorded as the node's wake test) a node: a job (leader only; Sys.PowerMgmt on "
            "/nodes/{node})", "202", "Empty",
            params=[_q("node", {"type": "string"}, where="path"),
                    _q("action", {"type": "string", "enum": ["sleep", "wake", "test"]}, where="path")],
            errors=("400", "404", "409", "503"))},
        "/api/metrics": {"get": _op("Prometheus metrics", text=True, errors=())},
        "/api/openapi.json": {"get": {"summary": "This document", "responses": {"200": {
            "description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    },
    "components": {"schemas": {
        "Error": {"type": "object", "required": ["data", "message"], "properties": {
            "data": {"nullable": True}, "message": {"type": "string"},
            "errors": {"type": "object", "additionalProperties": {"type": "string"}},
            "leader": {"type": "string", "nullable": True}}},
        "ApplyRequest": {"type": "object", "additionalProperties": False, "properties": {"method": METHOD}},
        "MaintenanceRequest": {"type": "object", "additionalProperties": False, "required": ["action"],
                               "properties": {"action": {"type": "string", "enum": ["enter", "leave"]},
                                              "evacuate": {"type": "boolean", "default": True}}},
        "RunnerChange": {"type": "object", "additionalProperties": False, "properties": {
            "settings": {"type": "object", "description": "the whole runners: section, as in the config file"},
            "secrets": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 16384},
                        "description": "secret id -> new value (write-only)"},
            "stamp": {"type": "string", "description": "GET /api/runners/settings' stamp: refused (409) if "
                                                      "the file changed since"}}},
        "SecretRequest": {"type": "object", "additionalProperties": False, "required": ["value"],
                          "properties": {"value": {"type": "string", "maxLength": 16384}}},
        "Empty": {"type": "object", "additionalProperties": False},
        "ConfigRequest": {"type": "object", "additionalProperties": False,
                          "description": "text (the whole file) or balancing (that section alone, the "
                                         "rest of the file kept as it is, comments included)",
                          "properties": {"text": {"type": "string", "maxLength": 1048576},
                                         "balancing": {"type": "object"}}},
    }},
}


def balancing_json(settings: Any) -> dict[str, Any]:
    """The balancing settings in force, as plain data (durations in seconds)."""
    data = asdict(settings)
    data["guest_types"] = sorted(settings.guest_types)
    data["maintenance"] = sorted(settings.maintenance)
    data["ignore"] = {k: sorted(v) for k, v in asdict(settings.ignore).items()}
    data["schedule"] = None if settings.schedule is None else str(settings.schedule)
    data["pools"] = {name: asdict(pool) for name, pool in settings.pools.items()}
    return data


def metrics_text(engine: Any) -> str:
    """Balancing figures (and the runners' metrics when they run), Prometheus text format."""
    lines = [
        "# HELP keel_leader 1 if this node's engine holds the leader lease.",
        "# TYPE keel_leader gauge",
        f'keel_leader{{node="{engine.node}"}} {1 if engine.leader else 0}',
        "# HELP keel_config_error 1 if the config file was refused (the last good one runs).",
        "# TYPE keel_config_error gauge",
        f"keel_config_error {1 if engine.config_error else 0}",
    ]
    last = engine.last_round
    if last:
        lines += ["# HELP keel_balance_last_round_timestamp_seconds When the last balancing round ran.",
                  "# TYPE keel_balance_last_round_timestamp_seconds gauge",
                  f"keel_balance_last_round_timestamp_seconds {last['time']:.3f}",
                  "# HELP keel_imbalance Keel's imbalance figure at the last round.",
                  "# TYPE keel_imbalance gauge",
                  f"keel_imbalance {last['imbalance']:.6f}"]
    snap, _age = engine.reading.latest()
    if snap is not None:
        lines += ["# HELP keel_node_usage Node usage as a fraction of capacity.",
                  "# TYPE keel_node_usage gauge"]
        for node in snap.nodes.values():
            if node.online:
                lines.append(f'keel_node_usage{{node="{node.name}",resource="cpu"}} {node.cpu_frac:.4f}')
                lines.append(f'keel_node_usage{{node="{node.name}",resource="memory"}} {node.mem_frac:.4f}')
    counts: dict[str, int] = {}
    for move in engine.store.moves(limit=1000):
        counts[move["status"]] = counts.get(move["status"], 0) + 1
    lines += ["# HELP keel_moves Migrations Keel started, by how they ended (last 1000).",
              "# TYPE keel_moves gauge"]
    lines += [f'keel_moves{{status="{status}"}} {n}' for status, n in sorted(counts.items())]
    lines += engine.power.metrics()
    if engine.runners is not None:
        lines.append(engine.runners[0].metrics().rstrip("\n"))
    return "\n".join(lines) + "\n"
