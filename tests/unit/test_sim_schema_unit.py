"""keel.sim.schema without a server: routing, parameter checks, property strings."""

from __future__ import annotations

import pytest

from keel.sim.errors import ApiError
from keel.sim.schema import Schema, check_value, parse_property_string, perl_regex

SCHEMA = Schema.load()
CRS = SCHEMA.endpoint("PUT", "/cluster/options").properties["crs"]["format"]


# -- routing -------------------------------------------------------------------------


@pytest.mark.parametrize("method, url, path, params", [
    ("GET", "/nodes/pve1/qemu/100/config", "/nodes/{node}/qemu/{vmid}/config",
     {"node": "pve1", "vmid": "100"}),
    ("GET", "/nodes/pve1/tasks/UPID:pve1:1:2:3:qmstart:100:root@pam:/status",
     "/nodes/{node}/tasks/{upid}/status", {"node": "pve1", "upid": "UPID:pve1:1:2:3:qmstart:100:root@pam:"}),
    ("POST", "/cluster/ha/resources/vm:100/migrate", "/cluster/ha/resources/{sid}/migrate",
     {"sid": "vm:100"}),
    ("GET", "/version", "/version", {}),
    ("GET", "/nodes/pve1/", "/nodes/{node}", {"node": "pve1"}),
])
def test_resolve_finds_the_schema_path_and_path_parameters(method, url, path, params):
    endpoint, found = SCHEMA.resolve(method, url)
    assert (endpoint.path, endpoint.method, found) == (path, method, params)


def test_resolve_prefers_a_literal_segment_over_a_variable():
    endpoint, params = SCHEMA.resolve("GET", "/cluster/ha/status/current")
    assert endpoint.path == "/cluster/ha/status/current" and params == {}


@pytest.mark.parametrize("method, url", [
    ("GET", "/nodes/pve1/frobnicate"),
    ("PATCH", "/version"),
    ("GET", "/nodes/pve1/qemu/100/config/extra"),
])
def test_resolve_unknown_path_or_method_is_501(method, url):
    with pytest.raises(ApiError) as err:
        SCHEMA.resolve(method, url)
    assert err.value.status == 501
    assert err.value.message == f"Method '{method} {url}' not implemented"


def test_endpoint_knows_proxying_tokens_and_permissions():
    migrate = SCHEMA.endpoint("POST", "/nodes/{node}/qemu/{vmid}/migrate")
    assert migrate.proxy_to_node and migrate.allow_token
    assert migrate.permissions == {"check": ["perm", "/vms/{vmid}", ["VM.Migrate"]]}
    assert not SCHEMA.endpoint("POST", "/access/ticket").allow_token
    assert not SCHEMA.endpoint("GET", "/cluster/resources").proxy_to_node


# -- parameters ------------------------------------------------------------------------


def check(method: str, path: str, raw: dict) -> dict:
    return SCHEMA.endpoint(method, path).check_params(raw)


@pytest.mark.parametrize("raw, typed", [
    ({"node": "pve1", "vmid": "100", "target": "pve2", "online": "1"},
     {"node": "pve1", "vmid": 100, "target": "pve2", "online": 1}),
    ({"node": "pve1", "vmid": "100", "target": "pve2", "online": "true", "bwlimit": "1000"},
     {"node": "pve1", "vmid": 100, "target": "pve2", "online": 1, "bwlimit": 1000}),
    ({"node": "pve1", "vmid": 100, "target": "pve2", "with-local-disks": False},
     {"node": "pve1", "vmid": 100, "target": "pve2", "with-local-disks": 0}),
])
def test_check_params_types_values(raw, typed):
    assert check("POST", "/nodes/{node}/qemu/{vmid}/migrate", raw) == typed


@pytest.mark.parametrize("raw, errors", [
    ({"node": "pve1", "vmid": "100"}, {"target": "property is missing and it is not optional"}),
    ({"node": "pve1", "vmid": "abc", "target": "pve2"}, {"vmid": "type check ('integer') failed - got 'abc'"}),
    ({"node": "pve1", "vmid": "100", "target": "pve2", "online": "maybe"},
     {"online": "type check ('boolean') failed - got 'maybe'"}),
    ({"node": "pve1", "vmid": "100", "target": "pve2", "colour": "blue"},
     {"colour": "property is not defined in schema and the schema does not allow additional properties"}),
    ({"node": "bad_node!", "vmid": "100", "target": "pve2"},
     {"node": "invalid format - value does not look like a valid node name"}),
    ({"node": "pve1", "vmid": "99", "target": "pve2"}, {"vmid": "value must have a minimum value of 100"}),
])
def test_check_params_names_every_bad_parameter(raw, errors):
    with pytest.raises(ApiError) as err:
        check("POST", "/nodes/{node}/qemu/{vmid}/migrate", raw)
    assert err.value.status == 400
    assert err.value.message == "Parameter verification failed."
    assert err.value.errors == errors


def test_check_params_reports_all_problems_at_once():
    with pytest.raises(ApiError) as err:
        check("POST", "/nodes/{node}/qemu/{vmid}/migrate", {"node": "pve1", "vmid": "x", "online": "y"})
    assert set(err.value.errors) == {"vmid", "online", "target"}


def test_indexed_config_keys_use_the_n_property():
    typed = check("PUT", "/nodes/{node}/qemu/{vmid}/config",
                  {"node": "pve1", "vmid": "100", "net3": "virtio,bridge=vmbr0", "scsi12": "ceph:1"})
    assert typed["net3"] == "virtio,bridge=vmbr0" and typed["scsi12"] == "ceph:1"


def test_enum_message_lists_the_choices():
    with pytest.raises(ValueError, match="does not have a value in the enumeration 'vm, storage, node, sdn'"):
        check_value(SCHEMA.endpoint("GET", "/cluster/resources").properties["type"], "vms")


@pytest.mark.parametrize("value, ok", [("web;db", True), ("web,db prod", True), ("bad tag!", False)])
def test_tag_list_format(value, ok):
    spec = SCHEMA.endpoint("PUT", "/nodes/{node}/qemu/{vmid}/config").properties["tags"]
    if ok:
        assert check_value(spec, value) == value
    else:
        with pytest.raises(ValueError, match="invalid tag"):
            check_value(spec, value)


@pytest.mark.parametrize("fmt_value, ok", [("Ab", True), ("ab-c_1", True), ("a", False), ("1ab", False)])
def test_configid_format_is_case_insensitive_and_two_chars_long(fmt_value, ok):
    spec = {"type": "string", "format": "pve-configid"}
    if ok:
        assert check_value(spec, fmt_value) == fmt_value
    else:
        with pytest.raises(ValueError, match="invalid configuration ID"):
            check_value(spec, fmt_value)


# -- property strings ------------------------------------------------------------------


@pytest.mark.parametrize("text, parsed", [
    ("ha=static", {"ha": "static"}),
    ("ha=static,ha-auto-rebalance=1", {"ha": "static", "ha-auto-rebalance": 1}),
    ("ha-auto-rebalance=yes,ha-auto-rebalance-threshold=25", {"ha-auto-rebalance": 1,
                                                               "ha-auto-rebalance-threshold": 25.0}),
    ("", {}),
])
def test_property_string_parses_into_typed_values(text, parsed):
    assert parse_property_string(CRS, text) == parsed


@pytest.mark.parametrize("text, message", [
    ("ha=fancy", "ha: value 'fancy' does not have a value in the enumeration"),
    ("colour=blue", "property 'colour' is not defined in schema"),
    ("ha=basic,ha=static", "duplicate key in comma-separated list property: ha"),
    ("static", "missing key in comma-separated list property"),
    ("ha-auto-rebalance-threshold=20", "missing property required by 'ha-auto-rebalance-threshold'"),
])
def test_property_string_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_property_string(CRS, text)


def test_property_string_default_key():
    fmt = SCHEMA.endpoint("PUT", "/nodes/{node}/qemu/{vmid}/config").properties["agent"]["format"]
    assert parse_property_string(fmt, "1,fstrim_cloned_disks=1") == {"enabled": 1, "fstrim_cloned_disks": 1}


# -- Perl patterns -----------------------------------------------------------------------


@pytest.mark.parametrize("pattern, text, matches", [
    (r"(?^:[a-z]+)", "abc", True),
    (r"(?^i:[a-z]+)", "ABC", True),
    (r"(?^:[a-z]+)", "ABC", False),
    (r"(?:(?^i:[a-z0-9_][a-z0-9_\-\+\.]*):[0-9a-fA-F]{6})", "Web:FF0000", True),
])
def test_perl_embedded_patterns_compile_for_python(pattern, text, matches):
    assert bool(perl_regex(pattern).fullmatch(text)) is matches


def test_every_schema_pattern_compiles():
    def patterns(spec):
        if isinstance(spec, dict):
            if isinstance(spec.get("pattern"), str):
                yield spec["pattern"]
            for value in spec.values():
                yield from patterns(value)
        elif isinstance(spec, list):
            for value in spec:
                yield from patterns(value)
    found = [p for e in SCHEMA.endpoints() for p in patterns(e.info.get("parameters", {}))]
    assert len(found) > 20
    for pattern in found:
        perl_regex(pattern)
