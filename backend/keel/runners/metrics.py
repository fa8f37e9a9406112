"""The runners' Prometheus metrics, in the text exposition format (written by hand: small).

Counters and histograms are kept here as things happen; gauges come from the service's
state each time ``render`` is called.  Every metric is named ``keel_``; the table below
is what docs/runners.md lists.  A series that can be zero is there from the start and
reads 0 (``seed``): every scale set and provider with each reason, result and kind.

    keel_runners_desired{scale_set="rungar-c8-m16"} 3
    keel_runners_current{scale_set="rungar-c8-m16",state="busy"} 2
    keel_job_runner_wait_seconds_bucket{scale_set="rungar-c8-m16",le="30"} 41
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

WAIT_BUCKETS = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

METRICS = {
    # gauges
    "keel_runners_min": ("gauge", "Runners the scale set keeps idle and ready: the min_runners in force."),
    "keel_runners_desired": ("gauge", "Runners the scale set should have: assigned jobs plus min_runners, "
                                      "at most max_runners; 0 while paused."),
    "keel_runners_max": ("gauge", "The max_runners in force (0: paused or off schedule)."),
    "keel_runners_current": ("gauge", "Runners alive, by state (creating, starting, idle, busy, removing)."),
    "keel_jobs_assigned": ("gauge", "Jobs GitHub has assigned the scale set and not completed."),
    "keel_scale_set_paused": ("gauge", "1 while the scale set is paused (by its config or its schedule)."),
    "keel_scale_set_listening": ("gauge", "1 while Keel holds the scale set's message session."),
    "keel_scale_set_last_poll_timestamp_seconds": ("gauge", "When GitHub last answered the scale set's poll."),
    "keel_scale_set_last_reconcile_timestamp_seconds": ("gauge", "When the scale set was last reconciled."),
    "keel_scale_set_holding_back": ("gauge", "1 while a higher-priority scale set holds this one back from "
                                             "the provider."),
    "keel_provider_backoff_seconds": ("gauge", "How much longer the scale set skips the provider after a "
                                               "refusal."),
    "keel_provider_reachable": ("gauge", "1 if the provider's last listing succeeded."),
    "keel_provider_held": ("gauge", "1 while a scale set's hold keeps lower priorities off the provider."),
    "keel_provider_runners": ("gauge", "Runners on the provider, by scale set."),
    "keel_github_blocked_until_timestamp_seconds": ("gauge", "Until when GitHub asked Keel to wait (rate "
                                                             "limit), as a Unix time; 0 if not."),
    "keel_github_rate_limit_remaining": ("gauge", "Requests GitHub's rate limit has left (x-ratelimit-remaining "
                                                  "of its last REST answer), by resource."),
    "keel_github_reachable": ("gauge", "1 if GitHub answered Keel's last call; 0 while it is unreachable, "
                                       "failing or asking Keel to wait (no runner is judged then)."),
    "keel_jobs_waiting": ("gauge", "Jobs assigned to the scale set that no runner has taken yet: the queue."),
    "keel_jobs_waiting_oldest_seconds": ("gauge", "How long the oldest job in the queue has waited; 0 if none."),
    "keel_jobs_unconfirmed": ("gauge", "Jobs GitHub counts as assigned that Keel knows nothing of (phantoms "
                                       "or a lost message): no runner until confirmed."),
    "keel_scale_set_draining": ("gauge", "1 while the scale set is draining (keel runners drain)."),
    # counters
    "keel_runners_created_total": ("counter", "Runners whose VM clone was requested."),
    "keel_runners_removed_total": ("counter", "Runners removed, by reason."),
    "keel_runners_lost_total": ("counter", "Runners lost: their VM ended without their job completing "
                                           "(ended), or their provider was unreachable (unreachable)."),
    "keel_scale_up_failures_total": ("counter", "Runners wanted that could not be created when first wanted "
                                                "(each counted once, however long it waits)."),
    "keel_provider_calls_total": ("counter", "Calls to the provider, by call and result."),
    "keel_provider_refusals_total": ("counter", "Runners a provider refused, by scale set and kind "
                                                "(full, never, failing)."),
    "keel_jobs_started_total": ("counter", "Jobs started on the scale set's runners."),
    "keel_jobs_completed_total": ("counter", "Jobs completed, by result."),
    "keel_github_requests_total": ("counter", "Requests to GitHub, by HTTP status (error: no answer)."),
    "keel_webhooks_total": ("counter", "Webhook deliveries, by outcome (accepted, duplicate, "
                                       "bad_signature, ignored)."),
    # histograms
    "keel_job_wait_seconds": ("histogram", "From a job being queued to a runner taking it (GitHub's clock)."),
    "keel_job_runner_wait_seconds": ("histogram", "From a job being assigned to the scale set to a runner "
                                                  "taking it (GitHub's clock): Keel's part of the wait."),
    "keel_runner_create_duration_seconds": ("histogram", "From registering a runner to its JIT config "
                                                         "being in its VM."),
}
BUCKETS = {"keel_job_wait_seconds": WAIT_BUCKETS, "keel_job_runner_wait_seconds": WAIT_BUCKETS,
           "keel_runner_create_duration_seconds": DURATION_BUCKETS}

Labels = tuple[tuple[str, str], ...]

# Why a runner was removed (keel_runners_removed_total) or lost (keel_runners_lost_total).
REMOVED_REASONS = ("job_completed", "scaled_down", "never_connected", "unregistered", "disconnected",
                   "stuck", "outdated", "expired", "requested", "orphaned")
LOST_REASONS = ("ended", "unreachable")
FAILURE_REASONS = ("no_capacity", "error")
JOB_RESULTS = ("succeeded", "failed", "canceled")
REFUSAL_KINDS = ("full", "never", "failing")
WEBHOOK_OUTCOMES = ("accepted", "duplicate", "bad_signature", "ignored")
PROVIDER_CALLS = ("list", "create", "delete")


def _labels(labels: dict[str, str] | None) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in (labels or {}).items()))


class Metrics:
    """Counters and histograms (thread-safe); gauges are passed to ``render``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[tuple[str, Labels], float] = {}
        self.histograms: dict[tuple[str, Labels], list[float]] = {}   # bucket counts..., sum, count

    def inc(self, name: str, labels: dict[str, str] | None = None, by: float = 1.0) -> None:
        assert METRICS[name][0] == "counter", name
        with self._lock:
            key = (name, _labels(labels))
            self.counters[key] = self.counters.get(key, 0.0) + by

    def seed(self, settings: Any) -> None:
        """Every series of the configured scale sets and providers at 0, so that a rate or an
        alert on it works from the start (a series that appears later is none until then)."""
        zero = [("keel_webhooks_total", {"outcome": o}) for o in WEBHOOK_OUTCOMES]
        for ss in settings.scale_sets:
            name = {"scale_set": ss.name}
            zero.append(("keel_jobs_started_total", name))
            zero += [("keel_jobs_completed_total", {**name, "result": r}) for r in JOB_RESULTS]
            zero += [("keel_scale_up_failures_total", {**name, "reason": r}) for r in FAILURE_REASONS]
            for entry in ss.providers:
                pair = {**name, "provider": entry.name}
                zero.append(("keel_runners_created_total", pair))
                zero += [("keel_runners_removed_total", {**pair, "reason": r}) for r in REMOVED_REASONS
                         if r != "orphaned"]
                zero += [("keel_runners_lost_total", {**pair, "reason": r}) for r in LOST_REASONS]
                zero += [("keel_provider_refusals_total", {**pair, "kind": k}) for k in REFUSAL_KINDS]
            zero.append(("keel_runners_removed_total", {**name, "provider": "", "reason": "orphaned"}))
        for provider in settings.providers:
            zero += [("keel_provider_calls_total", {"provider": provider.name, "call": c, "result": r})
                     for c in PROVIDER_CALLS for r in ("ok", "error")]
        with self._lock:
            for metric, labels in zero:
                self.counters.setdefault((metric, _labels(labels)), 0.0)

    def set_counter(self, name: str, labels: dict[str, str], value: float) -> None:
        with self._lock:
            self.counters[(name, _labels(labels))] = value

    def observe(self, name: str, labels: dict[str, str], value: float) -> None:
        buckets = BUCKETS[name]
        with self._lock:
            key = (name, _labels(labels))
            row = self.histograms.setdefault(key, [0.0] * (len(buckets) + 2))
            for i, bound in enumerate(buckets):
                if value <= bound:
                    row[i] += 1
            row[-2] += value
            row[-1] += 1

    def count(self, name: str, **labels: str) -> float:
        """A counter's value (summed over the labels not given): for tests and the bench."""
        with self._lock:
            return sum(v for (n, lab), v in self.counters.items()
                       if n == name and all(dict(lab).get(k) == str(x) for k, x in labels.items()))

    def render(self, gauges: Iterable[tuple[str, dict[str, str], float]]) -> str:
        series: dict[str, list[str]] = {name: [] for name in METRICS}
        for name, labels, value in gauges:
            series[name].append(f"{name}{_fmt(_labels(labels))} {_num(value)}")
        with self._lock:
            for (name, labels), value in sorted(self.counters.items()):
                series[name].append(f"{name}{_fmt(labels)} {_num(value)}")
            for (name, labels), row in sorted(self.histograms.items()):
                for i, bound in enumerate(BUCKETS[name]):
                    series[name].append(f"{name}_bucket{_fmt(labels + (('le', _num(bound)),))} {_num(row[i])}")
                series[name].append(f"{name}_bucket{_fmt(labels + (('le', '+Inf'),))} {_num(row[-1])}")
                series[name].append(f"{name}_sum{_fmt(labels)} {_num(row[-2])}")
                series[name].append(f"{name}_count{_fmt(labels)} {_num(row[-1])}")
        lines = []
        for name, (kind, text) in METRICS.items():
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(series[name])
        return "\n".join(lines) + "\n"


def _fmt(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), "")}"'
               for k, v in labels)
    return "{" + ",".join(escaped) + "}"


def _num(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
