"""A scenario's ``cluster_options``: datacenter.cfg, each key checked against what PVE's
``PUT /cluster/options`` accepts (its schema), property strings turned into mappings."""

from __future__ import annotations

import functools
from typing import Any

from keel.sim.schema import Schema, check_value, parse_property_string
from keel.validate import Problems


@functools.lru_cache(maxsize=1)
def _option_specs() -> dict[str, Any]:
    return Schema.load().endpoint("PUT", "/cluster/options").properties


def read_options(raw: Any, problems: Problems) -> dict[str, Any]:
    """The options as ``GET /cluster/options`` returns them; each bad one is a problem at
    ``cluster_options.<key>``.  A property string may be written as a mapping, with
    ``true``/``false`` for 1/0."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("cluster_options", f"expected a mapping, got {type(raw).__name__}")
        return {}
    specs = _option_specs()
    options: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"cluster_options.{key}"
        spec = specs.get(key)
        if spec is None or key == "delete":
            problems.add(path, "not a datacenter.cfg option")
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}={_flag(v)}" for k, v in value.items())
        try:
            if isinstance(spec.get("format"), dict):
                options[key] = parse_property_string(spec["format"], str(value))
            else:
                options[key] = check_value(spec, _flag(value))
        except ValueError as err:
            problems.add(path, str(err))
    return options


def _flag(value: Any) -> Any:
    if value is True:
        return 1
    if value is False:
        return 0
    return value
