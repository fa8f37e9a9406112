"""What Keel knows of one runner: its VM, its registration, and where it is in its life.

A runner goes through phases: ``new`` (a node chosen, registered with GitHub) →
``clone`` → ``config`` → ``start`` → ``boot`` (waiting for the guest agent) → ``ready``
(its JIT config delivered: from here GitHub says whether it is starting, idle or busy);
and when it goes: ``unregister`` → ``stop`` → ``destroy`` → gone.  Each record is kept
in the store (``RunnerStore.put_runner``) except its JIT config, which lives only in
memory until it is written into the VM.

Its VM carries what is needed to adopt it again after a restart or on another node: the
tags ``keel-runner`` and ``keel-runner-<installation>``, the runner's name as the VM's
name, and a ``keel-runner: {...}`` line in the description.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

CREATING = ("new", "clone", "config", "start", "boot")
REMOVING = ("unregister", "stop", "destroy")
TAG = "keel-runner"
MARK = "keel-runner:"


@dataclass
class Runner:
    name: str
    scale_set: str
    provider: str
    node: str | None = None
    vmid: int | None = None
    runner_id: int | None = None            # GitHub's registration id
    memory_bytes: int = 0
    cores: int = 0
    revision: str = ""
    phase: str = "new"
    created_at: float = 0.0
    ready_at: float | None = None           # JIT delivered
    connected_at: float | None = None
    busy_since: float | None = None
    job_id: str | None = None
    done: bool = False                      # its one job completed
    done_at: float | None = None
    reason: str | None = None               # why it is being removed
    forced: bool = False                    # removed even if busy (max_age, stuck)
    unregistered: bool = False              # its registration is gone
    upid: str | None = None                 # the task in flight
    next_at: float = 0.0                    # the earliest time for its next step
    tries: int = 0
    missing_since: float | None = None      # registration absent from GitHub's listing since
    offline_since: float | None = None      # connected once, now offline, since
    registered_at: float | None = None
    adopted: bool = False
    cloned: bool = False                    # its clone was requested: a VM exists or will
    ended_at: float | None = None           # its VM was found ended (stopped or gone) at
    verdict_pending: bool = False           # ended while GitHub was silent: why is asked later
    jit: str | None = field(default=None, repr=False, compare=False)

    @property
    def state(self) -> str:
        """What ``keel runners status`` says: creating, starting, idle, busy, removing."""
        if self.phase in REMOVING or self.reason:
            return "removing"
        if self.phase in CREATING:
            return "creating"
        if self.busy_since is not None and not self.done:
            return "busy"
        if self.connected_at is not None and not self.done:
            return "idle"
        return "starting" if not self.done else "removing"

    @property
    def alive(self) -> bool:
        """Counts towards desired: not done with its job and not going."""
        return not self.done and self.reason is None and self.phase not in REMOVING

    @property
    def counted(self) -> bool:
        """Counts against max_runners: from its registration until the request to delete its VM."""
        if self.phase == "destroy" and self.upid is not None:
            return False
        return self.cloned or self.phase == "new"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("jit")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Runner":
        known = {f.name for f in fields(cls)} - {"jit"}
        return cls(**{k: v for k, v in data.items() if k in known})


def description(runner: Runner, installation: str) -> str:
    """The VM's description: a line for people and one Keel reads back when it adopts the VM."""
    data = {"installation": installation, "name": runner.name, "scale_set": runner.scale_set,
            "provider": runner.provider, "runner_id": runner.runner_id, "revision": runner.revision,
            "created_at": runner.created_at}
    return (f"GitHub Actions runner of scale set {runner.scale_set}, made by Keel; it takes one job "
            f"and is then deleted.\n{MARK} {json.dumps(data, sort_keys=True)}\n")


def read_description(text: str | None) -> dict[str, Any] | None:
    for line in (text or "").splitlines():
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def tags(installation: str) -> list[str]:
    return [TAG, f"{TAG}-{installation}"]
