"""Strict reading of YAML documents (config and scenario files).

A ``Reader`` walks a mapping, takes the keys it knows with their types and defaults,
and collects every problem with its path (``nodes[2].memory: ...``) instead of
stopping at the first.  Unknown keys are problems too.  ``Reader.done()`` raises one
``InvalidError`` listing them all.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

from keel.errors import InvalidError, KeelError
from keel.units import parse_duration, parse_size

T = TypeVar("T")
_MISSING = object()


class Problems:
    """Every error found in one document, each with the path of the bad key."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path or "(top level)", message))

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidError(
                f"{self.source}: {len(self.items)} problem(s): "
                + "; ".join(f"{path}: {message}" for path, message in self.items),
                errors=self.by_path(),
            )

    def by_path(self) -> dict[str, str]:
        """Every problem by its path; two at one path are both kept, joined by "; "."""
        errors: dict[str, str] = {}
        for path, message in self.items:
            errors[path] = f"{errors[path]}; {message}" if path in errors else message
        return errors


class Reader:
    """Reads one mapping at ``path``; reports into ``problems``."""

    def __init__(self, data: Any, path: str, problems: Problems):
        self.path = path
        self.problems = problems
        if data is None:
            data = {}
        if not isinstance(data, dict):
            problems.add(path, f"expected a mapping, got {type(data).__name__}")
            data = {}
        self.data: dict[str, Any] = data
        self.seen: set[str] = set()

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return self.data.get(key, default)

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING,
            check: Callable[[Any], str | None] | None = None) -> Any:
        """The value of ``key`` if it has the given type; ``default`` when absent.

        Without a default the key is required.  ``check`` returns a message when the
        value is not acceptable.
        """
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                self.problems.add(self.sub(key), "is required")
                return None
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in kinds and isinstance(value, bool) or not isinstance(value, kinds):
            names = " or ".join(_type_name(k) for k in kinds)
            self.problems.add(self.sub(key), f"expected {names}, got {value!r}")
            return None if default is _MISSING else default
        if check is not None:
            message = check(value)
            if message:
                self.problems.add(self.sub(key), message)
                return None if default is _MISSING else default
        return value

    def choice(self, key: str, options: tuple[str, ...], default: Any = _MISSING) -> Any:
        return self.get(key, str, default, check=lambda v: None if v in options else
                        f"must be one of {', '.join(options)}, got {v!r}")

    def size(self, key: str, default: Any = _MISSING) -> Any:
        return self._convert(key, default, lambda v: parse_size(v, self.sub(key)))

    def duration(self, key: str, default: Any = _MISSING) -> Any:
        return self._convert(key, default, lambda v: parse_duration(v, self.sub(key)))

    def number(self, key: str, default: Any = _MISSING, low: float | None = None,
               high: float | None = None) -> Any:
        def check(value: float) -> str | None:
            if low is not None and value < low:
                return f"must be at least {low}, got {value}"
            if high is not None and value > high:
                return f"must be at most {high}, got {value}"
            return None
        return self.get(key, float, default, check)

    def integer(self, key: str, default: Any = _MISSING, low: int | None = None,
                high: int | None = None) -> Any:
        def check(value: int) -> str | None:
            if low is not None and value < low:
                return f"must be at least {low}, got {value}"
            if high is not None and value > high:
                return f"must be at most {high}, got {value}"
            return None
        return self.get(key, int, default, check)

    def string_list(self, key: str, default: Any = ()) -> tuple[str, ...]:
        """A list of strings; a single string is split at commas, semicolons or spaces."""
        value = self.raw(key, _MISSING)
        if value is _MISSING or value is None:
            return tuple(default)
        if isinstance(value, str):
            return tuple(p for p in value.replace(";", ",").replace(" ", ",").split(",") if p)
        if isinstance(value, list) and all(isinstance(v, (str, int)) for v in value):
            return tuple(str(v) for v in value)
        self.problems.add(self.sub(key), f"expected a list of strings, got {value!r}")
        return tuple(default)

    def items(self, key: str) -> Iterator[tuple[str, Any]]:
        """(path, value) for each entry of a list."""
        value = self.raw(key, None)
        if value is None:
            return
        if not isinstance(value, list):
            self.problems.add(self.sub(key), f"expected a list, got {type(value).__name__}")
            return
        for index, item in enumerate(value):
            yield f"{self.sub(key)}[{index}]", item

    def mapping(self, key: str) -> "Reader":
        return Reader(self.raw(key, None), self.sub(key), self.problems)

    def _convert(self, key: str, default: Any, convert: Callable[[Any], T]) -> Any:
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                self.problems.add(self.sub(key), "is required")
                return None
            return default
        try:
            return convert(self.data[key])
        except KeelError as err:
            self.problems.add(self.sub(key), err.message.split(": ", 1)[-1])
            return None if default is _MISSING else default

    def done(self) -> None:
        """Report keys nobody asked for: a typo must not pass silently."""
        for key in sorted(set(self.data) - self.seen, key=str):
            self.problems.add(self.sub(str(key)), "unknown key")


def _type_name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false",
            list: "a list", dict: "a mapping"}.get(kind, kind.__name__)
