"""ProxLB's config file → Keel's ``proxmox:`` and ``balancing:`` sections (``keel import-proxlb``).

``convert(text, source)`` is pure: text in, ``(config, notes)`` out.  ``config`` is a
dict that ``keel.config.parse`` accepts; each ``Note`` either explains a Keel key whose
meaning differs from ProxLB's (``at`` names the key) or records something that could not
be carried over (``at`` is None).  ``render`` writes both as YAML with comments;
``import_file`` does all of it for a file and checks the result with Keel's parser.

Both of ProxLB's formats are read (``keel.importers.proxlb_source``).  ProxLB's own
defaults apply where its file is silent (they differ between its versions and from
Keel's), so the result behaves like the ProxLB that read the file.  Secrets never leave
the ProxLB file: a password or API token secret becomes a ``password_file``/``token_file``
path and a comment saying what to put there.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import yaml

from keel.balance import settings as bs
from keel.config import DEFAULT_CONFIG_FILE, DEFAULT_PVE_URL, DEFAULT_TOKEN_FILE, PVE_CA_FILE
from keel.errors import InvalidError
from keel.importers import commented, proxlb_parts as parts
from keel.importers.commented import Note
from keel.importers.proxlb_parts import METHODS
from keel.importers.proxlb_source import Source, read

__all__ = ["Note", "PASSWORD_FILE", "TOKEN_FILE", "convert", "import_file", "render"]

TOKEN_FILE = str(DEFAULT_TOKEN_FILE)
PASSWORD_FILE = str(DEFAULT_TOKEN_FILE.with_name("pve-password"))
DEFAULT_PORT = 8006


def convert(text: str, source: str = "proxlb config") -> tuple[dict[str, Any], list[Note]]:
    """ProxLB's config text → (Keel config dict, notes).  Bad input → InvalidError."""
    src = read(text, source)
    notes: list[Note] = [
        Note(f"Keel config converted by `keel import-proxlb` from {source} ({src.layout}).", ""),
        Note(f"Check it, then install it as {DEFAULT_CONFIG_FILE} (cluster-wide; it holds no secrets). "
             "A comment above a key says where Keel differs from ProxLB; the list at the end names "
             "what could not be carried over, and why.", ""),
        Note(f"Keel adds guards ProxLB does not have, left at their defaults here: hold (act only after "
             f"{bs.DEFAULT_HOLD} rounds in a row over the threshold), margin (a plan must cut the "
             f"imbalance by {bs.DEFAULT_MARGIN:.0%}), cooldown ({bs.DEFAULT_COOLDOWN_S / 3600:g} h "
             f"before a moved guest moves again), limits.moves ({bs.DEFAULT_MAX_MOVES} per round), "
             f"limits.per_node ({bs.DEFAULT_PER_NODE} migration into a node at once, and as many out) and "
             f"memory.headroom (no node planned above {1 - bs.DEFAULT_HEADROOM:.0%} memory).", ""),
    ]
    proxmox = _proxmox(src, notes)
    balancing: dict[str, Any] = {}
    _switches(src, notes, balancing)
    _triggers(src, notes, balancing)
    _limits(src, notes, balancing)
    _placement(src, notes, balancing)
    parts.leftovers(src)
    src.problems.raise_if_any()
    config: dict[str, Any] = {"proxmox": proxmox} if proxmox else {}
    config["balancing"] = balancing
    return config, notes + src.dropped


def render(config: dict[str, Any], notes: list[Note]) -> str:
    """The converted config as YAML with the notes as comments."""
    return commented.render(config, notes, "ProxLB")


def import_file(path: str | Path) -> str:
    """Read a ProxLB config file and return Keel's config as commented YAML.

    The result is checked with ``keel.config.parse`` before it is returned: a conversion
    Keel would refuse is a bug here, not something to hand to the user.
    """
    from keel import config as cfg

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InvalidError(f"cannot read {path}: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidError(f"{path}: not a text file, not a ProxLB config") from None
    config, notes = convert(text, str(path))
    output = render(config, notes)
    cfg.parse(yaml.safe_load(output), f"the config converted from {path}")
    return output


def _proxmox(src: Source, notes: list[Note]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hosts = src.list("proxmox_api.hosts") or []
    urls = []
    for host in hosts:
        url = _url(host)
        if url is None:
            src.drop("proxmox_api.hosts", f"{host!r} is not a host name or IP address (ProxLB's example "
                                          f"config has such an entry), so it was left out")
        else:
            urls.append(url)
    if hosts and not urls:
        src.problems.add(src.label("proxmox_api.hosts"), f"no usable host name or address in {hosts!r}")
    if urls:
        out["url"] = urls[0]
        others = f" The others: {', '.join(urls[1:])}." if len(urls) > 1 else ""
        chose = (f"ProxLB had {len(hosts)} API hosts and used a reachable one at random; Keel talks to "
                 f"one URL, the first of them.{others}" if len(hosts) > 1
                 else f"From ProxLB's {src.label('proxmox_api.hosts')}.")
        notes.append(Note(f"{chose} Keel is installed on every PVE node and by default talks to its own "
                          f"node ({DEFAULT_PVE_URL}); when it runs there, delete `url`.", "proxmox.url"))

    user = src.str("proxmox_api.user")
    has_pass = src.has("proxmox_api.pass") and src.raw("proxmox_api.pass") != ""
    has_secret = src.has("proxmox_api.token_secret") and src.raw("proxmox_api.token_secret") != ""
    token_id = src.str("proxmox_api.token_id") if src.has("proxmox_api.token_id") else None
    if has_secret:
        out["token_file"] = TOKEN_FILE
        ident = f"{user}!{token_id}" if user and token_id else "user@realm!tokenname"
        notes.append(Note(f"The API token secret is not copied here: Keel keeps secrets out of its config. "
                          f"Put one line `{ident}=<the token_secret from your ProxLB config>` into "
                          f"{TOKEN_FILE} (root only, mode 0600).", "proxmox.token_file"))
        if has_pass:
            src.drop("proxmox_api.pass", "ProxLB logged in with the API token when both were given; "
                                         "the password is not needed (and not copied)")
    elif has_pass:
        if user:
            out["user"] = user
        out["password_file"] = PASSWORD_FILE
        notes.append(Note(f"The password is not copied here: Keel keeps secrets out of its config. Put it "
                          f"into {PASSWORD_FILE} (root only, mode 0600). Better: an API token for a "
                          f"dedicated user, named with token_file ({TOKEN_FILE}, holding "
                          f"user@realm!name=secret).", "proxmox.password_file"))
        if token_id:
            src.drop("proxmox_api.token_id", "a token name without a token_secret; ProxLB used the "
                                             "password")
    else:
        notes.append(Note(f"The ProxLB config had no credentials. Keel reads an API token "
                          f"(user@realm!name=secret) from {TOKEN_FILE} when that file exists.",
                          "proxmox" if out else ""))

    verify = src.bool("proxmox_api.ssl_verification")
    if verify is False:
        out["verify_tls"] = False
        notes.append(Note(f"WARNING: ProxLB ran with {src.label('proxmox_api.ssl_verification')} off, "
                          f"carried over as verify_tls: false. Without TLS verification anyone on the "
                          f"network path can pose as PVE and take the API credentials. Better: keep "
                          f"verify_tls true and set ca_file: {PVE_CA_FILE} (the cluster's own CA; "
                          f"on a PVE node Keel uses it by itself for a local URL).", "proxmox.verify_tls"))
    timeout = src.number("proxmox_api.timeout")
    if timeout is not None:
        if timeout > 0:
            out["timeout"] = f"{timeout:g}s"
        else:
            src.drop("proxmox_api.timeout", f"{timeout:g} is no timeout; Keel's default applies")
    for name in ("proxmox_api.retries", "proxmox_api.wait_time"):
        if src.has(name):
            src.drop(name, "Keel's API client retries reads that fail for a passing reason by itself "
                           "(three times, with backoff); no key")
    known = {"hosts", "user", "pass", "token_id", "token_secret", "ssl_verification", "timeout",
             "retries", "wait_time"}
    for key in list(src.values):
        if key.startswith("proxmox_api.") and key.split(".", 1)[1] not in known:
            src.drop(key, "not a ProxLB setting (ProxLB ignored it too)")
    return out


def _url(host: str) -> str | None:
    """ProxLB's host notation → an https URL; None if it is no host name or address.

    ProxLB reads ``host``, ``host:port``, ``[v6]``, ``[v6]:port`` and a bare IPv6 address
    with the port after its last colon (``fc00::1:8006``), defaulting to port 8006.
    """
    text = host.strip()
    match = re.fullmatch(r"\[(.+)\](?::(\d+))?", text)
    if match:
        name, port = match.group(1), int(match.group(2) or DEFAULT_PORT)
    elif text.count(":") == 1:
        name, _, port_text = text.partition(":")
        if not port_text.isdigit():
            return None
        port = int(port_text)
    elif text.count(":") > 1:
        head, _, tail = text.rpartition(":")
        name, port = (head, int(tail)) if tail.isdigit() and _is_ipv6(head) else (text, DEFAULT_PORT)
    else:
        name, port = text, DEFAULT_PORT
    if not 0 < port < 65536:
        return None
    if ":" in name:
        return f"https://[{name}]:{port}" if _is_ipv6(name) else None
    return f"https://{name}:{port}" if re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", name) else None


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _switches(src: Source, notes: list[Note], out: dict[str, Any]) -> None:
    """enable and guests: whether ProxLB migrated at all, and which kinds of guest."""
    enable = bool(src.bool("balancing.enable"))
    types = src.list("balancing.balance_types")
    if types is not None:
        bad = [t for t in types if t not in bs.GUEST_TYPES]
        if bad:
            src.problems.add(src.label("balancing.balance_types"), f"unknown guest type(s) "
                                                                   f"{', '.join(bad)} (vm and/or ct)")
        types = [t for t in bs.GUEST_TYPES if t in types]
    out["enable"] = enable and bool(types)
    if enable and not types:
        notes.append(Note(f"ProxLB had balancing enabled but no guest types in "
                          f"{src.label('balancing.balance_types')}, so it planned and never migrated. "
                          f"Keel keeps that: enable: false (it plans and shows, and moves nothing). Set "
                          f"true to let it migrate.", "balancing.enable"))
    elif enable:
        notes.append(Note("ProxLB migrated (enable: true); so does Keel's continuous mode. Set false first "
                          "to watch what Keel would do.", "balancing.enable"))
    elif not src.given("balancing.enable"):
        notes.append(Note("ProxLB's balancing.enable was not set, and its default is false (plan only, no "
                          "migrations); Keel keeps that.", "balancing.enable"))
    out["guests"] = types or ["vm"]
    if not types and src.kind == "yaml":
        notes.append(Note("ProxLB's balance_types was empty or missing, so it migrated nothing; Keel's "
                          "default here: VMs only.", "balancing.guests"))
    if types and src.given("balancing.balance_types"):
        kinds = " and ".join({"vm": "VMs", "ct": "containers"}[t] for t in types)
        text = f"From {src.label('balancing.balance_types')}: Keel moves {kinds}."
        if "ct" in types:
            text += (" Containers cannot live-migrate: PVE stops and restarts them on the target "
                     "(that is why Keel's default is [vm]).")
        notes.append(Note(text, "balancing.guests"))


def _triggers(src: Source, notes: list[Note], out: dict[str, Any]) -> None:
    """What ProxLB measured and when it acted: method, mode, balanciness, thresholds, schedule."""
    method = src.choice("balancing.method", METHODS) or "memory"
    out["resources"] = {name: (1 if name == method else 0) for name in bs.RESOURCES}
    how = src.label("balancing.method") if src.given("balancing.method") else "ProxLB's default method"
    notes.append(Note(f"ProxLB balanced one resource ({how}: {method}); Keel weighs several at once. "
                      f"These weights reproduce ProxLB's choice; Keel's defaults are cpu 1, memory 1, "
                      f"disk 0. (Keel's own `method` key is its planning algorithm, keel, bruteforce or "
                      f"topsis, and stays at its default.)", "balancing.resources"))

    mode = src.choice("balancing.mode", bs.MODES) or "used"
    out["mode"] = mode
    if mode != "used":
        notes.append(Note(f"Same meaning as ProxLB's mode: {mode}.", "balancing.mode"))
    if src.has("ini.mode_option"):
        src.drop("ini.mode_option", "Keel always compares nodes by fractions of their size (ProxLB's "
                                    "`percent`); there is no `bytes` variant")
    if src.has("balancing.psi"):
        src.drop("balancing.psi", "Keel's psi mode has no per-resource pressure thresholds to set")

    spread = src.number("balancing.balanciness")
    if spread is not None:
        if not 0 <= spread <= 100:
            src.problems.add(src.label("balancing.balanciness"), f"must be 0 to 100 percentage points, "
                                                                 f"got {spread:g}")
        out["imbalance"] = "spread"
        out["threshold"] = f"{spread:g}%"
        given = "" if src.given("balancing.balanciness") else " (ProxLB's default)"
        notes.append(Note(f"ProxLB's balanciness {spread:g}{given}: balance when the fullest and the "
                          f"emptiest node differ by more than {spread:g} percentage points of {method}. "
                          f"`imbalance: spread` keeps that figure; Keel's own (`imbalance: keel`, the "
                          f"default) looks at every node, not only the two extremes.", "balancing.imbalance"))

    hot = src.number(f"balancing.{method}_threshold")
    if hot is not None and not 0 <= hot <= 100:
        src.problems.add(src.label(f"balancing.{method}_threshold"), f"must be 0 to 100 %, got {hot:g}")
    elif hot is not None:
        out["hotspot"] = f"{hot:g}%"
        notes.append(Note(f"ProxLB's {method}_threshold {hot:g}: balance when the fullest node's {method} "
                          f"reaches {hot:g}%, even when the spread is small. Keel's hotspot is the same "
                          f"trigger, over every weighted resource.", "balancing.hotspot"))
    elif "threshold" in out:
        notes.append(Note(f"ProxLB had no {method}_threshold; Keel's hotspot trigger applies at its default "
                          f"({bs.DEFAULT_HOTSPOT:.0%} full). `hotspot: false` turns it off.",
                          "balancing.threshold"))
    for other in METHODS:
        if other != method and src.has(f"balancing.{other}_threshold"):
            src.drop(f"balancing.{other}_threshold", f"ProxLB only used the threshold of its method "
                                                     f"({method}), so this one had no effect")

    every = parts.interval_s(src)
    if every is not None:
        out["interval"] = parts.duration(every)
        origin = (f"From {src.label('service.schedule')}" if src.given("service.schedule")
                  else "ProxLB's default schedule")
        text = f"{origin}: one round every {parts.duration(every)}."
        if every >= 600:
            text += (f" ProxLB acted on a single reading; Keel waits for {bs.DEFAULT_HOLD} rounds in a "
                     f"row over the threshold (`hold`), which at this interval is "
                     f"{parts.duration(every * bs.DEFAULT_HOLD)}. Keel is made for short rounds (default "
                     f"{parts.duration(bs.DEFAULT_INTERVAL_S)}), with cooldown, margin and limits keeping "
                     f"it calm: consider deleting `interval`.")
        notes.append(Note(text, "balancing.interval"))


def _limits(src: Source, notes: list[Note], out: dict[str, Any]) -> None:
    """How many migrations at once, and how long to wait for one."""
    limits: dict[str, Any] = {}
    parallel = src.bool("balancing.parallel")
    if parallel is False:
        limits["concurrent"] = 1
        notes.append(Note(f"ProxLB migrated one guest at a time ({src.key('balancing.parallel')} off).",
                          "balancing.limits.concurrent"))
        if src.has("balancing.parallel_jobs"):
            src.drop("balancing.parallel_jobs", "ProxLB's parallel was off, so it migrated one at a time")
    elif parallel and src.kind == "yaml":
        jobs = src.number("balancing.parallel_jobs")
        if jobs is not None and (jobs < 1 or jobs != int(jobs)):
            src.problems.add(src.label("balancing.parallel_jobs"), f"must be a whole number of 1 or more, "
                                                                   f"got {jobs:g}")
        else:
            limits["concurrent"] = int(jobs or 5)
            origin = "From parallel_jobs" if src.given("balancing.parallel_jobs") else "ProxLB's default"
            notes.append(Note(f"{origin}: migrations at once, cluster-wide (Keel also keeps to "
                              f"limits.per_node).", "balancing.limits.concurrent"))
    elif parallel:
        limits["concurrent"] = bs.DEFAULT_CONCURRENT
        notes.append(Note("ProxLB 1.0 started all migrations at once (parallel_migrations, on by default); "
                          "Keel caps them: this is its default.", "balancing.limits.concurrent"))
    validation = src.number("balancing.max_job_validation")
    if validation is not None and validation > 0:
        limits["move_timeout"] = parts.duration(validation)
        notes.append(Note("From max_job_validation, which ProxLB documents as seconds (its code counts status "
                          "polls about 5 s apart, so its real limit was longer). Keel gives up waiting on "
                          "a migration after this.", "balancing.limits.move_timeout"))
    if limits:
        out["limits"] = limits


def _placement(src: Source, notes: list[Note], out: dict[str, Any]) -> None:
    """Where guests may go: reserves, local disks, maintenance, ignore lists, pools, tags."""
    reserve = parts.reserve(src)
    if reserve:
        out["memory"] = {"reserve": reserve}
        notes.append(Note("From node_resource_reserve (ProxLB's GB are GiB; `defaults` is Keel's `default`): "
                          "memory kept free on each node, never planned for guests.", "balancing.memory.reserve"))

    local = src.bool("balancing.with_local_disks")
    if src.kind == "ini":
        out["with_local_disks"] = False
        notes.append(Note("ProxLB 1.0.5 and 1.0.6 always migrated a VM's local disks with it (earlier "
                          "versions never did). Keel does only when this is true; such moves copy whole "
                          "disks and are slow.", "balancing.with_local_disks"))
    elif local is not None:
        out["with_local_disks"] = local
        if local:
            given = "" if src.given("balancing.with_local_disks") else " (ProxLB's default)"
            notes.append(Note(f"ProxLB migrated VMs with local disks{given}; Keel's default is false "
                              f"(such moves copy whole disks and are slow).", "balancing.with_local_disks"))

    maintenance = src.list("proxmox_cluster.maintenance_nodes") or []
    if maintenance:
        out["maintenance"] = maintenance
        notes.append(Note("Nodes Keel empties and never moves guests to.", "balancing.maintenance"))
    parts.maintenance_schedule(src, notes, "balancing.maintenance" if maintenance else None)

    ignore: dict[str, Any] = {}
    nodes = src.list("proxmox_cluster.ignore_nodes") or []
    if nodes:
        ignore["nodes"] = nodes
        notes.append(Note(f"From {src.label('proxmox_cluster.ignore_nodes')}. ProxLB also left their guests "
                          f"out of its load figures.", "balancing.ignore.nodes"))
    guests = src.list("balancing.ignore_guests") or []
    patterns = [g for g in guests if "*" in g or "?" in g]
    names = [g for g in guests if g not in patterns]
    if names:
        ignore["guests"] = names
        notes.append(Note(f"From {src.label('balancing.ignore_guests')}: guests Keel never moves (it still "
                          f"counts their load).", "balancing.ignore.guests"))
    if patterns:
        src.drop("balancing.ignore_guests", f"the name pattern(s) {', '.join(patterns)}: Keel's "
                                            f"ignore.guests takes VMIDs or exact names; list the guests, or "
                                            f"tag them plb_ignore_<anything>")
    if ignore:
        out["ignore"] = ignore

    pools = parts.pools(src)
    if pools:
        out["pools"] = pools
        notes.append(Note("Carried over as they were: Keel's balancing.pools has ProxLB's shape (type "
                          "affinity or anti-affinity, pin: nodes, strict: false = pin nodes preferred, "
                          "not required).", "balancing.pools"))

    out["tags"] = True
    text = ("ProxLB's guest tags need no conversion: Keel reads plb_affinity_<x>, plb_anti_affinity_<x>, "
            "plb_ignore_<x> and plb_pin_<node> as they are (balancing.tags: true, the default). It also "
            "reads Proxmox HA rules (balancing.ha_rules, default true).")
    if src.kind == "ini":
        text += (" ProxLB 1.0's older names were renamed in ProxLB 1.1 and must be renamed for Keel too: "
                 "plb_include_<x> to plb_affinity_<x>, plb_exclude_<x> and plb_antiaffinity_<x> to "
                 "plb_anti_affinity_<x>.")
    notes.append(Note(text, "balancing.tags"))
