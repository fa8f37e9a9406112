"""A converted config as YAML with comments: notes above their keys, leftovers at the end.

PyYAML drops comments, so the document is written here, key by key; each value goes
through ``yaml.safe_dump`` so that quoting is right.  ``yaml.safe_load`` of the result
gives back the dict that went in (the importer tests hold it to that).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

WIDTH = 100


@dataclass(frozen=True)
class Note:
    """A comment for the converted file.

    ``at``: the dotted Keel key it stands above (``"balancing.threshold"``); ``""`` for the
    header; None for the closing "not carried over" list, where ``source`` names the other
    tool's key as its file writes it.
    """

    text: str
    at: str | None = None
    source: str = ""


def render(config: dict[str, Any], notes: list[Note], tool: str) -> str:
    """The config as YAML, each note as a comment above its key, the leftovers at the end."""
    lines: list[str] = []
    for note in notes:
        if note.at == "":
            lines.extend(_comment(note.text, ""))
    by_key: dict[str, list[str]] = {}
    for note in notes:
        if note.at:
            by_key.setdefault(note.at, []).append(note.text)
    for key, value in config.items():
        lines.append("")
        _emit(lines, str(key), value, str(key), "", by_key)
    dropped = [n for n in notes if n.at is None]
    if dropped:
        lines.append("")
        lines.append(f"# Not carried over from {tool}:")
        for note in dropped:
            lines.extend(_comment(f"{note.source}: {note.text}" if note.text else note.source,
                                  "", bullet="  - "))
    return "\n".join(lines).lstrip("\n") + "\n"


def _emit(lines: list[str], key: str, value: Any, path: str, indent: str,
          by_key: dict[str, list[str]]) -> None:
    for text in by_key.get(path, ()):
        lines.extend(_comment(text, indent))
    if isinstance(value, dict) and value:
        lines.append(f"{indent}{_scalar(key)}:")
        for sub, item in value.items():
            _emit(lines, str(sub), item, f"{path}.{sub}", indent + "  ", by_key)
    else:
        lines.append(f"{indent}{_scalar(key)}: {_scalar(value)}")


def _scalar(value: Any) -> str:
    """One value in YAML's flow style (lists as ``[a, b]``), quoted where YAML needs it."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6)
    return text.removesuffix("\n...\n").strip()


def _comment(text: str, indent: str, bullet: str = "") -> list[str]:
    first = f"{indent}# {bullet}"
    rest = f"{indent}# {' ' * len(bullet)}"
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)
