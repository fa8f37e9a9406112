"""keel-web as a real process in front of a real keel-engine and the simulator: tickets
and tokens checked by PVE, privileges, CORS, and forwarding."""

from __future__ import annotations

import http.client
import shutil
import ssl
import time

import pytest
import requests
import yaml

from conftest import DEMO_TOKEN
from service_helpers import node_stack, request_from, wait_for, write_config


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with node_stack(tmp_path_factory.mktemp("web"), 20) as running:
        yield running


def login(sim, user, password="keel-demo"):
    """(ticket, CSRF token), as PVE's login window gets them."""
    answer = requests.post(f"{sim.url}/api2/json/access/ticket", data={"username": user, "password": password},
                           verify=sim.cert, timeout=10).json()["data"]
    return answer["ticket"], answer["CSRFPreventionToken"]


def ticket(sim, user, password="keel-demo"):
    return login(sim, user, password)[0]


def call(sim, url, method, path, auth=None, origin=None, headers=None, **kwargs):
    headers = dict(headers or {})
    if auth:
        headers["Authorization"] = auth
    if origin:
        headers["Origin"] = origin
    return requests.request(method, url + path, headers=headers, verify=sim.cert, timeout=60, **kwargs)


def test_a_valid_ticket_reads_status(stack):
    sim, url = stack
    answer = call(sim, url, "GET", "/api/status", f"PVEAuthCookie={ticket(sim, 'root@pam')}")
    assert answer.status_code == 200 and answer.json()["data"]["cluster"]["cluster"] == "demo"


def test_a_forged_or_missing_ticket_is_refused_in_pves_envelope(stack):
    sim, url = stack
    real = ticket(sim, "root@pam")
    forged = real[:-6] + ("AAAAAA" if not real.endswith("AAAAAA") else "BBBBBB")
    for auth in (None, f"PVEAuthCookie={forged}", "PVEAuthCookie=PVE:root@pam:00000000::c2ln",
                 "Basic cm9vdDpwdw=="):
        answer = call(sim, url, "GET", "/api/status", auth)
        assert answer.status_code == 401, (auth, answer.text)
        body = answer.json()
        assert body["data"] is None and body["message"]
        assert forged not in answer.text


def test_an_auditor_reads_but_may_not_plan_or_apply(stack):
    sim, url = stack
    value, token = login(sim, "auditor@pve")
    auth, csrf = f"PVEAuthCookie={value}", {"CSRFPreventionToken": token}
    assert call(sim, url, "GET", "/api/status", auth).status_code == 200
    for method, path in (("POST", "/api/apply"), ("GET", "/api/plan"), ("POST", "/api/maintenance/pve2")):
        answer = call(sim, url, method, path, auth, headers=csrf, json={})
        assert answer.status_code == 403, (path, answer.text)
        assert "VM.Migrate" in answer.json()["message"]
    answer = call(sim, url, "PUT", "/api/config", auth, headers=csrf, json={"text": "balancing: {}"})
    assert answer.status_code == 403 and "Sys.Modify" in answer.json()["message"]


def test_an_api_token_works_and_actions_say_who_asked(stack):
    sim, url = stack
    answer = call(sim, url, "GET", "/api/plan", f"PVEAPIToken={DEMO_TOKEN}")
    assert answer.status_code == 200 and answer.json()["data"]["verdict"]
    answer = call(sim, url, "POST", "/api/maintenance/pve3", f"PVEAPIToken={DEMO_TOKEN}",
                  json={"action": "enter", "evacuate": False})
    assert answer.status_code == 200, answer.text
    listed = call(sim, url, "GET", "/api/maintenance", f"PVEAPIToken={DEMO_TOKEN}").json()["data"]
    # keel-web sends the verified user alone (X-Keel-User); the engine that knows the call
    # came through keel-web (SO_PEERCRED) records it as web:<user>.
    assert listed["pve3"]["requested_by"].removeprefix("web:") == "keel@pve!keel"
    call(sim, url, "POST", "/api/maintenance/pve3", f"PVEAPIToken={DEMO_TOKEN}", json={"action": "leave"})


def test_cors_answers_the_nodes_own_ui_only(stack):
    sim, url = stack
    own = "https://127.0.0.1:8006"
    pre = call(sim, url, "OPTIONS", "/api/status", origin=own,
               headers={"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
    assert pre.status_code == 204
    assert "CSRFPreventionToken" in pre.headers["Access-Control-Allow-Headers"]
    assert pre.headers.get("Access-Control-Allow-Credentials") is None
    got = call(sim, url, "GET", "/api/status", f"PVEAPIToken={DEMO_TOKEN}", origin=own)
    assert got.headers["Access-Control-Allow-Origin"] == own
    for foreign in ("https://evil.example:8006", "https://127.0.0.1:8007", "http://127.0.0.1:8006"):
        pre = requests.options(url + "/api/status", headers={"Origin": foreign, "Access-Control-Request-Method": "GET"},
                               verify=sim.cert, timeout=10)
        assert pre.status_code == 403 and "Access-Control-Allow-Origin" not in pre.headers, foreign


def test_bad_bodies_are_refused_with_the_key_named(stack):
    sim, url = stack
    auth = f"PVEAPIToken={DEMO_TOKEN}"
    answer = call(sim, url, "POST", "/api/apply", auth, json={"method": "keel", "extra": 1})
    assert answer.status_code == 400 and answer.json()["errors"] == {"extra": "unknown key"}
    # Announce 2 MiB and send none of it: refused on the announcement, before a byte is read.
    host, port = url.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ssl.create_default_context(cafile=sim.cert),
                                       timeout=30)
    conn.putrequest("PUT", "/api/config")
    for name, value in (("Authorization", auth), ("Content-Type", "application/json"),
                        ("Content-Length", str(2 * 1024 * 1024))):
        conn.putheader(name, value)
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()


def test_metrics_need_sys_audit(stack):
    sim, url = stack
    assert call(sim, url, "GET", "/metrics").status_code == 401
    answer = call(sim, url, "GET", "/metrics", f"PVEAPIToken={DEMO_TOKEN}")
    assert answer.status_code == 200 and 'keel_leader{node="pve1"} 1' in answer.text


def test_repeated_refused_credentials_are_answered_429_at_once_without_asking_pve(stack):
    sim, url = stack
    start = sim.requests_log()[-1]["seq"] if sim.requests_log() else 0
    source = "127.0.0.3"                  # an address of its own: keel-web counts per address
    answers, took = [], []
    for i in range(9):
        began = time.monotonic()
        answers.append(request_from(source, url, sim.cert, "GET", "/api/history",
                                    {"Authorization": f"PVEAPIToken=keel@pve!keel=wrong-{i}"}))
        took.append(time.monotonic() - began)
    statuses = [a.status for a in answers]
    # five refusals a minute per address, then 429 (with Retry-After) until one ages out:
    # PVE is not asked again, and nothing waits inside keel-web
    assert statuses[:5] == [401] * 5 and statuses[5:] == [429] * 4, statuses
    assert int(answers[-1].headers["retry-after"]) > 0 and answers[-1].json()["data"] is None
    asked = [r for r in sim.requests_log() if r["seq"] > start and r["path"].endswith("/access/permissions")
             and r["status"] == 401]
    assert len(asked) == 5, asked
    assert max(took[5:]) < 1.0, took
    # another address is not affected
    assert call(sim, url, "GET", "/api/status", f"PVEAPIToken={DEMO_TOKEN}").status_code == 200


def test_a_renewed_certificate_is_served_without_a_restart(sim_factory, tmp_path):
    from keel.sim.tls import make_certificate
    sim = sim_factory()
    config = write_config(tmp_path / "node", sim)
    data = yaml.safe_load(config.read_text())
    first_cert, first_key = make_certificate(tmp_path / "first")
    data["web"]["cert"], data["web"]["key"] = str(tmp_path / "web.crt"), str(tmp_path / "web.key")
    shutil.copy(first_cert, data["web"]["cert"])
    shutil.copy(first_key, data["web"]["key"])
    config.write_text(yaml.safe_dump(data))
    web, url = start_web_with(config, data["web"]["cert"])
    host, port = url.removeprefix("https://").split(":")
    try:
        before = ssl.get_server_certificate((host, int(port)))
        renewed_cert, renewed_key = make_certificate(tmp_path / "renewed")
        shutil.copy(renewed_key, data["web"]["key"])
        shutil.copy(renewed_cert, data["web"]["cert"])           # as an ACME renewal does
        after = wait_for(lambda: (pem := ssl.get_server_certificate((host, int(port)))) != before and pem,
                         timeout=30, step=0.5)
        assert after.strip() == renewed_cert.read_text().strip()
    finally:
        web.stop()


def start_web_with(config, cert):
    from service_helpers import _start
    service = _start("web", config)
    data = yaml.safe_load(config.read_text())
    url = f"https://{data['web']['listen']}"
    wait_for(lambda: _answers(url, cert), timeout=30)
    return service, url


def _answers(url, cert):
    try:
        return requests.get(url + "/", verify=cert, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_runner_views_and_the_webhook_without_runners(stack):
    sim, url = stack
    auth = f"PVEAPIToken={DEMO_TOKEN}"
    for part in ("scale-sets", "runners", "jobs"):
        answer = call(sim, url, "GET", f"/api/runners/{part}", auth)
        assert answer.status_code == 200 and answer.json()["data"] == []
    answer = call(sim, url, "POST", "/webhook", data=b'{"action": "queued"}',
                  headers={"X-GitHub-Event": "workflow_job", "X-Hub-Signature-256": "sha256=00",
                           "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"})
    assert answer.status_code == 404 and "runners do not run" in answer.json()["message"]
