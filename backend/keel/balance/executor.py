"""Running a plan on the cluster: wave by wave, each move checked, started and followed.

For each move: ask PVE first (``GET .../migrate``, which knows about passthrough devices,
storages and HA blockers that the snapshot cannot see); then migrate — HA guests through
the HA manager (``/cluster/ha/resources/{sid}/migrate`` or ``relocate``), judged done
when the CRM reports the guest started on the target (the queueing task says nothing);
others with the guest migrate API, followed by their task.  A move that fails leaves the
guest where it is; PVE's refusals block the guest for a while so the next plan does not
try again at once.  When a wave has a failure, no further wave starts: the caller plans
again from fresh state.  ``cancel`` stops new moves from starting; running migrations
finish (interrupting one half-way helps nobody).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from keel import words
from keel.balance.plan import Move, Plan
from keel.balance.settings import BalancingSettings
from keel.errors import AuthError, KeelError, UnavailableError
from keel.pve.client import PveClient
from keel.pve.upid import parse_upid

log = logging.getLogger("keel.balance")

BLOCK_S = 6 * 3600          # a guest PVE refused to move is left alone this long
HA_NO_START_S = 60          # the CRM must take up a command within this (it rounds every 10 s)

Event = dict[str, Any]


@dataclass
class MoveResult:
    move: Move
    ok: bool
    error: str = ""
    upid: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0


@dataclass
class _Running:
    move: Move
    record: int | None
    started_at: float
    upid: str | None = None
    ha_seen_moving: bool = False
    result: MoveResult | None = None


@dataclass
class Execution:
    plan_id: str
    results: list[MoveResult] = field(default_factory=list)
    cancelled: bool = False
    stopped_early: bool = False     # a failure ended the run before all waves

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results) and not self.stopped_early and not self.cancelled


class Executor:
    def __init__(self, client: PveClient, settings: BalancingSettings, store: Any = None,
                 requested_by: str = "keel", on_event: Callable[[Event], None] | None = None,
                 cancel: threading.Event | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = 2.0):
        self.client = client
        self.settings = settings
        self.store = store
        self.requested_by = requested_by
        self.on_event = on_event or (lambda event: None)
        self.cancel = cancel or threading.Event()
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self._comigrating: set[str] = set()    # HA sids the CRM moves along with a partner

    def run(self, plan: Plan) -> Execution:
        execution = Execution(uuid.uuid4().hex[:12])
        total = len(plan.moves)
        waves = sorted({m.wave for m in plan.moves})
        self._emit("plan", total=total, waves=len(waves), plan_id=execution.plan_id)
        for wave in waves:
            if self.cancel.is_set():
                execution.cancelled = True
                break
            batch = [m for m in plan.moves if m.wave == wave]
            self._emit("wave", wave=wave, moves=len(batch))
            running = [self._start(m, execution.plan_id) for m in batch if not self.cancel.is_set()]
            self._follow(running)
            for item in running:
                assert item.result is not None
                execution.results.append(item.result)
                self._emit("done" if item.result.ok else "failed", **_describe(item.result.move),
                           upid=item.result.upid, error=item.result.error,
                           completed=len(execution.results), total=total)
            if any(not item.result.ok for item in running if item.result):
                execution.stopped_early = wave != waves[-1]
                break
            if len(running) < len(batch):
                execution.cancelled = True
                break
        self._emit("finished", ok=execution.ok, cancelled=execution.cancelled,
                   completed=sum(r.ok for r in execution.results), total=total)
        return execution

    # -- one move -------------------------------------------------------------------------

    def _start(self, move: Move, plan_id: str) -> _Running:
        now = self.clock()
        record = None
        if self.store is not None:
            record = self.store.move_started(plan_id, move, self.requested_by, None, now)
        item = _Running(move, record, now)
        self._emit("start", **_describe(move), reason=move.reason, detail=move.detail)
        if move.ha_sid and move.ha_sid in self._comigrating:
            # a positive-affinity partner's HA migrate took this one along: follow it, ask nothing
            log.info("%s: %s (%s) moves with its HA partner", plan_id, move.name, move.vmid)
            return item
        try:
            refusal = self._preflight(move)
            if refusal:
                self._finish(item, False, refusal, block=True)
                return item
            item.upid = self._migrate(move)
        except UnavailableError as err:      # PVE unreachable or busy: try again next round
            self._finish(item, False, str(err), block=False)
            return item
        except AuthError as err:             # Keel's own privileges, not the guest's fault
            self._finish(item, False, f"{err}; Keel's token needs the privileges docs/security.md lists",
                         block=False)
            return item
        except KeelError as err:             # PVE refused this move: leave the guest alone a while
            self._finish(item, False, str(err), block=True)
            return item
        log.info("%s: migrating %s (%s) %s -> %s (%s, asked by %s) %s", plan_id, move.name,
                 move.vmid, move.source, move.target, move.reason, self.requested_by, item.upid or "")
        return item

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

    def _follow(self, running: list[_Running]) -> None:
        timeout = self.settings.limits.move_timeout_s
        while True:
            waiting = [item for item in running if item.result is None]
            if not waiting:
                return
            for item in waiting:
                try:
                    self._check(item)
                except KeelError as err:
                    log.warning("checking %s: %s", item.move.name, err)
                if item.result is None and self.clock() - item.started_at > timeout:
                    self._finish(item, False, f"still not done after {timeout:.0f}s", block=False)
            if any(item.result is None for item in running):
                self.sleep(self.poll_s)

    def _check(self, item: _Running) -> None:
        move = item.move
        if item.upid:
            node = parse_upid(item.upid).node
            status = self.client.get(f"/nodes/{node}/tasks/{item.upid}/status")
            if status.get("status") == "stopped":
                exit_status = str(status.get("exitstatus", ""))
                ok = exit_status == "OK" or exit_status.startswith("WARNINGS")
                self._finish(item, ok, "" if ok else exit_status, block=False)
            return
        # HA: the CRM's view is the truth.
        manager = self.client.get("/cluster/ha/status/manager_status")
        service = (manager.get("manager_status", {}).get("service_status", {}) or {}).get(move.ha_sid, {})
        state, node = service.get("state"), service.get("node")
        if state in ("migrate", "relocate"):
            item.ha_seen_moving = True
            return
        if state == "started" and node == move.target:
            self._finish(item, True, "", block=False)
            return
        if state in ("error", "fence", "recovery", "freeze"):
            self._finish(item, False, f"HA state {state}", block=False)
            return
        waited = self.clock() - item.started_at
        if item.ha_seen_moving or waited > HA_NO_START_S:
            error = self._ha_task_error(move, item.started_at) or (
                "the HA manager did not migrate it" if not item.ha_seen_moving else "migration failed")
            self._finish(item, False, error, block=not item.ha_seen_moving)

    def _ha_task_error(self, move: Move, since: float) -> str | None:
        kind = "qmigrate" if move.type == "qemu" else "vzmigrate"
        tasks = self.client.get(f"/nodes/{move.source}/tasks", typefilter=kind, vmid=move.vmid,
                                since=int(since) - 5, source="all", limit=5)
        for task in tasks:
            status = task.get("status")
            if status and status not in ("OK", "RUNNING") and not str(status).startswith("WARNINGS"):
                return str(status)
        return None

    def _finish(self, item: _Running, ok: bool, error: str, block: bool) -> None:
        now = self.clock()
        item.result = MoveResult(item.move, ok, error, item.upid, item.started_at, now)
        if self.store is not None and item.record is not None:
            self.store.move_ended(item.record, ok, now, error or None, item.upid)
            if not ok and block:
                self.store.block(item.move.vmid, now + BLOCK_S, error)
        if not ok:
            log.warning("moving %s (%s) %s -> %s failed: %s", item.move.name, item.move.vmid,
                        item.move.source, item.move.target, error)

    def _emit(self, event: str, **fields: Any) -> None:
        try:
            self.on_event({"event": event, "time": self.clock(), **fields})
        except Exception:   # a broken progress printer must not stop migrations
            log.exception("progress callback failed")


def _describe(move: Move) -> dict[str, Any]:
    return {"vmid": move.vmid, "name": move.name, "source": move.source, "target": move.target,
            "wave": move.wave}
