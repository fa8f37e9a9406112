"""The Proxmox VE API schema: routing and parameter checks as pve-http-server does them.

The schema is the API viewer's (``data/pve-api-9.1.json.gz``, made by
``tools/trim-pve-schema``).  ``Schema.resolve`` finds the endpoint for a method and
path (501 when PVE has none), and ``Endpoint.check_params`` turns the raw query or form
values into typed values, or raises PVE's ``400 Parameter verification failed.`` with
one message per bad parameter.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from keel.sim.errors import ApiError, param_error

SCHEMA_FILE = Path(__file__).parent / "data" / "pve-api-9.1.json.gz"

_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}
_INT_RE = re.compile(r"^[+-]?\d+$")
_NUM_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

# Formats PVE checks by name (pve-common JSONSchema.pm); the rest are accepted as strings.
_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "pve-node": (re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?)$"),
                 "value does not look like a valid node name"),
    "pve-configid": (re.compile(r"^[a-z][a-z0-9_-]+$", re.IGNORECASE),
                     "invalid configuration ID '{value}'"),
    "pve-storage-id": (re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE),
                       "storage ID '{value}' contains illegal characters"),
    "pve-poolid": (re.compile(r"^[A-Za-z0-9_\-]+$"), "invalid pool ID '{value}'"),
    "pve-userid": (re.compile(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+$"), "invalid user ID '{value}'"),
    "pve-tokenid": (re.compile(r"^[A-Za-z][A-Za-z0-9.\-_]+$"), "invalid token ID '{value}'"),
    "pve-ha-resource-or-vm-id": (re.compile(r"^(?:(?:vm|ct):)?\d+$"),
                                 "value does not look like a valid ha resource id"),
    "pve-ha-resource-id": (re.compile(r"^(?:vm|ct):\d+$"),
                           "value does not look like a valid ha resource id"),
    "dns-name": (re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?\.)*"
                            r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?$"),
                 "value does not look like a valid DNS name"),
    "CIDR": (re.compile(r"^[0-9a-fA-F.:]+/\d{1,3}$"), "value does not look like a valid CIDR network"),
    # pve-common: an EUI-48 address without the I/G (multicast) bit; interface names; IPv4.
    "mac-addr": (re.compile(r"^[0-9a-f][02468ace](?::[0-9a-f]{2}){5}$", re.IGNORECASE),
                 "value does not look like a valid unicast MAC address"),
    "pve-iface": (re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{1,20}([:.]\d+)?$"),
                  "invalid network interface name"),
    "ipv4": (re.compile(r"^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$"),
             "value does not look like a valid IPv4 address"),
}
_TAG_RE = re.compile(r"^[a-z0-9_][a-z0-9_\-+.]*$", re.IGNORECASE)
_LIST_FORMATS = {"pve-configid-list": "pve-configid", "pve-vmid-list": None,
                 "pve-storage-id-list": "pve-storage-id", "pve-node-list": "pve-node"}


@dataclass
class Endpoint:
    """One method of one schema path, e.g. ``POST /nodes/{node}/qemu/{vmid}/migrate``."""

    method: str
    path: str
    info: dict[str, Any]

    @property
    def name(self) -> str:
        return self.info.get("name", "")

    @property
    def properties(self) -> dict[str, Any]:
        return self.info.get("parameters", {}).get("properties", {}) or {}

    @property
    def permissions(self) -> dict[str, Any]:
        return self.info.get("permissions", {}) or {}

    @property
    def proxy_to_node(self) -> bool:
        return self.info.get("proxyto") == "node"

    @property
    def allow_token(self) -> bool:
        return bool(self.info.get("allowtoken", 1))

    @property
    def returns(self) -> dict[str, Any]:
        return self.info.get("returns", {}) or {}

    def check_params(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Typed parameters from raw strings (or JSON values); 400 naming each bad one."""
        props = self.properties
        additional = self.info.get("parameters", {}).get("additionalProperties", 1)
        errors: dict[str, str] = {}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            spec = props.get(key) or _indexed_spec(props, key)
            if spec is None:
                if additional in (0, "0", False):
                    errors[key] = ("property is not defined in schema and the schema does not "
                                   "allow additional properties")
                else:
                    values[key] = value
                continue
            try:
                values[key] = check_value(spec, value)
            except ValueError as err:
                errors[key] = str(err)
        for key, spec in props.items():
            if key not in raw and not spec.get("optional") and "[n]" not in key:
                errors[key] = "property is missing and it is not optional"
        if errors:
            raise param_error(errors)
        return values


def _indexed_spec(props: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``scsi3`` is described by the ``scsi[n]`` property."""
    match = re.match(r"^([a-z_\-]+?)(\d+)$", key)
    if not match:
        return None
    return props.get(f"{match.group(1)}[n]")


def check_value(spec: dict[str, Any], value: Any) -> Any:
    """One value against one property spec; raise ValueError with PVE's wording."""
    kind = spec.get("type", "string")
    if kind == "array":
        items = value if isinstance(value, list) else [value]
        item_spec = spec.get("items", {"type": "string"})
        return [check_value(item_spec, item) for item in items]
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"type check ('{kind}') failed - got multiple values")
        value = value[0]
    if kind == "boolean":
        text = str(value).lower() if not isinstance(value, bool) else ("1" if value else "0")
        if text in _BOOL_TRUE:
            return 1
        if text in _BOOL_FALSE:
            return 0
        raise ValueError(f"type check ('boolean') failed - got '{value}'")
    if kind == "integer":
        text = str(value)
        if isinstance(value, bool) or not _INT_RE.match(text):
            raise ValueError(f"type check ('integer') failed - got '{value}'")
        number: float = int(text)
        _check_range(spec, number)
        return number
    if kind == "number":
        text = str(value)
        if isinstance(value, bool) or not _NUM_RE.match(text):
            raise ValueError(f"type check ('number') failed - got '{value}'")
        number = float(text)
        _check_range(spec, number)
        return number
    if kind in ("object", "null", "any"):
        return value
    text = value if isinstance(value, str) else str(value)
    if "maxLength" in spec and len(text) > int(spec["maxLength"]):
        raise ValueError(f"value may only be {spec['maxLength']} characters long")
    if "minLength" in spec and len(text) < int(spec["minLength"]):
        raise ValueError(f"value must be at least {spec['minLength']} characters long")
    if "enum" in spec and text not in spec["enum"]:
        raise ValueError(f"value '{text}' does not have a value in the enumeration "
                         f"'{', '.join(spec['enum'])}'")
    if "pattern" in spec and not perl_regex(spec["pattern"]).fullmatch(text):
        raise ValueError("value does not match the regex pattern")
    fmt = spec.get("format")
    if isinstance(fmt, str):
        _check_format(fmt, text)
    elif isinstance(fmt, dict):
        parse_property_string(fmt, text)
    return text


@functools.lru_cache(maxsize=None)
def perl_regex(pattern: str) -> re.Pattern[str]:
    """A schema pattern (Perl syntax, as the API viewer dumps it) compiled for Python.

    Perl writes embedded compiled patterns as ``(?^:...)`` or ``(?^i:...)``; Python spells
    those ``(?:...)`` and ``(?i:...)``.
    """
    return re.compile(re.sub(r"\(\?\^([a-z]*):", lambda m: f"(?{m.group(1)}:", pattern))


def _check_range(spec: dict[str, Any], number: float) -> None:
    if "minimum" in spec and number < float(spec["minimum"]):
        raise ValueError(f"value must have a minimum value of {spec['minimum']}")
    if "maximum" in spec and number > float(spec["maximum"]):
        raise ValueError(f"value must have a maximum value of {spec['maximum']}")


def _check_format(fmt: str, text: str) -> None:
    if fmt in _FORMATS:
        pattern, message = _FORMATS[fmt]
        if not pattern.match(text):
            raise ValueError(f"invalid format - {message.format(value=text)}")
    elif fmt == "pve-tag-list":
        for tag in split_list(text, r"[;, ]"):
            if not _TAG_RE.match(tag):
                raise ValueError(f"invalid format - invalid tag '{tag}'")
    elif fmt in _LIST_FORMATS:
        inner = _LIST_FORMATS[fmt]
        for item in split_list(text, r"[,;\s]"):
            if inner is None:
                if not item.isdigit():
                    raise ValueError(f"invalid format - value '{item}' does not look like a valid VMID")
            else:
                _check_format(inner, item)


def split_list(text: str, separators: str) -> list[str]:
    return [part for part in re.split(separators, text) if part]


def parse_property_string(fmt: dict[str, Any], text: str) -> dict[str, Any]:
    """``ha=static,ha-rebalance-on-start=1`` → ``{'ha': 'static', ...}`` checked against fmt."""
    default_key = next((key for key, spec in fmt.items() if spec.get("default_key")), None)
    result: dict[str, Any] = {}
    for part in (p for p in text.split(",") if p != ""):
        if "=" in part:
            key, value = part.split("=", 1)
        elif default_key is not None and default_key not in result:
            key, value = default_key, part
        else:
            raise ValueError(f"invalid format - missing key in comma-separated list property")
        spec = fmt.get(key)
        if spec is None:
            alias = next((k for k, s in fmt.items() if s.get("alias") == key), None)
            spec = fmt.get(alias) if alias else None
        if spec is None:
            raise ValueError(f"invalid format - property '{key}' is not defined in schema")
        if key in result:
            raise ValueError(f"invalid format - duplicate key in comma-separated list property: {key}")
        try:
            result[key] = check_value({k: v for k, v in spec.items() if k != "format"}
                                      if isinstance(spec.get("format"), dict) else spec, value)
        except ValueError as err:
            raise ValueError(f"invalid format - {key}: {err}") from None
    for key in result:
        required = fmt[key].get("requires") if key in fmt else None
        if isinstance(required, str) and required not in result:
            raise ValueError(f"invalid format - {required}: missing property required by '{key}'")
    return result


@dataclass
class _PathNode:
    literal: dict[str, "_PathNode"] = field(default_factory=dict)
    variable: tuple[str, "_PathNode"] | None = None
    path: str | None = None
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)


class Schema:
    """The API tree, indexed for routing."""

    def __init__(self, tree: list[dict[str, Any]]):
        self._root = _PathNode()
        self.paths: dict[str, dict[str, dict[str, Any]]] = {}
        for top in tree:
            self._add(top)

    @classmethod
    def load(cls, file: Path = SCHEMA_FILE) -> "Schema":
        return cls(json.loads(gzip.decompress(file.read_bytes())))

    def _add(self, node: dict[str, Any]) -> None:
        path = node["path"]
        self.paths[path] = node.get("info", {})
        cursor = self._root
        for part in path.strip("/").split("/"):
            if part.startswith("{") and part.endswith("}"):
                if cursor.variable is None:
                    cursor.variable = (part[1:-1], _PathNode())
                cursor = cursor.variable[1]
            else:
                cursor = cursor.literal.setdefault(part, _PathNode())
        cursor.path = path
        cursor.methods = node.get("info", {})
        for child in node.get("children", []) or []:
            self._add(child)

    def endpoints(self) -> Iterable[Endpoint]:
        for path, methods in sorted(self.paths.items()):
            for method, info in sorted(methods.items()):
                yield Endpoint(method, path, info)

    def endpoint(self, method: str, path: str) -> Endpoint:
        return Endpoint(method, path, self.paths[path][method])

    def resolve(self, method: str, url_path: str) -> tuple[Endpoint, dict[str, str]]:
        """The endpoint and path parameters for ``GET /nodes/pve1/qemu``; 501 if none."""
        parts = [p for p in url_path.strip("/").split("/") if p]
        found = self._match(self._root, parts, {})
        if found is None or method not in found[0].methods:
            raise ApiError(501, f"Method '{method} /{'/'.join(parts)}' not implemented")
        node, params = found
        assert node.path is not None
        return Endpoint(method, node.path, node.methods[method]), params

    def _match(self, node: _PathNode, parts: list[str], params: dict[str, str]
               ) -> tuple[_PathNode, dict[str, str]] | None:
        if not parts:
            return (node, params) if node.path is not None else None
        head, rest = parts[0], parts[1:]
        if head in node.literal:
            found = self._match(node.literal[head], rest, params)
            if found is not None:
                return found
        if node.variable is not None:
            name, child = node.variable
            return self._match(child, rest, {**params, name: head})
        return None
