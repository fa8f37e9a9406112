"""``keel`` as a shell runs it: a separate process whose stdout is a pipe that its reader
closes (``keel status --json | head``), and what ``--version`` and ``--help`` import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import DEMO_TOKEN, python_env
from keel.cli import Env, main

# What the parser (--help, --version, argparse-manpage at build time) must not load: the
# runtime dependencies, and Keel's heavy parts.
HEAVY = ("numpy", "flask", "werkzeug", "proxmoxer", "requests", "urllib3", "gevent", "gunicorn",
         "yaml", "jwt", "cryptography", "sqlite3", "keel.balance", "keel.pve", "keel.engine",
         "keel.runners", "keel.sim", "keel.web", "keel.store", "keel.config")


def keel(*argv: str, environ: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "keel", *argv], env={**python_env(), **(environ or {})},
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_status_json_into_a_pipe_whose_reader_has_gone(shared_sim):
    """`keel status --json | true`: every write fails with EPIPE; quiet, status 0."""
    read, write = os.pipe()
    os.close(read)                         # the reader is gone before keel writes anything
    try:
        process = keel("status", "--json", stdout=write,
                       environ={"KEEL_PVE_URL": shared_sim.url, "KEEL_PVE_TOKEN": DEMO_TOKEN,
                                "KEEL_PVE_CA_FILE": shared_sim.cert})
    finally:
        os.close(write)
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (0, "")


def test_runners_events_json_into_head(tmp_path):
    """`keel runners events --json | head -n 3`: far more than a pipe holds, so keel is still
    writing when head leaves; quiet, status 0 (under pipefail too)."""
    from keel.runners.store import RunnerStore
    store = RunnerStore(tmp_path / "keel.db", max_events=20000)
    try:
        for i in range(5000):
            store.event(1_700_000_000.0 + i, "created", "keel-c2-m4", "pve", f"keel-c2-m4-{i:05d}",
                        "cloned from 9000 on pve1")
    finally:
        store.close()
    command = (f"set -o pipefail; {sys.executable} -m keel runners events --json --limit 5000 "
               f"--store {tmp_path / 'keel.db'} | head -n 3")
    done = subprocess.run(["bash", "-c", command], env=python_env(), capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["[", "  {", '    "id": 5000,']


class _Closed:
    """A stdout whose reader has gone and that has no file descriptor."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stream_without_a_descriptor_that_breaks_is_a_reader_gone():
    err = _StringErr()
    assert main(["--version"], Env(stdout=_Closed(), stderr=err, environ={})) == 0
    assert err.text == ""


class _StringErr:
    text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def _imported_by(argv: list[str]) -> list[str]:
    """The modules `keel ARGV` imports, beyond what the interpreter loaded before it (site's
    .pth files may import a few)."""
    probe = ("import sys\n"
             "before = set(sys.modules)\n"
             "import io, json, contextlib\n"
             "from keel.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    status = main({argv!r})\n"
             "print(json.dumps([status, sorted(set(sys.modules) - before)]))\n")
    done = subprocess.run([sys.executable, "-c", probe], env=python_env(), capture_output=True, text=True,
                          timeout=60, check=True)
    status, modules = json.loads(done.stdout)
    assert status == 0, done.stderr
    return modules


def test_version_and_help_import_neither_the_runtime_nor_keels_heavy_parts():
    """--version and --help stay fast (docs/benchmarks.md), and argparse-manpage builds
    keel(1) from the parser with Python's standard library alone (debian/rules)."""
    for argv in (["--version"], ["--help"], ["plan", "--help"], ["runners", "events", "--help"],
                 ["power", "plan", "--help"]):
        modules = _imported_by(argv)
        heavy = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
        assert heavy == [], (argv, heavy)
        foreign = [m for m in modules if m.split(".")[0] not in sys.stdlib_module_names
                   and m.split(".")[0] != "keel"]
        assert foreign == [], (argv, foreign)
