"""Sizes, durations and percentages as people write them, and back.

>>> parse_size("8GiB")
8589934592
>>> format_bytes(8589934592)
'8.0 GiB'
>>> parse_duration("2m30s")
150.0
"""

from __future__ import annotations

import re

from keel.errors import InvalidError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
    "p": 1024**5, "pb": 1000**5, "pib": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|min|s|m|h|d|w)")


def parse_size(value: object, what: str = "size") -> int:
    """Bytes from an int or a string such as ``512MiB``, ``8G`` or ``1.5TiB``.

    Bare ``G``/``M``/``K`` are binary units, as Proxmox VE uses them.
    """
    if isinstance(value, bool):
        raise InvalidError(f"{what}: expected a size such as 8GiB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidError(f"{what}: a size cannot be negative ({value})")
        return value
    if isinstance(value, float):
        if value < 0:
            raise InvalidError(f"{what}: a size cannot be negative ({value})")
        return int(value)
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match:
            unit = match.group(2).lower()
            if unit in _SIZE_UNITS:
                return int(float(match.group(1)) * _SIZE_UNITS[unit])
    raise InvalidError(f"{what}: expected a size such as 8GiB or a number of bytes, got {value!r}")


def parse_duration(value: object, what: str = "duration") -> float:
    """Seconds from a number or a string such as ``90s``, ``2m30s`` or ``1h``."""
    if isinstance(value, bool):
        raise InvalidError(f"{what}: expected a duration such as 30s, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise InvalidError(f"{what}: a duration cannot be negative ({value})")
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text):
            return float(text)
        pos, total = 0, 0.0
        for match in _DURATION_RE.finditer(text):
            if text[pos:match.start()].strip():
                break
            total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            pos = match.end()
        else:
            if pos and not text[pos:].strip():
                return total
    raise InvalidError(f"{what}: expected a duration such as 30s, 5m or 1h, got {value!r}")


def format_bytes(value: float, precision: int = 1) -> str:
    """``format_bytes(1536) == '1.5 KiB'``; binary units, as PVE's UI shows them."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    size = float(value)
    for unit in units:
        if abs(size) < 1024 or unit == units[-1]:
            if unit == "B":
                return f"{int(size)} B"
            return f"{size:.{precision}f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``format_duration(3725) == '1h02m'``; short, for tables."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
