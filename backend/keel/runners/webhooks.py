"""``workflow_job`` webhooks: checked against the shared secret before anything else.

GitHub signs the exact bytes it sends: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256>``.
``verify`` recomputes it over the body as received and compares in constant time; a
delivery without a good signature has no effect at all.  GitHub does not retry a failed
delivery and may send one twice, so deliveries are remembered by ``X-GitHub-Delivery``
(``Deliveries``) and a repeat is acknowledged and ignored.  A signed body stays valid for
ever, so a ``workflow_job`` is also remembered by its job id and action: the same body
replayed under a new delivery id is not acted on again (``keys``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections import OrderedDict
from typing import Any, Mapping

REMEMBER = 10000


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode())


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, whatever its case (WSGI environ, requests, dict)."""
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def parse(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def keys(delivery: str, event: str | None, payload: dict[str, Any] | None) -> list[str]:
    """What a delivery is remembered by: its id, and for a ``workflow_job`` the job and action."""
    found = [f"delivery:{delivery}"]
    job = payload.get("workflow_job") if event == "workflow_job" and payload else None
    if isinstance(job, dict) and isinstance(job.get("id"), int):
        found.append(f"job:{job['id']}:{payload.get('action')}")
    return found


class Deliveries:
    """The delivery ids seen lately (thread-safe)."""

    def __init__(self, size: int = REMEMBER):
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, delivery: str) -> bool:
        with self._lock:
            if delivery in self._seen:
                return False
            self._seen[delivery] = None
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
            return True
