"""Scenario files: the starting state of a simulated cluster (documented in docs/simulator.md).

``load(path)`` reads YAML and returns a ``Scenario`` or raises ``InvalidError`` naming
every bad key.  Sizes take bytes or strings such as ``8GiB``; durations take seconds
or strings such as ``5m``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from keel.errors import InvalidError
from keel.sim.scenario_types import (  # noqa: F401 (re-exported: scenario.Guest, ...)
    DEVICE_KEYS, GUEST_STATUSES, GUEST_TYPES, HA_STATES, PRIVSEP_DEFAULT, RULE_TYPES, Acl, Disk,
    EndpointFault, Faults, GiB, Guest, HaGroup, HaRule, HaSpec, MigrationFault, MiB, Node,
    Profile, Scenario, Storage, Token, User,
)
from keel.validate import Problems, Reader


def load(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidError(f"cannot read scenario {path}: {err.strerror}") from None
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise InvalidError(f"{path}: not valid YAML: {err}") from None
    return parse(data, str(path))


def parse(data: Any, source: str = "scenario") -> Scenario:
    problems = Problems(source)
    top = Reader(data, "", problems)
    scenario = _read(top, problems)
    top.done()
    problems.raise_if_any()
    return scenario


def _read(top: Reader, problems: Problems) -> Scenario:
    version = str(top.get("pve_version", (str, int, float), "9.1.4"))
    if not re.fullmatch(r"[89]\.\d+(\.\d+)?", version):
        problems.add("pve_version", f"must be an 8.x or 9.x version such as 9.1.4, got {version!r}")
        version = "9.1.4"
    if version.count(".") == 1:
        version += ".0"
    major = int(version[0])

    migration = top.mapping("migration")
    speed = migration.size("speed", GiB)
    setup_s = migration.duration("setup", 3.0)
    disk_speed = migration.size("disk_speed", 500 * MiB)
    migration.done()

    profiles = {}
    prof_reader = top.mapping("profiles")
    for name in list(prof_reader.data):
        profiles[str(name)] = _profile(prof_reader.mapping(str(name)))
    prof_reader.seen.update(prof_reader.data)

    storages = [_storage(Reader(item, path, problems)) for path, item in top.items("storages")]
    if not top.has("storages"):
        storages = [
            Storage("local", "dir", ("iso", "vztmpl", "backup"), False, None, 100 * GiB),
            Storage("local-lvm", "lvmthin", ("images", "rootdir"), False, None, 1024 * GiB),
        ]
    storage_names = {s.storage for s in storages}
    default_storage = next((s.storage for s in storages if s.shared and "images" in s.content),
                           next((s.storage for s in storages if "images" in s.content), "local-lvm"))

    nodes = [_node(Reader(item, path, problems), index)
             for index, (path, item) in enumerate(top.items("nodes"))]
    if not nodes:
        problems.add("nodes", "a cluster needs at least one node")
    node_names = [n.name for n in nodes]
    _unique(problems, "nodes", node_names, "node name")

    guests = [_guest(Reader(item, path, problems), path, problems, default_storage, profiles,
                     node_names, storage_names)
              for path, item in top.items("guests")]
    _unique(problems, "guests", [g.vmid for g in guests], "vmid")

    pools: dict[str, str] = {}
    for path, item in top.items("pools"):
        if isinstance(item, str):
            pools[item] = ""
        else:
            reader = Reader(item, path, problems)
            pools[reader.get("poolid", str)] = reader.get("comment", str, "")
            reader.done()
    for guest in guests:
        if guest.pool and guest.pool not in pools:
            pools[guest.pool] = ""

    ha = top.mapping("ha")
    rules = [_rule(Reader(item, path, problems)) for path, item in ha.items("rules")]
    groups = [_group(Reader(item, path, problems)) for path, item in ha.items("groups")]
    ha.done()
    if major >= 9 and groups:
        problems.add("ha.groups", "PVE 9 has no HA groups; use ha.rules (node-affinity)")
    if major < 9 and rules:
        problems.add("ha.rules", "PVE 8 has no HA rules; use ha.groups")

    options = top.raw("cluster_options", {}) or {}
    if not isinstance(options, dict):
        problems.add("cluster_options", "expected a mapping")
        options = {}

    users, roles, acl = _access(top, problems)
    faults = _faults(top.mapping("faults"), problems)
    github = top.raw("github", {}) or {}

    local_node = top.get("local_node", str, node_names[0] if node_names else "")
    if node_names and local_node not in node_names:
        problems.add("local_node", f"no node named {local_node!r}")

    start_time = top.get("start_time", (int, float, str), None)
    if isinstance(start_time, str):
        import datetime
        try:
            start_time = datetime.datetime.fromisoformat(start_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            problems.add("start_time", f"expected an ISO 8601 time or epoch seconds, got {start_time!r}")
            start_time = None

    return Scenario(
        name=top.get("name", str, "scenario"),
        description=top.get("description", str, ""),
        pve_version=version,
        cluster_name=top.get("cluster_name", str, "keel-sim"),
        seed=top.integer("seed", 1),
        start_time=float(start_time) if start_time is not None else None,
        local_node=local_node,
        migration_speed=speed or GiB,
        migration_setup_s=setup_s if setup_s is not None else 3.0,
        disk_speed=disk_speed or 500 * MiB,
        nodes=nodes, guests=guests, storages=storages, pools=pools,
        ha_rules=rules, ha_groups=groups, cluster_options=options,
        users=users, roles=roles, acl=acl, profiles=profiles, faults=faults,
        github=github if isinstance(github, dict) else {},
    )


def _unique(problems: Problems, path: str, values: list[Any], what: str) -> None:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            problems.add(path, f"duplicate {what} {value!r}")
        seen.add(value)


def _profile(r: Reader) -> Profile:
    daily = r.mapping("daily")
    bursts = r.mapping("bursts")
    profile = Profile(
        daily_amplitude=daily.number("amplitude", 0.0, 0, 1),
        peak_hour=daily.number("peak_hour", 14.0, 0, 24),
        noise=r.number("noise", 0.0, 0, 1),
        burst_per_hour=bursts.number("per_hour", 0.0, 0),
        burst_duration_s=bursts.duration("duration", 300.0) or 300.0,
        burst_level=bursts.number("level", 0.95, 0, 1),
        mem_amplitude=r.number("mem_amplitude", 0.0, 0, 1),
    )
    daily.done()
    bursts.done()
    r.done()
    return profile


def _storage(r: Reader) -> Storage:
    storage = Storage(
        storage=r.get("storage", str),
        type=r.get("type", str, "dir"),
        content=r.string_list("content", ("images", "rootdir")),
        shared=r.get("shared", bool, False),
        nodes=r.string_list("nodes", ()) or None,
        size=r.size("size", 1024 * GiB),
    )
    r.done()
    return storage


def _node(r: Reader, index: int) -> Node:
    cpus = r.integer("cpus", 16, 1)
    sockets = r.integer("sockets", 1, 1)
    node = Node(
        name=r.get("name", str, check=lambda v: None if re.fullmatch(
            r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?", v) else "not a valid node name"),
        cpus=cpus or 16,
        sockets=sockets or 1,
        cores=r.integer("cores", max(1, (cpus or 16) // 2), 1),
        cpu_model=r.get("cpu_model", str, "AMD EPYC 7313P 16-Core Processor"),
        memory=r.size("memory", 64 * GiB),
        rootfs=r.size("rootfs", 100 * GiB),
        rootfs_used=r.size("rootfs_used", 8 * GiB),
        online=r.choice("status", ("online", "offline"), "online") == "online",
        maintenance=r.get("maintenance", bool, False),
        overhead_cpu=r.number("overhead_cpu", 0.3, 0),
        overhead_mem=r.size("overhead_mem", 3 * GiB),
        ip=r.get("ip", str, f"10.0.0.{index + 1}"),
        level=r.get("level", str, ""),
    )
    r.done()
    return node


def _guest(r: Reader, path: str, problems: Problems, default_storage: str,
           profiles: dict[str, Profile], node_names: list[str], storages: set[str]) -> Guest:
    vmid = r.integer("vmid", None, 100, 999999999)
    kind = r.choice("type", GUEST_TYPES, "qemu")
    memory = r.size("memory", 2 * GiB)
    node = r.get("node", str)
    if node is not None and node_names and node not in node_names:
        problems.add(r.sub("node"), f"no node named {node!r}")
    disks: list[Disk] = []
    for dpath, item in r.items("disks"):
        d = Reader(item, dpath, problems)
        disk = Disk(key=d.get("key", str, ""), storage=d.get("storage", str, default_storage),
                    size=d.size("size", 32 * GiB), cdrom=d.get("cdrom", bool, False))
        d.done()
        if disk.storage not in storages:
            problems.add(d.sub("storage"), f"no storage named {disk.storage!r}")
        disks.append(disk)
    if not r.has("disks"):
        size = r.size("disk", 32 * GiB if kind == "qemu" else 8 * GiB)
        storage = r.get("storage", str, default_storage)
        if storage not in storages:
            problems.add(r.sub("storage"), f"no storage named {storage!r}")
        disks = [Disk("", storage, size or 0)]
    else:
        r.raw("disk")
        r.raw("storage")
    _name_disks(kind, disks)
    devices: dict[str, str] = {}
    for dpath, item in r.items("devices"):
        key, _, value = str(item).partition(":")
        key = key.strip()
        if not DEVICE_KEYS.match(key):
            problems.add(dpath, f"not a local device key (hostpciN, usbN, serialN, ...): {key!r}")
        devices[key] = value.strip() or _default_device(key)
    profile = r.get("profile", str, None)
    if profile is not None and profile not in profiles:
        problems.add(r.sub("profile"), f"no profile named {profile!r}")
    ha_value = r.raw("ha", None)
    ha = None
    if ha_value is not None and ha_value is not False:
        if isinstance(ha_value, str):
            ha_value = {"state": ha_value}
        elif ha_value is True:
            ha_value = {}
        h = Reader(ha_value, r.sub("ha"), problems)
        ha = HaSpec(state=h.choice("state", HA_STATES, "started"), group=h.get("group", str, None),
                    failback=h.get("failback", bool, True),
                    max_restart=h.integer("max_restart", 1, 0),
                    max_relocate=h.integer("max_relocate", 1, 0),
                    comment=h.get("comment", str, ""))
        h.done()
    mem_used_raw = r.raw("mem_used", None)
    if isinstance(mem_used_raw, float) and mem_used_raw <= 1:
        mem_used = int((memory or 0) * mem_used_raw)
    else:
        mem_used = r.size("mem_used", int((memory or 0) * 0.5))
    cores = r.integer("cpus", 1, 1)
    guest = Guest(
        vmid=vmid or 0, name=r.get("name", str, f"{'vm' if kind == 'qemu' else 'ct'}{vmid}"),
        type=kind or "qemu", node=node or "", status=r.choice("status", GUEST_STATUSES, "running"),
        cores=cores or 1, sockets=r.integer("sockets", 1, 1) or 1, memory=memory or 0,
        cpu=r.number("cpu", 0.1, 0, 1), mem_used=min(mem_used or 0, memory or 0),
        disks=disks, devices=devices, tags=r.string_list("tags"),
        pool=r.get("pool", str, None), template=r.get("template", bool, False),
        agent=r.get("agent", bool, kind == "qemu"), profile=profile, ha=ha,
        protection=r.get("protection", bool, False), boot_s=r.duration("boot", 20.0) or 0.0,
        description=r.get("description", str, ""), lock=r.get("lock", str, None),
    )
    if guest.template and guest.status == "running":
        problems.add(r.sub("status"), "a template cannot be running")
    r.done()
    return guest


def _name_disks(kind: str, disks: list[Disk]) -> None:
    index = 0
    for disk in disks:
        if disk.key:
            continue
        if kind == "lxc":
            disk.key = "rootfs" if index == 0 else f"mp{index - 1}"
        elif disk.cdrom:
            disk.key = "ide2"
            continue
        else:
            disk.key = f"scsi{index}"
        index += 1


def _default_device(key: str) -> str:
    if key.startswith("hostpci"):
        return "0000:01:00.0"
    if key.startswith("usb"):
        return "host=1234:5678"
    if key.startswith("serial"):
        return "/dev/ttyS0"
    return "1"


def _rule(r: Reader) -> HaRule:
    kind = r.choice("type", RULE_TYPES)
    nodes_value = r.raw("nodes", "")
    if isinstance(nodes_value, dict):
        nodes = ",".join(f"{n}:{p}" if p else str(n) for n, p in nodes_value.items())
    elif isinstance(nodes_value, list):
        nodes = ",".join(str(n) for n in nodes_value)
    else:
        nodes = str(nodes_value or "")
    resources = tuple(_sid(x) for x in r.string_list("resources"))
    rule = HaRule(rule=r.get("rule", str), type=kind or "node-affinity", resources=resources,
                  nodes=nodes, strict=r.get("strict", bool, False),
                  affinity=r.get("affinity", str, ""), disable=r.get("disable", bool, False),
                  comment=r.get("comment", str, ""))
    if rule.type == "node-affinity" and not rule.nodes:
        r.problems.add(r.sub("nodes"), "a node-affinity rule needs nodes")
    if rule.type == "resource-affinity" and rule.affinity not in ("positive", "negative"):
        r.problems.add(r.sub("affinity"), "must be positive or negative")
    r.done()
    return rule


def _sid(value: str) -> str:
    return f"vm:{value}" if value.isdigit() else value


def _group(r: Reader) -> HaGroup:
    nodes_value = r.raw("nodes", "")
    if isinstance(nodes_value, dict):
        nodes = ",".join(f"{n}:{p}" if p else str(n) for n, p in nodes_value.items())
    elif isinstance(nodes_value, list):
        nodes = ",".join(str(n) for n in nodes_value)
    else:
        nodes = str(nodes_value)
    group = HaGroup(group=r.get("group", str), nodes=nodes,
                    restricted=r.get("restricted", bool, False),
                    nofailback=r.get("nofailback", bool, False), comment=r.get("comment", str, ""))
    r.done()
    return group


def _access(top: Reader, problems: Problems) -> tuple[list[User], dict[str, tuple[str, ...]], list[Acl]]:
    users: list[User] = []
    for path, item in top.items("users"):
        r = Reader(item, path, problems)
        tokens = []
        for tpath, titem in r.items("tokens"):
            t = Reader(titem, tpath, problems)
            tokens.append(Token(tokenid=t.get("id", str), secret=t.get("secret", str),
                                privsep=t.get("privsep", bool, PRIVSEP_DEFAULT),
                                comment=t.get("comment", str, "")))
            t.done()
        userid = r.get("userid", str, check=lambda v: None if re.fullmatch(
            r"[^\s:/@]+@[A-Za-z][A-Za-z0-9.\-_]+", v) else "must look like user@realm")
        users.append(User(userid=userid or "", password=r.get("password", str, None),
                          enable=r.get("enable", bool, True), groups=r.string_list("groups"),
                          tokens=tokens, comment=r.get("comment", str, "")))
        r.done()
    if not top.has("users"):
        users = [User("root@pam", "keel-sim", True, (), [])]
    roles: dict[str, tuple[str, ...]] = {}
    role_reader = top.mapping("roles")
    for name in list(role_reader.data):
        roles[str(name)] = role_reader.string_list(str(name))
    acl: list[Acl] = []
    for path, item in top.items("acl"):
        r = Reader(item, path, problems)
        acl_path = r.get("path", str, "/")
        role = r.get("role", str)
        propagate = r.get("propagate", bool, True)
        count = 0
        for kind in ("user", "token", "group"):
            for ugid in r.string_list(kind) + r.string_list(kind + "s"):
                acl.append(Acl(acl_path or "/", role or "", ugid, kind, propagate))
                count += 1
        if not count:
            problems.add(path, "an ACL entry needs a user, token or group")
        r.done()
    return users, roles, acl


def _faults(r: Reader, problems: Problems) -> Faults:
    faults = Faults(auth_delay_s=r.duration("auth_delay", 0.0) or 0.0)
    for path, item in r.items("endpoints"):
        e = Reader(item, path, problems)
        faults.endpoints.append(EndpointFault(
            path=e.get("path", str), method=e.get("method", str, None),
            error_rate=e.number("error_rate", 0.0, 0, 1), status=e.integer("status", 500, 400, 599),
            message=e.get("message", str, "simulated failure"),
            latency_s=e.duration("latency", 0.0) or 0.0, count=e.integer("count", None, 0)))
        e.done()
    for path, item in r.items("migrations"):
        m = Reader(item, path, problems)
        faults.migrations.append(MigrationFault(
            vmid=m.integer("vmid", None), rate=m.number("rate", 1.0, 0, 1),
            message=m.get("message", str, "migration aborted: simulated failure")))
        m.done()
    r.done()
    return faults
