"""``/_github``: the fake GitHub's control API, for tests and the demo (JSON in and out).

| method and path | body | does |
|---|---|---|
| GET /_github/state | | scale sets (with statistics), sessions, runners, jobs, faults |
| GET /_github/requests?since=N | | the fake's request log after N |
| POST /_github/jobs | {repo, labels, duration, result, name, count} | queues jobs; their ids |
| POST /_github/jobs/<id>/cancel | | cancels a job, queued or running |
| POST /_github/jobs/<id>/finish | {result} | a running job ends now |
| POST /_github/faults | {kind: count or settings, ...} | replaces the faults (state.FAULT_KINDS) |
| DELETE /_github/faults | | no faults |
| POST /_github/tokens/expire | | every installation, admin and queue token expires now |
| POST /_github/hooks | {url, secret} | where webhooks go |
| GET /_github/deliveries | | the webhook delivery log |
| POST /_github/deliveries/flush | | waits until every delivery has been attempted |
| POST /_github/deliveries/<id>/redeliver | | sends a delivery again, same id |
"""

from __future__ import annotations

import json
from typing import Any

from werkzeug.wrappers import Request, Response

from keel.errors import KeelError
from keel.units import parse_duration


def _reply(status: int, body: Any) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


def control(cluster: Any, request: Request) -> Response:
    parts = [p for p in request.path.split("/") if p][1:]
    method = request.method.upper()
    body = request.get_json(silent=True) if request.get_data() else {}
    if not isinstance(body, dict):
        return _reply(400, {"error": "the body must be a JSON object"})
    if method == "POST" and parts == ["deliveries", "flush"]:
        return _reply(200, {"flushed": cluster.github.hooks.flush()})   # outside the lock
    try:
        with cluster.lock:
            cluster.sync()
            return _reply(200, _handle(cluster.github, method, parts, body, request))
    except KeelError as err:
        return _reply(400, {"error": str(err)})
    except (KeyError, ValueError, TypeError) as err:
        return _reply(400, {"error": f"bad request: {err}"})
    except LookupError as err:
        return _reply(404, {"error": str(err)})


def _handle(fake: Any, method: str, parts: list[str], body: dict[str, Any], request: Request) -> Any:
    from keel.sim.github import agent
    head = parts[0] if parts else ""
    if method == "GET" and head == "state":
        return fake.state()
    if method == "GET" and head == "requests":
        since = int(request.args.get("since", 0))
        return [r for r in fake.requests if r["seq"] > since]
    if head == "jobs" and method == "POST" and len(parts) == 1:
        labels = body["labels"]
        if isinstance(labels, str):
            labels = [labels]
        count = int(body.get("count", 1))
        duration = parse_duration(body.get("duration", 60), "duration")
        jobs = [fake.queue_job(str(body.get("repo", fake.spec.repos[0])), [str(x) for x in labels],
                               duration, str(body.get("result", "succeeded")), str(body.get("name", "build")))
                for _ in range(count)]
        return {"ids": [j.id for j in jobs]}
    if head == "jobs" and method == "POST" and len(parts) == 3:
        job = fake.jobs.get(int(parts[1]))
        if job is None:
            raise LookupError(f"no job {parts[1]}")
        if parts[2] == "cancel":
            agent.cancel(fake, job)
        elif parts[2] == "finish":
            agent.finish_now(fake, job, body.get("result"))
        else:
            raise LookupError(f"no control endpoint jobs/<id>/{parts[2]}")
        return {"id": job.id, "status": job.status}
    if head == "faults":
        if method == "DELETE":
            fake.set_faults({})
        elif method == "POST":
            fake.set_faults(body)
        return {"faults": fake.faults}
    if method == "POST" and parts == ["tokens", "expire"]:
        fake.expire_tokens()
        return {"expired": True}
    if method == "POST" and head == "hooks":
        fake.hooks.configure(body.get("url"), body.get("secret"))
        return {"url": fake.hooks.url}
    if method == "GET" and head == "deliveries":
        return fake.hooks.entries()
    if method == "POST" and head == "deliveries" and len(parts) == 3 and parts[2] == "redeliver":
        return fake.hooks.redeliver(int(parts[1]))
    raise LookupError(f"no control endpoint {method} /_github/{'/'.join(parts)}")
