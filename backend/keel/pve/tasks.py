"""Waiting for PVE tasks, and finding a migration's.

A task is done when its status is ``stopped``; it succeeded when ``exitstatus`` is
``OK`` or ``WARNINGS: n``.  Anything else is the error text PVE logged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from keel.errors import KeelError, TaskFailedError, UnavailableError
from keel.pve.client import PveClient
from keel.pve.upid import parse_upid


@dataclass(frozen=True)
class TaskResult:
    upid: str
    exitstatus: str
    log_tail: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exitstatus == "OK" or self.exitstatus.startswith("WARNINGS")


def task_status(client: PveClient, upid: str) -> dict:
    node = parse_upid(upid).node
    return client.get(f"/nodes/{node}/tasks/{upid}/status")


def task_log(client: PveClient, upid: str, limit: int = 50) -> list[str]:
    """The last ``limit`` lines of a task's log."""
    node = parse_upid(upid).node
    lines: list[str] = []
    start = 0
    while True:
        chunk = client.get(f"/nodes/{node}/tasks/{upid}/log", start=start, limit=500)
        lines.extend(entry.get("t", "") for entry in chunk)
        if len(chunk) < 500:
            break
        start += len(chunk)
    return lines[-limit:]


def wait_task(client: PveClient, upid: str, timeout_s: float = 600.0, poll_s: float = 1.0,
              on_poll: Callable[[dict], None] | None = None,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep,
              raise_on_failure: bool = True) -> TaskResult:
    """Poll until the task stops; raise TaskFailedError if it failed, UnavailableError on timeout."""
    deadline = clock() + timeout_s
    while True:
        status = task_status(client, upid)
        if on_poll is not None:
            on_poll(status)
        if status.get("status") == "stopped":
            exitstatus = str(status.get("exitstatus", "unexpected status"))
            result = TaskResult(upid, exitstatus)
            if not result.ok:
                try:
                    tail = tuple(task_log(client, upid, 10))
                except KeelError:
                    tail = ()
                result = TaskResult(upid, exitstatus, tail)
                if raise_on_failure:
                    kind = parse_upid(upid)
                    raise TaskFailedError(f"task {kind.type} {kind.id} on {kind.node} failed: "
                                          f"{exitstatus}", upid=upid, exitstatus=exitstatus)
            return result
        if clock() >= deadline:
            raise UnavailableError(f"task {upid} still running after {timeout_s:.0f}s")
        sleep(poll_s)


def find_migration_task(client: PveClient, move: Any, since: float, now: float) -> str | None:
    """The UPID of the migration of ``move``'s guest that started on its source node after
    ``since`` (Keel's clock, ``now`` being Keel's time now), if PVE has one.  The start is
    compared on the node's own clock (``/nodes/{node}/time``), so a node whose clock is off
    does not hide the task or pass off an older one as it."""
    kind = "qmigrate" if move.type == "qemu" else "vzmigrate"
    node_now = float((client.get(f"/nodes/{move.source}/time") or {}).get("time") or now)
    after = node_now - max(0.0, now - since) - 5
    tasks = client.get(f"/nodes/{move.source}/tasks", typefilter=kind, vmid=move.vmid,
                       since=int(after), source="all", limit=10)
    found = [t for t in tasks or () if t.get("upid") and float(t.get("starttime") or 0) >= after]
    return str(max(found, key=lambda t: float(t.get("starttime") or 0))["upid"]) if found else None
