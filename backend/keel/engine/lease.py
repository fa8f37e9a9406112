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
import time
import uuid
from pathlib import Path
from typing import Callable

log = logging.getLogger("keel.engine")

DEFAULT_LOCK_DIR = Path("/etc/pve/priv/lock/keel-leader")
PMXCFS_EXPIRY_S = 120.0
OWNER_FILE = "owner"


def on_pmxcfs(path: Path) -> bool:
    return str(path).startswith("/etc/pve/")


class Lease:
    def __init__(self, path: str | Path, expiry_s: float = PMXCFS_EXPIRY_S, node: str | None = None,
                 clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.expiry_s = expiry_s
        self.node = node or socket.gethostname().split(".")[0]
        self.identity = f"{self.node}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.clock = clock
        self.pmxcfs = on_pmxcfs(self.path)
        self.renewed_at: float | None = None    # our last successful take or renewal
        self.error: str | None = None           # why the last attempt failed, if it did

    @property
    def held(self) -> bool:
        """True while it is safe to act: renewed less than half an expiry ago."""
        return self.renewed_at is not None and self.clock() - self.renewed_at < self.expiry_s / 2

    def holder(self) -> str | None:
        """Who holds it, as far as this file system tells (not on pmxcfs)."""
        try:
            return (self.path / OWNER_FILE).read_text().strip().split(":")[0] or None
        except OSError:
            return None

    def tick(self) -> bool:
        """Renew if ours, else try to take it.  Returns ``held``."""
        try:
            if self.renewed_at is not None and self._renew():
                self.renewed_at = self.clock()
            elif self._take():
                if self.renewed_at is None:
                    log.info("leader lock %s taken by %s", self.path, self.node)
                self.renewed_at = self.clock()
            else:
                if self.renewed_at is not None:
                    log.warning("leader lock %s lost", self.path)
                self.renewed_at = None
            self.error = None
        except OSError as err:        # no quorum (EACCES), no /etc/pve, ...: follower
            if self.renewed_at is not None:
                log.warning("leader lock %s: %s; stepping down", self.path, err.strerror)
            self.renewed_at = None
            self.error = f"{self.path}: {err.strerror}"
        return self.held

    def release(self) -> None:
        if self.renewed_at is None:
            return
        self.renewed_at = None
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
