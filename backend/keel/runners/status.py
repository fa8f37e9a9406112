"""What ``keel runners status`` shows, and the gauges of the metrics: from the service's state.

``snapshot(svc)`` is JSON-able (``keel runners status --json``, the engine's
``/api/runners``); ``render(status)`` is the table.  A scale set's state, in plain words:

| state | means |
|---|---|
| ``LISTENING`` | it holds its message session; runners come as jobs do |
| ``HOLDING BACK`` | a scale set of higher priority found a provider full and keeps this one off it |
| ``BACKING OFF`` | a provider refused its runner; it skips that provider until the time shown |
| ``PAUSED`` | ``paused: true``: no runner is created, GitHub is told it has no room |
| ``OFF SCHEDULE`` | a schedule window with ``max_runners: 0`` is in force |
| ``STANDBY`` | another listener holds its session (another Keel); it touches nothing |
| ``STARTING`` / ``UNREACHABLE`` | no session yet / GitHub cannot be reached or asked Keel to wait |
| ``MISCONFIGURED`` | GitHub answers but has no runner group of the name the config gives |

A provider is ``OK``, ``HELD`` (a hold keeps lower priorities off it), ``UNREACHABLE`` or
``DISABLED``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from keel import words
from keel.runners.scaler import want
from keel.units import format_duration

if TYPE_CHECKING:
    from keel.runners.service import RunnerService

RECENT_JOBS = 50


def snapshot(svc: "RunnerService") -> dict[str, Any]:
    now = svc.clock()
    sets = [_scale_set(svc, ss, now) for ss in svc.settings.scale_sets]
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
        "scale_sets": sets, "providers": providers, "runners": runners,
        "jobs": [{**j.row(), "runner_wait_s": _wait(j.started_at, j.assigned_at),
                  "wait_s": _wait(j.started_at, j.queued_at)} for j in jobs],
    }


def _job_link(svc: "RunnerService", runner: Any) -> dict[str, Any]:
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


def _scale_set(svc: "RunnerService", ss: Any, now: float) -> dict[str, Any]:
    state = svc.sets[ss.name]
    w = svc.wants.get(ss.name) or want(ss, now, state.assigned(now))
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
    if state.session is None:
        word = (words.STANDBY if state.standby else words.MISCONFIGURED if state.error and state.misconfigured
                else words.UNREACHABLE if state.error else words.STARTING)
        if state.standby:
            details.insert(0, "another listener holds its session")
        elif state.error:
            details.insert(0, state.error)
    elif w.paused:
        word = words.PAUSED
    elif w.off_schedule:
        word = words.OFF_SCHEDULE
        details.insert(0, "a schedule window with max_runners 0 is in force")
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
            "held_back_from": held, "backing_off": backing, "paused": w.paused,
            "off_schedule": w.off_schedule, "last_poll": state.last_poll,
            "statistics": dict(state.statistics)}


def _provider(svc: "RunnerService", settings: Any, now: float) -> dict[str, Any]:
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


def gauges(svc: "RunnerService") -> list[tuple[str, dict[str, str], float]]:
    now = svc.clock()
    out: list[tuple[str, dict[str, str], float]] = []
    for entry in snapshot(svc)["scale_sets"]:
        name = {"scale_set": entry["name"]}
        out += [("keel_runners_min", name, entry["min"]), ("keel_runners_desired", name, entry["desired"]),
                ("keel_runners_max", name, entry["max"]), ("keel_jobs_assigned", name, entry["assigned"]),
                ("keel_scale_set_paused", name, float(entry["paused"] or entry["off_schedule"])),
                ("keel_scale_set_listening", name, float(svc.sets[entry["name"]].session is not None))]
        out += [("keel_runners_current", {**name, "state": s}, n) for s, n in entry["current"].items()]
        if entry["last_poll"] is not None:
            out.append(("keel_scale_set_last_poll_timestamp_seconds", name, entry["last_poll"]))
        last = svc.sets[entry["name"]].last_reconcile
        if last is not None:
            out.append(("keel_scale_set_last_reconcile_timestamp_seconds", name, last))
        for h in entry["held_back_from"]:
            out.append(("keel_scale_set_holding_back", {**name, "provider": h["provider"]}, 1))
        for b in entry["backing_off"]:
            out.append(("keel_provider_backoff_seconds", {**name, "provider": b["provider"]}, b["until"] - now))
    for provider in svc.settings.providers:
        label = {"provider": provider.name}
        out.append(("keel_provider_reachable", label, float(provider.name not in svc.unreachable)))
        out.append(("keel_provider_held", label, float(bool(svc.placement.holds_on(provider.name, now)))))
        per_set: dict[str, int] = {}
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
    out.append(("keel_github_blocked_until_seconds", {}, blocked if blocked > now else 0))
    return out


# -- the table ----------------------------------------------------------------------------------


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def render(status: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    age = now - status.get("time", now)
    lines = [f"Runners of {status.get('github', '')} as of {_clock(status.get('time', now))}"
             + (f" ({format_duration(age)} ago)" if age >= 2 else "")]
    if status.get("blocked_until"):
        lines.append(f"  GitHub asked Keel to wait until {_clock(status['blocked_until'])}")
    lines += ["", "SCALE SET            STATE          DESIRED CURRENT  IDLE  BUSY   MAX"]
    for s in status.get("scale_sets", []):
        lines.append(f"{s['name']:<20} {s['state']:<14} {s['desired']:>7} {s['alive']:>7} {s['idle']:>5} "
                     f"{s['busy']:>5} {s['max']:>5}")
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

