"""PVE tasks: UPIDs, status, and logs whose lines appear as simulated time passes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable


def format_upid(node: str, pid: int, pstart: int, starttime: int, kind: str, ident: str,
                user: str) -> str:
    return f"UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{ident}:{user}:"


@dataclass
class Task:
    upid: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str                   # user@realm, or user@realm!token for a token
    lines: list[tuple[float, str]] = field(default_factory=list)
    endtime: float | None = None
    exitstatus: str | None = None
    on_abort: Callable[[float, str], None] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.exitstatus is None

    def log(self, at: float, text: str) -> None:
        self.lines.append((at, text))

    def finish(self, at: float, exitstatus: str = "OK") -> None:
        if self.exitstatus is not None:
            return
        self.lines = [(t, line) for t, line in self.lines if t <= at]
        if exitstatus == "OK":
            self.lines.append((at, "TASK OK"))
        elif exitstatus.startswith("WARNINGS"):
            self.lines.append((at, f"TASK {exitstatus}"))
        else:
            self.lines.append((at, f"TASK ERROR: {exitstatus}"))
        self.endtime = at
        self.exitstatus = exitstatus

    def visible_lines(self, now: float) -> list[str]:
        return [line for t, line in self.lines if t <= now]

    def user_fields(self) -> dict[str, str]:
        if "!" in self.user:
            userid, token = self.user.split("!", 1)
            return {"user": userid, "tokenid": token}
        return {"user": self.user}

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
            "starttime": self.starttime, "type": self.type, "id": self.id,
            "status": "running" if self.running else "stopped",
            **self.user_fields(),
        }
        if not self.running:
            data["exitstatus"] = self.exitstatus
        return data

    def visible_to(self, authid: str) -> bool:
        """A token sees its own tasks; a user its own and its tokens' (pve-manager Tasks.pm)."""
        return authid == self.user or authid == self.user.split("!")[0]

    @property
    def status_type(self) -> str:
        """ok, warning, error, or unknown while running (upid_normalize_status_type)."""
        if self.exitstatus is None:
            return "unknown"
        if self.exitstatus == "OK":
            return "ok"
        if re.fullmatch(r"WARNINGS: \d+", self.exitstatus):
            return "warning"
        return "error"

    def list_entry(self) -> dict[str, Any]:
        """An entry of a task list: a token's tasks name the user and the token apart."""
        data: dict[str, Any] = {
            "upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
            "starttime": self.starttime, "type": self.type, "id": self.id,
            **self.user_fields(),
        }
        if not self.running:
            data["endtime"] = int(self.endtime or self.starttime)
            data["status"] = self.exitstatus
        return data
