"""What became of the moves of a job that did not finish (a crash, a stop, a lost lease).

An engine reconciles on start (the moves its own store left unfinished: reads only, any
node may) and when it becomes leader (the journals its predecessor left in pmxcfs,
``keel.balance.journal``).  For each move:

* never started (``planned``) → ``not_started``, saying why;
* a UPID → its task, followed until it stops: ``ok`` or ``failed`` with PVE's exit status;
* a request that may have been sent (``starting``) → the guest's migration tasks since
  then; with none, the guest's node decides (on its target: ``ok``; else ``not_started``);
* moved through HA → the CRM's view, then the guest's node.

What cannot be read (a node down) is tried again each pass; after ``give_up_s`` the guest's
node, if known, is the answer, else ``failed`` with what stood in the way.  Nothing is
left ``running`` once its task has ended.  Outcomes go into this node's store, so the
history shows them; a reconciled journal is then removed from pmxcfs (leader only).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from keel.balance import journal
from keel.pve.tasks import find_migration_task
from keel.balance.history import ENDED, FAILED, NOT_STARTED, OK, PLANNED
from keel.errors import KeelError
from keel.pve.client import PveClient
from keel.pve.upid import parse_upid

log = logging.getLogger("keel.engine")
GIVE_UP_S = 1800.0      # a move whose outcome cannot be read for this long is judged by what is known


@dataclass
class Pending:
    job_id: str
    job_node: str
    row: int
    move: dict[str, Any]             # vmid, name, type, source, target, ha_sid, state, upid, started_at
    why: str                         # why its job did not finish
    error: str | None = None         # what stood in the way of reading it, last time


@dataclass
class Summary:
    moves: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in sorted(self.ended.items()))
        return f"{self.moves} moves of {len(self.jobs)} unfinished jobs: {parts or 'none ended yet'}"


class Reconciler:
    def __init__(self, client: Callable[[], PveClient], store: Any, node: str, shared_dir: str | None,
                 leads: Callable[[], bool], clock: Callable[[], float] = time.time, poll_s: float = 2.0,
                 give_up_s: float = GIVE_UP_S):
        self.client = client
        self.store = store
        self.node = node
        self.shared_dir = shared_dir
        self.leads = leads
        self.clock = clock
        self.poll_s = poll_s
        self.give_up_s = give_up_s
        self.last: Summary | None = None
        self.pending = 0
        self._lock = threading.Lock()           # one pass at a time

    # -- what is unfinished ------------------------------------------------------------------

    def gather(self, shared: bool) -> list[Pending]:
        found: dict[int, Pending] = {}
        if shared and self.shared_dir:
            for data in journal.read_shared(self.shared_dir):
                if journal.is_live(str(data["id"])):
                    continue
                for p in self._adopt(data):
                    found[p.row] = p
        for row in self.store.unfinished_moves():
            job_id = str(row["plan_id"])
            if row["id"] in found or journal.is_live(job_id):
                continue
            found[row["id"]] = Pending(job_id, row.get("node") or self.node, row["id"], {
                **row, "state": row["status"]}, f"the engine on {row.get('node') or self.node} stopped")
        return sorted(found.values(), key=lambda p: p.row)

    def _adopt(self, data: dict[str, Any]) -> list[Pending]:
        """A journal's moves as rows of this node's store (imported if another node wrote it)."""
        job_id, owner = str(data["id"]), str(data.get("node") or "?")
        moves = [SimpleNamespace(**{k: m.get(k) for k in ("vmid", "name", "type", "source", "target", "reason",
                                                          "detail", "ha_sid")}) for m in data["moves"]]
        if self.store.has_job(job_id):
            rows = [r["id"] for r in self.store.job_moves(job_id)]
            known = {r["id"]: r for r in self.store.job_moves(job_id)}
        else:
            rows = self.store.job_begin(job_id, str(data.get("kind") or "apply"), str(data.get("requested_by")),
                                        owner, float(data.get("started_at") or self.clock()), moves,
                                        str(data.get("detail") or ""))
            known = {}
        why = f"{owner} stopped leading before the job ended"
        pending = []
        for row, entry in zip(rows, data["moves"]):
            mine = known.get(row)
            if mine is not None and mine["status"] in ENDED:
                continue                                   # this node learnt how it ended already
            state = str(entry.get("state") or PLANNED)
            if state in ENDED:
                self.store.move_state(row, state, float(entry.get("ended_at") or self.clock()),
                                      entry.get("upid"), entry.get("error"))
                continue
            if entry.get("started_at"):
                self.store.move_state(row, state, float(entry["started_at"]), entry.get("upid"))
            pending.append(Pending(job_id, owner, row, {**entry, "state": state}, why))
        if not pending:
            self._finish_job(job_id, shared=True)
        return pending

    # -- finding out ---------------------------------------------------------------------------

    def run(self, shared: bool, stop: threading.Event) -> Summary | None:
        """Reconcile until every unfinished move has ended (or ``stop``)."""
        with self._lock:
            pending = self.gather(shared)
            if not pending:
                return None
            summary = Summary(len(pending), {}, sorted({p.job_id for p in pending}))
            log.info("reconciling %d unfinished moves of jobs %s", len(pending), ", ".join(summary.jobs))
            started = self.clock()
            while pending and not stop.is_set():
                self.pending = len(pending)
                pending = self._pass(pending, summary, give_up=self.clock() - started > self.give_up_s)
                if pending:
                    stop.wait(self.poll_s)
            self.pending = len(pending)
            for job_id in summary.jobs:
                if not any(p.job_id == job_id for p in pending):
                    self._finish_job(job_id, shared, summary)
            self.last = summary
            log.info("reconciled: %s", summary.line())
            return summary

    def _pass(self, pending: list[Pending], summary: Summary, give_up: bool) -> list[Pending]:
        client = self.client()
        places: dict[int, str] | None = None

        def where(vmid: int) -> str | None:
            nonlocal places
            if places is None:
                try:
                    places = {int(r["vmid"]): str(r.get("node")) for r in client.get("/cluster/resources", type="vm")
                              if r.get("vmid") is not None}
                except KeelError:
                    places = {}
            return places.get(int(vmid))

        left = []
        for p in pending:
            try:
                outcome = resolve(client, p, where, self.clock())
            except KeelError as err:
                p.error = str(err)
                outcome = None
                if give_up:
                    node = where(p.move["vmid"])
                    outcome = ((OK, None) if node == p.move["target"] else
                               (FAILED, f"outcome unknown: {p.error}" + (f"; the guest is on {node}" if node else "")))
            if outcome is None:
                left.append(p)
                continue
            state, error = outcome
            self.store.move_state(p.row, state, self.clock(), p.move.get("upid"), error)
            summary.ended[state] = summary.ended.get(state, 0) + 1
            log.info("job %s: %s (%s) %s -> %s: %s%s", p.job_id, p.move.get("name"), p.move["vmid"],
                     p.move["source"], p.move["target"], state, f" ({error})" if error else "")
        return left

    def _finish_job(self, job_id: str, shared: bool, summary: Summary | None = None) -> None:
        moves = self.store.job_moves(job_id)
        if any(m["status"] not in ENDED for m in moves):
            return
        counts: dict[str, int] = {}
        for m in moves:
            counts[m["status"]] = counts.get(m["status"], 0) + 1
        detail = (f"interrupted; reconciled by {self.node}: "
                  + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items())))
        self.store.job_end(job_id, "interrupted", self.clock(), detail)
        if shared and self.shared_dir and self.leads():
            journal.remove_shared(self.shared_dir, job_id)


def resolve(client: PveClient, p: Pending, where: Callable[[int], str | None],
            now: float) -> tuple[str, str | None] | None:
    """A move's outcome as the cluster tells it: (state, reason), or None while it runs."""
    m = p.move
    state = m["state"]
    vmid, target = int(m["vmid"]), str(m["target"])
    if state == PLANNED:
        return NOT_STARTED, f"not started: {p.why}"
    if not m.get("upid") and not m.get("ha_sid"):
        since = float(m.get("started_at") or m.get("planned_at") or 0)
        found = find_migration_task(client, SimpleNamespace(type=m["type"], source=m["source"], vmid=vmid),
                                    since, now)
        if found:
            m["upid"] = found
        else:
            node = where(vmid)
            if node == target:
                return OK, None
            return NOT_STARTED, (f"not started: {p.why} before PVE started its migration"
                                 + (f"; it is on {node}" if node else ""))
    if m.get("upid"):
        upid = str(m["upid"])
        status = client.get(f"/nodes/{parse_upid(upid).node}/tasks/{upid}/status")
        if status.get("status") != "stopped":
            return None
        exit_status = str(status.get("exitstatus", ""))
        if exit_status == "OK" or exit_status.startswith("WARNINGS"):
            return OK, None
        return FAILED, exit_status or "the migration task failed"
    manager = client.get("/cluster/ha/status/manager_status")
    service = (manager.get("manager_status", {}).get("service_status", {}) or {}).get(m["ha_sid"], {})
    if service.get("state") in ("migrate", "relocate"):
        return None
    node = where(vmid)
    if node == target and service.get("state") in ("started", None):
        return OK, None
    return FAILED, (f"the HA manager did not move it (state {service.get('state') or 'unknown'})"
                    + (f"; it is on {node}" if node else ""))

