"""Guest tags as pve-guest-common's GuestHelpers treats them: normalised when stored, and
guarded by the datacenter's ``tag-style``, ``user-tag-access`` and ``registered-tags``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from keel.sim.errors import ApiError

if TYPE_CHECKING:
    from keel.sim.access import Auth
    from keel.sim.cluster import Cluster


def split_tags(text: str | None) -> list[str]:
    return [t for t in re.split(r"[;,\s]+", text or "") if t]


def unique_tags(cluster: "Cluster", text: str | None) -> str:
    """``get_unique_tags``: lower-cased unless tag-style says case-sensitive, de-duplicated,
    sorted unless tag-style says ordering=config, joined with ``;``."""
    style = cluster.options.get("tag-style") or {}
    case_sensitive = bool(int(style.get("case-sensitive", 0) or 0))
    found = split_tags(text)
    if style.get("ordering") != "config":
        found = sorted(found, key=lambda t: t if case_sensitive else t.lower())
    result: list[str] = []
    for tag in found:
        tag = tag if case_sensitive else tag.lower()
        if tag not in result:
            result.append(tag)
    return ";".join(result)


def _lists(cluster: "Cluster") -> tuple[set[str], str, set[str]]:
    access = cluster.options.get("user-tag-access") or {}
    registered = set(split_tags(_text(cluster.options.get("registered-tags"))))
    allow_list = set(split_tags(_text(access.get("user-allow-list"))))
    return registered, str(access.get("user-allow", "free")), allow_list


def _text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    return str(value or "")


def allowed_tags(cluster: "Cluster", auth: "Auth | None") -> set[str]:
    """``get_allowed_tags``: the tags a user may set (listed as ``allowed-tags``)."""
    if auth is None:
        return set()
    privileged = cluster.access.has(auth, "/", ["Sys.Modify"])
    registered, user_allow, allow_list = _lists(cluster)
    allowed: set[str] = set()
    if user_allow != "none" or privileged:
        allowed |= allow_list
    if user_allow in ("free", "existing") or privileged:
        for vmid, guest in cluster.guests.items():
            if privileged or cluster.access.has(auth, f"/vms/{vmid}", ["VM.Audit"]):
                allowed |= set(split_tags(guest.tags))
    return allowed | registered if privileged else allowed - registered


def check_tag_change(cluster: "Cluster", auth: "Auth | None", vmid: int, old: str | None,
                     new: str | None) -> None:
    """``assert_tag_permissions``: VM.Config.Options on the guest first (403 naming it), then
    each added or removed tag must be allowed for the user; registered tags need Sys.Modify
    on /.  root@pam, with every privilege, always passes."""
    if auth is None or auth.is_root:
        return
    if not cluster.access.has(auth, f"/vms/{vmid}", ["VM.Config.Options"]):
        raise ApiError(403, f"Permission check failed (/vms/{vmid}, VM.Config.Options)")
    if cluster.access.has(auth, "/", ["Sys.Modify"]):
        return
    registered, user_allow, _ = _lists(cluster)
    allowed = allowed_tags(cluster, auth)
    before, after = split_tags(old), split_tags(new)
    for tag in sorted(set(before) | set(after)):
        if before.count(tag) == after.count(tag):
            continue
        if (tag not in allowed and user_allow != "free") or tag in registered:
            raise ApiError(403, f"Permission check failed (/, Sys.Modify for modifying tag '{tag}')")
