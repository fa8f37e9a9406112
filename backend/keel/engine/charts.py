"""The Rebalancing tab's charts (docs/ui.md, "Charts"): each node's CPU and memory over the
last hour or day, from PVE's own RRD (``GET /nodes/{node}/rrddata``, as PVE's node summary
draws them), only the three numbers a chart line needs, for every node in one answer.

One reading serves every panel for ``CACHE_S`` of its timeframe (the RRD's own step for an
hour is a minute), so the charts cost PVE one request per node a minute however many
browsers look.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from keel.errors import KeelError

TIMEFRAMES = ("hour", "day")
CACHE_S = {"hour": 60.0, "day": 600.0}


class NodeCharts:
    def __init__(self, engine: Any, clock: Any = time.monotonic) -> None:
        self.engine = engine
        self.clock = clock
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def get(self, timeframe: str) -> dict[str, Any]:
        with self._lock:
            hit = self._cache.get(timeframe)
            if hit is not None and self.clock() - hit[0] < CACHE_S[timeframe]:
                return hit[1]
            data = self._read(timeframe)
            self._cache[timeframe] = (self.clock(), data)
            return data

    def _read(self, timeframe: str) -> dict[str, Any]:
        snap = self.engine.snapshot()
        nodes: dict[str, list[list[float]]] = {}
        errors: dict[str, str] = {}
        for name in sorted(snap.nodes):
            if not snap.nodes[name].online:
                continue
            try:
                rows = self.engine.client.get(f"/nodes/{name}/rrddata", timeframe=timeframe, cf="AVERAGE") or []
            except KeelError as err:
                errors[name] = str(err)
                continue
            points = []
            for row in rows:
                if not isinstance(row, dict) or "time" not in row or row.get("cpu") is None:
                    continue                  # PVE leaves a row's values out where it has none
                total = float(row.get("memtotal") or 0)
                mem = float(row.get("memused") or 0) / total if total else None
                points.append([int(row["time"]), round(float(row["cpu"]), 4),
                               None if mem is None else round(mem, 4)])
            nodes[name] = points
        return {"timeframe": timeframe, "nodes": nodes, "errors": errors}
