# SPDX-License-Identifier: AGPL-3.0-or-later
"""The Debian package on this machine (`make test-package`, root on Debian 12 or 13): install
with apt, the files, the units, an engine round on Debian's python3, the web UI line in a
PVE 8- then 9-shaped index.html.tpl (install, trigger, upgrade, reinstall, remove), and a
purge that leaves nothing behind.  The machine is put back as it was even when a step fails.

Not part of `make test` (setup.cfg ignores tests/package): it installs packages, makes
system users and needs root.  Every command it runs is printed."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
BUILT_SOURCE = ROOT / "build" / "deb" / "pve-keel"       # what `make deb` built from
FIXTURES = ROOT / "tests" / "fixtures" / "pve-ui"
TEMPLATE = Path("/usr/share/pve-manager/index.html.tpl")
DUMMY = "keel-test-pve-template"                         # ships TEMPLATE, as pve-manager does
PATH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
SITE = Path("/usr/lib/python3/dist-packages")
MARK = b"<!-- pve-keel -->"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="installs packages: run as root (make test-package)"),
    pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs a Debian machine"),
]


def say(text: str) -> None:
    print(f"\n[test-package] {text}", flush=True)


def sh(*cmd: str, check: bool = True, env: dict[str, str] | None = None, quiet: bool = False,
       **kwargs: Any) -> subprocess.CompletedProcess:
    """Run a command with Debian's PATH (no venv, no pyenv, no PYTHONPATH), printing it."""
    print(f"$ {shlex.join(cmd)}", flush=True)
    deadline = time.monotonic() + 300
    while True:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**PATH_ENV, **(env or {})},
                              cwd="/", **kwargs)
        output = (done.stdout + done.stderr).strip()
        # Another apt or dpkg run on this machine holds dpkg's lock: wait for it.
        if not (done.returncode != 0 and cmd[0] in ("apt-get", "dpkg", "dpkg-trigger")
                and re.search(r"Could not get lock|status database is locked|frontend lock", output) and time.monotonic() < deadline):
            break
        print("  (dpkg is locked by another process: waiting)", flush=True)
        time.sleep(3)
    if output and not quiet:
        lines = output.splitlines()
        print("\n".join(("  " + line) for line in lines[-25:]), flush=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} exited with {done.returncode}:\n{output}")
    return done


def installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.endswith(" installed")


def version_of(deb: Path) -> str:
    return sh("dpkg-deb", "-f", str(deb), "Version", quiet=True).stdout.strip()


def our_lines(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines(keepends=True) if MARK in line]


# -- the packages the test installs ------------------------------------------------------------

def build_dummy(work: Path, version: str, fixture: Path) -> Path:
    """A package that ships index.html.tpl, as pve-manager does (its upgrades fire our trigger)."""
    root = work / f"{DUMMY}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {DUMMY}\nVersion: {version}\nArchitecture: all\nMaintainer: Keel tests <tests@keel.invalid>\n"
        f"Description: index.html.tpl shaped like Proxmox VE's, for pve-keel's package test\n")
    target = root / TEMPLATE.relative_to("/")
    target.parent.mkdir(parents=True)
    target.write_bytes(fixture.read_bytes())
    deb = work / f"{DUMMY}_{version}_all.deb"
    sh("dpkg-deb", "--root-owner-group", "--build", str(root), str(deb))
    return deb


def build_bumped(work: Path, version: str) -> Path:
    """The same sources as `make deb`'s, with a changelog entry for `version` on top."""
    source = work / "pve-keel"
    shutil.copytree(BUILT_SOURCE, source, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", ".pybuild", "build"))
    changelog = source / "debian" / "changelog"
    stamp = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
    changelog.write_text(f"pve-keel ({version}) bookworm; urgency=medium\n\n"
                         f"  * Test upgrade (tests/package).\n\n"
                         f" -- Keel tests <tests@keel.invalid>  {stamp}\n\n" + changelog.read_text())
    done = subprocess.run(["dpkg-buildpackage", "-b", "-us", "-uc", "--no-sign"], cwd=source,
                          capture_output=True, text=True, env=PATH_ENV)
    print(f"$ (cd {source} && dpkg-buildpackage -b -us -uc --no-sign)  -> exit {done.returncode}", flush=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return work / f"pve-keel_{version}_all.deb"


# -- the machine, put back at the end ------------------------------------------------------------

class Machine:
    def __init__(self, deb: Path, work: Path, with_template: bool):
        self.deb = deb
        self.version = version_of(deb)
        self.work = work
        self.with_template = with_template
        self.processes: list[subprocess.Popen] = []

    def apt_install(self, deb: Path, *extra: str) -> subprocess.CompletedProcess:
        return sh("apt-get", "install", "-y", "--no-install-recommends", *extra, str(deb))

    def template(self) -> bytes:
        return TEMPLATE.read_bytes()

    def restore(self) -> None:
        say("putting the machine back: stop what the test started, purge pve-keel and the test template")
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        if installed("pve-keel") or sh("dpkg-query", "-W", "pve-keel", check=False, quiet=True).returncode == 0:
            sh("apt-get", "purge", "-y", "pve-keel", check=False)
        if sh("dpkg-query", "-W", DUMMY, check=False, quiet=True).returncode == 0:
            sh("dpkg", "--purge", DUMMY, check=False)
        shutil.rmtree(self.work, ignore_errors=True)


@pytest.fixture(scope="module")
def machine() -> Iterator[Machine]:
    debs = sorted(DIST.glob("pve-keel_*_all.deb"))
    if not debs:
        pytest.fail("no dist/pve-keel_*_all.deb: run `make test-package` (it runs `make deb` first)")
    if installed("pve-keel") or sh("dpkg-query", "-W", "pve-keel", check=False, quiet=True).returncode == 0:
        pytest.skip("pve-keel is installed on this machine already: the test would remove it")
    real_template = TEMPLATE.exists() and sh("dpkg-query", "-S", str(TEMPLATE), check=False,
                                             quiet=True).stdout.split(":")[0] != DUMMY
    if real_template:
        say(f"{TEMPLATE} belongs to a real pve-manager here: the template steps are skipped")
    work = Path(tempfile.mkdtemp(prefix="keel-package-"))
    os.chmod(work, 0o755)                           # keel-web (another user) reads its config here
    m = Machine(debs[-1], work, with_template=not real_template)
    try:
        yield m
    finally:
        m.restore()


# -- the steps, in order ----------------------------------------------------------------------------

def test_lintian_finds_no_error_or_warning(machine: Machine):
    say("lintian on the package: no error, no warning (overrides carry their reason)")
    done = sh("lintian", "--fail-on", "error,warning", "-I", str(machine.deb), check=False)
    assert done.returncode == 0
    assert not re.search(r"^[EW]: ", done.stdout, re.M), done.stdout


def test_apt_installs_it_with_every_dependency_from_debian(machine: Machine):
    say("apt resolves every dependency from Debian's archive, even for a machine with nothing installed "
        "(a simulation against an empty dpkg status)")
    empty = machine.work / "empty-status"
    empty.write_text("")
    done = sh("apt-get", "install", "--simulate", "--no-install-recommends", "-o", f"Dir::State::status={empty}",
              str(machine.deb), quiet=True)
    planned = re.findall(r"^Inst (\S+) \((\S+) (.*?) \[\w+\]\)$", done.stdout, re.M)
    print(f"  {len(planned)} packages would be installed; pve-keel's own Depends:")
    depends = sh("dpkg-deb", "-f", str(machine.deb), "Depends", quiet=True).stdout
    names = {dep.split("|")[0].split()[0].split(":")[0] for dep in depends.split(",")}
    origin = {name: where for name, _, where in planned}
    for name in sorted(names):
        print(f"    {name}: {origin.get(name, '(provided by another package)')}")
    assert origin.pop("pve-keel") == "local-deb"
    assert origin and all(re.match(r"Debian(-Security)?:", where) for where in origin.values()), origin
    assert names - {"python3", "systemd"} <= set(origin), names - set(origin)
    say("apt-get install ./pve-keel_*.deb, on a machine without Proxmox VE (yet)")
    done = machine.apt_install(machine.deb)
    assert installed("pve-keel")
    if not Path("/etc/pve/local").exists():
        assert "this is not a Proxmox VE node: missing" in done.stdout
        assert "the cluster file system /etc/pve (pve-cluster)" in done.stdout
    if machine.with_template:
        assert "missing pve-manager's /usr/share/pve-manager/index.html.tpl" in done.stdout
        assert "index.html.tpl not found: Proxmox VE's web UI (pve-manager) is not installed here" in done.stdout
        assert not TEMPLATE.exists()


def test_files_users_and_directories_are_where_they_should_be(machine: Machine):
    say("files, users and directories")
    listed = set(sh("dpkg", "-L", "pve-keel", quiet=True).stdout.split())
    units = Path("/lib/systemd/system") if Path("/lib/systemd/system/keel-web.service").exists() \
        else Path("/usr/lib/systemd/system")
    for path in ["/usr/bin/keel", f"{SITE}/keel/__init__.py", f"{SITE}/keel/cli.py",
                 f"{SITE}/keel/sim/scenarios/demo.yaml", f"{SITE}/keel/sim/data/pve-api-9.1.json.gz",
                 "/usr/share/pve-manager/js/keel.js", "/usr/share/pve-keel/keel-inject",
                 "/usr/lib/sysusers.d/pve-keel.conf", "/usr/lib/tmpfiles.d/pve-keel.conf",
                 "/usr/share/man/man1/keel.1.gz", "/usr/share/doc/pve-keel/examples/keel.yaml",
                 "/usr/share/doc/pve-keel/copyright", "/usr/share/doc/pve-keel/packaging.md",
                 "/usr/share/doc/pve-keel/README.md", "/usr/share/doc/pve-keel/service.md"]:
        if path.endswith(".md"):                       # dh_compress gzips the longer ones
            path = next((p for p in (path, path + ".gz") if p in listed), path)
        assert path in listed and Path(path).exists(), path
    for unit in ("keel-engine.service", "keel-web.service"):
        assert (units / unit).exists() and any(p.endswith("/" + unit) for p in listed), unit
    assert not any("/tests/" in p or p.endswith("/tests") for p in listed)
    assert (BUILT_SOURCE / "build" / "pve-ui" / "keel.js").read_bytes() == \
        Path("/usr/share/pve-manager/js/keel.js").read_bytes()
    assert os.access("/usr/share/pve-keel/keel-inject", os.X_OK)
    triggers = Path("/var/lib/dpkg/info/pve-keel.triggers").read_text()
    assert "interest-noawait /usr/share/pve-manager/index.html.tpl" in triggers
    if shutil.which("man"):
        assert sh("man", "-w", "keel", quiet=True).stdout.strip().endswith("keel.1.gz")
    sh("dpkg", "-V", "pve-keel")                       # nothing the package ships was changed
    web = pwd.getpwnam("keel-web")
    assert web.pw_shell == "/usr/sbin/nologin" and web.pw_dir == "/nonexistent"
    assert "keel-web" in grp.getgrnam("keel").gr_mem
    lib, run = os.stat("/var/lib/keel"), os.stat("/run/keel")
    assert (stat.S_IMODE(lib.st_mode), lib.st_uid) == (0o700, 0)
    assert (stat.S_IMODE(run.st_mode), run.st_gid) == (0o750, grp.getgrnam("keel").gr_gid)
    assert not Path("/etc/pve").exists(), "the maintainer scripts never write to /etc/pve"


def test_systemd_accepts_the_units(machine: Machine):
    say("systemd-analyze verify (no PID 1 systemd needed), and keel-web's exposure")
    units = [str(p) for p in (Path("/lib/systemd/system/keel-engine.service"),
                              Path("/lib/systemd/system/keel-web.service")) if p.exists()] or \
        ["/usr/lib/systemd/system/keel-engine.service", "/usr/lib/systemd/system/keel-web.service"]
    done = sh("systemd-analyze", "verify", *units)
    assert (done.stdout + done.stderr).strip() == ""
    web = Path(units[1]).read_text()
    for line in ("User=keel-web", "SupplementaryGroups=keel www-data", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n",
                 "InaccessiblePaths=-/etc/pve/priv", "ExecStart=/usr/bin/keel web --config /etc/pve/keel/keel.yaml"):
        assert line in web, line
    security = sh("systemd-analyze", "security", "--offline=yes", units[1], quiet=True).stdout
    level = float(re.search(r"Overall exposure level for keel-web.service: ([0-9.]+)", security).group(1))
    print(f"  keel-web exposure level: {level}")
    assert level <= 2.0


def test_keel_runs_on_debians_python(machine: Machine):
    say("/usr/bin/keel --version, and `import keel` is the installed package")
    assert sh("/usr/bin/keel", "--version").stdout.strip() == f"keel {machine.version.split('+')[0]}"
    where = sh("/usr/bin/python3", "-c", "import keel, flask, proxmoxer, gunicorn; print(keel.__file__)").stdout
    assert where.strip() == f"{SITE}/keel/__init__.py"
    first = Path("/usr/bin/keel").read_text().splitlines()[0]
    assert first == "#! /usr/bin/python3" or first == "#!/usr/bin/python3"


def as_the_unit(unit: Path, cmd: list[str]) -> list[str]:
    """`cmd` with the identity and limits the unit gives its process (setpriv: no systemd here):
    User, Group, SupplementaryGroups, NoNewPrivileges, an empty CapabilityBoundingSet."""
    keys: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            keys[key.strip()] = value.strip()
    wrapped = ["setpriv", f"--reuid={keys['User']}", f"--regid={keys['Group']}",
               f"--groups={','.join(keys['SupplementaryGroups'].split())}"]
    if keys.get("NoNewPrivileges") == "yes":
        wrapped.append("--no-new-privs")
    if "CapabilityBoundingSet" in keys and keys["CapabilityBoundingSet"] == "":
        wrapped += ["--bounding-set=-all", "--inh-caps=-all"]
    return wrapped + ["--", *cmd]


def _start(machine: Machine, cmd: list[str], log: Path) -> subprocess.Popen:
    print(f"$ {shlex.join(cmd)} > {log} &", flush=True)
    handle = open(log, "w")
    process = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=PATH_ENV, cwd="/",
                               start_new_session=True)
    handle.close()
    machine.processes.append(process)
    return process


def _wait(what: str, predicate: Any, process: subprocess.Popen, log: Path, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen:\n{log.read_text()[-3000:]}")


def test_an_engine_round_and_keel_web_as_its_own_user_against_keel_sim(machine: Machine):
    say("keel sim, keel engine (root) and keel web (user keel-web) from the package, on loopback")
    work = machine.work / "stack"
    work.mkdir()
    os.chmod(work, 0o755)
    sim_log = work / "sim.log"
    print(f"$ /usr/bin/keel sim --scenario {SITE}/keel/sim/scenarios/demo.yaml --port 0 ... &", flush=True)
    with open(sim_log, "w") as log:
        sim = subprocess.Popen(["/usr/bin/keel", "sim", "--scenario", f"{SITE}/keel/sim/scenarios/demo.yaml",
                                "--port", "0", "--clock-factor", "40", "--tls-dir", str(work / "tls")],
                               stdout=subprocess.PIPE, stderr=log, text=True, env=PATH_ENV,
                               cwd="/", start_new_session=True)
    machine.processes.append(sim)
    line = sim.stdout.readline().strip()
    assert line.startswith("listening on "), sim_log.read_text()
    url = line.split(" ", 2)[2]
    tls = work / "tls"
    os.chmod(tls, 0o755)
    www_data = grp.getgrnam("www-data").gr_gid
    for name in ("sim.crt", "sim.key"):             # as pmxcfs shows pveproxy's certificate and key
        os.chown(tls / name, 0, www_data)
        os.chmod(tls / name, 0o640)
    say("keel setup (as the README says) against the simulator's root@pam: user, role, token, config")
    password = work / "root-password"
    password.write_text("keel-demo\n")
    os.chmod(password, 0o600)
    token, config = work / "priv" / "pve-token", work / "keel.yaml"
    done = sh("/usr/bin/keel", "setup", "--pve-url", url, "--pve-user", "root@pam", "--pve-password-file",
              str(password), "--ca-file", str(tls / "sim.crt"), "--config", str(config), "--token-file", str(token),
              env={"KEEL_STORE": str(work / "setup.db")})
    assert f"config {config}: written" in done.stdout and "role Keel" in done.stdout
    secret = token.read_text().strip()
    assert secret.startswith("keel@pve!keel=") and secret.split("=", 1)[1] not in done.stdout + done.stderr
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600          # root only
    # The node's paths in a temporary directory instead of /run/keel, /var/lib/keel, /etc/pve.
    port = _free_port()
    data = yaml.safe_load(config.read_text())
    assert data["proxmox"]["token_file"] == str(token) and data["balancing"]["enable"] is False
    data["balancing"]["interval"] = "2s"
    data["engine"] = {"socket": str(work / "run" / "engine.sock"), "store": str(work / "keel.db"),
                      "lock": str(work / "lock" / "keel-leader"), "lock_expiry": "4s", "lock_renew": "0.5s",
                      "shared_dir": str(work / "shared"), "node": "pve1", "status_interval": "1s"}
    data["web"] = {"listen": f"127.0.0.1:{port}", "cert": str(tls / "sim.crt"), "key": str(tls / "sim.key")}
    config.write_text(yaml.safe_dump(data))
    os.chown(config, 0, www_data)                   # as pmxcfs shows /etc/pve/keel/keel.yaml
    os.chmod(config, 0o640)
    (work / "run").mkdir(mode=0o750)
    os.chown(work / "run", 0, grp.getgrnam("keel").gr_gid)   # as tmpfiles makes /run/keel

    engine_log = work / "engine.log"
    engine = _start(machine, ["/usr/bin/keel", "engine", "--config", str(config)], engine_log)
    client = Engine(str(work / "run" / "engine.sock"))
    _wait("keel engine answering on its socket", client.available, engine, engine_log)
    sock = os.stat(work / "run" / "engine.sock")
    assert (stat.S_IMODE(sock.st_mode), sock.st_gid) == (0o660, grp.getgrnam("keel").gr_gid)
    status = _wait("keel engine leading", lambda: (s := client.call("GET", "/api/status"))["leader"] and s,
                   engine, engine_log)
    assert status["node"] == "pve1" and status["config"]["error"] is None
    plan = client.call("GET", "/api/plan")
    print(f"  plan: {plan['verdict']}, {len(plan['moves'])} moves, imbalance "
          f"{plan['before']['imbalance']['keel']:.3f}")
    assert plan["verdict"] == "PLANNED" and plan["moves"]
    job = client.call("POST", "/api/apply", {}, user="cli:package-test")
    done = _wait("the apply job ending",
                 lambda: (j := client.call("GET", f"/api/jobs/{job['id']}"))["state"] != "running" and j,
                 engine, engine_log, timeout=180)
    print(f"  job {done['state']}: {done['progress']['ok']}/{done['progress']['total']} migrations")
    assert done["state"] == "done" and done["progress"]["ok"] == done["progress"]["total"] > 0
    assert {m["requested_by"] for m in client.call("GET", "/api/history")["moves"]} == {"cli:package-test"}

    web_log = work / "web.log"
    unit = next(p for p in (Path("/lib/systemd/system/keel-web.service"),
                            Path("/usr/lib/systemd/system/keel-web.service")) if p.exists())
    say(f"keel web with {unit.name}'s user, groups, no new privileges and no capabilities")
    web = _start(machine, as_the_unit(unit, ["/usr/bin/keel", "web", "--config", str(config)]), web_log)

    def web_status() -> Any:
        try:
            return requests.get(f"https://127.0.0.1:{port}/api/status", verify=str(tls / "sim.crt"), timeout=10,
                                headers={"Authorization": f"PVEAPIToken={secret}"})
        except requests.RequestException:
            return None
    answer = _wait("keel web answering", web_status, web, web_log)
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["leader_node"] == "pve1"
    who = _ids_of(f"web --config {config}")
    print(f"  keel web runs as {who}")
    groups = tuple(sorted((grp.getgrnam("keel").gr_gid, grp.getgrnam("www-data").gr_gid)))
    assert who == {(pwd.getpwnam("keel-web").pw_uid, grp.getgrnam("keel-web").gr_gid, groups, 0, True)}, who
    refused = requests.get(f"https://127.0.0.1:{port}/api/status", verify=str(tls / "sim.crt"), timeout=10)
    assert refused.status_code == 401
    for process in (web, engine, sim):
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    sim.stdout.close()


class Engine:
    """keel-engine's local API over its Unix socket (the test imports nothing from keel)."""

    def __init__(self, path: str):
        self.path = path

    def request(self, method: str, path: str, payload: Any = None, user: str | None = None) -> tuple[int, Any]:
        import http.client
        import json
        import socket

        class Connection(http.client.HTTPConnection):
            def connect(conn) -> None:
                conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.sock.settimeout(60)
                conn.sock.connect(self.path)
        conn = Connection("localhost", timeout=60)
        try:
            headers = {"Accept": "application/json", **({"X-Keel-User": user} if user else {})}
            body = None
            if payload is not None:
                body, headers["Content-Type"] = json.dumps(payload).encode(), "application/json"
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def available(self) -> bool:
        try:
            return self.request("GET", "/api/openapi.json")[0] == 200
        except OSError:
            return False

    def call(self, method: str, path: str, payload: Any = None, user: str | None = None) -> Any:
        status, answer = self.request(method, path, payload, user)
        assert status < 400, (method, path, status, answer)
        return answer["data"]


def _ids_of(command: str) -> set[tuple[int, int, tuple[int, ...], int, bool]]:
    """(uid, gid, groups, capability bounding set, no new privileges) of the processes running /usr/bin/keel with `command` (setpriv aside)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (proc / "status").read_text()
        except (OSError, ValueError):
            continue
        if "/usr/bin/keel " + command in argv and not argv.startswith("setpriv"):
            uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
            gid = int(re.search(r"^Gid:\s+(\d+)", status, re.M).group(1))
            groups = tuple(sorted(int(g) for g in re.search(r"^Groups:(.*)$", status, re.M).group(1).split()))
            bounding = int(re.search(r"^CapBnd:\s+([0-9a-f]+)", status, re.M).group(1), 16)
            nnp = re.search(r"^NoNewPrivs:\s+(\d)", status, re.M).group(1) == "1"
            found.add((uid, gid, groups, bounding, nnp))
    return found


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _template_steps(machine: Machine) -> None:
    if not machine.with_template:
        pytest.skip("a real pve-manager owns index.html.tpl here")


def test_the_template_gets_one_line_when_pve_manager_comes_and_on_install(machine: Machine):
    _template_steps(machine)
    say("a PVE 8-shaped index.html.tpl arrives (a dummy package ships it, as pve-manager does): "
        "the trigger adds one marked line right after pvemanagerlib.js")
    machine.pve8 = build_dummy(machine.work, "8.4.0", FIXTURES / "index-pve8.html.tpl")
    assert "Processing triggers for pve-keel" in sh("dpkg", "-i", str(machine.pve8)).stdout
    pristine = (FIXTURES / "index-pve8.html.tpl").read_bytes()

    def one_line() -> None:
        text = machine.template()
        ours = our_lines(text)
        assert len(ours) == 1 and f"/pve2/js/keel.js?ver={machine.version}\"".encode() in ours[0]
        lines = text.splitlines(keepends=True)
        assert b"pvemanagerlib.js" in lines[lines.index(ours[0]) - 1]
        assert b"".join(line for line in lines if line not in ours) == pristine
    one_line()
    assert "loads Keel's plugin (1 line" in sh("/usr/share/pve-keel/keel-inject", "status").stdout
    say("the line taken out by hand, then apt-get install --reinstall: configure adds it")
    sh("/usr/share/pve-keel/keel-inject", "remove")
    assert machine.template() == pristine
    done = machine.apt_install(machine.deb, "--reinstall")
    assert "now loads /pve2/js/keel.js after the pvemanagerlib.js line" in done.stdout
    one_line()


def test_a_trigger_puts_the_line_back_when_the_template_is_replaced(machine: Machine):
    _template_steps(machine)
    say("pve-manager upgrade (dummy 9.0.0 ships a PVE 9-shaped template): dpkg's file trigger re-injects")
    machine.pve9 = build_dummy(machine.work, "9.0.0", FIXTURES / "index-pve9.html.tpl")
    done = sh("dpkg", "-i", str(machine.pve9))
    assert "Processing triggers for pve-keel" in done.stdout
    pristine9 = (FIXTURES / "index-pve9.html.tpl").read_bytes()
    text = machine.template()
    assert len(our_lines(text)) == 1 and b"NodeArch" in text
    assert b"".join(line for line in text.splitlines(keepends=True) if MARK not in line) == pristine9
    say("the template replaced by hand, then dpkg-trigger + dpkg --triggers-only")
    TEMPLATE.write_bytes(pristine9)
    sh("dpkg-trigger", "--no-await", str(TEMPLATE))
    sh("dpkg", "--triggers-only", "pve-keel")
    assert len(our_lines(machine.template())) == 1
    assert installed("pve-keel")


def test_an_upgrade_and_a_reinstall_do_not_duplicate_the_line(machine: Machine):
    bumped_version = machine.version + "+test1"
    say(f"a second version of the package ({bumped_version}), built with a bumped changelog")
    bumped = build_bumped(machine.work / "bumped", bumped_version)
    machine.apt_install(bumped)
    assert sh("dpkg-query", "-W", "-f=${Version}", "pve-keel").stdout == bumped_version
    assert sh("/usr/bin/keel", "--version").returncode == 0
    if machine.with_template:
        ours = our_lines(machine.template())
        assert len(ours) == 1 and f"?ver={bumped_version}".encode() in ours[0]
        before = os.stat(TEMPLATE)
        say("reinstall of the same version: the template is not touched")
        machine.apt_install(bumped, "--reinstall")
        after = os.stat(TEMPLATE)
        assert our_lines(machine.template()) == ours
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    say("back to the first version (a downgrade through dpkg): still one line")
    sh("dpkg", "-i", str(machine.deb))
    if machine.with_template:
        ours = our_lines(machine.template())
        assert len(ours) == 1 and f"?ver={machine.version}\"".encode() in ours[0]


def test_remove_restores_the_template_byte_for_byte(machine: Machine):
    say("apt-get remove pve-keel: the template is byte for byte the one pve-manager shipped")
    sh("apt-get", "remove", "-y", "pve-keel")
    assert not Path("/usr/bin/keel").exists() and not Path("/usr/share/pve-manager/js/keel.js").exists()
    if machine.with_template:
        assert machine.template() == (FIXTURES / "index-pve9.html.tpl").read_bytes()
        sh("dpkg", "-V", DUMMY)                        # dpkg agrees: the file is as shipped
    # remove keeps the node's state and users, purge removes them
    assert Path("/var/lib/keel").is_dir()
    assert pwd.getpwnam("keel-web")


def test_purge_leaves_nothing_of_keel_behind(machine: Machine):
    say("apt-get purge pve-keel: nothing of Keel left (dpkg, files, users, groups)")
    sh("apt-get", "purge", "-y", "pve-keel")
    assert sh("dpkg-query", "-W", "pve-keel", check=False, quiet=True).returncode != 0
    assert sh("dpkg", "-L", "pve-keel", check=False).returncode != 0
    if machine.with_template:
        assert machine.template() == (FIXTURES / "index-pve9.html.tpl").read_bytes()
        say(f"purging the test's template package ({DUMMY}) too")
        sh("dpkg", "--purge", DUMMY)
        assert not TEMPLATE.parent.exists(), "/usr/share/pve-manager is left"
    # where a package and its scripts can leave things (not checkouts of Keel, wherever they are)
    system = [d for d in ("/etc", "/usr", "/var", "/opt", "/run", "/boot") if Path(d).is_dir()]
    left = sh("find", *system, "-xdev", "-path", "/var/cache/apt", "-prune", "-o",
              "(", "-name", "*keel*", "-o", "-name", "pve-keel*", ")", "-print",
              check=False).stdout.split()
    assert left == [], left
    for name, lookup in (("keel-web", "passwd"), ("keel-web", "group"), ("keel", "group")):
        assert sh("getent", lookup, name, check=False).returncode == 2, f"{lookup} {name} is still there"
