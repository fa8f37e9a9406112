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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keel.sim import scenario as sc
from keel.sim.ceph_views import ALWAYS_FLAGS, CephViews
from keel.sim.errors import ApiError

if TYPE_CHECKING:
    from keel.sim.cluster import Cluster

GRACE_S = 20.0              # osd_heartbeat_grace: a dead host's OSDs are marked down after it
OBJECT = 4 * 1024**2        # RBD object size
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


class CephCluster(CephViews):
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
        memo = self.cluster.memo.setdefault("ceph_stored", {})
        if pool.id in memo:
            return memo[pool.id]
        total = 0
        for guest in self.cluster.guests.values():
            for volume in guest.volumes():
                if volume.storage in pool.storages and not volume.cdrom:
                    total += volume.size
        memo[pool.id] = total * self.spec.fill
        return memo[pool.id]

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

def _rank(key: str, weight: float) -> float:
    """Weighted rendezvous score (lower wins): -ln(u) / w for a hash-drawn u in (0, 1)."""
    digest = hashlib.sha256(key.encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 1) / (2**64 + 2)
    return -math.log(u) / max(weight, 1)


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"
