"""``keel demo`` (``make demo``): the simulator on the demo cluster, shown as ``keel status``,
then balanced: ``keel plan`` (dry run), ``keel apply --yes`` (the migrations run in the
simulator, its clock sped up so they take seconds), and ``keel status`` again.

With ``--harness DIR`` (``make demo`` gives www/) it then starts keel-engine and keel-web
on the same simulator, keel-web serving the web UI harness, prints its URL and the login,
and runs until Ctrl-C: the Rebalancing and Runners tabs on the simulated cluster."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keel.balance.balancer import make_plan
from keel.balance.executor import Executor
from keel.balance.settings import BalancingSettings
from keel.errors import ExitStatus, InvalidError
from keel.plan_view import render_plan
from keel.pve import snapshot
from keel.pve.client import PveClient, Target
from keel.sim import scenario as sc
from keel.sim.serve import SimServer
from keel.status_view import Style, render
from keel.store import Store

if TYPE_CHECKING:
    from keel.cli import Env

DEMO_SCENARIO = Path(__file__).parent / "sim" / "scenarios" / "demo.yaml"
DEMO_TOKEN = "keel@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f"
CLOCK_FACTOR = 60.0     # a simulated minute per second: a 30-s migration takes half a second


def run_demo(env: "Env", scenario_path: str | None = None, keep_running: bool = False,
             harness: str | None = None, port: int | None = None) -> int:
    path = Path(scenario_path) if scenario_path else DEMO_SCENARIO
    scenario = sc.load(path)
    out = env.stdout
    missing = _harness_missing(harness) if harness else None
    if harness and missing is None and port and not _port_free(port):
        raise InvalidError(f"port {port} (--port) is in use: give another with --port, or stop what listens there")
    handlers = (signal.signal(signal.SIGTERM, _interrupt),     # stop everything on kill as on Ctrl-C
                signal.signal(signal.SIGINT, signal.default_int_handler))   # even if started ignoring it
    try:
        return _run(env, scenario, out, harness, missing, keep_running, port)
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])


def _run(env: "Env", scenario: sc.Scenario, out: Any, harness: str | None, missing: str | None,
         keep_running: bool, port: int | None) -> int:
    server = SimServer(scenario, port=0, clock_factor=CLOCK_FACTOR)
    server.start()
    # One store for the whole demo: the web UI's History shows the migrations of the CLI part.
    with tempfile.TemporaryDirectory(prefix="keel-demo-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            print(f"Keel demo: simulated Proxmox VE cluster {scenario.name!r} "
                  f"({len(scenario.nodes)} nodes, {len(scenario.guests)} guests) at {server.url}\n",
                  file=out)
            target = Target.from_url(server.url, verify=str(server.cert_file)).with_token(DEMO_TOKEN)
            client = PveClient(target)
            started = time.monotonic()
            snap = snapshot.collect(client)
            elapsed = time.monotonic() - started
            style = Style(env.color, env.unicode)
            print("$ keel status --guests", file=out)
            out.write(render(snap, style, show_guests=True))
            print(f"\n(snapshot: {snap.api_calls} API calls in {elapsed * 1000:.0f} ms)", file=out)
            _balance(env, client, snap, style, tmp / "keel.db")
            if harness and missing is None:
                _serve_ui(env, server, Path(harness), tmp, port)
            elif harness or keep_running:
                if missing:
                    print(f"\nThe web UI cannot start: {missing}; everything else runs.", file=out)
                _keep_simulator(env, server)
        except KeyboardInterrupt as stop:
            interrupted = stop.args[0] if isinstance(stop, _Said) else time.monotonic()
            if not isinstance(stop, _Said):
                print("\nStopping the simulator ...", file=out, flush=True)
        else:
            interrupted = None
        finally:
            server.stop()
    if interrupted is not None:
        print(f"Stopped in {time.monotonic() - interrupted:.1f} s.", file=out, flush=True)
    return ExitStatus.OK


def _keep_simulator(env: "Env", server: SimServer) -> None:
    print(f"\nThe simulator keeps running at {server.url} until Ctrl-C. Try, in another terminal:\n"
          f"  KEEL_PVE_URL={server.url} KEEL_PVE_CA_FILE={server.cert_file} \\\n"
          f"  KEEL_PVE_TOKEN='{DEMO_TOKEN}' {CLI_HINT} status --guests\n{ACTIVATE_HINT}",
          file=env.stdout, flush=True)
    while True:
        time.sleep(3600)


def _harness_missing(harness: str) -> str | None:
    """What the web UI part lacks (ExtJS, Font Awesome, the built plugin) and how to get it."""
    from keel.web.harness import Harness
    try:
        Harness.from_dir(harness)
    except InvalidError as err:
        return err.message
    return None


def _balance(env: "Env", client: PveClient, snap: snapshot.Snapshot, style: Style, store_path: Path) -> None:
    """Plan, apply and show the result, as an operator would with the CLI."""
    from keel.cli_balance import _printer
    out = env.stdout
    settings = BalancingSettings()
    print("\n$ keel plan", file=out)
    plan = make_plan(snap, settings)
    out.write(render_plan(plan, style))
    if not plan.moves:
        return
    print(f"\n$ keel apply --yes      (the simulator's clock runs x{CLOCK_FACTOR:g})", file=out, flush=True)
    store = Store(store_path)
    executor = Executor(client, settings, store, requested_by="keel demo",
                        on_event=_printer(env, False), poll_s=0.25)
    result = executor.run(plan)
    failed = [r for r in result.results if not r.ok]
    print(f"{len(result.results) - len(failed)} of {len(plan.moves)} migrations done"
          + (f", {len(failed)} failed" if failed else ""), file=out)
    after = snapshot.collect(client)
    print("\n$ keel status", file=out)
    out.write(render(after, style, show_guests=False))


DEMO_WEB_PORT = 8443


DEMO_ORG = "keel-demo"
DEMO_SCALE_SET = "keel-demo-c2-m4"
DEMO_JOB_EVERY_S = 10.0          # real seconds between the jobs the demo queues on the fake GitHub


def _runners_section(pve_url: str, cert: Path, token_file: Path) -> dict:
    """The runners on the scenario's fake GitHub: one scale set of small runner VMs cloned
    from the demo's template 9000."""
    return {"github": {"url": f"{pve_url}/{DEMO_ORG}", "token_path": str(token_file), "tls": {"ca_file": str(cert)}},
            "providers": [{"name": "pve", "type": "proxmox", "runner": {"template": 9000, "pool": "ci"}}],
            "scale_sets": [{"name": DEMO_SCALE_SET, "max_runners": 3,
                            "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}],
            "reconcile_interval": "5s"}


def _queue_job(server: SimServer, count: int = 1) -> None:
    """A CI job or two on the fake GitHub, now and then, for the Runners tab to follow."""
    fake = server.cluster.github
    if fake is None:
        return
    with server.cluster.lock:
        for _ in range(count):
            fake.queue_job(f"{DEMO_ORG}/app", [DEMO_SCALE_SET], 1200.0, name="build")   # 20 s at x60


def _serve_ui(env: "Env", server: SimServer, harness: Path, tmp: Path, port: int | None) -> None:
    """keel-engine and keel-web (with the harness) on the simulator and the CLI part's store,
    until Ctrl-C."""
    import yaml
    out = env.stdout
    pve_url, cert = server.url, Path(server.cert_file)
    github = server.cluster.github is not None
    token = tmp / "token"
    token.write_text(DEMO_TOKEN + "\n")
    token.chmod(0o600)
    busy = None
    if port is None:
        port = DEMO_WEB_PORT if _port_free(DEMO_WEB_PORT) else _port_free(0)
        busy = None if port == DEMO_WEB_PORT else DEMO_WEB_PORT
    config = tmp / "keel.yaml"
    secrets = tmp / "secrets"
    secrets.mkdir(mode=0o700)
    extra: dict = {}
    if github:
        github_token = secrets / "github-token"
        github_token.write_text(server.cluster.github.spec.tokens[0] + "\n")
        github_token.chmod(0o600)
        extra["runners"] = _runners_section(pve_url, cert, github_token)
    config.write_text(yaml.safe_dump({
        "proxmox": {"url": pve_url, "token_file": str(token), "ca_file": str(cert)},
        "balancing": {"interval": "10s"},
        "engine": {"socket": str(tmp / "engine.sock"), "store": str(tmp / "keel.db"),
                   "lock": str(tmp / "lock" / "keel-leader"), "lock_expiry": "8s", "lock_renew": "2s",
                   "shared_dir": str(tmp / "shared"), "secrets_dir": str(secrets),
                   "node": "pve1", "status_interval": "2s"},
        "web": {"listen": f"127.0.0.1:{port}", "cert": str(cert), "key": str(cert.parent / "sim.key"),
                "www_key": str(cert.parent / "pve-www.key")},
        **extra,
    }))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
    started: list[subprocess.Popen] = []
    try:
        for kind, args in (("engine", []), ("web", ["--harness", str(harness)])):
            log = open(tmp / f"{kind}.log", "w")
            started.append(subprocess.Popen([sys.executable, "-m", "keel", kind, "--config", str(config),
                                             *args], stdout=log, stderr=subprocess.STDOUT, env=environ,
                                            process_group=0))     # its workers with it: see _stop
            log.close()
        _wait_listening(port, started, tmp)
        url = f"https://127.0.0.1:{port}/harness/"
        rule = "=" * (len(url) + 4)
        print(f"\n{rule}\n  {url}\n{rule}\n"
              + (f"(port {busy} is in use by another program, so the web UI is on port {port}; "
                 f"`make demo DEMO_ARGS=\"--port N\"` picks one)\n" if busy else "")
              + f"The web UI on the simulated cluster (keel-engine and keel-web are running):\n"
              f"  log in as root@pam, password keel-demo (auditor@pve, same password, may only read)\n"
              f"  Datacenter -> HA -> Rebalancing and Runners; PVE 8 or 9 layout and a dark theme at the top.\n"
              f"  Your browser warns about the simulator's self-signed certificate: accept it.\n"
              f"The CLI on the same cluster, in another terminal (History shows its moves too):\n"
              f"  export KEEL_CONFIG={config}\n"
              f"  {CLI_HINT} status; {CLI_HINT} plan; {CLI_HINT} apply; {CLI_HINT} history\n"
              f"{ACTIVATE_HINT}\n"
              f"Ctrl-C stops it all.", file=out, flush=True)
        next_job = time.monotonic()
        while all(p.poll() is None for p in started):
            if github and time.monotonic() >= next_job:
                _queue_job(server)
                next_job = time.monotonic() + DEMO_JOB_EVERY_S
            time.sleep(0.5)
        for name, process in zip(("keel-engine", "keel-web"), started):
            if process.poll() is not None:
                log = (tmp / f"{name.removeprefix('keel-')}.log").read_text().strip()
                print(f"{name} stopped (exit status {process.returncode}); the demo ends"
                      + (f". Its log:\n{log}" if log else ""), file=env.stderr)
    except KeyboardInterrupt:
        print("\nStopping keel-web, keel-engine and the simulator ...", file=out, flush=True)
        raise _Said(time.monotonic()) from None
    finally:
        _stop(started)


# The CLI `make demo` installed: .venv/bin/keel, or the ./keel wrapper beside the Makefile.
CLI_HINT = "./keel"
ACTIVATE_HINT = "  (./keel runs .venv/bin/keel; or `. .venv/bin/activate` puts `keel` on your PATH)"
STOP_WITHIN_S = 2.5


def _stop(started: list[subprocess.Popen]) -> None:
    """SIGINT (gunicorn's quick shutdown) to every service still running, SIGKILL to the
    process group of any that has not ended within STOP_WITHIN_S: Ctrl-C ends the demo
    within 5 s.  Each service has a process group of its own (Ctrl-C in the terminal
    reaches the demo alone, which passes it on), so a master killed takes its worker
    with it: a worker outliving its master would finish its shutdown on its own time."""
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_WITHIN_S
    for process in started:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in started:
        _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to what is left of the service's process group, and wait until it is gone."""
    if process.poll() is None:
        process.kill()
        process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    until = time.monotonic() + 2
    while time.monotonic() < until and _group_runs(process.pid):
        time.sleep(0.05)


def _group_runs(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs.  A killed worker whose master is gone
    is a zombie until init reaps it, which may take seconds: it runs no more, so it does not
    count (os.killpg(pgid, 0) would)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue                       # gone while we looked
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


class _Said(KeyboardInterrupt):
    """Ctrl-C, and what it stops has been said; its argument is when (time.monotonic())."""


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _port_free(port: int) -> int:
    """``port`` if it can be bound on 127.0.0.1 (0: any free one), else 0."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
        return s.getsockname()[1]


def _wait_listening(port: int, started: list[subprocess.Popen], tmp: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in started):
            break
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0 and (tmp / "engine.sock").exists():
                return
        time.sleep(0.2)
    logs = "".join((tmp / f"{k}.log").read_text() for k in ("engine", "web") if (tmp / f"{k}.log").exists())
    raise RuntimeError(f"keel-engine or keel-web did not start:\n{logs}")
