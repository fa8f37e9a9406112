"""Who acts: the leader lease as the engine uses it (docs/service.md, "Leadership").

``Leadership`` owns the lease (``keel.engine.lease``) and its fence, and turns what the
lease loop and the fence see into two transitions, each run once however many threads
notice: **taken** (record the leader in the shared directory, then the engine's hook:
reconcile what the last leader left, wake the balancer) and **lost** (stop holding at
once, then the engine's hook: cancel the running job, stop the runners).  A loss is seen
for at least one lease tick before the lease can be taken again, so every gain of
leadership follows a loss that the engine handled.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Callable

from keel.engine.lease import Fence, Lease
from keel.engine.settings import EngineSettings
from keel.errors import BusyError, KeelError
from keel.files import atomic_write

log = logging.getLogger("keel.engine")
FENCE_MARGIN = 1 / 8      # an act needs the lease for this share of its expiry more (15 s on pmxcfs)


class NotLeaderError(BusyError):
    """A write that only the leader may do, asked of a follower."""

    def __init__(self, leader: str | None):
        where = f"{leader} leads" if leader else "no node leads right now"
        super().__init__(f"this node does not act: {where}; ask the leader's Keel")
        self.leader = leader


class Leadership:
    def __init__(self, settings: EngineSettings, node: str, clock: Callable[[], float],
                 on_taken: Callable[[], None], on_lost: Callable[[str], None]):
        self.node = node
        self.clock = clock
        self.shared_dir = Path(settings.shared_dir)
        self.lease = Lease(settings.lock, settings.lock_expiry_s, node, clock=clock)
        self.fence = Fence(self.lease, settings.lock_expiry_s * FENCE_MARGIN, on_lost=self.lost)
        self.lost_event = threading.Event()       # set while this engine does not lead
        self.lost_event.set()
        self._on_taken, self._on_lost = on_taken, on_lost
        self._leading = False
        self._lock = threading.Lock()

    @property
    def leader(self) -> bool:
        return self.lease.held()

    def tick(self) -> bool:
        """One lease renewal or take, and the transition it makes.  Returns ``held``."""
        held = self.lease.tick()
        if held:
            self.taken()
        else:
            self.lost(self.lease.lost_reason or "the lease is not held")
        return held

    def taken(self) -> None:
        with self._lock:
            if self._leading:
                return
            self._leading = True
            self.lost_event.clear()
        path = self.shared_dir / "leader.json"
        try:
            atomic_write(path, json.dumps({"node": self.node, "since": self.clock(), "term": self.lease.term}) + "\n")
        except KeelError as err:
            log.warning("cannot record the leader in %s: %s", path, err)
        log.info("%s leads", self.node)
        self._on_taken()

    def lost(self, reason: str) -> None:
        """The lease is gone (the lease loop saw it, or a fenced act found its window over):
        acts stop at once, whoever noticed first."""
        self.lease.drop(reason)
        with self._lock:
            if not self._leading:
                return
            self._leading = False
            self.lost_event.set()
        log.warning("%s stops acting: %s", self.node, reason)
        self._on_lost(reason)

    def leader_node(self) -> str | None:
        if self.leader:
            return self.node
        try:
            return json.loads((self.shared_dir / "leader.json").read_text()).get("node")
        except (OSError, ValueError, AttributeError):
            return self.lease.holder()

    def require(self) -> None:
        if not self.leader:
            raise NotLeaderError(self.leader_node())

    def release(self) -> None:
        self.lease.release()

    def hand_over(self, reason: str, hold_off_s: float) -> None:
        """Give the lease to another node's engine: stop acting first (the lease is dropped,
        so every fenced act is refused from here), remove the lock, then the loss as any
        other (the job cancelled, the runners stopped); this engine does not contend again
        for ``hold_off_s``, so that another takes it."""
        self.lease.release(hold_off_s, reason=f"handed over: {reason}")
        self.lost(f"handed over: {reason}")
