"""``mode: automatic``: what the power loop does this round (docs/power.md, "Automatic mode").
Pure: the settings, the time, the consolidation plan, the awake nodes' load now, what Keel
did to each node (``power_exec``'s records) and the hold carried from the last round in; a
``Decision`` out.  The engine's power loop (``keel.engine.power_loop``) reads and acts.

* **Wake** (before any sleep), the nodes Keel put to sleep, never one that did not wake
  (reported, not tried again blindly): all of them at a ``wake_all`` moment; one when the
  awake nodes' load has passed the headroom line (``power_gates.headroom``: a node above
  ``headroom.cpu``/``memory``, or N+1 lost) for ``balancing.hold`` rounds in a row, as
  the balancer holds; one when runner demand does not fit anywhere (no hold: jobs wait).
  The same when maintenance elsewhere needs room (``maintenance_demand``: a guest on a node
  in maintenance that the balancer finds no room for).  A ``Demand`` may name the nodes that
  would help (the runners' providers may place on some nodes only): only those are woken.
  The job tries them in order: one that does not come back is reported and the next woken;
  at a ``wake_all`` moment the job wakes them all at once.
* **Back off** from a node whose Wake-on-LAN PVE did not send (``retry_at`` in its record,
  ``retry_after``): it is not woken again before then (but at a ``wake_all`` moment), and
  another sleeping node is woken instead when there is one.
* **Finish** the wake of a node that did not wake in time but is back now (it woke late).
* **Sleep** the plan's first node once the plan has said ``SLEEP`` for ``power.hold``
  without a break (the time it first said so is carried in ``Hold``); one node a round,
  the next plan sees the cluster as it is then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from keel import words
from keel.balance import power_gates as gates
from keel.balance.power_gates import Forecast
from keel.balance.power_settings import PowerSettings

SLEEP, WAKE = "sleep", "wake"
TRANSIENT = ("emptying", "shutting down", "waking")     # a job of Keel's is (or was) under way
RETRY_CAP_S = 3600.0           # the longest wait before a node whose Wake-on-LAN failed is tried again


def retry_after(failures: int, interval_s: float, cap_s: float = RETRY_CAP_S) -> float:
    """How long to wait before waking a node again after ``failures`` Wake-on-LAN sends in a
    row that PVE did not make: one ``balancing.interval``, doubling each time, at most ``cap_s``."""
    return min(cap_s, interval_s * 2 ** max(0, failures - 1))


@dataclass(frozen=True)
class Demand:
    """Why a node is needed now (no hold), and which nodes would help (None: any)."""
    reason: str
    nodes: frozenset[str] | None = None


@dataclass(frozen=True)
class Hold:
    sleep_since: float | None = None     # the plan has said SLEEP since then, without a break
    over_rounds: int = 0                 # rounds in a row the awake nodes passed the line
    last_tick: float | None = None       # the last round (for wake_all moments between rounds)

    def to_json(self) -> dict[str, Any]:
        return {"sleep_since": self.sleep_since, "over_rounds": self.over_rounds, "last_tick": self.last_tick}

    @classmethod
    def from_json(cls, data: Any) -> "Hold":
        if not isinstance(data, dict):
            return cls()
        return cls(data.get("sleep_since"), int(data.get("over_rounds") or 0), data.get("last_tick"))


@dataclass(frozen=True)
class Decision:
    action: str | None                   # SLEEP | WAKE | None
    nodes: tuple[str, ...]               # to sleep (one) or to wake (in the order to try them)
    reason: str
    hold: Hold
    wake_all: bool = False               # wake every node of ``nodes``, not the first that comes back

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "nodes": list(self.nodes), "reason": self.reason,
                "hold": self.hold.to_json(), "wake_all": self.wake_all}


def asleep_by_keel(records: Mapping[str, Mapping[str, Any]], online: Iterable[str]) -> list[str]:
    """The nodes Keel put to sleep and that are still off, longest asleep first."""
    up = set(online)
    found = [(float(r.get("since") or 0), n) for n, r in records.items()
             if r.get("state") == "asleep" and n not in up]
    return [n for _, n in sorted(found)]


def waiting(records: Mapping[str, Mapping[str, Any]], nodes: Iterable[str], now: float) -> list[str]:
    """Of ``nodes``, those not to be woken yet: their Wake-on-LAN failed and ``retry_at`` is to come."""
    return [n for n in nodes if float((records.get(n) or {}).get("retry_at") or 0) > now]


def _waits(records: Mapping[str, Mapping[str, Any]], nodes: list[str], now: float) -> str:
    parts = []
    for n in nodes:
        r = records[n]
        failures = int(r.get("wake_failures") or 1)
        parts.append(f"{n} is not woken again for {float(r['retry_at']) - now:.0f} s (PVE did not send its "
                     f"Wake-on-LAN packet: failed {failures} time{'s' if failures != 1 else ''} in a row)")
    return "; ".join(parts)


def decide(power: PowerSettings, now: float, hold: Hold, hold_rounds: int, plan: Any,
           current: list[Forecast], records: Mapping[str, Mapping[str, Any]], online: Iterable[str],
           demand: Demand | None = None) -> Decision:
    """``plan``: the consolidation plan now (``PowerPlan``), or None when none was made;
    ``current``: the awake nodes' load as it is; ``hold_rounds``: ``balancing.hold``;
    ``demand``: why a node is needed now, no hold (runners: a size that fits nowhere while jobs
    queue; maintenance elsewhere that needs room), and which nodes would help."""
    online = set(online)
    asleep = asleep_by_keel(records, online)
    backing_off = waiting(records, asleep, now)
    ready = [n for n in asleep if n not in backing_off]
    last = hold.last_tick if hold.last_tick is not None else now
    if power.mode != "automatic":
        return Decision(None, (), f"balancing.power.mode is {power.mode}: Keel does not sleep or wake nodes "
                                  f"itself", Hold(last_tick=now))
    late = [n for n, r in records.items() if r.get("state") == "did not wake" and n in online]
    if late:
        return Decision(WAKE, (late[0],), f"{late[0]} came back after its wake was given up: its wake is "
                                          f"finished (out of HA maintenance, noout)", Hold(last_tick=last))
    if any(r.get("state") in TRANSIENT for r in records.values()):
        busy = next(n for n, r in records.items() if r.get("state") in TRANSIENT)
        # last_tick stays: a wake_all moment that comes meanwhile is seen once the job is over
        return Decision(None, (), f"{busy} is {records[busy]['state']}", Hold(hold.sleep_since, hold.over_rounds, last))
    if asleep and power.wake_all_due(last, now):
        return Decision(WAKE, tuple(asleep), "a wake_all moment came: every sleeping node wakes", Hold(last_tick=now),
                        wake_all=True)
    over = gates.headroom(current, power, "") if current else None
    rounds = hold.over_rounds + 1 if over is not None else 0
    if demand:
        if not asleep:
            return Decision(None, (), f"{demand.reason}; no node of Keel's is asleep to wake",
                            Hold(None, rounds, now))
        useful = [n for n in asleep if demand.nodes is None or n in demand.nodes]
        if not useful:
            assert demand.nodes is not None
            return Decision(None, (), f"{demand.reason}; no sleeping node is one it may use (asleep: "
                                      f"{', '.join(asleep)}; it may use {', '.join(sorted(demand.nodes))}): "
                                      f"none is woken", Hold(None, rounds, now))
        now_ready = [n for n in useful if n in ready]
        if not now_ready:
            return Decision(None, (), f"{demand.reason}; {_waits(records, useful, now)}", Hold(None, rounds, now))
        return Decision(WAKE, tuple(now_ready), demand.reason, Hold(last_tick=now))
    if over is not None and asleep:
        if rounds >= max(1, hold_rounds):
            if not ready:
                return Decision(None, (), f"the awake nodes passed the headroom line: {over.detail}; "
                                          f"{_waits(records, asleep, now)}", Hold(None, rounds, now))
            return Decision(WAKE, tuple(ready), f"the awake nodes passed the headroom line: {over.detail}",
                            Hold(last_tick=now))
        return Decision(None, (), f"the awake nodes passed the headroom line for {rounds} of "
                                  f"{max(1, hold_rounds)} rounds: {over.detail}", Hold(None, rounds, now))
    if plan is None or plan.verdict != words.SLEEP or not plan.sleep:
        why = plan.reason if plan is not None else "no consolidation plan"
        return Decision(None, (), why, Hold(None, rounds, now))
    since = hold.sleep_since if hold.sleep_since is not None else now
    if now - since < power.hold_s:
        return Decision(None, (), f"{plan.sleep[0]} could sleep; the load has stayed low for {now - since:.0f} of "
                                  f"{power.hold_s:.0f} s (hold)", Hold(since, rounds, now))
    return Decision(SLEEP, (plan.sleep[0],), f"the load stayed low for {now - since:.0f} s: {plan.reason}",
                    Hold(None, rounds, now))


def maintenance_demand(snapshot: Any, maintenance: Iterable[str], plan: Any) -> str | None:
    """Why maintenance needs a node woken: running guests on nodes in maintenance for which
    ``plan`` (the balancer's, with those nodes in maintenance) found no room."""
    nodes = {n for n in maintenance if n in snapshot.nodes and snapshot.nodes[n].online}
    if not nodes or plan is None:
        return None
    on = {g.vmid: g.node for g in snapshot.guests.values() if g.running and g.node in nodes}
    stuck = [s for s in plan.skipped if s.reason == words.NO_ROOM and s.vmid in on]
    if not stuck:
        return None
    names = ", ".join(f"{s.name or s.vmid} ({s.vmid})" for s in stuck[:5]) + (
        f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
    where = ", ".join(sorted({on[s.vmid] for s in stuck}))
    return f"maintenance on {where} needs room: no awake node can take {names}"
