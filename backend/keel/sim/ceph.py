"""A hyperconverged Ceph cluster in miniature: OSDs and monitors on the nodes, replicated
pools whose placement groups follow the OSDs, the OSD flags, and the health Ceph reports.

What it does, as Ceph does it:

- An OSD is up while its node is in the cluster.  A clean shutdown marks it down at once;
  a lost node's OSDs are marked down after the heartbeat grace (20 s).  A down OSD is
  marked out after ``down_out_interval`` (``mon_osd_down_out_interval``, 10 min) unless
  ``noout`` is set; an OSD the monitors marked out comes back in when it starts again
  (``mon_osd_auto_mark_auto_out_in``), and ``noup`` keeps starting OSDs down.
- Each placement group keeps ``size`` copies on distinct hosts (the default CRUSH rule,
  failure domain host), chosen by a weighted rendezvous hash of the hosts with OSDs in.
  When OSDs go out or come in the mapping changes and the new copies are backfilled at
  ``recovery_speed``; until then the old copies serve.
- A PG is ``active`` while at least ``min_size`` of its copies are up; with fewer it is
  ``undersized+degraded+peered`` and its I/O blocks (the guests with disks on its pool
  stop writing); with none ``stale``.
- Health, from Ceph's monitor and PGMap checks: ``OSDMAP_FLAGS``, ``OSD_DOWN``,
  ``OSD_HOST_DOWN``, ``MON_DOWN``, ``PG_DEGRADED`` (undersized counted once stuck for
  ``mon_pg_stuck_threshold``, 60 s), ``PG_AVAILABILITY`` (inactive PGs, once stuck for 60 s)
  and ``SLOW_OPS`` (client I/O blocked for 30 s).  All of these are ``HEALTH_WARN`` in Ceph:
  a pool below min_size is a warning with blocked I/O, not ``HEALTH_ERR``.
- Without a monitor majority every Ceph call of PVE's API times out (500 ``got timeout``).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keel.sim import scenario as sc
from keel.sim.errors import ApiError

if TYPE_CHECKING:
    from keel.sim.cluster import Cluster

GRACE_S = 20.0              # osd_heartbeat_grace: a dead host's OSDs are marked down after it
STUCK_S = 60.0              # mon_pg_stuck_threshold
SLOW_OP_S = 30.0            # osd_op_complaint_time
OBJECT = 4 * 1024**2        # RBD object size
ALWAYS_FLAGS = ("sortbitwise", "recovery_deletes", "purged_snapdirs", "pglog_hardlimit")
CODENAMES = {"19": "squid", "18": "reef", "17": "quincy"}
FLAG_TEXT = {
    "nobackfill": "Backfilling of PGs is suspended.",
    "nodeep-scrub": "Deep Scrubbing is disabled.",
    "nodown": "OSD failure reports are being ignored, such that the monitors will not mark "
              "OSDs down.",
    "noin": "OSDs that were previously marked out will not be marked back in when they start.",
    "noout": "OSDs will not automatically be marked out after the configured interval.",
    "norebalance": "Rebalancing of PGs is suspended.",
    "norecover": "Recovery of PGs is suspended.",
    "noscrub": "Scrubbing is disabled.",
    "notieragent": "Cache tiering activity is suspended.",
    "noup": "OSDs are not allowed to start.",
    "pause": "Pauses read and writes.",
}
NOT_INSTALLED = "binary not installed: /usr/bin/ceph-mon"


@dataclass
class Osd:
    id: int
    host: str
    size: int
    klass: str
    up: bool = True
    in_: bool = True
    auto_out: bool = False          # marked out by the monitors (comes back in by itself)
    failed: bool = False            # stopped through the control API
    down_at: float | None = None
    episode: int = 0                # counts down events, so a stale check does nothing


@dataclass
class Pool:
    id: int
    name: str
    size: int
    min_size: int
    pg_num: int
    storages: tuple[str, ...]
    application: str


class CephCluster:
    def __init__(self, cluster: "Cluster", spec: sc.CephSpec):
        self.cluster = cluster
        self.spec = spec
        self.version = spec.version
        major = spec.version.split(".")[0]
        self.codename = CODENAMES.get(major, "squid")
        self.fsid = _uuid(f"{cluster.seed}:ceph")
        self.flags: set[str] = set(spec.flags)
        self.osds: list[Osd] = []
        for node in cluster.nodes:                         # ids in node order
            for size, klass in spec.osds.get(node, []):
                self.osds.append(Osd(len(self.osds), node, size, klass))
        self.hosts = [n for n in cluster.nodes if n in spec.osds]
        self.host_ids = {h: -3 - 2 * i for i, h in enumerate(self.hosts)}
        self.mons = list(spec.mons)
        self.pools = [Pool(1, ".mgr", 3, 2, 1, (), "mgr")] + [
            Pool(i + 2, p.name, p.size, p.min_size, p.pg_num, p.storages, "rbd")
            for i, p in enumerate(spec.pools)]
        self.epoch = 100
        self.created = cluster.t - 86400 * 200
        self.holders: dict[tuple[int, int], tuple[int, ...]] = {}
        self._maps: dict[Any, tuple[int, ...]] = {}
        self.recovery_until: float | None = None
        self.recovery_gen = 0
        self.since: dict[tuple[int, int], dict[str, float]] = {}   # pg -> inactive/undersized since
        self.host_gen = {h: 0 for h in cluster.nodes}
        for osd in self.osds:                   # a host down from the start: down, out unless noout
            if not cluster.nodes[osd.host].online:
                osd.up, osd.down_at = False, cluster.t - spec.down_out_interval_s
                if "noout" not in self.flags:
                    osd.in_, osd.auto_out = False, True
        for pool in self.pools:
            for pg in range(pool.pg_num):
                self.holders[(pool.id, pg)] = self._map(pool, pg)
        self._refresh()

    # -- who is installed where ---------------------------------------------------------

    def installed_on(self, node: str) -> bool:
        return node in self.spec.osds or node in self.mons

    def check(self, node: str) -> None:
        """What PVE checks before a Ceph call on ``node``: installed (check_ceph_inited),
        and a monitor majority to talk to (else RADOS times out)."""
        if not self.installed_on(node):
            raise ApiError(500, NOT_INSTALLED)
        if not self.mon_quorum():
            raise ApiError(500, "got timeout")

    def mons_up(self) -> list[str]:
        return [m for m in self.mons if self.cluster.nodes[m].online]

    def mon_quorum(self) -> bool:
        return len(self.mons_up()) * 2 > len(self.mons)

    # -- hosts and OSDs going down and up ---------------------------------------------------

    def host_down(self, host: str, clean: bool) -> None:
        self.host_gen[host] += 1
        gen = self.host_gen[host]
        if clean:
            self._mark_down(host, gen)
        else:
            self.cluster.schedule(self.cluster.t + GRACE_S, lambda: self._mark_down(host, gen))
        self._refresh()

    def _mark_down(self, host: str, gen: int) -> None:
        if self.host_gen[host] != gen:
            return                       # back up meanwhile
        for osd in self.osds:
            if osd.host == host and osd.up:
                self._osd_down(osd)
        self._refresh()

    def _osd_down(self, osd: Osd) -> None:
        cluster = self.cluster
        osd.up, osd.down_at = False, cluster.t
        osd.episode += 1
        self.epoch += 1
        episode = osd.episode
        cluster.schedule(cluster.t + self.spec.down_out_interval_s,
                         lambda: self._maybe_out(osd, episode))

    def _maybe_out(self, osd: Osd, episode: int) -> None:
        """The monitors mark a down OSD out after the interval, unless noout is set."""
        if osd.up or osd.episode != episode or not osd.in_ or "noout" in self.flags:
            return
        osd.in_, osd.auto_out = False, True
        self.epoch += 1
        self._remap()

    def host_up(self, host: str) -> None:
        self.host_gen[host] += 1
        for osd in self.osds:
            if osd.host == host:
                self._osd_up(osd)
        self._remap()

    def _osd_up(self, osd: Osd) -> None:
        if osd.up or osd.failed or "noup" in self.flags or not self.cluster.nodes[osd.host].online:
            return
        osd.up, osd.down_at = True, None
        osd.episode += 1
        if osd.auto_out and "noin" not in self.flags:
            osd.in_, osd.auto_out = True, False
        self.epoch += 1

    def fail_osd(self, osd_id: int, up: bool) -> None:
        """The control API: an OSD daemon dies (``up: false``) or is started again."""
        osd = self.osd(osd_id)
        if up:
            osd.failed = False
            self._osd_up(osd)
            self._remap()
        else:
            osd.failed = True
            if osd.up:
                self._osd_down(osd)
            self._refresh()

    def osd(self, osd_id: int) -> Osd:
        if not 0 <= osd_id < len(self.osds):
            raise LookupError(f"no OSD {osd_id}")
        return self.osds[osd_id]

    def set_flag(self, flag: str, value: bool) -> None:
        if value:
            self.flags.add(flag)
        else:
            self.flags.discard(flag)
        self.epoch += 1
        if not value and flag == "noout":        # the monitors mark out what waited for it
            for osd in self.osds:
                if not osd.up and osd.in_ and osd.down_at is not None and \
                        self.cluster.t - osd.down_at >= self.spec.down_out_interval_s:
                    osd.in_, osd.auto_out = False, True
            self._remap()
        elif not value and flag in ("noup", "noin"):
            for osd in self.osds:
                self._osd_up(osd)
                if flag == "noin" and osd.up and osd.auto_out:
                    osd.in_, osd.auto_out = True, False
            self._remap()
        else:
            self._refresh()

    # -- placement -------------------------------------------------------------------------

    def _map(self, pool: Pool, pg: int) -> tuple[int, ...]:
        """CRUSH in spirit: ``size`` distinct hosts by weighted rendezvous hashing over the
        hosts with OSDs in, one OSD in each (cached per set of OSDs in)."""
        key = (frozenset(o.id for o in self.osds if o.in_), pool.id, pg)
        cached = self._maps.get(key)
        if cached is None:
            if len(self._maps) > 50000:
                self._maps.clear()
            cached = self._maps[key] = self._crush(pool, pg)
        return cached

    def _crush(self, pool: Pool, pg: int) -> tuple[int, ...]:
        weights: dict[str, int] = {}
        for osd in self.osds:
            if osd.in_:
                weights[osd.host] = weights.get(osd.host, 0) + osd.size
        ranked = sorted(weights, key=lambda h: _rank(f"{pool.id}.{pg}:{h}", weights[h]))
        chosen = []
        for host in ranked[:pool.size]:
            candidates = [o for o in self.osds if o.host == host and o.in_]
            best = min(candidates, key=lambda o: _rank(f"{pool.id}.{pg}:osd.{o.id}", o.size))
            chosen.append(best.id)
        return tuple(chosen)

    def _remap(self) -> None:
        """The OSD map changed: PGs whose copies should be elsewhere are backfilled."""
        cluster = self.cluster
        moving = 0.0
        for pool in self.pools:
            per_pg = self.pool_stored(pool) / pool.pg_num
            for pg in range(pool.pg_num):
                target = self._map(pool, pg)
                held = self.holders[(pool.id, pg)]
                if set(target) != set(held):
                    moving += per_pg * len(set(target) - set(held))
        self.recovery_gen += 1
        if moving <= 0:
            self.recovery_until = None
            self._finish_recovery(self.recovery_gen)
            return
        self.recovery_until = cluster.t + moving / self.spec.recovery_speed
        gen = self.recovery_gen
        cluster.schedule(self.recovery_until, lambda: self._finish_recovery(gen))
        self._refresh()

    def _finish_recovery(self, gen: int) -> None:
        if gen != self.recovery_gen:
            return
        self.recovery_until = None
        up = {o.id for o in self.osds if o.up}
        for pool in self.pools:
            for pg in range(pool.pg_num):
                target = self._map(pool, pg)
                held = self.holders[(pool.id, pg)]
                # a copy can only be made from an up copy
                if any(o in up for o in held) and all(o in up for o in target):
                    self.holders[(pool.id, pg)] = target
        self._refresh()

    # -- PG states -------------------------------------------------------------------------

    def pg_states(self) -> dict[tuple[int, int], str]:
        memo = self.cluster.memo.get("ceph_pgs")
        if memo is not None:
            return memo
        up = {o.id for o in self.osds if o.up}
        states = {}
        for pool in self.pools:
            for pg in range(pool.pg_num):
                held = self.holders[(pool.id, pg)]
                target = self._map(pool, pg)
                copies = sum(1 for o in held if o in up)
                moving = set(target) != set(held)
                if copies == 0:
                    state = "stale+undersized+degraded+peered"
                elif copies < pool.min_size:
                    state = "undersized+degraded+peered"
                else:
                    parts = ["active"]
                    if copies < pool.size:
                        parts += ["undersized", "degraded"]
                    if moving:
                        parts += ["remapped", "backfilling" if self.recovery_until else "backfill_wait"]
                    if copies >= pool.size and not moving:
                        parts.insert(1, "clean")
                    state = "+".join(parts)
                states[(pool.id, pg)] = state
        self.cluster.memo["ceph_pgs"] = states
        return states

    def _refresh(self) -> None:
        """After any change: note since when each PG is inactive or undersized."""
        self.cluster.memo.pop("ceph_pgs", None)
        t = self.cluster.t
        for key, state in self.pg_states().items():
            since = self.since.setdefault(key, {})
            for flag, present in (("inactive", "active" not in state.split("+")),
                                  ("undersized", "undersized" in state)):
                if present:
                    since.setdefault(flag, t)
                else:
                    since.pop(flag, None)

    def pool_stored(self, pool: Pool) -> float:
        """Bytes stored in a pool: the guests' disks on its storages, thin-provisioned."""
        if pool.application == "mgr":
            return 2 * 1024**2
        total = 0
        for guest in self.cluster.guests.values():
            for volume in guest.volumes():
                if volume.storage in pool.storages and not volume.cdrom:
                    total += volume.size
        return total * self.spec.fill

    def blocked_pools(self) -> list[str]:
        """Pools whose I/O blocks: a PG without min_size copies up (or the pause flag)."""
        if "pause" in self.flags:
            return [p.name for p in self.pools]
        states = self.pg_states()
        return [p.name for p in self.pools
                if any("active" not in states[(p.id, pg)].split("+") for pg in range(p.pg_num))]

    def blocked_guests(self) -> list[int]:
        """Running guests with a disk on a blocked pool: their writes hang."""
        blocked = {s for p in self.pools if p.name in self.blocked_pools() for s in p.storages}
        result = []
        for vmid, guest in sorted(self.cluster.guests.items()):
            if guest.status == "running" and self.cluster.nodes[guest.node].online and any(
                    v.storage in blocked for v in guest.volumes() if not v.cdrom):
                result.append(vmid)
        return result

    # -- health ------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``ceph health detail``: the checks, each with its summary and details."""
        t = self.cluster.t
        checks: dict[str, Any] = {}

        def add(code: str, message: str, count: int, detail: list[str], severity: str = "HEALTH_WARN"):
            checks[code] = {"severity": severity, "summary": {"message": message, "count": count},
                            "detail": [{"message": d} for d in detail], "muted": False}

        shown = sorted(self.osdmap_flags() - set(ALWAYS_FLAGS))
        if shown:
            add("OSDMAP_FLAGS", f"{','.join(shown)} flag(s) set", len(shown), [])
        down_mons = [m for m in self.mons if m not in self.mons_up()]
        if down_mons:
            up = self.mons_up()
            add("MON_DOWN", f"{len(down_mons)}/{len(self.mons)} mons down, quorum {','.join(up)}",
                len(down_mons), [f"mon.{m} (rank {self.mons.index(m)}) addr "
                                 f"[v2:{self._addr(m)}:3300/0,v1:{self._addr(m)}:6789/0] is down "
                                 f"(out of quorum)" for m in down_mons])
        down = [o for o in self.osds if not o.up]
        if down:
            add("OSD_DOWN", f"{len(down)} osds down", len(down),
                [f"osd.{o.id} (root=default,host={o.host}) is down" for o in down])
            hosts = [h for h in self.hosts if all(not o.up for o in self.osds if o.host == h)]
            if hosts:
                n = sum(1 for o in self.osds if o.host in hosts)
                add("OSD_HOST_DOWN", f"{len(hosts)} host{'s' if len(hosts) > 1 else ''} "
                                     f"({n} osds) down", len(hosts),
                    [f"host {h} (root=default) ({sum(1 for o in self.osds if o.host == h)} osds) "
                     f"is down" for h in hosts])
        states = self.pg_states()
        degraded_pgs = [k for k, s in states.items() if "degraded" in s]
        undersized = [k for k, s in states.items() if "undersized" in s
                      and t - self.since.get(k, {}).get("undersized", t) >= STUCK_S]
        inactive = [k for k, s in states.items() if "active" not in s.split("+")
                    and t - self.since.get(k, {}).get("inactive", t) >= STUCK_S]
        stale = [k for k in inactive if states[k].startswith("stale")]   # stale ones are inactive too
        if inactive or stale:
            parts = []
            if inactive:
                parts.append(f"{len(inactive)} pg{'s' if len(inactive) > 1 else ''} inactive")
            if stale:
                parts.append(f"{len(stale)} pg{'s' if len(stale) > 1 else ''} stale")
            add("PG_AVAILABILITY", "Reduced data availability: " + ", ".join(parts),
                len(set(inactive) | set(stale)),
                [f"pg {self._pgid(k)} is stuck inactive for {int(t - self.since[k]['inactive'])}s, "
                 f"current state {states[k]}, last acting {list(self.holders[k])}"
                 for k in sorted(set(inactive) | set(stale))[:50]])
        if degraded_pgs:
            objects, copies = self.degraded_objects()
            parts = []
            if objects:
                parts.append(f"{objects}/{copies} objects degraded ({objects / copies * 100:.3f}%)")
            parts.append(f"{len(degraded_pgs)} pg{'s' if len(degraded_pgs) > 1 else ''} degraded")
            if undersized:
                parts.append(f"{len(undersized)} pg{'s' if len(undersized) > 1 else ''} undersized")
            add("PG_DEGRADED", "Degraded data redundancy: " + ", ".join(parts),
                len(set(degraded_pgs) | set(undersized)),
                [f"pg {self._pgid(k)} is {states[k]}, acting {list(self.holders[k])}"
                 for k in sorted(degraded_pgs)[:50]])
        slow = self._slow_ops()
        if slow:
            count, oldest, daemons = slow
            add("SLOW_OPS", f"{count} slow ops, oldest one blocked for {oldest} sec, daemons "
                            f"[{','.join(daemons)}] have slow ops.", count, [])
        worst = "HEALTH_OK"
        for check in checks.values():
            if check["severity"] == "HEALTH_ERR":
                worst = "HEALTH_ERR"
            elif worst == "HEALTH_OK":
                worst = "HEALTH_WARN"
        return {"status": worst, "checks": checks, "mutes": []}

    def _slow_ops(self) -> tuple[int, int, list[str]] | None:
        """Client ops waiting on inactive PGs for longer than osd_op_complaint_time, counted
        as one per blocked guest, reported by the up OSDs of those PGs."""
        t = self.cluster.t
        guests = self.blocked_guests()
        if not guests or "pause" in self.flags:
            return None
        states = self.pg_states()
        blocked = [k for k, s in states.items() if "active" not in s.split("+")]
        starts = [self.since[k]["inactive"] for k in blocked if "inactive" in self.since.get(k, {})]
        if not starts or t - min(starts) < SLOW_OP_S:
            return None
        up = {o.id for o in self.osds if o.up}
        daemons = sorted({o for k in blocked for o in self.holders[k] if o in up})
        if not daemons:
            return None
        return len(guests), int(t - min(starts)), [f"osd.{o}" for o in daemons]

    def degraded_objects(self) -> tuple[int, int]:
        """(degraded object copies, all object copies)."""
        up = {o.id for o in self.osds if o.up}
        degraded = total = 0
        for pool in self.pools:
            per_pg = self.pool_objects(pool) / pool.pg_num
            for pg in range(pool.pg_num):
                copies = sum(1 for o in self.holders[(pool.id, pg)] if o in up)
                degraded += per_pg * max(0, pool.size - copies)
                total += per_pg * pool.size
        return int(round(degraded)), int(round(total))

    def pool_objects(self, pool: Pool) -> int:
        return max(2, int(math.ceil(self.pool_stored(pool) / OBJECT)))

    def osdmap_flags(self) -> set[str]:
        flags = set(self.flags) | set(ALWAYS_FLAGS)
        if "pause" in flags:                    # 'pause' sets pauserd and pausewr
            flags.discard("pause")
            flags |= {"pauserd", "pausewr"}
        return flags

    def flags_string(self) -> str:
        """The OSD map's flags as ``osd dump`` lists them."""
        order = ["pauserd", "pausewr", "noup", "nodown", "noout", "noin", "nobackfill",
                 "norebalance", "norecover", "noscrub", "nodeep-scrub", "notieragent"]
        flags = self.osdmap_flags()
        return ",".join([f for f in order if f in flags] + [f for f in ALWAYS_FLAGS])

    # -- answers ---------------------------------------------------------------------------

    def _pgid(self, key: tuple[int, int]) -> str:
        return f"{key[0]}.{key[1]:x}"

    def _addr(self, node: str) -> str:
        return self.cluster.nodes[node].spec.ip

    def _stamp(self, at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S.000000+0000", time.gmtime(at))

    def status(self) -> dict[str, Any]:
        """``ceph status`` with ``health detail``, ``mon dump`` and ``mgr dump`` (PVE's
        ceph_cluster_status)."""
        cluster = self.cluster
        t = cluster.t
        states = self.pg_states()
        by_state: dict[str, int] = {}
        for state in states.values():
            by_state[state] = by_state.get(state, 0) + 1
        up_mons = self.mons_up()
        raw_total = sum(o.size for o in self.osds)
        raw_used = int(sum(self.pool_stored(p) * p.size for p in self.pools))
        up_osds = [o for o in self.osds if o.up]
        in_osds = [o for o in self.osds if o.in_]
        pgmap: dict[str, Any] = {
            "pgs_by_state": [{"state_name": s, "count": c}
                             for s, c in sorted(by_state.items(), key=lambda kv: (-kv[1], kv[0]))],
            "num_pgs": len(states), "num_pools": len(self.pools),
            "num_objects": sum(self.pool_objects(p) for p in self.pools),
            "data_bytes": int(sum(self.pool_stored(p) for p in self.pools)),
            "bytes_used": raw_used, "bytes_avail": max(0, raw_total - raw_used),
            "bytes_total": raw_total,
        }
        degraded, total = self.degraded_objects()
        if degraded:
            pgmap.update(degraded_objects=degraded, degraded_total=total,
                         degraded_ratio=round(degraded / total, 6))
        inactive = sum(1 for s in states.values() if "active" not in s.split("+"))
        if inactive:
            pgmap["inactive_pgs_ratio"] = round(inactive / len(states), 6)
        active_mgr = up_mons[0] if up_mons else self.mons[0]
        return {
            "fsid": self.fsid,
            "health": self.health(),
            "election_epoch": 10 + 2 * len(up_mons),
            "quorum": [self.mons.index(m) for m in up_mons],
            "quorum_names": up_mons,
            "quorum_age": int(t - max([cluster.nodes[m].booted_at for m in up_mons] or [t])),
            "monmap": self._monmap(),
            "osdmap": {"epoch": self.epoch, "num_osds": len(self.osds), "num_up_osds": len(up_osds),
                       "osd_up_since": int(t), "num_in_osds": len(in_osds), "osd_in_since": int(t),
                       "num_remapped_pgs": sum(1 for s in states.values() if "remapped" in s)},
            "pgmap": pgmap,
            "fsmap": {"epoch": 1, "btime": self._stamp(self.created), "by_rank": [], "up:standby": 0},
            "mgrmap": {"epoch": 20, "available": True, "active_name": active_mgr,
                       "active_gid": 4100 + self.mons.index(active_mgr),
                       "active_addr": f"{self._addr(active_mgr)}:6801/1000",
                       "num_standbys": max(0, len(up_mons) - 1),
                       "standbys": [{"name": m} for m in up_mons if m != active_mgr],
                       "modules": ["iostat", "nfs", "restful"], "services": {}},
            "servicemap": {"epoch": 1, "modified": self._stamp(self.created), "services": {}},
            "progress_events": {},
        }

    def _monmap(self) -> dict[str, Any]:
        mons = []
        for rank, name in enumerate(self.mons):
            ip = self._addr(name)
            mons.append({"rank": rank, "name": name,
                         "public_addrs": {"addrvec": [{"type": "v2", "addr": f"{ip}:3300", "nonce": 0},
                                                      {"type": "v1", "addr": f"{ip}:6789", "nonce": 0}]},
                         "addr": f"{ip}:6789/0", "public_addr": f"{ip}:6789/0",
                         "priority": 0, "weight": 0, "crush_location": "{}"})
        return {"epoch": len(self.mons), "fsid": self.fsid, "modified": self._stamp(self.created),
                "created": self._stamp(self.created), "min_mon_release": int(self.version.split(".")[0]),
                "min_mon_release_name": self.codename, "election_strategy": 1,
                "stretch_mode": False, "mons": mons,
                "quorum": [self.mons.index(m) for m in self.mons_up()]}

    def osd_tree(self) -> dict[str, Any]:
        """``GET /nodes/{node}/ceph/osd``: the CRUSH tree as PVE builds it from ``osd df tree``."""
        states = self.pg_states()
        pgs: dict[int, int] = {}
        for key in states:
            for o in self.holders[key]:
                pgs[o] = pgs.get(o, 0) + 1
        raw_total = sum(o.size for o in self.osds) or 1
        raw_used = sum(self.pool_stored(p) * p.size for p in self.pools)
        hosts = []
        for host in self.hosts:
            children = []
            for osd in (o for o in self.osds if o.host == host):
                used = int(raw_used * osd.size / raw_total) + 1024**3
                children.append({
                    "id": osd.id, "name": f"osd.{osd.id}", "type": "osd", "host": host,
                    "status": "up" if osd.up else "down", "in": int(osd.in_),
                    "crush_weight": round(osd.size / 1024**4, 5), "reweight": 1 if osd.in_ else 0,
                    "device_class": osd.klass, "pgs": pgs.get(osd.id, 0), "leaf": 1,
                    "total_space": osd.size, "bytes_used": used,
                    "percent_used": used * 100 / osd.size,
                    "commit_latency_ms": 0 if not osd.up else 1, "apply_latency_ms": 0 if not osd.up else 1,
                    "osdtype": "bluestore", "blfsdev": f"/dev/nvme{osd.id % 4}n1",
                    "ceph_version": f"ceph version {self.version} ({_hex(self.version)}) "
                                    f"{self.codename} (stable)",
                    "ceph_version_short": self.version})
            hosts.append({"id": self.host_ids[host], "name": host, "type": "host", "leaf": 0,
                          "crush_weight": round(sum(o.size for o in self.osds if o.host == host) / 1024**4, 5),
                          "reweight": -1, "version": self.version, "children": children})
        root = {"id": -1, "name": "default", "type": "root", "leaf": 0, "reweight": -1,
                "crush_weight": round(raw_total / 1024**4, 5), "children": hosts}
        return {"root": {"leaf": 0, "children": [root]}, "flags": self.flags_string()}

    def pool_list(self) -> list[dict[str, Any]]:
        """``GET /nodes/{node}/ceph/pool``: each pool with its settings and use."""
        raw_total = sum(o.size for o in self.osds if o.in_)
        raw_used = sum(self.pool_stored(p) * p.size for p in self.pools)
        result = []
        for pool in self.pools:
            stored = self.pool_stored(pool)
            max_avail = max(0.0, (raw_total - raw_used) / pool.size * 0.95)
            pg_final = pool.pg_num
            result.append({
                "pool": pool.id, "pool_name": pool.name, "type": "replicated",
                "size": pool.size, "min_size": pool.min_size, "pg_num": pool.pg_num,
                "pg_num_final": pg_final, "pg_autoscale_mode": "on",
                "crush_rule": 0, "crush_rule_name": "replicated_rule",
                "application_metadata": {pool.application: {}},
                "bytes_used": int(stored * pool.size),
                "percent_used": stored / (stored + max_avail) if stored + max_avail else 0.0,
                "autoscale_status": {"pool_name": pool.name, "pool_id": pool.id, "pg_num_final": pg_final,
                                     "pg_num_target": pool.pg_num, "pg_autoscale_mode": "on",
                                     "raw_used": int(stored * pool.size), "raw_used_rate": float(pool.size),
                                     "capacity_ratio": round(stored * pool.size / raw_total, 4)
                                     if raw_total else 0.0, "target_bytes": 0, "target_ratio": 0.0,
                                     "would_adjust": False, "bulk": False},
            })
        return result

    def state(self) -> dict[str, Any]:
        """What ``/_sim/state`` shows of Ceph."""
        states = self.pg_states()
        pools = {}
        for pool in self.pools:
            counts: dict[str, int] = {}
            for pg in range(pool.pg_num):
                s = states[(pool.id, pg)]
                counts[s] = counts.get(s, 0) + 1
            pools[pool.name] = {"size": pool.size, "min_size": pool.min_size, "pgs": counts,
                                "blocked": pool.name in self.blocked_pools()}
        return {
            "health": self.health()["status"] if self.mon_quorum() else "no monitor quorum",
            "flags": sorted(self.flags), "mon_quorum": self.mon_quorum(),
            "osds": {str(o.id): {"host": o.host, "up": o.up, "in": o.in_} for o in self.osds},
            "pools": pools, "recovery_until": self.recovery_until,
            "blocked_guests": self.blocked_guests(),
        }


def _rank(key: str, weight: float) -> float:
    """Weighted rendezvous score (lower wins): -ln(u) / w for a hash-drawn u in (0, 1)."""
    digest = hashlib.sha256(key.encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 1) / (2**64 + 2)
    return -math.log(u) / max(weight, 1)


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _hex(version: str) -> str:
    return hashlib.sha1(version.encode()).hexdigest()
