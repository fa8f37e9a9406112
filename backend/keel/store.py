"""Keel's memory between rounds and restarts: SQLite (``/var/lib/keel/keel.db`` by default).

Tables: ``jobs`` (every execution: an apply, an evacuation, a balancing round's moves,
a reconciliation; written before its first move starts), ``moves`` (every move a job
planned, with its state as it changes — planned, starting, running with its UPID, ok,
failed with the reason, not_started with the reason — who asked and how it ended),
``decisions`` (each round's verdict), ``samples`` (load samples for smoothing, pruned to
the window), ``blocked`` (guests PVE refused to move, until when), ``maintenance``
(nodes put in maintenance through Keel) and ``state`` (small values such as the hold
counter).  Writes are committed at once; old rows are pruned.  The database is opened
per use with a timeout, so the CLI and the engine can share it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from keel.balance.history import ENDED, FAILED, OK, PLANNED, RUNNING, UNFINISHED, Blocked, History, MoveRecord
from keel.errors import InvalidError
from keel.files import atomic_write

DEFAULT_PATH = Path("/var/lib/keel/keel.db")
KEEP_MOVES_S = 90 * 86400
KEEP_DECISIONS_S = 14 * 86400
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS moves (
    id INTEGER PRIMARY KEY AUTOINCREMENT, plan_id TEXT, vmid INTEGER, name TEXT, type TEXT,
    source TEXT, target TEXT, reason TEXT, detail TEXT, requested_by TEXT,
    started_at REAL, ended_at REAL, status TEXT, upid TEXT, error TEXT);
CREATE INDEX IF NOT EXISTS moves_vmid ON moves (vmid, ended_at);
CREATE TABLE IF NOT EXISTS decisions (t REAL, verdict TEXT, reason TEXT, figure REAL, moves INTEGER);
CREATE TABLE IF NOT EXISTS samples (t REAL, key TEXT, cpu REAL, mem REAL);
CREATE INDEX IF NOT EXISTS samples_key ON samples (key, t);
CREATE TABLE IF NOT EXISTS blocked (vmid INTEGER PRIMARY KEY, until REAL, reason TEXT);
CREATE TABLE IF NOT EXISTS maintenance (node TEXT PRIMARY KEY, since REAL, requested_by TEXT);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT, requested_by TEXT, node TEXT, started_at REAL, ended_at REAL,
    state TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS job_outcomes (id TEXT PRIMARY KEY, promised TEXT, achieved TEXT);
"""
# Columns added after a table first shipped: (table, column, type).
_ADDED = (("moves", "planned_at", "REAL"), ("moves", "node", "TEXT"), ("moves", "ha_sid", "TEXT"))
_MOVE_KEYS = ("id", "plan_id", "vmid", "name", "type", "source", "target", "reason", "detail",
              "requested_by", "started_at", "ended_at", "status", "upid", "error", "planned_at", "node",
              "ha_sid")


def default_path(environ: dict[str, str] | None = None) -> Path:
    """$KEEL_STORE, else /var/lib/keel/keel.db if writable, else the user's state dir."""
    env = os.environ if environ is None else environ
    if env.get("KEEL_STORE"):
        return Path(env["KEEL_STORE"])
    if os.access(DEFAULT_PATH.parent, os.W_OK):
        return DEFAULT_PATH
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "keel" / "keel.db"


class Store:
    """Keel's history.  With ``shared_dir`` (the engine's ``/etc/pve/keel``), maintenance is
    kept cluster-wide in ``maintenance.json`` there instead, so that whichever node leads
    next knows which nodes are being emptied."""

    def __init__(self, path: str | Path, shared_dir: str | Path | None = None):
        self.path = Path(path)
        self.shared = Path(shared_dir) / "maintenance.json" if shared_dir else None
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = self._connect()
            try:
                db.executescript(_SCHEMA)
                for table, column, kind in _ADDED:
                    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    if column not in have:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            finally:
                db.close()
        except (OSError, sqlite3.Error) as err:
            raise InvalidError(f"cannot open Keel's store {self.path}: {err}") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            db.close()
            raise
        return db

    def _run(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            db = self._connect()
            try:
                return db.execute(sql, tuple(args)).fetchall()
            finally:
                db.close()

    # -- jobs and their moves ----------------------------------------------------------------

    def job_begin(self, job_id: str, kind: str, requested_by: str, node: str, at: float,
                  moves: Iterable[Any], detail: str = "") -> list[int]:
        """A job and every move it plans, as ``planned``, in one transaction: written before
        the first move starts.  Returns the moves' row ids in order."""
        with self._lock:
            db = self._connect()
            try:
                db.execute("BEGIN")
                # a job that plans again around refused moves begins again under its id
                db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET "
                           "ended_at=NULL, state='running'",
                           (job_id, kind, requested_by, node, at, None, "running", detail))
                ids = [int(db.execute(
                    "INSERT INTO moves (plan_id, vmid, name, type, source, target, reason, detail, "
                    "requested_by, planned_at, status, node, ha_sid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
                    "RETURNING id",
                    (job_id, m.vmid, m.name, m.type, m.source, m.target, m.reason, m.detail, requested_by,
                     at, PLANNED, node, getattr(m, "ha_sid", None))).fetchone()[0]) for m in moves]
                db.execute("COMMIT")
                return ids
            finally:
                db.close()

    def move_state(self, move_id: int, status: str, at: float, upid: str | None = None,
                   error: str | None = None) -> None:
        """A move's new state: ``starting`` and ``running`` set when it started, the ended
        states when it ended; the UPID and the reason are kept once known."""
        if status in ENDED:
            self._run("UPDATE moves SET ended_at=?, status=?, error=?, upid=COALESCE(?, upid) WHERE id=?",
                      (at, status, error, upid, move_id))
        else:
            self._run("UPDATE moves SET started_at=COALESCE(started_at, ?), status=?, upid=COALESCE(?, upid) "
                      "WHERE id=?", (at, status, upid, move_id))

    def job_end(self, job_id: str, state: str, at: float, detail: str | None = None) -> None:
        self._run("UPDATE jobs SET ended_at=?, state=?, detail=COALESCE(?, detail) WHERE id=?",
                  (at, state, detail, job_id))

    def jobs(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest jobs, each with what its plan promised and what was measured after it
        (``keel.engine.outcome``; None until recorded)."""
        keys = ("id", "kind", "requested_by", "node", "started_at", "ended_at", "state", "detail")
        rows = self._run(f"SELECT {', '.join('jobs.' + k for k in keys)}, o.promised, o.achieved FROM jobs "
                         f"LEFT JOIN job_outcomes o ON o.id = jobs.id ORDER BY started_at DESC LIMIT ?", (limit,))
        return [{**dict(zip(keys, row)), "promised": json.loads(row[-2]) if row[-2] else None,
                 "achieved": json.loads(row[-1]) if row[-1] else None} for row in rows]

    def job_outcome(self, job_id: str, promised: Any = None, achieved: Any = None) -> None:
        """Records a job's promise (before it starts) or what was achieved (after it ended)."""
        self._run("INSERT INTO job_outcomes (id, promised, achieved) VALUES (?,?,?) ON CONFLICT(id) DO UPDATE "
                  "SET promised=COALESCE(excluded.promised, promised), achieved=COALESCE(excluded.achieved, achieved)",
                  (job_id, None if promised is None else json.dumps(promised),
                   None if achieved is None else json.dumps(achieved)))

    def job_moves(self, job_id: str) -> list[dict[str, Any]]:
        return [dict(zip(_MOVE_KEYS, row)) for row in self._run(
            f"SELECT {', '.join(_MOVE_KEYS)} FROM moves WHERE plan_id=? ORDER BY id", (job_id,))]

    def unfinished_moves(self) -> list[dict[str, Any]]:
        """Moves whose job ended without saying how they ended (a crash, a lost lease)."""
        marks = ",".join("?" * len(UNFINISHED))
        return [dict(zip(_MOVE_KEYS, row)) for row in self._run(
            f"SELECT {', '.join(_MOVE_KEYS)} FROM moves WHERE status IN ({marks}) ORDER BY id", UNFINISHED)]

    def unfinished_jobs(self) -> list[str]:
        return [row[0] for row in self._run("SELECT id FROM jobs WHERE state='running'")]

    def has_job(self, job_id: str) -> bool:
        return bool(self._run("SELECT 1 FROM jobs WHERE id=?", (job_id,)))

    def move_started(self, plan_id: str, move: Any, requested_by: str, upid: str | None,
                     at: float) -> int:
        """One move on its own, started now (a job of one; tests and tools)."""
        [row] = self.job_begin(plan_id, "move", requested_by, "", at, [move])
        self.move_state(row, RUNNING, at, upid)
        return row

    def move_ended(self, move_id: int, ok: bool, at: float, error: str | None = None,
                   upid: str | None = None) -> None:
        self.move_state(move_id, OK if ok else FAILED, at, upid, error)

    def moves(self, limit: int = 100, since: float = 0.0) -> list[dict[str, Any]]:
        rows = self._run(f"SELECT {', '.join(_MOVE_KEYS)} FROM moves "
                         "WHERE COALESCE(started_at, planned_at) >= ? ORDER BY id DESC LIMIT ?", (since, limit))
        return [dict(zip(_MOVE_KEYS, row)) for row in rows]

    def running_moves(self) -> list[dict[str, Any]]:
        return [m for m in self.moves(limit=1000) if m["status"] == RUNNING]

    # -- what the planner needs ----------------------------------------------------------

    def history(self, now: float) -> History:
        moves = tuple(MoveRecord(vmid, source, target, ended, status == "ok") for vmid, source, target, ended, status
                      in self._run("SELECT vmid, source, target, ended_at, status FROM moves "
                                   "WHERE status IN ('ok', 'failed') AND ended_at > ?", (now - KEEP_MOVES_S,)))
        blocked = {vmid: Blocked(until, reason) for vmid, until, reason
                   in self._run("SELECT vmid, until, reason FROM blocked WHERE until > ?", (now,))}
        maintenance = frozenset(self.maintenance_nodes())
        return History(moves, blocked, maintenance, int(self.get("hold_rounds", 0)))

    def block(self, vmid: int, until: float, reason: str) -> None:
        self._run("INSERT OR REPLACE INTO blocked VALUES (?,?,?)", (vmid, until, reason))

    # -- maintenance -----------------------------------------------------------------------

    def maintenance_enter(self, node: str, requested_by: str, at: float) -> None:
        if self.shared is not None:
            with self._lock:
                nodes = self._shared_read()
                nodes[node] = {"since": at, "requested_by": requested_by}
                self._shared_write(nodes)
            return
        self._run("INSERT OR REPLACE INTO maintenance VALUES (?,?,?)", (node, at, requested_by))

    def maintenance_leave(self, node: str) -> bool:
        if self.shared is not None:
            with self._lock:
                nodes = self._shared_read()
                present = nodes.pop(node, None) is not None
                if present:
                    self._shared_write(nodes)
            return present
        present = bool(self._run("SELECT 1 FROM maintenance WHERE node=?", (node,)))
        self._run("DELETE FROM maintenance WHERE node=?", (node,))
        return present

    def maintenance_nodes(self) -> dict[str, dict[str, Any]]:
        if self.shared is not None:
            return self._shared_read()
        return {node: {"since": since, "requested_by": by}
                for node, since, by in self._run("SELECT node, since, requested_by FROM maintenance")}

    def _shared_read(self) -> dict[str, dict[str, Any]]:
        assert self.shared is not None
        try:
            data = json.loads(self.shared.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise InvalidError(f"cannot read {self.shared}: {err}") from None
        return {str(k): v for k, v in data.get("nodes", {}).items()} if isinstance(data, dict) else {}

    def _shared_write(self, nodes: dict[str, dict[str, Any]]) -> None:
        assert self.shared is not None
        atomic_write(self.shared, json.dumps({"nodes": nodes}, indent=1, sort_keys=True) + "\n")

    # -- pruning ---------------------------------------------------------------------------

    def prune(self, now: float) -> None:
        """Drop what is older than anyone asks for: moves after 90 days, blocks once over."""
        self._run("DELETE FROM moves WHERE ended_at IS NOT NULL AND ended_at < ?", (now - KEEP_MOVES_S,))
        self._run("DELETE FROM job_outcomes WHERE id IN (SELECT id FROM jobs WHERE ended_at IS NOT NULL AND "
                  "ended_at < ?)", (now - KEEP_MOVES_S,))
        self._run("DELETE FROM jobs WHERE ended_at IS NOT NULL AND ended_at < ?", (now - KEEP_MOVES_S,))
        self._run("DELETE FROM blocked WHERE until < ?", (now,))
        self._run("DELETE FROM decisions WHERE t < ?", (now - KEEP_DECISIONS_S,))

    # -- rounds ----------------------------------------------------------------------------

    def decision(self, at: float, verdict: str, reason: str, figure: float, moves: int) -> None:
        self._run("INSERT INTO decisions VALUES (?,?,?,?,?)", (at, verdict, reason, figure, moves))
        self._run("DELETE FROM decisions WHERE t < ?", (at - KEEP_DECISIONS_S,))

    def decisions(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._run("SELECT t, verdict, reason, figure, moves FROM decisions ORDER BY t DESC LIMIT ?",
                         (limit,))
        return [dict(zip(("t", "verdict", "reason", "figure", "moves"), row)) for row in rows]

    def add_samples(self, at: float, samples: dict[str, tuple[float, float]], keep_s: float) -> None:
        with self._lock:
            db = self._connect()
            try:
                db.execute("BEGIN")
                db.executemany("INSERT INTO samples VALUES (?,?,?,?)",
                               [(at, key, cpu, mem) for key, (cpu, mem) in samples.items()])
                db.execute("DELETE FROM samples WHERE t < ?", (at - keep_s,))
                db.execute("COMMIT")
            finally:
                db.close()

    def samples(self, since: float) -> dict[str, list[tuple[float, float]]]:
        result: dict[str, list[tuple[float, float]]] = {}
        for key, cpu, mem in self._run("SELECT key, cpu, mem FROM samples WHERE t >= ? ORDER BY t",
                                       (since,)):
            result.setdefault(key, []).append((cpu, mem))
        return result

    def get(self, key: str, default: Any = None) -> Any:
        rows = self._run("SELECT value FROM state WHERE key=?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def put(self, key: str, value: Any) -> None:
        self._run("INSERT OR REPLACE INTO state VALUES (?,?)", (key, json.dumps(value)))


def now() -> float:
    return time.time()
