"""A reading of the cluster shared by everyone who needs it at once (single flight).

Every open UI panel polls the engine; with a slow Proxmox VE, each request fetching its
own snapshot would hold one of the engine's threads for as long as PVE takes, and the
calls that need no PVE at all (cancel a job, list maintenance) would queue behind them.
So one fetch runs at a time and everyone who asked meanwhile gets its result (or its
error); ``latest`` answers at once with what is known, however old, for the callers that
must never wait (the engine's own status).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("keel.engine")


class SharedReading(Generic[T]):
    def __init__(self, fetch: Callable[[], T], name: str, clock: Callable[[], float] = time.monotonic):
        self._fetch = fetch
        self.name = name
        self._clock = clock
        self._cond = threading.Condition()
        self._value: T | None = None
        self._value_at: float | None = None       # when the fetch that gave it started
        self._flight_at: float | None = None      # when the fetch under way started
        self._error: BaseException | None = None  # how the last fetch failed, if it did
        self._error_at: float | None = None

    def latest(self, first_wait_s: float = 0.0) -> tuple[T | None, float | None]:
        """The last value and its age in seconds (None, None: none yet).  Waits only while
        there has never been one and a fetch is under way, at most ``first_wait_s``."""
        with self._cond:
            if self._value_at is None and self._flight_at is not None and first_wait_s > 0:
                self._cond.wait_for(lambda: self._value_at is not None or self._flight_at is None,
                                    timeout=first_wait_s)
            if self._value_at is None:
                return None, None
            return self._value, self._clock() - self._value_at

    @property
    def error(self) -> BaseException | None:
        with self._cond:
            return self._error

    @property
    def fetching_for(self) -> float | None:
        """How long the fetch under way has been running (None: none is)."""
        with self._cond:
            return None if self._flight_at is None else self._clock() - self._flight_at

    def put(self, value: T, age_s: float = 0.0) -> None:
        """A value read elsewhere (the balancer's round reads the cluster too), whose reading
        started ``age_s`` ago: a round that took minutes hands in a reading that old, not a
        fresh one.  An older value than the one held is ignored."""
        with self._cond:
            read_at = self._clock() - max(0.0, age_s)
            if self._value_at is None or read_at >= self._value_at:
                self._value, self._value_at = value, read_at

    def get(self, max_age_s: float) -> T:
        """A value whose reading started at most ``max_age_s`` before this call: the last
        one, or the one being fetched, or a fresh fetch.  Raises what the fetch raised."""
        asked = self._clock()
        with self._cond:
            while True:
                if self._value_at is not None and self._value_at >= asked - max_age_s:
                    return self._value                         # type: ignore[return-value]
                if self._flight_at is None:
                    self._flight_at = started = self._clock()
                    break
                joined = self._flight_at                       # share the fetch under way
                while self._flight_at == joined:
                    self._cond.wait()
                if joined >= asked - max_age_s and self._error_at == joined:
                    raise self._error                          # type: ignore[misc]
        return self._run(started)

    def refresh(self, max_age_s: float) -> None:
        """Start a fetch in the background if the last value is older than ``max_age_s`` and
        none is under way; never waits."""
        with self._cond:
            if self._flight_at is not None or (self._value_at is not None
                                               and self._clock() - self._value_at <= max_age_s):
                return
            self._flight_at = started = self._clock()
        threading.Thread(target=self._background, args=(started,), name=f"keel-read-{self.name}",
                         daemon=True).start()

    def _background(self, started: float) -> None:
        try:
            self._run(started)
        except Exception as err:                  # kept in .error, shown by status
            log.warning("reading %s failed: %s", self.name, err)

    def _run(self, started: float) -> T:
        try:
            value = self._fetch()
        except BaseException as err:
            with self._cond:
                self._error, self._error_at = err, started
                self._flight_at = None
                self._cond.notify_all()
            raise
        with self._cond:
            if self._value_at is None or started >= self._value_at:
                self._value, self._value_at = value, started
            self._error = self._error_at = None
            self._flight_at = None
            self._cond.notify_all()
        return value
