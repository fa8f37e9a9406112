"""The scenario's ``github:`` section: what the fake GitHub starts with (docs/simulator.md).

.. code-block:: yaml

    github:
      repos: [my-org/app]
      apps:
        - {client_id: Iv23liAbCdEf123456, public_key: "-----BEGIN PUBLIC KEY-----...",
           installations: [{id: 12345678, account: my-org}]}
      scale_sets: [{name: keel-c2-m4}]
      jobs: [{repo: my-org/app, labels: [keel-c2-m4], duration: 2m}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keel.validate import Problems, Reader

RESULTS = ("succeeded", "failed", "canceled")
FAULT_KINDS = ("never_connect", "crash_mid_job", "ghost", "slow_boot", "lose_messages",
               "duplicate_messages", "rate_limit", "stale_assigned", "outage", "webhook_drop",
               "webhook_duplicate", "webhook_bad_signature")


@dataclass(frozen=True)
class AppSpec:
    client_id: str
    app_id: int
    public_key: str
    installations: tuple[tuple[int, str], ...]     # (installation id, account)


@dataclass(frozen=True)
class JobSpec:
    repo: str
    labels: tuple[str, ...]
    duration_s: float = 60.0
    result: str = "succeeded"
    name: str = "build"
    runner: str | None = None        # already running on this runner (scenario start)


@dataclass(frozen=True)
class RunnerSpec:
    """A runner that exists when the scenario starts, on a VM of the scenario."""

    name: str
    scale_set: str
    vmid: int
    busy: bool = True


@dataclass(frozen=True)
class GitHubSpec:
    repos: tuple[str, ...] = ("my-org/app",)
    apps: tuple[AppSpec, ...] = ()
    tokens: tuple[str, ...] = ()                   # personal access tokens (any scope)
    runner_groups: tuple[tuple[int, str], ...] = ((1, "Default"),)
    scale_sets: tuple[tuple[str, tuple[str, ...], str], ...] = ()   # (name, labels, group)
    runners: tuple[RunnerSpec, ...] = ()
    jobs: tuple[JobSpec, ...] = ()
    webhook_url: str | None = None
    webhook_secret: str | None = None
    long_poll_s: float = 0.5                       # real seconds an empty poll waits
    connect_s: float = 2.0                         # JIT written → runner online
    poweroff_s: float = 1.0                        # job done → VM off
    lost_runner_s: float = 300.0                   # a crashed runner's job fails after this
    session_timeout_s: float = 120.0               # a session nobody polls ends
    token_ttl_s: float = 3600.0
    queue_timeout_s: float = 86400.0               # GitHub cancels a job queued a day
    rate_limit: int = 5000                         # REST requests per token per hour
    faults: dict[str, Any] = field(default_factory=dict)

    @property
    def owners(self) -> set[str]:
        return {r.split("/")[0] for r in self.repos} | {a for app in self.apps
                                                        for _, a in app.installations}


def read(r: Reader) -> GitHubSpec:
    apps = []
    for path, item in r.items("apps"):
        a = Reader(item, path, r.problems)
        installs = []
        for ipath, inst in a.items("installations"):
            i = Reader(inst, ipath, r.problems)
            installs.append((i.integer("id", None, 1) or 0, i.get("account", str, "")))
            i.done()
        key = a.get("public_key", str, "")
        if key and "BEGIN PUBLIC KEY" not in key:
            r.problems.add(a.sub("public_key"), "expected a PEM public key (-----BEGIN PUBLIC KEY-----)")
        apps.append(AppSpec(str(a.get("client_id", (str, int), "")), a.integer("app_id", len(apps) + 1, 1),
                            key, tuple(installs)))
        a.done()
    groups = []
    for path, item in r.items("runner_groups"):
        g = Reader(item, path, r.problems)
        groups.append((g.integer("id", None, 1) or 0, g.get("name", str, "")))
        g.done()
    scale_sets = []
    for path, item in r.items("scale_sets"):
        s = Reader(item, path, r.problems)
        scale_sets.append((s.get("name", str, ""), s.string_list("labels"), s.get("runner_group", str, "Default")))
        s.done()
    runners = []
    for path, item in r.items("runners"):
        x = Reader(item, path, r.problems)
        runners.append(RunnerSpec(x.get("name", str, ""), x.get("scale_set", str, ""),
                                  x.integer("vmid", None, 100) or 0, x.get("busy", bool, True)))
        x.done()
    jobs = []
    for path, item in r.items("jobs"):
        j = Reader(item, path, r.problems)
        jobs.append(JobSpec(j.get("repo", str, "my-org/app"), j.string_list("labels"),
                            j.duration("duration", 60.0), j.choice("result", RESULTS, "succeeded"),
                            j.get("name", str, "build"), j.get("runner", str, None)))
        j.done()
    hook = r.mapping("webhook")
    url, secret = hook.get("url", str, None), hook.get("secret", str, None)
    hook.done()
    spec = GitHubSpec(
        repos=r.string_list("repos", ("my-org/app",)), apps=tuple(apps), tokens=r.string_list("tokens"),
        runner_groups=tuple(groups) or ((1, "Default"),), scale_sets=tuple(scale_sets),
        runners=tuple(runners), jobs=tuple(jobs), webhook_url=url, webhook_secret=secret,
        long_poll_s=r.duration("long_poll", 0.5), connect_s=r.duration("connect", 2.0),
        poweroff_s=r.duration("poweroff", 1.0), lost_runner_s=r.duration("lost_runner", 300.0),
        session_timeout_s=r.duration("session_timeout", 120.0), token_ttl_s=r.duration("token_ttl", 3600.0),
        queue_timeout_s=r.duration("queue_timeout", 86400.0), rate_limit=r.integer("rate_limit", 5000, 1),
        faults=dict(r.raw("faults", {}) or {}))
    for kind in spec.faults:
        if kind not in FAULT_KINDS:
            r.problems.add(f"{r.sub('faults')}.{kind}", f"unknown fault (known: {', '.join(FAULT_KINDS)})")
    for job in spec.jobs:
        if job.runner and job.runner not in {x.name for x in spec.runners}:
            r.problems.add(r.sub("jobs"), f"no runner named {job.runner!r}")
    r.done()
    return spec


def parse(data: Any, source: str = "github") -> GitHubSpec:
    problems = Problems(source)
    spec = read(Reader(data, "", problems))
    problems.raise_if_any()
    return spec
