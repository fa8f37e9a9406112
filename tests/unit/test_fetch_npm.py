"""tools/fetch-npm: what www/package-lock.json pins, from an npm registry (here one on
127.0.0.1), installed only if its integrity hash matches, without node (issue 18)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import importlib.machinery
import importlib.util
import io
import json
import tarfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fetch-npm"


def load_tool():
    loader = importlib.machinery.SourceFileLoader("fetch_npm", str(TOOL))
    spec = importlib.util.spec_from_loader("fetch_npm", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


fetch_npm = load_tool()


def tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


@pytest.fixture
def registry(monkeypatch) -> Iterator[dict[str, bytes]]:
    """A registry on 127.0.0.1 serving {path: bytes}; npm_config_registry points at it."""
    served: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{server.server_address[1]}/")
    yield served
    server.shutdown()
    server.server_close()


def project(tmp_path: Path, packages: dict[str, tuple[str, str]]) -> Path:
    lock = {"name": "x", "lockfileVersion": 3, "packages": {"": {"name": "x"}, **{
        f"node_modules/{name}": {"version": version, "integrity": hash_, "dev": True}
        for name, (version, hash_) in packages.items()}}}
    (tmp_path / "package-lock.json").write_text(json.dumps(lock))
    return tmp_path


def test_a_locked_package_is_fetched_checked_and_unpacked(registry, tmp_path):
    data = tarball({"package/package.json": b'{"version": "6.2.0"}', "package/build/ext-all.js": b"Ext = {};"})
    registry["/extjs-gpl/-/extjs-gpl-6.2.0.tgz"] = data
    www = project(tmp_path, {"extjs-gpl": ("6.2.0", integrity(data))})
    assert fetch_npm.main([str(www)]) == 0
    assert (www / "node_modules" / "extjs-gpl" / "build" / "ext-all.js").read_bytes() == b"Ext = {};"
    registry.clear()                                   # there already: nothing is fetched again
    assert fetch_npm.main([str(www)]) == 0


def test_a_tarball_that_does_not_match_its_integrity_hash_is_not_installed(registry, tmp_path, capsys):
    registry["/extjs-gpl/-/extjs-gpl-6.2.0.tgz"] = tarball({"package/build/ext-all.js": b"evil"})
    good = integrity(tarball({"package/build/ext-all.js": b"Ext = {};"}))
    www = project(tmp_path, {"extjs-gpl": ("6.2.0", good)})
    assert fetch_npm.main([str(www)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "does not match the integrity hash in package-lock.json" in line
    assert not (www / "node_modules" / "extjs-gpl").exists()


def test_a_registry_that_cannot_be_reached_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    www = project(tmp_path, {"extjs-gpl": ("6.2.0", integrity(b"x"))})
    assert fetch_npm.main([str(www)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("fetch-npm: cannot fetch http://127.0.0.1:9/extjs-gpl/-/extjs-gpl-6.2.0.tgz")


@pytest.mark.parametrize("name", ["package/../../escape.js", "/etc/passwd"])
def test_a_member_outside_the_package_is_refused(registry, tmp_path, name):
    data = tarball({name: b"x"})
    registry["/p/-/p-1.0.0.tgz"] = data
    www = project(tmp_path, {"p": ("1.0.0", integrity(data))})
    assert fetch_npm.main([str(www)]) == 1
    assert not (tmp_path.parent / "escape.js").exists() and not (www / "node_modules" / "p").exists()


def test_the_harness_lock_pins_extjs_and_font_awesome_with_sha512():
    pinned = fetch_npm.locked(TOOL.parents[1] / "www")
    assert {name for name, *_ in pinned} == {"extjs-gpl", "font-awesome"}
    assert all(hash_.startswith("sha512-") for _, _, hash_, _ in pinned)
