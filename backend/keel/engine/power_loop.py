"""Power saving in keel-engine (docs/power.md, "Automatic mode"): the loop, its jobs, and
what the next leader finishes.

* **The loop** runs after each balancing round, on the leader: it reads the cluster and what
  the gates need, makes the consolidation plan (``recommend`` and ``automatic``), and
  ``keel.balance.power_auto`` decides; in ``automatic`` mode a sleep or a wake starts as a
  job (``engine.jobs``, as apply and maintenance: one execution at a time, cancelled when
  the lease is lost, every PVE write fenced by the client and every other act by
  ``PowerRun``'s fence check).
* **The book**: what Keel did to each node (``power_exec``'s records and events), the wake
  tests and the hold are kept in this node's store and, while this engine leads, in
  ``<shared_dir>/power.json`` (pmxcfs), so that whichever node leads next knows a sleep or
  wake it did not finish, and does not count the hold from zero.
* **The hand-over**: in ``automatic`` mode the plan sets the lease gate aside; when the node
  to sleep is the leader's own, the leader gives its lease up (``Engine.hand_over``) and the
  next leader's round sleeps that node as any other.
* **Reconcile**: on taking the lease, after the moves of unfinished jobs are followed to
  their end (``engine.reconcile``), each node whose record says a job was under way
  (``emptying``, ``shutting down``, ``waking``) and which no job of this process carries is
  finished: an interrupted sleep is undone (the node woken if it went off, taken out of HA
  maintenance, Keel's ``noout`` cleared), an interrupted wake is carried on.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from keel import words
from keel.balance import guestconfig
from keel.balance.balancer import make_plan
from keel.balance import power_auto as auto
from keel.balance.power import PowerPlan, forecast, plan_sleep
from keel.balance.power_gates import last_wake_test
from keel.balance.power import status as power_status
from keel.balance.power_exec import ASLEEP_S, EVENTS, FAILED_WAKES, MAX_EVENTS, NOOUT, RECORDS, WAKE_TESTS, PowerRun
from keel.engine.jobs import Job
from keel.engine.reading import SharedReading
from keel.errors import BusyError, InvalidError, KeelError, NotFoundError, TaskFailedError
from keel.files import atomic_write
from keel.pve import power as pve_power

log = logging.getLogger("keel.engine")
HOLD = "power_hold"               # book key: the hold carried between rounds (power_auto.Hold)
HANDED_OVER = "power_handed_over"  # book key: the last lease hand-over, {node, time}
BOOK_KEYS = (RECORDS, EVENTS, NOOUT, ASLEEP_S, FAILED_WAKES, WAKE_TESTS, HOLD, HANDED_OVER)
HANDED_OVER_EXPIRIES = 10         # a hand-over no engine took is not tried again for this many lease expiries
EXECUTE_WAIT_S = 20.0


def with_book(data: dict[str, Any], book: "Book", power: Any, now: float) -> dict[str, Any]:
    """``power.status``'s answer with what Keel did, from the power book: each node's state
    as Keel sees it (sleeping, emptying, waking...), its last wake test, when a node whose
    Wake-on-LAN PVE did not send is tried again (``retry_at``, ``wake_error``), the hours
    asleep and the energy estimate, the last sleeps and wakes.  The engine's ``GET
    /api/power`` and ``keel power status --direct`` both answer this."""
    records = dict(book.get(RECORDS, {}) or {})
    tests = dict(book.get(WAKE_TESTS, {}) or {})
    asleep_s = dict(book.get(ASLEEP_S, {}) or {})
    for n in data["nodes"]:
        r = records.get(n["node"]) or {}
        keel = r.get("state")
        n["keel_state"], n["since"] = keel, r.get("since")
        n["wake_test"] = last_wake_test(n["node"], tests)
        n["retry_at"] = r.get("retry_at") if float(r.get("retry_at") or 0) > now else None
        n["wake_error"] = r.get("wake_error") if n["retry_at"] else None
        if keel == "asleep" and n["power"] != words.AWAKE and r.get("since"):
            asleep_s[n["node"]] = float(asleep_s.get(n["node"], 0.0)) + max(0.0, now - float(r["since"]))
        n["state"] = (keel if keel in ("emptying", "shutting down", "waking", "did not wake")
                      else "sleeping" if n["power"] != words.AWAKE and keel == "asleep"
                      else "awake" if n["power"] == words.AWAKE else n["power"])
        n["asleep_hours"] = round(asleep_s.get(n["node"], 0.0) / 3600, 3)
    hours = sum(asleep_s.values()) / 3600
    data["energy"] = {"node_hours_asleep": round(hours, 3),
                      "kwh_saved": round(sum(s / 3600 * power.watts_for(n) for n, s in asleep_s.items()) / 1000, 3),
                      "wakes_failed": int(book.get(FAILED_WAKES, 0) or 0)}
    data["events"] = list(book.get(EVENTS, []) or [])[-50:]
    return data


class Book:
    """get/put as the store's, kept in the store and, while this engine leads, in pmxcfs;
    read from pmxcfs first (a follower sees what the leader did)."""

    def __init__(self, store: Any, shared_dir: str | None, may_share: Any):
        self.store = store
        self.path = Path(shared_dir) / "power.json" if shared_dir else None
        self.may_share = may_share
        self._lock = threading.Lock()

    def _shared(self) -> dict[str, Any] | None:
        if self.path is None:
            return None
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def get(self, key: str, default: Any = None) -> Any:
        shared = self._shared()
        if shared is not None and key in shared:
            return shared[key]
        return self.store.get(key, default)

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self.store.put(key, value)
            if self.path is None or not self.may_share():
                return
            shared = self._shared() or {k: self.store.get(k) for k in BOOK_KEYS if self.store.get(k) is not None}
            shared[key] = value
            try:
                atomic_write(self.path, json.dumps(shared, separators=(",", ":")) + "\n")
            except KeelError as err:
                log.warning("cannot write %s: %s", self.path, err)


@dataclass
class Done:
    """A power job's end, as ``Job.state`` reads an execution."""
    ok: bool
    cancelled: bool = False
    results: tuple[()] = ()


class PowerLoop:
    def __init__(self, engine: Any):
        self.engine = engine
        self.book = Book(engine.store, engine.engine_settings.shared_dir, engine.lease.held)
        self.last: dict[str, Any] | None = None       # the last round: plan and decision
        self.live: set[str] = set()                   # nodes a job of this process carries
        # what the gates need, read with the cluster: one fetch shared by every panel polling
        self.reading = SharedReading(self._read, "power")

    # -- reading ----------------------------------------------------------------------------

    def _read(self) -> tuple[Any, Any]:
        e = self.engine
        snap = e.snapshot(max_age_s=2.0)
        return snap, pve_power.read_facts(e.client, snap)

    def _inputs(self, max_age_s: float = 2.0) -> tuple[Any, Any]:
        return self.reading.get(max_age_s)

    def plan(self, only: str | None = None, max_age_s: float = 2.0, wake_test: bool = True,
             fresh: bool = False) -> PowerPlan:
        """``fresh``: on the cluster as it is now (read after the call began), as a job plans
        once it holds the execution lock."""
        e = self.engine
        settings = e.config.balancing
        if fresh:
            snap = e.snapshot(max_age_s=0.0)
            facts = pve_power.read_facts(e.client, snap)
        else:
            snap, facts = self._inputs(max_age_s)
        now = e.clock()
        return plan_sleep(snap, facts, settings, now, e.store.history(now),
                          e.store.samples(now - settings.window_s) or None, e.leader_node(),
                          guestconfig.Reader(e.client, e.clock), only=only, wake_tests=self.wake_tests(),
                          wake_test=wake_test)

    def records(self) -> dict[str, dict[str, Any]]:
        return dict(self.book.get(RECORDS, {}) or {})

    def wake_tests(self) -> dict[str, Any]:
        return dict(self.book.get(WAKE_TESTS, {}) or {})

    # -- the loop -----------------------------------------------------------------------------

    def tick(self) -> dict[str, Any] | None:
        e = self.engine
        settings = e.config.balancing
        power = settings.power
        if power.mode == "off":
            self.last = None
            return None
        now = e.clock()
        snap, facts = self._inputs()
        history = e.store.history(now)
        samples = e.store.samples(now - settings.window_s) or None
        # automatic: the lease gate is set aside, the leader hands its lease over to sleep its own node
        # (not while a hand-over of this node no other engine took is recent: then the lease gate
        # holds, so that the plan picks another node rather than this one again)
        holder = None if power.mode == "automatic" and not self._handed_over_recently(e.node, now) else e.node
        plan = plan_sleep(snap, facts, settings, now, history, samples, holder, guestconfig.Reader(e.client, e.clock),
                          wake_tests=self.wake_tests())
        current = forecast(snap, settings, (), None, history, samples)
        online = [n for n, node in snap.nodes.items() if node.online]
        if e.leader and self._finish_stuck():
            return self.last
        runners = self.runner_demand()
        demand = runners or self._maintenance_demand(snap, history, samples)
        hold = auto.Hold.from_json(self.book.get(HOLD))
        decision = auto.decide(power, now, hold, settings.hold, plan, current, self.records(), online, demand)
        handing = decision.action == auto.SLEEP and decision.nodes[0] == e.node
        # a hand-over keeps the hold: the next leader sleeps the node without counting it again
        self.book.put(HOLD, (replace(decision.hold, sleep_since=hold.sleep_since) if handing
                             else decision.hold).to_json())
        self.last = {"time": now, "plan": plan.to_json(), "decision": decision.to_json()}
        if decision.action is not None and e.leader:
            log.info("power: %s %s: %s", decision.action, ", ".join(decision.nodes), decision.reason)
            by = "keel engine (balancing.power.mode automatic)"
            try:
                if handing:
                    self.hand_over(e.node, decision.reason)
                elif decision.action == auto.SLEEP:
                    self.sleep(decision.nodes[0], by, decision.reason, wait_s=0.0)
                else:
                    for_runners = runners is not None and decision.reason == runners.reason
                    self.wake(decision.nodes, by, decision.reason, wake_all=decision.wake_all, wait_s=0.0,
                              after=self._room_made if for_runners else None)
            except BusyError as err:
                log.info("power: %s waits: %s", decision.action, err)
                if decision.action == auto.WAKE:     # the last hold stays: a wake_all moment is not lost
                    self.book.put(HOLD, hold.to_json())
        return self.last

    # -- jobs ---------------------------------------------------------------------------------

    def _run(self, job: Job, reason: str) -> PowerRun:
        e = self.engine
        return PowerRun(e.client, e.config.balancing, e.store, job.requested_by,
                        say=lambda text: job.event({"event": "power", "detail": text}), on_event=job.event,
                        clock=e.clock, poll_s=e.poll_s, sleep=lambda s: job.cancel_event.wait(s) and None,
                        book=self.book, fence=e.fence.check, cancel=job.cancel_event, journal=e._journal(),
                        abandon=e._stop, reason=reason, job_id=job.id)

    def _start(self, kind: str, by: str, plan: PowerPlan, nodes: tuple[str, ...], body: Any,
               wait_s: float, replan: Any = None) -> Job:
        """``body(job, plan)`` as a job, once this engine holds the execution lock (waiting at
        most ``wait_s`` for the job that has it).  ``replan``: the plan made again then, on
        the cluster as that job left it (its refusal is raised, nothing started)."""
        e = self.engine
        e.require_leader()
        got = e._execute.acquire(timeout=wait_s) if wait_s > 0 else e._execute.acquire(blocking=False)
        if not got:
            raise BusyError("a plan is being carried out already; the power job waits for it")
        try:
            plan = replan() if replan is not None else plan
        except BaseException:
            e._execute.release()
            raise
        self.live.update(nodes)

        def run(job: Job) -> None:
            try:
                body(job, plan)
                job.execution = Done(True)
            except TaskFailedError as err:
                job.error = str(err)
                job.execution = Done(False)
            except KeelError as err:
                job.error = str(err)
                job.execution = Done(False, cancelled=job.cancel_event.is_set())

        def end() -> None:
            self.live.difference_update(nodes)
            e._execute.release()
            e._wake.set()
        return e.jobs.start(kind, by, plan, run, end)  # type: ignore[arg-type]

    def sleep(self, node: str, by: str, reason: str, wait_s: float = EXECUTE_WAIT_S, test: bool = False) -> Job:
        """Empty ``node`` and power it off, if every gate lets it (a job); ``test``: the wake
        test, the same sleep (its own gate set aside) and at once the wake."""
        e = self.engine
        if e.config.balancing.power.mode == "off":
            raise InvalidError("balancing.power.mode is off: Keel powers no node off")
        self._known(node)

        def planned(fresh: bool) -> PowerPlan:
            plan = self.plan(only=node, max_age_s=0.0, wake_test=not test, fresh=fresh)
            if plan.verdict != words.SLEEP:
                raise BusyError(f"{node} stays awake: " + "; ".join(f"{r.gate}: {r.detail}" for r in plan.refusals))
            return plan

        def body(job: Job, plan: PowerPlan) -> None:
            run = self._run(job, reason)
            if test:
                run.test_node(plan)
            else:
                run.sleep_node(plan)
        # a refusal is said at once; the plan carried out is made again once the lock is held:
        # a job running till then (the balancer's) may have moved guests
        return self._start("power-test" if test else "power-sleep", by, planned(False), (node,), body, wait_s,
                           replan=lambda: planned(True))

    def _handed_over_recently(self, node: str, now: float) -> bool:
        """Whether this node's lease was handed over lately (within the power hold, or
        ``HANDED_OVER_EXPIRIES`` lease expiries) and it leads again: no other engine took it."""
        e = self.engine
        last = self.book.get(HANDED_OVER) or {}
        quiet_s = max(e.config.balancing.power.hold_s, HANDED_OVER_EXPIRIES * e.engine_settings.lock_expiry_s)
        return isinstance(last, dict) and last.get("node") == node and now - float(last.get("time") or 0) < quiet_s

    def hand_over(self, node: str, reason: str) -> None:
        """The plan would sleep the leader's own node: give the lease up, so that another
        node's engine leads and sleeps it (the hold is in the book).  Not again while no
        other engine took the last one (this engine leads again soon after)."""
        e = self.engine
        now = e.clock()
        if self._handed_over_recently(node, now):
            log.info("power: %s stays awake: its lease was handed over lately and no other engine took it", node)
            return
        if not e._execute.acquire(blocking=False):
            raise BusyError("a plan is being carried out; the lease is handed over after it")
        try:
            detail = f"the leader lease is handed over so that {node} may sleep (another node's engine leads)"
            self.book.put(HANDED_OVER, {"node": node, "time": now})
            events = list(self.book.get(EVENTS, []) or [])
            events.append({"time": now, "node": node, "event": "lease handed over", "detail": detail,
                           "by": f"keel engine on {e.node}", "reason": reason, "job": None})
            self.book.put(EVENTS, events[-MAX_EVENTS:])
            log.warning("power: %s: %s", detail, reason)
            e.hand_over(f"so that {node} may sleep")
        finally:
            e._execute.release()

    def wake(self, nodes: tuple[str, ...], by: str, reason: str, wake_all: bool = False,
             wait_s: float = EXECUTE_WAIT_S, after: Any = None) -> Job:
        """Wake ``nodes`` in turn until one is back (each that PVE did not send a packet to, or
        that does not come back within ``wake_timeout``, is reported and the next one woken),
        or all of them at once (``wake_all``: every packet first, then one wait)."""
        for node in nodes:
            self._known(node)
        plan = PowerPlan("WAKE", f"wake {', '.join(nodes)}: {reason}", self.engine.config.balancing.power.mode,
                         (), None, created_at=self.engine.clock())

        def body(job: Job, plan: PowerPlan) -> None:
            run = self._run(job, reason)
            failed: dict[str, KeelError] = {}
            woke: list[str] = []
            if wake_all:
                failed = run.wake_nodes(nodes)
                woke = [n for n in nodes if n not in failed]
            else:
                for node in nodes:
                    failed.update(run.wake_nodes((node,)))
                    if node not in failed:
                        woke.append(node)
                        break
            if woke and after is not None:
                after()
            if failed:
                raise TaskFailedError("; ".join(f"{n}: {err}" for n, err in failed.items())
                                      + (f"; woken instead: {', '.join(woke)}" if woke else ""))
        return self._start("power-wake", by, plan, nodes, body, wait_s)

    # -- runner demand ------------------------------------------------------------------------

    def _local_providers(self) -> set[str]:
        runners = getattr(self.engine.config, "runners", None)
        return {p.name for p in getattr(runners, "providers", ()) if p.url is None and not p.disabled}

    def runner_demand(self) -> auto.Demand | None:
        """Why the runners need a node woken: a scale set with jobs waiting that every one of
        its providers refused as full, all of them on this cluster (``runners.placement``);
        with the nodes its providers may place on (None: any node, a provider without ``nodes``)."""
        running = self.engine.runners
        if running is None:
            return None
        local = self._local_providers()
        settings = self.engine.config.runners
        for ss in running[0].status().get("scale_sets", []):
            spec = settings.scale_set(ss["name"])
            full = [b for b in ss.get("backing_off", []) if b.get("kind") == "full"]
            if not ss.get("waiting") or spec is None or not full:
                continue
            names = {p.name for p in spec.providers}
            if names <= local and names <= {b["provider"] for b in full}:
                providers = [settings.provider(name) for name in sorted(names)]
                nodes = None if any(p is None or not p.nodes for p in providers) else frozenset(
                    n for p in providers if p is not None for n in p.nodes)
                return auto.Demand(f"runner demand: scale set {ss['name']}: {ss['waiting']} job(s) wait and no "
                                   f"awake node has room ({full[0].get('message') or 'full'})", nodes)
        return None

    def _maintenance_demand(self, snap: Any, history: Any, samples: Any) -> auto.Demand | None:
        """Nodes in maintenance (Keel's) with running guests the balancer finds no room for;
        any node not in maintenance would help."""
        e = self.engine
        settings = e.config.balancing
        maintenance = set(settings.maintenance) | set(history.maintenance)
        if not any(g.running for n in maintenance if n in snap.nodes for g in snap.guests_on(n)):
            return None
        plan = make_plan(snap, replace(settings, limits=replace(settings.limits, moves=0)), history, e.clock(),
                         samples, configs=guestconfig.Reader(e.client, e.clock))
        why = auto.maintenance_demand(snap, maintenance, plan)
        return auto.Demand(why, frozenset(n for n in snap.nodes if n not in maintenance)) if why else None

    def _room_made(self) -> None:
        """A node woke for the runners: their "full" waits on this cluster end at once."""
        running = self.engine.runners
        if running is None:
            return
        service = running[0]
        with service.lock:
            for name in self._local_providers():
                service.room_freed(name)

    def _known(self, node: str) -> None:
        snap = self.engine.snapshot()
        if node not in snap.nodes:
            raise NotFoundError(f"no node {node!r} in cluster {snap.cluster_name} (nodes: {', '.join(snap.nodes)})")

    # -- what the last leader left ------------------------------------------------------------

    def _finish_stuck(self) -> bool:
        """A record left mid-job (``emptying``, ``shutting down``, ``waking``) that no job of
        this process carries (its job failed on an error of PVE's, say): finished as the
        next leader would (``reconcile``), in a job of its own."""
        stuck = [n for n, r in self.records().items() if r.get("state") in auto.TRANSIENT and n not in self.live]
        if not stuck:
            return False
        node = stuck[0]
        try:
            self.wake((node,), f"keel engine on {self.engine.node} (unfinished)",
                      f"the {self.records()[node]['state']} of {node} did not finish: finished by {self.engine.node}",
                      wait_s=0.0)
        except BusyError:
            pass
        return True

    def reconcile(self, stop: threading.Event) -> list[str]:
        """Finish each sleep or wake no job of this process carries (see the module's doc)."""
        e = self.engine
        left = [n for n, r in self.records().items() if r.get("state") in auto.TRANSIENT and n not in self.live]
        done = []
        for node in left:
            if stop.is_set() or not e.leader:
                break
            state = self.records()[node]["state"]
            reason = f"reconciled by {e.node}: the {'wake' if state == 'waking' else 'sleep'} of {node} " \
                     f"did not finish ({state})"
            try:
                job = self.wake((node,), f"keel engine on {e.node} (reconcile)", reason, wait_s=EXECUTE_WAIT_S)
            except KeelError as err:
                log.warning("power: cannot reconcile %s: %s", node, err)
                continue
            job.done.wait()
            done.append(node)
            log.info("power: %s reconciled (%s)", node, job.state)
        return done

    # -- what the API shows ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        e = self.engine
        settings = e.config.balancing
        power = settings.power
        snap, facts = self._inputs(max_age_s=e.config.engine.status_interval_s)
        now = e.clock()
        data = power_status(snap, facts, settings, now)
        with_book(data, self.book, power, now)
        data["last"] = self.last
        data["leader"], data["leader_node"] = e.leader, e.leader_node()
        return data

    def metrics(self) -> list[str]:
        """Prometheus lines from the book alone (never a call to PVE)."""
        records = self.records()
        asleep_s = dict(self.book.get(ASLEEP_S, {}) or {})
        now = self.engine.clock()
        asleep = [n for n, r in records.items() if r.get("state") == "asleep"]
        for n in asleep:
            since = records[n].get("since")
            if since:
                asleep_s[n] = float(asleep_s.get(n, 0.0)) + max(0.0, now - float(since))
        return ["# HELP keel_power_nodes_asleep Nodes Keel put to sleep that are asleep now.",
                "# TYPE keel_power_nodes_asleep gauge", f"keel_power_nodes_asleep {len(asleep)}",
                "# HELP keel_power_node_hours_asleep_total Node-hours asleep since Keel began to count.",
                "# TYPE keel_power_node_hours_asleep_total counter",
                f"keel_power_node_hours_asleep_total {sum(asleep_s.values()) / 3600:.4f}",
                "# HELP keel_power_wakes_failed_total Wakes whose node did not come back in wake_timeout.",
                "# TYPE keel_power_wakes_failed_total counter",
                f"keel_power_wakes_failed_total {int(self.book.get(FAILED_WAKES, 0) or 0)}"]
