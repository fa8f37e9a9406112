"""Putting one node to sleep and waking it, through PVE: ``keel power sleep NODE`` and
``keel power wake NODE`` (docs/power.md, "Sleeping and waking").

Sleep carries out a ``PowerPlan`` for one node: its migrations (the balancer's executor),
a check that no running guest is left, HA maintenance (so that the HA manager neither fences
nor recovers the node), Ceph's ``noout`` for a node with OSDs, the shutdown, and the wait
until the node has left the cluster.  Wake sends the Wake-on-LAN packet from the node the
API runs on, waits until the node is back (in the cluster, its API answering), then takes
it out of HA maintenance and clears ``noout`` once no node Keel put to sleep with OSDs is
still off.  What Keel did is kept in the store (``power_nodes``), so that wake undoes only
what sleep did, and a node that did not come back is reported as such.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from keel.balance import power_auto
from keel.balance import power_gates as gates
from keel.balance.executor import Executor
from keel.balance.power import PowerPlan
from keel.balance.settings import BalancingSettings
from keel.errors import CancelledError, FencedError, InvalidError, KeelError, TaskFailedError, UnavailableError
from keel.pve import power as pve_power
from keel.pve import snapshot as snapshots
from keel.pve.client import PveClient

RECORDS = "power_nodes"        # store key: node -> what Keel did to it
EVENTS = "power_events"        # store key: the last sleeps and wakes, newest last
NOOUT = "power_noout"          # store key: Keel set Ceph's noout (and clears it when it is done)
ASLEEP_S = "power_asleep_s"    # store key: node -> seconds asleep, of the sleeps that have ended
FAILED_WAKES = "power_wakes_failed"   # store key: how many wakes did not bring their node back
WAKE_TESTS = "power_wake_tests"       # store key: node -> the last wake by Keel that came back ({time, by})
MAX_EVENTS = 200
HA_SETTLE_S = 300.0            # how long the HA manager may take to let go of a node


class PowerRun:
    def __init__(self, client: PveClient, settings: BalancingSettings, store: Any, requested_by: str,
                 say: Callable[[str], None] = lambda text: None, on_event: Callable[[dict], None] | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 poll_s: float = 1.0, book: Any = None, fence: Callable[[str], None] | None = None,
                 cancel: threading.Event | None = None, journal: Any = None, abandon: threading.Event | None = None,
                 reason: str = "", job_id: str | None = None, tests: Any = None):
        """``book``: where the records and events are kept (``store`` by default; the engine
        keeps them in pmxcfs too, for the next leader); ``tests``: where the wake tests are
        kept (``book`` by default: the CLI keeps them in pmxcfs for every leader); ``fence``: checked before each act
        that is not a PVE write (those the client fences); ``cancel``: stop between steps
        (the lease was lost, someone cancelled the job); ``reason``: why, in the events."""
        self.book = store if book is None else book
        self.tests = self.book if tests is None else tests
        self.fence = fence
        self.cancel = cancel
        self.journal = journal
        self.abandon = abandon
        self.reason = reason
        self.job_id = job_id
        self.client = client
        self.settings = settings
        self.store = store
        self.requested_by = requested_by
        self.say = say
        self.on_event = on_event
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s

    # -- the record ---------------------------------------------------------------------

    def records(self) -> dict[str, dict[str, Any]]:
        return dict(self.book.get(RECORDS, {}) or {})

    def _record(self, node: str, **fields: Any) -> None:
        records = self.records()
        records[node] = {**records.get(node, {}), **fields}
        self.book.put(RECORDS, records)

    def _event(self, node: str, event: str, detail: str) -> None:
        events = list(self.book.get(EVENTS, []) or [])
        events.append({"time": self.clock(), "node": node, "event": event, "detail": detail,
                       "by": self.requested_by, "reason": self.reason or None, "job": self.job_id})
        self.book.put(EVENTS, events[-MAX_EVENTS:])
        self.say(f"{node}: {detail}")

    def _act(self, what: str, undoing: bool = False) -> None:
        """Before an act: stop if cancelled (an undo goes on), and check the fence (the
        leader lease: without it, what is left is the next leader's to finish)."""
        if not undoing and self.cancel is not None and self.cancel.is_set():
            raise CancelledError(f"{what} not made: the job was cancelled")
        if self.fence is not None:
            self.fence(what)

    def _wait(self, what: str, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = self.clock() + timeout_s
        while True:
            if done():
                return True
            if self.cancel is not None and self.cancel.is_set():
                raise CancelledError(f"the wait for {what} was cancelled")
            if self.clock() >= deadline:
                return False
            self.sleep(self.poll_s)

    # -- sleep --------------------------------------------------------------------------

    def sleep_node(self, plan: PowerPlan) -> None:
        if len(plan.sleep) != 1:
            raise InvalidError("a sleep carries out a plan for one node (keel power plan --node NODE)")
        try:
            self._sleep(plan, plan.sleep[0])
        except CancelledError as err:      # by someone: undone now; the lease lost: the undo is fenced
            node = plan.sleep[0]
            if self.records().get(node, {}).get("state") == "emptying":
                self._undo(node)
                self._record(node, state="awake", since=self.clock())
                self._event(node, "sleep cancelled", f"{err}; {node} stays awake")
            raise

    def _sleep(self, plan: PowerPlan, node: str) -> None:
        power = self.settings.power
        self._record(node, state="emptying", since=self.clock(), by=self.requested_by,
                     ha_maintenance=False, osds=False, job=self.job_id)
        self._event(node, "emptying", f"emptying: {len(plan.moves)} guests to move")
        if plan.evacuation is not None and plan.moves:
            executor = Executor(self.client, self.settings, self.store, requested_by=self.requested_by,
                                on_event=self.on_event, clock=self.clock, sleep=self.sleep, poll_s=self.poll_s,
                                cancel=self.cancel, journal=self.journal, abandon=self.abandon,
                                cancel_reason=lambda: "the power job was cancelled")
            execution = executor.run(plan.evacuation, job_id=self.job_id, kind="power")
            failed = [r for r in execution.results if not r.ok]
            if execution.cancelled:
                self._abort(node, f"the moves were stopped after {len(execution.results)} of {len(plan.moves)}; "
                                  f"{node} stays awake")
            # what counts is what is left: a move that failed because the guest had left the
            # node another way (HA, an admin, another job) keeps nothing awake
            why = f" ({len(failed)} of {len(plan.moves)} migrations failed: {failed[0].error})" if failed else ""
        else:
            why = ""
        snap = snapshots.collect(self.client)
        left = [g for g in snap.guests_on(node) if g.running]
        if left:
            self._abort(node, f"{', '.join(f'{g.name} ({g.vmid})' for g in left)} still running on it{why}; "
                              f"{node} stays awake")
        if gates.uses_ha(snap):
            self._act(f"HA maintenance for {node}")
            self._record(node, ha_maintenance=True)        # first: a crash after the command leaves it said
            pve_power.ha_maintenance(True, node)
            if not self._wait("HA maintenance", lambda: self._ha_let_go(node), HA_SETTLE_S):
                self._abort(node, f"the HA manager did not put {node} in maintenance within "
                                  f"{HA_SETTLE_S:.0f} s; {node} stays awake")
            self._event(node, "ha-maintenance", "in HA maintenance")
        facts = pve_power.read_facts(self.client, snap)
        if gates.has_osds(node, facts.ceph):
            assert facts.ceph is not None
            self._record(node, osds=True)
            if "noout" not in facts.ceph.flags:
                self._act("Ceph's noout")
                self.book.put(NOOUT, True)
                pve_power.set_noout(self.client, True)
                self._event(node, "ceph-noout", "Ceph's noout set")
        self._act(f"the shutdown of {node}")
        self._record(node, state="shutting down")
        try:
            pve_power.shutdown(self.client, node)
        except (FencedError, UnavailableError):
            raise                              # the next leader (or the loop) finishes it
        except KeelError as err:               # PVE refused: undone at once
            self._abort(node, f"PVE refused the shutdown ({err}); {node} stays awake")
        if not self._wait("shutdown", lambda: not self._online(node), power.wake_timeout_s):
            self._abort(node, f"{node} was asked to shut down but is still in the cluster after "
                              f"{power.wake_timeout_s:.0f} s; the sleep is undone and {node} stays awake")
        self._record(node, state="asleep", since=self.clock())
        self._event(node, "asleep", f"asleep (saving about {power.watts_for(node):.0f} W)")

    def _abort(self, node: str, detail: str) -> None:
        """Stop a sleep: undo what was done (HA maintenance, noout) and say why.  Without the
        lease the undo is left to the next leader (the record says the sleep is unfinished)."""
        self._undo(node)
        self._record(node, state="awake", since=self.clock())
        self._event(node, "sleep refused", detail)
        raise TaskFailedError(detail)

    def _ha_let_go(self, node: str) -> bool:
        snap = snapshots.collect(self.client)
        return snap.nodes[node].in_maintenance and not any(
            g.ha is not None and g.ha.state != "ignored" for g in snap.guests_on(node) if g.running)

    def _online(self, node: str) -> bool:
        try:
            return pve_power.node_online(self.client, node)
        except UnavailableError:
            return False

    # -- wake ---------------------------------------------------------------------------

    def wake_node(self, node: str) -> None:
        """Wake ``node`` and wait until it is back (``wake_nodes`` with one node); raises what
        kept it asleep."""
        failed = self.wake_nodes((node,))
        if node in failed:
            raise failed[node]

    def wake_nodes(self, nodes: Iterable[str]) -> dict[str, KeelError]:
        """Wake ``nodes`` together: every Wake-on-LAN packet first, then one wait in which each
        node has ``wake_timeout`` from its packet; each is finished as soon as it is back.
        Answers, for each node that did not wake, why: PVE did not send its packet (the node
        then waits ``retry_at`` before Keel wakes it again by itself), or it did not come back
        in time (``did not wake``).  A lost lease or a cancel is raised."""
        power = self.settings.power
        failed: dict[str, KeelError] = {}
        deadlines: dict[str, float] = {}
        for node in nodes:
            try:
                if self._send(node):
                    deadlines[node] = self.clock() + power.wake_timeout_s
                else:
                    self._back(node, woken=False)
            except (FencedError, CancelledError):
                raise
            except KeelError as err:
                failed[node] = err
        while deadlines:
            for node in sorted(deadlines, key=deadlines.__getitem__):
                if self._online(node):
                    del deadlines[node]
                    self._wake_tested(node)
                    self._back(node, woken=True)
                elif self.clock() >= deadlines[node]:
                    del deadlines[node]
                    failed[node] = self._did_not_wake(node)
            if not deadlines:
                break
            if self.cancel is not None and self.cancel.is_set():
                raise CancelledError(f"the wait for {', '.join(sorted(deadlines))} to wake was cancelled")
            self.sleep(self.poll_s)
        return failed

    def _send(self, node: str) -> bool:
        """The Wake-on-LAN packet for ``node``, unless it is up (False).  When PVE does not send
        it, the node waits before Keel wakes it again (``retry_at``) and the error is raised."""
        power = self.settings.power
        record = self.records().get(node, {})
        if record.get("state") == "shutting down" and self._online(node):   # a sleep cut short: let it end
            self._wait("the shutdown", lambda: not self._online(node), power.wake_timeout_s)
        if self._online(node):
            return False
        self._act(f"the Wake-on-LAN packet for {node}")
        try:
            mac = pve_power.wake(self.client, node)
        except (FencedError, CancelledError):
            raise
        except KeelError as err:
            failures = int(record.get("wake_failures") or 0) + 1
            wait_s = power_auto.retry_after(failures, self.settings.interval_s)
            self._record(node, wake_failures=failures, retry_at=self.clock() + wait_s, wake_error=str(err))
            self._event(node, "wake failed", f"PVE did not send the Wake-on-LAN packet ({err}); Keel does not "
                                             f"wake it again by itself for {wait_s:.0f} s")
            raise
        if record.get("state") == "asleep" and record.get("since"):
            asleep = dict(self.book.get(ASLEEP_S, {}) or {})
            asleep[node] = float(asleep.get(node, 0.0)) + max(0.0, self.clock() - float(record["since"]))
            self.book.put(ASLEEP_S, asleep)
        self._record(node, state="waking", since=self.clock(), job=self.job_id, wake_failures=0, retry_at=None,
                     wake_error=None)
        self._event(node, "waking", f"Wake-on-LAN sent to {mac}")
        return True

    def _did_not_wake(self, node: str) -> TaskFailedError:
        power = self.settings.power
        self._record(node, state="did not wake", since=self.clock())
        self.book.put(FAILED_WAKES, int(self.book.get(FAILED_WAKES, 0) or 0) + 1)
        self._event(node, "did not wake", f"not back within {power.wake_timeout_s:.0f} s of its "
                                          f"Wake-on-LAN packet: check it (power, BIOS, NIC)")
        return TaskFailedError(f"{node} did not come back within {power.wake_timeout_s:.0f} s of its "
                               f"Wake-on-LAN packet; it is reported and not woken again by Keel until "
                               f"asked (keel power wake {node})")

    def _back(self, node: str, woken: bool) -> None:
        """``node`` is up: finish its wake (out of HA maintenance, noout), or say it was awake."""
        if not woken and self.records().get(node, {}).get("state") in (None, "awake"):
            self.say(f"{node} is awake")
            return
        self._undo(node)
        self._record(node, state="awake", since=self.clock(), wake_failures=0, retry_at=None, wake_error=None)
        self._event(node, "awake", "awake and back in the cluster")

    def _wake_tested(self, node: str) -> None:
        """A wake by Keel that came back is a successful wake test (the Wake-on-LAN gate)."""
        tests = dict(self.tests.get(WAKE_TESTS, {}) or {})
        tests[node] = {"time": self.clock(), "by": self.requested_by}
        self.tests.put(WAKE_TESTS, tests)

    # -- the wake test ------------------------------------------------------------------

    def test_node(self, plan: PowerPlan) -> None:
        """``keel power test NODE``: the sleep of ``plan`` (made with every gate but the wake
        test's), then at once the node's wake; a wake that comes back is recorded as the wake
        test, one that does not is ``did not wake``, reported (``TaskFailedError``)."""
        self.sleep_node(plan)
        node = plan.sleep[0]
        try:
            self.wake_node(node)
        except TaskFailedError as err:
            self._event(node, "wake test failed", f"wake test failed: {err}")
            raise
        self._event(node, "wake test", "wake test passed: it slept and came back on its Wake-on-LAN packet")

    def _undo(self, node: str) -> None:
        """Take the node out of HA maintenance and clear noout, where Keel set them for it
        (noout only once no other node Keel put to sleep with OSDs is still off)."""
        record = self.records().get(node, {})
        if record.get("ha_maintenance"):
            self._act(f"the end of {node}'s HA maintenance", undoing=True)
            pve_power.ha_maintenance(False, node)
            self._record(node, ha_maintenance=False)
            self._event(node, "ha-maintenance", "out of HA maintenance")
        if record.get("osds"):
            self._record(node, osds=False)
            still = [n for n, r in self.records().items() if r.get("osds")]
            if not still and self.book.get(NOOUT, False):
                self._act("clearing Ceph's noout", undoing=True)
                pve_power.set_noout(self.client, False)
                self.book.put(NOOUT, False)
                self._event(node, "ceph-noout", "Ceph's noout cleared")
