"""``FakeGitHub``: everything the fake GitHub knows, and what happens to jobs over time.

It lives inside the ``Cluster`` and runs under the cluster's lock and clock: a request
first runs the events that are due (``Cluster.sync``), then reads or changes this state.
Jobs go queued → assigned (to a scale set, up to the capacity its listener last
advertised) → in progress (a runner took it) → completed.  Each change is a message for
the scale set's session (``JobAssigned``, ``JobStarted``, ``JobCompleted``) and a
``workflow_job`` webhook.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from keel.sim.github.scenario import FAULT_KINDS, GitHubSpec

MAX_MESSAGES = 50          # events per message, as GitHub sends them


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Token:
    value: str
    kind: str                      # installation|pat|registration
    account: str | None            # an installation's account; None: any
    expires_at: float


@dataclass
class Job:
    id: int
    run_id: int
    repo: str
    labels: list[str]
    name: str
    duration_s: float
    result: str
    queued_at: float
    status: str = "queued"         # queued|in_progress|completed
    conclusion: str | None = None  # the REST word: success|failure|cancelled
    scale_set_id: int | None = None
    assigned_at: float | None = None
    started_at: float | None = None
    completed_at: float | None = None
    runner_id: int | None = None
    runner_name: str | None = None
    request_id: int = 0


@dataclass
class Runner:
    id: int
    name: str
    labels: list[str]
    group_id: int
    scale_set_id: int | None
    nonce: str
    created_at: float
    status: str = "offline"        # online|offline
    busy: bool = False
    jit_used: bool = False
    vmid: int | None = None
    job_id: int | None = None
    fault: str | None = None       # never_connect|crash_mid_job|ghost


@dataclass
class Message:
    id: int
    events: list[dict[str, Any]]


@dataclass
class Session:
    id: str
    scale_set_id: int
    owner: str
    token: str
    token_expires_at: float
    last_poll: float


@dataclass
class ScaleSet:
    id: int
    name: str
    group_id: int
    labels: list[str]
    created_at: float
    capacity: int = 0              # as the listener last advertised it
    pending: list[dict[str, Any]] = field(default_factory=list)
    queue: list[Message] = field(default_factory=list)

    @property
    def label_set(self) -> set[str]:
        return {label.lower() for label in (self.name, *self.labels)}


class FakeGitHub:
    """One fake GitHub, built from the scenario's ``github:`` section."""

    def __init__(self, cluster: Any, spec: GitHubSpec):
        from keel.sim.github.hooks import Hooks
        self.cluster = cluster
        self.spec = spec
        self.rng = random.Random(cluster.seed + 7)
        self.admin_secret = secrets.token_hex(16)
        self.cond = threading.Condition()
        self.version = 0
        self.tokens: dict[str, Token] = {t: Token(t, "pat", None, float("inf")) for t in spec.tokens}
        self.groups = dict(spec.runner_groups)
        self.scale_sets: dict[int, ScaleSet] = {}
        self.runners: dict[int, Runner] = {}
        self.jobs: dict[int, Job] = {}
        self.sessions: dict[str, Session] = {}
        self.faults: dict[str, Any] = {}
        self.outage_until = 0.0           # every API answers 503 until then (the outage fault)
        self.requests: list[dict[str, Any]] = []
        self.hooks = Hooks(self, spec.webhook_url, spec.webhook_secret)
        self._ids = {"runner": 1000, "job": 5000, "run": 9000, "set": 0, "message": 0, "request": 0}
        self.set_faults(spec.faults)
        for name, labels, group in spec.scale_sets:
            self.create_scale_set(name, self.group_id(group) or 1, list(labels))
        by_name = {s.name: s for s in self.scale_sets.values()}
        for r in spec.runners:
            ss = by_name.get(r.scale_set) or self.create_scale_set(r.scale_set, 1, [])
            runner = self.new_runner(r.name, [ss.name], ss.group_id, ss.id)
            runner.status, runner.jit_used, runner.vmid = "online", True, r.vmid
        for spec_job in spec.jobs:
            job = self.queue_job(spec_job.repo, list(spec_job.labels), spec_job.duration_s,
                                 spec_job.result, spec_job.name, quiet=True)
            if spec_job.runner:
                from keel.sim.github import agent
                runner = next(x for x in self.runners.values() if x.name == spec_job.runner)
                ss = self.scale_sets[runner.scale_set_id] if runner.scale_set_id else None
                job.scale_set_id = ss.id if ss else None
                job.assigned_at = job.queued_at
                agent.start_job(self, runner, job, quiet=True)

    # -- time, ids, notification -------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.cluster.t

    def next_id(self, kind: str) -> int:
        self._ids[kind] += 1
        return self._ids[kind]

    def notify(self) -> None:
        with self.cond:
            self.version += 1
            self.cond.notify_all()

    def log(self, method: str, path: str, status: int) -> None:
        self.requests.append({"seq": self.next_id("request"), "time": self.now, "method": method,
                              "path": path, "status": status})
        if len(self.requests) > 100000:
            del self.requests[:50000]

    # -- faults ------------------------------------------------------------------------------

    def set_faults(self, faults: dict[str, Any]) -> None:
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault {sorted(unknown)[0]!r} (known: {', '.join(FAULT_KINDS)})")
        self.faults = {k: (dict(v) if isinstance(v, dict) else v) for k, v in faults.items()}
        outage = self.faults.get("outage")
        seconds = outage.get("seconds", 0) if isinstance(outage, dict) else outage or 0
        self.outage_until = self.now + float(seconds) if seconds else 0.0

    def out(self) -> bool:
        """In an outage: GitHub's APIs answer 503 (jobs and runners go on behind them)."""
        return self.now < self.outage_until

    def take_fault(self, kind: str) -> Any:
        """The fault's setting if it strikes now, counting it down (an int is a count)."""
        value = self.faults.get(kind)
        if not value:
            return None
        if isinstance(value, dict):
            count = value.get("count", 1)
            if count <= 0:
                return None
            value["count"] = count - 1
            return value
        self.faults[kind] = int(value) - 1
        return True

    # -- tokens ----------------------------------------------------------------------------

    def issue_token(self, kind: str, account: str | None, prefix: str) -> Token:
        value = prefix + "".join(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
                                 for _ in range(36))
        token = Token(value, kind, account, self.now + self.spec.token_ttl_s)
        self.tokens[value] = token
        return token

    def expire_tokens(self) -> None:
        for token in self.tokens.values():
            if token.kind != "pat":
                token.expires_at = min(token.expires_at, self.now)
        for session in self.sessions.values():
            session.token_expires_at = min(session.token_expires_at, self.now)
        self.admin_secret = secrets.token_hex(16)    # admin tokens issued before are void

    def group_id(self, name: str | None) -> int | None:
        if not name:
            return next(iter(self.groups))
        return next((gid for gid, gname in self.groups.items() if gname.lower() == name.lower()), None)

    # -- runners ------------------------------------------------------------------------------

    def new_runner(self, name: str, labels: list[str], group_id: int, scale_set_id: int | None) -> Runner:
        runner = Runner(self.next_id("runner"), name, labels, group_id, scale_set_id,
                        secrets.token_hex(8), self.now)
        self.runners[runner.id] = runner
        return runner

    def jit_config(self, runner: Runner) -> str:
        """What the runner needs to connect once: base64 of JSON, opaque to Keel."""
        data = {"runner_id": runner.id, "name": runner.name, "nonce": runner.nonce,
                "service_url": "https://127.0.0.1/_actions/", "labels": runner.labels}
        return base64.b64encode(json.dumps(data).encode()).decode()

    def runner_by_name(self, name: str) -> Runner | None:
        return next((r for r in self.runners.values() if r.name == name), None)

    def runner_json(self, runner: Runner) -> dict[str, Any]:
        return {"id": runner.id, "name": runner.name, "os": "linux", "status": runner.status,
                "busy": runner.busy, "ephemeral": True, "runner_group_id": runner.group_id,
                "labels": [{"id": i + 1, "name": label, "type": "custom" if i else "read-only"}
                           for i, label in enumerate(runner.labels)]}

    def remove_runner(self, runner: Runner) -> None:
        self.runners.pop(runner.id, None)

    # -- scale sets ---------------------------------------------------------------------------

    def create_scale_set(self, name: str, group_id: int, labels: list[str]) -> ScaleSet:
        ss = ScaleSet(self.next_id("set"), name, group_id, labels, self.now)
        self.scale_sets[ss.id] = ss
        return ss

    def statistics(self, ss: ScaleSet) -> dict[str, int]:
        assigned = [j for j in self.jobs.values() if j.scale_set_id == ss.id and j.status != "completed"]
        runners = [r for r in self.runners.values() if r.scale_set_id == ss.id]
        stale = self.faults.get("stale_assigned") or 0
        return {"totalAvailableJobs": 0, "totalAcquiredJobs": len(assigned),
                "totalAssignedJobs": len(assigned) + (stale if isinstance(stale, int) else 0),
                "totalRunningJobs": sum(1 for j in assigned if j.status == "in_progress"),
                "totalRegisteredRunners": len(runners),
                "totalBusyRunners": sum(1 for r in runners if r.busy),
                "totalIdleRunners": sum(1 for r in runners if r.status == "online" and not r.busy)}

    def scale_set_json(self, ss: ScaleSet, base: str) -> dict[str, Any]:
        return {"id": ss.id, "name": ss.name, "runnerGroupId": ss.group_id,
                "runnerGroupName": self.groups.get(ss.group_id, ""),
                "labels": [{"type": "System", "name": label} for label in (ss.name, *ss.labels)],
                "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": False},
                "createdOn": iso(ss.created_at), "statistics": self.statistics(ss),
                "runnerJitConfigUrl": f"{base}/_actions/_apis/runtime/runnerscalesets/{ss.id}/generatejitconfig"}

    # -- jobs ---------------------------------------------------------------------------------

    def queue_job(self, repo: str, labels: list[str], duration_s: float, result: str = "succeeded",
                  name: str = "build", quiet: bool = False) -> Job:
        job_id = self.next_id("job")
        job = Job(job_id, self.next_id("run"), repo, labels, name, duration_s, result,
                  self.now, request_id=job_id * 10)
        self.jobs[job.id] = job
        timeout_at = self.now + self.spec.queue_timeout_s
        self.cluster.schedule(timeout_at, lambda: self._queue_timeout(job))
        if not quiet:
            self.hooks.job_event(job, "queued")
            self.assign()
        return job

    def _queue_timeout(self, job: Job) -> None:
        if job.status == "queued":
            self.complete(job, "canceled")

    def job_event(self, job: Job, kind: str, runner: Runner | None = None) -> None:
        """A message for the scale set the job is assigned to."""
        ss = self.scale_sets.get(job.scale_set_id or -1)
        if ss is None:
            return
        event: dict[str, Any] = {
            "messageType": kind, "runnerRequestId": job.request_id, "repositoryName": job.repo.split("/")[1],
            "ownerName": job.repo.split("/")[0], "jobId": str(job.id),
            "jobWorkflowRef": f"{job.repo}/.github/workflows/ci.yml@refs/heads/main",
            "jobDisplayName": job.name, "workflowRunId": job.run_id, "eventName": "push",
            "requestLabels": job.labels, "queueTime": iso(job.queued_at),
            "scaleSetAssignTime": iso(job.assigned_at), "runnerAssignTime": iso(job.started_at),
            "finishTime": iso(job.completed_at)}
        if runner is not None or job.runner_id is not None:
            event.update(runnerId=job.runner_id, runnerName=job.runner_name)
        if kind == "JobCompleted":
            event["result"] = job.result
        ss.pending.append(event)
        self.notify()

    def matches(self, ss: ScaleSet, job: Job) -> bool:
        labels = {label.lower() for label in job.labels}
        return bool(labels) and labels <= ss.label_set

    def assign(self) -> None:
        """Give queued jobs to scale sets, each up to the capacity its listener last advertised,
        and waiting jobs to idle runners."""
        from keel.sim.github import agent
        queued = sorted((j for j in self.jobs.values() if j.status == "queued" and j.scale_set_id is None),
                        key=lambda j: j.id)
        for ss in sorted(self.scale_sets.values(), key=lambda s: s.id):
            open_jobs = sum(1 for j in self.jobs.values()
                            if j.scale_set_id == ss.id and j.status != "completed")
            for job in queued:
                if open_jobs >= ss.capacity:
                    break
                if job.scale_set_id is None and self.matches(ss, job):
                    job.scale_set_id, job.assigned_at = ss.id, self.now
                    open_jobs += 1
                    self.job_event(job, "JobAssigned")
        for runner in sorted(self.runners.values(), key=lambda r: r.id):
            if runner.status == "online" and not runner.busy:
                agent.take_job(self, runner)

    def complete(self, job: Job, result: str) -> None:
        if job.status == "completed":
            return
        job.status, job.result, job.completed_at = "completed", result, self.now
        job.conclusion = {"succeeded": "success", "failed": "failure", "canceled": "cancelled"}[result]
        self.job_event(job, "JobCompleted")
        self.hooks.job_event(job, "completed")
        self.assign()

    def job_json(self, job: Job) -> dict[str, Any]:
        return {"id": job.id, "run_id": job.run_id, "run_attempt": 1, "name": job.name,
                "workflow_name": "CI", "head_branch": "main", "labels": job.labels,
                "status": job.status, "conclusion": job.conclusion,
                "created_at": iso(job.queued_at), "started_at": iso(job.started_at),
                "completed_at": iso(job.completed_at), "runner_id": job.runner_id,
                "runner_name": job.runner_name,
                "runner_group_id": self.runners[job.runner_id].group_id
                if job.runner_id in self.runners else None,
                "runner_group_name": None,
                "html_url": f"https://github.com/{job.repo}/actions/runs/{job.run_id}/job/{job.id}"}

    # -- sessions and messages --------------------------------------------------------------

    def open_session(self, ss: ScaleSet, owner: str) -> Session | None:
        """A new session, or None while another one is alive (GitHub's 409)."""
        for sid, session in list(self.sessions.items()):
            if session.scale_set_id == ss.id:
                if self.now - session.last_poll < self.spec.session_timeout_s:
                    return None
                del self.sessions[sid]
        session = Session(str(uuid.UUID(int=self.rng.getrandbits(128))), ss.id, owner,
                          secrets.token_hex(16), self.now + self.spec.token_ttl_s, self.now)
        self.sessions[session.id] = session
        return session

    def refresh_session(self, session: Session) -> None:
        session.token = secrets.token_hex(16)
        session.token_expires_at = self.now + self.spec.token_ttl_s
        session.last_poll = self.now

    def session_json(self, session: Session, base: str) -> dict[str, Any]:
        ss = self.scale_sets[session.scale_set_id]
        return {"sessionId": session.id, "ownerName": session.owner,
                "runnerScaleSet": self.scale_set_json(ss, base),
                "messageQueueUrl": f"{base}/_msgq/{session.id}",
                "messageQueueAccessToken": session.token, "statistics": self.statistics(ss)}

    def next_message(self, session: Session, last_id: int, capacity: int) -> Message | None:
        ss = self.scale_sets[session.scale_set_id]
        session.last_poll = self.now
        if capacity != ss.capacity:
            ss.capacity = capacity
            self.assign()
        ss.queue = [m for m in ss.queue if m.id > last_id]
        while not ss.queue and ss.pending:
            events, ss.pending = ss.pending[:MAX_MESSAGES], ss.pending[MAX_MESSAGES:]
            message = Message(self.next_id("message"), events)
            if self.take_fault("lose_messages"):
                continue
            ss.queue.append(message)
            if self.take_fault("duplicate_messages"):
                ss.queue.append(Message(self.next_id("message"), [dict(e) for e in events]))
        return ss.queue[0] if ss.queue else None

    def ack(self, session: Session, message_id: int) -> None:
        ss = self.scale_sets[session.scale_set_id]
        ss.queue = [m for m in ss.queue if m.id != message_id]

    def message_json(self, ss: ScaleSet, message: Message) -> dict[str, Any]:
        return {"messageId": message.id, "messageType": "RunnerScaleSetJobMessages",
                "body": json.dumps(message.events), "statistics": self.statistics(ss)}

    # -- the control API's view ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "time": self.now,
            "scale_sets": [{"id": s.id, "name": s.name, "capacity": s.capacity, **self.statistics(s)}
                           for s in self.scale_sets.values()],
            "sessions": [{"id": s.id, "scale_set_id": s.scale_set_id, "owner": s.owner,
                          "last_poll": s.last_poll} for s in self.sessions.values()],
            "runners": [{**self.runner_json(r), "vmid": r.vmid, "scale_set_id": r.scale_set_id,
                         "job_id": r.job_id} for r in self.runners.values()],
            "jobs": [{"id": j.id, "repo": j.repo, "labels": j.labels, "status": j.status,
                      "result": j.result if j.status == "completed" else None,
                      "scale_set_id": j.scale_set_id, "runner_name": j.runner_name,
                      "queued_at": j.queued_at, "assigned_at": j.assigned_at,
                      "started_at": j.started_at, "completed_at": j.completed_at}
                     for j in self.jobs.values()],
            "deliveries": len(self.hooks.log),
            "faults": self.faults,
        }
