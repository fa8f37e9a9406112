"""Writing a file so that readers see the old content or the new, never half of it."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from keel.errors import InvalidError

log = logging.getLogger("keel.files")


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


def check_secret_mode(path: Path, what: str, strict: bool = False, override: str = "") -> None:
    """A secret file its group or others may read (or write): a warning, or with ``strict``
    (keel-engine) a refusal; ``override`` names the setting that turns the refusal into a
    warning.  pmxcfs shows /etc/pve/priv/* as 0600, the rest of /etc/pve as 0640."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if not mode & 0o077:
        return
    problem = f"the {what} file {path} may be read by its group or others (mode {mode:04o})"
    fix = f"chmod 600 {path}"
    if strict:
        raise InvalidError(f"{problem}: keel-engine refuses it; {fix}"
                           + (f" (or set {override} to only warn)" if override else ""))
    log.warning("%s; %s", problem, fix)
