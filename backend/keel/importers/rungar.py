"""Rungar's config file → Keel's ``runners:`` section (``keel import-rungar``).

Rungar's keys carry over key for key: its top level goes under ``runners:``.  What
changes is said in a comment above the key, and what cannot come along is listed at the
end:

* secrets: Keel keeps none in keel.yaml.  An inline ``token``, ``token_secret`` or
  ``app_private_key`` becomes a ``*_path`` under ``/etc/pve/priv/keel/`` (root-only, and
  on every node through pmxcfs) with a note saying what to put there; a ``*_path`` that
  points elsewhere is moved there too, with a note to copy the file;
* providers of types other than ``proxmox`` (Keel runs runners on Proxmox VE only) and
  their entries in each scale set; a scale set left with no provider is dropped;
* ``jit_path``: Rungar's templates read ``/run/rungar/jitconfig``, so that stays the path
  unless the file names another (Keel's own default is ``/run/keel/jitconfig``);
* files on the node Rungar ran on: a ``tls.ca_file`` outside ``/etc/pve`` moves to
  ``/etc/pve/keel/`` (the CA is no secret; pmxcfs gives it to every node, so the next
  leader has it too), with a note to copy it there;
* the daemon's own keys (``socket``, ``log_level``, ``log_format``, ``events.file``).

``convert(text, source)`` is pure; ``import_file(path)`` reads the file and checks the
result with ``keel.config.parse``, as ``keel import-proxlb`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from keel.config import DEFAULT_CONFIG_FILE
from keel.errors import InvalidError
from keel.importers.commented import Note, _comment

SECRET_DIR = "/etc/pve/priv/keel"
CA_DIR = "/etc/pve/keel"
RUNGAR_JIT_PATH = "/run/rungar/jitconfig"
FLOW_WIDTH = 90
DAEMON_KEYS = {"socket": "Keel's CLI talks to the engine over its own local API",
               "log_level": "Keel logs to journald; `keel -v` shows more",
               "log_format": "Keel logs to journald"}
TOP_KEYS = ("version", "installation", "reconcile_interval", "github", "providers", "scale_sets",
            "metrics", "events")


def convert(text: str, source: str = "rungar config") -> tuple[dict[str, Any], list[Note]]:
    """Rungar's config text → (``{"runners": {...}}``, notes).  Bad input → InvalidError."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidError(f"{source}: not valid YAML: {err}") from None
    if not isinstance(data, dict) or not any(k in data for k in ("github", "scale_sets", "providers")):
        raise InvalidError(f"{source}: not a Rungar config (no github, providers or scale_sets)")
    notes = [
        Note(f"Keel config converted by `keel import-rungar` from {source}.", ""),
        Note(f"Check it, then add it to {DEFAULT_CONFIG_FILE} (cluster-wide; it holds no secrets). A "
             f"comment above a key says where Keel differs from Rungar; the list at the end names "
             f"what could not be carried over, and why. Keel's metrics are named keel_* where Rungar's "
             f"were rungar_*, and `keel runners status` shows what `rungar status` did.", ""),
    ]
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in DAEMON_KEYS:
            notes.append(Note(DAEMON_KEYS[key], None, str(key)))
        elif key not in TOP_KEYS:
            notes.append(Note("not a key of Rungar's configuration; left out", None, str(key)))
    for key in TOP_KEYS:
        if key not in data:
            continue
        if key == "github":
            out[key] = _github(data[key], notes)
        elif key == "providers":
            out[key] = _providers(data[key], notes)
        elif key == "scale_sets":
            out[key] = _scale_sets(data[key], out.get("providers", []), data.get("providers"), notes)
        elif key == "events":
            out[key] = _events(data[key], notes)
        else:
            out[key] = data[key]
    if "metrics" in out:
        notes.append(Note("Served by `keel runners run` on its own; under the engine, on its metrics "
                          "endpoint.", "runners.metrics"))
    return {"runners": out}, notes


def _github(github: Any, notes: list[Note]) -> Any:
    if not isinstance(github, dict):
        return github
    out = dict(github)
    _secret(out, "app_private_key", "app_private_key_path", "github-app.pem",
            "the GitHub App's private key (PEM)", "runners.github", "github", notes)
    _secret(out, "token", "token_path", "github-token", "the personal access token",
            "runners.github", "github", notes)
    _ca_file(out, "github-ca.pem", "GitHub Enterprise Server's CA", "runners.github", notes)
    return out


def _ca_file(block: dict[str, Any], filename: str, what: str, at: str, notes: list[Note]) -> None:
    """A CA file on Rungar's node only moves to /etc/pve/keel, which every node has."""
    tls = block.get("tls")
    path = tls.get("ca_file") if isinstance(tls, dict) else None
    if not isinstance(path, str) or path.startswith("/etc/pve/"):
        return
    target = f"{CA_DIR}/{filename}"
    also = " (if it is a copy of this cluster's own CA, name /etc/pve/pve-root-ca.pem instead)" \
        if "GitHub" not in what else ""
    notes.append(Note(f"Rungar read {what} from {path}, which is on that node only: the next node to lead "
                      f"would not have it. Copy it to {target}, which pmxcfs gives every node{also}.",
                      f"{at}.tls.ca_file"))
    block["tls"] = {**tls, "ca_file": target}


def _secret(block: dict[str, Any], inline: str, path_key: str, filename: str, what: str,
            at: str, label: str, notes: list[Note]) -> None:
    """An inline secret becomes a file under /etc/pve/priv/keel; a file elsewhere moves there."""
    target = f"{SECRET_DIR}/{filename}"
    if inline in block:
        items = [(path_key, target) if key == inline else (key, value) for key, value in block.items()
                 if key != path_key]
        block.clear()
        block.update(items)
        notes.append(Note(f"{what[0].upper()}{what[1:]} was written into the Rungar file; Keel reads it from {target}: "
                          f"put it there (root-only, mode 0600). It is not copied here.", f"{at}.{path_key}"))
        notes.append(Note(f"secret value not copied; see {path_key}", None, f"{label}.{inline}"))
    elif isinstance(block.get(path_key), str) and not block[path_key].startswith(SECRET_DIR + "/"):
        notes.append(Note(f"Rungar read {what} from {block[path_key]}; Keel keeps secrets in {SECRET_DIR}, "
                          f"which pmxcfs gives every node and only root can read: copy the file to "
                          f"{target}.", f"{at}.{path_key}"))
        block[path_key] = target


def _providers(providers: Any, notes: list[Note]) -> Any:
    if not isinstance(providers, list):
        return providers
    out = []
    for index, item in enumerate(providers):
        if not isinstance(item, dict):
            out.append(item)
            continue
        name = item.get("name", f"#{index}")
        if item.get("type") != "proxmox":
            notes.append(Note(f"a provider of type {item.get('type')!r}: Keel runs runners on Proxmox VE "
                              f"clusters only, and leaves it out of every scale set", None,
                              f"providers[{name}]"))
            continue
        provider = dict(item)
        at = f"runners.providers[{len(out)}]"
        _secret(provider, "token_secret", "token_secret_path", f"{name}-token-secret",
                f"provider {name}'s API token secret", at, f"providers[{name}]", notes)
        _ca_file(provider, f"{name}-ca.pem", f"provider {name}'s CA", at, notes)
        if provider.get("url"):
            notes.append(Note(f"If {provider['url']} is the cluster Keel runs on, delete url, token_id, "
                              f"token_secret_path and tls: Keel then uses its own API token (the "
                              f"proxmox: section), which needs the privileges docs/runners.md lists.",
                              f"{at}.url"))
        runner = dict(provider.get("runner") or {})
        if "jit_path" not in runner:
            runner["jit_path"] = RUNGAR_JIT_PATH
            notes.append(Note("Rungar's default, which a Rungar template reads; Keel's own default is "
                              "/run/keel/jitconfig.", f"{at}.runner.jit_path"))
        provider["runner"] = runner
        out.append(provider)
    return out


def _scale_sets(scale_sets: Any, kept: Any, original: Any, notes: list[Note]) -> Any:
    if not isinstance(scale_sets, list):
        return scale_sets
    kept_names = {p.get("name") for p in kept if isinstance(p, dict)} if isinstance(kept, list) else set()
    known = {p.get("name") for p in original if isinstance(p, dict)} if isinstance(original, list) else set()
    out = []
    for item in scale_sets:
        if not isinstance(item, dict):
            out.append(item)
            continue
        scale_set = dict(item)
        providers = scale_set.get("providers")
        if isinstance(providers, list):
            left = []
            for entry in providers:
                name = entry.get("name") if isinstance(entry, dict) else entry
                if name in kept_names or name not in known:
                    left.append(entry)
                else:
                    notes.append(Note(f"its provider {name!r} is not a Proxmox VE cluster", None,
                                      f"scale_sets[{scale_set.get('name')}].providers"))
            if providers and not left:
                notes.append(Note("every provider it had is one Keel does not run runners on; the scale "
                                  "set is left out", None, f"scale_sets[{scale_set.get('name')}]"))
                continue
            scale_set["providers"] = left
        out.append(scale_set)
    return out


def _events(events: Any, notes: list[Note]) -> Any:
    if not isinstance(events, dict):
        return events
    out = dict(events)
    if "file" in out:
        notes.append(Note(f"Keel keeps its events in its database; `keel runners events` shows them "
                          f"(Rungar wrote them to {out.pop('file')})", None, "events.file"))
    return out


# -- rendering ---------------------------------------------------------------------------


def render(config: dict[str, Any], notes: list[Note]) -> str:
    """The converted config as YAML in block style, each note as a comment above its key."""
    lines: list[str] = []
    for note in notes:
        if note.at == "":
            lines.extend(_comment(note.text, ""))
    by_key: dict[str, list[str]] = {}
    for note in notes:
        if note.at:
            by_key.setdefault(note.at, []).append(note.text)
    lines.append("")
    _mapping(lines, config, "", "", None, by_key)
    dropped = [n for n in notes if n.at is None]
    if dropped:
        lines.append("")
        lines.append("# Not carried over from Rungar:")
        for note in dropped:
            lines.extend(_comment(f"{note.source}: {note.text}", "", bullet="  - "))
    return "\n".join(lines) + "\n"


def _mapping(lines: list[str], mapping: dict[str, Any], path: str, indent: str, first: str | None,
             notes: dict[str, list[str]]) -> None:
    for index, (key, value) in enumerate(mapping.items()):
        prefix = first if (index == 0 and first is not None) else indent
        sub = f"{path}.{key}" if path else str(key)
        for text in notes.get(sub, ()):
            lines.extend(_comment(text, prefix if index or first is None else indent[:-2]))
        if isinstance(value, dict) and value and not _flat(value, sub, notes, len(prefix) + len(str(key))):
            lines.append(f"{prefix}{_scalar(key)}:")
            _mapping(lines, value, sub, indent + "  ", None, notes)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value) and \
                not _flat(value, sub, notes, len(prefix) + len(str(key))):
            lines.append(f"{prefix}{_scalar(key)}:")
            for n, item in enumerate(value):
                for text in notes.get(f"{sub}[{n}]", ()):
                    lines.extend(_comment(text, indent + "  "))
                if isinstance(item, dict) and item:
                    _mapping(lines, item, f"{sub}[{n}]", indent + "    ", indent + "  - ", notes)
                else:
                    lines.append(f"{indent}  - {_scalar(item)}")
        else:
            lines.append(f"{prefix}{_scalar(key)}: {_scalar(value)}")


def _flat(value: Any, path: str, notes: dict[str, list[str]], used: int) -> bool:
    """Small enough to write in flow style (``{cores: 2, memory: 4GiB}``), with no notes inside."""
    if any(key.startswith(path + ".") or key.startswith(path + "[") for key in notes):
        return False
    return used + len(_scalar(value)) <= FLOW_WIDTH


def _scalar(value: Any) -> str:
    """One value in flow style, keys in the order written, quoted where YAML needs it."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return text.removesuffix("\n...\n").strip()


def import_file(path: str | Path) -> str:
    """Read a Rungar config file and return Keel's ``runners:`` section as commented YAML."""
    from keel import config as cfg

    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise InvalidError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidError(f"{path}: not a text file, not a Rungar config") from None
    config, notes = convert(text, str(path))
    output = render(config, notes)
    cfg.parse(yaml.safe_load(output), f"the config converted from {path}")
    return output
