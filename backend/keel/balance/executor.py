"""Running a plan on the cluster: each move checked, started as soon as it is safe, and
followed.

For each move: ask PVE first (``GET .../migrate``, which knows about passthrough devices,
storages and HA blockers that the snapshot cannot see); then migrate — HA guests through
the HA manager (``/cluster/ha/resources/{sid}/migrate`` or ``relocate``), judged done
when the CRM reports the guest started on the target (the queueing task says nothing);
others with the guest migrate API, followed by their task.  Moves stream through the
slots (``keel.balance.slots``): one starts as soon as the moves it depends on have ended
and ``concurrent`` and ``per_node`` allow, not when a whole wave is done.  A move PVE
refuses is left alone for a while (the next plan does not try it again at once) and the
rest goes on, except the moves that waited for it.  A migration that fails stops further
starts: the caller plans again from fresh state.  ``cancel`` stops new moves from
starting; running migrations finish (interrupting one half-way helps nobody).  Progress
events carry an ETA played forward from the migration speed measured so far.

Every move is accounted for (``keel.balance.journal``): the job and its moves are written
before the first starts, and each move's state as it changes.  Nothing is recorded that
did not happen: a migrate request that got no answer (a timeout, a lost connection) is
looked for among the guest's tasks before anything is said about it; a migration that
takes longer than ``move_timeout`` is followed to its end (and said to be slow), and one
whose task cannot be read any more is judged by where the guest is.  A move refused by
the leader fence (``FencedError``: this engine does not lead any more) is not started,
and neither is any after it.  ``abandon`` (the engine stopping) ends the run at once and
leaves what is unfinished in the journal for the reconciler.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from keel import words
from keel.balance import slots
from keel.balance.history import FAILED, NOT_STARTED, OK, RUNNING, STARTING
from keel.balance.journal import Entry, Journal
from keel.balance.plan import Move, Plan
from keel.balance.settings import BalancingSettings
from keel.errors import AuthError, FencedError, KeelError, UnavailableError
from keel.pve.client import PveClient
from keel.pve.tasks import find_migration_task
from keel.pve.upid import parse_upid

log = logging.getLogger("keel.balance")

BLOCK_S = 6 * 3600          # a guest PVE refused to move is left alone this long
HA_NO_START_S = 60          # the CRM must take up a command within this (it rounds every 10 s)
FIND_OUT_S = 30             # a migrate request without an answer: how long its task is looked for

Event = dict[str, Any]


@dataclass
class MoveResult:
    move: Move
    ok: bool
    error: str = ""
    upid: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    refused: bool = False           # PVE said no before it began: skipped, not a failure of the run


@dataclass
class _Running:
    move: Move
    entry: Entry
    started_at: float
    upid: str | None = None
    ha_seen_moving: bool = False
    result: MoveResult | None = None
    unanswered: str | None = None       # the migrate request got no answer: why
    refused: bool = False               # PVE refused this move before it began (not a failure of the run)
    moot: bool = False                  # the guest had left its source another way: not needed
    slow_said: bool = False
    unreadable_since: float | None = None


@dataclass
class Execution:
    plan_id: str
    results: list[MoveResult] = field(default_factory=list)
    cancelled: bool = False
    stopped_early: bool = False     # a failed migration ended the run before all moves
    fenced: bool = False            # this engine stopped leading: nothing more was started
    abandoned: bool = False         # the engine stopped: unfinished moves left to the reconciler
    plans: int = 1                  # how many plans it carried out (plans again around refusals)

    @property
    def ok(self) -> bool:
        """Every move made, or refused by PVE (skipped, as a plan skips what it knows PVE
        would refuse), and the run not cut short."""
        return all(r.ok or r.refused for r in self.results) and not self.stopped_early and not self.cancelled

    @property
    def refused(self) -> list[MoveResult]:
        return [r for r in self.results if r.refused]

    def then(self, more: "Execution") -> "Execution":
        """This run followed by ``more`` (a plan made again around what PVE refused)."""
        return Execution(self.plan_id, self.results + more.results, more.cancelled, more.stopped_early,
                         more.fenced, more.abandoned, self.plans + more.plans)


class Executor:
    def __init__(self, client: PveClient, settings: BalancingSettings, store: Any = None,
                 requested_by: str = "keel", on_event: Callable[[Event], None] | None = None,
                 cancel: threading.Event | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = 2.0,
                 journal: Journal | None = None, abandon: threading.Event | None = None,
                 cancel_reason: Callable[[], str | None] = lambda: None):
        self.client = client
        self.journal = journal or Journal(store, clock=clock)
        self.abandon = abandon or threading.Event()
        self.cancel_reason = cancel_reason
        self.settings = settings
        self.store = store
        self.requested_by = requested_by
        self.on_event = on_event or (lambda event: None)
        self.cancel = cancel or threading.Event()
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self._comigrating: set[str] = set()    # HA sids the CRM moves along with a partner

    def run(self, plan: Plan, job_id: str | None = None, kind: str = "apply") -> Execution:
        """Carry out ``plan``: each move starts as soon as it is safe and a slot is free
        (``keel.balance.slots``), and is followed to its end."""
        execution = Execution(job_id or uuid.uuid4().hex[:12])
        moves = list(plan.moves)
        total = len(moves)
        entries = self.journal.begin(execution.plan_id, kind, self.requested_by, moves, plan.reason)
        deps = slots.dependencies(moves)
        limits = slots.Slots(self.settings.limits.concurrent, self.settings.limits.per_node)
        waiting = list(range(total))
        running: dict[int, _Running] = {}
        ended_ok: set[int] = set()
        self._emit("plan", total=total, waves=len({m.wave for m in moves}), plan_id=execution.plan_id,
                   concurrent=limits.concurrent, eta_s=round(self._eta(moves, deps, limits, waiting, {},
                                                                         ended_ok, []), 1))
        try:
            while waiting or running:
                if self.abandon.is_set():
                    execution.abandoned = True
                    break
                if self.cancel.is_set() and not execution.fenced:
                    execution.cancelled = True
                stopping = execution.cancelled or execution.fenced or execution.stopped_early
                if not stopping:
                    self._not_reachable(moves, deps, waiting, running, ended_ok, entries)
                    for i in limits.startable(moves, deps, waiting, list(running), ended_ok):
                        if self.cancel.is_set() or execution.fenced:
                            break
                        waiting.remove(i)
                        running[i] = self._start(moves[i], entries[i], execution)
                elif not running:
                    break
                for i, item in list(running.items()):
                    if item.result is None:
                        self._poll(item)
                    if item.result is None:
                        continue
                    del running[i]
                    execution.results.append(item.result)
                    if item.result.ok or item.moot:         # moot: its source is vacated all the same
                        ended_ok.add(i)
                    elif not item.refused and item.entry.state == FAILED:
                        execution.stopped_early = bool(waiting)   # a migration failed: start no more
                    self._emit(_EVENT[item.entry.state], **_describe(item.result.move), upid=item.result.upid,
                               error=item.result.error, completed=len(execution.results), total=total,
                               eta_s=round(self._eta(moves, deps, limits, waiting, running, ended_ok,
                                                     execution.results), 1))
                if execution.fenced:
                    execution.cancelled = True
                if running and not any(item.result is not None for item in running.values()):
                    self.sleep(self.poll_s)
                elif not running and waiting and not limits.startable(moves, deps, waiting, [], ended_ok) \
                        and not stopping:
                    self._not_reachable(moves, deps, waiting, running, ended_ok, entries, final=True)
        finally:
            self._close(execution, entries)
        self._emit("finished", ok=execution.ok, cancelled=execution.cancelled,
                   completed=sum(r.ok for r in execution.results), total=total)
        return execution

    def _not_reachable(self, moves: list[Move], deps: list[set[int]], waiting: list[int],
                       running: dict[int, _Running], ended_ok: set[int], entries: list[Entry],
                       final: bool = False) -> None:
        """Moves that wait for one that did not end well never start: said now, with why."""
        for i in list(waiting):
            failed = [j for j in deps[i] if j not in ended_ok and j not in running and j not in waiting]
            if not failed and not final:
                continue
            waiting.remove(i)
            first = moves[failed[0]] if failed else None
            why = (f"not started: it waited for {first.name} ({first.vmid}) to leave or reach "
                   f"{', '.join(sorted(slots.touches(first) & slots.touches(moves[i])))}, which did not happen"
                   if first else "not started: no safe moment came")
            self.journal.update(entries[i], NOT_STARTED, error=why)
            self._emit("not_started", **_describe(moves[i]), error=why)

    def _eta(self, moves: list[Move], deps: list[set[int]], limits: slots.Slots, waiting: list[int],
             running: dict[int, _Running], ended_ok: set[int], results: list[MoveResult]) -> float:
        """Seconds left, from the plan's estimates scaled by how long migrations took so far."""
        took = [(r.ended_at - r.started_at, r.move.est_seconds) for r in results if r.ok and r.move.est_seconds > 0]
        scale = (sum(t for t, _ in took) / sum(e for _, e in took)) if took else 1.0
        now = self.clock()
        left = {i: max(0.0, moves[i].est_seconds * scale - (now - item.started_at)) for i, item in running.items()}
        expected = {i: moves[i].est_seconds * scale for i in waiting}
        return slots.eta(moves, deps, limits, waiting, left, ended_ok, expected)

    def _close(self, execution: Execution, entries: list[Entry]) -> None:
        """Say why each move that never began did not, and end the job in the journal."""
        if execution.abandoned or self.abandon.is_set():
            execution.abandoned = True
            self.journal.end("interrupted", abandoned=True)
            return
        if execution.fenced:
            why = "not started: this engine stopped leading the cluster before its turn"
        elif execution.cancelled:
            why = f"not started: cancelled ({self.cancel_reason() or 'the job was stopped'})"
        elif execution.stopped_early:
            why = "not started: an earlier move failed; the next plan starts from the cluster as it is"
        else:
            why = "not started"
        for entry in entries:
            if entry.state == "planned":
                self.journal.update(entry, NOT_STARTED, error=why)
        state = ("cancelled" if execution.cancelled else "done" if execution.ok else "failed")
        self.journal.end(state)

    # -- one move -------------------------------------------------------------------------

    def _start(self, move: Move, entry: Entry, execution: Execution) -> _Running:
        now = self.clock()
        item = _Running(move, entry, now)
        self._emit("start", **_describe(move), reason=move.reason, detail=move.detail)
        if move.ha_sid and move.ha_sid in self._comigrating:
            # a positive-affinity partner's HA migrate took this one along: follow it, ask nothing
            log.info("%s: %s (%s) moves with its HA partner", execution.plan_id, move.name, move.vmid)
            self.journal.update(entry, RUNNING)
            return item
        try:
            refusal = self._preflight(move)
        except UnavailableError as err:      # nothing was asked of PVE yet: not started
            self._finish(item, NOT_STARTED, f"not started: PVE did not answer its precheck ({err})", block=False)
            return item
        except AuthError as err:             # Keel's own privileges, not the guest's fault
            self._finish(item, FAILED, f"{err}; Keel's token needs the privileges docs/security.md lists",
                         block=False)
            return item
        except KeelError as err:             # PVE refused to look: leave the guest alone a while
            self._refused(item, str(err))
            return item
        if refusal:
            self._finish(item, FAILED, refusal, block=True)
            return item
        self.journal.update(entry, STARTING)
        try:
            item.upid = self._migrate(move)
        except FencedError as err:           # the request never left: this engine does not lead
            execution.fenced = True
            self._finish(item, NOT_STARTED, f"not started: {err}", block=False)
            return item
        except UnavailableError as err:      # no answer: it may have started; find out before saying
            item.unanswered = str(err)
            log.warning("%s: the migrate request of %s (%s) got no answer (%s); looking for its task",
                        execution.plan_id, move.name, move.vmid, err)
            return item
        except AuthError as err:             # Keel's own privileges, not the guest's fault
            self._finish(item, FAILED, f"{err}; Keel's token needs the privileges docs/security.md lists",
                         block=False)
            return item
        except KeelError as err:             # PVE refused this move: leave the guest alone a while
            self._refused(item, str(err))
            return item
        self.journal.update(entry, RUNNING, upid=item.upid)
        log.info("%s: migrating %s (%s) %s -> %s (%s, asked by %s) %s", execution.plan_id, move.name,
                 move.vmid, move.source, move.target, move.reason, self.requested_by, item.upid or "")
        return item

    def _refused(self, item: _Running, error: str) -> None:
        """PVE refused the move: a failure, and the guest is left alone a while; unless the guest
        is not on its source any more (moved meanwhile by HA, an admin, another job): then the
        move is not needed, and not started (nothing failed, the guest is not blocked)."""
        where = self._where(item.move.vmid)
        if where is not None and where != item.move.source:
            item.moot = True
            self._finish(item, NOT_STARTED, f"not needed: it is already on {where} (moved since the plan, not by "
                                            f"it)", block=False, refused=True)
        else:
            self._finish(item, FAILED, error, block=True)

    def _preflight(self, move: Move) -> str | None:
        kind = move.type
        path = f"/nodes/{move.source}/{kind}/{move.vmid}/migrate"
        answer = self.client.get(path, target=move.target)
        allowed = answer.get("allowed_nodes", answer.get("allowed-nodes")) or []
        not_allowed = answer.get("not_allowed_nodes", answer.get("not-allowed-nodes")) or {}
        if move.target in not_allowed:
            why = not_allowed[move.target]
            parts = []
            if why.get("unavailable_storages"):
                parts.append(f"storage {', '.join(why['unavailable_storages'])} not on {move.target}")
            for blocker in why.get("blocking-ha-resources", []) or []:
                parts.append(f"HA {blocker.get('cause', 'rule')} with {blocker.get('sid')}")
            return f"PVE will not move it to {move.target}: {'; '.join(parts) or 'not allowed'}"
        if allowed and move.target not in allowed:
            return f"PVE will not move it to {move.target} (allowed: {', '.join(allowed)})"
        devices = answer.get("local_resources") or []
        if devices:
            return f"{words.LOCAL_DEVICES}: {', '.join(devices)}"
        disks = [d for d in answer.get("local_disks") or [] if not d.get("cdrom")]
        if disks and not self.settings.with_local_disks:
            return f"{words.LOCAL_DISKS}: {', '.join(d.get('volid', '?') for d in disks)}"
        cdroms = [d for d in answer.get("local_disks") or [] if d.get("cdrom")]
        if cdroms:
            return f"a local CD-ROM image is attached: {', '.join(d.get('volid', '?') for d in cdroms)}"
        return None

    def _migrate(self, move: Move) -> str | None:
        if move.ha_sid:
            verb = "relocate" if move.type == "lxc" else "migrate"
            answer = self.client.post(f"/cluster/ha/resources/{move.ha_sid}/{verb}", node=move.target)
            blocking = (answer or {}).get("blocking-resources") if isinstance(answer, dict) else None
            if blocking:
                raise KeelError(f"HA refused: blocked by {', '.join(b.get('sid', '?') for b in blocking)}")
            along = (answer or {}).get("comigrated-resources") if isinstance(answer, dict) else None
            for entry in along or []:
                self._comigrating.add(entry.get("sid") if isinstance(entry, dict) else str(entry))
            return None
        params: dict[str, Any] = {"target": move.target}
        if move.type == "qemu":
            if move.running:
                params["online"] = 1
            if move.disk_bytes:
                params["with-local-disks"] = 1
        elif move.running:
            params["restart"] = 1
        return self.client.post(f"/nodes/{move.source}/{move.type}/{move.vmid}/migrate", **params)

    # -- following ------------------------------------------------------------------------

    def _poll(self, item: _Running) -> None:
        """One look at a running move."""
        timeout = self.settings.limits.move_timeout_s
        try:
            if item.unanswered is not None:
                self._find_out(item)
            else:
                self._check(item)
            item.unreadable_since = None
        except KeelError as err:
            log.warning("checking %s: %s", item.move.name, err)
            self._unreadable(item, str(err), timeout)
        if item.result is None and not item.slow_said and self.clock() - item.started_at > timeout:
            item.slow_said = True          # said once; followed to its end all the same
            self._emit("slow", **_describe(item.move), upid=item.upid,
                       detail=f"still migrating after {timeout:.0f}s; followed until PVE says it ended")

    def _unreadable(self, item: _Running, error: str, timeout: float) -> None:
        """Its task cannot be read (its node is gone, PVE does not answer): after
        ``move_timeout`` of that, the guest's place in the cluster is the outcome."""
        now = self.clock()
        if item.unreadable_since is None:
            item.unreadable_since = now
        if item.result is not None or now - item.unreadable_since <= timeout:
            return
        node = self._where(item.move.vmid)
        if node == item.move.target:
            self._finish(item, OK, "", block=False)
        elif node is not None:
            self._finish(item, FAILED, f"its migration could not be followed for {timeout:.0f}s ({error}); "
                                       f"the guest is on {node}", block=False)

    def _where(self, vmid: int) -> str | None:
        """The node a guest is on now, as the cluster says (None: cannot tell)."""
        try:
            rows = self.client.get("/cluster/resources", type="vm")
        except KeelError:
            return None
        found = [r.get("node") for r in rows or () if r.get("vmid") == vmid]
        return str(found[0]) if found else None

    def _find_out(self, item: _Running) -> None:
        """The migrate request got no answer: its task is the truth, or the guest's place."""
        move = item.move
        upid = find_migration_task(self.client, move, item.started_at, self.clock())
        if upid:
            item.upid, item.unanswered = upid, None
            self.journal.update(item.entry, RUNNING, upid=upid)
            log.info("the migration of %s (%s) did start: %s", move.name, move.vmid, upid)
            return
        if move.ha_sid:
            item.unanswered = None          # the CRM's view decides (_check)
            self.journal.update(item.entry, RUNNING)
            return
        if self._where(move.vmid) == move.target:
            self._finish(item, OK, "", block=False)
            return
        if self.clock() - item.started_at > FIND_OUT_S:
            self._finish(item, NOT_STARTED, f"not started: the migrate request got no answer "
                                            f"({item.unanswered}) and no migration task appeared within "
                                            f"{FIND_OUT_S:.0f}s; the guest is still on {move.source}", block=False)

    def _check(self, item: _Running) -> None:
        move = item.move
        if item.upid:
            node = parse_upid(item.upid).node
            status = self.client.get(f"/nodes/{node}/tasks/{item.upid}/status")
            if status.get("status") == "stopped":
                exit_status = str(status.get("exitstatus", ""))
                ok = exit_status == "OK" or exit_status.startswith("WARNINGS")
                self._finish(item, OK if ok else FAILED, "" if ok else exit_status, block=False)
            return
        # HA: the CRM's view is the truth.
        manager = self.client.get("/cluster/ha/status/manager_status")
        service = (manager.get("manager_status", {}).get("service_status", {}) or {}).get(move.ha_sid, {})
        state, node = service.get("state"), service.get("node")
        if state in ("migrate", "relocate"):
            item.ha_seen_moving = True
            return
        if state == "started" and node == move.target:
            self._finish(item, OK, "", block=False)
            return
        if state in ("error", "fence", "recovery", "freeze"):
            self._finish(item, FAILED, f"HA state {state}", block=False)
            return
        waited = self.clock() - item.started_at
        if item.ha_seen_moving or waited > HA_NO_START_S:
            error = self._ha_task_error(move, item.started_at) or (
                "the HA manager did not migrate it" if not item.ha_seen_moving else "migration failed")
            self._finish(item, FAILED, error, block=not item.ha_seen_moving)

    def _ha_task_error(self, move: Move, since: float) -> str | None:
        kind = "qmigrate" if move.type == "qemu" else "vzmigrate"
        tasks = self.client.get(f"/nodes/{move.source}/tasks", typefilter=kind, vmid=move.vmid,
                                since=int(since) - 5, source="all", limit=5)
        for task in tasks:
            status = task.get("status")
            if status and status not in ("OK", "RUNNING") and not str(status).startswith("WARNINGS"):
                return str(status)
        return None

    def _finish(self, item: _Running, state: str, error: str, block: bool, refused: bool | None = None) -> None:
        now = self.clock()
        ok = state == OK
        refused = block if refused is None else refused
        item.refused = refused              # PVE said no to this move (or it was moot): the others may go on
        item.result = MoveResult(item.move, ok, error, item.upid, item.started_at, now, refused=refused)
        self.journal.update(item.entry, state, upid=item.upid, error=error or None)
        if self.store is not None and not ok and block:
            self.store.block(item.move.vmid, now + BLOCK_S, error)
        if not ok:
            log.warning("moving %s (%s) %s -> %s %s: %s", item.move.name, item.move.vmid,
                        item.move.source, item.move.target,
                        "not started" if state == NOT_STARTED else "failed", error)

    def _emit(self, event: str, **fields: Any) -> None:
        try:
            self.on_event({"event": event, "time": self.clock(), **fields})
        except Exception:   # a broken progress printer must not stop migrations
            log.exception("progress callback failed")


def _describe(move: Move) -> dict[str, Any]:
    return {"vmid": move.vmid, "name": move.name, "source": move.source, "target": move.target,
            "wave": move.wave}


_EVENT = {OK: "done", FAILED: "failed", NOT_STARTED: "not_started"}


REPLANS = 2                 # plans made again around moves PVE refused, after the first


def carry_out(executor: Executor, plan: Plan, replan: Callable[[], Plan] | None = None,
              job_id: str | None = None, kind: str = "apply") -> Execution:
    """Run ``plan``; where PVE refused moves that the plan could not foresee, plan again
    from the cluster as it is now (the refused guests are left alone a while: blocked in
    the store) and run that, up to ``REPLANS`` times, so that one apply ends level rather
    than short of it."""
    execution = executor.run(plan, job_id=job_id, kind=kind)
    for _ in range(REPLANS):
        if (replan is None or not execution.refused or execution.cancelled or execution.fenced
                or execution.stopped_early or execution.abandoned):
            break
        again = replan()
        if not again.moves:
            break
        log.info("%s: %d moves refused by PVE; planned again around them: %d moves",
                 execution.plan_id, len(execution.refused), len(again.moves))
        executor._emit("replanned", refused=len(execution.refused), moves=len(again.moves))
        execution = execution.then(executor.run(again, job_id=execution.plan_id, kind=kind))
    return execution
