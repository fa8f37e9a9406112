"""``RunnerService``: the runners' loop, as the engine hosts it (only on the leader).

    service = RunnerService(settings, pve_client, store_path, clock=time.time)
    service.adopt()                 # find this installation's VMs by their tags (run() does it too)
    service.reconcile_once()        # one pass: safe to call again and again
    service.run(stop)               # the loop, until ``stop`` (a threading.Event) is set
    service.status()                # JSON-able: scale sets, providers, runners, recent jobs
    service.metrics()               # Prometheus text exposition
    service.handle_webhook(headers, body)   # a workflow_job delivery: (HTTP status, message)
    service.close()

``settings`` is the ``runners:`` section (``keel.runners.settings.RunnersSettings``);
``pve_client`` the ``PveClient`` of the cluster Keel runs on, used by providers without a
``url``; ``store_path`` Keel's SQLite database; ``clock`` gives epoch seconds.

``run`` holds one message session per scale set, each long-polled by a thread of its own
that hands messages to the loop and acknowledges them once taken in; the loop runs a
light pass when a message, a webhook or a runner in flight calls for one, and a full
pass (with GitHub's listing and statistics) every ``reconcile_interval``.  All state is
changed by one thread at a time, under ``self.lock``.  When ``stop`` is set, the loop
creates nothing more, carries the runners being created or removed to a resting point
(for up to ``STOP_GRACE_S``), closes the sessions, and returns; the next service adopts
what it left.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from typing import Any, Callable, Mapping

from keel.errors import FencedError, KeelError, NotFoundError
from keel.pve.client import PveClient, Target
from keel.runners import fleet, status as status_view, webhooks
from keel.runners.demand import SetState, apply_message, apply_webhook, matches
from keel.runners.github import Conflict, GitHubClient, RateLimited
from keel.runners.metrics import Metrics
from keel.runners.placement import Placement
from keel.runners.proxmox import ProxmoxProvider, Refused
from keel.runners.record import CREATING, REMOVING, Runner
from keel.runners.scaler import Want, want
from keel.runners.spec import ProviderSettings, RunnersSettings, ScaleSetSettings, read_secret
from keel.runners.store import RunnerStore

log = logging.getLogger("keel.runners")

IN_FLIGHT_STEP_S = 0.25        # how often runners being created or removed are stepped
STOP_GRACE_S = 60.0
ERROR_WAIT_S = 5.0
MIN_POLL_S = 0.5


class RunnerService:
    def __init__(self, settings: RunnersSettings, pve_client: PveClient | None, store_path: Any,
                 clock: Callable[[], float] = time.time, owner: str | None = None,
                 fence: Callable[[str], None] | None = None):
        self.settings = settings
        self.fence = fence                # the engine's leader fence: every write checks it first
        self.clock = clock
        self.installation = settings.installation_id
        self.owner = owner or f"keel@{socket.gethostname()}"
        self.lock = threading.RLock()
        self.store = RunnerStore(store_path, settings.events_max_count, settings.events_max_age_s)
        self.github = GitHubClient(settings.github, clock)
        self.github.fence = fence
        self.providers = {p.name: ProxmoxProvider(p, self._connector(p, pve_client))
                          for p in settings.providers}
        self.placement = Placement(settings.reconcile_interval_s)
        self.meters = Metrics()
        self.sets = {s.name: SetState(s.name) for s in settings.scale_sets}
        self.wants: dict[str, Want] = {}
        self.runners: dict[str, Runner] = {}
        self.listing: dict[str, dict[str, Any]] = {}
        self.listing_at = 0.0
        self.orphans: dict[str, tuple[int, float]] = {}
        self.gone_vms: set[str] = set()
        self.unreachable: dict[str, float] = {}
        self.refusals: dict[str, tuple[float, str, str, str]] = {}   # provider -> (t, set, kind, msg)
        self.last_failure: dict[str, str] = {}
        self.adopted_once = False
        self.name_pattern = fleet.name_pattern([s.name for s in settings.scale_sets])
        self.deliveries = webhooks.Deliveries()
        self._secret: bytes | None = None
        if settings.webhook.secret_path:
            self._secret = read_secret(settings.webhook.secret_path, "webhook secret").encode()
        self._inbox: "queue.Queue[tuple[str, str, Any, threading.Event | None]]" = queue.Queue()
        self._wake = threading.Event()
        self._status: dict[str, Any] = {}
        for data in self.store.runners():
            runner = Runner.from_dict(data)
            self.runners[runner.name] = runner

    def _connector(self, settings: ProviderSettings, local: PveClient | None) -> Callable[[], PveClient]:
        def connect() -> PveClient:
            if not settings.url:
                if local is None:
                    raise KeelError(f"provider {settings.name}: no connection to this cluster")
                return local
            secret = read_secret(str(settings.token_secret_path), f"API token secret of {settings.name}")
            verify: bool | str = settings.ca_file or settings.verify_tls
            target = Target.from_url(settings.url, verify=verify, timeout_s=settings.timeout_s)
            return PveClient(target.with_token(f"{settings.token_id}={secret}"), fence=self.fence)
        return connect

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
        next_full = 0.0
        try:
            while not stop.is_set():
                with self.lock:
                    changed = self._drain()
                    now = self.clock()
                    full = now >= next_full
                    if full or changed or self._in_flight():
                        try:
                            fleet.run_pass(self, full=full)
                        except KeelError as err:
                            log.warning("reconcile pass failed: %s", err)
                        if full:
                            next_full = now + self.settings.reconcile_interval_s
                        self._snapshot(save=full)
                    wait = IN_FLIGHT_STEP_S if self._in_flight() else max(0.05, min(1.0, next_full - now))
                self._wake.wait(wait)
                self._wake.clear()
        finally:
            self._settle(stop)
            self._close_sessions()            # a poll still waiting on GitHub ends with its session
            for thread in listeners:
                thread.join(timeout=5)

    def status(self) -> dict[str, Any]:
        with self.lock:
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

    # -- what the passes use ---------------------------------------------------------------------

    def save(self, runner: Runner) -> None:
        self.store.put_runner(runner.name, runner.scale_set, runner.provider, runner.to_dict(), self.clock())

    def forget(self, runner: Runner) -> None:
        self.runners.pop(runner.name, None)
        self.store.drop_runner(runner.name)
        if runner.cloned:
            self.gone_vms.add(runner.name)
            if len(self.gone_vms) > 10000:
                self.gone_vms.clear()

    def event(self, kind: str, runner: Runner, detail: str = "") -> None:
        self.store.event(self.clock(), kind, runner.scale_set, runner.provider, runner.name, detail)
        log.info("runner %s: %s %s", runner.name, kind, detail)

    def refused(self, ss: ScaleSetSettings | None, provider: str, refusal: Refused) -> None:
        if ss is None:
            return
        now = self.clock()
        lower = any(other.priority < ss.priority and other.provider(provider) is not None
                    for other in self.settings.scale_sets)
        backoff = self.placement.refused(ss.name, ss.priority, provider, refusal.kind, now, refusal.message,
                                         holds=lower)
        self.refusals[provider] = (now, ss.name, refusal.kind, refusal.message)
        self.meters.inc("keel_provider_refusals_total",
                                  {"provider": provider, "scale_set": ss.name, "kind": refusal.kind})
        self.store.event(now, "refused", ss.name, provider, "",
                         f"{refusal.kind}: {refusal.message}; skipped until +{backoff.until - now:.0f} s")
        log.info("%s refused a runner of %s (%s): %s", provider, ss.name, refusal.kind, refusal.message)

    def scale_set_of(self, runner_name: str) -> str | None:
        match = self.name_pattern.match(runner_name)
        return match.group(1) if match else None

    def ensure_github(self) -> None:
        """Each scale set on GitHub (found by name, or made) and a message session for it."""
        now = self.clock()
        for ss in self.settings.scale_sets:
            state = self.sets[ss.name]
            if state.session is not None or now < state.retry_at:
                continue
            try:
                if state.scale_set_id is None:
                    group = self.github.runner_group_id(ss.runner_group)
                    found = self.github.find_scale_set(ss.name, group) or \
                        self.github.create_scale_set(ss.name, group, list(ss.labels))
                    state.scale_set_id = int(found["id"])
                    state.set_statistics(found.get("statistics"), now)
                session = self.github.create_session(state.scale_set_id, self.owner)
            except Conflict:
                if not state.standby:
                    self.store.event(now, "standby", ss.name, "", "", "another listener holds the session")
                state.standby, state.retry_at = True, now + self.settings.reconcile_interval_s
                continue
            except RateLimited as err:
                state.error, state.retry_at = str(err), err.until
                continue
            except NotFoundError as err:          # a runner group the config names that GitHub lacks
                state.error, state.misconfigured, state.retry_at = str(err), True, now + ERROR_WAIT_S
                log.warning("scale set %s: %s", ss.name, err)
                continue
            except KeelError as err:
                state.error, state.misconfigured, state.retry_at = str(err), False, now + ERROR_WAIT_S
                log.warning("scale set %s: %s", ss.name, err)
                continue
            state.session, state.standby, state.error, state.misconfigured = session, False, None, False
            state.set_statistics(session.statistics, now)
            self.store.event(now, "listening", ss.name, "", "", f"session {session.id}")

    # -- messages and webhooks ----------------------------------------------------------------------

    def _poll(self, name: str) -> dict[str, Any] | None:
        state = self.sets[name]
        session = state.session
        if session is None:
            return None
        ss = self.settings.scale_set(name)
        if ss is None:
            return None
        capacity = (self.wants.get(name) or want(ss, self.clock(), state.assigned(self.clock()))).max_runners
        try:
            message = self.github.get_message(session, state.last_message_id, capacity)
        except KeelError as err:
            with self.lock:
                state.error = str(err)
                if "Expired" in str(err) or "404" in str(err):
                    state.session = None          # recreated by the next pass
            raise
        state.last_poll = self.clock()
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

    def _in_flight(self) -> bool:
        """Runners being created or removed, or done with their job: stepped often."""
        return any(r.phase in CREATING or r.phase in REMOVING or r.done for r in self.runners.values())

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
                except KeelError as err:
                    log.info("scale set %s: session not closed: %s", state.name, err)

    def _snapshot(self, save: bool) -> None:
        self._status = status_view.snapshot(self)
        if save:
            self.store.put("status", self._status)
            self.store.prune_jobs(self.clock())
