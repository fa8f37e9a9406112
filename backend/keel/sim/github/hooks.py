"""``workflow_job`` webhooks, delivered as GitHub does: POST with the raw JSON body and an
HMAC-SHA256 signature of it, a 10 s timeout, and no retry (``redeliver`` is by hand).

Deliveries go out from a thread of their own, in the order the jobs changed, never while
the cluster's lock is held.  Faults (``POST /_github/faults``), each for the next N
deliveries: ``webhook_drop`` (never sent), ``webhook_duplicate`` (sent twice with the
same delivery id), ``webhook_bad_signature`` (signed with another secret).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

TIMEOUT_S = 10.0
HOOK_ID = 424242


class Hooks:
    def __init__(self, fake: Any, url: str | None, secret: str | None):
        self.fake = fake
        self.url = url
        self.secret = secret
        self.log: list[dict[str, Any]] = []
        self._bodies: dict[int, tuple[str, bytes]] = {}
        self._queue: "queue.Queue[dict[str, Any]]" = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def configure(self, url: str | None, secret: str | None) -> None:
        self.url, self.secret = url, secret

    # -- what is sent ---------------------------------------------------------------------------

    def job_event(self, job: Any, action: str) -> None:
        if not self.url:
            return
        fake = self.fake
        owner, _, name = job.repo.partition("/")
        installation = next((inst for app in fake.spec.apps for inst, account in app.installations
                             if account == owner), None)
        payload = {"action": action, "workflow_job": fake.job_json(job),
                   "repository": {"id": abs(hash(job.repo)) % 10**8, "name": name, "full_name": job.repo,
                                  "owner": {"login": owner}},
                   "organization": {"login": owner}, "sender": {"login": "octocat"}}
        if installation is not None:
            payload["installation"] = {"id": installation}
        self.send("workflow_job", action, json.dumps(payload).encode(), job.id)

    def send(self, event: str, action: str, body: bytes, job_id: int | None = None,
             guid: str | None = None) -> dict[str, Any]:
        fake = self.fake
        delivery = {"id": len(self.log) + 1, "guid": guid or str(uuid.UUID(int=fake.rng.getrandbits(128))),
                    "event": event, "action": action, "job_id": job_id, "at": fake.now,
                    "status": None, "error": None, "redelivery": guid is not None}
        self.log.append(delivery)
        self._bodies[delivery["id"]] = (delivery["guid"], body)
        if fake.take_fault("webhook_drop"):
            delivery["error"] = "dropped (fault)"
            return delivery
        delivery["bad_signature"] = bool(fake.take_fault("webhook_bad_signature"))
        self._enqueue(delivery, body)
        if fake.take_fault("webhook_duplicate"):
            twin = dict(delivery, id=len(self.log) + 1)
            self.log.append(twin)
            self._enqueue(twin, body)
        return delivery

    def redeliver(self, delivery_id: int) -> dict[str, Any]:
        guid, body = self._bodies[delivery_id]
        original = self.log[delivery_id - 1]
        return self.send(original["event"], original["action"], body, original["job_id"], guid)

    def headers(self, delivery: dict[str, Any], body: bytes) -> dict[str, str]:
        secret = (self.secret or "") if not delivery.get("bad_signature") else "not-the-secret"
        headers = {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/fake",
                   "X-GitHub-Event": delivery["event"], "X-GitHub-Delivery": delivery["guid"],
                   "X-GitHub-Hook-ID": str(HOOK_ID),
                   "X-GitHub-Hook-Installation-Target-Type": "organization",
                   "X-GitHub-Hook-Installation-Target-ID": "1"}
        if self.secret is not None:
            headers["X-Hub-Signature-256"] = "sha256=" + hmac.new(secret.encode(), body,
                                                                   hashlib.sha256).hexdigest()
            headers["X-Hub-Signature"] = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
        return headers

    # -- the delivery thread --------------------------------------------------------------------

    def _enqueue(self, delivery: dict[str, Any], body: bytes) -> None:
        self._queue.put({"delivery": delivery, "body": body, "url": self.url,
                         "headers": self.headers(delivery, body)})
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="keel-sim-webhooks", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=5)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                self._post(item)
            finally:
                self._queue.task_done()

    def _post(self, item: dict[str, Any]) -> None:
        delivery = item["delivery"]
        request = urllib.request.Request(item["url"], data=item["body"], headers=item["headers"],
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:   # noqa: S310 (a test URL)
                delivery["status"] = response.status
        except urllib.error.HTTPError as err:
            delivery["status"] = err.code
        except (urllib.error.URLError, OSError) as err:
            delivery["error"] = str(getattr(err, "reason", err))[:200]

    def flush(self, timeout_s: float = 15.0) -> bool:
        """Wait until every queued delivery has been attempted; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def entries(self) -> list[dict[str, Any]]:
        return [dict(d) for d in self.log]
