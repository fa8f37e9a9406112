"""The balancer's commands: ``plan``, ``apply``, ``maintenance``, ``best-node``, ``balance``
and ``history``.  ``keel.cli`` declares them; each takes the parsed arguments and the
CLI's ``Env`` and returns an exit status."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from keel import words
from keel.errors import ExitStatus, InvalidError, NotFoundError
from keel.units import format_bytes, format_duration, parse_size

if TYPE_CHECKING:
    from keel.balance.plan import Plan
    from keel.store import Store

# The balancer (numpy), the executor (proxmoxer) and the store are imported by the commands
# that use them: `keel --help` and `keel --version` build this parser and import none of them.


def add_parsers(sub: Any, add_connection: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_connection(common)
    common.add_argument("--store", metavar="FILE", help="Keel's history database "
                        "(default: $KEEL_STORE, /var/lib/keel/keel.db, or ~/.local/state/keel/keel.db)")
    common.add_argument("--method", choices=("keel", "bruteforce", "topsis"), help="override the config")
    common.add_argument("--json", action="store_true", help="print JSON")
    common.add_argument("--direct", action="store_true",
                        help="talk to Proxmox VE directly even when keel-engine runs on this node")

    plan = sub.add_parser("plan", parents=[common], help="show what Keel would move, and why (dry run)")
    plan.add_argument("-v", "--verbose-plan", action="store_true", dest="verbose_plan",
                      help="list every guest left alone")

    apply = sub.add_parser("apply", parents=[common], help="plan, then migrate (asks first)")
    apply.add_argument("-y", "--yes", action="store_true", help="do not ask")

    maint = sub.add_parser("maintenance", parents=[common], help="empty a node, or let it take guests again")
    maint.add_argument("action", choices=("enter", "leave", "list"))
    maint.add_argument("node", nargs="?")
    maint.add_argument("-y", "--yes", action="store_true", help="do not ask")
    maint.add_argument("--no-evacuate", action="store_true", help="only mark the node")

    best = sub.add_parser("best-node", parents=[common], help="the node Keel would pick for a new guest")
    best.add_argument("--cores", type=float, required=True)
    best.add_argument("--memory", required=True, help="e.g. 8GiB")

    bal = sub.add_parser("balance", parents=[common], help="balance in rounds (--daemon) or once")
    bal.add_argument("--daemon", action="store_true", help="keep going, one round per interval")
    bal.add_argument("--apply", action="store_true",
                     help="migrate even if balancing.enable is false in the config")
    bal.add_argument("--rounds", type=int, default=0, help="stop after this many rounds (0: never)")

    hist = sub.add_parser("history", parents=[common], help="moves and decisions Keel made")
    hist.add_argument("--limit", type=int, default=20)


def _setup(args: argparse.Namespace, env: Any) -> tuple[Any, Any, Store]:
    from keel.cli import connect_with_config
    from keel.store import Store, default_path
    client, config = connect_with_config(args, env)
    settings = config.balancing
    if getattr(args, "method", None):
        settings = replace(settings, method=args.method)
    store = Store(args.store or default_path(env.environ))
    return client, settings, store


def _snapshot(client: Any, settings: Any) -> Any:
    from keel.pve import snapshot
    return snapshot.collect(client, psi=settings.mode == "psi")


def _plan(client: Any, settings: Any, store: Store, now: float, oneshot: bool = False) -> tuple[Any, Plan]:
    """``oneshot``: ``keel plan`` and ``keel apply`` plan as far as the level (within
    ``limits.oneshot``), not one round's budget."""
    from keel.balance.balancer import make_plan
    from keel.balance.guestconfig import Reader
    snap = _snapshot(client, settings)
    samples = store.samples(now - settings.window_s)
    return snap, make_plan(snap, settings, store.history(now), now, samples or None, oneshot=oneshot,
                           configs=Reader(client))


def _print_plan(plan: Plan, args: argparse.Namespace, env: Any) -> None:
    from keel.plan_view import render_plan
    from keel.status_view import Style
    if args.json:
        json.dump(plan.to_json(), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        env.stdout.write(render_plan(plan, Style(env.color, env.unicode),
                                     verbose=getattr(args, "verbose_plan", False)))


def _engine(args: argparse.Namespace, env: Any) -> Any:
    from keel import cli_engine
    return cli_engine.engine_for(args, env)


def cmd_plan(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        from keel import cli_engine
        return cli_engine.plan(engine, args, env, lambda plan: _print_plan(plan, args, env))
    client, settings, store = _setup(args, env)
    _, plan = _plan(client, settings, store, time.time(), oneshot=True)
    _print_plan(plan, args, env)
    return ExitStatus.OK


def _printer(env: Any, as_json: bool) -> Any:
    def show(event: dict[str, Any]) -> None:
        if as_json:
            env.stdout.write(json.dumps(event) + "\n")
        elif event["event"] == "start":
            env.stdout.write(f"  start   {event['vmid']} {event['name']}: {event['source']} -> "
                             f"{event['target']} ({event['reason']})\n")
        elif event["event"] in ("done", "failed", "not_started"):
            mark = {"done": "ok", "failed": f"FAILED: {event['error']}"}.get(event["event"], event["error"])
            env.stdout.write(f"  [{event['completed']}/{event['total']}] {event['vmid']} {event['name']} "
                             f"on {event['target']}: {mark}\n")
        elif event["event"] == "power":            # a power job's step (keel power sleep|wake|test)
            env.stdout.write(f"{event['detail']}\n")
        elif event["event"] == "slow":
            env.stdout.write(f"  slow    {event['vmid']} {event['name']}: {event['detail']}\n")
        elif event["event"] == "plan" and event.get("total"):
            n, eta = event["total"], event.get("eta_s")
            env.stdout.write(f"{n} move{'' if n == 1 else 's'}, up to {event.get('concurrent', 1)} at a time"
                             + (f", about {format_duration(eta)}" if eta else "") + "\n")
        env.stdout.flush()
    return show


def _confirm(question: str, args: argparse.Namespace, env: Any) -> bool:
    if getattr(args, "yes", False):
        return True
    stdin = env.stdin
    if stdin is None or not stdin.isatty():
        raise InvalidError("not asking without a terminal: add --yes to go ahead")
    env.stdout.write(f"{question} [y/N] ")
    env.stdout.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def _execute(client: Any, settings: Any, store: Store, plan: Plan, env: Any, as_json: bool,
             who: str, replan: Any = None) -> int:
    """Run a plan; the first Ctrl-C lets the running migrations finish and starts no more."""
    from keel.balance.executor import Executor, carry_out
    cancel = threading.Event()
    executor = Executor(client, settings, store, requested_by=who, on_event=_printer(env, as_json),
                        cancel=cancel)

    def interrupted(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        env.stderr.write("Stopping: no new migration starts; waiting for the running ones "
                         "(Ctrl-C again to stop waiting; they go on in Proxmox VE).\n")
        env.stderr.flush()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, interrupted)
    try:
        result = carry_out(executor, plan, replan)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if result.cancelled:
        done = sum(1 for r in result.results if r.ok)
        env.stdout.write(f"Stopped after {done} of {len(plan.moves)} migrations.\n")
    if result.refused and not as_json:
        env.stdout.write(f"{len(result.refused)} move{'s' if len(result.refused) != 1 else ''} skipped: "
                         f"PVE refused {'them' if len(result.refused) != 1 else 'it'} (above); "
                         f"{'planned again around them' if result.plans > 1 else 'nothing else waited for them'}.\n")
    if any(not r.ok and not r.refused for r in result.results):
        return ExitStatus.TASK_FAILED
    return ExitStatus.OK if not result.cancelled else ExitStatus.ERROR


def _guests(n: int) -> str:
    return f"{n} guest" if n == 1 else f"{n} guests"


def _who(env: Any) -> str:
    import getpass
    user = env.environ.get("SUDO_USER") or env.environ.get("USER")
    try:
        user = user or getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}"


def cmd_apply(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        from keel import cli_engine
        return cli_engine.apply(engine, args, env, lambda plan: _print_plan(plan, args, env),
                                lambda q: _confirm(q, args, env), _printer(env, args.json), _who(env))
    client, settings, store = _setup(args, env)
    _, plan = _plan(client, settings, store, time.time(), oneshot=True)
    if not args.json:
        _print_plan(plan, args, env)
    if not plan.moves:
        if args.json:
            _print_plan(plan, args, env)
        return ExitStatus.OK
    if not _confirm(f"Migrate {_guests(len(plan.moves))}?", args, env):
        env.stdout.write("Nothing done.\n")
        return ExitStatus.OK
    # where PVE refuses a move the plan could not foresee, plan again around it
    return _execute(client, settings, store, plan, env, args.json, _who(env),
                    replan=lambda: _plan(client, settings, store, time.time(), oneshot=True)[1])


def cmd_maintenance(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        from keel import cli_engine
        return cli_engine.maintenance(engine, args, env, lambda q: _confirm(q, args, env),
                                      _printer(env, args.json), _who(env))
    client, settings, store = _setup(args, env)
    if args.action == "list":
        nodes = store.maintenance_nodes()
        if args.json:
            json.dump(nodes, env.stdout, indent=2)
            env.stdout.write("\n")
        else:
            for node, info in sorted(nodes.items()):
                env.stdout.write(f"{node}  since {time.strftime('%Y-%m-%d %H:%M', time.localtime(info['since']))}"
                                 f"  by {info['requested_by']}\n")
            if not nodes:
                env.stdout.write("No node is in maintenance through Keel.\n")
        return ExitStatus.OK
    if not args.node:
        raise InvalidError(f"keel maintenance {args.action}: name the node")
    snap = _snapshot(client, settings)
    if args.node not in snap.nodes:
        raise NotFoundError(f"no node {args.node!r} in cluster {snap.cluster_name} "
                            f"(nodes: {', '.join(snap.nodes)})")
    if args.action == "leave":
        was = store.maintenance_leave(args.node)
        env.stdout.write(f"{args.node} takes guests again." if was else
                         f"{args.node} was not in maintenance through Keel.")
        env.stdout.write("\n")
        return ExitStatus.OK
    store.maintenance_enter(args.node, _who(env), time.time())
    env.stdout.write(f"{args.node} is in maintenance: Keel moves nothing onto it.\n")
    if args.no_evacuate:
        return ExitStatus.OK
    evacuate = replace(settings, limits=replace(settings.limits, moves=0))   # no balancing now
    for _ in range(10):     # each round re-plans from fresh state until the node is empty
        now = time.time()
        snap, plan = _plan(client, evacuate, store, now)
        moves = [m for m in plan.moves if m.reason in (words.MAINTENANCE, words.PARK)
                 and (m.source == args.node or m.reason == words.PARK)]
        if not moves:
            left = [g for g in snap.guests_on(args.node) if not g.template]
            if left:
                env.stdout.write(f"{len(left)} {'guest stays' if len(left) == 1 else 'guests stay'} "
                                 f"on {args.node}: "
                                 + "; ".join(f"{s.name} ({s.reason}: {s.detail})" for s in plan.skipped
                                             if s.vmid in {g.vmid for g in left}) + "\n")
            else:
                env.stdout.write(f"{args.node} is empty.\n")
            return ExitStatus.OK
        from keel.plan_view import render_plan
        from keel.status_view import Style
        verb = "leaves" if len(moves) == 1 else "leave"
        evacuation = replace(plan, moves=tuple(moves), reason=f"{_guests(len(moves))} {verb} {args.node}")
        if not args.json:
            env.stdout.write(render_plan(evacuation, Style(env.color, env.unicode)))
        if not _confirm(f"Move {_guests(len(moves))} off {args.node}?", args, env):
            return ExitStatus.OK
        args.yes = True
        status = _execute(client, settings, store, evacuation, env, args.json, _who(env))
        if status != ExitStatus.OK:
            return status
    return ExitStatus.OK


def cmd_best_node(args: argparse.Namespace, env: Any) -> int:
    memory = parse_size(args.memory, "--memory")
    engine = _engine(args, env)
    if engine is not None:
        from keel import cli_engine
        answer = cli_engine.best_node(engine, args, memory)
    else:
        from keel.balance.balancer import best_node
        client, settings, store = _setup(args, env)
        snap = _snapshot(client, settings)
        ranked = best_node(snap, settings, args.cores, memory, store.history(time.time()))
        answer = {"best": ranked[0].node if ranked and ranked[0].fits else None,
                  "nodes": [{"node": p.node, "fits": p.fits, "reason": p.reason,
                             "imbalance_after": None if p.figure_after == float("inf")
                             else round(p.figure_after, 4)} for p in ranked]}
    if args.json:
        json.dump(answer, env.stdout, indent=2)
        env.stdout.write("\n")
    elif answer["best"]:
        env.stdout.write(f"{answer['best']}\n")
        for place in answer["nodes"]:
            env.stdout.write(f"  {place['node']:<10} {'fits' if place['fits'] else 'no  '}  {place['reason']}\n")
    if not answer["best"]:
        if not args.json:
            env.stdout.write(f"No node has room for {args.cores:g} cores and {format_bytes(memory)}.\n")
        return ExitStatus.NO_CAPACITY
    return ExitStatus.OK


def cmd_balance(args: argparse.Namespace, env: Any) -> int:
    from keel.balance.rounds import Rounds
    if _engine(args, env) is not None:
        raise InvalidError("keel-engine runs on this node and balances the cluster (on its leader): "
                           "keel balance would act beside it; use keel plan / keel apply, or --direct")
    client, settings, store = _setup(args, env)
    apply = args.apply or settings.enable
    rounds = Rounds(client, settings, store, requested_by=f"keel balance ({_who(env)})",
                    on_event=_printer(env, args.json))
    stop = threading.Event()
    count = 0
    while True:
        result = rounds.round(apply)
        line = result.line()
        env.stdout.write((json.dumps(line) if args.json else
                          f"{time.strftime('%H:%M:%S')} {line['verdict']}: {line['reason']} "
                          f"(imbalance {line['imbalance']:.2f}, {line['moved']} moved"
                          f"{'' if apply else ', dry run'})") + "\n")
        env.stdout.flush()
        failed = result.execution is not None and not result.execution.ok
        count += 1
        if not args.daemon or (args.rounds and count >= args.rounds):
            return ExitStatus.TASK_FAILED if failed else ExitStatus.OK
        if stop.wait(settings.interval_s):
            return ExitStatus.OK


def cmd_history(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        from keel import cli_engine
        answer = cli_engine.history(engine, args.limit)
        moves, decisions = answer["moves"], answer["decisions"]
    else:
        from keel.store import Store, default_path
        store = Store(args.store or default_path(env.environ))
        moves = store.moves(limit=args.limit)
        decisions = store.decisions(limit=args.limit)
    if args.json:
        json.dump({"moves": moves, "decisions": decisions}, env.stdout, indent=2)
        env.stdout.write("\n")
        return ExitStatus.OK
    env.stdout.write("Moves\n" if moves else "No moves yet.\n")
    for m in moves:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m["started_at"]))
        env.stdout.write(f"  {when}  {m['vmid']:>6} {m['name']:<16} {m['source']} -> {m['target']}  "
                         f"{m['reason']:<11} {m['status']:<7} {m['requested_by']}"
                         + (f"  {m['error']}" if m["error"] else "") + "\n")
    env.stdout.write("Decisions (keel balance rounds)\n" if decisions
                     else "No balancing rounds yet (keel balance records them).\n")
    for d in decisions:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["t"]))
        env.stdout.write(f"  {when}  {d['verdict']:<16} {d['reason']}\n")
    return ExitStatus.OK


COMMANDS = {"plan": cmd_plan, "apply": cmd_apply, "maintenance": cmd_maintenance,
            "best-node": cmd_best_node, "balance": cmd_balance, "history": cmd_history}
