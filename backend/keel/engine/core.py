"""The engine's state and loops, independent of HTTP (``engine.api`` serves it).

Threads:

* the **lease loop** (every ``engine.lock_renew``): renews or takes the leader lease, and
  reloads the config file when it changed — a bad file is refused, its problems kept for
  status, and the last good config keeps running;
* the **balancer loop** (every ``balancing.interval``, leader only): one round — samples,
  plan, guard, and migrations when ``balancing.enable`` is on;
* the **runners** (leader only, when configured): ``keel.runners.service``.

Only the leader acts.  Losing the lease cancels the running execution before its next
migration starts (running ones finish; Proxmox VE completes them anyway).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from keel import authz, config as cfg
from keel.authz import Principal
from keel.balance import guestconfig
from keel.balance.balancer import best_node, make_plan
from keel.balance.journal import Journal
from keel.balance.plan import Plan
from keel.balance.rounds import Rounds
from keel.engine import outcome, runners_shared, views
from keel.engine.jobs import Job, Jobs
from keel.engine.leadership import Leadership
from keel.engine.power_loop import PowerLoop
from keel.engine.reading import SharedReading
from keel.engine.reconcile import Reconciler
from keel.errors import BusyError, InvalidError, KeelError, NotAllowedError, UnavailableError
from keel.pve import snapshot as snapshots
from keel.pve.client import PveClient
from keel.files import atomic_write
from keel.store import Store

log = logging.getLogger("keel.engine")
EXECUTE_WAIT_S = 20.0     # an apply waits this long for a balancing round to finish
FRESH_S = 2.0             # a plan may use a reading that started this long before it was asked for
ACL_MAX_AGE_S = 60.0      # the ACL paths, as keel-web's privilege cache


class Engine:
    def __init__(self, config_path: str | Path, environ: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time, poll_s: float = 2.0):
        self.config_path = Path(config_path)
        self.environ = dict(os.environ if environ is None else environ)
        self.clock = clock
        self.poll_s = poll_s
        self.config = cfg.load(self.config_path)          # the first must be good
        self.config_error: str | None = None
        self._config_stamp = self._stamp()
        # The engine's paths (socket, store, lock, secrets) are the ones it started with:
        # a reload never adopts another ``engine:`` section (reload_if_changed).
        es = self.engine_settings = self.config.engine
        self.node = es.node_name
        self.leadership = Leadership(es, self.node, clock, on_taken=self._on_taken, on_lost=self._on_lost)
        self.lease, self.fence = self.leadership.lease, self.leadership.fence
        self.store = Store(es.store, shared_dir=es.shared_dir)
        self.client = self._client()
        self.reconciler = Reconciler(lambda: self.client, self.store, self.node, es.shared_dir,
                                     leads=self.lease.held, clock=clock, poll_s=poll_s)
        self.jobs = Jobs()
        self.power = PowerLoop(self)
        self.errors: deque[dict[str, Any]] = deque(maxlen=20)
        self.last_round: dict[str, Any] | None = None
        self.started_at = clock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._execute = threading.Lock()          # one execution (job or round) at a time
        self._lost = self.leadership.lost_event   # set while this node does not lead
        self._threads: list[threading.Thread] = []
        self.reading = SharedReading(self._read_cluster, "cluster")
        self.acl = SharedReading(self._read_acl_paths, "acl")
        self.runners: Any = None
        self.runners_error: str | None = None
        self._runners_lock = threading.Lock()      # one start, stop or restart at a time
        self._runners_retry_at = 0.0
        self._runner_store: Any = None
        self._runners_shared_at = 0.0

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        for name, target in (("lease", self._lease_loop), ("balancer", self._balancer_loop)):
            thread = threading.Thread(target=target, name=f"keel-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.reading.refresh(0)                   # the first reading, for status
        self._reconcile(shared=False)             # what this node's last run left unfinished
        log.info("engine started on %s (config %s)", self.node, self.config_path)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._lost.set()
        self.jobs.cancel_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self.jobs.join(timeout=30)
        self._stop_runners()
        self.leadership.release()
        self.client.close()
        log.info("engine stopped")

    @property
    def leader(self) -> bool:
        return self.leadership.leader

    def leader_node(self) -> str | None:
        return self.leadership.leader_node()

    def require_leader(self) -> None:
        self.leadership.require()

    def hand_over(self, reason: str) -> None:
        """Give up the lease so that another node leads (power's hand-over, docs/power.md): the
        runners stop first, no job runs (the caller holds the execution lock)."""
        with self._runners_lock:                  # the lease loop starts none meanwhile
            self._stop_runners_locked()
            self.leadership.hand_over(reason, self.engine_settings.lock_expiry_s)

    # -- config -------------------------------------------------------------------------------

    def _stamp(self) -> str:
        try:
            return hashlib.sha256(self.config_path.read_bytes()).hexdigest()
        except OSError as err:
            return f"error:{err.strerror}"

    def reload_if_changed(self) -> bool:
        stamp = self._stamp()
        if stamp == self._config_stamp:
            return False
        self._config_stamp = stamp
        try:
            config = cfg.load(self.config_path)
        except KeelError as err:
            self.config_error = str(err)
            self._error("config", str(err))
            log.error("config %s refused, the last good one keeps running: %s", self.config_path, err)
            return False
        if config.engine != self.engine_settings:
            log.warning("config: engine paths changed; they take effect when keel-engine restarts")
            config = replace(config, engine=self.engine_settings)
        proxmox_changed = config.proxmox != self.config.proxmox
        runners_changed = config.runners != self.config.runners
        self.config = config
        self.config_error = None
        if proxmox_changed:
            old, self.client = self.client, self._client()
            old.close()
        log.info("config %s reloaded", self.config_path)
        if runners_changed:
            self.restart_runners()
        self._wake.set()
        return True

    def log_change(self, what: str, requested_by: str) -> None:
        log.info("%s changed by %s", what, requested_by)

    def validate_config(self, text: str) -> cfg.Config:
        import yaml
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise InvalidError(f"not valid YAML: {err}") from None
        except RecursionError:
            raise InvalidError("not valid YAML: nested too deeply") from None
        return views.parse_config(self, data)

    def put_config(self, text: str, requested_by: str) -> cfg.Config:
        config = self.validate_config(text)
        atomic_write(self.config_path, text if text.endswith("\n") else text + "\n")
        log.info("config %s written by %s", self.config_path, requested_by)
        if config.engine != self.engine_settings:
            log.warning("config: engine paths changed; they take effect when keel-engine restarts")
        self.reload_if_changed()
        return config

    def _client(self) -> PveClient:
        strict = self.config.engine.open_secret_files == "refuse"
        return PveClient(cfg.target_from(self.config.proxmox, self.environ, strict=strict), fence=self.fence.check)

    # -- the loops ----------------------------------------------------------------------------

    def _lease_loop(self) -> None:
        while not self._stop.is_set():
            renewing = time.monotonic()
            if self.leadership.tick():
                self._start_runners()
                runners_shared.share(self)
            self.reload_if_changed()
            # the next renewal is due lock_renew after this one started, whatever the rest took
            self._stop.wait(max(0.0, self.config.engine.lock_renew_s - (time.monotonic() - renewing)))

    def _on_taken(self) -> None:
        self._reconcile(shared=True)              # what the last leader left unfinished
        self._wake.set()

    def _on_lost(self, reason: str) -> None:
        for job in self.jobs.recent():
            job.cancel(f"this node lost the leader lease ({reason})")
        # not on the caller's thread: a fenced act of the runners themselves may have noticed
        threading.Thread(target=self._stop_runners, name="keel-runners-stop", daemon=True).start()

    def _reconcile(self, shared: bool) -> None:
        def run() -> None:
            try:
                if self.reconciler.run(shared, self._stop):
                    self._wake.set()              # a round may plan again with the outcomes known
                if shared:
                    self.power.reconcile(self._stop)   # a sleep or wake the last leader left
            except Exception as err:              # said in status; the next start tries again
                self._error("reconcile", f"{err}")
                log.exception("reconciling unfinished jobs failed")
        threading.Thread(target=run, name="keel-reconcile", daemon=True).start()

    def _balancer_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            if self.leader:
                try:
                    self.balance_round()
                except KeelError as err:
                    self._error("balancer", str(err))
                    log.error("balancing round failed: %s", err)
                except Exception as err:          # never let the loop die
                    self._error("balancer", f"internal error: {err!r}")
                    log.exception("balancing round failed")
                self._power_round()
                self.store.prune(self.clock())
            self._wake.wait(self.config.balancing.interval_s)

    def _power_round(self) -> None:
        """Power saving's round, after the balancer's (``engine.power_loop``)."""
        try:
            self.power.tick()
        except KeelError as err:
            self._error("power", str(err))
            log.error("power round failed: %s", err)
        except Exception as err:                  # never let the loop die
            self._error("power", f"internal error: {err!r}")
            log.exception("power round failed")

    def balance_round(self) -> dict[str, Any] | None:
        settings = self.config.balancing
        lock = self._execute if settings.enable else threading.Lock()   # a dry run executes nothing
        if not lock.acquire(blocking=False):
            return None                        # an apply job is running: it is the round
        try:
            rounds = Rounds(self.client, settings, self.store, requested_by="keel engine (balancing.enable)",
                            clock=self.clock, poll_s=self.poll_s, cancel=self._lost, journal=self._journal,
                            abandon=self._stop)
            result = rounds.round(apply=settings.enable and self.leader)
            if result.execution is not None and result.execution.results and not result.decision.mandatory_only:
                outcome.record_promise(self.store, result.execution.plan_id, result.plan)   # its whole plan ran
                outcome.record_achieved(self, result.execution.plan_id, result.execution)
            self.last_round = {**result.line(), "applied": settings.enable, "node": self.node}
            if result.snapshot is not None:
                self.reading.put(result.snapshot, age_s=self.clock() - result.snapshot.taken_at)
            return self.last_round
        finally:
            lock.release()

    # -- runners (when configured) --------------------------------------------------------------

    def _start_runners(self) -> None:
        settings = getattr(self.config, "runners", None)
        if self.runners is not None or settings is None or not getattr(settings, "configured", False):
            return
        if self.clock() < self._runners_retry_at or not self._runners_lock.acquire(blocking=False):
            return                                # a restart is under way, or it failed just now
        try:
            if self.runners is not None or self._stop.is_set():
                return
            from keel.runners.service import RunnerService
            try:
                service = RunnerService(settings, self.client, self.config.engine.store, clock=self.clock,
                                        fence=self.fence.check, shared_dir=self.config.engine.shared_dir)
            except KeelError as err:              # a secret file missing: said, retried, never fatal
                self.runners_error = str(err)
                self._runners_retry_at = self.clock() + 30.0
                self._error("runners", str(err))
                log.error("the runners cannot start: %s", err)
                return
            self.runners_error = None
            stop = threading.Event()
            thread = threading.Thread(target=service.run, args=(stop,), name="keel-runners", daemon=True)
            self.runners = (service, stop, thread)
            thread.start()
        finally:
            self._runners_lock.release()

    def _stop_runners(self) -> None:
        with self._runners_lock:
            self._stop_runners_locked()

    def _stop_runners_locked(self) -> None:
        if self.runners is None:
            return
        service, stop, thread = self.runners
        stop.set()
        thread.join(timeout=90)
        if thread.is_alive():                 # its files stay open rather than closed under it
            log.warning("the runners did not stop within 90 s; their thread is left to end")
        else:
            service.close()
        self.runners = None

    def restart_runners(self) -> None:
        """Soon, in a thread of its own (the lease loop must keep renewing): the runners stop
        and start again with the config and secret files as they are now."""
        self._runners_retry_at = 0.0
        if self.runners is not None:
            threading.Thread(target=self._restart_runners, name="keel-runners-restart", daemon=True).start()

    def _restart_runners(self) -> None:
        """The runners' settings changed: the service stops (runners in flight come to rest)
        and the lease loop starts one with the new settings, which adopts the VMs."""
        log.info("runner settings changed: the runners restart")
        self._stop_runners()
        if self.leader and not self._stop.is_set():
            self._start_runners()

    def runners_status(self) -> dict[str, Any]:
        """Live on the leader; on a follower, what the leader last shared (``remote``)."""
        running = self.runners
        if running is None:
            configured = getattr(getattr(self.config, "runners", None), "configured", False)
            local = {"enabled": configured, "active": False, "error": self.runners_error,
                     "leader": self.leader, "leader_node": self.leader_node()}
            shared = runners_shared.read(self) if configured and not self.leader else None
            return {**shared, **local, "remote": True} if shared else local
        return {"enabled": True, "active": True, "error": None, "leader": True, "leader_node": self.node,
                **running[0].status()}

    def runner_store(self) -> Any:
        """The runners' tables in this node's database (jobs and events), also on a follower."""
        running = self.runners
        if running is not None:
            return running[0].store
        if self._runner_store is None:
            from keel.runners.store import RunnerStore
            try:
                self._runner_store = RunnerStore(self.config.engine.store)
            except KeelError:
                return None
        return self._runner_store

    # -- reading ------------------------------------------------------------------------------

    def _read_cluster(self) -> Any:
        return snapshots.collect(self.client, psi=self.config.balancing.mode == "psi", now=self.clock())

    def snapshot(self, max_age_s: float | None = None) -> Any:
        """The cluster as read at most ``max_age_s`` ago (default: ``engine.status_interval``),
        one fetch shared by everyone asking at once."""
        max_age = self.config.engine.status_interval_s if max_age_s is None else max_age_s
        return self.reading.get(max_age)

    def _read_acl_paths(self) -> frozenset[str]:
        """Every path with an ACL entry (``GET /access/acl``, Sys.Audit on /access): where PVE
        may have given a caller something other than what it inherits (``keel.authz``)."""
        return frozenset(authz.normalise(str(e.get("path", "/"))) for e in self.client.get("/access/acl") or ())

    def considered(self, snap: Any) -> frozenset[str]:
        """The paths PVE looked at for a caller's privileges besides the top levels: ACL paths
        and pool members.  Without the ACL list nothing can be judged per guest: refused."""
        try:
            paths = self.acl.get(ACL_MAX_AGE_S)
        except KeelError as err:
            raise UnavailableError(f"cannot read the cluster's ACLs to check privileges per guest ({err}); "
                                   f"Keel's token needs Sys.Audit on /access") from None
        return paths | {f"/vms/{g.vmid}" for g in snap.guests.values() if g.pool}

    def may(self, principal: Principal | None, privilege: str, snap: Any) -> Callable[[int], bool]:
        """Whether ``principal`` has ``privilege`` on ``/vms/<vmid>``, for each guest of ``snap``."""
        if principal is None or principal.is_root:
            return lambda vmid: True
        considered = self.considered(snap)
        return lambda vmid: principal.can(privilege, f"/vms/{vmid}", considered)

    def plan(self, method: str | None = None, principal: Principal | None = None,
             max_age_s: float = FRESH_S) -> Plan:
        now = self.clock()
        settings = self.config.balancing
        snap = self.snapshot(max_age_s=max_age_s)
        samples = self.store.samples(now - settings.window_s) or None
        return make_plan(snap, settings, self.store.history(now), now, samples, method=method,
                         may_move=self._movable(principal, snap), oneshot=True,
                         configs=guestconfig.Reader(self.client, self.clock))

    def _movable(self, principal: Principal | None, snap: Any) -> Callable[[Any], bool] | None:
        if principal is None or principal.is_root:
            return None
        may = self.may(principal, "VM.Migrate", snap)
        return lambda guest: may(guest.vmid)

    def best_node(self, cores: float, memory: int) -> list[Any]:
        return best_node(self.snapshot(), self.config.balancing, cores, memory,
                         self.store.history(self.clock()))

    # -- acting (leader only) ---------------------------------------------------------------

    def apply(self, requested_by: str, method: str | None = None, principal: Principal | None = None) -> Job:
        self.require_leader()
        if not self._execute.acquire(timeout=EXECUTE_WAIT_S):
            raise BusyError("a plan is being carried out already; wait for it or cancel it")
        try:
            plan = self.plan(method, principal)
        except BaseException:
            self._execute.release()
            raise
        # where PVE refuses a move the plan could not foresee, the job plans again around it
        replan = lambda: self.plan(method, principal, max_age_s=0.0)   # noqa: E731
        return self.jobs.start("apply", requested_by, plan, lambda job: self._run_plan(job, replan),
                               self._execute.release)

    def maintenance(self, node: str, enter: bool, requested_by: str, evacuate: bool = True,
                    principal: Principal | None = None) -> Job | None:
        self.require_leader()
        snap = self.snapshot(max_age_s=FRESH_S)
        if node not in snap.nodes:
            from keel.errors import NotFoundError
            raise NotFoundError(f"no node {node!r} in cluster {snap.cluster_name} (nodes: {', '.join(snap.nodes)})")
        self._may_empty(principal, node, snap)
        if not enter:
            self.store.maintenance_leave(node)
            log.info("%s leaves maintenance (asked by %s)", node, requested_by)
            self._wake.set()
            return None
        self.store.maintenance_enter(node, requested_by, self.clock())
        log.info("%s enters maintenance (asked by %s)", node, requested_by)
        if not evacuate:
            return None
        if not self._execute.acquire(timeout=EXECUTE_WAIT_S):
            raise BusyError(f"{node} is in maintenance; a plan is being carried out already, the node "
                            f"is emptied after it")
        plan = self._evacuation(snap, node)
        return self.jobs.start("maintenance", requested_by, plan, self._run_plan, self._execute.release)

    def _evacuation(self, snap: Any, node: str) -> Plan:
        """The plan that empties ``node`` (as if it were in maintenance): its moves only."""
        settings = self.config.balancing
        evacuation = replace(settings, limits=replace(settings.limits, moves=0),
                             maintenance=settings.maintenance | {node})
        plan = make_plan(snap, evacuation, self.store.history(self.clock()), self.clock(),
                         configs=guestconfig.Reader(self.client, self.clock))
        moves = tuple(m for m in plan.moves if m.reason in ("maintenance", "park"))
        return replace(plan, moves=moves, reason=f"{len(moves)} guests leave {node}")

    def _may_empty(self, principal: Principal | None, node: str, snap: Any) -> None:
        """Maintenance moves every guest off the node (now, and in every round after): it
        needs VM.Migrate on each of them, as migrating them one by one in PVE would."""
        may = self.may(principal, "VM.Migrate", snap)
        denied = sorted(g.vmid for g in snap.guests.values() if g.node == node and not g.template
                        and not may(g.vmid))
        if denied:
            paths = ", ".join(f"/vms/{v}" for v in denied[:10]) + (f" and {len(denied) - 10} more"
                                                                      if len(denied) > 10 else "")
            raise NotAllowedError(f"permission check failed: maintenance on {node} moves every guest "
                                        f"off it, and VM.Migrate is missing on {paths}")

    def cancel(self, job: Job, principal: Principal) -> None:
        """Who started a job may stop it, and whoever may change the cluster's settings (as
        PVE lets a task's owner or Sys.Modify on the node stop a task)."""
        if not (principal.is_root or job.requested_by == principal.who() or principal.can("Sys.Modify", "/")):
            raise NotAllowedError(f"permission check failed: job {job.id} was started by "
                                        f"{job.requested_by}; stopping it needs Sys.Modify on /")
        job.cancel(principal.who())

    def _journal(self) -> Journal:
        """Where an execution writes what it plans and does: this node's store, and pmxcfs
        while this engine leads (``keel.balance.journal``)."""
        return Journal(self.store, self.engine_settings.shared_dir, self.node, may_share=self.lease.held,
                       clock=self.clock)

    def _run_plan(self, job: Job, replan: Callable[[], Plan] | None = None) -> None:
        from keel.balance.executor import Executor, carry_out
        executor = Executor(self.client, self.config.balancing, self.store, requested_by=job.requested_by,
                            on_event=job.event, cancel=job.cancel_event, clock=self.clock, poll_s=self.poll_s,
                            journal=self._journal(), abandon=self._stop, cancel_reason=lambda: job.cancelled_by)
        outcome.record_promise(self.store, job.id, job.plan)          # promised and achieved (engine.outcome)
        job.execution = carry_out(executor, job.plan, replan, job_id=job.id, kind=job.kind)
        job.outcome = outcome.record_achieved(self, job.id, job.execution)
        self._wake.set()

    def _error(self, where: str, message: str) -> None:
        self.errors.append({"time": self.clock(), "where": where, "message": message})
