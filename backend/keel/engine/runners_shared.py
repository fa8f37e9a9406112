"""The leader's runners' status in ``engine.shared_dir`` (pmxcfs), for the followers' web
UI: written by the leader every ``SHARE_S`` (or the reconcile interval if longer), read by
a follower while it is at most ``MAX_AGE_S`` old."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keel.errors import KeelError
from keel.files import atomic_write

if TYPE_CHECKING:
    from keel.engine.core import Engine

log = logging.getLogger("keel.engine")

SHARE_S = 30.0          # the leader shares the runners' status this often
MAX_AGE_S = 600.0       # a follower shows a shared status at most this old


def path(engine: "Engine") -> Path:
    return Path(engine.config.engine.shared_dir) / "runners-status.json"


def share(engine: "Engine") -> None:
    """The leader's runners' status, if it is time to share it again."""
    running = engine.runners
    now = engine.clock()
    every = max(SHARE_S, engine.config.runners.reconcile_interval_s)
    if running is None or now - engine._runners_shared_at < every:
        return
    try:
        status = {**running[0].status(), "node": engine.node}
        atomic_write(path(engine), json.dumps(status, separators=(",", ":")) + "\n")
        engine._runners_shared_at = now
    except (KeelError, TypeError, ValueError) as err:
        log.warning("cannot share the runners' status in %s: %s", path(engine), err)


def read(engine: "Engine") -> dict[str, Any] | None:
    """What the leader last shared, if it is recent enough."""
    try:
        data = json.loads(path(engine).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or engine.clock() - float(data.get("time") or 0) > MAX_AGE_S:
        return None
    return data
