"""Scaling, the fourth step of a pass: how many runners each scale set should have, and
making or removing them.

* **Demand** is the jobs GitHub counts and Keel knows (``demand.SetState.demand``): a job
  counted by GitHub that Keel has not heard of gets no runner until GitHub's REST API
  confirms it (``confirm``, on full passes), so an inflated count gets no VMs.
* **Down**: idle runners beyond demand go once the excess has lasted ``SCALE_DOWN_AFTER_S``
  (not while GitHub cannot be heard: its count may be stale); at most one idle runner per
  scale set and pass is replaced for being outdated or past ``max_idle_age``.
* **Up**: highest priority first, scale sets of equal priority taking turns, each runner
  tried on the scale set's providers in placement order, skipping those it is held back
  from or backing off.  A "full" backoff ends early when Keel has freed room there since
  and the runner fits now; the pass goes in priority order, so the room goes to the
  highest priority that fits.
"""

from __future__ import annotations

import logging

from keel.errors import KeelError
from keel.runners import lifecycle
from keel.runners.demand import JobSeen, epoch, matches
from keel.runners.github import RateLimited
from keel.runners.proxmox import ClusterView, Refused
from keel.runners.record import Runner
from keel.runners.scaler import want
from keel.runners.spec import ScaleSetSettings
from keel.runners.state import Fleet

log = logging.getLogger("keel.runners")

# Statistics and messages arrive apart: a job's end can show in the statistics a moment before
# its JobCompleted message frees its runner.  An excess must last this long before an idle
# runner goes, so that no runner is removed just before its job reaches it (ARC #4000).
SCALE_DOWN_AFTER_S = 10.0
CONFIRM_AFTER_S = 5.0           # GitHub counts jobs Keel does not know this long: ask its REST API
CONFIRM_REPOS = 10              # repositories asked per scale set and pass, at most


def busy_untracked(svc: Fleet, name: str) -> int:
    """Busy runners of the scale set whose job Keel does not track (adopted ones)."""
    state = svc.sets[name]
    tracked = {job_id for job_id, job in state.jobs.items() if job.state in ("assigned", "started")}
    return sum(1 for r in svc.runners.values() if r.scale_set == name and r.alive
               and r.busy_since is not None and (r.job_id is None or r.job_id not in tracked))


def wants(svc: Fleet, now: float) -> None:
    """What each scale set wants now (``svc.wants``), from demand, schedule and controls."""
    for ss in svc.settings.scale_sets:
        state = svc.sets[ss.name]
        control = svc.shared.control(ss.name)
        svc.wants[ss.name] = want(ss, now, state.demand(now, busy_untracked(svc, ss.name)),
                                  control["mode"] if control else None)


def scale(svc: Fleet, views: dict[str, ClusterView], now: float) -> None:
    wants(svc, now)
    needs: dict[str, int] = {}
    quiet = svc.github_quiet(now)
    for ss in svc.settings.scale_sets:
        state = svc.sets[ss.name]
        if state.session is None:
            continue
        w = svc.wants[ss.name]
        if state.min_runners is not None and state.min_runners != w.min_runners:
            svc.store.event(now, "min_runners_changed", ss.name, "", "",
                            f"{state.min_runners} -> {w.min_runners}")
        state.min_runners = w.min_runners
        mine = [r for r in svc.runners.values() if r.scale_set == ss.name]
        alive = [r for r in mine if r.alive]
        excess = len(alive) - w.desired
        if excess <= 0 or quiet:
            state.excess_since = None if excess <= 0 else state.excess_since
        elif state.excess_since is None:
            state.excess_since = now
        elif now - state.excess_since >= SCALE_DOWN_AFTER_S or w.max_runners == 0:
            _scale_down(svc, ss, alive, excess)
        _replace_one(svc, ss, alive, now)
        alive = [r for r in mine if r.alive]
        counted = sum(1 for r in mine if r.counted)
        need = min(w.desired - len(alive), w.max_runners - counted)
        if need > 0:
            needs[ss.name] = need
    pending = _pending(svc, views)
    order = sorted((s for s in svc.settings.scale_sets if s.name in needs),
                   key=lambda s: (-s.priority, svc.settings.scale_sets.index(s)))
    for priority in sorted({s.priority for s in order}, reverse=True):
        turn = [s for s in order if s.priority == priority]
        while turn:
            for ss in list(turn):
                if needs[ss.name] <= 0 or not _create_one(svc, ss, views, pending, now):
                    turn.remove(ss)
                    continue
                needs[ss.name] -= 1
    for ss in svc.settings.scale_sets:
        state = svc.sets[ss.name]
        unmet = needs.get(ss.name, 0)
        if unmet > state.unmet:              # each runner wanted and not made is counted once
            svc.meters.inc("keel_scale_up_failures_total",
                           {"scale_set": ss.name, "reason": svc.last_failure.get(ss.name, "no_capacity")},
                           unmet - state.unmet)
        state.unmet = unmet
        if unmet > 0:                        # a holder that still wants room renews its holds
            for entry in ss.providers:
                if svc.placement.backoff_until(ss.name, entry.name, now):
                    svc.placement.renew(ss.name, entry.name, now)


def _scale_down(svc: Fleet, ss: ScaleSetSettings, alive: list[Runner], excess: int) -> None:
    if excess <= 0:
        return
    current = {e.name: e.runner.revision for e in ss.providers}
    spare = [r for r in alive if r.state == "idle"] + [r for r in alive if r.state == "starting"]
    spare.sort(key=lambda r: (r.state != "idle", current.get(r.provider) == r.revision, r.created_at))
    for runner in spare[:excess]:
        lifecycle.remove(svc, runner, "scaled_down")


def _replace_one(svc: Fleet, ss: ScaleSetSettings, alive: list[Runner], now: float) -> None:
    """One idle runner per pass: made from an older runner block, or past max_idle_age."""
    current = {e.name: e.runner.revision for e in ss.providers}
    for runner in sorted(alive, key=lambda r: r.created_at):
        if runner.state != "idle" or runner.reason is not None:
            continue
        if runner.revision and current.get(runner.provider, runner.revision) != runner.revision:
            lifecycle.remove(svc, runner, "outdated")
            return
        if ss.max_idle_age_s is not None and now - runner.created_at > ss.max_idle_age_s:
            lifecycle.remove(svc, runner, "expired")
            return


def _pending(svc: Fleet, views: dict[str, ClusterView]) -> dict[str, dict[str, int]]:
    """Per provider and node: memory Keel's runners there will still take (full size until used),
    counted until their VM has stopped: a runner done with its job still holds its room until its
    VM is off, however little of it PVE shows in use."""
    pending: dict[str, dict[str, int]] = {name: {} for name in svc.providers}
    for runner in svc.runners.values():
        if runner.node is None:
            continue
        view = views.get(runner.provider)
        vm = view.vms.get(runner.vmid) if view is not None and runner.vmid is not None else None
        running = vm is not None and vm.status == "running" and vm.node == runner.node
        if not runner.alive and not running:
            continue
        used = vm.mem if running and vm is not None else 0
        nodes = pending[runner.provider]
        nodes[runner.node] = nodes.get(runner.node, 0) + max(0, runner.memory_bytes - used)
    return pending


def _create_one(svc: Fleet, ss: ScaleSetSettings, views: dict[str, ClusterView],
                pending: dict[str, dict[str, int]], now: float) -> bool:
    counts: dict[str, int] = {}
    for runner in svc.runners.values():
        if runner.scale_set == ss.name and runner.alive:
            counts[runner.provider] = counts.get(runner.provider, 0) + 1
    weights = {p.name: p.weight for p in svc.settings.providers}
    order = svc.placement.order(ss.placement, [e.name for e in ss.providers], weights, counts)
    svc.last_failure[ss.name] = "no_capacity"
    for name in order:
        settings = svc.settings.provider(name)
        entry = ss.provider(name)
        if settings is None or entry is None or settings.disabled or name not in views:
            continue
        if settings.max_runners is not None and sum(
                1 for r in svc.runners.values() if r.provider == name and r.counted) >= settings.max_runners:
            continue
        if svc.placement.held_back(ss.name, ss.priority, name, now) is not None:
            continue
        provider = svc.providers[name]
        if svc.placement.backoff_until(ss.name, name, now) is not None:
            if not _room_ends_wait(svc, ss, name, views[name], pending[name], now):
                svc.placement.renew(ss.name, name, now)
                continue
        try:
            spot = provider.choose(views[name], entry.runner, pending[name])
            lifecycle.begin(svc, ss, provider, entry.runner, spot)
        except Refused as refusal:
            svc.refused(ss, name, refusal)
            continue
        except lifecycle.GitHubRefused as err:
            svc.last_failure[ss.name] = "error"
            log.warning("GitHub would not register a runner for %s: %s", ss.name, err)
            return False
        except RateLimited:
            svc.last_failure[ss.name] = "error"
            return False
        svc.placement.succeeded(ss.name, name)
        pending[name][spot.node] = pending[name].get(spot.node, 0) + entry.runner.memory_bytes
        return True
    return False


def _room_ends_wait(svc: Fleet, ss: ScaleSetSettings, name: str, view: ClusterView,
                    pending: dict[str, int], now: float) -> bool:
    """Keel freed room on ``name`` since it refused the scale set as full, and the runner fits
    now: its wait ends (``Placement.forgive``)."""
    entry = ss.provider(name)
    if entry is None or not svc.placement.ends_on_room(ss.name, name, svc.freed.get(name), now):
        return False
    try:
        svc.providers[name].choose(view, entry.runner, pending)
    except Refused:
        return False
    svc.placement.forgive(ss.name, name, now)
    log.info("%s: room freed on %s fits a runner now; its backoff ends", ss.name, name)
    return True


# -- confirming what GitHub counts ------------------------------------------------------------


def confirm(svc: Fleet, now: float) -> None:
    """On a full pass: jobs GitHub has counted for a while that Keel knows nothing of (a lost
    message, or phantoms) are looked for in GitHub's REST API: each queued job found there,
    asking for the scale set, is tracked (and so gets a runner); phantoms are not found."""
    repos_seen = {j.repo for s in svc.sets.values() for j in s.jobs.values() if "/" in j.repo}
    for ss in svc.settings.scale_sets:
        state = svc.sets[ss.name]
        missing = state.unconfirmed(busy_untracked(svc, ss.name)) if state.session is not None else 0
        if missing <= 0:
            state.unconfirmed_since = None
            continue
        if state.unconfirmed_since is None:
            state.unconfirmed_since = now
        if now - state.unconfirmed_since < CONFIRM_AFTER_S:
            continue
        try:
            repos = sorted(repos_seen) or svc.github.repositories()[:CONFIRM_REPOS]
            found = 0
            for repo in repos[:CONFIRM_REPOS]:
                for data in svc.github.queued_jobs(repo):
                    job_id = str(data.get("id", ""))
                    if found >= missing or not job_id or job_id in state.jobs or \
                            not matches(list(data.get("labels") or []), ss.all_labels):
                        continue
                    job = state.job(job_id, now)
                    job.repo, job.state = repo, "assigned"
                    job.queued_at = epoch(data.get("created_at"))
                    job.workflow, job.name = str(data.get("workflow_name") or ""), str(data.get("name") or "")
                    svc.store.put_job(job.row())
                    found += 1
        except KeelError as err:
            log.info("scale set %s: cannot look for the %d job(s) GitHub counts: %s", ss.name, missing, err)
            continue
        if found < missing:
            log.info("scale set %s: GitHub counts %d job(s) more than it has queued: no runners for them",
                     ss.name, missing - found)
        state.unconfirmed_since = now          # asked: again after another while, if still so


__all__ = ["JobSeen", "confirm", "scale", "wants"]
