"""What the runners keep where the next leader finds it: operator controls and sessions.

* **controls**: a scale set paused or draining at run time (``keel runners pause``, the
  Runners tab's buttons, ``POST /api/runners/scale-sets/<name>/<action>``), with who did
  it and when, until it is resumed;
* **sessions**: the message session Keel holds for each scale set (its id, owner, host and
  process), so that after a crash the next Keel closes it at once instead of waiting for
  GitHub to time it out (``state.Fleet.ensure_github``).

Under keel-engine (``shared_dir`` given: ``engine.shared_dir``, ``/etc/pve/keel`` on pmxcfs)
they are one JSON file there, ``runners-shared.json``, which every node reads and any node's
engine may write a control into; the leader's runners read it again whenever it changes.
For ``keel runners run`` in the foreground they are a value in Keel's database.  Neither
holds a secret: a session's id lets nobody into it without Keel's own GitHub credentials.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from keel.errors import InvalidError, KeelError
from keel.files import atomic_write

log = logging.getLogger("keel.runners")

FILE_NAME = "runners-shared.json"
STORE_KEY = "shared"
PAUSED = "paused"
DRAINING = "draining"
ACTIONS = {"pause": PAUSED, "drain": DRAINING, "resume": None}


def shared_path(shared_dir: Any) -> Path:
    return Path(shared_dir) / FILE_NAME


class Shared:
    def __init__(self, store: Any, shared_dir: Any = None):
        self.store = store
        self.path = shared_path(shared_dir) if shared_dir is not None else None
        self._data: dict[str, Any] = {}
        self._stamp: Any = None
        self.reload()

    @property
    def hosted(self) -> bool:
        """Hosted by keel-engine, which runs the runners on the leader only: a session left by
        another node's Keel is a former leader's and may be taken over."""
        return self.path is not None

    # -- reading ----------------------------------------------------------------------------

    def reload(self) -> bool:
        """Read again if the file (or the store's value) changed; True if it did."""
        if self.path is None:
            data = self.store.get(STORE_KEY) or {}
            changed = data != self._data
            self._data = data if isinstance(data, dict) else {}
            return changed
        try:
            stat = self.path.stat()
        except OSError:
            changed, self._data, self._stamp = bool(self._data), {}, None
            return changed
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp == self._stamp:
            return False
        self._data, self._stamp = read_file(self.path), stamp
        return True

    def control(self, name: str) -> dict[str, Any] | None:
        """``{"mode": "paused"|"draining", "by": who, "at": t}`` or None."""
        value = (self._data.get("controls") or {}).get(name)
        return value if isinstance(value, dict) and value.get("mode") in (PAUSED, DRAINING) else None

    def session(self, name: str) -> dict[str, Any] | None:
        value = (self._data.get("sessions") or {}).get(name)
        return value if isinstance(value, dict) else None

    # -- writing ----------------------------------------------------------------------------

    def set_control(self, name: str, action: str, who: str, now: float) -> dict[str, Any] | None:
        mode = ACTIONS[action]
        value = None if mode is None else {"mode": mode, "by": who, "at": now}
        self._change("controls", name, value)
        return value

    def put_session(self, name: str, record: dict[str, Any] | None) -> None:
        try:
            self._change("sessions", name, record)
        except KeelError as err:              # pmxcfs read-only (no quorum): the store still has it
            log.warning("cannot record the session of %s in %s: %s", name, self.path, err)

    def _change(self, section: str, name: str, value: Any) -> None:
        data = read_file(self.path) if self.path is not None else (self.store.get(STORE_KEY) or {})
        part = dict(data.get(section) or {})
        if value is None:
            part.pop(name, None)
        else:
            part[name] = value
        data = {**data, section: part}
        if self.path is not None:
            atomic_write(self.path, json.dumps(data, sort_keys=True, indent=1) + "\n", what="the runners' shared state")
        else:
            self.store.put(STORE_KEY, data)
        self._data = data
        self._stamp = None


def read_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("ignoring %s: %s", path, err)
        return {}
    return data if isinstance(data, dict) else {}


def write_control(shared_dir: Any, name: str, action: str, who: str, now: float) -> dict[str, Any] | None:
    """A control written straight into the shared file (an engine on a node that does not
    run the runners): the leader's runners take it up on their next pass."""
    if action not in ACTIONS:
        raise InvalidError(f"action: expected pause, resume or drain, got {action!r}")
    return Shared(None, shared_dir).set_control(name, action, who, now)


__all__ = ["ACTIONS", "DRAINING", "PAUSED", "Shared", "shared_path", "write_control"]
