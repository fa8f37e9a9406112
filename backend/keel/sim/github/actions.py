"""The fake Actions service (``/_actions/_apis/...``): runner scale sets, message sessions,
JIT configs for a scale set, and agents.  Errors carry ``typeName`` as the service's do
(``RunnerScaleSetExistsException``, ``TaskAgentSessionConflictException``,
``AgentExistsException``, ``JobStillRunningException``)."""

from __future__ import annotations

from typing import Any

from keel.sim.github.rest import Call, GhError, route
from keel.sim.github.state import ScaleSet

RUNTIME = r"/_actions/_apis/runtime"


def service_error(status: int, type_name: str, message: str) -> GhError:
    return GhError(status, message, body={"typeName": type_name, "message": message})


def _scale_set(call: Call) -> ScaleSet:
    ss = call.fake.scale_sets.get(int(call.groups[0]))
    if ss is None:
        raise service_error(404, "RunnerScaleSetNotFoundException",
                            f"Runner scale set {call.groups[0]} not found.")
    return ss


@route("GET", RUNTIME + r"/runnergroups/?")
def runner_groups(call: Call) -> tuple[int, Any]:
    name = call.query.get("groupName")
    default = min(call.fake.groups)
    groups = [{"id": gid, "name": gname, "size": 0, "isDefaultGroup": gid == default}
              for gid, gname in call.fake.groups.items() if name is None or gname.lower() == name.lower()]
    return 200, {"count": len(groups), "value": groups}


@route("GET", RUNTIME + r"/runnerscalesets/?")
def list_scale_sets(call: Call) -> tuple[int, Any]:
    name, group = call.query.get("name"), call.query.get("runnerGroupId")
    found = [call.fake.scale_set_json(s, call.base) for s in call.fake.scale_sets.values()
             if (name is None or s.name == name) and (group is None or s.group_id == int(group))]
    return 200, {"count": len(found), "value": found}


@route("POST", RUNTIME + r"/runnerscalesets/?")
def create_scale_set(call: Call) -> tuple[int, Any]:
    fake = call.fake
    body = call.body if isinstance(call.body, dict) else {}
    name, group = body.get("name"), body.get("runnerGroupId") or min(fake.groups)
    if not isinstance(name, str) or not name:
        raise service_error(400, "ArgumentException", "The scale set needs a name.")
    if any(s.name == name for s in fake.scale_sets.values()):
        raise service_error(400, "RunnerScaleSetExistsException",
                            f"A runner scale set with name '{name}' already exists.")
    if group not in fake.groups:
        raise service_error(404, "RunnerGroupNotFoundException", f"Runner group {group} not found.")
    labels = [str(x.get("name")) for x in body.get("labels") or [] if isinstance(x, dict)]
    ss = fake.create_scale_set(name, int(group), [x for x in labels if x != name])
    return 200, fake.scale_set_json(ss, call.base)


@route("GET", RUNTIME + r"/runnerscalesets/(\d+)")
def get_scale_set(call: Call) -> tuple[int, Any]:
    return 200, call.fake.scale_set_json(_scale_set(call), call.base)


@route("PATCH", RUNTIME + r"/runnerscalesets/(\d+)")
def patch_scale_set(call: Call) -> tuple[int, Any]:
    ss = _scale_set(call)         # GitHub takes a change of labels and ignores it
    return 200, call.fake.scale_set_json(ss, call.base)


@route("DELETE", RUNTIME + r"/runnerscalesets/(\d+)")
def delete_scale_set(call: Call) -> tuple[int, Any]:
    ss = _scale_set(call)
    fake = call.fake
    del fake.scale_sets[ss.id]
    for sid in [sid for sid, s in fake.sessions.items() if s.scale_set_id == ss.id]:
        del fake.sessions[sid]
    return 204, None


@route("POST", RUNTIME + r"/runnerscalesets/(\d+)/sessions")
def create_session(call: Call) -> tuple[int, Any]:
    ss = _scale_set(call)
    owner = (call.body or {}).get("ownerName", "") if isinstance(call.body, dict) else ""
    session = call.fake.open_session(ss, str(owner))
    if session is None:
        raise service_error(409, "TaskAgentSessionConflictException",
                            f"The scale set {ss.name} already has an active session.")
    return 200, call.fake.session_json(session, call.base)


def _session(call: Call) -> Any:
    _scale_set(call)
    session = call.fake.sessions.get(call.groups[1])
    if session is None:
        raise service_error(404, "TaskAgentSessionExpiredException", "The session has expired.")
    return session


@route("PATCH", RUNTIME + r"/runnerscalesets/(\d+)/sessions/([0-9a-f-]+)")
def refresh_session(call: Call) -> tuple[int, Any]:
    session = _session(call)
    call.fake.refresh_session(session)
    return 200, call.fake.session_json(session, call.base)


@route("DELETE", RUNTIME + r"/runnerscalesets/(\d+)/sessions/([0-9a-f-]+)")
def delete_session(call: Call) -> tuple[int, Any]:
    session = _session(call)
    del call.fake.sessions[session.id]
    return 204, None


@route("POST", RUNTIME + r"/runnerscalesets/(\d+)/acquirejobs")
def acquire_jobs(call: Call) -> tuple[int, Any]:
    ss = _scale_set(call)
    ids = [int(x) for x in call.body] if isinstance(call.body, list) else []
    acquired = [j.request_id for j in call.fake.jobs.values()
                if j.request_id in ids and j.scale_set_id == ss.id and j.status == "queued"]
    return 200, {"count": len(acquired), "value": acquired}


@route("POST", RUNTIME + r"/runnerscalesets/(\d+)/generatejitconfig")
def generate_jit(call: Call) -> tuple[int, Any]:
    fake = call.fake
    ss = _scale_set(call)
    body = call.body if isinstance(call.body, dict) else {}
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise service_error(400, "ArgumentException", "The runner needs a name.")
    if fake.runner_by_name(name):
        raise service_error(409, "AgentExistsException", f"An agent named {name} already exists.")
    runner = fake.new_runner(name, [ss.name, *ss.labels], ss.group_id, ss.id)
    return 200, {"runner": {"id": runner.id, "name": runner.name, "runnerScaleSetId": ss.id},
                 "encodedJITConfig": fake.jit_config(runner)}


@route("GET", r"/_actions/_apis/distributedtask/pools/0/agents/?")
def list_agents(call: Call) -> tuple[int, Any]:
    name = call.query.get("agentName")
    agents = [_agent(r) for r in call.fake.runners.values() if name is None or r.name == name]
    return 200, {"count": len(agents), "value": agents}


@route("GET", r"/_actions/_apis/distributedtask/pools/0/agents/(\d+)")
def get_agent(call: Call) -> tuple[int, Any]:
    runner = call.fake.runners.get(int(call.groups[0]))
    if runner is None:
        raise service_error(404, "AgentNotFoundException", f"Agent {call.groups[0]} not found.")
    return 200, _agent(runner)


@route("DELETE", r"/_actions/_apis/distributedtask/pools/0/agents/(\d+)")
def delete_agent(call: Call) -> tuple[int, Any]:
    runner = call.fake.runners.get(int(call.groups[0]))
    if runner is None:
        return 204, None
    if runner.busy:
        raise service_error(400, "JobStillRunningException", f"Agent {runner.name} is running a job.")
    call.fake.remove_runner(runner)
    return 204, None


def _agent(runner: Any) -> dict[str, Any]:
    return {"id": runner.id, "name": runner.name, "status": runner.status, "enabled": True,
            "runnerScaleSetId": runner.scale_set_id, "busy": runner.busy}
