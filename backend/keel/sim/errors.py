"""Errors the simulator answers with, in PVE's envelope and wording."""

from __future__ import annotations


class ApiError(Exception):
    """An answer other than 200: ``status``, a message (first line = reason phrase)."""

    def __init__(self, status: int, message: str, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or None


def param_error(errors: dict[str, str]) -> ApiError:
    return ApiError(400, "Parameter verification failed.", errors)


def not_found(message: str) -> ApiError:
    # PVE answers most "does not exist" cases with a plain 500.
    return ApiError(500, message)
