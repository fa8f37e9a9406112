"""What the ``runners:`` section reads into: frozen dataclasses, with the defaults and why.

``keel.runners.settings`` reads the YAML into these (and re-exports them).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from keel import schedule as sched
from keel.errors import InvalidError

MiB = 1024**2

# Defaults, with why.
DEFAULT_RECONCILE_INTERVAL_S = 30.0   # Rungar's; a hold lasts two of these
MIN_RECONCILE_INTERVAL_S = 5.0
DEFAULT_START_TIMEOUT_S = 300.0       # a VM has 5 minutes to boot and connect
MIN_START_TIMEOUT_S = 30.0
DEFAULT_PROVIDER_TIMEOUT_S = 10.0     # one API call; creating a runner is bounded by start_timeout
DEFAULT_JIT_PATH = "/run/keel/jitconfig"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9102"
DEFAULT_WEBHOOK_LISTEN = "127.0.0.1:9103"
DEFAULT_EVENTS_MAX_COUNT = 10000
PLACEMENTS = ("spread", "pack")
PROVIDER_TYPES = ("proxmox",)
RUNNER_KEYS = ("template", "cores", "memory", "full_clone", "storage", "pool", "jit_path")
# A VM's name is the runner's: the scale set's name, "-" and 8 hex digits, a DNS label.
NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,52}[A-Za-z0-9])?$")
SECRET_KEYS = {"token": "token_path", "app_private_key": "app_private_key_path",
               "token_secret": "token_secret_path", "secret": "secret_path"}


@dataclass(frozen=True)
class GitHubSettings:
    url: str = ""
    app_client_id: str | None = None
    app_installation_id: int | None = None
    app_private_key_path: str | None = None
    token_path: str | None = None
    ca_file: str | None = None           # tls.ca_file: GitHub Enterprise Server with its own CA
    verify_tls: bool = True              # tls.insecure_skip_verify: false
    timeout_s: float = 30.0

    @property
    def scope(self) -> tuple[str, str]:
        """``("orgs", "my-org")``, ``("repos", "owner/repo")`` or ``("enterprises", "e")``."""
        return github_scope(self.url)


@dataclass(frozen=True)
class RunnerSpec:
    """A runner block after the scale set's is written over the provider's.

    The template is one VM (``template: 9000``), a copy per node (``template: {pve1: 9000,
    pve2: 9001}``), or every template VM of a name, one per node (``template: runner-tpl``):
    a runner is cloned from a copy on a node that is up, so no node's loss stops them all."""

    template: int                        # the VMID; 0 when given per node or by name
    cores: int
    memory_bytes: int
    full_clone: bool = False
    storage: str | None = None
    pool: str | None = None
    jit_path: str = DEFAULT_JIT_PATH
    template_name: str | None = None     # every template VM of this name
    templates: tuple[tuple[str, int], ...] = ()   # per node: (node, VMID)

    @property
    def template_ids(self) -> tuple[int, ...]:
        """The template VMIDs named (none when by name)."""
        return tuple(vmid for _, vmid in self.templates) or ((self.template,) if self.template else ())

    @property
    def template_text(self) -> str:
        """The template as a person wrote it: ``9000``, ``runner-tpl``, ``pve1=9000, pve2=9001``."""
        if self.templates:
            return ", ".join(f"{node}={vmid}" for node, vmid in self.templates)
        return self.template_name or str(self.template)

    @property
    def revision(self) -> str:
        """Names this block: a runner made from another revision is replaced when idle."""
        template: object = self.template
        if self.templates or self.template_name:
            template = [self.template_name, list(self.templates)]
        data = json.dumps([template, self.cores, self.memory_bytes, self.full_clone,
                           self.storage, self.pool, self.jit_path])
        return hashlib.sha256(data.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    type: str = "proxmox"
    url: str | None = None               # another cluster; unset: the one Keel runs on
    token_id: str | None = None
    token_secret_path: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    nodes: tuple[str, ...] = ()          # unset: every online node
    timeout_s: float = DEFAULT_PROVIDER_TIMEOUT_S
    weight: float = 1.0
    max_runners: int | None = None
    disabled: bool = False


@dataclass(frozen=True)
class ScaleSetProvider:
    name: str
    runner: RunnerSpec


@dataclass(frozen=True)
class ScaleSetSettings:
    name: str
    max_runners: int
    providers: tuple[ScaleSetProvider, ...]
    labels: tuple[str, ...] = ()
    runner_group: str | None = None      # unset: GitHub's "Default" group
    min_runners: int = 0
    priority: int = 0
    placement: str = "spread"
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    max_idle_age_s: float | None = None
    max_age_s: float | None = None
    paused: bool = False
    schedule: sched.Schedule | None = None

    def window(self, now: float) -> sched.Window | None:
        return self.schedule.match(now) if self.schedule else None

    def min_runners_at(self, now: float) -> int:
        """The ``min_runners`` in force: the first matching window's, else the scale set's."""
        window = self.window(now)
        return int(window.extra.get("min_runners", 0)) if window else self.min_runners

    def max_runners_at(self, now: float) -> int:
        """``max_runners``, or a window's own (0 pauses the scale set during the window)."""
        window = self.window(now)
        if window is not None and window.extra.get("max_runners") is not None:
            return min(self.max_runners, int(window.extra["max_runners"]))
        return self.max_runners

    def provider(self, name: str) -> ScaleSetProvider | None:
        return next((p for p in self.providers if p.name == name), None)

    @property
    def all_labels(self) -> frozenset[str]:
        """What a job may ask for to run here: the name and the extra labels, lower case."""
        return frozenset(label.lower() for label in (self.name, *self.labels))


@dataclass(frozen=True)
class Listen:
    enable: bool = False
    listen: str = ""


@dataclass(frozen=True)
class WebhookSettings:
    secret_path: str | None = None       # set: workflow_job webhooks are accepted
    listen: str = DEFAULT_WEBHOOK_LISTEN

    @property
    def enabled(self) -> bool:
        return self.secret_path is not None


@dataclass(frozen=True)
class RunnersSettings:
    github: GitHubSettings = GitHubSettings()
    providers: tuple[ProviderSettings, ...] = ()
    scale_sets: tuple[ScaleSetSettings, ...] = ()
    reconcile_interval_s: float = DEFAULT_RECONCILE_INTERVAL_S
    installation: str | None = None
    metrics: Listen = Listen(False, DEFAULT_METRICS_LISTEN)
    webhook: WebhookSettings = WebhookSettings()
    events_max_count: int = DEFAULT_EVENTS_MAX_COUNT
    events_max_age_s: float | None = None
    configured: bool = False             # a runners: section was given

    @property
    def installation_id(self) -> str:
        """8 hex digits on every runner VM (tag ``keel-runner-<id>``): two Keels serving
        different GitHub scopes never adopt each other's runners."""
        name = self.installation or self.github.url.rstrip("/").lower()
        return hashlib.sha256(name.encode()).hexdigest()[:8]

    def provider(self, name: str) -> ProviderSettings | None:
        return next((p for p in self.providers if p.name == name), None)

    def scale_set(self, name: str) -> ScaleSetSettings | None:
        return next((s for s in self.scale_sets if s.name == name), None)


def github_scope(url: str) -> tuple[str, str]:
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if len(parts) == 2 and parts[0] == "enterprises":
        return "enterprises", parts[1]
    if len(parts) == 1:
        return "orgs", parts[0]
    if len(parts) == 2:
        return "repos", f"{parts[0]}/{parts[1]}"
    raise InvalidError(f"not a GitHub organisation, repository or enterprise URL: {url!r}")


def read_secret(path: str, what: str) -> str:
    """A secret from its file.  The message names the file, never its content."""
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise InvalidError(f"cannot read the {what} from {path}: {err.strerror}") from None
    if not value:
        raise InvalidError(f"the {what} file {path} is empty")
    return value
