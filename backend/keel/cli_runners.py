"""The runners' commands: ``keel runners run|status|events|pause|resume|drain`` and
``keel import-rungar``.

``keel.cli`` declares them through ``add_parsers``; each takes the parsed arguments and
the CLI's ``Env`` and returns an exit status.  Until the engine hosts the runner service,
``keel runners run`` runs its loop in the foreground (Ctrl-C stops it cleanly: runners
being created or removed are carried to a resting point, sessions are closed), and
``keel runners status`` reads what that loop last wrote to Keel's database.
``keel runners pause|resume|drain NAME`` asks the engine when it runs on this node (it
acts on the leader, or writes the control where the leader reads it), else writes it to
the database for ``keel runners run``.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from keel.errors import ExitStatus, InvalidError


def add_parsers(sub: Any, add_connection: Any) -> None:
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--store", metavar="FILE", help="Keel's database (default: $KEEL_STORE, "
                       "/var/lib/keel/keel.db, or ~/.local/state/keel/keel.db)")
    runners = sub.add_parser("runners", help="GitHub Actions runners: run the loop, show their state",
                             description="Ephemeral GitHub Actions runners as VMs (docs/runners.md).")
    rsub = runners.add_subparsers(dest="runners_command", metavar="SUBCOMMAND")
    run = rsub.add_parser("run", parents=[store], help="run the runners' loop in the foreground (Ctrl-C stops)")
    add_connection(run)
    run.add_argument("--once", action="store_true", help="one reconcile pass, then stop")
    status = rsub.add_parser("status", parents=[store], help="scale sets, providers, runners and recent jobs")
    status.add_argument("--json", action="store_true", help="print JSON")
    events = rsub.add_parser("events", parents=[store], help="what happened to runners, and why")
    events.add_argument("--limit", type=int, default=50)
    events.add_argument("--kind", help="only this kind (created, removed, refused, adopted, ...)")
    events.add_argument("--json", action="store_true", help="print JSON")

    verbs = {"pause": "no new runners, idle ones go, busy ones finish; GitHub is told there is no room",
             "resume": "undo pause or drain",
             "drain": "runners for the jobs it has, then none; GitHub is given no more room"}
    for verb, text in verbs.items():
        control = rsub.add_parser(verb, parents=[store], help=f"{verb} a scale set now: {text}")
        control.add_argument("name", metavar="SCALE_SET")
        control.add_argument("--config", metavar="FILE", help="Keel's config (to find the engine)")

    imp = sub.add_parser("import-rungar", help="convert a Rungar config to Keel's runners: section",
                         description="Print the runners: section of Keel's config equivalent to a "
                                     "Rungar config file, with comments on every difference. Secrets "
                                     "are not copied. See docs/runners.md.")
    imp.add_argument("file", metavar="FILE", help="Rungar's config (/etc/rungar/config.yaml)")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


def _store_path(args: argparse.Namespace, env: Any) -> Path:
    from keel.store import default_path
    return Path(args.store) if args.store else default_path(env.environ)


def cmd_runners(args: argparse.Namespace, env: Any) -> int:
    command = getattr(args, "runners_command", None)
    if command == "run":
        return _run(args, env)
    if command == "status":
        return _status(args, env)
    if command == "events":
        return _events(args, env)
    if command in ("pause", "resume", "drain"):
        return _control(args, env)
    env.stdout.write("usage: keel runners {run,status,events,pause,resume,drain} ...\n")
    return ExitStatus.USAGE


def _run(args: argparse.Namespace, env: Any) -> int:
    from keel.cli import connect_with_config
    from keel.runners.endpoint import Endpoint
    from keel.runners.service import RunnerService

    client, config = connect_with_config(args, env)
    settings = config.runners
    if not settings.configured:
        raise InvalidError(f"{config.source} has no runners: section (docs/runners.md; "
                           f"`keel import-rungar` converts a Rungar config)")
    service = RunnerService(settings, client, _store_path(args, env))
    if args.once:
        try:
            service.reconcile_once()
            _print_status(service.status(), args, env)
        finally:
            service.close()
        return ExitStatus.OK
    endpoints = []
    try:
        if settings.metrics.enable:
            endpoints.append(Endpoint(service, settings.metrics.listen, ("metrics",)).start())
        if settings.webhook.enabled:
            same = settings.metrics.enable and settings.webhook.listen == settings.metrics.listen
            if same:
                endpoints[0].paths = ("metrics", "webhook")
            else:
                endpoints.append(Endpoint(service, settings.webhook.listen, ("webhook",)).start())
    except OSError as err:
        service.close()
        raise InvalidError(f"cannot listen for metrics or webhooks: {err.strerror}") from None
    stop = threading.Event()

    def interrupted(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        env.stderr.write("Stopping: no new runners; carrying the ones in flight to a resting point "
                         "(Ctrl-C again to stop at once).\n")
        env.stderr.flush()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, interrupted)
    names = ", ".join(s.name for s in settings.scale_sets)
    where = "".join(f"; {'/'.join(e.paths)} on {e.url}" for e in endpoints)
    env.stderr.write(f"keel runners: {len(settings.scale_sets)} scale set(s) ({names}){where}; Ctrl-C stops\n")
    env.stderr.flush()
    try:
        service.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for endpoint in endpoints:
            endpoint.stop()
        service.close()
    env.stderr.write("keel runners: stopped\n")
    return ExitStatus.OK


def _read_status(args: argparse.Namespace, env: Any) -> dict[str, Any] | None:
    from keel.runners.store import RunnerStore
    path = _store_path(args, env)
    if not path.exists():
        return None
    store = RunnerStore(path)
    try:
        return store.get("status")
    finally:
        store.close()


def _status(args: argparse.Namespace, env: Any) -> int:
    status = _read_status(args, env)
    if status is None:
        env.stderr.write("keel: no runner state yet: `keel runners run` (or the engine) writes it\n")
        return ExitStatus.NOT_FOUND
    _print_status(status, args, env)
    return ExitStatus.OK


def _print_status(status: dict[str, Any], args: argparse.Namespace, env: Any) -> None:
    from keel.runners.status import render
    if getattr(args, "json", False):
        json.dump(status, env.stdout, indent=2, sort_keys=True)
        env.stdout.write("\n")
    else:
        env.stdout.write(render(status, time.time()))


def _events(args: argparse.Namespace, env: Any) -> int:
    from keel.runners.store import RunnerStore
    path = _store_path(args, env)
    if not path.exists():
        env.stderr.write("keel: no runner events yet\n")
        return ExitStatus.NOT_FOUND
    store = RunnerStore(path)
    try:
        events = store.events(args.limit, args.kind)
    finally:
        store.close()
    if args.json:
        json.dump(events, env.stdout, indent=2)
        env.stdout.write("\n")
        return ExitStatus.OK
    for e in reversed(events):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["t"]))
        who = " ".join(x for x in (e["scale_set"], e["provider"], e["runner"]) if x)
        env.stdout.write(f"{when}  {e['kind']:<20} {who}  {e['detail']}\n")
    return ExitStatus.OK


WHAT_IT_DOES = {"pause": "paused: no new runners; idle ones go, busy ones finish their jobs; GitHub is "
                         "told it has no room",
                "resume": "resumed: runners come as jobs do",
                "drain": "draining: runners for the jobs it has, then none; GitHub is given no more room"}


def _control(args: argparse.Namespace, env: Any) -> int:
    import getpass
    import os

    from keel.cli_engine import engine_for
    action, name = args.runners_command, args.name
    who = f"{getpass.getuser()}@{os.uname().nodename} (keel runners {action})"
    engine = None if args.store else engine_for(args, env)
    if engine is not None:
        answer = engine.call("POST", f"/api/runners/scale-sets/{quote(name, safe='')}/{action}", {})
        where = "" if answer.get("applied") else \
            f" (the leader, {answer.get('leader_node') or 'no node yet'}, acts on it within seconds)"
        env.stdout.write(f"{name}: {WHAT_IT_DOES[action]}{where}\n")
        return ExitStatus.OK
    from keel.runners.shared import Shared
    from keel.runners.store import RunnerStore
    store = RunnerStore(_store_path(args, env))
    try:
        status = store.get("status") or {}
        known = [s["name"] for s in status.get("scale_sets", [])]
        if known and name not in known:
            raise InvalidError(f"no scale set named {name!r} (the scale sets are {', '.join(known)})")
        Shared(store).set_control(name, action, who, time.time())
    finally:
        store.close()
    env.stdout.write(f"{name}: {WHAT_IT_DOES[action]} (keel runners run on this database acts on it at once)\n")
    return ExitStatus.OK


def cmd_import_rungar(args: argparse.Namespace, env: Any) -> int:
    from keel.cli import write_converted
    from keel.importers.rungar import import_file
    return write_converted(import_file(args.file), args, env)


COMMANDS = {"runners": cmd_runners, "import-rungar": cmd_import_rungar}
