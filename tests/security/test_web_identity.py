"""What keel-web tells keel-engine about the caller, against a stand-in engine on the
Unix socket that records every request: ``X-Keel-User`` is the user PVE verified (no
``web:`` prefix), ``X-Keel-Privileges`` the privileges PVE answered for the ones Keel
checks, propagate flags kept (finding 6: a privilege granted with propagate off was
dropped, so its holder was refused); keel-web's own first refusal never refuses what the
engine could allow on some object (finding 4: the engine decides per guest)."""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests
import yaml

from conftest import DEMO_SCENARIO, DEMO_TOKEN, start_sim
from keel import authz
from service_helpers import start_web, write_config

from .web_helpers import login

USERS = {
    # Sys.Audit on / itself, propagate off: PVE lets it read / (the cluster's status).
    "flat@pve": [{"path": "/", "role": "PVEAuditor", "user": "flat@pve", "propagate": False}],
    # May migrate vm 110 only, propagate off on that path: keel-web must ask the engine.
    "one@pve": [{"path": "/vms/110", "role": "PVEVMAdmin", "user": "one@pve", "propagate": False}],
    # May migrate the dev pool's guests (a pool's roles never propagate).
    "pooled@pve": [{"path": "/pool/dev", "role": "PVEVMAdmin", "user": "pooled@pve"},
                   {"path": "/", "role": "PVEAuditor", "user": "pooled@pve"}],
    # Sys.Modify without any VM privilege.
    "sysadmin@pve": [{"path": "/", "role": "PVESysAdmin", "user": "sysadmin@pve"}],
    # Nothing at all.
    "nobody@pve": [],
}


class Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Recorder.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                              "body": body})
        data = json.dumps({"data": {"ok": True}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("web-identity")
    scenario = yaml.safe_load(DEMO_SCENARIO.read_text())
    for user, acl in USERS.items():
        scenario["users"].append({"userid": user, "password": "keel-demo"})
        scenario["acl"].extend(acl)
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    sim = start_sim(tmp / "scenario.yaml", tmp / "sim")
    config = write_config(tmp / "node", sim)
    socket_path = yaml.safe_load(config.read_text())["engine"]["socket"]
    server = UnixServer(socket_path, Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    web, url = start_web(config)
    try:
        yield sim, url
    finally:
        web.stop()
        server.shutdown()
        server.server_close()
        sim.stop()


def send(stack, method, path, user, headers=None, body=None):
    sim, url = stack
    Recorder.seen.clear()
    if user.startswith("PVEAPIToken="):
        auth, csrf = {"Authorization": user}, {}
    else:
        ticket, token = login(sim, user)
        auth, csrf = {"Authorization": f"PVEAuthCookie={ticket}"}, {"CSRFPreventionToken": token}
    answer = requests.request(method, url + path, headers={**auth, **csrf, **(headers or {})}, json=body,
                              verify=sim.cert, timeout=60)
    return answer, (Recorder.seen[-1] if Recorder.seen else None)


def pve_answer(sim, user) -> dict[str, dict[str, int]]:
    ticket, _ = login(sim, user)
    answer = requests.get(f"{sim.url}/api2/json/access/permissions", verify=sim.cert, timeout=30,
                          headers={"Authorization": f"PVEAuthCookie={ticket}"})
    return answer.json()["data"]


@pytest.mark.parametrize("user", ["flat@pve", "one@pve", "pooled@pve", "sysadmin@pve", "root@pam"])
def test_the_engine_gets_the_verified_user_and_pves_privileges_flags_and_all(stack, user):
    sim, _ = stack
    method, path = ("GET", "/api/plan") if user in ("one@pve", "pooled@pve") else ("GET", "/api/status")
    answer, seen = send(stack, method, path, user)
    assert answer.status_code == 200, answer.text
    assert seen["headers"][authz.HEADER_USER] == user
    sent = authz.decode(seen["headers"][authz.HEADER_PRIVILEGES])
    assert sent == json.loads(authz.encode(pve_answer(sim, user)))
    if user == "flat@pve":
        assert sent["/"]["Sys.Audit"] == 0             # kept, not dropped
    if user == "one@pve":
        assert sent["/vms/110"]["VM.Audit"] == 0 and sent["/vms/110"]["VM.Migrate"] == 0 and len(sent) == 1
    if user == "pooled@pve":
        assert sent["/vms/105"]["VM.Migrate"] == 0 and sent["/"]["Sys.Audit"] == 1


def test_an_api_token_is_named_as_pve_names_it(stack):
    answer, seen = send(stack, "GET", "/api/status", f"PVEAPIToken={DEMO_TOKEN}")
    assert answer.status_code == 200
    assert seen["headers"][authz.HEADER_USER] == "keel@pve!keel"


def test_identity_headers_from_the_client_never_reach_the_engine(stack):
    forged = {authz.HEADER_USER: "root@pam", authz.HEADER_PRIVILEGES: '{"/":{"Sys.Modify":1}}'}
    answer, seen = send(stack, "GET", "/api/status", "flat@pve", forged)
    assert answer.status_code == 200
    assert seen["headers"][authz.HEADER_USER] == "flat@pve"
    assert "Sys.Modify" not in seen["headers"][authz.HEADER_PRIVILEGES]


@pytest.mark.parametrize("user, method, path, body, forwarded", [
    # plan, apply and maintenance: VM.Migrate somewhere is enough to ask; the engine checks each guest
    ("one@pve", "GET", "/api/plan", None, True),
    ("one@pve", "POST", "/api/apply", {}, True),
    ("one@pve", "POST", "/api/maintenance/pve1", {"action": "enter"}, True),
    ("pooled@pve", "POST", "/api/apply", {}, True),
    ("sysadmin@pve", "GET", "/api/plan", None, False),
    ("sysadmin@pve", "POST", "/api/maintenance/pve1", {"action": "enter"}, False),
    ("flat@pve", "POST", "/api/apply", {}, False),
    # a job is cancelled by its owner or with Sys.Modify on /: the engine knows the owner
    ("flat@pve", "DELETE", "/api/jobs/12", None, True),
    ("one@pve", "DELETE", "/api/jobs/12", None, True),
    ("nobody@pve", "DELETE", "/api/jobs/12", None, True),
    # reads need Sys.Audit on /
    ("flat@pve", "GET", "/api/history", None, True),
    ("one@pve", "GET", "/api/status", None, False),
    ("nobody@pve", "GET", "/api/status", None, False),
    # the config and the runners need Sys.Modify on /
    ("sysadmin@pve", "PUT", "/api/config", {"text": ""}, True),
    ("sysadmin@pve", "PUT", "/api/runners/settings", {}, True),
    ("pooled@pve", "PUT", "/api/config", {"text": ""}, False),
    ("flat@pve", "POST", "/api/config/validate", {"text": ""}, False),
])
def test_keel_webs_first_refusal(stack, user, method, path, body, forwarded):
    answer, seen = send(stack, method, path, user, body=body)
    if forwarded:
        assert answer.status_code == 200, answer.text
        assert seen is not None and seen["method"] == method and seen["path"] == path
    else:
        assert answer.status_code == 403, answer.text
        assert seen is None
