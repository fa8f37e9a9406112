"""What Ceph answers: ``ceph health detail``, ``ceph status`` (with the mon dump), the
OSD tree PVE builds from ``osd df tree``, the pool list, and the control API's view (the
reporting half of ``CephCluster``, a mixin: it reads the model's state)."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keel.sim.ceph import Osd, Pool
    from keel.sim.cluster import Cluster

STUCK_S = 60.0              # mon_pg_stuck_threshold
SLOW_OP_S = 30.0            # osd_op_complaint_time
ALWAYS_FLAGS = ("sortbitwise", "recovery_deletes", "purged_snapdirs", "pglog_hardlimit")


class CephViews:
    cluster: "Cluster"
    osds: list["Osd"]
    pools: list["Pool"]
    hosts: list[str]
    host_ids: dict[str, int]
    mons: list[str]
    flags: set[str]
    holders: dict[tuple[int, int], tuple[int, ...]]
    since: dict[tuple[int, int], dict[str, float]]
    recovery_until: float | None
    version: str
    codename: str
    fsid: str
    epoch: int
    created: float

    def mons_up(self) -> list[str]: ...

    def mon_quorum(self) -> bool: ...

    def pg_states(self) -> dict[tuple[int, int], str]: ...

    def pool_stored(self, pool: "Pool") -> float: ...

    def pool_objects(self, pool: "Pool") -> int: ...

    def blocked_pools(self) -> list[str]: ...

    def blocked_guests(self) -> list[int]: ...

    def degraded_objects(self) -> tuple[int, int]: ...

    def osdmap_flags(self) -> set[str]: ...

    def flags_string(self) -> str: ...

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


def _hex(version: str) -> str:
    return hashlib.sha1(version.encode()).hexdigest()
