"""The runners' tables in Keel's SQLite database (the file ``keel.store`` uses).

| table | holds |
|---|---|
| ``runner_vms`` | each runner Keel is creating, running or removing: a row is written before each step that changes Proxmox VE or GitHub, so a crash loses nothing |
| ``runner_jobs`` | jobs seen (messages, webhooks): when queued, assigned, started, completed, and by which runner |
| ``runner_events`` | what happened and why: created, adopted, refused, held, removed (reason), lost |
| ``runner_state`` | small values: the last status snapshot (what ``keel runners status`` shows) |

WAL, ``synchronous=FULL``, one connection per store guarded by a lock; tables are made
with ``CREATE TABLE IF NOT EXISTS`` and never touch ``keel.store``'s.  Old jobs and events
are pruned.  Never holds a secret: JIT configs stay in memory.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterable

from keel.errors import InvalidError

KEEP_JOBS_S = 14 * 86400

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runner_vms (
    name TEXT PRIMARY KEY, scale_set TEXT NOT NULL, provider TEXT NOT NULL, data TEXT NOT NULL,
    updated_at REAL);
CREATE TABLE IF NOT EXISTS runner_jobs (
    job_id TEXT PRIMARY KEY, scale_set TEXT, repo TEXT, state TEXT, queued_at REAL,
    assigned_at REAL, started_at REAL, completed_at REAL, runner TEXT, result TEXT, seen_at REAL,
    workflow TEXT, name TEXT);
CREATE INDEX IF NOT EXISTS runner_jobs_seen ON runner_jobs (seen_at);
CREATE TABLE IF NOT EXISTS runner_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL, kind TEXT, scale_set TEXT, provider TEXT,
    runner TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS runner_state (key TEXT PRIMARY KEY, value TEXT);
"""
JOB_KEYS = ("job_id", "scale_set", "repo", "state", "queued_at", "assigned_at", "started_at",
            "completed_at", "runner", "result", "seen_at", "workflow", "name")
ADDED_JOB_KEYS = ("workflow", "name")      # columns a database made before them lacks
KEEP_OPEN_JOBS_S = 86400.0                 # GitHub cancels a job left queued a day
EVENT_KEYS = ("id", "t", "kind", "scale_set", "provider", "runner", "detail")


class RunnerStore:
    def __init__(self, path: str | Path, max_events: int = 10000, max_event_age_s: float | None = None):
        self.path = Path(path)
        self.max_events = max_events
        self.max_event_age_s = max_event_age_s
        self._lock = threading.Lock()
        self._events_since_prune = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                       check_same_thread=False)
        except (OSError, sqlite3.Error) as err:
            raise InvalidError(f"cannot open Keel's store {self.path}: {err}") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(runner_jobs)")}
            for column in ADDED_JOB_KEYS:
                if column not in have:
                    self._db.execute(f"ALTER TABLE runner_jobs ADD COLUMN {column} TEXT")
        except (OSError, sqlite3.Error) as err:
            self._db.close()
            raise InvalidError(f"cannot open Keel's store {self.path}: {err}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    # -- runners ---------------------------------------------------------------------------

    def put_runner(self, name: str, scale_set: str, provider: str, data: dict[str, Any], t: float) -> None:
        self._run("INSERT OR REPLACE INTO runner_vms VALUES (?,?,?,?,?)",
                  (name, scale_set, provider, json.dumps(data, sort_keys=True), t))

    def drop_runner(self, name: str) -> None:
        self._run("DELETE FROM runner_vms WHERE name=?", (name,))

    def runners(self) -> list[dict[str, Any]]:
        return [json.loads(row[0]) for row in self._run("SELECT data FROM runner_vms ORDER BY name")]

    # -- jobs ----------------------------------------------------------------------------------

    def put_job(self, job: dict[str, Any]) -> None:
        self._run(f"INSERT OR REPLACE INTO runner_jobs ({', '.join(JOB_KEYS)}) VALUES "
                  f"({', '.join('?' for _ in JOB_KEYS)})", [job.get(k) for k in JOB_KEYS])

    def jobs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._run(f"SELECT {', '.join(JOB_KEYS)} FROM runner_jobs ORDER BY seen_at DESC LIMIT ?",
                         (limit,))
        return [dict(zip(JOB_KEYS, row)) for row in rows]

    def open_jobs(self, now: float) -> list[dict[str, Any]]:
        """Jobs not completed, seen within a day: what Keel tracked before it restarted."""
        rows = self._run(f"SELECT {', '.join(JOB_KEYS)} FROM runner_jobs WHERE state != 'completed' "
                         f"AND seen_at >= ? ORDER BY seen_at", (now - KEEP_OPEN_JOBS_S,))
        return [dict(zip(JOB_KEYS, row)) for row in rows]

    def jobs_during(self, since: float, until: float) -> list[dict[str, Any]]:
        """Jobs that waited or ran at some time in [since, until]: the activity charts' rows."""
        rows = self._run(f"SELECT {', '.join(JOB_KEYS)} FROM runner_jobs WHERE "
                         f"COALESCE(queued_at, assigned_at, started_at, seen_at) <= ? AND "
                         f"(completed_at IS NULL OR completed_at >= ?) ORDER BY seen_at", (until, since))
        return [dict(zip(JOB_KEYS, row)) for row in rows]

    def prune_jobs(self, now: float) -> None:
        self._run("DELETE FROM runner_jobs WHERE seen_at < ?", (now - KEEP_JOBS_S,))

    # -- events ------------------------------------------------------------------------------

    def event(self, t: float, kind: str, scale_set: str = "", provider: str = "", runner: str = "",
              detail: str = "") -> None:
        self._run("INSERT INTO runner_events (t, kind, scale_set, provider, runner, detail) "
                  "VALUES (?,?,?,?,?,?)", (t, kind, scale_set, provider, runner, detail))
        self._events_since_prune += 1
        if self._events_since_prune >= 100:
            self._events_since_prune = 0
            self._run("DELETE FROM runner_events WHERE id <= (SELECT MAX(id) FROM runner_events) - ?",
                      (self.max_events,))
            if self.max_event_age_s is not None:
                self._run("DELETE FROM runner_events WHERE t < ?", (t - self.max_event_age_s,))

    def events(self, limit: int = 100, kind: str | None = None) -> list[dict[str, Any]]:
        where, args = ("WHERE kind=?", [kind]) if kind else ("", [])
        rows = self._run(f"SELECT {', '.join(EVENT_KEYS)} FROM runner_events {where} "
                         f"ORDER BY id DESC LIMIT ?", [*args, limit])
        return [dict(zip(EVENT_KEYS, row)) for row in rows]

    # -- small values ---------------------------------------------------------------------------

    def put(self, key: str, value: Any) -> None:
        self._run("INSERT OR REPLACE INTO runner_state VALUES (?,?)", (key, json.dumps(value)))

    def get(self, key: str, default: Any = None) -> Any:
        rows = self._run("SELECT value FROM runner_state WHERE key=?", (key,))
        return json.loads(rows[0][0]) if rows else default
