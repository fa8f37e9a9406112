"""What the web UI's trust rests on (issue 16), through the real keel-web, keel-engine and
the simulator: cheap reads (fields, ETag and 304, gzip, CORS exposing the ETag), the
maintenance preview (every guest of the node moves or stays with a reason, nothing is
done), promised and achieved recorded with every job, node names in the config checked
against the cluster, an unchanged balancing section saved leaving the file as it is, the nodes' charts from PVE's RRD, and the plan's own figures in the
status."""

from __future__ import annotations

import gzip
import http.client
import json
import ssl
from urllib.parse import urlsplit

import pytest

from conftest import DEMO_SCENARIO, DEMO_TOKEN, start_sim
from service_helpers import services, wait_for, write_config

AUTH = {"Authorization": f"PVEAPIToken={DEMO_TOKEN}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-api")
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", 20.0)
    try:
        with services(write_config(tmp / "node", sim, balancing={"interval": "3s", "guests": ["vm", "ct"]})) \
                as (client, url, _, _):
            yield sim, url, client
    finally:
        sim.stop()


def raw(stack, path, headers=None):
    """(status, headers, body bytes) as sent: no client-side decompression."""
    sim, url, _ = stack
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=sim.cert)
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=60)
    try:
        conn.request("GET", path, headers={**AUTH, **(headers or {})})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def data(stack, path):
    status, headers, body = raw(stack, path)
    assert status == 200, body[:300]
    return json.loads(body)["data"]


def test_reads_are_cheap_fields_etag_304_and_gzip(stack):
    status, headers, body = raw(stack, "/api/history?limit=5&fields=jobs,decisions")
    assert status == 200 and set(json.loads(body)["data"]) == {"jobs", "decisions"}
    etag = headers["etag"]
    again, headers2, body2 = raw(stack, "/api/history?limit=5&fields=jobs,decisions", {"If-None-Match": etag})
    assert again == 304 and body2 == b"" and headers2["etag"] == etag
    full, headers3, zipped = raw(stack, "/api/status", {"Accept-Encoding": "gzip, deflate"})
    assert full == 200 and headers3.get("content-encoding") == "gzip"
    assert "cluster" in json.loads(gzip.decompress(zipped))["data"]
    assert int(headers3["content-length"]) == len(zipped)
    bad, _, answer = raw(stack, "/api/status?fields=cluster;x")
    assert bad == 400 and "fields" in json.loads(answer)["message"]
    # the browser may read the ETag of a cross-origin answer
    _, cors, _ = raw(stack, "/api/status?fields=inputs", {"Origin": "https://127.0.0.1:8006"})
    assert cors["access-control-expose-headers"] == "ETag" and "etag" in cors


def test_status_carries_the_plans_own_figures_and_inputs(stack):
    status = data(stack, "/api/status")
    model = status["cluster"]["model"]
    assert set(model["nodes"]) == {"pve1", "pve2", "pve3", "pve4", "pve5"}
    assert model["hottest"]["node"] in model["nodes"] and model["window_s"] == 300
    assert status["cluster"]["imbalance"]["keel"] == model["imbalance"]["keel"]
    assert set(status["inputs"]) == {"config", "maintenance", "job"}


def test_maintenance_preview_says_what_moves_and_what_stays_and_does_nothing(stack):
    sim, _, client = stack
    before = len(sim.requests_log())
    preview = data(stack, "/api/maintenance/pve1/preview")
    on_node = {g["vmid"] for g in sim.proxmox().cluster.resources.get(type="vm") if g["node"] == "pve1"}
    moving = {m["vmid"] for m in preview["moves"] if m["from"] == "pve1"}
    staying = {s["vmid"] for s in preview["stays"]}
    assert moving | staying == on_node and not moving & staying
    assert all(s["reason"] and s["detail"] for s in preview["stays"])
    assert all(m["to"] != "pve1" for m in preview["moves"])
    assert preview["summary"]["moves"] == len(preview["moves"]) and preview["summary"]["stays"] == len(staying)
    assert client.call("GET", "/api/status")["maintenance"] == {}
    assert not [r for r in sim.requests_log()[before:] if r["method"] != "GET"]
    status, _, body = raw(stack, "/api/maintenance/pve9/preview")
    assert status == 404 and "pve9" in json.loads(body)["message"]


def test_every_job_records_what_it_promised_and_what_it_reached(stack):
    _, _, client = stack
    job = client.call("POST", "/api/apply", {})
    wait_for(lambda: client.call("GET", f"/api/jobs/{job['id']}")["state"] not in ("running", "cancelling"),
             timeout=180)
    ended = client.call("GET", f"/api/jobs/{job['id']}")
    outcome = ended["outcome"]
    promised = outcome["promised"]
    assert promised["moves"] == len(job["plan"]["moves"]) and promised["imbalance"] < promised["before"]
    achieved = outcome["achieved"]
    assert achieved["planned"] == len(job["plan"]["moves"]) and 0 <= achieved["made"] <= achieved["planned"]
    assert isinstance(achieved["why"], list) and achieved["imbalance"] >= 0
    if abs(achieved["imbalance"] - outcome["promised"]["imbalance"]) >= 0.005:
        assert achieved["why"]                                  # a difference is always explained
    recorded = next(j for j in client.call("GET", "/api/history")["jobs"] if j["id"] == job["id"])
    assert recorded["promised"] == outcome["promised"] and recorded["achieved"] == achieved
    # the status's inputs name the job that ran: a plan made before it is out of date
    assert client.call("GET", "/api/status")["inputs"]["job"].startswith(job["id"])


def test_node_names_in_the_config_must_be_the_clusters(stack):
    _, _, client = stack
    answer = client.call("POST", "/api/config/validate",
                         {"balancing": {"pin": {"101": ["pve1", "pve7"]}, "ignore": {"nodes": ["pvex"]},
                                        "memory": {"reserve": {"default": "1GiB", "pve9": "2GiB"}},
                                        "schedule": {"windows": [{"days": "moonday", "from": "25:00"}]}}})
    assert not answer["valid"]
    assert "pve7" in answer["errors"]["balancing.pin.101"] and "pve1, pve2" in answer["errors"]["balancing.pin.101"]
    assert "pvex" in answer["errors"]["balancing.ignore.nodes"]
    assert "pve9" in answer["errors"]["balancing.memory.reserve"]
    assert any(path.startswith("balancing.schedule") for path in answer["errors"])    # said together
    good = client.call("POST", "/api/config/validate", {"balancing": {"pin": {"101": ["pve1"]}}})
    assert good["valid"], good


def test_the_balancing_section_saved_as_it_is_leaves_the_file_byte_for_byte(stack):
    """The settings window sends the whole section: unchanged, the file keeps its own layout
    and comments inside the section; changed, the section is written anew."""
    import yaml
    _, _, client = stack
    original = client.call("GET", "/api/config")["text"]
    section = yaml.safe_load(original)["balancing"]
    mine = original.replace("balancing:\n", "balancing:\n  # kept unless the section changes\n", 1)
    assert mine != original
    try:
        client.call("PUT", "/api/config", {"text": mine})
        client.call("PUT", "/api/config", {"balancing": section})
        assert client.call("GET", "/api/config")["text"] == mine
        client.call("PUT", "/api/config", {"balancing": {**section, "hold": 4}})
        text = client.call("GET", "/api/config")["text"]
        assert "# kept unless" not in text and yaml.safe_load(text)["balancing"]["hold"] == 4
    finally:
        client.call("PUT", "/api/config", {"text": original})


def test_the_nodes_charts_come_from_pves_rrd(stack):
    charts = data(stack, "/api/charts/nodes?timeframe=hour")
    assert set(charts["nodes"]) == {"pve1", "pve2", "pve3", "pve4", "pve5"}
    points = charts["nodes"]["pve1"]
    assert len(points) > 30 and all(len(p) == 3 and 0 <= p[1] <= 1 and 0 <= p[2] <= 1 for p in points)
    assert points == sorted(points)
    status, _, body = raw(stack, "/api/charts/nodes?timeframe=week")
    assert status == 400 and "hour or day" in json.loads(body)["message"]
