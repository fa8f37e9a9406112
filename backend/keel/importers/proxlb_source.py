"""ProxLB's config, either format, read into one shape: settings under their YAML names.

* the INI ``/etc/proxlb/proxlb.conf`` of ProxLB 0.9 to 1.0.6: ``[proxmox]`` with
  ``api_host``/``api_user``/``api_pass``/``verify_ssl``, then ``[balancing]`` (up to 1.0.2)
  or ``[vm_balancing]`` (1.0.3 on), ``[service]``, and from 1.0.3 ``[storage_balancing]``,
  ``[update_service]``, ``[api]``;
* the YAML ``/etc/proxlb/proxlb.yaml`` of ProxLB 1.1.x and 2.x: ``proxmox_api``,
  ``proxmox_cluster``, ``balancing``, ``service``, ``solver``.

``read(text, path)`` tells them apart by their look and returns a ``Source``: the values
under YAML names (``balancing.balanciness`` also for ``[vm_balancing] balanciness``), how
the file spells each key (for messages), and ProxLB's defaults for that format, which
differ between its versions.  Type checks collect every problem with the key's name.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from keel.errors import InvalidError
from keel.importers.commented import Note
from keel.validate import Problems

YAML_SECTIONS = ("proxmox_api", "proxmox_cluster", "balancing", "service", "solver")
_INI_HEADER = re.compile(r"^\s*\[([A-Za-z_][A-Za-z0-9_]*)\]\s*$")
_TRUE = ("1", "yes", "true", "on", "enable")
_FALSE = ("0", "no", "false", "off", "disable")


def read(text: str, path: str) -> "Source":
    """The settings of a ProxLB config; InvalidError naming ``path`` if it is none."""
    if not text.strip():
        raise InvalidError(f"{path}: is empty, not a ProxLB config")
    return _read_ini(text, path) if _looks_like_ini(text) else _read_yaml(text, path)


@dataclass
class Source:
    """ProxLB's settings under their YAML names (``balancing.balanciness``), whatever the format."""

    path: str
    kind: str                                   # "ini" or "yaml"
    layout: str = ""                            # "ProxLB 2.x YAML", ...
    problems: Problems = field(init=False)
    values: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)   # name -> as written in the file
    defaults: dict[str, Any] = field(default_factory=dict)  # ProxLB's defaults for this format
    dropped: list[Note] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.problems = Problems(self.path)

    def put(self, name: str, value: Any, label: str) -> None:
        self.values[name] = value
        self.labels[name] = label

    def has(self, name: str) -> bool:
        return name in self.values and self.values[name] is not None

    def given(self, name: str) -> bool:
        """The file sets it (rather than ProxLB's default applying)."""
        return name in self.labels

    def label(self, name: str) -> str:
        return self.labels.get(name, name)

    def key(self, name: str) -> str:
        """The bare key as the file spells it: ``parallel_migrations`` for ``[vm_balancing] ...``."""
        return self.label(name).split()[-1].rsplit(".", 1)[-1]

    def raw(self, name: str) -> Any:
        return self.values.get(name, self.defaults.get(name))

    def drop(self, name: str, text: str) -> None:
        self.dropped.append(Note(text, None, self.label(name)))

    def _typed(self, name: str, convert: Any, expected: str) -> Any:
        value = self.raw(name)
        if value is None:
            return None
        result = convert(value)
        if result is None:
            self.problems.add(self.label(name), f"expected {expected}, got {_shown(name, value)}")
        return result

    def bool(self, name: str) -> bool | None:
        return self._typed(name, as_bool, "true or false (or 1/0)")

    def number(self, name: str) -> float | None:
        return self._typed(name, as_number, "a number")

    def list(self, name: str) -> list[str] | None:
        return self._typed(name, as_list, "a list (or a comma-separated string)")

    def str(self, name: str) -> str | None:
        return self._typed(name, lambda v: v if isinstance(v, str) else None, "a string")

    def choice(self, name: str, options: tuple[str, ...]) -> str | None:
        value = self.str(name)
        if value is not None and value.lower() not in options:
            self.problems.add(self.label(name), f"must be one of {', '.join(options)}, got {value!r}")
            return None
        return value.lower() if value is not None else None

    def mapping(self, name: str) -> dict[str, Any] | None:
        return self._typed(name, lambda v: v if isinstance(v, dict) else None, "a mapping")


def _shown(name: str, value: Any) -> str:
    """A value for an error message; never the value of a secret."""
    if name.rsplit(".", 1)[-1] in ("pass", "token_secret"):
        return f"a {type(value).__name__}"
    return repr(value)


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    return None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return int(number) if number.is_integer() else number
    return None


def as_list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                       for v in value):
        return [str(v) for v in value]
    return None


def _looks_like_ini(text: str) -> bool:
    """The first line that is not blank or a comment is a ``[section]`` header."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        return bool(_INI_HEADER.match(line))
    return False


def _read_ini(text: str, path: str) -> Source:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=path)
    except configparser.Error as err:
        first = str(err).splitlines()[0]
        raise InvalidError(f"{path}: not a readable INI file (ProxLB's proxlb.conf): {first}") from None
    sections = set(parser.sections())
    balancing = "vm_balancing" if "vm_balancing" in sections else "balancing"
    if "proxmox" not in sections and balancing not in sections:
        raise InvalidError(f"{path}: not a ProxLB config: an INI file needs a [proxmox] and a "
                           f"[balancing] or [vm_balancing] section, found "
                           f"{', '.join(f'[{s}]' for s in sorted(sections)) or 'no sections'}")
    src = Source(path, "ini")
    src.layout = ("ProxLB 1.0.3-1.0.6 INI proxlb.conf" if balancing == "vm_balancing"
                  else "ProxLB 0.9-1.0.2 INI proxlb.conf")
    # ProxLB 1.0's defaults (its config reader's .get fallbacks); it always balanced.
    src.defaults = {"balancing.enable": True, "balancing.method": "memory", "balancing.mode": "used",
                    "balancing.balance_types": "vm", "balancing.balanciness": 10,
                    "balancing.parallel": True, "service.daemon": True,
                    "service.schedule": {"interval": 24, "format": "hours"}}

    names = {
        "proxmox": {"api_host": "proxmox_api.hosts", "api_user": "proxmox_api.user",
                    "api_pass": "proxmox_api.pass", "verify_ssl": "proxmox_api.ssl_verification",
                    "timeout": "proxmox_api.timeout"},
        balancing: {"enable": "balancing.enable", "method": "balancing.method", "mode": "balancing.mode",
                    "mode_option": "ini.mode_option", "type": "balancing.balance_types",
                    "balanciness": "balancing.balanciness", "parallel_migrations": "balancing.parallel",
                    "maintenance_nodes": "proxmox_cluster.maintenance_nodes",
                    "ignore_nodes": "proxmox_cluster.ignore_nodes", "ignore_vms": "balancing.ignore_guests",
                    "enforce_affinity_groups": "balancing.enforce_affinity"},
        "service": {"daemon": "service.daemon", "schedule": "service.schedule",
                    "master_only": "service.enable_ha", "log_verbosity": "service.log_level",
                    "config_version": "ini.config_version"},
    }
    for section in parser.sections():
        for key, value in parser.items(section):
            label = f"[{section}] {key}"
            name = names.get(section, {}).get(key)
            if name is not None:
                src.put(name, value, label)
            elif section in ("storage_balancing", "update_service", "api"):
                src.put(f"ini.{section}.{key}", value, label)
            else:
                src.dropped.append(Note("not a ProxLB setting (ProxLB ignored it too)", None, label))
    for section in sorted(sections - set(names) - {"storage_balancing", "update_service", "api"}):
        if not parser.items(section):
            src.dropped.append(Note("not a ProxLB section (ProxLB ignored it too)", None, f"[{section}]"))

    # The INI's type: vm | ct | all, as balance_types.
    kind = src.str("balancing.balance_types")
    if kind is not None:
        types = {"vm": ["vm"], "ct": ["ct"], "all": ["vm", "ct"]}.get(kind.strip().lower())
        if types is None:
            src.problems.add(src.label("balancing.balance_types"), f"must be vm, ct or all, got {kind!r}")
        src.values["balancing.balance_types"] = types
    if src.has("service.schedule"):
        hours = src.number("service.schedule")
        src.values["service.schedule"] = {"interval": hours, "format": "hours"} if hours is not None else None
    return src


def _read_yaml(text: str, path: str) -> Source:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InvalidError(f"{path}: not valid YAML{line}: {problem}") from None
    if data is None:
        raise InvalidError(f"{path}: is empty, not a ProxLB config")
    if not isinstance(data, dict):
        raise InvalidError(f"{path}: not a ProxLB config: expected a YAML mapping with "
                           f"{', '.join(YAML_SECTIONS)}, got a {type(data).__name__}")
    if "proxmox" in data and "proxmox_api" not in data:
        raise InvalidError(f"{path}: this is a Keel config already (it has a proxmox: section), "
                           f"not a ProxLB one")
    found = [s for s in YAML_SECTIONS if s in data]
    if not found or found == ["balancing"] and not _proxlb_balancing(data["balancing"]):
        raise InvalidError(f"{path}: not a ProxLB config: none of its sections "
                           f"({', '.join(YAML_SECTIONS)}) is there; found "
                           f"{', '.join(map(str, data)) or 'nothing'}")
    src = Source(path, "yaml")
    # ProxLB 2.x's model defaults (1.1.x reads the same keys with the same fallbacks).
    src.defaults = {"balancing.enable": False, "balancing.method": "memory", "balancing.mode": "used",
                    "balancing.balance_types": [], "balancing.balanciness": 10,
                    "balancing.parallel": False, "balancing.parallel_jobs": 5,
                    "balancing.with_local_disks": True, "service.daemon": True,
                    "service.schedule": {"interval": 12, "format": "hours"}}
    for key, value in data.items():
        if key not in YAML_SECTIONS:
            src.dropped.append(Note("not a ProxLB section (ProxLB ignored it too)", None, str(key)))
            continue
        if key == "solver":
            src.put("solver", value, "solver")
            continue
        if value is None:
            continue
        if not isinstance(value, dict):
            src.problems.add(str(key), f"expected a mapping, got {type(value).__name__}")
            continue
        for sub, item in value.items():
            src.put(f"{key}.{sub}", item, f"{key}.{sub}")
    two = {"proxmox_cluster.maintenance_nodes_schedule", "service.enable_ha", "balancing.ignore_guests",
           "balancing.cpu_overcommit", "balancing.max_node_inflow", "solver"}
    src.layout = ("ProxLB 2.x YAML proxlb.yaml" if two & set(src.values)
                  else "ProxLB 1.1.x/2.x YAML proxlb.yaml")
    schedule = src.raw("service.schedule")
    if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
        src.values["service.schedule"] = {"interval": schedule, "format": "hours"}   # 1.1.0: hours
    return src


def _proxlb_balancing(section: Any) -> bool:
    known = {"balanciness", "balance_types", "method", "memory_threshold", "cpu_threshold",
             "parallel_jobs", "node_resource_reserve", "enforce_affinity", "enforce_pinning"}
    return isinstance(section, dict) and bool(known & set(section))
