"""The runner inside a simulated VM: what the template's runner unit and ``run.sh`` do.

When the guest agent writes a JIT config into a running VM, the runner connects a few
seconds later (its registration goes online and the file is deleted, as the template's
unit deletes it), takes the oldest job assigned to its scale set, runs it for the job's
duration, and exits: GitHub drops the ephemeral registration, and the VM powers off.

Faults, each for the next N runners given a JIT (``POST /_github/faults``):

* ``never_connect``: a broken image; the VM runs and the runner never connects;
* ``slow_boot`` ``{count, delay}``: it connects ``delay`` seconds late;
* ``crash_mid_job``: halfway through its job the VM stops; the registration stays,
  offline, and GitHub fails the job after ``lost_runner`` seconds;
* ``ghost``: the job completes and the registration goes, but the VM keeps running.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from keel.sim.github.state import FakeGitHub, Job, Runner

HEARTBEAT_S = 10.0         # how often GitHub hears from a busy runner


def jit_written(fake: FakeGitHub, guest: Any, path: str, content: str) -> None:
    """The guest agent wrote ``content`` to ``path`` in ``guest``: a runner starts if it is a JIT."""
    try:
        data = json.loads(base64.b64decode(content.strip(), validate=True))
        runner = fake.runners.get(int(data["runner_id"]))
        nonce = data["nonce"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return
    if runner is None or runner.nonce != nonce or runner.vmid is not None:
        return
    runner.vmid = guest.vmid
    delay = fake.spec.connect_s
    if fake.take_fault("never_connect"):
        runner.fault = "never_connect"
        return
    slow = fake.take_fault("slow_boot")
    if slow:
        delay += float(slow.get("delay", 600) if isinstance(slow, dict) else 600)
    if fake.take_fault("crash_mid_job"):
        runner.fault = "crash_mid_job"
    elif fake.take_fault("ghost"):
        runner.fault = "ghost"
    fake.cluster.schedule(fake.now + delay, lambda: _connect(fake, runner))


def _vm(fake: FakeGitHub, runner: Runner) -> Any:
    guest = fake.cluster.guests.get(runner.vmid) if runner.vmid is not None else None
    return guest if guest is not None and guest.status == "running" else None


def _connect(fake: FakeGitHub, runner: Runner) -> None:
    guest = _vm(fake, runner)
    if guest is None or fake.runners.get(runner.id) is not runner or runner.jit_used:
        return
    runner.jit_used = True             # the JIT is good for one connection
    runner.status = "online"
    for name, content in list(guest.files.items()):
        if "runner_id" in _decoded(content):
            del guest.files[name]      # the template's unit deletes it after reading
    take_job(fake, runner)
    fake.notify()


def _decoded(content: str) -> str:
    try:
        return base64.b64decode(content, validate=True).decode("utf-8", "replace")
    except (ValueError, binascii.Error):
        return ""


def take_job(fake: FakeGitHub, runner: Runner) -> None:
    """An idle, connected runner takes the oldest job meant for it."""
    if runner.busy or runner.status != "online":
        return
    for job in sorted(fake.jobs.values(), key=lambda j: j.id):
        if job.status != "queued":
            continue
        if runner.scale_set_id is not None:
            if job.scale_set_id != runner.scale_set_id:
                continue
        elif job.scale_set_id is not None or not {x.lower() for x in job.labels} <= \
                {x.lower() for x in runner.labels}:
            continue
        start_job(fake, runner, job)
        return


def start_job(fake: FakeGitHub, runner: Runner, job: Job, quiet: bool = False) -> None:
    job.status, job.started_at = "in_progress", fake.now
    job.runner_id, job.runner_name = runner.id, runner.name
    runner.busy, runner.job_id = True, job.id
    if not quiet:
        fake.job_event(job, "JobStarted", runner)
        fake.hooks.job_event(job, "in_progress")
    if runner.fault == "crash_mid_job":
        fake.cluster.schedule(fake.now + job.duration_s / 2, lambda: _crash(fake, runner, job))
    else:
        fake.cluster.schedule(fake.now + job.duration_s, lambda: _finish(fake, runner, job))
    fake.cluster.schedule(fake.now + HEARTBEAT_S, lambda: _heartbeat(fake, runner, job))


def _heartbeat(fake: FakeGitHub, runner: Runner, job: Job) -> None:
    """A busy runner whose VM was stopped or deleted under it stops answering: GitHub notices."""
    if job.status != "in_progress" or runner.status != "online" or job.runner_id != runner.id:
        return
    if _vm(fake, runner) is None:
        _lost(fake, runner, job)
        return
    fake.cluster.schedule(fake.now + HEARTBEAT_S, lambda: _heartbeat(fake, runner, job))


def _finish(fake: FakeGitHub, runner: Runner, job: Job) -> None:
    if job.status == "completed":
        return
    if _vm(fake, runner) is None:
        # The VM was stopped or deleted under the job: GitHub loses the runner.
        _lost(fake, runner, job)
        return
    job_result = job.result
    fake.remove_runner(runner)         # ephemeral: gone with its job
    runner.busy, runner.status = False, "offline"
    fake.complete(job, job_result)
    if runner.fault != "ghost":
        fake.cluster.schedule(fake.now + fake.spec.poweroff_s, lambda: _power_off(fake, runner))


def _power_off(fake: FakeGitHub, runner: Runner) -> None:
    guest = _vm(fake, runner)
    if guest is not None:
        guest.status, guest.started_at = "stopped", None
        fake.cluster.invalidate_usage()


def _crash(fake: FakeGitHub, runner: Runner, job: Job) -> None:
    _power_off(fake, runner)
    _lost(fake, runner, job)


def _lost(fake: FakeGitHub, runner: Runner, job: Job) -> None:
    """The runner stopped answering mid-job: offline at once, the job failed after a while."""
    if runner.status == "offline":
        return
    runner.status = "offline"
    fake.notify()

    def fail() -> None:
        runner.busy, runner.job_id = False, None
        fake.complete(job, "failed")
    fake.cluster.schedule(fake.now + fake.spec.lost_runner_s, fail)


def cancel(fake: FakeGitHub, job: Job) -> None:
    """A job cancelled on GitHub: a queued one ends; a running one's runner exits as after a job."""
    if job.status == "in_progress" and job.runner_id in fake.runners:
        runner = fake.runners[job.runner_id]
        job.result = "canceled"
        _finish(fake, runner, job)
    else:
        fake.complete(job, "canceled")


def finish_now(fake: FakeGitHub, job: Job, result: str | None = None) -> None:
    """The control API's ``finish``: a running job ends now."""
    if result:
        job.result = result
    if job.status == "in_progress" and job.runner_id in fake.runners:
        _finish(fake, fake.runners[job.runner_id], job)
