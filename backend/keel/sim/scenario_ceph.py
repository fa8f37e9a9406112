"""A scenario's ``ceph`` section: a hyperconverged Ceph cluster on some of the nodes (its
OSDs and monitors), its pools and the OSD flags set at the start (docs/simulator.md,
"ceph").  ``scenario.py`` reads the rest."""

from __future__ import annotations

from typing import Any

from keel.sim.scenario_types import CephPool, CephSpec, Storage
from keel.validate import Reader

GiB = 1024**3
# The flags PVE's /cluster/ceph/flags knows (PVE::Ceph::Tools::get_possible_osd_flags).
OSD_FLAGS = ("nobackfill", "nodeep-scrub", "nodown", "noin", "noout", "norebalance", "norecover",
             "noscrub", "notieragent", "noup", "pause")
DEVICE_CLASSES = ("hdd", "ssd", "nvme")
# The Ceph release each PVE major ships by default: Squid on PVE 9, Reef on PVE 8.
DEFAULT_VERSION = {9: "19.2.3", 8: "18.2.7"}


def read_ceph(r: Reader, node_names: list[str], storages: list[Storage], major: int) -> CephSpec:
    osd_size = r.size("osd_size", 4 * 1024 * GiB) or 4 * 1024 * GiB
    osd_class = r.choice("osd_class", DEVICE_CLASSES, "nvme")
    osds: dict[str, list[tuple[int, str]]] = {}
    per_node = r.mapping("osds")
    for name in list(per_node.data):
        node = str(name)
        path = per_node.sub(node)
        per_node.seen.add(name)
        if node not in node_names:
            r.problems.add(path, f"no node named {node!r}")
            continue
        value = per_node.data[name]
        if isinstance(value, bool) or not isinstance(value, (int, dict)):
            r.problems.add(path, f"expected a number of OSDs or a mapping, got {value!r}")
            continue
        if isinstance(value, int):
            count, size, klass = value, osd_size, osd_class
        else:
            entry = per_node.mapping(node)
            count = entry.integer("count", 1, 1)
            size = entry.size("size", osd_size) or osd_size
            klass = entry.choice("class", DEVICE_CLASSES, osd_class)
            entry.done()
        if count is None or count < 1:
            r.problems.add(path, "a node with OSDs has at least one")
            continue
        osds[node] = [(int(size), klass)] * count
    if not osds:
        r.problems.add(r.sub("osds"), "Ceph needs OSDs on at least one node, e.g. {pve1: 2}")
    ceph_nodes = [n for n in node_names if n in osds]
    mons = r.string_list("mons", ceph_nodes[:3])
    for mon in mons:
        if mon not in node_names:
            r.problems.add(r.sub("mons"), f"no node named {mon!r}")
    if not mons:
        r.problems.add(r.sub("mons"), "Ceph needs at least one monitor")
    flags = r.string_list("flags")
    for flag in flags:
        if flag not in OSD_FLAGS:
            r.problems.add(r.sub("flags"), f"not an OSD flag PVE sets: {flag!r} "
                                           f"(one of {', '.join(OSD_FLAGS)})")
    rbd = [s.storage for s in storages if s.type == "rbd"]
    pools = [_pool(Reader(item, path, r.problems), storages) for path, item in r.items("pools")]
    if not r.has("pools"):
        pools = [CephPool("ceph-vm", storages=tuple(rbd))]
    elif rbd and not any(p.storages for p in pools) and pools:
        pools[0].storages = tuple(rbd)     # the rbd storages use the first pool unless told
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        r.problems.add(r.sub("pools"), "two pools with the same name")
    used = [s for p in pools for s in p.storages]
    if len(set(used)) != len(used):
        r.problems.add(r.sub("pools"), "a storage is on one pool only")
    version = str(r.get("version", (str, int, float), DEFAULT_VERSION.get(major, "19.2.3")))
    spec = CephSpec(
        osds=osds, mons=mons, pools=pools, flags=flags, version=version,
        down_out_interval_s=r.duration("down_out_interval", 600.0),
        recovery_speed=r.size("recovery_speed", 100 * 1024**2) or 100 * 1024**2,
        fill=r.number("fill", 0.6, 0, 1),
    )
    r.done()
    return spec


def _pool(r: Reader, storages: list[Storage]) -> CephPool:
    name = r.get("name", str, check=_pool_name) or "pool"
    size = r.integer("size", 3, 1, 7) or 3
    min_size = r.integer("min_size", min(2, size), 1, 7) or 1
    if min_size > size:
        r.problems.add(r.sub("min_size"), f"must be at most size ({size}), got {min_size}")
    pool = CephPool(name=name, size=size, min_size=min_size,
                    pg_num=r.integer("pg_num", 128, 1, 32768) or 128,
                    storages=r.string_list("storages"))
    kinds = {s.storage: s.type for s in storages}
    for storage in pool.storages:
        if storage not in kinds:
            r.problems.add(r.sub("storages"), f"no storage named {storage!r}")
        elif kinds[storage] != "rbd":
            r.problems.add(r.sub("storages"), f"{storage!r} is a {kinds[storage]} storage, "
                                              f"not rbd")
    r.done()
    return pool


def _pool_name(value: Any) -> str | None:
    """PVE's pool name pattern: no colon, slash or white space; ``.mgr`` is Ceph's own."""
    if not value or any(c in value for c in ":/ \t") or value == ".mgr":
        return "not a pool name PVE accepts (no ':', '/', spaces; '.mgr' is Ceph's own)"
    return None
