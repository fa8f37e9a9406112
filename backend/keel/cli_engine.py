"""The balancer's commands when keel-engine runs on this node: they ask it instead of
Proxmox VE, so that only the leader acts and every action is in the engine's history.

``keel plan``/``apply``/``maintenance``/``best-node``/``history`` come here when the
engine's socket (``engine.socket`` in the config) answers, unless ``--direct`` or
explicit connection settings (``--pve-url``, ``KEEL_PVE_URL``, ...) say otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from typing import Any, Callable
from urllib.parse import quote, urlencode

from keel.balance.plan import plan_from_json
from keel.engine.client import EngineClient
from keel.errors import ExitStatus, InvalidError

DIRECT_FLAGS = ("pve_url", "pve_token_file", "pve_user", "pve_password_file")
DIRECT_ENV = ("KEEL_PVE_URL", "KEEL_PVE_TOKEN", "KEEL_PVE_USER")


def engine_for(args: argparse.Namespace, env: Any) -> EngineClient | None:
    """The running engine to ask, or None to talk to PVE directly."""
    if getattr(args, "direct", False) or any(getattr(args, f, None) for f in DIRECT_FLAGS) \
            or any(env.environ.get(k) for k in DIRECT_ENV):
        return None
    from keel.cli import load_config
    try:
        config = load_config(args, env)
    except InvalidError:
        return None
    if not os.path.exists(config.engine.socket):
        return None
    client = EngineClient(config.engine.socket)
    return client if client.available() else None


def plan(engine: EngineClient, args: argparse.Namespace, env: Any, show: Callable[[Any], None]) -> int:
    data = engine.call("GET", "/api/plan" + (f"?method={args.method}" if args.method else ""))
    if args.json:
        _dump(data, env)
    else:
        show(plan_from_json(data))
    return ExitStatus.OK


def apply(engine: EngineClient, args: argparse.Namespace, env: Any, show: Callable[[Any], None],
          confirm: Callable[[str], bool], printer: Callable[[dict], None], who: str) -> int:
    data = engine.call("GET", "/api/plan" + (f"?method={args.method}" if args.method else ""))
    if not args.json:
        show(plan_from_json(data))
    if not data["moves"]:
        if args.json:
            _dump(data, env)
        return ExitStatus.OK
    count = len(data["moves"])
    if not confirm(f"Migrate {count} guest{'' if count == 1 else 's'}?"):
        env.stdout.write("Nothing done.\n")
        return ExitStatus.OK
    job = engine.call("POST", "/api/apply", {"method": args.method} if args.method else {}, user=who)
    return follow(engine, job, env, printer, who)


def maintenance(engine: EngineClient, args: argparse.Namespace, env: Any, confirm: Callable[[str], bool],
                printer: Callable[[dict], None], who: str) -> int:
    if args.action == "list":
        nodes = engine.call("GET", "/api/maintenance")
        if args.json:
            _dump(nodes, env)
        else:
            for node, info in sorted(nodes.items()):
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info["since"]))
                env.stdout.write(f"{node}  since {when}  by {info['requested_by']}\n")
            if not nodes:
                env.stdout.write("No node is in maintenance through Keel.\n")
        return ExitStatus.OK
    if not args.node:
        raise InvalidError(f"keel maintenance {args.action}: name the node")
    path = f"/api/maintenance/{quote(args.node, safe='')}"
    if args.action == "leave":
        engine.call("POST", path, {"action": "leave"}, user=who)
        env.stdout.write(f"{args.node} takes guests again.\n")
        return ExitStatus.OK
    evacuate = not args.no_evacuate
    if evacuate and not confirm(f"Put {args.node} in maintenance and move its guests off?"):
        return ExitStatus.OK
    answer = engine.call("POST", path, {"action": "enter", "evacuate": evacuate}, user=who)
    env.stdout.write(f"{args.node} is in maintenance: Keel moves nothing onto it.\n")
    if answer.get("job") is None:
        return ExitStatus.OK
    env.stdout.write(f"{answer['job']['plan']['reason']}\n")
    return follow(engine, answer["job"], env, printer, who)


def best_node(engine: EngineClient, args: argparse.Namespace, memory: int) -> dict[str, Any]:
    return engine.call("GET", "/api/best-node?" + urlencode({"cores": args.cores, "memory": memory}))


def history(engine: EngineClient, limit: int) -> dict[str, Any]:
    return engine.call("GET", f"/api/history?limit={limit}")


def follow(engine: EngineClient, job: dict[str, Any], env: Any, printer: Callable[[dict], None],
           who: str, poll_s: float = 1.0) -> int:
    """Print a job's events until it ends; the first Ctrl-C cancels it (running migrations
    finish), a second stops watching."""
    since = 0
    cancelled = threading.Event()

    def interrupted(signum: int, frame: Any) -> None:
        if cancelled.is_set():
            raise KeyboardInterrupt
        cancelled.set()
        engine.call("DELETE", f"/api/jobs/{job['id']}", user=who)
        env.stderr.write("Stopping: no new migration starts; waiting for the running ones "
                         "(Ctrl-C again to stop watching; the engine finishes them).\n")

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, interrupted)
    try:
        while True:
            state = engine.call("GET", f"/api/jobs/{job['id']}?since={since}")
            for event in state["events"]:
                if event.get("event") in ("plan", "start", "done", "failed", "not_started", "slow", "power"):
                    printer(event)
            since = state["next"]
            if state["state"] not in ("running", "cancelling"):
                break
            time.sleep(poll_s)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    progress = state["progress"]
    if state["state"] == "cancelled":
        env.stdout.write(f"Stopped after {progress['ok']} of {progress['total']} migrations "
                         f"(cancelled by {state['cancelled_by']}).\n")
        return ExitStatus.ERROR
    if state["state"] == "failed":
        if state.get("error"):
            env.stderr.write(f"keel: the job failed: {state['error']}\n")
        return ExitStatus.TASK_FAILED
    return ExitStatus.OK


def _dump(data: Any, env: Any) -> None:
    json.dump(data, env.stdout, indent=2)
    env.stdout.write("\n")
