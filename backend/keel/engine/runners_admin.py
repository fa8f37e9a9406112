# SPDX-License-Identifier: AGPL-3.0-or-later
"""The runners' settings as the web UI edits them: read and written as JSON, secrets
write-only, "test connection", the job wait history, and the operator's controls (pause,
resume, drain a scale set at run time) (``engine.api`` routes to these).

The ``runners:`` section is replaced in the config file in place: the other sections, and
their comments, stay as they were written (comments inside ``runners:`` are not kept).
Every change is validated as a whole config first, with each problem keyed by its path
(``runners.scale_sets[1].max_runners``); secrets are checked too (keyed
``runners.github.app_private_key`` and so on, ``keel.runners.secrets``), written under
their fixed names into the secrets directory the engine started with
(``engine.secrets_dir``) with mode 0600, and only then is the config written.  A change
through keel-web is held to ``engine.boundary`` (no paths, URLs or TLS switches of its
choosing).  No answer ever holds a secret: only whether each is set.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from keel import config as cfg
from keel.authz import Principal
from keel.engine import boundary, runners_shared
from keel.errors import BusyError, InvalidError, KeelError, NotFoundError
from keel.runners import activity as job_activity, check as checks, secrets, shared
from keel.files import atomic_write

if TYPE_CHECKING:
    from keel.engine.core import Engine

SECTION = "runners"
WAIT_JOBS_MAX = 1000
_WRITING = threading.Lock()        # one read-check-write of the config at a time


# -- the config file --------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """YAML data as JSON can carry it (dates and other scalars as text)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _load(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as err:
        raise InvalidError(f"the config file is not valid YAML: {err}") from None
    except RecursionError:
        raise InvalidError("the config file is not valid YAML: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidError("the config file is not a mapping")
    return data


def replace_section(text: str, key: str, value: Any) -> str:
    """``text`` with its top-level ``key:`` block replaced by ``value`` (``config.replace_section``:
    other lines kept byte for byte), or removed when ``value`` is None.  If the result would
    change another section (an unusual layout), the whole file is written anew."""
    if value is not None:
        result = cfg.replace_section(text, key, value)
    else:
        lines = text.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if re.match(rf"^{re.escape(key)}\s*:", line)), None)
        if start is None:
            return text
        end = next((j for j in range(start + 1, len(lines))
                    if lines[j].strip() and lines[j][0] not in " \t#"), len(lines))
        while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
            end -= 1
        result = "".join(lines[:start]) + "".join(lines[end:])
    before, after = _load(text), _load(result)
    before.pop(key, None)
    after.pop(key, None)
    if before != after:
        data = _load(text)
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
        result = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return result


def _read_config(engine: "Engine") -> str:
    try:
        return engine.config_path.read_text()
    except OSError as err:
        raise InvalidError(f"cannot read the config {engine.config_path}: {err.strerror}") from None


def _section(text: str) -> dict[str, Any]:
    runners = _load(text).get(SECTION)
    return copy.deepcopy(runners) if isinstance(runners, dict) else {}


def settings_view(engine: "Engine") -> dict[str, Any]:
    """The ``runners:`` section as written, each secret's state, and where secrets go."""
    text = _read_config(engine)
    runners = _section(text)
    return {"settings": _plain(runners), "secrets": secrets.state(runners), "stamp": stamp(text),
            "secrets_dir": engine.engine_settings.secrets_dir, "path": str(engine.config_path),
            "config_error": engine.config_error,
            "in_force": engine.config.runners.configured}


def stamp(text: str) -> str:
    """Names a version of the config file: a change made from an older one is refused."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def change(engine: "Engine", settings: dict[str, Any] | None, given: dict[str, Any], principal: Principal,
           write: bool = True, based_on: str | None = None) -> dict[str, Any]:
    """Validate (and with ``write``, carry out) new runner settings and secrets.

    ``settings``: the whole ``runners:`` section (None: keep the file's; ``{}`` removes
    it); ``given``: secret id -> new value; ``based_on``: the ``stamp`` of the file the
    settings were read from (``BusyError`` if it changed since).  ``InvalidError`` lists
    every problem keyed by its config path.  Answers which secrets were written, never
    their content."""
    text = _read_config(engine)
    if based_on is not None and based_on != stamp(text):
        raise BusyError("the config file changed since these settings were read (someone else saved?); "
                        "open them again")
    runners = copy.deepcopy(settings) if settings is not None else _section(text)
    errors: dict[str, str] = {}
    planned: list[tuple[Path, str, str]] = []
    directory = Path(engine.engine_settings.secrets_dir)
    for secret_id, value in given.items():
        try:
            found = secrets.slot(runners, secret_id)
            content = secrets.check(found, value)
            where = secrets.mapping(runners, found.section, create=True)
            if where is None:
                raise InvalidError(f"{found.field}: its provider is not in the settings",
                                   errors={found.field: "its provider is not in the settings"})
            # Always the fixed name in the directory the engine started with, whatever the
            # settings named: Keel writes secrets only to files it made.
            path = where[found.key] = str(directory / found.default_name)
            planned.append((secrets.inside(directory, path, found.field), content, found.id))
        except InvalidError as err:
            errors.update(err.errors or {f"runners.{secret_id}": err.message})
    new_text = replace_section(text, SECTION, runners if runners else None)
    try:
        new_config = engine.validate_config(new_text)
    except InvalidError as err:
        errors.update(err.errors or {SECTION: err.message})
    else:
        if not principal.is_root:
            errors.update(boundary.problems(_in_force(engine, text), new_config.runners, given, directory,
                                            principal, _considered(engine)))
    if errors:
        raise InvalidError(f"{len(errors)} problem(s): " + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                           errors=errors)
    if not write:
        return {"valid": True, "written": False, "secrets": [s for _, _, s in planned]}
    with _WRITING:
        return _write(engine, text, new_text, planned, runners, principal.who())


def _in_force(engine: "Engine", text: str) -> Any:
    """The runners' settings a change is judged against: the file's, or if it does not load,
    the last good ones."""
    try:
        return engine.validate_config(text).runners
    except InvalidError:
        return engine.config.runners


def _considered(engine: "Engine") -> frozenset[str]:
    try:
        return engine.considered(engine.snapshot())
    except KeelError:
        return frozenset({"/"})   # unknown: nothing is inherited below the top levels


def _write(engine: "Engine", text: str, new_text: str, planned: list[tuple[Path, str, str]],
           runners: dict[str, Any], who: str) -> dict[str, Any]:
    if _read_config(engine) != text:
        raise BusyError("the config file changed meanwhile; load the settings again and retry")
    in_force = engine.config.runners
    for path, content, _ in planned:
        secrets.write(path, content)
    if new_text != text:
        atomic_write(engine.config_path, new_text)
    engine.log_change(f"runner settings ({', '.join(s for _, _, s in planned) or 'no secret'} set)", who)
    engine.reload_if_changed()                # new runner settings restart the runners
    if planned and engine.config.runners == in_force:
        engine.restart_runners()              # a secret replaced in place: read it again
    return {"valid": True, "written": True, "secrets": [s for _, _, s in planned],
            "state": secrets.state(runners), "stamp": stamp(new_text)}


# -- test connection --------------------------------------------------------------------------


def test_connection(engine: "Engine") -> dict[str, Any]:
    """The checks of ``keel.runners.check`` on the settings in force, scrubbed of secrets."""
    settings = engine.config.runners
    if not settings.configured:
        return {"ok": False, "results": [{"check": "settings", "target": str(engine.config_path), "ok": False,
                                          "message": "no runners: section in the config"}]}
    results = checks.connection(settings, engine.client, engine.clock)
    hidden = secrets.values(_section(_read_config(engine)))
    for result in results:
        for value in hidden:
            result["message"] = result["message"].replace(value, "[secret]")
    return {"ok": all(r["ok"] is not False for r in results), "results": results}


# -- job waits ------------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def waits(engine: "Engine", limit: int) -> dict[str, Any]:
    """The last ``limit`` jobs that started: queued → started, per job and per scale set."""
    if engine.runners is None and not engine.leader:       # a follower: the leader's recent jobs
        rows = (runners_shared.read(engine) or {}).get("jobs") or []
    else:
        store = engine.runner_store()
        rows = [] if store is None else store.jobs(limit=WAIT_JOBS_MAX)
    jobs = []
    for row in rows:
        if row.get("started_at") is None or row.get("queued_at") is None:
            continue
        jobs.append({"job_id": row["job_id"], "scale_set": row["scale_set"], "repo": row["repo"],
                     "queued_at": row["queued_at"], "started_at": row["started_at"],
                     "wait_s": round(max(0.0, row["started_at"] - row["queued_at"]), 1),
                     "runner_wait_s": None if row.get("assigned_at") is None else
                     round(max(0.0, row["started_at"] - row["assigned_at"]), 1),
                     "runner": row["runner"], "state": row["state"]})
        if len(jobs) >= limit:
            break
    jobs.sort(key=lambda j: j["queued_at"])
    per_set: dict[str, list[float]] = {}
    for job in jobs:
        per_set.setdefault(job["scale_set"] or "", []).append(job["wait_s"])
    summary = {name: {"jobs": len(v), "p50_s": _percentile(v, 0.5), "p95_s": _percentile(v, 0.95),
                      "max_s": max(v)} for name, v in sorted(per_set.items())}
    return {"jobs": jobs, "scale_sets": summary}


def activity(engine: "Engine", span_s: float) -> dict[str, Any]:
    """Each scale set's queue depth and busy runners over the last ``span_s`` (the Runners
    tab's charts); a follower draws them from the leader's recent jobs."""
    now = engine.clock()
    if engine.runners is None and not engine.leader:
        rows = (runners_shared.read(engine) or {}).get("jobs") or []
    else:
        store = engine.runner_store()
        rows = [] if store is None else store.jobs_during(now - span_s - span_s / job_activity.STEPS, now)
    return job_activity.activity(rows, now, span_s)


def json_body_settings(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidError("settings: expected the runners section as a JSON object",
                           errors={"settings": "expected a JSON object"})
    if len(json.dumps(data)) > 512 * 1024:
        raise InvalidError("settings: too large")
    return data


# -- the operator's controls --------------------------------------------------------------------


def control(engine: "Engine", name: str, action: str, who: str) -> dict[str, Any]:
    """Pause, resume or drain scale set ``name`` now.  On the leader the runners act on it at
    once; on another node it is written to the shared controls file (pmxcfs), which the
    leader's runners read within seconds.  Kept until resumed, also across a leader change."""
    import time
    if action not in shared.ACTIONS:
        raise InvalidError(f"{action!r} is not an action: pause, resume or drain")
    settings = engine.config.runners
    if not settings.configured:
        raise NotFoundError("the runners are not configured (no runners: section)")
    if settings.scale_set(name) is None:
        raise NotFoundError(f"no scale set named {name!r} (the scale sets are "
                            f"{', '.join(s.name for s in settings.scale_sets) or 'none'})")
    running = engine.runners
    if running is not None:
        return {"applied": True, "leader_node": engine.node, "scale_set": running[0].control(name, action, who)}
    value = shared.write_control(engine.config.engine.shared_dir, name, action, who, time.time())
    return {"applied": False, "leader_node": engine.leader_node(),
            "scale_set": {"name": name, "control": value}}
