"""Simulated time: wall time scaled by a factor, plus any explicit advance.

Factor 1 runs in real time, 60 runs a minute per second, and 0 stops the clock so
that a test moves it only with ``advance`` (deterministic).
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self, start: float | None = None, factor: float = 1.0):
        self._sim0 = float(start) if start is not None else time.time()
        self._wall0 = time.monotonic()
        self._offset = 0.0
        self.factor = float(factor)

    def now(self) -> float:
        return self._sim0 + (time.monotonic() - self._wall0) * self.factor + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds

    def set_factor(self, factor: float) -> None:
        if factor < 0:
            raise ValueError("the clock factor cannot be negative")
        self._sim0, self._wall0, self._offset = self.now(), time.monotonic(), 0.0
        self.factor = float(factor)
