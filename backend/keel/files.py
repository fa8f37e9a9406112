"""Writing a file so that readers see the old content or the new, never half of it."""

from __future__ import annotations

import os
from pathlib import Path

from keel.errors import InvalidError


def atomic_write(path: Path, text: str, mode: int = 0o644, what: str = "") -> None:
    """A temporary file in the same directory, then a rename: what PVE's own writers do on
    pmxcfs.  The file has ``mode`` from the start (pmxcfs allows no chmod); ``what`` names
    it in the error (``"the secret file"``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise InvalidError(f"cannot write {what + ' ' if what else ''}{path}: {err.strerror}") from None
