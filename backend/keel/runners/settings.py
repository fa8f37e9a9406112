"""The ``runners:`` section of Keel's config: Rungar's configuration, key for key.

A Rungar file's top level goes under ``runners:`` (``keel import-rungar`` does it)::

    runners:
      github:
        url: https://github.com/my-org
        app_client_id: Iv23liAbCdEf123456
        app_installation_id: 12345678
        app_private_key_path: /etc/pve/priv/keel/github-app.pem
      providers:
        - name: pve
          type: proxmox
          nodes: [pve1, pve2, pve3]
          runner: {template: 9000, pool: runners}
      scale_sets:
        - name: keel-c2-m4
          max_runners: 16
          providers:
            - {name: pve, runner: {cores: 2, memory: 4GiB}}

What Keel does not take from Rungar: secrets written into the file (``token``,
``token_secret``, ``app_private_key``: name a file instead), provider types other than
``proxmox``, and the daemon's own keys (``socket``, ``log_*``, ``events.file``).  What it
adds: ``github.tls``, ``webhook``, windows with ``max_runners`` and a template per node.

A Rungar file pasted as it is keeps its meaning or is refused with the reason: the one
default that differs is ``jit_path`` (Rungar's templates read ``/run/rungar/jitconfig``,
Keel's ``/run/keel/jitconfig``), so a section that shows it came from Rungar (``version``,
or a path under ``/etc/rungar`` or ``/run/rungar``) must say which its template reads.
``node_local`` names the files a section reads from outside pmxcfs (``/etc/pve``), which
the next leader may lack, with the place in pmxcfs to copy each to.  ``read(reader)``
reports every bad key with its path (``runners.scale_sets[2].max_runners``); nothing is
contacted while reading.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from keel import schedule as sched
from keel.errors import InvalidError
from keel.runners.spec import (  # noqa: F401 (re-exported: settings.RunnersSettings, ...)
    DEFAULT_EVENTS_MAX_COUNT, DEFAULT_JIT_PATH, DEFAULT_METRICS_LISTEN, DEFAULT_PROVIDER_TIMEOUT_S,
    DEFAULT_RECONCILE_INTERVAL_S, DEFAULT_START_TIMEOUT_S, DEFAULT_WEBHOOK_LISTEN, MIN_RECONCILE_INTERVAL_S,
    MIN_START_TIMEOUT_S, NAME_RE, PLACEMENTS, PROVIDER_TYPES, SECRET_KEYS, GitHubSettings, Listen, MiB,
    ProviderSettings, RunnersSettings, RunnerSpec, ScaleSetProvider, ScaleSetSettings, WebhookSettings,
    github_scope, read_secret,
)
from keel.units import parse_size
from keel.validate import Problems, Reader

# PVE's formats (pve-storage-id, pve-poolid in the API schema).
STORAGE_ID = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$")
POOL_ID = re.compile(r"^[A-Za-z0-9\-_]+$")
NODE_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?$")
VM_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")          # PVE's dns-name
VMID_LOW, VMID_HIGH = 100, 999999999

# -- reading ---------------------------------------------------------------------------


def read(r: Reader) -> RunnersSettings:
    """The ``runners:`` mapping; an absent section gives ``configured=False``."""
    if not r.data:
        r.done()
        return RunnersSettings()
    r.integer("version", 1, 1, 1)
    github = _github(r.mapping("github"))
    providers = tuple(_provider(Reader(item, path, r.problems)) for path, item in r.items("providers"))
    raw_blocks = _provider_blocks(r)
    _jit_paths_said(r, raw_blocks)
    names = [p.name for p in providers]
    for name in {n for n in names if names.count(n) > 1}:
        r.problems.add(r.sub("providers"), f"two providers named {name!r}")
    scale_sets = tuple(_scale_set(Reader(item, path, r.problems), providers, raw_blocks)
                       for path, item in r.items("scale_sets"))
    set_names = [s.name for s in scale_sets]
    for name in {n for n in set_names if set_names.count(n) > 1}:
        r.problems.add(r.sub("scale_sets"), f"two scale sets named {name!r}")
    metrics = r.mapping("metrics")
    listen = Listen(metrics.get("enable", bool, False),
                    metrics.get("listen", str, DEFAULT_METRICS_LISTEN, check=_host_port))
    metrics.done()
    hook = r.mapping("webhook")
    webhook = WebhookSettings(_secret_path(hook, "secret_path"),
                              hook.get("listen", str, DEFAULT_WEBHOOK_LISTEN, check=_host_port))
    hook.done()
    events = r.mapping("events")
    max_count = events.integer("max_count", DEFAULT_EVENTS_MAX_COUNT, 1)
    max_age = events.duration("max_age", None)
    if events.has("file"):
        events.seen.add("file")
        events.problems.add(events.sub("file"), "Keel keeps its events in its database "
                                                "(`keel runners events`); remove this key")
    events.done()
    settings = RunnersSettings(
        github=github, providers=providers, scale_sets=scale_sets,
        reconcile_interval_s=r.duration("reconcile_interval", DEFAULT_RECONCILE_INTERVAL_S),
        installation=r.get("installation", str, None), metrics=listen, webhook=webhook,
        events_max_count=max_count, events_max_age_s=max_age, configured=True)
    if settings.reconcile_interval_s < MIN_RECONCILE_INTERVAL_S:
        r.problems.add(r.sub("reconcile_interval"),
                       f"must be at least {MIN_RECONCILE_INTERVAL_S:g}s")
    for key in ("socket", "log_level", "log_format"):
        if r.has(key):
            r.seen.add(key)
            r.problems.add(r.sub(key), "a setting of Rungar's daemon that Keel has no use for; "
                                       "remove it (keel import-rungar does)")
    r.done()
    return settings


def _github(r: Reader) -> GitHubSettings:
    url = r.get("url", str, check=_github_url)
    _refuse_secrets(r)
    app_client_id = r.get("app_client_id", (str, int), None)
    installation = r.get("app_installation_id", int, None)
    key_path = r.get("app_private_key_path", str, None)
    token_path = r.get("token_path", str, None)
    tls = r.mapping("tls")
    ca_file = tls.get("ca_file", str, None)
    insecure = tls.get("insecure_skip_verify", bool, False)
    tls.done()
    app = [k for k, v in (("app_client_id", app_client_id), ("app_installation_id", installation),
                          ("app_private_key_path", key_path)) if v is not None]
    if token_path and app:
        r.problems.add(r.sub("token_path"), "give a GitHub App or a token, not both")
    elif app and len(app) < 3:
        missing = {"app_client_id", "app_installation_id", "app_private_key_path"} - set(app)
        r.problems.add(r.path or "github", f"a GitHub App needs {', '.join(sorted(missing))} too")
    elif not token_path and not app and url is not None:
        r.problems.add(r.path or "github", "give a GitHub App (app_client_id, app_installation_id, "
                                           "app_private_key_path) or token_path")
    if url and app and github_scope(url)[0] == "enterprises":
        r.problems.add(r.sub("url"), "an enterprise needs a token (token_path): GitHub does not let "
                                     "an App manage an enterprise's runners")
    settings = GitHubSettings(url=url or "", app_client_id=str(app_client_id) if app_client_id else None,
                              app_installation_id=installation, app_private_key_path=key_path,
                              token_path=token_path, ca_file=ca_file, verify_tls=not insecure,
                              timeout_s=r.duration("timeout", 30.0))
    r.done()
    return settings


def _github_url(value: str) -> str | None:
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        return f"expected https://github.com/<org>, <org>/<repo> or enterprises/<name>, got {value!r}"
    try:
        github_scope(value)
    except InvalidError as err:
        return err.message
    return None


def _host_port(value: str) -> str | None:
    host, _, port = value.rpartition(":")
    return None if host and port.isdigit() and 0 <= int(port) < 65536 else \
        f"expected host:port such as 127.0.0.1:9102, got {value!r}"


def _refuse_secrets(r: Reader) -> None:
    for key, instead in SECRET_KEYS.items():
        if r.has(key):
            r.seen.add(key)
            r.problems.add(r.sub(key), f"secrets do not belong in the config file; put it in a "
                                       f"root-only file under /etc/pve/priv/keel/ and name it with "
                                       f"{instead}")


def _secret_path(r: Reader, key: str) -> str | None:
    _refuse_secrets(r)
    return r.get(key, str, None)


RUNGAR_PLACES = ("/etc/rungar/", "/run/rungar/")
RUNGAR_JIT_PATH = "/run/rungar/jitconfig"


def _from_rungar(data: Any) -> bool:
    """The section shows it was Rungar's file: its ``version``, or a path of Rungar's."""
    def strings(value: Any) -> Any:
        if isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)
        elif isinstance(value, str):
            yield value
    return isinstance(data, dict) and ("version" in data or any(
        text.startswith(RUNGAR_PLACES) for text in strings(data)))


def _jit_paths_said(r: Reader, blocks: dict[str, dict[str, Any]]) -> None:
    """A Rungar file pasted whole must say where its template reads the JIT config."""
    if not _from_rungar(r.data):
        return
    scale_sets = r.data.get("scale_sets") if isinstance(r.data.get("scale_sets"), list) else []
    for index, (name, block) in enumerate(blocks.items()):
        if "jit_path" in block:
            continue
        users = [entry.get("runner") or {} for ss in scale_sets if isinstance(ss, dict)
                 for entry in ss.get("providers") or [] if isinstance(entry, dict) and entry.get("name") == name]
        if users and all(isinstance(u, dict) and "jit_path" in u for u in users):
            continue
        r.problems.add(f"{r.sub('providers')}[{index}].runner.jit_path",
                       f"not set, and this is Rungar's configuration (version, or paths under /etc/rungar): "
                       f"Rungar wrote the runner's registration to {RUNGAR_JIT_PATH}, Keel writes it to "
                       f"{DEFAULT_JIT_PATH}; set the path your template reads ({RUNGAR_JIT_PATH} for a "
                       f"Rungar template; keel import-rungar does)")


def node_local(settings: RunnersSettings) -> list[tuple[str, str, str]]:
    """(config key, path, where in pmxcfs to copy it) for each file the section reads from
    outside ``/etc/pve``: on this node only, so the next leader may not have it."""
    found = []
    entries: list[tuple[str, str | None, str]] = [
        ("github.app_private_key_path", settings.github.app_private_key_path, "/etc/pve/priv/keel/github-app.pem"),
        ("github.token_path", settings.github.token_path, "/etc/pve/priv/keel/github-token"),
        ("github.tls.ca_file", settings.github.ca_file, "/etc/pve/keel/github-ca.pem"),
        ("webhook.secret_path", settings.webhook.secret_path, "/etc/pve/priv/keel/github-webhook-secret")]
    for index, p in enumerate(settings.providers):
        entries += [(f"providers[{index}].token_secret_path", p.token_secret_path,
                     f"/etc/pve/priv/keel/pve-{p.name}-token"),
                    (f"providers[{index}].tls.ca_file", p.ca_file, f"/etc/pve/keel/{p.name}-ca.pem")]
    for key, path, place in entries:
        if path and not path.startswith("/etc/pve/"):
            found.append((key, path, place))
    return found


def _provider_blocks(r: Reader) -> dict[str, dict[str, Any]]:
    """Each provider's own runner block, by provider name, as written."""
    blocks = {}
    providers = r.data.get("providers")
    for item in providers if isinstance(providers, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            block = item.get("runner")
            blocks[item["name"]] = block if isinstance(block, dict) else {}
    return blocks


def _provider(r: Reader) -> ProviderSettings:
    name = r.get("name", str, check=_name)
    kind = r.get("type", str, check=lambda v: None if v in PROVIDER_TYPES else
                 f"Keel runs runners on Proxmox VE only (type: proxmox), got {v!r}")
    _refuse_secrets(r)
    tls = r.mapping("tls")
    ca_file = tls.get("ca_file", str, None)
    insecure = tls.get("insecure_skip_verify", bool, False)
    tls.done()
    url = r.get("url", str, None)
    token_id = r.get("token_id", str, None, check=lambda v: None if "!" in v else
                     "expected USER@REALM!NAME, such as keel@pve!runners")
    secret_path = r.get("token_secret_path", str, None)
    if url and not (token_id and secret_path):
        r.problems.add(r.sub("token_id"), "another cluster (url) needs token_id and token_secret_path")
    if not url and (token_id or secret_path):
        r.problems.add(r.sub("url"), "token_id and token_secret_path are for another cluster: give its "
                                     "url, or remove them to use the cluster Keel runs on")
    r.raw("runner")   # read with each scale set, where it is written over
    settings = ProviderSettings(
        name=name or "?", type=kind or "proxmox", url=url, token_id=token_id,
        token_secret_path=secret_path, ca_file=ca_file, verify_tls=not insecure,
        nodes=r.string_list("nodes"), timeout_s=r.duration("timeout", DEFAULT_PROVIDER_TIMEOUT_S),
        weight=r.number("weight", 1.0, 0.001), max_runners=r.integer("max_runners", None, 0),
        disabled=r.get("disabled", bool, False))
    r.done()
    return settings


def _name(value: str) -> str | None:
    return None if NAME_RE.match(value) else (
        f"{value!r} is not usable: letters, digits and '-', at most 54 characters "
        f"(runner VMs are named after it)")


def _scale_set(r: Reader, providers: tuple[ProviderSettings, ...],
               raw_blocks: dict[str, dict[str, Any]]) -> ScaleSetSettings:
    name = r.get("name", str, check=_name)
    max_runners = r.integer("max_runners", None, 1)
    if max_runners is None and not r.has("max_runners"):
        r.problems.add(r.sub("max_runners"), "is required")
    top = max_runners or 10**9          # checks against an unusable max_runners say nothing more
    min_runners = r.integer("min_runners", 0, 0, top)
    start_timeout = r.duration("start_timeout", DEFAULT_START_TIMEOUT_S)
    if start_timeout < MIN_START_TIMEOUT_S:
        r.problems.add(r.sub("start_timeout"), f"must be at least {MIN_START_TIMEOUT_S:g}s")
    ages = {}
    for key in ("max_idle_age", "max_age"):
        ages[key] = r.duration(key, None)
        if ages[key] is not None and ages[key] < start_timeout:
            r.problems.add(r.sub(key), "must be at least start_timeout")
    schedule = sched.read(r.mapping("schedule"), extra_keys=("min_runners", "max_runners"))
    if schedule is not None:
        _check_windows(r, schedule, top)
    set_providers = []
    known = {p.name for p in providers}
    for path, item in r.items("providers"):
        if isinstance(item, str):
            item = {"name": item}
        p = Reader(item, path, r.problems)
        pname = p.get("name", str)
        block = p.raw("runner", None)
        p.done()
        if pname is None:
            continue
        if pname not in known:
            r.problems.add(p.sub("name"), f"no provider named {pname!r}")
            continue
        if any(sp.name == pname for sp in set_providers):
            r.problems.add(p.sub("name"), f"provider {pname!r} is listed twice")
            continue
        spec = _runner(merge(raw_blocks.get(pname, {}), block), p.sub("runner"), r.problems)
        if spec is not None:
            set_providers.append(ScaleSetProvider(pname, spec))
    if not r.has("providers"):
        r.problems.add(r.sub("providers"), "is required: the providers its runners go on")
    settings = ScaleSetSettings(
        name=name or "?", max_runners=max_runners or 1, providers=tuple(set_providers),
        labels=r.string_list("labels"), runner_group=r.get("runner_group", str, None),
        min_runners=min_runners, priority=r.integer("priority", 0),
        placement=r.choice("placement", PLACEMENTS, "spread"), start_timeout_s=start_timeout,
        max_idle_age_s=ages["max_idle_age"], max_age_s=ages["max_age"],
        paused=r.get("paused", bool, False), schedule=schedule)
    r.done()
    return settings


def _check_windows(r: Reader, schedule: sched.Schedule, max_runners: int) -> None:
    for index, window in enumerate(schedule.windows):
        for key in ("min_runners", "max_runners"):
            value = window.extra.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= max_runners:
                r.problems.add(f"{r.sub('schedule')}.windows[{index}].{key}",
                               f"expected a whole number from 0 to max_runners ({max_runners}), "
                               f"got {value!r}")


def merge(base: Any, over: Any) -> dict[str, Any]:
    """A scale set's runner block written over the provider's: keys replace, mappings merge,
    a key set to null is cleared."""
    result = dict(base) if isinstance(base, dict) else {}
    for key, value in (over or {}).items() if isinstance(over, dict) else ():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def _runner(block: dict[str, Any], path: str, problems: Problems) -> RunnerSpec | None:
    r = Reader(block, path, problems)
    before = len(problems.items)
    template, template_name, templates = _template(r)
    cores = r.integer("cores", None, 1, 512)
    memory = r.raw("memory")
    memory_bytes = 0
    if memory is None:
        problems.add(r.sub("memory"), "is required (in the provider's runner block or this one)")
    else:
        try:
            memory_bytes = parse_size(memory, r.sub("memory"))
        except InvalidError as err:
            problems.add(r.sub("memory"), err.message.split(": ", 1)[-1])
        else:
            if memory_bytes < 128 * MiB or memory_bytes % MiB:
                problems.add(r.sub("memory"), f"must be at least 128MiB and a whole number of MiB, "
                                              f"got {memory!r}")
    for key, value in (("template", template or template_name or templates or None), ("cores", cores)):
        if value is None and not r.has(key):
            problems.add(r.sub(key), "is required (in the provider's runner block or this one)")
    full_clone = r.get("full_clone", bool, False)
    storage = r.get("storage", str, None)
    if storage and not full_clone:
        problems.add(r.sub("storage"), "only for a full clone (full_clone: true)")
    if storage is not None and not STORAGE_ID.match(storage):
        problems.add(r.sub("storage"), f"not a Proxmox VE storage ID: {storage!r}")
    pool = r.get("pool", str, None)
    if pool is not None and not POOL_ID.match(pool):
        problems.add(r.sub("pool"), f"not a Proxmox VE pool ID (letters, digits, - and _): {pool!r}")
    spec = RunnerSpec(template=template or 0, template_name=template_name, templates=templates,
                      cores=cores or 0, memory_bytes=memory_bytes,
                      full_clone=full_clone, storage=storage, pool=pool,
                      jit_path=r.get("jit_path", str, DEFAULT_JIT_PATH,
                                     check=lambda v: None if v.startswith("/") else
                                     "expected an absolute path in the VM"))
    for key in ("vcpus", "machine_type", "image", "disk"):
        if r.has(key):
            r.seen.add(key)
            problems.add(r.sub(key), "not a key of a proxmox runner block (cores, memory, template, "
                                     "full_clone, storage, pool, jit_path)")
    r.done()
    return spec if len(problems.items) == before else None


def _template(r: Reader) -> tuple[int | None, str | None, tuple[tuple[str, int], ...]]:
    """``template``: a VMID, a template's name (its copies, one per node), or a VMID per node."""
    value = r.raw("template")
    wrong = ("expected a template's VMID (9000), its name (every template of that name, one per "
             "node), or one per node ({pve1: 9000, pve2: 9001})")
    if value is None:
        return None, None, ()
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if not VMID_LOW <= value <= VMID_HIGH:
            bound = f"at least {VMID_LOW}" if value < VMID_LOW else f"at most {VMID_HIGH}"
            r.problems.add(r.sub("template"), f"must be {bound}, got {value}")
        return value, None, ()
    if isinstance(value, str):
        if not VM_NAME.match(value):
            r.problems.add(r.sub("template"), f"{wrong}; {value!r} is not a VM name")
        return None, value, ()
    if isinstance(value, dict) and value:
        per_node = []
        for node, vmid in value.items():
            if isinstance(vmid, str) and vmid.isdigit():
                vmid = int(vmid)
            if not isinstance(node, str) or not NODE_NAME.match(node):
                r.problems.add(f"{r.sub('template')}.{node}", "not a Proxmox VE node name")
            elif isinstance(vmid, bool) or not isinstance(vmid, int) or not VMID_LOW <= vmid <= VMID_HIGH:
                r.problems.add(f"{r.sub('template')}.{node}", f"expected a VMID from {VMID_LOW} to "
                                                              f"{VMID_HIGH}, got {vmid!r}")
            else:
                per_node.append((node, vmid))
        return None, None, tuple(sorted(per_node))
    r.problems.add(r.sub("template"), f"{wrong}, got {value!r}")
    return None, None, ()


def parse(data: Any, source: str = "runners") -> RunnersSettings:
    problems = Problems(source)
    settings = read(Reader(data, "", problems))
    problems.raise_if_any()
    return settings
