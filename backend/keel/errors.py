"""One exception hierarchy for all of Keel.

Each class says what the caller should do about it, and maps once to a CLI exit code
and an HTTP status.  Messages are written for a person and never contain a secret.
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    OK = 0
    ERROR = 1           # anything unexpected
    USAGE = 2           # bad command line (argparse uses 2 as well)
    INVALID = 3         # bad input: config, scenario, parameter
    NOT_FOUND = 4
    NO_CAPACITY = 5
    BUSY = 6
    UNAVAILABLE = 7     # PVE (or another peer) cannot be reached or refuses to work now
    AUTH = 8            # authentication or permission failed
    TASK_FAILED = 9     # a PVE task ended with an error


class KeelError(Exception):
    """Base of every error Keel raises on purpose."""

    exit_status = ExitStatus.ERROR
    http_status = 500

    def __init__(self, message: str, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.errors = dict(errors or {})

    def __str__(self) -> str:
        if not self.errors or all(f"{k}: {v}" in self.message for k, v in self.errors.items()):
            return self.message
        details = "; ".join(f"{key}: {text}" for key, text in sorted(self.errors.items()))
        return f"{self.message} ({details})"


class InvalidError(KeelError):
    """The input is wrong; fix it and try again."""

    exit_status = ExitStatus.INVALID
    http_status = 400


class NotFoundError(KeelError):
    exit_status = ExitStatus.NOT_FOUND
    http_status = 404


class NoCapacityError(KeelError):
    exit_status = ExitStatus.NO_CAPACITY
    http_status = 409


class BusyError(KeelError):
    """Something holds a lock or is already in progress; retry later."""

    exit_status = ExitStatus.BUSY
    http_status = 409


class UnavailableError(KeelError):
    """A peer cannot be reached or cannot work now (node down, no quorum)."""

    exit_status = ExitStatus.UNAVAILABLE
    http_status = 503


class FencedError(BusyError):
    """This engine does not hold the leader lease (any more): the act was not made."""


class CancelledError(BusyError):
    """A job was cancelled (by someone, or because this engine stopped leading) before an act."""


class AuthError(KeelError):
    """Authentication failed (bad or missing credentials)."""

    exit_status = ExitStatus.AUTH
    http_status = 401


class PermissionDeniedError(AuthError):
    """Authenticated, but the privilege is missing."""

    http_status = 403


class NotAllowedError(KeelError):
    """The caller of Keel's own API may not do this (PVE refusing Keel's token is a
    PermissionDeniedError instead)."""

    exit_status = ExitStatus.AUTH
    http_status = 403


class TaskFailedError(KeelError):
    """A PVE task ended with an error exit status."""

    exit_status = ExitStatus.TASK_FAILED

    def __init__(self, message: str, upid: str = "", exitstatus: str = ""):
        super().__init__(message)
        self.upid = upid
        self.exitstatus = exitstatus

