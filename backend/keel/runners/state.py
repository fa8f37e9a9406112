"""``Fleet``: what the runners know, and the small acts every pass shares.

The passes (``fleet``), a runner's steps (``lifecycle``) and the status (``status``) work
on a ``Fleet``; ``service.RunnerService`` is a ``Fleet`` with the loop around it.  So the
runners' modules import one way::

    service -> status, fleet -> lifecycle -> state -> github, proxmox, placement, demand, ...

A ``Fleet`` holds the settings, the connections (GitHub, each provider), the runners Keel
is creating, running or removing, each scale set's side of GitHub (``demand.SetState``),
the placement's backoffs and holds, and the counters.  It is changed by one thread at a
time (``RunnerService.lock``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Callable

from keel.errors import KeelError, NotFoundError
from keel.pve.client import PveClient, Target
from keel.runners.shared import Shared
from keel.runners.demand import SetState
from keel.runners.github import Conflict, GitHubClient, RateLimited, Session
from keel.runners.metrics import Metrics
from keel.runners.placement import Placement
from keel.runners.proxmox import ProxmoxProvider, Refused
from keel.runners.record import Runner
from keel.runners.scaler import Want
from keel.runners.settings import node_local
from keel.runners.spec import ProviderSettings, RunnersSettings, ScaleSetSettings, read_secret
from keel.runners.store import RunnerStore

log = logging.getLogger("keel.runners")

ERROR_WAIT_S = 5.0
PMXCFS = Path("/etc/pve")             # on a Proxmox VE node: files outside it are the node's own
SESSION_KEY = "session:"          # the store's record of the session Keel holds for a scale set


class Fleet:
    def __init__(self, settings: RunnersSettings, pve_client: PveClient | None, store_path: Any,
                 clock: Callable[[], float] = time.time, owner: str | None = None,
                 shared_dir: Any = None, fence: Callable[[str], None] | None = None):
        self.settings = settings
        self.fence = fence                # the engine's leader fence: every write checks it first
        self.clock = clock
        self.installation = settings.installation_id
        self.owner = owner or f"keel@{socket.gethostname()}"
        self.shared_dir = shared_dir
        self.store = RunnerStore(store_path, settings.events_max_count, settings.events_max_age_s)
        self.github = GitHubClient(settings.github, clock)
        self.github.fence = fence
        self.providers = {p.name: ProxmoxProvider(p, self._connector(p, pve_client))
                          for p in settings.providers}
        self.placement = Placement(settings.reconcile_interval_s)
        self.meters = Metrics()
        self.shared = Shared(self.store, shared_dir)
        self.sets = {s.name: SetState(s.name) for s in settings.scale_sets}
        self.wants: dict[str, Want] = {}
        self.runners: dict[str, Runner] = {}
        self.listing: dict[str, dict[str, Any]] = {}
        self.listing_at = 0.0
        self.orphans: dict[str, tuple[int, float]] = {}
        self.gone_vms: set[str] = set()
        self.unreachable: dict[str, float] = {}
        self.refusals: dict[str, tuple[float, str, str, str]] = {}   # provider -> (t, set, kind, msg)
        self.freed: dict[str, float] = {}              # provider -> when Keel last freed room there
        self.verdicts: dict[str, tuple[Runner, float]] = {}   # ended while GitHub was silent: (runner, when)
        self.last_failure: dict[str, str] = {}
        self.last_pass_at = 0.0
        self.adopted_once = False
        self.name_pattern = name_pattern([s.name for s in settings.scale_sets])
        self.wake: Callable[[], None] = lambda: None   # the loop runs a pass soon (RunnerService)
        self.notices = [f"runners.{key}: {path} is on this node only; the next node to lead would not have "
                        f"it: copy it to {place} (pmxcfs) and name that" for key, path, place in node_local(settings)
                        ] if PMXCFS.is_dir() else []
        for data in self.store.runners():
            runner = Runner.from_dict(data)
            self.runners[runner.name] = runner
        for job in self.store.open_jobs(self.clock()):
            state = self.sets.get(str(job.get("scale_set")))
            if state is not None:
                state.restore(job)
        self.meters.seed(settings)

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

    # -- runners ------------------------------------------------------------------------------

    def save(self, runner: Runner) -> None:
        self.store.put_runner(runner.name, runner.scale_set, runner.provider, runner.to_dict(), self.clock())

    def forget(self, runner: Runner) -> None:
        self.runners.pop(runner.name, None)
        self.store.drop_runner(runner.name)
        if runner.cloned:
            self.gone_vms.add(runner.name)
            if len(self.gone_vms) > 10000:
                self.gone_vms.clear()

    def room_freed(self, provider: str) -> None:
        """Keel's own runner left room on ``provider`` (its job done, its VM stopped or gone):
        the "full" backoffs there may end now (``fleet``), so a pass runs soon."""
        self.freed[provider] = self.clock()
        self.wake()

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

    # -- GitHub ---------------------------------------------------------------------------------

    def github_quiet(self, now: float) -> bool:
        """GitHub cannot be heard now (unreachable, failing or asking Keel to wait): what it
        has not said is no evidence of anything, so no runner is judged by its silence."""
        return self.github.blocked_until > now or self.github.trouble_since is not None

    def ensure_github(self) -> None:
        """Each scale set on GitHub (found by name, or made) and a message session for it.
        A session this Keel left behind (a crash: the process that held it is gone) is closed
        and replaced at once instead of waiting for GitHub to time it out."""
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
                try:
                    session = self.github.create_session(state.scale_set_id, self.owner)
                except Conflict:
                    if not self._reclaim(ss.name, state.scale_set_id):
                        raise
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
            self._remember_session(ss.name, session)
            self.store.event(now, "listening", ss.name, "", "", f"session {session.id}")

    def _remember_session(self, name: str, session: Session) -> None:
        record = {"id": session.id, "scale_set_id": session.scale_set_id, "owner": self.owner,
                  "host": socket.gethostname(), "pid": os.getpid(), "at": self.clock()}
        self.store.put(SESSION_KEY + name, record)
        self.shared.put_session(name, record)

    def forget_session(self, name: str) -> None:
        self.store.put(SESSION_KEY + name, None)
        self.shared.put_session(name, None)

    def _reclaim(self, name: str, scale_set_id: int) -> bool:
        """GitHub says another listener holds the scale set's session.  If it is the one this
        Keel recorded and the process that held it is gone (killed, crashed), it is closed
        now: GitHub allows it with the same credentials, and would otherwise keep it for two
        minutes.  A session of a live process is never touched (that is a second Keel)."""
        record = self.store.get(SESSION_KEY + name) or self.shared.session(name)
        if not isinstance(record, dict) or record.get("scale_set_id") != scale_set_id or not record.get("id"):
            return False
        same_host = record.get("host") == socket.gethostname()
        if same_host and record.get("pid") != os.getpid() and _alive(record.get("pid")):
            return False
        if not same_host and not self.shared.hosted:
            return False                     # another node's: only a leader (the engine) takes it over
        try:
            self.github.delete_session(Session(scale_set_id, str(record["id"]), "", ""))
        except KeelError as err:
            log.info("scale set %s: the session left behind could not be closed: %s", name, err)
            return False
        self.store.event(self.clock(), "reclaimed", name, "", "",
                         f"session {record['id']} of {record.get('owner')} (pid {record.get('pid')}) closed")
        log.info("scale set %s: closed the session a previous Keel left (%s)", name, record["id"])
        return True


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def name_pattern(names: list[str]) -> Any:
    """Runner (and VM) names of these scale sets: ``<scale set>-<8 hex digits>``."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"
    return re.compile(rf"^({alternatives})-[0-9a-f]{{8}}$")
