"""One reconcile pass over every scale set: look, clean up, scale, step.

1. **Look**: each provider's nodes and VMs (one call each), GitHub's runner listing
   (on full passes, and every few seconds while runners are connecting), and each scale
   set's statistics (full passes: the backstop for lost messages).
2. **Adopt** VMs that carry this installation's tag, or a runner's name, that Keel does
   not know, from the ``keel-runner:`` line of their description.
3. **Check** each runner: a VM that ended is deleted (its job completed, or it is lost);
   one that never connected within ``start_timeout``, a busy one disconnected that long
   (stuck), one older than ``max_age``, one whose registration GitHub no longer has while
   its VM runs on (a ghost), one whose job is done but whose VM stays up, are removed.
   Registrations of runners Keel has no VM for are swept once offline for
   ``start_timeout`` (orphaned).
4. **Scale**: idle runners past desired go (scaled down); at most one idle runner per
   scale set and pass is replaced for being outdated or past ``max_idle_age``; then
   runners are created, highest priority first, scale sets of equal priority taking
   turns, each tried on its providers in placement order.
5. **Step** every runner being created or removed.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from keel.errors import KeelError
from keel.runners import lifecycle
from keel.runners.demand import epoch
from keel.runners.github import RateLimited
from keel.runners.proxmox import ClusterView, Refused
from keel.runners.record import CREATING, TAG, Runner, read_description
from keel.runners.scaler import want
from keel.runners.spec import ScaleSetSettings

if TYPE_CHECKING:
    from keel.runners.service import RunnerService

log = logging.getLogger("keel.runners")

LISTING_EVERY_S = 5.0            # while runners are connecting (Rungar: 5 s, reused up to 15)
GHOST_GRACE_S = 60.0             # registration gone, VM still running: a ghost after this
DONE_GRACE_S = 60.0              # job done, VM should power off by itself within this
UNREACHABLE_S = 300.0            # a provider unreachable this long: its runners are written off
# Statistics and messages arrive apart: a job's end can show in the statistics a moment before
# its JobCompleted message frees its runner.  An excess must last this long before an idle
# runner goes, so that no runner is removed just before its job reaches it (ARC #4000).
SCALE_DOWN_AFTER_S = 10.0
STALE_JOBS_PER_PASS = 10


def run_pass(svc: "RunnerService", full: bool) -> None:
    now = svc.clock()
    svc.placement.expire(now)
    svc.ensure_github()
    views = _look(svc, now)
    connecting = any(r.phase == "ready" and r.connected_at is None for r in svc.runners.values())
    if full or (connecting and now - svc.listing_at >= LISTING_EVERY_S):
        _list(svc, now)
    if full:
        _statistics(svc, now)
    if full or not svc.adopted_once:
        adopt(svc, views)
    for runner in list(svc.runners.values()):
        if _acting(svc, runner.scale_set):
            _check(svc, runner, views, now)
    if full:
        _sweep_orphans(svc, now)
        _stale_jobs(svc, now)
    _scale(svc, views, now)
    for runner in list(svc.runners.values()):
        if runner.name in svc.runners and _acting(svc, runner.scale_set):
            view = views.get(runner.provider)
            vm = view.vms.get(runner.vmid) if view is not None and runner.vmid is not None else None
            lifecycle.step(svc, runner, vm, view is not None)
    for name in svc.sets:
        svc.sets[name].last_reconcile = now if full else svc.sets[name].last_reconcile


def step_only(svc: "RunnerService") -> None:
    """Step the runners being created or removed, and nothing else (while stopping)."""
    now = svc.clock()
    views = _look(svc, now)
    for runner in list(svc.runners.values()):
        if runner.name in svc.runners and _acting(svc, runner.scale_set):
            view = views.get(runner.provider)
            vm = view.vms.get(runner.vmid) if view is not None and runner.vmid is not None else None
            lifecycle.step(svc, runner, vm, view is not None)


def _acting(svc: "RunnerService", scale_set: str) -> bool:
    """Keel acts for a scale set only while it holds its message session; the runners of a
    scale set that left the config are its own to remove."""
    state = svc.sets.get(scale_set)
    if state is None:
        return svc.settings.scale_set(scale_set) is None
    return state.session is not None


# -- 1. look -------------------------------------------------------------------------------------


def _look(svc: "RunnerService", now: float) -> dict[str, ClusterView]:
    views: dict[str, ClusterView] = {}
    for name, provider in svc.providers.items():
        try:
            views[name] = provider.view()
            svc.unreachable.pop(name, None)
        except KeelError as err:
            first = svc.unreachable.setdefault(name, now)
            log.warning("provider %s unreachable (%.0f s): %s", name, now - first, err)
    return views


def _list(svc: "RunnerService", now: float) -> None:
    try:
        listing = svc.github.list_runners()
    except KeelError as err:
        log.warning("cannot list GitHub's runners: %s", err)
        return
    svc.listing = {r["name"]: r for r in listing if svc.name_pattern.match(str(r.get("name", "")))}
    svc.listing_at = now


def _statistics(svc: "RunnerService", now: float) -> None:
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


def adopt(svc: "RunnerService", views: dict[str, ClusterView]) -> None:
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


def _check(svc: "RunnerService", runner: Runner, views: dict[str, ClusterView], now: float) -> None:
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
    if vm is None or vm.status != "running":
        gone = runner.done or (runner.missing_since is not None)
        lifecycle.remove(svc, runner, "job_completed" if gone else "ended")
    elif runner.done:
        if now - (runner.done_at or now) > DONE_GRACE_S:
            lifecycle.remove(svc, runner, "job_completed", forced=True)
    elif runner.missing_since is not None and now - runner.missing_since > GHOST_GRACE_S:
        lifecycle.remove(svc, runner, "unregistered", forced=True)
    elif runner.connected_at is None and runner.busy_since is None and \
            now - runner.created_at > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "never_connected")
    elif runner.busy_since is not None and runner.offline_since is not None and \
            now - runner.offline_since > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "stuck", forced=True)
    elif runner.busy_since is None and runner.offline_since is not None and \
            now - runner.offline_since > ss.start_timeout_s:
        lifecycle.remove(svc, runner, "disconnected")
    elif ss.max_age_s is not None and now - runner.created_at > ss.max_age_s:
        lifecycle.remove(svc, runner, "expired", forced=True)


def _registration(svc: "RunnerService", runner: Runner, now: float) -> None:
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
        runner.connected_at = runner.connected_at or now
        runner.offline_since = None
    elif runner.connected_at is not None or runner.busy_since is not None:
        runner.offline_since = runner.offline_since or now
    if reg.get("busy") and runner.busy_since is None:
        runner.busy_since = now


def _sweep_orphans(svc: "RunnerService", now: float) -> None:
    """Registrations of ours with no runner behind them, offline long enough: removed."""
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


def _stale_jobs(svc: "RunnerService", now: float) -> None:
    """Jobs still open here long after their runner went (a lost JobCompleted): asked of GitHub's
    REST API, a few per pass, so the jobs shown and counted end too."""
    asked = 0
    window = 2 * svc.settings.reconcile_interval_s
    for state in svc.sets.values():
        for job in list(state.open_jobs()):
            if asked >= STALE_JOBS_PER_PASS:
                return
            runner = svc.runners.get(job.runner or "")
            if now - job.seen_at < window or (runner is not None and not runner.done) or "/" not in job.repo:
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


# -- 4. scale ------------------------------------------------------------------------------------


def _scale(svc: "RunnerService", views: dict[str, ClusterView], now: float) -> None:
    needs: dict[str, int] = {}
    for ss in svc.settings.scale_sets:
        state = svc.sets[ss.name]
        if state.session is None:
            continue
        w = want(ss, now, state.assigned(now))
        svc.wants[ss.name] = w
        if state.min_runners is not None and state.min_runners != w.min_runners:
            svc.store.event(now, "min_runners_changed", ss.name, "", "",
                            f"{state.min_runners} -> {w.min_runners}")
        state.min_runners = w.min_runners
        mine = [r for r in svc.runners.values() if r.scale_set == ss.name]
        alive = [r for r in mine if r.alive]
        excess = len(alive) - w.desired
        if excess <= 0:
            state.excess_since = None
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
                    if needs[ss.name] > 0:
                        svc.meters.inc("keel_scale_up_failures_total",
                                        {"scale_set": ss.name, "reason": svc.last_failure.get(ss.name,
                                                                                            "no_capacity")})
                    continue
                needs[ss.name] -= 1
    for ss in svc.settings.scale_sets:           # a holder that still wants room renews its holds
        if needs.get(ss.name, 0) > 0:
            for entry in ss.providers:
                if svc.placement.backoff_until(ss.name, entry.name, now):
                    svc.placement.renew(ss.name, entry.name, now)


def _scale_down(svc: "RunnerService", ss: ScaleSetSettings, alive: list[Runner], excess: int) -> None:
    if excess <= 0:
        return
    current = {e.name: e.runner.revision for e in ss.providers}
    spare = [r for r in alive if r.state == "idle"] + [r for r in alive if r.state == "starting"]
    spare.sort(key=lambda r: (r.state != "idle", current.get(r.provider) == r.revision, r.created_at))
    for runner in spare[:excess]:
        lifecycle.remove(svc, runner, "scaled_down")


def _replace_one(svc: "RunnerService", ss: ScaleSetSettings, alive: list[Runner], now: float) -> None:
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


def _pending(svc: "RunnerService", views: dict[str, ClusterView]) -> dict[str, dict[str, int]]:
    """Per provider and node: memory Keel's runners there will still take (full size until used)."""
    pending: dict[str, dict[str, int]] = {name: {} for name in svc.providers}
    for runner in svc.runners.values():
        if not runner.alive or runner.node is None:
            continue
        view = views.get(runner.provider)
        vm = view.vms.get(runner.vmid) if view is not None and runner.vmid is not None else None
        used = vm.mem if vm is not None and vm.status == "running" and vm.node == runner.node else 0
        nodes = pending[runner.provider]
        nodes[runner.node] = nodes.get(runner.node, 0) + max(0, runner.memory_bytes - used)
    return pending


def _create_one(svc: "RunnerService", ss: ScaleSetSettings, views: dict[str, ClusterView],
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
        if svc.placement.backoff_until(ss.name, name, now) is not None:
            svc.placement.renew(ss.name, name, now)
            continue
        provider = svc.providers[name]
        try:
            node = provider.choose(views[name], entry.runner, pending[name])
            lifecycle.begin(svc, ss, provider, entry.runner, node, views[name])
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
        pending[name][node] = pending[name].get(node, 0) + entry.runner.memory_bytes
        return True
    return False


def name_pattern(names: list[str]) -> Any:
    """Runner (and VM) names of these scale sets: ``<scale set>-<8 hex digits>``."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"
    return re.compile(rf"^({alternatives})-[0-9a-f]{{8}}$")
