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
from keel.sim.scenario_guests import mem_used_bytes, read_guest  # noqa: F401 (mem_used_bytes: control)
from keel.sim.scenario_ha import check_names, read_group, read_rule
from keel.sim.scenario_options import read_options
from keel.sim.scenario_types import (  # noqa: F401 (re-exported: scenario.Guest, ...)
    DEVICE_KEYS, GUEST_STATUSES, GUEST_TYPES, HA_STATES, PRIVSEP_DEFAULT, RULE_TYPES,
    SHARED_STORAGE_TYPES, Acl, Disk, EndpointFault, Faults, GiB, Guest, HaGroup, HaRule, HaSpec,
    MigrationFault, MiB, Node, Profile, Scenario, Storage, Token, User,
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

    guests = [read_guest(Reader(item, path, problems), problems, default_storage, profiles,
                         node_names, storage_names)
              for path, item in top.items("guests")]
    _unique(problems, "guests", [g.vmid for g in guests if g.vmid], "vmid")

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
    rules = [read_rule(Reader(item, path, problems)) for path, item in ha.items("rules")]
    groups = [read_group(Reader(item, path, problems)) for path, item in ha.items("groups")]
    ha.done()
    if major >= 9 and groups:
        problems.add("ha.groups", "PVE 9 has no HA groups; use ha.rules (node-affinity)")
    if major < 9 and rules:
        problems.add("ha.rules", "PVE 8 has no HA rules; use ha.groups")
    check_names(problems, major, guests, node_names, rules, groups)

    options = read_options(top.raw("cluster_options", None), problems)

    users, roles, acl = _access(top, problems)
    faults = _faults(top.mapping("faults"), problems)
    from keel.sim.github import scenario as github_scenario
    github = github_scenario.read(top.mapping("github")) if top.has("github") else None

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
        github=github,
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
    kind = r.get("type", str, "dir")
    storage = Storage(
        storage=r.get("storage", str),
        type=kind,
        content=r.string_list("content", ("images", "rootdir")),
        # PVE marks network storage shared whatever the flag says (pve-storage's parse_config).
        shared=r.get("shared", bool, False) or kind in SHARED_STORAGE_TYPES,
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
    from keel.sim.access import BUILTIN_ROLES   # late: access imports this module
    acl: list[Acl] = []
    for path, item in top.items("acl"):
        r = Reader(item, path, problems)
        acl_path = r.get("path", str, "/")
        role = r.get("role", str)
        if role is not None and role not in roles and role not in BUILTIN_ROLES:
            problems.add(r.sub("role"), f"no role named {role!r}")
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
            latency_s=e.duration("latency", 0.0) or 0.0,
            reply_latency_s=e.duration("reply_latency", 0.0) or 0.0, count=e.integer("count", None, 0)))
        e.done()
    for path, item in r.items("migrations"):
        m = Reader(item, path, problems)
        faults.migrations.append(MigrationFault(
            vmid=m.integer("vmid", None), rate=m.number("rate", 1.0, 0, 1),
            message=m.get("message", str, "migration aborted: simulated failure")))
        m.done()
    r.done()
    return faults
