"""What a caller may see of plans, jobs and history: only the guests PVE would show them.

PVE lists a guest in ``/cluster/resources`` only to a user with ``VM.Audit`` on
``/vms/<id>``; Keel does the same with every answer that names guests.  ``see(vmid)`` says
whether the caller may see a guest (``engine.api``: VM.Audit or VM.Migrate there).  What
is left out is counted, never named; free-text notices that name a hidden guest are left
out too.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from keel import words

See = Callable[[Any], bool]


def moves(rows: list[dict[str, Any]], see: See) -> list[dict[str, Any]]:
    return [row for row in rows if see(row.get("vmid"))]


def _names(items: list[dict[str, Any]], see: See) -> list[str]:
    """Names and vmids of the guests ``items`` mention that the caller may not see."""
    hidden = []
    for item in items:
        if not see(item.get("vmid")):
            hidden.append(str(item.get("vmid")))
            if item.get("name"):
                hidden.append(str(item["name"]))
    return hidden


def _texts(texts: list[str], hidden: list[str]) -> list[str]:
    if not hidden:
        return texts
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(h) for h in hidden) + r")(?![\w.-])")
    return [t for t in texts if not pattern.search(t)]


def plan(data: dict[str, Any], see: See) -> dict[str, Any]:
    """A plan's JSON with the guests the caller may not see left out of its lists."""
    skipped = data.get("skipped") or []
    shown = [s for s in skipped if see(s.get("vmid"))]
    hidden = _names(list(data.get("moves") or []) + list(skipped), see)
    count = len(skipped) - len(shown)
    if count:
        shown.append({"reason": words.NOT_PERMITTED, "vmid": None, "name": None,
                      "detail": f"{count} guests you may not see (no VM.Audit on /vms/<id>)"})
    return {**data, "moves": moves(data.get("moves") or [], see), "skipped": shown,
            "conflicts": _texts(list(data.get("conflicts") or []), hidden),
            "notices": _texts(list(data.get("notices") or []), hidden)}


def job(data: dict[str, Any], see: See) -> dict[str, Any]:
    """A job's JSON: its plan's moves and its events for guests the caller may see."""
    result = dict(data)
    if isinstance(data.get("plan"), dict):
        result["plan"] = {**data["plan"], "moves": moves(data["plan"].get("moves") or [], see)}
    if isinstance(data.get("events"), list):
        result["events"] = [e for e in data["events"] if see(e.get("vmid"))]
    return result


HIDDEN_GUEST = "a guest you may not see"


def hidden_names(guests: Any, see: See) -> list[str]:
    """The vmids and names of the guests (``model.Guest``) the caller may not see."""
    hidden: list[str] = []
    for g in guests:
        if not see(g.vmid):
            hidden.append(str(g.vmid))
            if g.name:
                hidden.append(str(g.name))
    return hidden


def scrub(value: Any, hidden: list[str]) -> Any:
    """``value`` (JSON) with every mention of a hidden guest in its strings replaced by
    HIDDEN_GUEST, for answers whose free text must stay (power saving's refusals and
    events say why a node stays awake)."""
    if not hidden:
        return value
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(h) for h in sorted(set(hidden), key=len,
                                                                                 reverse=True)) + r")(?![\w.-])")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return pattern.sub(HIDDEN_GUEST, v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v
    return walk(value)
