"""Jobs: a plan being carried out in the background, with progress, cancellable.

``POST /api/apply`` and maintenance evacuations return a job at once; the UI and the CLI
follow it with ``GET /api/jobs/<id>`` (its events since a given index, so a 3-second
refresh fetches only what is new) and stop it with ``DELETE``.  A job keeps its events
after it ends, until newer jobs push it out.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from keel.balance.plan import Plan

log = logging.getLogger("keel.engine")
KEEP_JOBS = 20


@dataclass
class Job:
    id: str
    kind: str                          # apply | maintenance | power-sleep | power-wake | power-test
    requested_by: str
    plan: Plan
    started_at: float
    events: list[dict[str, Any]] = field(default_factory=list)
    ended_at: float | None = None
    execution: Any = None
    cancelled_by: str | None = None
    error: str | None = None
    outcome: dict[str, Any] | None = None     # promised and achieved, once it ended (engine.outcome)
    cancel_event: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append({**event, "time": time.time()})

    def cancel(self, by: str) -> None:
        if not self.done.is_set() and not self.cancel_event.is_set():
            self.cancelled_by = by
            self.cancel_event.set()
            log.info("job %s: cancelled by %s", self.id, by)

    @property
    def state(self) -> str:
        if not self.done.is_set():
            return "cancelling" if self.cancel_event.is_set() else "running"
        if self.error:
            return "failed"
        execution = self.execution
        if execution is None:
            return "failed"
        if execution.cancelled:
            return "cancelled"
        return "done" if execution.ok else "failed"

    def to_json(self, since: int = 0) -> dict[str, Any]:
        with self._lock:
            events = list(self.events[max(0, since):])
            count = len(self.events)
            completed = sum(1 for e in self.events if e.get("event") in ("done", "failed", "not_started"))
            succeeded = sum(1 for e in self.events if e.get("event") == "done")
            # a job that plans again around refused moves has more moves than its first plan
            total = sum(int(e.get("total") or 0) for e in self.events if e.get("event") == "plan") \
                or len(self.plan.moves)
        return {
            "id": self.id, "kind": self.kind, "state": self.state, "requested_by": self.requested_by,
            "started_at": self.started_at, "ended_at": self.ended_at, "cancelled_by": self.cancelled_by,
            "error": self.error,
            "progress": {"completed": completed, "total": total,
                         "ok": succeeded},
            "plan": {"verdict": self.plan.verdict, "reason": self.plan.reason,
                     "moves": [m.to_json() for m in self.plan.moves]},
            "events": events, "next": count, "outcome": self.outcome,
        }


class Jobs:
    def __init__(self) -> None:
        self._jobs: "OrderedDict[str, Job]" = OrderedDict()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, kind: str, requested_by: str, plan: Plan, run: Callable[[Job], None],
              finally_: Callable[[], None]) -> Job:
        job = Job(uuid.uuid4().hex[:12], kind, requested_by, plan, time.time())
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_JOBS:
                oldest = next(iter(self._jobs))
                if not self._jobs[oldest].done.is_set():
                    break
                self._jobs.pop(oldest)

        def body() -> None:
            try:
                log.info("job %s (%s, %d moves) asked by %s", job.id, kind, len(plan.moves), requested_by)
                run(job)
            except Exception as err:       # reported in the job, never lost in a thread
                job.error = str(err)
                log.exception("job %s failed", job.id)
            finally:
                job.ended_at = time.time()
                job.done.set()
                finally_()

        thread = threading.Thread(target=body, name=f"keel-job-{job.id}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def recent(self) -> list[Job]:
        with self._lock:
            return list(reversed(self._jobs.values()))

    def running(self) -> Job | None:
        return next((j for j in self.recent() if not j.done.is_set()), None)

    def cancel_all(self) -> None:
        for job in self.recent():
            job.cancel("keel-engine stopping")

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)
