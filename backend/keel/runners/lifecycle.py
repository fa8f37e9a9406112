"""A runner's life, one step at a time: each call makes at most a few API calls and returns.

Creating (``begin``, then ``step``): register with GitHub (a JIT config for this name
alone) → next free VMID and clone, retried on a VMID race → set cores, memory, the guest
agent, tags → start → wait for the guest agent → write the JIT config into the guest →
``ready``.  A refusal anywhere (no room, a clone or start that fails) removes what was
made, the registration first, and backs the scale set off that provider.

Removing (``remove``, then ``step``), the safe way round: GitHub is asked to drop the
registration first, so no job can be given to the runner; only then is the VM stopped
and deleted.  GitHub refuses (422) for a runner that has a job: it is then busy, and
left alone, unless it is removed by force (``max_age``, stuck) or its VM has ended
anyway, in which case the VM goes and the registration is swept later (orphaned).
"""

from __future__ import annotations

import logging
import secrets
from keel.errors import KeelError
from keel.runners.github import Conflict, StillRunning
from keel.runners.metrics import LOST_REASONS, REMOVED_REASONS  # noqa: F401 (the reasons, by name)
from keel.runners.proxmox import ProxmoxProvider, Refused, Spot, VmidTaken, VmView, task_refusal
from keel.runners.record import REMOVING, Runner, description, tags
from keel.runners.spec import RunnerSpec, ScaleSetSettings
from keel.runners.state import Fleet

log = logging.getLogger("keel.runners")

VMID_TRIES = 3
TASK_POLL_S = 1.0
PING_EVERY_S = 1.0
RETRY_S = 5.0
NOT_COUNTED = ("failed",)        # never had a machine: not a removal


class GitHubRefused(Exception):
    """GitHub would not register the runner: stop creating for this scale set this pass."""


def begin(svc: Fleet, ss: ScaleSetSettings, provider: ProxmoxProvider, spec: RunnerSpec,
          spot: Spot) -> Runner:
    """Register a runner and request its VM's clone.  ``Refused`` if the provider will not
    (the registration is removed again); ``GitHubRefused`` if GitHub would not register it."""
    now = svc.clock()
    node = spot.node
    runner = Runner(f"{ss.name}-{secrets.token_hex(4)}", ss.name, provider.name, node=node,
                    memory_bytes=spec.memory_bytes, cores=spec.cores, revision=spec.revision,
                    created_at=now)
    svc.runners[runner.name] = runner
    svc.save(runner)
    set_id = svc.sets[ss.name].scale_set_id
    try:
        runner.runner_id, runner.jit = svc.github.generate_jit(int(set_id or 0), runner.name)
    except (KeelError, Conflict) as err:
        svc.forget(runner)
        raise GitHubRefused(str(err)) from None
    runner.registered_at = now
    for _ in range(VMID_TRIES):
        try:
            runner.vmid = provider.next_vmid()
            svc.save(runner)
            runner.upid = provider.clone(spot, spec, runner.name, runner.vmid,
                                         description(runner, svc.installation))
            break
        except VmidTaken:
            continue
        except Refused:
            remove(svc, runner, "failed")
            raise
        except KeelError as err:
            remove(svc, runner, "failed")
            raise Refused("failing", str(err)) from None
    else:
        remove(svc, runner, "failed")
        raise Refused("failing", f"no free VMID after {VMID_TRIES} tries")
    runner.phase = "clone"
    runner.cloned = True
    provider.count("create", "ok")
    svc.save(runner)
    svc.meters.inc("keel_runners_created_total", {"scale_set": ss.name, "provider": provider.name})
    svc.event("created", runner, f"VM {runner.vmid} on {node}")
    return runner


def step(svc: Fleet, runner: Runner, vm: VmView | None, reachable: bool) -> None:
    """One step forward for a runner being created or removed; nothing for one that is ready."""
    now = svc.clock()
    if now < runner.next_at or not reachable or runner.provider not in svc.providers:
        return
    provider = svc.providers[runner.provider]
    try:
        if runner.phase in REMOVING:
            _remove_step(svc, runner, provider, vm, now)
        elif runner.phase != "ready":
            _create_step(svc, runner, provider, vm, now)
    except KeelError as err:
        runner.tries += 1
        runner.next_at = now + RETRY_S
        log.warning("runner %s (%s): %s; trying again in %.0f s", runner.name, runner.phase, err, RETRY_S)


def _spec(svc: Fleet, runner: Runner) -> RunnerSpec | None:
    ss = svc.settings.scale_set(runner.scale_set)
    entry = ss.provider(runner.provider) if ss else None
    return entry.runner if entry else None


def _create_step(svc: Fleet, runner: Runner, provider: ProxmoxProvider, vm: VmView | None,
                 now: float) -> None:
    spec = _spec(svc, runner)
    if runner.phase == "clone":
        if runner.upid is None:                  # adopted mid-clone: its JIT config is lost
            if vm is None or vm.lock != "clone":
                remove(svc, runner, "never_connected")
            return
        finished, error = provider.task(runner.upid)
        if not finished:
            runner.next_at = now + TASK_POLL_S
            return
        runner.upid = None
        if error:
            _refused(svc, runner, task_refusal(error))
            return
        runner.phase = "config"
        svc.save(runner)
    if runner.phase == "config":
        if runner.jit is None or spec is None or runner.vmid is None or runner.node is None:
            remove(svc, runner, "never_connected")
            return
        provider.configure(runner.node, runner.vmid, spec, tags(svc.installation))
        runner.upid = provider.start(runner.node, runner.vmid)
        runner.phase = "start"
        svc.save(runner)
        runner.next_at = now + TASK_POLL_S
        return
    if runner.phase == "start":
        if runner.upid is not None:
            finished, error = provider.task(runner.upid)
            if not finished:
                runner.next_at = now + TASK_POLL_S
                return
            runner.upid = None
            if error:
                _refused(svc, runner, task_refusal(error))
                return
        runner.phase = "boot"
        svc.save(runner)
        runner.next_at = now + PING_EVERY_S
        return
    if runner.phase == "boot":
        if runner.jit is None or spec is None or runner.vmid is None or runner.node is None:
            remove(svc, runner, "never_connected")
            return
        if not provider.ping(runner.node, runner.vmid):
            runner.next_at = now + PING_EVERY_S
            return
        provider.write_file(runner.node, runner.vmid, spec.jit_path, runner.jit)
        runner.jit = None
        runner.phase, runner.ready_at = "ready", now
        svc.save(runner)
        svc.meters.observe("keel_runner_create_duration_seconds",
                            {"scale_set": runner.scale_set, "provider": runner.provider},
                            now - runner.created_at)


def _refused(svc: Fleet, runner: Runner, refusal: Refused) -> None:
    ss = svc.settings.scale_set(runner.scale_set)
    svc.refused(ss, runner.provider, refusal)
    remove(svc, runner, "failed")


def remove(svc: Fleet, runner: Runner, reason: str, forced: bool = False, verdict_pending: bool = False) -> None:
    """Start removing a runner (no call is made here).  ``verdict_pending``: its VM ended
    while GitHub could not be heard; ``reason`` is a guess that is settled once it can."""
    if runner.reason is not None:
        runner.forced = runner.forced or forced
        return
    runner.reason, runner.forced, runner.verdict_pending = reason, forced, verdict_pending
    runner.phase, runner.next_at = "unregister", 0.0
    runner.jit = None
    svc.save(runner)
    if reason not in NOT_COUNTED:
        svc.event("removing", runner, reason)


def _remove_step(svc: Fleet, runner: Runner, provider: ProxmoxProvider, vm: VmView | None,
                 now: float) -> None:
    if runner.phase == "unregister":
        if runner.runner_id is not None and not runner.unregistered:
            try:
                svc.github.delete_runner(runner.runner_id)
            except StillRunning:
                if runner.forced or vm is None or vm.status != "running":
                    svc.orphans[runner.name] = (runner.runner_id, now)     # swept when its job ends
                else:                                                     # GitHub just gave it a job
                    runner.reason, runner.phase = None, "ready"
                    runner.busy_since = runner.busy_since or now
                    svc.save(runner)
                    svc.event("busy", runner, "GitHub gave it a job before it could be removed")
                    return
            except KeelError:
                if not (runner.forced or vm is None or vm.status != "running"):
                    raise
                svc.orphans[runner.name] = (runner.runner_id, now)
            runner.unregistered = True
        runner.phase = "stop"
        svc.save(runner)
    if runner.phase == "stop":
        if vm is not None and vm.status == "running":
            if runner.upid is None:
                runner.upid = provider.stop(str(vm.node), vm.vmid)
                svc.save(runner)
            else:
                finished, _ = provider.task(runner.upid)
                if finished:
                    runner.upid = None
            runner.next_at = now + TASK_POLL_S
            return
        if vm is not None and vm.lock == "clone":
            runner.next_at = now + TASK_POLL_S
            return
        runner.phase, runner.upid = "destroy", None
        svc.save(runner)
    if runner.phase == "destroy":
        if vm is None and (runner.upid is not None or not runner.cloned):
            _gone(svc, runner)
            return
        if runner.upid is None:
            if vm is None:
                _gone(svc, runner)
                return
            runner.upid = provider.destroy(vm.node, vm.vmid)
            svc.save(runner)
            runner.next_at = now + TASK_POLL_S
            return
        finished, error = provider.task(runner.upid)
        if not finished:
            runner.next_at = now + TASK_POLL_S
            return
        if error:
            runner.upid = None
            runner.next_at = now + RETRY_S
            log.warning("runner %s: deleting VM %s failed: %s", runner.name, runner.vmid, error)
            return
        _gone(svc, runner)


def _gone(svc: Fleet, runner: Runner) -> None:
    svc.forget(runner)
    if runner.cloned:
        svc.room_freed(runner.provider)
    if runner.reason in NOT_COUNTED:
        return
    if runner.verdict_pending:           # ended while GitHub was silent: judged once it speaks
        svc.verdicts[runner.name] = (runner, runner.ended_at or svc.clock())
        return
    count(svc, runner)


def count(svc: Fleet, runner: Runner) -> None:
    """A runner gone, in the metrics and the events, with its reason."""
    labels = {"scale_set": runner.scale_set, "provider": runner.provider}
    if runner.reason in ("ended", "unreachable"):
        svc.meters.inc("keel_runners_lost_total", {**labels, "reason": str(runner.reason)})
    else:
        svc.meters.inc("keel_runners_removed_total", {**labels, "reason": str(runner.reason)})
    svc.event("removed", runner, str(runner.reason))

