"""``RunnerService``: the runners' loop, as the engine hosts it (only on the leader).

    service = RunnerService(settings, pve_client, store_path, clock=time.time)
    service.adopt()                 # find this installation's VMs by their tags (run() does it too)
    service.reconcile_once()        # one pass: safe to call again and again
    service.run(stop)               # the loop, until ``stop`` (a threading.Event) is set
    service.status()                # JSON-able: scale sets, providers, runners, recent jobs
    service.metrics()               # Prometheus text exposition
    service.handle_webhook(headers, body)   # a workflow_job delivery: (HTTP status, message)
    service.control(name, action, who)      # pause, resume or drain a scale set at run time
    service.close()

``settings`` is the ``runners:`` section (``keel.runners.settings.RunnersSettings``);
``pve_client`` the ``PveClient`` of the cluster Keel runs on, used by providers without a
``url``; ``store_path`` Keel's SQLite database; ``clock`` gives epoch seconds;
``shared_dir`` (the engine's ``engine.shared_dir``) where operator controls and sessions
are kept for every node (``shared``); ``clock_rate`` how many of ``clock``'s seconds pass
in a real one (1; a test's simulator may run faster).

``run`` holds one message session per scale set, each long-polled by a thread of its own
that hands messages to the loop and acknowledges them once taken in.  The loop is driven
by events: it runs a pass as soon as a message, a webhook, a control or room freed by a
runner that went calls for one, and when something falls due (``fleet.due``: a backoff
or hold ending, a runner's next step or deadline), sleeping in between; a full pass (with
GitHub's listing and statistics) runs every ``reconcile_interval`` as the backstop.  All
state is changed by one thread at a time, under ``self.lock``.  When ``stop`` is set, the
loop creates nothing more, carries the runners being created or removed to a resting
point (for up to ``STOP_GRACE_S``), closes the sessions, and returns; the next service
adopts what it left.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Mapping

from keel.errors import FencedError, InvalidError, KeelError, NotFoundError
from keel.pve.client import PveClient
from keel.runners import fleet, scaling, status as status_view, webhooks
from keel.runners.demand import apply_message, apply_webhook, matches
from keel.runners.github import RateLimited
from keel.runners.record import CREATING, REMOVING
from keel.runners.scaler import want
from keel.runners.shared import ACTIONS
from keel.runners.spec import RunnersSettings, read_secret
from keel.runners.state import ERROR_WAIT_S, Fleet

log = logging.getLogger("keel.runners")

MIN_PASS_GAP_S = 0.1           # passes called for only by something due: at most this often
MAX_SLEEP_S = 5.0              # the loop looks at the shared controls at least this often
STATUS_SAVE_S = 2.0            # the status `keel runners status` reads is saved this often
STOP_GRACE_S = 60.0
MIN_POLL_S = 0.5
IN_FLIGHT_STEP_S = 0.25        # while stopping: runners in flight stepped this often


class RunnerService(Fleet):
    def __init__(self, settings: RunnersSettings, pve_client: PveClient | None, store_path: Any,
                 clock: Callable[[], float] = time.time, owner: str | None = None,
                 fence: Callable[[str], None] | None = None, shared_dir: Any = None,
                 clock_rate: float = 1.0):
        super().__init__(settings, pve_client, store_path, clock, owner, shared_dir, fence)
        self.lock = threading.RLock()
        self.clock_rate = clock_rate
        self.deliveries = webhooks.Deliveries()
        self._secret: bytes | None = None
        if settings.webhook.secret_path:
            self._secret = read_secret(settings.webhook.secret_path, "webhook secret").encode()
        self._inbox: "queue.Queue[tuple[str, str, Any, threading.Event | None]]" = queue.Queue()
        self._wake = threading.Event()
        self.wake = self._wake.set
        self._status: dict[str, Any] = {}
        self._saved_at = float("-inf")

    # -- the interface the engine hosts ------------------------------------------------------------

    def adopt(self) -> None:
        """Find this installation's runner VMs by their tags and take them over (for the scale
        sets whose message session this service holds: it opens them first)."""
        with self.lock:
            self.ensure_github()
            views = {}
            for name, provider in self.providers.items():
                try:
                    views[name] = provider.view()
                except KeelError as err:
                    log.warning("provider %s unreachable; its runners are adopted later: %s", name, err)
            fleet.adopt(self, views)

    def reconcile_once(self) -> None:
        """One full pass: messages and webhooks taken in, then look, clean up, scale, step."""
        with self.lock:
            self._drain()
            fleet.run_pass(self, full=True)
            self._snapshot(save=True)

    def poll_once(self) -> int:
        """One poll of each scale set's message queue, in this thread (tests; ``run`` uses
        threads); the number of messages taken in."""
        taken = 0
        for name in list(self.sets):
            try:
                message = self._poll(name)
            except KeelError as err:
                log.info("scale set %s: no message: %s", name, err)
                continue
            if message is not None:
                with self.lock:
                    self._take_message(name, message)
                self._ack(name, message)
                taken += 1
        return taken

    def run(self, stop: threading.Event) -> None:
        """The loop, until ``stop`` is set; see the module docstring."""
        self.adopt()
        listeners = [threading.Thread(target=self._listen, args=(name, stop), daemon=True,
                                      name=f"keel-runners-{name}") for name in self.sets]
        for thread in listeners:
            thread.start()
        next_full = next_at = 0.0
        try:
            while not stop.is_set():
                self._wake.clear()            # a wake from here on ends the sleep below
                with self.lock:
                    changed = self._drain() or self.shared.reload()
                    now = self.clock()
                    full = now >= next_full
                    ran = full or changed or now >= next_at
                    if ran:
                        try:
                            fleet.run_pass(self, full=full)
                        except KeelError as err:
                            log.warning("reconcile pass failed: %s", err)
                        if full:
                            next_full = now + self.settings.reconcile_interval_s
                        self._snapshot(save=full)
                    now = self.clock()
                    next_at = min(next_full, fleet.due(self, now))     # the timers: what falls due next
                    wake_at = min(next_at, now + MAX_SLEEP_S * self.clock_rate)
                wait = max(MIN_PASS_GAP_S if ran else 0.0, (wake_at - now) / self.clock_rate)
                self._wake.wait(wait)
        finally:
            self._settle(stop)
            self._close_sessions()            # a poll still waiting on GitHub ends with its session
            for thread in listeners:
                thread.join(timeout=5)

    def control(self, name: str, action: str, who: str) -> dict[str, Any]:
        """Pause, resume or drain a scale set now (``keel runners pause|resume|drain``): kept
        until changed, with who and when; the loop acts on it at once.  The scale set's
        status."""
        if action not in ACTIONS:
            raise InvalidError(f"action: expected pause, resume or drain, got {action!r}")
        if name not in self.sets:
            raise NotFoundError(f"no scale set named {name!r} (the scale sets are "
                                f"{', '.join(self.sets) or 'none'})")
        with self.lock:
            now = self.clock()
            self.shared.set_control(name, action, who, now)
            self.store.event(now, {"pause": "paused", "resume": "resumed", "drain": "draining"}[action],
                             name, "", "", f"by {who}")
            log.info("scale set %s: %s by %s", name, action, who)
            scaling.wants(self, now)
            self.wake()
            return next(s for s in status_view.snapshot(self)["scale_sets"] if s["name"] == name)

    def status(self) -> dict[str, Any]:
        with self.lock:
            self.shared.reload()              # a control given through another door shows at once
            return status_view.snapshot(self)

    def metrics(self) -> str:
        """The Prometheus text exposition of the runners' metrics."""
        with self.lock:
            return self.meters.render(status_view.gauges(self))

    def handle_webhook(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """A ``workflow_job`` delivery: checked, then handed to the loop.  (HTTP status, text)."""
        if self._secret is None:
            return 404, "webhooks are not enabled (runners.webhook.secret_path)"
        if not webhooks.verify(self._secret, body, webhooks.header(headers, "X-Hub-Signature-256")):
            self.meters.inc("keel_webhooks_total", {"outcome": "bad_signature"})
            return 401, "the signature does not match"
        delivery = (webhooks.header(headers, "X-GitHub-Delivery") or "").strip()
        if not delivery:
            return 400, "no X-GitHub-Delivery header: GitHub sends one with every delivery"
        event = webhooks.header(headers, "X-GitHub-Event")
        payload = webhooks.parse(body)
        # A signed body replayed under another delivery id is the same job's same step.
        if not all([self.deliveries.first_time(key) for key in webhooks.keys(delivery, event, payload)]):
            self.meters.inc("keel_webhooks_total", {"outcome": "duplicate"})
            return 200, "a delivery seen before; ignored"
        if event == "ping":
            return 200, "pong"
        if event != "workflow_job" or payload is None:
            self.meters.inc("keel_webhooks_total", {"outcome": "ignored"})
            return 202, "not a workflow_job event; ignored"
        self.meters.inc("keel_webhooks_total", {"outcome": "accepted"})
        self._inbox.put(("webhook", "", payload, None))
        self._wake.set()
        return 202, "accepted"

    def close(self) -> None:
        self._close_sessions()
        for provider in self.providers.values():
            provider.close()
        self.github.close()
        self.store.close()

    # -- messages and webhooks ----------------------------------------------------------------------

    def _poll(self, name: str) -> dict[str, Any] | None:
        state = self.sets[name]
        session = state.session
        if session is None:
            return None
        ss = self.settings.scale_set(name)
        if ss is None:
            return None
        now = self.clock()
        control = self.shared.control(name)
        capacity = (self.wants.get(name) or want(ss, now, state.demand(now), control and control["mode"])).max_runners
        try:
            message = self.github.get_message(session, state.last_message_id, capacity)
        except KeelError as err:
            with self.lock:
                state.error = str(err)
                if "Expired" in str(err) or "404" in str(err):
                    state.session = None          # recreated by the next pass
            raise
        state.last_poll, state.error = self.clock(), None
        return message

    def _ack(self, name: str, message: dict[str, Any]) -> None:
        session = self.sets[name].session
        if session is not None and message.get("messageId"):
            try:
                self.github.ack_message(session, int(message["messageId"]))
            except KeelError as err:
                log.warning("scale set %s: cannot acknowledge message %s: %s", name, message["messageId"], err)

    def _listen(self, name: str, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.sets[name].session is None:
                stop.wait(0.5)
                continue
            asked = time.monotonic()
            try:
                message = self._poll(name)
            except RateLimited as err:
                stop.wait(max(0.5, min(60.0, err.until - self.clock())))
                continue
            except KeelError:
                stop.wait(ERROR_WAIT_S)
                continue
            if message is None:
                # GitHub holds a poll ~50 s; an answer much sooner is not a reason to ask at once
                stop.wait(max(0.0, MIN_POLL_S - (time.monotonic() - asked)))
                continue
            taken = threading.Event()
            self._inbox.put(("message", name, message, taken))
            self._wake.set()
            taken.wait(30)
            self._ack(name, message)

    def _drain(self) -> bool:
        """Take in what the listeners and webhooks handed over; True if anything came."""
        came = False
        while True:
            try:
                kind, name, payload, taken = self._inbox.get_nowait()
            except queue.Empty:
                return came
            came = True
            if kind == "message":
                self._take_message(name, payload)
            else:
                self._take_webhook(payload)
            if taken is not None:
                taken.set()

    def _take_message(self, name: str, message: dict[str, Any]) -> None:
        state = self.sets[name]
        effects, acquire = apply_message(state, message, self.clock())
        if acquire and state.scale_set_id is not None:
            try:
                self.github.acquire_jobs(state.scale_set_id, acquire)
            except KeelError as err:
                log.warning("scale set %s: cannot acquire jobs: %s", name, err)
        self._apply(name, effects)

    def _take_webhook(self, payload: dict[str, Any]) -> None:
        labels = (payload.get("workflow_job") or {}).get("labels") or []
        runner_name = (payload.get("workflow_job") or {}).get("runner_name") or ""
        for ss in self.settings.scale_sets:
            if self.scale_set_of(runner_name) == ss.name or matches(labels, ss.all_labels):
                self._apply(ss.name, apply_webhook(self.sets[ss.name], payload, self.clock()))
                return

    def _apply(self, name: str, effects: list[Any]) -> None:
        now = self.clock()
        for effect in effects:
            job = effect.job
            self.store.put_job(job.row())
            runner = self.runners.get(effect.runner or "")
            if effect.kind == "started":
                self.meters.inc("keel_jobs_started_total", {"scale_set": name})
                if runner is not None:
                    runner.busy_since, runner.job_id = runner.busy_since or now, job.job_id
                    runner.connected_at = runner.connected_at or now
                    self.save(runner)
                if not job.waits_observed and job.started_at is not None:
                    job.waits_observed = True
                    if job.assigned_at is not None:
                        self.meters.observe("keel_job_runner_wait_seconds", {"scale_set": name},
                                                      max(0.0, job.started_at - job.assigned_at))
                    if job.queued_at is not None:
                        self.meters.observe("keel_job_wait_seconds", {"scale_set": name},
                                                      max(0.0, job.started_at - job.queued_at))
            elif effect.kind == "completed":
                self.meters.inc("keel_jobs_completed_total",
                                          {"scale_set": name, "result": str(job.result or "unknown")})
                if runner is not None:
                    runner.done, runner.done_at = True, now
                    self.save(runner)

    # -- loop helpers --------------------------------------------------------------------------------

    def _settle(self, stop: threading.Event) -> None:
        """Carry runners being created or removed to a resting point; create nothing new.
        Not when this engine stopped leading: then nothing may be done, and the next leader
        adopts them as they are."""
        try:
            if self.fence is not None:
                self.fence("carrying runners in flight to rest")
        except FencedError:
            log.info("not the leader: runners in flight are left as they are for the next leader")
            with self.lock:
                self._snapshot(save=True)
            return
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            with self.lock:
                busy = [r for r in self.runners.values() if r.phase in CREATING or r.phase in REMOVING]
                if not busy:
                    break
                try:
                    fleet.step_only(self)
                except KeelError as err:
                    log.warning("while stopping: %s", err)
            time.sleep(IN_FLIGHT_STEP_S)
        with self.lock:
            self._snapshot(save=True)

    def _close_sessions(self) -> None:
        for state in self.sets.values():
            session, state.session = state.session, None
            if session is not None:
                try:
                    self.github.delete_session(session)
                    self.forget_session(state.name)
                except KeelError as err:
                    log.info("scale set %s: session not closed: %s", state.name, err)

    def _snapshot(self, save: bool) -> None:
        self._status = status_view.snapshot(self)
        now = time.monotonic()
        if save or now - self._saved_at >= STATUS_SAVE_S:
            self._saved_at = now
            self.store.put("status", self._status)
        if save:
            self.store.prune_jobs(self.clock())
