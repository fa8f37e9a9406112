"""Leadership: one engine in the cluster acts, the others serve read-only state.

The lease is a directory, ``/etc/pve/priv/lock/keel-leader``, with pmxcfs's cluster-wide
lock semantics (pve-cluster ``src/README``, "File Locking"), as Proxmox's HA manager uses
them:

* take it: ``mkdir`` — atomic across the cluster, ``EEXIST`` if someone holds it;
* renew it: ``utime(path, (0, now))`` — pmxcfs allows that only from the node that made
  it, and restarts its 120-second expiry everywhere;
* take over a dead holder's: ``utime(path, (0, 0))`` is an unlock request; pmxcfs deletes
  the lock once it is older than 120 s, and the next ``mkdir`` succeeds;
* give it up: ``rmdir``.

On an ordinary file system (tests, a single machine) the same calls are used and the
directory's modification time stands in for pmxcfs's bookkeeping: a lock not renewed for
``expiry`` seconds is stale and a contender removes it; a renewal checks that the owner
file inside is ours.  Either way an engine acts only while its last successful renewal is
younger than half the expiry, so two never act at once: the old leader has stopped
acting (``expiry / 2``) well before anyone may take over (``expiry``).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from keel.errors import FencedError

log = logging.getLogger("keel.engine")

DEFAULT_LOCK_DIR = Path("/etc/pve/priv/lock/keel-leader")
PMXCFS_EXPIRY_S = 120.0
OWNER_FILE = "owner"
CLOCK_STEP_S = 2.0          # a wall-clock jump beyond this between two ticks is a step (NTP, an admin)


def on_pmxcfs(path: Path) -> bool:
    return str(path).startswith("/etc/pve/")


class Lease:
    """The leader lease as one engine holds it.

    Two clocks: the wall clock (``clock``) is what the lock's mtime carries and what other
    nodes compare; the monotonic clock (``monotonic``) measures our own acting window, so
    that an NTP step cannot stretch it and a process stopped for a while (SIGSTOP, a VM
    pause, swap) comes back knowing that its lease is old.  ``held(margin)`` is the one
    source of truth for "may I act now": the last successful take or renewal *started*
    less than ``expiry / 2 - margin`` ago.  A lease that was not renewed within that window
    is lost for good: it is never renewed late (another engine may have started to act on
    the strength of its expiry), only taken again once free.
    """

    def __init__(self, path: str | Path, expiry_s: float = PMXCFS_EXPIRY_S, node: str | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        self.expiry_s = expiry_s
        self.node = node or socket.gethostname().split(".")[0]
        self.identity = f"{self.node}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.monotonic = monotonic
        self.pmxcfs = on_pmxcfs(self.path)
        self.since: float | None = None          # monotonic start of our last successful take or renewal
        self.error: str | None = None            # why the last attempt failed, if it did
        self.lost_reason: str | None = None      # why we last stopped holding it
        self.term = 0                            # how many times this engine has taken it
        self._stamps: tuple[float, float] | None = None   # (wall, monotonic) at the last tick
        self.not_before: float | None = None     # monotonic: no take before then (after a hand-over)
        self._lock = threading.Lock()

    @property
    def window_s(self) -> float:
        """How long after a renewal started the lease may be acted on."""
        return self.expiry_s / 2

    def held(self, margin_s: float = 0.0) -> bool:
        """True while it is safe to act for ``margin_s`` more seconds."""
        since = self.since
        return since is not None and self.monotonic() - since + margin_s < self.window_s

    def age(self) -> float | None:
        """Seconds since our last take or renewal started (None: not ours)."""
        since = self.since
        return None if since is None else self.monotonic() - since

    def holder(self) -> str | None:
        """Who holds it, as far as this file system tells (not on pmxcfs)."""
        try:
            return (self.path / OWNER_FILE).read_text().strip().split(":")[0] or None
        except OSError:
            return None

    def tick(self) -> bool:
        """Renew if ours and still inside the window, else try to take it.  Returns ``held()``."""
        with self._lock:
            started, wall = self.monotonic(), self.clock()
            stepped = self._clock_step(wall, started)
            try:
                if self.since is not None:
                    if stepped is not None:
                        self._drop(f"the wall clock stepped by {stepped:+.1f} s; the lock's time is not "
                                   f"to be trusted until it expires")
                    elif started - self.since >= self.window_s:
                        self._drop(f"not renewed for {started - self.since:.1f} s (the process or "
                                   f"/etc/pve stalled); another node may have taken over")
                    elif self._renew():
                        self.since = started
                    else:
                        self._drop("renewal refused: another node holds it")
                    if self.since is None:
                        return False       # a loss is seen for a tick; taking it again waits for the next
                if self.not_before is not None and started < self.not_before:
                    return False          # handed over: another node's engine takes it meanwhile
                if self.since is None and self._take():
                    self.since = started
                    self.term += 1
                    self.lost_reason = None
                    log.info("leader lock %s taken by %s (term %d, at %.3f)", self.path, self.node,
                             self.term, wall)
                self.error = None
            except OSError as err:        # no quorum (EACCES), no /etc/pve, ...: follower
                if self.since is not None:
                    self._drop(f"{err.strerror}; stepping down")
                self.error = f"{self.path}: {err.strerror}"
            return self.held()

    def drop(self, reason: str) -> None:
        """Stop holding it now (a fenced act found the window over): acts stop at once, the
        lock itself is left to expire."""
        with self._lock:
            if self.since is not None:
                self._drop(reason)

    def _drop(self, reason: str) -> None:
        self.since = None
        self.lost_reason = reason
        log.warning("leader lock %s lost (at %.3f): %s", self.path, self.clock(), reason)

    def _clock_step(self, wall: float, mono: float) -> float | None:
        """How far the wall clock jumped since the last tick, beyond what the monotonic clock
        saw (None: it did not)."""
        previous, self._stamps = self._stamps, (wall, mono)
        if previous is None:
            return None
        step = (wall - previous[0]) - (mono - previous[1])
        return step if abs(step) > CLOCK_STEP_S else None

    def release(self, hold_off_s: float = 0.0, reason: str = "released") -> None:
        """Give it up: stop acting first (the fence refuses from now on), then remove the
        lock; ``hold_off_s``: do not take it again for that long (a hand-over)."""
        with self._lock:
            if self.since is None:
                return
            self.since = None
            self.lost_reason = reason
            if hold_off_s > 0:
                self.not_before = self.monotonic() + hold_off_s
            try:
                if not self.pmxcfs:
                    if not self._ours():
                        return
                    (self.path / OWNER_FILE).unlink(missing_ok=True)
                self.path.rmdir()
                log.info("leader lock %s released", self.path)
            except OSError as err:
                log.warning("leader lock %s: cannot release: %s", self.path, err.strerror)

    # -- the two file systems ---------------------------------------------------------------

    def _renew(self) -> bool:
        if not self.pmxcfs and not self._ours():
            return False
        now = self.clock()
        try:
            os.utime(self.path, (0, now))
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.EPERM, errno.EACCES):
                return False
            raise
        return True

    def _take(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.pmxcfs:
            try:
                os.utime(self.path, (0, 0))      # unlock request: pmxcfs drops it if expired
            except FileNotFoundError:
                pass
            except OSError:
                pass
        elif self._stale():
            self._remove_stale()
        try:
            self.path.mkdir()
        except FileExistsError:
            return False
        if not self.pmxcfs:
            (self.path / OWNER_FILE).write_text(self.identity + "\n")
            os.utime(self.path, (self.clock(), self.clock()))
        return True

    def _ours(self) -> bool:
        try:
            return (self.path / OWNER_FILE).read_text().strip() == self.identity
        except OSError:
            return False

    def _stale(self) -> bool:
        try:
            return self.clock() - self.path.stat().st_mtime > self.expiry_s
        except FileNotFoundError:
            return False

    def _remove_stale(self) -> None:
        # Rename first, so two contenders cannot both remove a lock one of them just took.
        grave = self.path.with_name(f".{self.path.name}.stale-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(self.path, grave)
        except OSError:
            return
        if self.clock() - grave.stat().st_mtime <= self.expiry_s:
            try:                                   # renewed meanwhile: put it back
                os.rename(grave, self.path)
                return
            except OSError:
                pass
        for child in grave.iterdir():
            child.unlink(missing_ok=True)
        grave.rmdir()
        log.info("leader lock %s was stale (not renewed for %.0f s); removed", self.path, self.expiry_s)


class Fence:
    """The check before every act that changes the cluster: each migration start, each
    runner clone, start, configuration and delete, each HA request, each GitHub write.

    ``check`` passes only while the lease is held with ``margin_s`` to spare.  Near the end of
    the window it waits (at most ``margin_s``) for the lease loop's renewal; once the window
    is over it calls ``on_lost`` (the engine cancels its job and stops its runners) and
    raises ``FencedError``: the act is not made.
    """

    def __init__(self, lease: Lease, margin_s: float, on_lost: Callable[[str], None] = lambda reason: None,
                 sleep: Callable[[float], None] = time.sleep):
        self.lease = lease
        self.margin_s = margin_s
        self.on_lost = on_lost
        self.sleep = sleep
        self.refused = 0

    def check(self, what: str) -> None:
        lease = self.lease
        if lease.held(self.margin_s):
            return
        waited = 0.0
        while lease.held() and not lease.held(self.margin_s) and waited < self.margin_s:
            self.sleep(0.05)
            waited += 0.05
        if lease.held(self.margin_s):
            return
        self.refused += 1
        age = lease.age()
        reason = (f"not the leader: {what} not made (the lease was last renewed {age:.1f} s ago, "
                  f"it may be acted on for {lease.window_s - self.margin_s:.1f} s)" if age is not None
                  else f"not the leader: {what} not made ({lease.lost_reason or 'the lease is not held'})")
        self.on_lost(reason)
        raise FencedError(reason)
