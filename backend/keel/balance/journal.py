"""What an execution planned and did, written down as it happens.

A job and every move it plans are written before the first move starts; each move's
state is written as it changes: ``planned``, ``starting`` (the request is on its way),
``running`` (with its UPID, once PVE gave one), then ``ok``, ``failed`` (with PVE's
reason) or ``not_started`` (with the reason it never began).  Two places hold it:

* the node's store (SQLite): the history the API, the CLI and the tab show;
* while this engine leads, ``<shared_dir>/jobs/<id>.json`` in pmxcfs, so that whichever
  node leads next finds a job its predecessor did not finish, follows its migrations to
  their end and says what became of the rest (``keel.engine.reconcile``).  The file goes
  when the job ends.

Whoever finds an unfinished job (this node after a crash, another after taking over)
reconciles it; ``LIVE`` names the jobs being carried out in this process, which nobody
may reconcile from under it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from keel.errors import KeelError
from keel.files import atomic_write
from keel.balance.history import ENDED, NOT_STARTED, PLANNED

log = logging.getLogger("keel.balance")

LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()


@dataclass
class Entry:
    """One move's record."""
    move: Any
    row: int | None = None
    state: str = PLANNED
    upid: str | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        m = self.move
        return {"row": self.row, "vmid": m.vmid, "name": m.name, "type": m.type, "source": m.source,
                "target": m.target, "reason": m.reason, "detail": m.detail,
                "ha_sid": getattr(m, "ha_sid", None), "state": self.state, "upid": self.upid,
                "error": self.error, "started_at": self.started_at, "ended_at": self.ended_at}


def jobs_dir(shared_dir: str | Path) -> Path:
    return Path(shared_dir) / "jobs"


def is_live(job_id: str) -> bool:
    with _LIVE_LOCK:
        return job_id in LIVE


class Journal:
    def __init__(self, store: Any = None, shared_dir: str | Path | None = None, node: str = "",
                 may_share: Callable[[], bool] = lambda: True, clock: Callable[[], float] = time.time):
        self.store = store
        self.shared = jobs_dir(shared_dir) if shared_dir else None
        self.node = node
        self.may_share = may_share
        self.clock = clock
        self.job_id = ""
        self.head: dict[str, Any] = {}
        self.entries: list[Entry] = []
        self._lock = threading.Lock()

    def begin(self, job_id: str, kind: str, requested_by: str, moves: Iterable[Any],
              detail: str = "") -> list[Entry]:
        now = self.clock()
        self.job_id = job_id
        self.entries = [Entry(m) for m in moves]
        with _LIVE_LOCK:
            LIVE.add(job_id)
        if self.store is not None:
            rows = self.store.job_begin(job_id, kind, requested_by, self.node, now,
                                        [e.move for e in self.entries], detail)
            for entry, row in zip(self.entries, rows):
                entry.row = row
        self.head = {"id": job_id, "kind": kind, "node": self.node, "requested_by": requested_by,
                     "started_at": now, "detail": detail}
        self._share()
        return self.entries

    def update(self, entry: Entry, state: str, upid: str | None = None, error: str | None = None) -> None:
        now = self.clock()
        with self._lock:
            entry.state = state
            entry.upid = upid or entry.upid
            entry.error = error if error is not None else entry.error
            if state in ENDED:
                entry.ended_at = now
            elif entry.started_at is None:
                entry.started_at = now
        if self.store is not None and entry.row is not None:
            self.store.move_state(entry.row, state, now, upid, error)
        self._share()

    def end(self, state: str, detail: str | None = None, abandoned: bool = False) -> None:
        """The job is over (``abandoned``: this process stops with moves unfinished, which
        stay in both places for the reconciler)."""
        try:
            if abandoned:
                return
            for entry in self.entries:                  # nothing may end up planned forever
                if entry.state == PLANNED:
                    self.update(entry, NOT_STARTED, error=entry.error or "not started: the job ended first")
            if self.store is not None:
                self.store.job_end(self.job_id, state, self.clock(), detail)
            if self.shared is not None and self.may_share():
                try:
                    (self.shared / f"{self.job_id}.json").unlink(missing_ok=True)
                except OSError as err:
                    log.warning("cannot remove the journal of job %s: %s", self.job_id, err)
        finally:
            with _LIVE_LOCK:
                LIVE.discard(self.job_id)

    def _share(self) -> None:
        """The journal in pmxcfs, while this engine leads (after that, the next leader owns it)."""
        if self.shared is None or not self.may_share():
            return
        with self._lock:
            data = {**self.head, "moves": [e.to_json() for e in self.entries], "written_at": self.clock()}
        try:
            atomic_write(self.shared / f"{self.job_id}.json", json.dumps(data, separators=(",", ":")) + "\n")
        except KeelError as err:
            log.warning("cannot write the journal of job %s: %s", self.job_id, err)


def read_shared(shared_dir: str | Path) -> list[dict[str, Any]]:
    """Every journal in the shared directory (unfinished jobs), oldest first."""
    folder = jobs_dir(shared_dir)
    found = []
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            log.warning("journal %s cannot be read: %s", path, err)
            continue
        if isinstance(data, dict) and isinstance(data.get("moves"), list) and data.get("id"):
            found.append(data)
    return sorted(found, key=lambda d: d.get("started_at") or 0)


def remove_shared(shared_dir: str | Path, job_id: str) -> None:
    try:
        (jobs_dir(shared_dir) / f"{job_id}.json").unlink(missing_ok=True)
    except OSError as err:
        log.warning("cannot remove the journal of job %s: %s", job_id, err)
