"""Fuzzing the local API through keel-web (real processes, the simulator behind): every
path and method of the OpenAPI document, with generated query strings, path parameters
and bodies, valid and not.  No answer may be a 500, every answer must be JSON in PVE's
envelope (or Prometheus text), and no answer may hold a secret."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import DEMO_TOKEN
from keel.engine.openapi import SPEC
from service_helpers import node_stack

SECRET = DEMO_TOKEN.split("=", 1)[1]
AUTH = {"Authorization": f"PVEAPIToken={DEMO_TOKEN}"}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
                    st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=12)
keys = st.sampled_from(["method", "action", "evacuate", "text", "node", "since", "limit", "cores", "memory",
                        "settings", "secrets", "value"])
bodies = st.one_of(st.dictionaries(st.one_of(keys, st.text(max_size=12)), values, max_size=4), values,
                   st.builds(lambda a, e: {"action": a, "evacuate": e},
                             st.sampled_from(["enter", "leave", "maybe"]), st.booleans()))
words = st.one_of(st.sampled_from(["pve1", "pve4", "pve9", "0", "-1", "1e9", "8GiB", "lots", "keel",
                                   "github.token", "webhook.secret", "providers.pve.token_secret",
                                   "../../etc/passwd", "%00", "x" * 300]), st.text(max_size=20))
OPERATIONS = [(path, method.upper()) for path, item in SPEC["paths"].items() for method in item]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with node_stack(tmp_path_factory.mktemp("fuzz"), 60) as running:
        yield running


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(OPERATIONS), params=st.dictionaries(keys, words, max_size=3), body=bodies,
       part=words)
def test_no_answer_is_a_500_or_leaks_a_secret(stack, op, params, body, part):
    sim, url = stack
    path, method = op
    if method == "PUT" and path == "/api/config" and isinstance(body, dict) and isinstance(body.get("text"), str):
        body = {"text": "proxmox: [not, a, mapping]\n" + body["text"]}     # never replace the config
    concrete = re.sub(r"\{[^}]+\}", lambda _: requests.utils.quote(part, safe="") or "x", path)
    answer = requests.request(method, url + concrete, params=params, headers=AUTH, verify=sim.cert, timeout=60,
                              data=json.dumps(body) if method in ("POST", "PUT") else None)
    assert answer.status_code < 500 or answer.status_code in (502, 503), (method, concrete, answer.text)
    assert SECRET not in answer.text and "keel-demo" not in answer.text
    if path == "/api/metrics" and answer.status_code == 200:
        assert answer.text.startswith("# HELP")
    elif path == "/api/openapi.json" and answer.status_code == 200:
        assert answer.json()["openapi"].startswith("3.")
    else:
        data = answer.json()
        assert "data" in data
        if answer.status_code >= 400:
            assert data["data"] is None and data["message"]


def test_every_route_is_in_the_openapi_document_and_back():
    from keel.engine import api as api_module
    # the routes of every engine/api*.py (api.py and the runners' api_runners.py)
    source = "".join(p.read_text() for p in sorted(Path(api_module.__file__).parent.glob("api*.py")))
    routed = {(path, method.upper()) for method, path in
              re.findall(r'@app\.(get|post|put|delete)\("([^"]+)"\)', source)}
    documented = {(re.sub(r"\{([^}]+)\}", r"<\1>", path), method) for path, method in OPERATIONS}
    assert routed == documented
