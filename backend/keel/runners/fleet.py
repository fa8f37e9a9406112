"""One reconcile pass over every scale set: look, clean up, scale, step.

1. **Look**: each provider's nodes and VMs (one call each), GitHub's runner listing
   (on full passes, and every few seconds while runners are connecting or a verdict
   waits for it), and each scale set's statistics (full passes: the backstop for lost
   messages, with the REST API asked for jobs GitHub counts that Keel has not heard of).
2. **Adopt** VMs that carry this installation's tag, or a runner's name, that Keel does
   not know, from the ``keel-runner:`` line of their description.
3. **Check** each runner: a VM that ended is deleted (its job completed, or it is lost);
   one that never connected within ``start_timeout``, a busy one disconnected that long
   (stuck), one older than ``max_age``, one whose registration GitHub no longer has while
   its VM runs on (a ghost), one whose job is done but whose VM stays up, are removed.
   Registrations of runners Keel has no VM for are swept once offline for
   ``start_timeout`` (orphaned).
4. **Scale** (``scaling``): idle runners past demand go, then runners are created.
5. **Step** every runner being created or removed.

**Never on stale data.**  What GitHub says of a runner is read from a listing, and a
runner is judged by it (never connected, disconnected, stuck, a ghost) only with a
listing taken after the runner's time ran out, and only while GitHub can be heard: a
listing that failed, or a rate limit, keeps every runner as it is.  A VM that ended is
deleted at once (its room is free), but whether its job completed or it was lost is
decided by a listing taken after it ended, or by the job's own message
(``svc.verdicts``), however long GitHub takes to answer.

``due(svc, now)`` is when the next pass has something to do: a backoff or hold that ends,
a runner's next step or deadline, a listing to take; the service's loop sleeps until then.
"""

from __future__ import annotations

import logging

from keel.errors import KeelError
from keel.runners import lifecycle, scaling
from keel.runners.demand import epoch
from keel.runners.proxmox import ClusterView
from keel.runners.record import CREATING, REMOVING, TAG, Runner, read_description
from keel.runners.state import Fleet

log = logging.getLogger("keel.runners")

LISTING_EVERY_S = 5.0            # while runners are connecting (Rungar: 5 s, reused up to 15)
GHOST_GRACE_S = 60.0             # registration gone, VM still running: a ghost after this
DONE_GRACE_S = 60.0              # job done, VM should power off by itself within this
UNREACHABLE_S = 300.0            # a provider unreachable this long: its runners are written off
VERDICT_KEEP_S = 86400.0         # a verdict GitHub never allows is dropped after a day
DONE_LOOK_S = 0.25               # a runner done with its job: its VM is looked at this often till it is off
STALE_JOBS_PER_PASS = 10


def run_pass(svc: Fleet, full: bool) -> None:
    now = svc.last_pass_at = svc.clock()
    svc.placement.expire(now)
    svc.shared.reload()
    svc.ensure_github()
    views = _look(svc, now)
    if full or (_listing_wanted(svc) and now - svc.listing_at >= LISTING_EVERY_S):
        _list(svc, now)
    if full:
        _statistics(svc, now)
        scaling.confirm(svc, now)
    if full or not svc.adopted_once:
        adopt(svc, views)
    for runner in list(svc.runners.values()):
        if _acting(svc, runner.scale_set):
            _check(svc, runner, views, now)
    _judge(svc, now)
    if full:
        _sweep_orphans(svc, now)
        _stale_jobs(svc, now)
    _step(svc, views, removing=True)        # a runner that went stops counting before scaling
    scaling.scale(svc, views, now)
    _step(svc, views)                       # the rest, and those scaling just began to remove
    for name in svc.sets:
        svc.sets[name].last_reconcile = now if full else svc.sets[name].last_reconcile


def due(svc: Fleet, now: float) -> float:
    """The earliest time a pass has something to do (``now``: at once): of the times something
    falls due, the first after the last pass."""
    times = [svc.placement.next_change(svc.last_pass_at), svc.github.blocked_until]
    times += [state.retry_at for state in svc.sets.values() if state.session is None and state.retry_at]
    for state in svc.sets.values():
        if state.excess_since is not None:
            times.append(state.excess_since + scaling.SCALE_DOWN_AFTER_S)
    if _listing_wanted(svc):
        times.append(svc.listing_at + LISTING_EVERY_S)
    for runner in svc.runners.values():
        if runner.provider in svc.unreachable:
            continue                        # stepped when its provider answers (a full pass looks)
        ss = svc.settings.scale_set(runner.scale_set)
        timeout = ss.start_timeout_s if ss is not None else 0.0
        if runner.phase in CREATING or runner.phase in REMOVING or runner.reason:
            times.append(runner.next_at)
            if runner.phase in CREATING:
                times.append(runner.created_at + timeout)
            continue
        if runner.done:                     # its VM powers off soon: that is room to see at once
            times += [svc.last_pass_at + DONE_LOOK_S, (runner.done_at or now) + DONE_GRACE_S]
        elif runner.connected_at is None and runner.busy_since is None:
            times.append(runner.created_at + timeout)
        if runner.offline_since is not None:
            times.append(runner.offline_since + timeout)
        if runner.missing_since is not None:
            times.append(runner.missing_since + GHOST_GRACE_S)
        if ss is not None and ss.max_age_s is not None:
            times.append(runner.created_at + ss.max_age_s)
    # What fell due before the last pass was seen to by it: a deadline Keel may not act on yet
    # (GitHub silent, a listing to wait for) does not make every turn of the loop a pass.
    later = [t for t in times if t is not None and t > svc.last_pass_at]
    return max(now, min(later)) if later else float("inf")


def _listing_wanted(svc: Fleet) -> bool:
    """A listing would settle something: a runner connecting, one offline or missing, a verdict."""
    return bool(svc.verdicts) or any(
        (r.phase == "ready" and r.connected_at is None) or r.offline_since is not None
        or r.missing_since is not None for r in svc.runners.values())


def _step(svc: Fleet, views: dict[str, ClusterView], removing: bool | None = None) -> None:
    """Step the runners being removed (``removing``), or the others (not), or all (None)."""
    for runner in list(svc.runners.values()):
        going = runner.phase in REMOVING or runner.reason is not None
        if runner.name in svc.runners and _acting(svc, runner.scale_set) and removing in (None, going):
            view = views.get(runner.provider)
            vm = view.vms.get(runner.vmid) if view is not None and runner.vmid is not None else None
            lifecycle.step(svc, runner, vm, view is not None)


def step_only(svc: Fleet) -> None:
    """Step the runners being created or removed, and nothing else (while stopping)."""
    _step(svc, _look(svc, svc.clock()))


def _acting(svc: Fleet, scale_set: str) -> bool:
    """Keel acts for a scale set only while it holds its message session; the runners of a
    scale set that left the config are its own to remove."""
    state = svc.sets.get(scale_set)
    if state is None:
        return svc.settings.scale_set(scale_set) is None
    return state.session is not None


# -- 1. look -------------------------------------------------------------------------------------


def _look(svc: Fleet, now: float) -> dict[str, ClusterView]:
    views: dict[str, ClusterView] = {}
    for name, provider in svc.providers.items():
        try:
            views[name] = provider.view()
            svc.unreachable.pop(name, None)
        except KeelError as err:
            first = svc.unreachable.setdefault(name, now)
            log.warning("provider %s unreachable (%.0f s): %s", name, now - first, err)
    return views


def _list(svc: Fleet, now: float) -> None:
    known = svc.github_quiet(now)
    try:
        listing = svc.github.list_runners()
    except KeelError as err:                # warned once an outage: the status shows it meanwhile
        (log.info if known else log.warning)("cannot list GitHub's runners: %s", err)
        return
    svc.listing = {r["name"]: r for r in listing if svc.name_pattern.match(str(r.get("name", "")))}
    svc.listing_at = now


def _statistics(svc: Fleet, now: float) -> None:
    for state in svc.sets.values():
        if state.session is None or state.scale_set_id is None:
            continue
        try:
            data = svc.github.get_scale_set(state.scale_set_id)
        except KeelError as err:
            state.error = str(err)
            continue
        state.set_statistics(data.get("statistics"), now)


# -- 2. adopt ------------------------------------------------------------------------------------


def adopt(svc: Fleet, views: dict[str, ClusterView]) -> None:
    """VMs of this installation Keel does not know, found by tag or by a runner's name."""
    known = {(r.provider, r.vmid) for r in svc.runners.values()}
    mine = f"{TAG}-{svc.installation}"
    for provider_name, view in views.items():
        provider = svc.providers[provider_name]
        for vm in view.vms.values():
            if (provider_name, vm.vmid) in known or vm.template:
                continue
            if mine not in vm.tags and not svc.name_pattern.match(vm.name):
                continue
            if svc.scale_set_of(vm.name) and not _acting(svc, svc.scale_set_of(vm.name) or ""):
                continue                     # another Keel holds its scale set's session
            try:
                data = read_description(provider.config(vm.node, vm.vmid).get("description"))
            except KeelError as err:
                log.warning("cannot read VM %s to adopt it: %s", vm.vmid, err)
                continue
            if not data or data.get("installation") != svc.installation or \
                    not _acting(svc, str(data.get("scale_set"))):
                continue
            runner = Runner(str(data.get("name") or vm.name), str(data["scale_set"]), provider_name,
                            node=vm.node, vmid=vm.vmid, runner_id=data.get("runner_id"),
                            memory_bytes=vm.maxmem, revision=str(data.get("revision", "")),
                            phase="clone" if vm.lock == "clone" else "ready",
                            created_at=float(data.get("created_at") or svc.clock()),
                            registered_at=float(data.get("created_at") or 0), adopted=True, cloned=True)
            if runner.name in svc.runners:
                continue
            if runner.phase == "ready":
                runner.ready_at = runner.created_at
            svc.runners[runner.name] = runner
            svc.save(runner)
            svc.event("adopted", runner, f"VM {vm.vmid} on {vm.node}")
    svc.adopted_once = True


# -- 3. check ------------------------------------------------------------------------------------


def _check(svc: Fleet, runner: Runner, views: dict[str, ClusterView], now: float) -> None:
    if runner.provider not in svc.providers:     # its provider left the config: out of reach
        runner.reason = runner.reason or "unreachable"
        lifecycle._gone(svc, runner)
        return
    view = views.get(runner.provider)
    if view is None:
        since = svc.unreachable.get(runner.provider, now)
        if now - since >= UNREACHABLE_S and runner.reason is None:
            runner.reason = "unreachable"
            lifecycle._gone(svc, runner)
        return
    if runner.reason is not None:
        return
    ss = svc.settings.scale_set(runner.scale_set)
    if ss is None:
        lifecycle.remove(svc, runner, "requested")
        return
    vm = view.vms.get(runner.vmid) if runner.vmid is not None else None
    if runner.phase in CREATING:
        if runner.cloned and vm is None and runner.phase not in ("new", "clone"):
            lifecycle.remove(svc, runner, "ended")
        elif now - runner.created_at > ss.start_timeout_s:
            lifecycle.remove(svc, runner, "never_connected")
        return
    _registration(svc, runner, now)
    quiet = svc.github_quiet(now)
    seen = svc.listing_at                   # what GitHub says of it was taken then
    if vm is None or vm.status != "running":
        runner.ended_at = runner.ended_at or now
        svc.room_freed(runner.provider)
        if runner.done or runner.missing_since is not None:
            lifecycle.remove(svc, runner, "job_completed")
        elif seen >= runner.ended_at and not quiet:
            lifecycle.remove(svc, runner, "ended")
        else:                               # deleted now; why it ended is asked of GitHub later
            lifecycle.remove(svc, runner, "ended", verdict_pending=True)
    elif runner.done:
        if now - (runner.done_at or now) > DONE_GRACE_S:
            lifecycle.remove(svc, runner, "job_completed", forced=True)
    elif ss.max_age_s is not None and now - runner.created_at > ss.max_age_s:
        lifecycle.remove(svc, runner, "expired", forced=True)
    elif quiet:
        return                              # GitHub cannot be heard: its silence says nothing
    elif runner.missing_since is not None and seen - runner.missing_since > GHOST_GRACE_S:
        lifecycle.remove(svc, runner, "unregistered", forced=True)
    elif runner.connected_at is None and runner.busy_since is None and \
            seen - runner.created_at > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "never_connected")
    elif runner.busy_since is not None and runner.offline_since is not None and \
            seen - runner.offline_since > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "stuck", forced=True)
    elif runner.busy_since is None and runner.offline_since is not None and \
            seen - runner.offline_since > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "disconnected")


def _judge(svc: Fleet, now: float) -> None:
    """Runners whose VM ended while GitHub was silent: their job's end, or a listing taken
    after they ended, says whether they completed it or were lost."""
    if not svc.verdicts:
        return
    quiet = svc.github_quiet(now)
    completed = {j.runner for s in svc.sets.values() for j in s.jobs.values()
                 if j.state == "completed" and j.runner}
    for name, (runner, ended_at) in list(svc.verdicts.items()):
        if name in completed:
            runner.reason = "job_completed"
        elif not quiet and svc.listing_at >= ended_at:
            runner.reason = "ended" if name in svc.listing else "job_completed"
        elif now - ended_at > VERDICT_KEEP_S:
            del svc.verdicts[name]
            continue
        else:
            continue
        runner.verdict_pending = False
        del svc.verdicts[name]
        lifecycle.count(svc, runner)


def _registration(svc: Fleet, runner: Runner, now: float) -> None:
    """What GitHub's listing says of the runner, if the listing is newer than its registration."""
    if svc.listing_at <= (runner.registered_at or 0.0):
        return
    reg = svc.listing.get(runner.name)
    if reg is None:
        runner.missing_since = runner.missing_since or svc.listing_at
        return
    runner.missing_since = None
    if runner.runner_id is None and reg.get("id") is not None:      # adopted without it
        runner.runner_id = int(reg["id"])
    if reg.get("status") == "online":
        runner.connected_at = runner.connected_at or svc.listing_at
        runner.offline_since = None
    elif runner.connected_at is not None or runner.busy_since is not None:
        runner.offline_since = runner.offline_since or svc.listing_at
    if reg.get("busy") and runner.busy_since is None:
        runner.busy_since = svc.listing_at


def _sweep_orphans(svc: Fleet, now: float) -> None:
    """Registrations of ours with no runner behind them, offline long enough: removed."""
    if svc.github_quiet(now):
        return
    acting = {name for name in svc.sets if _acting(svc, name)}
    for name, reg in list(svc.listing.items()):
        if name in svc.runners:
            continue
        scale_set = svc.scale_set_of(name)
        if scale_set not in acting or reg.get("status") == "online" or reg.get("busy"):
            continue
        ss = svc.settings.scale_set(scale_set)
        first = svc.orphans.get(name, (reg["id"], now))[1]
        svc.orphans.setdefault(name, (reg["id"], first))
        if ss is not None and now - first < ss.start_timeout_s and name not in svc.gone_vms:
            continue
        try:
            svc.github.delete_runner(int(reg["id"]))
        except KeelError as err:
            log.info("orphaned registration %s not removed yet: %s", name, err)
            continue
        svc.orphans.pop(name, None)
        svc.listing.pop(name, None)
        svc.meters.inc("keel_runners_removed_total", {"scale_set": scale_set or "", "provider": "",
                                                       "reason": "orphaned"})
        svc.store.event(now, "removed", scale_set or "", "", name, "orphaned")
    for name in list(svc.orphans):
        if name not in svc.listing and name not in svc.runners:
            svc.orphans.pop(name, None)


def _stale_jobs(svc: Fleet, now: float) -> None:
    """Jobs still open here long after their runner went (a lost JobCompleted): asked of GitHub's
    REST API, a few per pass, so the jobs shown and counted end too."""
    asked = 0
    window = 2 * svc.settings.reconcile_interval_s
    for state in svc.sets.values():
        # A job not started yet is asked about only if Keel tracks more than GitHub counts.
        excess = state.stats_at is not None and state.known() > state.counted()
        for job in list(state.open_jobs()):
            if asked >= STALE_JOBS_PER_PASS:
                return
            runner = svc.runners.get(job.runner or "")
            if now - job.seen_at < window or (runner is not None and not runner.done) or "/" not in job.repo \
                    or (job.runner is None and not excess):
                continue
            asked += 1
            try:
                data = svc.github.get_job(job.repo, job.job_id)
            except KeelError as err:
                log.info("cannot ask GitHub about job %s: %s", job.job_id, err)
                return
            if data is None:
                state.jobs.pop(job.job_id, None)
            elif data.get("status") == "completed":
                job.state, job.completed_at = "completed", epoch(data.get("completed_at")) or now
                job.result = {"success": "succeeded", "failure": "failed", "cancelled": "canceled"}.get(
                    str(data.get("conclusion")), data.get("conclusion"))
                svc.store.put_job(job.row())
            else:
                job.seen_at = now                       # still going: ask again later


