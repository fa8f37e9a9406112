"""Every key of the config a web user may change, tried with a path and a URL of theirs.

The caller is an administrator of the cluster through keel-web (every PVE privilege, but
not root on the node).  Each string in the ``runners`` and ``balancing`` sections, and the
keys that name files, hosts and listeners, is set in turn to a file the attacker wants
root to write or read and to a host the attacker listens on.  Whatever keel-engine
accepts, it must never write that file, create a file beside it, or connect to that host.
"""

from __future__ import annotations

import copy
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from runners_helpers import TOKEN, runners_stack

AUTH = {"Authorization": f"PVEAPIToken={TOKEN}"}
# keys that name a file, a host or a listener, besides every string already written
KEYS = ["github.url", "github.token_path", "github.app_private_key_path", "github.tls.ca_file",
        "webhook.secret_path", "webhook.listen", "metrics.listen", "installation",
        "providers.0.url", "providers.0.token_id", "providers.0.token_secret_path", "providers.0.tls.ca_file",
        "providers.0.runner.storage", "providers.0.runner.pool", "providers.0.runner.jit_path",
        "scale_sets.0.runner_group", "scale_sets.0.labels.0"]


class Listener:
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Any]:
    with runners_stack(tmp_path_factory.mktemp("config-keys")) as running:
        yield running


def leaves(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, f"{prefix}{key}.")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from leaves(value, f"{prefix}{index}.")
    elif isinstance(data, str):
        yield prefix.rstrip(".")


def set_key(data: dict, key: str, value: str) -> dict:
    data = copy.deepcopy(data)
    here: Any = data
    parts = key.split(".")
    for part, after in zip(parts, parts[1:]):
        index: Any = int(part) if part.isdigit() else part
        if isinstance(here, dict) and index not in here:
            here[index] = [] if after.isdigit() else {}
        if isinstance(here, list) and index >= len(here):
            here.append([] if after.isdigit() else {})
            index = len(here) - 1
        here = here[index]
    last: Any = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    if isinstance(here, list):
        if last < len(here):
            here[last] = value
        else:
            here.append(value)
    else:
        here[last] = value
    return data


def test_no_key_makes_root_write_read_or_send_where_the_caller_chose(stack, tmp_path):
    trap = tmp_path / "trap"
    trap.mkdir()
    victim = trap / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA admin\n")
    listener = Listener(stack.sim.cert, str(Path(stack.sim.cert).with_name("sim.key")))
    url = f"https://127.0.0.1:{listener.port}/evil-org"
    answer = requests.get(stack.url + "/api/runners/settings", headers=AUTH, verify=stack.sim.cert, timeout=60)
    settings = answer.json()["data"]["settings"]
    balancing = requests.get(stack.url + "/api/config", headers=AUTH, verify=stack.sim.cert,
                             timeout=60).json()["data"]["sections"]["balancing"]
    keys = sorted(set(KEYS) | set(leaves(settings)))
    accepted = []
    for key in keys:
        for value in (str(victim), url, f"127.0.0.1:{listener.port}"):
            stamp = requests.get(stack.url + "/api/runners/settings", headers=AUTH, verify=stack.sim.cert,
                                 timeout=60).json()["data"]["stamp"]
            answer = requests.put(stack.url + "/api/runners/settings", headers=AUTH, verify=stack.sim.cert,
                                  timeout=60, data=json.dumps({"settings": set_key(settings, key, value),
                                                               "stamp": stamp}))
            assert answer.status_code in (200, 400), (key, answer.text)
            if answer.status_code == 200:
                accepted.append((key, value))
    for key in sorted(set(leaves(balancing)) | {"ignore.guests.0", "pin.100.0"}):
        for value in (str(victim), url):
            answer = requests.put(stack.url + "/api/config", headers=AUTH, verify=stack.sim.cert, timeout=60,
                                  data=json.dumps({"balancing": set_key(balancing, key, value)}))
            assert answer.status_code in (200, 400), (key, answer.text)
    time.sleep(5)                                   # the runners restarted with what was accepted
    assert victim.read_text() == "ssh-ed25519 AAAA admin\n"
    assert [p.name for p in trap.iterdir()] == ["authorized_keys"]
    assert listener.hits == 0, accepted
    # what was accepted names nothing root uses as a file or a host (labels, a group name, a
    # path inside the runner VM)
    assert {key for key, _ in accepted} <= {"github.app_client_id", "scale_sets.0.runner_group", "scale_sets.0.labels.0",
                                            "providers.0.runner.jit_path", "installation",
                                            "scale_sets.1.runner_group", "scale_sets.1.labels.0"}, accepted
