"""``keel web --harness www``: the web UI harness and its login (a development aid, off by
default), and the settings window's way of saving the balancing section alone."""

from __future__ import annotations

import subprocess

import pytest
import requests
import yaml

from conftest import DEMO_PASSWORD, DEMO_SCENARIO, ROOT, start_sim
from keel import config as cfg
from keel.errors import InvalidError
from service_helpers import services, wait_for, write_config

WWW = ROOT / "www"
needs_harness = pytest.mark.skipif(not (WWW / "node_modules" / "extjs-gpl").exists(),
                                   reason="ExtJS is not installed (npm ci --prefix www; make test does)")


@pytest.fixture(scope="module")
def harness_stack(tmp_path_factory):
    subprocess.run(["make", "-s", "-C", str(ROOT), "ui"], check=True, stdout=subprocess.DEVNULL)
    tmp = tmp_path_factory.mktemp("harness")
    sim = start_sim(DEMO_SCENARIO, tmp / "sim")
    try:
        config = write_config(tmp / "node", sim)
        with services(config, ("--harness", str(WWW))) as (client, url, _, _):
            yield sim, url, client, config
    finally:
        sim.stop()


def test_the_harness_is_off_by_default(tmp_path, sim):
    from keel.web.app import create_app
    app = create_app(cfg.load(write_config(tmp_path, sim)))
    with app.test_client() as client:
        for path in ("/harness/", "/harness/harness.js", "/harness/ext/ext-all.js"):
            assert client.get(path).status_code == 404
        assert client.post("/harness/login", json={"username": "root@pam", "password": "x"}).status_code == 404


def test_a_harness_without_extjs_is_refused_with_the_fix(tmp_path):
    from keel.web.harness import Harness
    (tmp_path / "index.html").write_text("<html></html>")
    with pytest.raises(InvalidError, match=r"ext-all.js is missing \(ExtJS: run `make extjs`"):
        Harness.from_dir(str(tmp_path))


@needs_harness
def test_the_page_its_parts_and_the_plugin_are_served(harness_stack):
    sim, url, _, _ = harness_stack
    for path, kind in (("/harness/", "text/html"), ("/harness/harness.js", "javascript"),
                       ("/harness/ext/ext-all.js", "javascript"), ("/harness/keel/keel.js", "javascript"),
                       ("/harness/fa/css/font-awesome.min.css", "text/css")):
        answer = requests.get(url + path, verify=sim.cert, timeout=30)
        assert answer.status_code == 200 and kind in answer.headers["Content-Type"], path
    for path in ("/harness/ext/../../package.json", "/harness/..%2Fpackage.json", "/harness/package.json",
                 "/harness/keel/../../README.md"):
        assert requests.get(url + path, verify=sim.cert, timeout=30).status_code == 404, path


@needs_harness
def test_the_login_gets_a_ticket_that_keel_web_accepts_from_its_own_origin(harness_stack):
    sim, url, _, _ = harness_stack
    answer = requests.post(url + "/harness/login", json={"username": "auditor@pve", "password": DEMO_PASSWORD},
                           verify=sim.cert, timeout=30)
    assert answer.status_code == 200
    data = answer.json()["data"]
    assert set(data) == {"username", "ticket", "CSRFPreventionToken", "cap"}
    assert data["cap"]["dc"].get("Sys.Audit") and DEMO_PASSWORD not in answer.text
    headers = {"Authorization": f"PVEAuthCookie={data['ticket']}", "Origin": url}
    status = requests.get(url + "/api/status", headers=headers, verify=sim.cert, timeout=30)
    assert status.status_code == 200 and status.headers["Access-Control-Allow-Origin"] == url
    refused = requests.post(url + "/api/apply", json={}, headers=headers, verify=sim.cert, timeout=30)
    assert refused.status_code == 401                   # a write with a ticket needs its CSRF token
    headers["CSRFPreventionToken"] = data["CSRFPreventionToken"]
    refused = requests.post(url + "/api/apply", json={}, headers=headers, verify=sim.cert, timeout=30)
    assert refused.status_code == 403                   # an auditor may not apply
    bad = requests.post(url + "/harness/login", json={"username": "root@pam", "password": "wrong-pw"},
                        verify=sim.cert, timeout=30)
    assert bad.status_code == 401 and "root@pam" in bad.json()["message"] and "wrong-pw" not in bad.text
    assert requests.post(url + "/harness/login", json=["x"], verify=sim.cert, timeout=30).status_code == 400


@needs_harness
def test_the_balancing_section_alone_is_validated_and_saved_keeping_the_rest(harness_stack):
    _, _, client, config = harness_stack
    original = config.read_text()
    config.write_text("# written by hand\n" + original)
    try:
        current = client.call("GET", "/api/config")
        assert current["sections"]["balancing"] == {"interval": "2s"}
        check = client.call("POST", "/api/config/validate",
                            {"balancing": {"threshold": "lots", "limits": {"moves": -1}}})
        assert not check["valid"]
        assert set(check["errors"]) == {"balancing.threshold", "balancing.limits.moves"}
        with pytest.raises(InvalidError):
            client.call("POST", "/api/config/validate", {"text": "x", "balancing": {}})
        client.call("PUT", "/api/config", {"balancing": {"interval": "2s", "threshold": "25%", "hold": 2}})
        written = config.read_text()
        assert written.startswith("# written by hand\n")
        data = yaml.safe_load(written)
        assert data["balancing"] == {"interval": "2s", "threshold": "25%", "hold": 2}
        assert data["engine"] == yaml.safe_load(original)["engine"]
        status = wait_for(lambda: (s := client.call("GET", "/api/status"))["config"]["threshold"] == 0.25 and s)
        assert status["config"]["error"] is None
    finally:
        client.call("PUT", "/api/config", {"text": original})
