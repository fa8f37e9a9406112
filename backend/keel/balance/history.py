"""What the balancer remembers between rounds, as the planner sees it (plain data).

The store (``keel.store``) keeps it in SQLite; tests build it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

PING_PONG_S = 24 * 3600     # a guest does not go back to a node it left within a day

# A move's states, as the journal (``keel.balance.journal``) and the store write them.
PLANNED, STARTING, RUNNING, OK, FAILED, NOT_STARTED = "planned", "starting", "running", "ok", "failed", "not_started"
UNFINISHED = (PLANNED, STARTING, RUNNING)
ENDED = (OK, FAILED, NOT_STARTED)


@dataclass(frozen=True)
class MoveRecord:
    vmid: int
    source: str
    target: str
    at: float                   # when it ended (epoch seconds)
    ok: bool = True


@dataclass(frozen=True)
class Blocked:
    until: float
    reason: str


@dataclass(frozen=True)
class History:
    moves: tuple[MoveRecord, ...] = ()
    blocked: Mapping[int, Blocked] = field(default_factory=dict)
    maintenance: frozenset[str] = frozenset()   # nodes put in maintenance through Keel
    hold_rounds: int = 0                        # consecutive rounds above the threshold so far

    def last_move(self, vmid: int) -> MoveRecord | None:
        found = [m for m in self.moves if m.vmid == vmid]
        return max(found, key=lambda m: m.at) if found else None

    def cooling(self, vmid: int, now: float, cooldown_s: float) -> bool:
        last = self.last_move(vmid)
        return last is not None and now - last.at < cooldown_s

    def failed_recently(self, vmid: int, now: float, cooldown_s: float) -> bool:
        """Its last migration failed within the cooldown: not even a mandatory move retries yet."""
        last = self.last_move(vmid)
        return last is not None and not last.ok and now - last.at < cooldown_s

    def left_recently(self, vmid: int, now: float) -> set[str]:
        """Nodes this guest left successfully within the ping-pong window."""
        return {m.source for m in self.moves if m.vmid == vmid and m.ok and now - m.at < PING_PONG_S}

    def blocked_reason(self, vmid: int, now: float) -> str | None:
        entry = self.blocked.get(vmid)
        return entry.reason if entry is not None and entry.until > now else None
