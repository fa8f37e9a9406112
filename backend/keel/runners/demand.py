"""What GitHub says a scale set needs: its statistics, and the jobs it has heard of.

``SetState`` is one scale set's side of GitHub: its id there, its message session, the
latest statistics (``totalAssignedJobs`` is what Keel scales on, never a count of
messages), and the jobs seen, from messages and webhooks.  ``apply_message`` takes one
message of the long poll; ``apply_webhook`` one ``workflow_job`` delivery.  Both are
idempotent: a message or delivery seen twice changes nothing the second time, and a job
only ever moves forward (queued → assigned → started → completed).

A webhook is only a faster signal: a job it announces counts as demand (a *hint*) until
statistics newer than it arrive, which include it if GitHub assigned it to the scale set.

**GitHub's count is checked against the jobs Keel tracks** (``SetState.demand``): a job
gets a runner when GitHub counts it *and* Keel knows it (a message, a webhook, the REST
API, a busy runner), so a count GitHub left inflated after an incident (actions-runner-
controller #4397: "phantom" assigned jobs) gets no VMs, and a job GitHub no longer counts
gets none either.  What GitHub counts beyond the jobs Keel knows is ``unconfirmed``: the
reconcile backstop asks GitHub's REST API for those jobs (a lost message) before any
runner is made for them.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

STAGES = ("queued", "assigned", "started", "completed")
HINT_SETTLE_S = 2.0          # statistics this much newer than a hint include its job
KEEP_JOBS = 500


@dataclass
class JobSeen:
    job_id: str
    scale_set: str
    repo: str = ""
    state: str = "queued"
    queued_at: float | None = None
    assigned_at: float | None = None
    started_at: float | None = None
    completed_at: float | None = None
    runner: str | None = None
    result: str | None = None
    seen_at: float = 0.0
    workflow: str = ""              # the workflow file (jobWorkflowRef) or name (webhooks)
    name: str = ""                  # the job's display name
    waits_observed: bool = False

    def row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ROW_KEYS}


ROW_KEYS = ("job_id", "scale_set", "repo", "state", "queued_at", "assigned_at", "started_at",
            "completed_at", "runner", "result", "seen_at", "workflow", "name")
OPEN = ("assigned", "started")


@dataclass
class Effect:
    """What a message or webhook means for a runner: ``started`` or ``completed`` a job."""

    kind: str
    runner: str | None
    job: JobSeen


@dataclass
class SetState:
    name: str
    scale_set_id: int | None = None
    session: Any = None
    standby: bool = False                  # another listener holds the session
    retry_at: float = 0.0
    error: str | None = None
    misconfigured: bool = False            # the error is the config's: GitHub lacks what it names
    statistics: dict[str, int] = field(default_factory=dict)
    stats_at: float | None = None
    last_message_id: int = 0
    last_poll: float | None = None
    last_reconcile: float | None = None
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    hints: dict[str, float] = field(default_factory=dict)    # job id -> when a webhook announced it
    min_runners: int | None = None
    excess_since: float | None = None      # more runners than desired since
    unconfirmed_since: float | None = None  # GitHub has counted more jobs than Keel knows since
    unmet: int = 0                         # runners wanted and not made in the last pass

    def hinted(self) -> int:
        """Jobs a webhook announced that no statistics include yet."""
        settled = self.stats_at if self.stats_at is not None else float("-inf")
        return sum(1 for at in self.hints.values() if at + HINT_SETTLE_S > settled)

    def known(self, busy_untracked: int = 0) -> int:
        """Jobs assigned and not completed that Keel knows of: tracked, or on a busy runner of
        its own whose job it did not track (adopted)."""
        return sum(1 for j in self.jobs.values() if j.state in OPEN) + busy_untracked

    def counted(self) -> int:
        """GitHub's count of jobs assigned and not completed (``totalAssignedJobs``)."""
        return int(self.statistics.get("totalAssignedJobs", 0))

    def demand(self, now: float, busy_untracked: int = 0) -> int:
        """Jobs to have runners for: those GitHub counts and Keel knows (the smaller of the
        two), plus webhook hints."""
        known = self.known(busy_untracked)
        base = min(self.counted(), known) if self.stats_at is not None else known
        return base + self.hinted()

    def unconfirmed(self, busy_untracked: int = 0) -> int:
        """Jobs GitHub counts that Keel knows nothing of: phantoms, or a lost message."""
        return max(0, self.counted() - self.known(busy_untracked))

    def assigned(self, now: float) -> int:
        """GitHub's count plus webhook hints (what GitHub is told about; status)."""
        return self.counted() + self.hinted()

    def restore(self, row: dict[str, Any]) -> None:
        """A job from the store (tracked before a restart)."""
        job_id = str(row.get("job_id") or "")
        if not job_id or job_id in self.jobs or row.get("state") not in STAGES:
            return
        job = JobSeen(job_id, self.name)
        for key in ROW_KEYS[2:]:
            if row.get(key) is not None:
                setattr(job, key, row[key])
        job.waits_observed = job.started_at is not None
        self.jobs[job_id] = job

    def set_statistics(self, statistics: dict[str, Any] | None, now: float) -> None:
        if isinstance(statistics, dict) and statistics:
            self.statistics = {k: int(v) for k, v in statistics.items() if isinstance(v, (int, float))}
            self.stats_at = now
            self.hints = {k: at for k, at in self.hints.items() if at + HINT_SETTLE_S > now}

    def job(self, job_id: str, now: float) -> JobSeen:
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = JobSeen(job_id, self.name, seen_at=now)
            if len(self.jobs) > KEEP_JOBS:
                for old in sorted(self.jobs.values(), key=lambda j: j.seen_at)[: len(self.jobs) - KEEP_JOBS]:
                    if old.state == "completed":
                        del self.jobs[old.job_id]
        return job

    def open_jobs(self) -> list[JobSeen]:
        return [j for j in self.jobs.values() if j.state != "completed"]


def epoch(text: Any) -> float | None:
    if not text or not isinstance(text, str) or text.startswith("0001-"):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _advance(job: JobSeen, state: str) -> bool:
    """Jobs only move forward: True if this is news."""
    if STAGES.index(state) <= STAGES.index(job.state):
        return False
    job.state = state
    return True


def apply_message(state: SetState, message: dict[str, Any], now: float) -> tuple[list[Effect], list[int]]:
    """One message of the long poll: (effects on runners, runner request ids to acquire)."""
    message_id = int(message.get("messageId", 0))
    if message_id and message_id <= state.last_message_id:
        return [], []
    state.last_message_id = max(state.last_message_id, message_id)
    state.set_statistics(message.get("statistics"), now)
    body = message.get("body") or "[]"
    try:
        events = json.loads(body) if isinstance(body, str) else body
    except ValueError:
        events = []
    effects: list[Effect] = []
    acquire: list[int] = []
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        kind = event.get("messageType")
        if kind == "JobAvailable":
            acquire.append(int(event.get("runnerRequestId", 0)))
            continue
        job_id = str(event.get("jobId") or event.get("runnerRequestId") or "")
        if not job_id:
            continue
        state.hints.pop(job_id, None)
        job = state.job(job_id, now)
        job.repo = job.repo or f"{event.get('ownerName', '')}/{event.get('repositoryName', '')}".strip("/")
        job.workflow = job.workflow or workflow_of(event.get("jobWorkflowRef"))
        job.name = job.name or str(event.get("jobDisplayName") or "")
        job.queued_at = job.queued_at or epoch(event.get("queueTime"))
        job.assigned_at = job.assigned_at or epoch(event.get("scaleSetAssignTime"))
        if kind == "JobAssigned":
            _advance(job, "assigned")
        elif kind == "JobStarted":
            job.started_at = job.started_at or epoch(event.get("runnerAssignTime")) or now
            job.runner = event.get("runnerName") or job.runner
            if _advance(job, "started"):
                effects.append(Effect("started", job.runner, job))
        elif kind == "JobCompleted":
            job.completed_at = job.completed_at or epoch(event.get("finishTime")) or now
            job.runner = event.get("runnerName") or job.runner
            job.result = event.get("result") or job.result
            if _advance(job, "completed"):
                effects.append(Effect("completed", job.runner, job))
    return effects, [x for x in acquire if x]


def apply_webhook(state: SetState, payload: dict[str, Any], now: float) -> list[Effect]:
    """One ``workflow_job`` delivery for this scale set."""
    data = payload.get("workflow_job") or {}
    job_id = str(data.get("id", ""))
    if not job_id:
        return []
    action = payload.get("action")
    job = state.job(job_id, now)
    job.repo = job.repo or str((payload.get("repository") or {}).get("full_name", ""))
    job.workflow = job.workflow or str(data.get("workflow_name") or "")
    job.name = job.name or str(data.get("name") or "")
    job.queued_at = job.queued_at or epoch(data.get("created_at"))
    if action == "queued":
        if job.state == "queued" and job_id not in state.hints:
            state.hints[job_id] = now
        return []
    state.hints.pop(job_id, None)
    if action == "in_progress":
        job.started_at = job.started_at or epoch(data.get("started_at")) or now
        job.runner = data.get("runner_name") or job.runner
        return [Effect("started", job.runner, job)] if _advance(job, "started") else []
    if action == "completed":
        job.completed_at = job.completed_at or epoch(data.get("completed_at")) or now
        job.runner = data.get("runner_name") or job.runner
        job.result = {"success": "succeeded", "failure": "failed", "cancelled": "canceled"}.get(
            str(data.get("conclusion")), data.get("conclusion") or job.result)
        return [Effect("completed", job.runner, job)] if _advance(job, "completed") else []
    return []


def workflow_of(ref: Any) -> str:
    """``my-org/app/.github/workflows/ci.yml@refs/heads/main`` -> ``.github/workflows/ci.yml``."""
    text = str(ref or "").split("@", 1)[0]
    marker = text.find("/.github/")
    return text[marker + 1:] if marker >= 0 else text


def matches(labels: list[str], scale_set_labels: frozenset[str]) -> bool:
    """A job a scale set can run: every label it asks for is the scale set's."""
    asked = {str(label).lower() for label in labels}
    return bool(asked) and asked <= scale_set_labels
