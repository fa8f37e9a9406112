# SPDX-License-Identifier: AGPL-3.0-or-later
"""The runners' settings through keel-web (real processes, the simulator's fake GitHub):
read and written as JSON with errors keyed by config path, secrets write-only (0600,
never in an answer), test connection naming what failed, job wait history, privileges,
and the runners restarting with new settings."""

from __future__ import annotations

import hashlib
import hmac
import json
import stat
import time

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from runners_helpers import LARGE_SET, PAT, SMALL_SET, TOKEN, app_key, runners_stack
from service_helpers import start_engine, wait_for, write_config

AUTH = {"Authorization": f"PVEAPIToken={TOKEN}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with runners_stack(tmp_path_factory.mktemp("runners-admin")) as running:
        yield running


def api(stack, method, path, body=None, auth=None, csrf=None):
    headers = {"Authorization": auth} if auth else dict(AUTH)
    if csrf:
        headers["CSRFPreventionToken"] = csrf
    return requests.request(method, stack.url + path, headers=headers, verify=stack.sim.cert, timeout=60,
                            data=None if body is None else json.dumps(body))


def settings(stack):
    answer = api(stack, "GET", "/api/runners/settings")
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def ping(stack, secret):
    """A GitHub ping delivered through keel-web, signed with ``secret`` (64 zeros: a bad signature)."""
    body = b'{"zen": "Keep it logically awesome."}'
    signature = secret if secret == "0" * 64 else hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return requests.post(f"{stack.url}/webhook", data=body, verify=stack.sim.cert, timeout=30,
                         headers={"X-GitHub-Event": "ping", "X-Hub-Signature-256": f"sha256={signature}",
                                  "X-GitHub-Delivery": f"d-{time.monotonic_ns()}"}).status_code


def every_answer(stack):
    """The text of every GET answer the UI reads."""
    return "".join(api(stack, "GET", p).text for p in
                   ("/api/runners", "/api/runners/settings", "/api/runners/scale-sets", "/api/runners/runners",
                    "/api/runners/jobs", "/api/runners/waits", "/api/runners/activity", "/api/config", "/api/status"))


def test_settings_read_as_written_with_secrets_only_set_or_not(stack):
    data = settings(stack)
    assert [s["name"] for s in data["settings"]["scale_sets"]] == ["keel-c2-m4", "keel-c8-m16"]
    assert data["in_force"] is True and data["secrets_dir"] == str(stack.secrets)
    by_id = {s["id"]: s for s in data["secrets"]}
    assert by_id["github.app_private_key"]["set"] is True
    assert by_id["github.token"] == {"id": "github.token", "field": "runners.github.token",
                                     "config_key": "runners.github.token_path", "path": None, "set": False}
    assert "PRIVATE KEY" not in json.dumps(data)


def test_a_bad_setting_is_refused_with_its_path_and_nothing_is_written(stack):
    before = stack.config.read_text()
    data = settings(stack)["settings"]
    data["scale_sets"][1]["max_runners"] = 0
    data["scale_sets"][0]["placement"] = "sideways"
    data["github"]["url"] = "http://github.com/x"
    checked = api(stack, "POST", "/api/runners/settings/validate", {"settings": data})
    assert checked.status_code == 200 and checked.json()["data"]["valid"] is False
    errors = checked.json()["data"]["errors"]
    assert set(errors) == {"runners.scale_sets[1].max_runners", "runners.scale_sets[0].placement",
                           "runners.github.url"}, errors
    answer = api(stack, "PUT", "/api/runners/settings", {"settings": data})
    assert answer.status_code == 400
    assert answer.json()["errors"] == errors
    assert stack.config.read_text() == before


def test_a_change_based_on_an_older_file_is_refused(stack):
    read = settings(stack)
    data, stamp = read["settings"], read["stamp"]
    answer = api(stack, "PUT", "/api/runners/settings", {"settings": data, "stamp": stamp})
    assert answer.status_code == 200, answer.text
    stamp = answer.json()["data"]["stamp"]                             # the file as now written
    assert stamp == settings(stack)["stamp"]
    stack.config.write_text(stack.config.read_text() + "# edited by hand\n")
    for method, path in (("PUT", "/api/runners/settings"), ("POST", "/api/runners/settings/validate")):
        answer = api(stack, method, path, {"settings": data, "stamp": stamp})
        assert answer.status_code == 409 and "changed since" in answer.json()["message"], answer.text
    assert api(stack, "PUT", "/api/runners/settings",
               {"settings": data, "stamp": settings(stack)["stamp"]}).status_code == 200


def test_secrets_are_checked_written_0600_and_never_shown(stack):
    auth_errors = {}
    for secret_id, value, field in (
            ("github.token", "hunter2hunter2", "runners.github.token"),
            ("github.app_private_key", "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----",
             "runners.github.app_private_key"),
            ("webhook.secret", "short", "runners.webhook.secret"),
            ("webhook.secret", "x" * 20000, "runners.webhook.secret")):
        answer = api(stack, "PUT", f"/api/runners/secrets/{secret_id}", {"value": value})
        assert answer.status_code == 400, answer.text
        assert field in answer.json()["errors"], answer.text
        assert value[:12] not in answer.text or value.startswith("-----")
        auth_errors[secret_id] = answer.json()["errors"][field]
    assert "not a GitHub token" in auth_errors["github.token"]
    ec_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    answer = api(stack, "PUT", "/api/runners/secrets/github.app_private_key", {"value": ec_key})
    assert "not an RSA private key" in answer.json()["errors"]["runners.github.app_private_key"]
    assert api(stack, "PUT", "/api/runners/secrets/nothing", {"value": "x"}).status_code == 400
    # a webhook secret without a path in the config: a default file, named in the config
    secret = "whsec-" + "Zq8" * 8
    answer = api(stack, "PUT", "/api/runners/secrets/webhook.secret", {"value": secret})
    assert answer.status_code == 200, answer.text
    path = stack.secrets / "github-webhook-secret"
    assert path.read_text() == secret and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"secret_path: {path}" in stack.config.read_text()
    assert {s["id"]: s["set"] for s in settings(stack)["secrets"]}["webhook.secret"] is True
    # the private key replaced with another good one, in place
    key_pem = app_key().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption()).decode()
    answer = api(stack, "PUT", "/api/runners/secrets/github.app_private_key", {"value": key_pem})
    assert answer.status_code == 200, answer.text
    assert stat.S_IMODE((stack.secrets / "github-app.pem").stat().st_mode) == 0o600
    text = every_answer(stack)
    assert secret not in text and "PRIVATE KEY-----" not in text and key_pem.splitlines()[1] not in text
    engine_log = stack.engine.log_text() + stack.web.log_text()
    assert secret not in engine_log and key_pem.splitlines()[1] not in engine_log
    # the running service took the webhook secret: a badly signed delivery is refused, a
    # signed one accepted; replaced in place (the config unchanged), the new one is in force
    wait_for(lambda: ping(stack, "0" * 64) == 401, timeout=60)
    wait_for(lambda: ping(stack, secret) == 200, timeout=60)
    other = "whsec-" + "Kp3" * 8
    answer = api(stack, "PUT", "/api/runners/secrets/webhook.secret", {"value": other})
    assert answer.status_code == 200, answer.text
    wait_for(lambda: ping(stack, other) == 200, timeout=90)
    assert ping(stack, secret) == 401


def test_a_secret_outside_the_secrets_directory_is_refused(stack):
    data = settings(stack)["settings"]
    data["github"]["app_private_key_path"] = "/etc/shadow"
    answer = api(stack, "PUT", "/api/runners/settings",
                 {"settings": data, "secrets": {"github.app_private_key": "-----BEGIN X PRIVATE KEY-----"}})
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert "runners.github.app_private_key" in errors


def test_test_connection_says_what_works_and_names_what_fails(stack):
    answer = api(stack, "POST", "/api/runners/test", {})
    assert answer.status_code == 200, answer.text
    result = answer.json()["data"]
    assert result["ok"] is True, result
    names = [r["check"] for r in result["results"]]
    assert names[:3] == ["GitHub credentials", "GitHub runners", "GitHub scale sets"]
    assert "provider pve: template 9000" in names
    # a template that does not exist, and another App key: both named
    data = settings(stack)["settings"]
    data["scale_sets"][1]["providers"][0]["runner"]["template"] = 9100
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    good = (stack.secrets / "github-app.pem").read_text()
    answer = api(stack, "PUT", "/api/runners/settings", {"settings": data, "secrets": {"github.app_private_key": other}})
    assert answer.status_code == 200, answer.text
    try:
        result = wait_for(lambda: (lambda r: r if not r["ok"] else None)(
            api(stack, "POST", "/api/runners/test", {}).json()["data"]), timeout=30)
        failed = {r["check"]: r["message"] for r in result["results"] if r["ok"] is False}
        assert "GitHub credentials" in failed and "401" in failed["GitHub credentials"], failed
        assert "does not exist" in failed["provider pve: template 9100"], failed
        assert other.splitlines()[1] not in json.dumps(result)
    finally:
        data["scale_sets"][1]["providers"][0]["runner"]["template"] = 9000
        assert api(stack, "PUT", "/api/runners/settings",
                   {"settings": data, "secrets": {"github.app_private_key": good}}).status_code == 200
    wait_for(lambda: api(stack, "POST", "/api/runners/test", {}).json()["data"]["ok"], timeout=30)


def test_a_token_instead_of_the_app_then_back(stack):
    app = settings(stack)["settings"]
    with_token = json.loads(json.dumps(app))
    for key in ("app_client_id", "app_installation_id", "app_private_key_path"):
        del with_token["github"][key]
    answer = api(stack, "PUT", "/api/runners/settings", {"settings": with_token, "secrets": {"github.token": PAT}})
    assert answer.status_code == 200, answer.text
    try:
        path = stack.secrets / "github-token"
        assert path.read_text() == PAT and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert f"token_path: {path}" in stack.config.read_text()
        result = api(stack, "POST", "/api/runners/test", {}).json()["data"]
        assert result["ok"] is True, result
        assert result["results"][0]["message"] == f"a token from {path}"
        assert PAT not in json.dumps(result) and PAT not in every_answer(stack)
        wait_for(lambda: all(s["state"] == "LISTENING" for s in
                             api(stack, "GET", "/api/runners/scale-sets").json()["data"]), timeout=60)
    finally:
        assert api(stack, "PUT", "/api/runners/settings", {"settings": app}).status_code == 200


def test_an_auditor_reads_but_may_not_change_or_test(stack):
    ticket, csrf = stack.login("auditor@pve")
    auth = f"PVEAuthCookie={ticket}"
    assert api(stack, "GET", "/api/runners/settings", auth=auth).status_code == 200
    assert api(stack, "GET", "/api/runners/waits", auth=auth).status_code == 200
    assert api(stack, "GET", "/api/runners/activity", auth=auth).status_code == 200
    for method, path, body in (("PUT", "/api/runners/settings", {"settings": {}}),
                               ("POST", "/api/runners/settings/validate", {}),
                               ("PUT", "/api/runners/secrets/github.token", {"value": "ghp_" + "a" * 36}),
                               ("POST", "/api/runners/test", {}),
                               ("POST", "/api/runners/scale-sets/keel-c2-m4/pause", {})):
        answer = api(stack, method, path, body, auth=auth, csrf=csrf)
        assert answer.status_code == 403 and "Sys.Modify" in answer.json()["message"], (path, answer.text)


def scale_set(stack, name):
    """The scale set ``name`` as the API lists it; an empty dict while the list lacks it (a
    restart of the runners by an earlier test may be under way), so predicates never raise."""
    return next((s for s in api(stack, "GET", "/api/runners/scale-sets").json()["data"] if s["name"] == name), {})


def test_a_scale_set_is_paused_drained_and_resumed_at_run_time(stack):
    try:
        _pause_drain_resume(stack)
    finally:      # the stack is shared: never leave the set paused for the next test
        api(stack, "POST", "/api/runners/scale-sets/keel-c8-m16/resume", {})


def _pause_drain_resume(stack):
    answer = api(stack, "POST", "/api/runners/scale-sets/keel-c8-m16/pause", {})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["applied"] and data["scale_set"]["state"] == "PAUSED"
    assert data["scale_set"]["control"]["by"] == "web:keel@pve!keel" and data["scale_set"]["max"] == 0
    wait_for(lambda: "paused by web:keel@pve!keel" in (scale_set(stack, "keel-c8-m16").get("details") or [""])[0],
             timeout=30)          # (a restart of the runners by an earlier test may be under way)
    wait_for(lambda: [s["capacity"] for s in stack.gh("GET", "state")["scale_sets"]
                      if s["name"] == "keel-c8-m16"] == [0], timeout=30)      # GitHub is told: no room
    assert api(stack, "POST", "/api/runners/scale-sets/keel-c8-m16/drain", {}).json()["data"]["scale_set"][
        "state"] == "DRAINING"
    assert api(stack, "POST", "/api/runners/scale-sets/keel-c8-m16/resume", {}).json()["data"]["scale_set"][
        "state"] == "LISTENING"
    wait_for(lambda: [s["capacity"] for s in stack.gh("GET", "state")["scale_sets"]
                      if s["name"] == "keel-c8-m16"] == [1], timeout=30)
    unknown = api(stack, "POST", "/api/runners/scale-sets/keel-nope/pause", {})
    assert unknown.status_code == 404 and "keel-c2-m4" in unknown.json()["message"]
    assert api(stack, "POST", "/api/runners/scale-sets/keel-c2-m4/stop", {}).status_code == 400
    assert api(stack, "POST", "/api/runners/scale-sets/keel-c2-m4/pause", {"force": True}).status_code == 400


def test_new_settings_restart_the_runners_and_jobs_show_their_wait(stack):
    data = settings(stack)["settings"]
    data["scale_sets"] = [SMALL_SET, {**LARGE_SET, "max_runners": 2}]
    answer = api(stack, "PUT", "/api/runners/settings", {"settings": data})
    assert answer.status_code == 200, answer.text
    wait_for(lambda: [s["max"] for s in api(stack, "GET", "/api/runners/scale-sets").json()["data"]] == [2, 2]
             and stack.gh("GET", "state")["sessions"], timeout=60)
    [job] = stack.gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 2})["ids"]
    wait_for(lambda: [j for j in api(stack, "GET", "/api/runners/waits").json()["data"]["jobs"]
                      if str(j["job_id"]) == str(job)], timeout=90)
    waits = api(stack, "GET", "/api/runners/waits?limit=10").json()["data"]
    assert waits["scale_sets"]["keel-c2-m4"]["jobs"] >= 1 and waits["jobs"][-1]["wait_s"] >= 0
    assert api(stack, "GET", "/api/runners/waits?limit=0").status_code == 400
    # the job shows in the queue-depth and busy charts: waiting, then busy, within the hour
    for span in ("", "?span=1h", "?span=1d"):
        activity = api(stack, "GET", "/api/runners/activity" + span).json()["data"]
        points = activity["scale_sets"]["keel-c2-m4"]
        assert len(points) == 61 and activity["step_s"] == activity["span_s"] / 60
        assert max(p[1] for p in points) >= 1 and max(p[2] for p in points) >= 1, (points[-3:], waits["jobs"][-1])
    bad = api(stack, "GET", "/api/runners/activity?span=2h")
    assert bad.status_code == 400 and "span" in bad.json()["message"] and "'2h'" in bad.json()["message"]


def test_a_follower_shows_what_the_leader_shared(stack, tmp_path):
    leader = yaml.safe_load(stack.config.read_text())
    config = write_config(tmp_path / "pve2", stack.sim, node="pve2", api_token=TOKEN,
                          lock=leader["engine"]["lock"], shared=leader["engine"]["shared_dir"])
    data = yaml.safe_load(config.read_text())
    data["runners"] = leader["runners"]
    config.write_text(yaml.safe_dump(data))
    engine, client = start_engine(config)
    try:
        status = wait_for(lambda: (lambda s: s if s.get("scale_sets") else None)(
            client.call("GET", "/api/runners")), timeout=60)
        assert status["remote"] is True and status["active"] is False and status["leader"] is False
        assert status["node"] == "pve1" and status["leader_node"] == "pve1"
        assert [s["name"] for s in status["scale_sets"]] == [s["name"] for s in
                                                              api(stack, "GET", "/api/runners/scale-sets").json()["data"]]
        assert client.call("GET", "/api/runners/waits")["jobs"] is not None
        assert "scale_sets" in client.call("GET", "/api/runners/activity")
        assert "PRIVATE KEY" not in json.dumps(status)
        # a control given on a follower is written where the leader reads it, and applied there
        answer = client.call("POST", "/api/runners/scale-sets/keel-c2-m4/drain", {})
        assert answer["applied"] is False and answer["leader_node"] == "pve1"
        wait_for(lambda: scale_set(stack, "keel-c2-m4").get("state") == "DRAINING", timeout=30)
        client.call("POST", "/api/runners/scale-sets/keel-c2-m4/resume", {})
        wait_for(lambda: scale_set(stack, "keel-c2-m4").get("state") == "LISTENING", timeout=30)
    finally:
        engine.stop()
