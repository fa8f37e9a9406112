"""keel-engine's doors, tried as an attacker with an account on the cluster would.

Each caller here is a real Proxmox VE user of the simulator, with real ACL entries; the
privileges sent to the engine are what PVE's ``/access/permissions`` answers that user, as
keel-web forwards them (``keel.authz``).  The engine runs as a real process on its Unix
socket against ``keel sim``; what happened is read back from the simulator's request log
and the file system.  docs/security.md, "Who can do what", is the table these mirror.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import DEMO_SCENARIO, start_sim
from keel.authz import HEADER_PRIVILEGES, HEADER_USER, encode
from runners_helpers import runners_stack
from service_helpers import start_engine, wait_for, write_config

PASSWORD = "sesame-sesame"


# -- callers -------------------------------------------------------------------------------------


class Door:
    """keel-engine's socket, called as keel-web would for a PVE user, or as root."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def call(self, method: str, path: str, body: Any = None, user: "PveUser | None" = None,
             raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("localhost", timeout=120)
        conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.sock.settimeout(120)
        conn.sock.connect(self.socket_path)
        sent = dict(headers or {})
        if user is not None:
            sent.update({HEADER_USER: user.userid, HEADER_PRIVILEGES: user.privileges()})
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            sent["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            text = response.read()
        finally:
            conn.close()
        return response.status, json.loads(text) if text else {}


class PveUser:
    """A user made in the simulator through the real API, with ACL entries."""

    def __init__(self, sim: Any, userid: str, acl: list[tuple[str, str, bool]]):
        self.sim, self.userid = sim, userid
        root = sim.proxmox(user="root@pam", password="keel-demo")
        root.access.users.post(userid=userid, password=PASSWORD)
        for path, role, propagate in acl:
            root.access.acl.put(path=path, roles=role, users=userid, propagate=int(propagate))

    def privileges(self) -> str:
        """What keel-web would forward: PVE's answer for this user, with their own login."""
        me = self.sim.proxmox(user=self.userid, password=PASSWORD)
        return encode(me.access.permissions.get())


def make_role(sim: Any, name: str, privs: str) -> None:
    sim.proxmox(user="root@pam", password="keel-demo").access.roles.post(roleid=name, privs=privs)


def writes(sim: Any, since: int) -> list[dict]:
    return [r for r in sim.requests_log(since) if r["method"] != "GET" and r["path"].startswith("/api2")]


def last_request(sim: Any) -> int:
    log = sim.requests_log()
    return log[-1]["seq"] if log else 0


# -- the balancer's doors (the demo cluster) ----------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doors")
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", 40.0)
    try:
        make_role(sim, "KeelOperator", "Sys.Audit,VM.Audit,VM.Migrate")
        make_role(sim, "Watcher", "Sys.Audit")
        make_role(sim, "Tuner", "Sys.Audit,Sys.Modify")
        users = {
            # VM.Migrate everywhere but NoAccess on db1 (110): PVE refuses to migrate 110 for them
            "mallory": PveUser(sim, "mallory@pve", [("/", "KeelOperator", True), ("/vms/110", "NoAccess", False)]),
            # Sys.Audit only: sees nodes, no guest
            "watcher": PveUser(sim, "watcher@pve", [("/", "Watcher", True)]),
            # the CI pool's operator
            "ci": PveUser(sim, "ci-op@pve", [("/", "Watcher", True), ("/pool/ci", "KeelOperator", True)]),
            # Sys.Modify on / and no VM privilege (finding 1's caller)
            "tuner": PveUser(sim, "tuner@pve", [("/", "Tuner", True)]),
            # VM.Migrate granted on /vms without propagation: /vms itself only, no guest
            "flat": PveUser(sim, "flat@pve", [("/", "Watcher", True), ("/vms", "KeelOperator", False)]),
            # sees everything, may move the CI pool's guests
            "viewer": PveUser(sim, "viewer@pve", [("/", "PVEAuditor", True), ("/pool/ci", "KeelOperator", True)]),
        }
        # the socket in a directory anyone may enter, so that another user can try it
        sockets = Path(tempfile.mkdtemp(prefix="keel-doors-"))
        sockets.chmod(0o755)
        config = write_config(tmp / "node", sim, balancing={"interval": "1h"},
                              engine={"socket": str(sockets / "engine.sock")})
        service, client = start_engine(config)
        try:
            wait_for(lambda: client.call("GET", "/api/status")["leader"])
            yield sim, Door(client.socket_path), users, config, service
        finally:
            service.stop()
            shutil.rmtree(sockets, ignore_errors=True)
    finally:
        sim.stop()


def test_a_guest_the_user_may_not_migrate_is_left_out_of_their_plan(demo):
    sim, door, users, _, _ = demo
    status, answer = door.call("GET", "/api/plan", user=users["mallory"])
    assert status == 200, answer
    plan = answer["data"]
    assert 110 not in {m["vmid"] for m in plan["moves"]}
    # 110 is NoAccess for mallory: not even named, only counted
    assert all(s["vmid"] != 110 for s in plan["skipped"]) and "db1" not in json.dumps(plan)
    [hidden] = [s for s in plan["skipped"] if s["reason"] == "not permitted" and s["vmid"] is None]
    assert hidden["detail"].startswith("1 guests you may not see")
    # a user who sees every guest but may move only the CI pool's is told why each stays
    status, answer = door.call("GET", "/api/plan", user=users["viewer"])
    assert status == 200, answer
    assert {m["vmid"] for m in answer["data"]["moves"]} <= {125}
    [skip] = [s for s in answer["data"]["skipped"] if s["vmid"] == 104]
    assert skip["reason"] == "not permitted" and "/vms/104" in skip["detail"]


def test_maintenance_that_would_move_a_guest_the_user_may_not_migrate_is_refused(demo):
    """Finding 4: VM.Migrate on / but NoAccess on /vms/110; pve1 holds 110."""
    sim, door, users, _, _ = demo
    before = last_request(sim)
    status, answer = door.call("POST", "/api/maintenance/pve1", {"action": "enter"}, user=users["mallory"])
    assert status == 403 and "/vms/110" in answer["message"], answer
    assert door.call("GET", "/api/maintenance")[1]["data"] == {}
    assert writes(sim, before) == []


def test_a_user_with_migrate_on_a_pool_may_only_move_its_guests(demo):
    sim, door, users, _, _ = demo
    status, answer = door.call("GET", "/api/plan", user=users["ci"])
    assert status == 200, answer
    assert all(m["vmid"] == 125 for m in answer["data"]["moves"])       # 125 is ci's only guest
    status, answer = door.call("POST", "/api/maintenance/pve1", {"action": "enter"}, user=users["ci"])
    assert status == 403


def test_a_privilege_without_propagation_reaches_no_guest(demo):
    sim, door, users, _, _ = demo
    status, answer = door.call("GET", "/api/plan", user=users["flat"])
    assert status == 200, answer                         # VM.Migrate on /vms itself: may ask
    assert answer["data"]["moves"] == []                 # ... and may move no guest


@pytest.mark.parametrize("who", ["watcher", "tuner"])
def test_without_migrate_anywhere_plan_apply_and_maintenance_are_refused(demo, who):
    sim, door, users, _, _ = demo
    before = last_request(sim)
    assert door.call("GET", "/api/plan", user=users[who])[0] == 403
    assert door.call("POST", "/api/apply", {}, user=users[who])[0] == 403
    assert door.call("POST", "/api/maintenance/pve3", {"action": "enter"}, user=users[who])[0] == 403
    assert writes(sim, before) == []


def test_reads_show_only_the_guests_the_user_may_see(demo):
    """Finding 4's second half: history, jobs and plans name only guests with VM.Audit."""
    sim, door, users, _, _ = demo
    status, answer = door.call("POST", "/api/apply", {})
    assert status == 202, answer
    job_id = answer["data"]["id"]
    wait_for(lambda: door.call("GET", f"/api/jobs/{job_id}")[1]["data"]["state"] != "running", timeout=120)
    moves = door.call("GET", "/api/history")[1]["data"]["moves"]
    assert moves, "the apply moved nothing"
    status, watched = door.call("GET", "/api/history", user=users["watcher"])
    assert status == 200 and watched["data"]["moves"] == [] and watched["data"]["decisions"] is not None
    job = door.call("GET", f"/api/jobs/{job_id}", user=users["watcher"])[1]["data"]
    assert job["plan"]["moves"] == [] and all(e.get("vmid") is None for e in job["events"])
    shown = door.call("GET", "/api/history", user=users["mallory"])[1]["data"]["moves"]
    assert {m["vmid"] for m in shown} == {m["vmid"] for m in moves} - {110}


def test_a_job_is_stopped_by_its_owner_or_an_admin_only(demo):
    sim, door, users, _, _ = demo
    status, answer = door.call("POST", "/api/apply", {}, user=users["mallory"])
    assert status in (202, 409), answer
    if status == 202:
        job_id = answer["data"]["id"]
        assert door.call("DELETE", f"/api/jobs/{job_id}", user=users["ci"])[0] == 403
        status, answer = door.call("DELETE", f"/api/jobs/{job_id}", user=users["mallory"])
        assert status == 200 and answer["data"]["cancelled_by"] in (None, "web:mallory@pve")
        wait_for(lambda: door.call("GET", f"/api/jobs/{job_id}")[1]["data"]["state"] != "running", timeout=120)


def test_the_whole_config_is_roots_and_the_engine_keeps_its_own_paths(demo):
    """Finding 1: Sys.Modify on / wrote ``engine.secrets_dir`` through the web UI, and the
    engine adopted it at once."""
    sim, door, users, config, service = demo
    text = config.read_text()
    hostile = yaml.safe_load(text)
    hostile["engine"]["secrets_dir"] = "/etc/pve/priv"
    status, answer = door.call("PUT", "/api/config", {"text": yaml.safe_dump(hostile)}, user=users["tuner"])
    assert status == 403 and "root" in answer["message"], answer
    assert config.read_text() == text
    # the balancing section alone is theirs to change
    status, answer = door.call("PUT", "/api/config", {"balancing": {"interval": "1h", "threshold": 0.2}},
                               user=users["tuner"])
    assert status == 200, answer
    # root edits the engine's paths in the file: they wait for a restart
    edited = yaml.safe_load(config.read_text())
    started_with = edited["engine"]["secrets_dir"]
    edited["engine"]["secrets_dir"] = str(config.parent / "elsewhere")
    config.write_text(yaml.safe_dump(edited))
    wait_for(lambda: "take effect when keel-engine restarts" in service.log_text(), timeout=30)
    status, answer = door.call("GET", "/api/runners/settings")
    assert answer["data"]["secrets_dir"] == started_with
    config.write_text(text)


def test_the_engine_answers_nothing_that_breaks_with_a_500(demo):
    sim, door, users, _, _ = demo
    deep = b'{"balancing": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    cases = [("PUT", "/api/config", None, deep), ("POST", "/api/apply", None, b"[" * 100_000),
             ("PUT", "/api/config", {"text": "a:\n" + "  - " * 1 + "[" * 5000 + "]" * 5000}, None),
             ("GET", "/api/history?limit=%C2%B2", None, None), ("GET", "/api/jobs/x?since=%C2%B2", None, None),
             ("GET", "/api/runners/waits?limit=%C2%B2", None, None), ("PATCH", "/api/status", None, None),
             ("POST", "/api/status", None, None)]
    for method, path, body, raw in cases:
        status, answer = door.call(method, path, body, raw=raw)
        assert 400 <= status < 500, (method, path, status, answer)
        assert answer["data"] is None and answer["message"], answer


def test_a_pve_failure_on_a_read_is_a_503_not_a_500(demo):
    sim, door, users, _, _ = demo
    # PVE fails first, then the test waits out what a plan may reuse: a balancing round
    # that a config reload of the test before set off reads the cluster, and a reading it
    # took just before the fault would be fresh enough to plan on (FRESH_S)
    sim.control("POST", "faults", {"endpoints": [{"path": "/cluster/resources", "method": "GET",
                                                  "error_rate": 1, "status": 500}]})
    try:
        time.sleep(2.5)
        seq = last_request(sim)
        status, answer = door.call("GET", "/api/plan")
        assert status == 503, answer
        assert "/cluster/resources" in answer["message"], answer
        asked = [r for r in sim.requests_log(seq) if r["path"].endswith("/cluster/resources")]
        assert asked and all(r["status"] == 500 for r in asked), asked
    finally:
        sim.control("DELETE", "faults")


def test_a_slow_pve_does_not_hold_up_status_maintenance_or_cancel(demo):
    """Finding 5: with 20 s added to /cluster/resources, 12 status requests each took 20 s
    and /api/maintenance (no PVE call) waited 18 s."""
    sim, door, users, _, _ = demo
    time.sleep(1.5)                                      # the last reading is older than status_interval
    before = last_request(sim)
    sim.control("POST", "faults", {"endpoints": [{"path": "/cluster/resources", "latency": "20s"}]})
    try:
        took: list[float] = []
        results: list[int] = []

        def ask(path: str) -> None:
            started = time.monotonic()
            results.append(door.call("GET", path)[0])
            took.append(time.monotonic() - started)

        threads = [threading.Thread(target=ask, args=(p,)) for p in ["/api/status"] * 12 + ["/api/maintenance",
                                                                                           "/api/jobs"]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert results == [200] * 14
        assert max(took) < 10, took                      # well below the 20 s PVE takes
        reads = [r for r in sim.requests_log(before) if r["path"].endswith("/cluster/resources")]
        assert len(reads) <= 1                           # one reading, shared
    finally:
        sim.control("DELETE", "faults")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_peer_that_is_neither_root_nor_keel_web_is_refused(demo, tmp_path):
    sim, door, users, _, _ = demo
    os.chmod(door.socket_path, 0o666)                    # as if the group were too wide
    try:
        probe = ("import http.client,socket,sys,json\n"
                 "c=http.client.HTTPConnection('x');s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);c.sock=s\n"
                 "c.request('GET','/api/status',headers={'X-Keel-User':'root@pam','X-Keel-Privileges':"
                 "json.dumps({'/':{'Sys.Audit':1,'Sys.Modify':1}})});r=c.getresponse();print(r.status, r.read().decode())")
        run = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              probe, door.socket_path], capture_output=True, text=True, timeout=60)
        assert run.stdout.startswith("403 ") and "root and keel-web only" in run.stdout, run.stdout + run.stderr
    finally:
        os.chmod(door.socket_path, 0o660)


# -- the runners' doors: where Keel reads, writes and sends --------------------------------------


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    with runners_stack(tmp_path_factory.mktemp("doors-runners")) as stack:
        make_role(stack.sim, "Tuner", "Sys.Audit,Sys.Modify")
        make_role(stack.sim, "Cloner", "Sys.Audit,Sys.Modify,VM.Clone,VM.Allocate")
        users = {"tuner": PveUser(stack.sim, "tuner@pve", [("/", "Tuner", True)]),
                 "cloner": PveUser(stack.sim, "cloner@pve", [("/", "Cloner", True)])}
        yield stack, Door(stack.client.socket_path), users


def settings_of(door: Door) -> tuple[dict, str]:
    data = door.call("GET", "/api/runners/settings")[1]["data"]
    return data["settings"], data["stamp"]


class Listener:
    """A TLS listener on loopback that counts who connects (a host the attacker chose)."""

    def __init__(self, cert: str, key: str):
        self.hits = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_a_secret_is_written_only_to_its_own_file_in_the_secrets_directory(runners, tmp_path):
    """Finding 1: webhook.secret_path pointed at authorized_keys, then a secret set."""
    stack, door, users = runners
    victim = tmp_path / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA admin\n")
    data, stamp = settings_of(door)
    data["webhook"] = {"secret_path": str(victim)}
    status, answer = door.call("PUT", "/api/runners/settings",
                               {"settings": data, "secrets": {"webhook.secret": "whsec-" + "Ab9" * 8}, "stamp": stamp},
                               user=users["tuner"])
    assert status == 200, answer
    assert victim.read_text() == "ssh-ed25519 AAAA admin\n"
    assert (stack.secrets / "github-webhook-secret").read_text().startswith("whsec-")
    assert f"secret_path: {stack.secrets / 'github-webhook-secret'}" in stack.config.read_text()
    # without a secret in the change, a path Keel did not make is refused
    data, stamp = settings_of(door)
    data["webhook"] = {"secret_path": str(victim)}
    status, answer = door.call("PUT", "/api/runners/settings", {"settings": data, "stamp": stamp},
                               user=users["tuner"])
    assert status == 400 and "runners.webhook.secret_path" in answer["errors"], answer


def test_credentials_cannot_be_sent_to_a_host_the_caller_chose(runners):
    """Finding 2: github.url with insecure_skip_verify, and token_path pointed at Keel's own
    PVE token, sent that file as Bearer to the listener."""
    stack, door, users = runners
    listener = Listener(str(Path(stack.sim.cert)), str(Path(stack.sim.cert).with_name("sim.key")))
    try:
        token_file = yaml.safe_load(stack.config.read_text())["proxmox"]["token_file"]
        data, stamp = settings_of(door)
        github = data["github"]
        attacks = {
            "runners.github.url": {"url": f"https://127.0.0.1:{listener.port}/evil-org"},
            "runners.github.tls": {"tls": {"insecure_skip_verify": True}},
            "runners.github.token_path": {"token_path": token_file, "app_client_id": None,
                                          "app_installation_id": None, "app_private_key_path": None},
        }
        for key, change in attacks.items():
            changed = {**github, **change}
            changed = {k: v for k, v in changed.items() if v is not None}
            status, answer = door.call("PUT", "/api/runners/settings",
                                       {"settings": {**data, "github": changed}, "stamp": stamp}, user=users["tuner"])
            assert status == 400 and key in answer["errors"], (key, answer)
        # the listener, the webhook listener and metrics are root's too
        for key, change in (("runners.webhook.listen", {"webhook": {"listen": "0.0.0.0:2222"}}),
                            ("runners.metrics", {"metrics": {"enable": True, "listen": "0.0.0.0:9102"}})):
            status, answer = door.call("PUT", "/api/runners/settings",
                                       {"settings": {**data, **change}, "stamp": stamp}, user=users["tuner"])
            assert status == 400 and key in answer["errors"], (key, answer)
        time.sleep(2)
        assert listener.hits == 0
        # root (the CLI on the node) may
        status, answer = door.call("POST", "/api/runners/settings/validate",
                                   {"settings": {**data, "github": {**github, "tls": {"insecure_skip_verify": True}}}})
        assert status == 200 and answer["data"]["valid"], answer
    finally:
        listener.close()


def test_a_new_url_needs_its_secret_entered_again(runners):
    stack, door, users = runners
    data, stamp = settings_of(door)
    url = data["github"]["url"].replace("my-org", "other-org")
    body = {"settings": {**data, "github": {**data["github"], "url": url}}, "stamp": stamp}
    status, answer = door.call("POST", "/api/runners/settings/validate", body, user=users["tuner"])
    assert status == 200 and not answer["data"]["valid"] and "runners.github.url" in answer["data"]["errors"]
    from runners_helpers import app_key
    from cryptography.hazmat.primitives import serialization
    pem = app_key().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()).decode()
    status, answer = door.call("POST", "/api/runners/settings/validate",
                               {**body, "secrets": {"github.app_private_key": pem}}, user=users["tuner"])
    assert status == 200 and answer["data"]["valid"], answer


def test_a_template_needs_the_callers_own_clone_privilege(runners):
    """Sys.Modify alone must not make Keel's token clone a VM the caller may not clone."""
    stack, door, users = runners
    data, stamp = settings_of(door)
    new_set = {"name": "keel-c2-m2", "max_runners": 1,
               "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "2GiB", "template": 100}}]}
    body = {"settings": {**data, "scale_sets": data["scale_sets"] + [new_set]}, "stamp": stamp}
    status, answer = door.call("POST", "/api/runners/settings/validate", body, user=users["tuner"])
    assert status == 200 and not answer["data"]["valid"], answer
    assert any("/vms/100" in v and "VM.Clone" in v for v in answer["data"]["errors"].values()), answer
    status, answer = door.call("POST", "/api/runners/settings/validate", body, user=users["cloner"])
    assert status == 200 and answer["data"]["valid"], answer


@pytest.mark.parametrize("body", [
    {"settings": {"providers": True}},
    {"secrets": {"webhook.secret": "whsec-\ud800-0123456789abcdef"}},
    {"settings": {"github": []}},
])
def test_bad_runner_settings_are_400s(runners, body):
    stack, door, users = runners
    raw = json.dumps(body).encode()                     # the lone surrogate as JSON's \ud800
    status, answer = door.call("PUT", "/api/runners/settings", raw=raw, user=users["tuner"])
    assert status == 400, answer
    assert "\ud800" not in json.dumps(answer)
