"""What ``keel runners status`` shows, and the gauges of the metrics: from the runners' state.

``snapshot(svc)`` is JSON-able (``keel runners status --json``, the engine's
``/api/runners``); ``render(status)`` is the table.  A scale set's state, in plain words:

| state | means |
|---|---|
| ``LISTENING`` | it holds its message session; runners come as jobs do |
| ``HOLDING BACK`` | a scale set of higher priority found a provider full and keeps this one off it |
| ``BACKING OFF`` | a provider refused its runner; it skips that provider until the time shown |
| ``PAUSED`` | ``paused: true`` or ``keel runners pause``: no runner is created, GitHub is told it has no room |
| ``DRAINING`` | ``keel runners drain``: runners for the jobs it has, then none; GitHub gets no more room |
| ``OFF SCHEDULE`` | a schedule window with ``max_runners: 0`` is in force |
| ``RATE LIMITED`` | GitHub asked Keel to wait (until the time shown): no call, and no runner judged, till then |
| ``DEGRADED`` | GitHub is not answering (since the time shown): no runner is judged by its silence |
| ``STANDBY`` | another listener holds its session (another Keel); it touches nothing |
| ``STARTING`` / ``UNREACHABLE`` | no session yet / GitHub cannot be reached or asked Keel to wait |
| ``MISCONFIGURED`` | GitHub answers but has no runner group of the name the config gives |

A provider is ``OK``, ``HELD`` (a hold keeps lower priorities off it), ``UNREACHABLE`` or
``DISABLED``.  ``queue`` lists the jobs waiting for a runner, oldest first: scale set,
age, repository, workflow.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from keel import words
from keel.runners.scaler import want
from keel.runners.state import Fleet
from keel.units import format_duration

RECENT_JOBS = 50
QUEUE_SHOWN = 200              # waiting jobs in the status (the count is always whole)
QUEUE_RENDERED = 15


def snapshot(svc: Fleet) -> dict[str, Any]:
    now = svc.clock()
    queue = waiting(svc, now)
    sets = [_scale_set(svc, ss, now, queue) for ss in svc.settings.scale_sets]
    providers = [_provider(svc, p, now) for p in svc.settings.providers]
    runners = [{"name": r.name, "scale_set": r.scale_set, "provider": r.provider, "vmid": r.vmid,
                "node": r.node, "state": r.state, "phase": r.phase, "age_s": round(now - r.created_at, 1),
                "job": r.job_id, "reason": r.reason, "adopted": r.adopted, **_job_link(svc, r)}
               for r in sorted(svc.runners.values(), key=lambda r: (r.scale_set, r.created_at))]
    jobs = sorted((j for s in svc.sets.values() for j in s.jobs.values()),
                  key=lambda j: j.seen_at, reverse=True)[:RECENT_JOBS]
    return {
        "time": now, "installation": svc.installation, "github": svc.settings.github.url,
        "blocked_until": svc.github.blocked_until if svc.github.blocked_until > now else None,
        "github_state": github_state(svc, now), "notices": list(svc.notices),
        "scale_sets": sets, "providers": providers, "runners": runners,
        "queue": queue[:QUEUE_SHOWN], "queued": len(queue),
        "jobs": [{**j.row(), "runner_wait_s": _wait(j.started_at, j.assigned_at),
                  "wait_s": _wait(j.started_at, j.queued_at)} for j in jobs],
    }


def github_state(svc: Fleet, now: float) -> dict[str, Any]:
    """``OK``, ``RATE LIMITED`` (until when) or ``DEGRADED`` (since when, and why)."""
    gh = svc.github
    state = {"state": words.OK, "since": None, "until": None, "message": None,
             "rate_limit_remaining": dict(gh.rate_limit)}
    if gh.blocked_until > now:
        state.update(state=words.RATE_LIMITED, until=gh.blocked_until,
                     message=f"GitHub asked Keel to wait until {_clock(gh.blocked_until)}")
    elif gh.trouble_since is not None:
        state.update(state=words.DEGRADED, since=gh.trouble_since,
                     message=f"GitHub not answering since {_clock(gh.trouble_since)} ({gh.trouble}): "
                             f"no runner is judged by its silence")
    return state


def waiting(svc: Fleet, now: float) -> list[dict[str, Any]]:
    """Jobs assigned (or announced) and not yet taken by a runner, oldest first."""
    out = []
    for state in svc.sets.values():
        for job in state.jobs.values():
            if job.state not in ("queued", "assigned"):
                continue
            since = job.queued_at or job.assigned_at or job.seen_at
            out.append({"job_id": job.job_id, "scale_set": job.scale_set, "repo": job.repo,
                        "workflow": job.workflow, "name": job.name, "state": job.state,
                        "since": since, "age_s": round(max(0.0, now - since), 1)})
    return sorted(out, key=lambda j: (j["since"], j["job_id"]))


def _job_link(svc: Fleet, runner: Any) -> dict[str, Any]:
    """The repository of the runner's job and a link to its Actions page on the GitHub the
    config names (the web UI's Job column)."""
    state = svc.sets.get(runner.scale_set)
    job = state.jobs.get(runner.job_id) if state is not None and runner.job_id else None
    repo = job.repo if job is not None else ""
    parts = urlsplit(svc.settings.github.url or "")
    url = f"{parts.scheme}://{parts.netloc}/{repo}/actions" if repo and parts.scheme == "https" else None
    return {"job_repo": repo or None, "job_url": url}


def _wait(end: float | None, start: float | None) -> float | None:
    return round(end - start, 1) if end is not None and start is not None else None


def _scale_set(svc: Fleet, ss: Any, now: float, queue: list[dict[str, Any]]) -> dict[str, Any]:
    state = svc.sets[ss.name]
    control = svc.shared.control(ss.name)
    w = svc.wants.get(ss.name) or want(ss, now, state.demand(now), control and control["mode"])
    mine = [r for r in svc.runners.values() if r.scale_set == ss.name]
    current = {s: sum(1 for r in mine if r.state == s) for s in words.RUNNER_STATES}
    held = []
    backing = []
    for entry in ss.providers:
        hold = svc.placement.held_back(ss.name, ss.priority, entry.name, now)
        if hold is not None:
            held.append({"provider": entry.name, "by": hold.holder, "until": hold.until})
        until = svc.placement.backoff_until(ss.name, entry.name, now)
        if until is not None:
            backoff = svc.placement.backoff(ss.name, entry.name)
            backing.append({"provider": entry.name, "until": until, "kind": backoff.kind if backoff else "",
                            "refusals": backoff.refusals if backoff else 0,
                            "message": backoff.message if backoff else ""})
    details = [f"{h['provider']} held back by {h['by']} until {_clock(h['until'])}" for h in held]
    details += [f"backing off {b['provider']} until {_clock(b['until'])} ({b['message'] or b['kind']})"
                for b in backing]
    gh = github_state(svc, now)
    mine_waiting = [j for j in queue if j["scale_set"] == ss.name]
    unconfirmed = state.unconfirmed() if state.stats_at is not None else 0
    if unconfirmed and state.session is not None:
        details.append(f"GitHub counts {unconfirmed} job(s) Keel has not heard of: no runner until its "
                       f"REST API shows them")
    if state.session is None:
        word = (words.STANDBY if state.standby else words.MISCONFIGURED if state.error and state.misconfigured
                else words.UNREACHABLE if state.error else words.STARTING)
        if state.standby:
            details.insert(0, "another listener holds its session")
        elif state.error:
            details.insert(0, state.error)
    elif w.paused:
        word = words.PAUSED
        if control and control["mode"] == "paused":
            details.insert(0, f"paused by {control['by']} at {_clock(control['at'])} (keel runners resume)")
    elif w.draining:
        word = words.DRAINING
        details.insert(0, f"draining since {_clock(control['at'])} by {control['by']}: "
                          f"{w.assigned} job(s) left" if control else "draining")
    elif w.off_schedule:
        word = words.OFF_SCHEDULE
        details.insert(0, "a schedule window with max_runners 0 is in force")
    elif gh["state"] != words.OK:
        word = gh["state"]
        details.insert(0, gh["message"])
    elif held:
        word = words.HOLDING_BACK
    elif backing:
        word = words.BACKING_OFF
    else:
        word = words.LISTENING
    alive = sum(1 for r in mine if r.alive)
    return {"name": ss.name, "state": word, "details": details, "priority": ss.priority,
            "desired": w.desired, "min": w.min_runners, "max": w.max_runners, "assigned": w.assigned,
            "current": current, "alive": alive, "idle": current["idle"], "busy": current["busy"],
            "held_back_from": held, "backing_off": backing, "paused": w.paused, "draining": w.draining,
            "control": control, "off_schedule": w.off_schedule, "last_poll": state.last_poll,
            "waiting": len(mine_waiting), "oldest_wait_s": mine_waiting[0]["age_s"] if mine_waiting else None,
            "unconfirmed": unconfirmed, "statistics": dict(state.statistics)}


def _provider(svc: Fleet, settings: Any, now: float) -> dict[str, Any]:
    holds = svc.placement.holds_on(settings.name, now)
    runners = sum(1 for r in svc.runners.values() if r.provider == settings.name and r.counted)
    if settings.disabled:
        word = words.DISABLED
    elif settings.name in svc.unreachable:
        word = words.UNREACHABLE
    elif holds:
        word = words.HELD
    else:
        word = words.OK
    refusal = svc.refusals.get(settings.name)
    return {"name": settings.name, "state": word, "runners": runners, "max_runners": settings.max_runners,
            "held_by": [{"scale_set": h.holder, "priority": h.priority, "until": h.until} for h in holds],
            "unreachable_since": svc.unreachable.get(settings.name),
            "last_refusal": None if refusal is None else {"at": refusal[0], "scale_set": refusal[1],
                                                          "kind": refusal[2], "message": refusal[3]}}


def gauges(svc: Fleet) -> list[tuple[str, dict[str, str], float]]:
    now = svc.clock()
    out: list[tuple[str, dict[str, str], float]] = []
    status = snapshot(svc)
    for entry in status["scale_sets"]:
        name = {"scale_set": entry["name"]}
        out += [("keel_runners_min", name, entry["min"]), ("keel_runners_desired", name, entry["desired"]),
                ("keel_runners_max", name, entry["max"]), ("keel_jobs_assigned", name, entry["assigned"]),
                ("keel_jobs_waiting", name, entry["waiting"]),
                ("keel_jobs_waiting_oldest_seconds", name, entry["oldest_wait_s"] or 0),
                ("keel_jobs_unconfirmed", name, entry["unconfirmed"]),
                ("keel_scale_set_paused", name, float(entry["paused"] or entry["off_schedule"])),
                ("keel_scale_set_draining", name, float(entry["draining"])),
                ("keel_scale_set_listening", name, float(svc.sets[entry["name"]].session is not None))]
        out += [("keel_runners_current", {**name, "state": s}, n) for s, n in entry["current"].items()]
        if entry["last_poll"] is not None:
            out.append(("keel_scale_set_last_poll_timestamp_seconds", name, entry["last_poll"]))
        last = svc.sets[entry["name"]].last_reconcile
        if last is not None:
            out.append(("keel_scale_set_last_reconcile_timestamp_seconds", name, last))
        ss = svc.settings.scale_set(entry["name"])
        held = {h["provider"] for h in entry["held_back_from"]}
        backing = {b["provider"]: b["until"] - now for b in entry["backing_off"]}
        for provider in (e.name for e in ss.providers) if ss else ():
            labels = {**name, "provider": provider}
            out.append(("keel_scale_set_holding_back", labels, float(provider in held)))
            out.append(("keel_provider_backoff_seconds", labels, max(0.0, backing.get(provider, 0.0))))
    for provider in svc.settings.providers:
        label = {"provider": provider.name}
        out.append(("keel_provider_reachable", label, float(provider.name not in svc.unreachable)))
        out.append(("keel_provider_held", label, float(bool(svc.placement.holds_on(provider.name, now)))))
        per_set = {ss.name: 0 for ss in svc.settings.scale_sets if ss.provider(provider.name)}
        for r in svc.runners.values():
            if r.provider == provider.name and r.counted:
                per_set[r.scale_set] = per_set.get(r.scale_set, 0) + 1
        out += [("keel_provider_runners", {**label, "scale_set": s}, n) for s, n in sorted(per_set.items())]
        for (call, result), n in sorted(svc.providers[provider.name].calls.items()):
            svc.meters.set_counter("keel_provider_calls_total",
                                   {"provider": provider.name, "call": call, "result": result}, n)
    for code, n in sorted(svc.github.requests_total.items()):
        svc.meters.set_counter("keel_github_requests_total", {"code": code}, n)
    blocked = svc.github.blocked_until
    out.append(("keel_github_blocked_until_timestamp_seconds", {}, blocked if blocked > now else 0))
    out.append(("keel_github_reachable", {}, float(status["github_state"]["state"] == words.OK)))
    for resource, remaining in sorted(svc.github.rate_limit.items()):
        out.append(("keel_github_rate_limit_remaining", {"resource": resource}, remaining))
    return out


# -- the table ----------------------------------------------------------------------------------


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def render(status: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    age = now - status.get("time", now)
    lines = [f"Runners of {status.get('github', '')} as of {_clock(status.get('time', now))}"
             + (f" ({format_duration(age)} ago)" if age >= 2 else "")]
    gh = status.get("github_state") or {}
    if gh.get("state") not in (None, words.OK):
        lines.append(f"  {gh['state']}: {gh.get('message') or ''}")
    elif status.get("blocked_until"):
        lines.append(f"  GitHub asked Keel to wait until {_clock(status['blocked_until'])}")
    lines += [f"  {notice}" for notice in status.get("notices") or []]
    lines += ["", "SCALE SET            STATE          DESIRED CURRENT  IDLE  BUSY   MAX WAITING"]
    for s in status.get("scale_sets", []):
        lines.append(f"{s['name']:<20} {s['state']:<14} {s['desired']:>7} {s['alive']:>7} {s['idle']:>5} "
                     f"{s['busy']:>5} {s['max']:>5} {s.get('waiting', 0):>7}")
        lines += [f"    {detail}" for detail in s["details"]]
    lines += ["", "PROVIDER             STATE          RUNNERS"]
    for p in status.get("providers", []):
        lines.append(f"{p['name']:<20} {p['state']:<14} {p['runners']:>7}"
                     + (f" of {p['max_runners']}" if p["max_runners"] is not None else ""))
        for h in p["held_by"]:
            lines.append(f"    held by {h['scale_set']} (priority {h['priority']}) until {_clock(h['until'])}")
        if p.get("last_refusal"):
            r = p["last_refusal"]
            lines.append(f"    last refused {r['scale_set']} at {_clock(r['at'])}: {r['message']}")
    queue = status.get("queue") or []
    if queue:
        lines += ["", "WAITING JOB    SCALE SET                AGE  REPOSITORY               WORKFLOW"]
        for j in queue[:QUEUE_RENDERED]:
            waited = max(0.0, now - j["since"]) if j.get("since") else j.get("age_s", 0)
            lines.append(f"{j['job_id']:<14} {j['scale_set']:<20} {format_duration(waited):>7}  "
                         f"{j['repo'] or '-':<24} {j['workflow'] or j['name'] or ''}")
        more = status.get("queued", len(queue)) - min(len(queue), QUEUE_RENDERED)
        if more > 0:
            lines.append(f"... and {more} more waiting")
    runners = status.get("runners", [])
    lines += ["", "RUNNER                         STATE      VMID  NODE        AGE  JOB" if runners
              else "No runners."]
    for r in runners:
        lines.append(f"{r['name']:<30} {r['state']:<9} {r['vmid'] or '-':>5}  {r['node'] or '-':<10} "
                     f"{format_duration(r['age_s']):>5}  {r['job'] or r['reason'] or ''}")
    jobs = [j for j in status.get("jobs", []) if j.get("runner_wait_s") is not None][:10]
    if jobs:
        lines += ["", "RECENT JOB     SCALE SET            STATE       WAITED  RUNNER"]
        for j in jobs:
            lines.append(f"{j['job_id']:<14} {j['scale_set']:<20} {j['state']:<10} "
                         f"{format_duration(j['runner_wait_s']):>7}  {j['runner'] or ''}")
    return "\n".join(lines) + "\n"
