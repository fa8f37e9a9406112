"""``keel power status`` and ``keel power plan``: power saving's view of the cluster, and the
consolidation plan as a dry run; ``keel power sleep|wake|test NODE`` (docs/power.md).

Where keel-engine runs on this node, every one of them asks it (``GET /api/power``,
``/api/power/plan``, ``POST /api/power/nodes/<node>/...``): its leader acts and keeps the
power book, and its history says who asked, as ``keel apply`` does (``cli_engine``);
``--direct`` (or connection settings of the command line's) talks to Proxmox VE itself.
``keel.cli`` declares the command; the balancer (numpy), the PVE client (proxmoxer) and the
store are imported by the commands that use them, so that ``keel --help`` stays fast."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from keel.errors import ExitStatus


def add_parsers(sub: Any, add_connection: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_connection(common)
    common.add_argument("--store", metavar="FILE", help="Keel's history database "
                        "(default: $KEEL_STORE, /var/lib/keel/keel.db, or ~/.local/state/keel/keel.db)")
    common.add_argument("--json", action="store_true", help="print JSON")
    common.add_argument("--direct", action="store_true",
                        help="talk to Proxmox VE directly even when keel-engine runs on this node")
    power = sub.add_parser("power", help="power saving: which quiet nodes could sleep, and how",
                           description="Power saving (docs/power.md): empty quiet nodes, power them "
                                       "off, wake them with Wake-on-LAN.")
    psub = power.add_subparsers(dest="power_command", metavar="SUBCOMMAND")
    psub.add_parser("status", parents=[common], help="each node's power state, quorum, the schedule now")
    plan = psub.add_parser("plan", parents=[common], help="which nodes could sleep now, where their guests "
                                                          "would go, and why the others stay awake (dry run)")
    plan.add_argument("--node", metavar="NODE", help="consider this node only")
    sleep = psub.add_parser("sleep", parents=[common], help="empty NODE and power it off, if every gate lets it "
                                                            "(asks first)")
    sleep.add_argument("node", metavar="NODE")
    sleep.add_argument("-y", "--yes", action="store_true", help="do not ask")
    wake = psub.add_parser("wake", parents=[common], help="wake NODE with Wake-on-LAN and wait until it is back")
    wake.add_argument("node", metavar="NODE")
    test = psub.add_parser("test", parents=[common], help="test NODE's wake: put it to sleep, if every other gate "
                                                          "lets it, and wake it at once (asks first)")
    test.add_argument("node", metavar="NODE")
    test.add_argument("-y", "--yes", action="store_true", help="do not ask")
    power.set_defaults(power_parser=power)


def _read(args: argparse.Namespace, env: Any) -> tuple[Any, Any, Any, Any]:
    from keel.cli import connect_with_config
    from keel.pve import power as pve_power
    from keel.pve import snapshot
    client, config = connect_with_config(args, env)
    snap = snapshot.collect(client, psi=config.balancing.mode == "psi")
    return client, config, snap, pve_power.read_facts(client, snap)


def _lease_holder(config: Any) -> str | None:
    from keel.engine.lease import Lease
    return Lease(config.engine.lock).holder()


def _dump(data: Any, env: Any) -> None:
    json.dump(data, env.stdout, indent=2)
    env.stdout.write("\n")


def cmd_power(args: argparse.Namespace, env: Any) -> int:
    if args.power_command is None:
        args.power_parser.print_help(env.stdout)
        return ExitStatus.USAGE
    return {"status": cmd_status, "plan": cmd_plan, "sleep": cmd_sleep, "wake": cmd_wake,
            "test": cmd_test}[args.power_command](args, env)


def _tests_book(config: Any, store: Any) -> Any:
    """Where the wake tests are kept: the store and, on a cluster node (the shared directory
    is there), pmxcfs's power.json, which every leader reads."""
    from pathlib import Path
    from keel.engine.power_loop import Book
    shared = config.engine.shared_dir
    return Book(store, shared if Path(shared).is_dir() else None, lambda: True)


def _wake_tests(config: Any, store: Any) -> Any:
    from keel.balance.power_exec import WAKE_TESTS
    return _tests_book(config, store).get(WAKE_TESTS, {}) or {}


def _engine(args: argparse.Namespace, env: Any) -> Any:
    from keel.cli_engine import engine_for
    return engine_for(args, env)


def cmd_status(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        data = engine.call("GET", "/api/power")
    else:
        from keel.balance import power
        from keel.engine.power_loop import with_book
        from keel.store import Store, default_path
        client, config, snap, facts = _read(args, env)
        now = time.time()
        data = with_book(power.status(snap, facts, config.balancing, now),
                         _tests_book(config, Store(args.store or default_path(env.environ))), config.balancing.power, now)
    if args.json:
        _dump(data, env)
    else:
        env.stdout.write(render_status(data))
    return ExitStatus.OK


def _engine_plan(engine: Any, node: str | None, test: bool = False) -> dict[str, Any]:
    from urllib.parse import urlencode
    query = {"node": node} if node else {}
    if test:
        query["test"] = "1"
    return engine.call("GET", "/api/power/plan" + (f"?{urlencode(query)}" if query else ""))


def cmd_plan(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        data = _engine_plan(engine, args.node)
        if args.json:
            _dump(data, env)
        else:
            env.stdout.write(render_plan(data))
        return ExitStatus.OK
    from keel.balance import guestconfig
    from keel.balance.power import plan_sleep
    from keel.store import Store, default_path
    client, config, snap, facts = _read(args, env)
    settings = config.balancing
    now = time.time()
    store = Store(args.store or default_path(env.environ))
    plan = plan_sleep(snap, facts, settings, now, store.history(now), store.samples(now - settings.window_s) or None,
                      _lease_holder(config), guestconfig.Reader(client), only=args.node,
                      wake_tests=_wake_tests(config, store))
    if args.json:
        _dump(plan.to_json(), env)
    else:
        env.stdout.write(render_plan(plan.to_json()))
    return ExitStatus.OK


def _run(client: Any, settings: Any, store: Any, env: Any, as_json: bool, tests: Any = None) -> Any:
    from keel import cli_balance
    from keel.balance.power_exec import PowerRun

    def say(text: str) -> None:
        if as_json:
            env.stdout.write(json.dumps({"event": "power", "detail": text}) + "\n")
        else:
            env.stdout.write(text + "\n")
        env.stdout.flush()
    return PowerRun(client, settings, store, f"keel power ({cli_balance._who(env)})", say=say,
                    on_event=cli_balance._printer(env, as_json), tests=tests)


def cmd_sleep(args: argparse.Namespace, env: Any) -> int:
    return _sleep(args, env, test=False)


def cmd_test(args: argparse.Namespace, env: Any) -> int:
    return _sleep(args, env, test=True)


def _sleep(args: argparse.Namespace, env: Any, test: bool) -> int:
    """``keel power sleep NODE``, or ``keel power test NODE``: the same sleep (the wake-test
    gate set aside, it is what the test makes), then at once the wake."""
    from keel import words
    from keel.balance import guestconfig
    from keel.balance.power import plan_sleep
    from keel.errors import InvalidError
    from keel.store import Store, default_path
    engine = _engine(args, env)
    if engine is not None:
        return _sleep_by_engine(engine, args, env, test)
    client, config, snap, facts = _read(args, env)
    settings = config.balancing
    if settings.power.mode == "off":
        raise InvalidError("balancing.power.mode is off: Keel powers no node off (set it to recommend or "
                           "automatic; keel power plan shows what it would do)")
    now = time.time()
    store = Store(args.store or default_path(env.environ))
    tests = _tests_book(config, store)
    plan = plan_sleep(snap, facts, settings, now, store.history(now), store.samples(now - settings.window_s) or None,
                      _lease_holder(config), guestconfig.Reader(client), only=args.node,
                      wake_tests=_wake_tests(config, store), wake_test=not test)
    if not _go_ahead(plan.to_json(), args, env, test):
        return ExitStatus.BUSY if plan.verdict != words.SLEEP else ExitStatus.OK
    run = _run(client, settings, store, env, args.json, tests)
    if test:
        run.test_node(plan)
    else:
        run.sleep_node(plan)
    return ExitStatus.OK


def _go_ahead(plan: dict[str, Any], args: argparse.Namespace, env: Any, test: bool) -> bool:
    """Show the node's plan; False when it stays awake (said on stderr) or the user says no."""
    from keel import cli_balance, words
    if not args.json:
        env.stdout.write(render_plan(plan))
    if plan["verdict"] != words.SLEEP:
        if args.json:
            _dump(plan, env)
        env.stderr.write(f"keel: {args.node} stays awake: "
                         + "; ".join(f"{r['gate']}: {r['detail']}" for r in plan["refusals"]) + "\n")
        return False
    question = f"Empty {args.node}, power it off and wake it at once (a wake test)?" if test \
        else f"Empty {args.node} and power it off?"
    if not cli_balance._confirm(question, args, env):
        env.stdout.write("Nothing done.\n")
        return False
    return True


def _follow(engine: Any, args: argparse.Namespace, env: Any, action: str) -> int:
    """The engine's job for ``action`` on ``args.node``, followed until it ends."""
    from urllib.parse import quote
    from keel import cli_balance, cli_engine
    who = cli_balance._who(env)
    job = engine.call("POST", f"/api/power/nodes/{quote(args.node, safe='')}/{action}", {}, user=who)
    return cli_engine.follow(engine, job, env, cli_balance._printer(env, args.json), who)


def _sleep_by_engine(engine: Any, args: argparse.Namespace, env: Any, test: bool) -> int:
    from keel import words
    plan = _engine_plan(engine, args.node, test)
    if not _go_ahead(plan, args, env, test):
        return ExitStatus.BUSY if plan["verdict"] != words.SLEEP else ExitStatus.OK
    return _follow(engine, args, env, "test" if test else "sleep")


def cmd_wake(args: argparse.Namespace, env: Any) -> int:
    engine = _engine(args, env)
    if engine is not None:
        return _follow(engine, args, env, "wake")
    from keel.cli import connect_with_config
    from keel.errors import NotFoundError
    from keel.pve import snapshot
    from keel.store import Store, default_path
    client, config = connect_with_config(args, env)
    snap = snapshot.collect(client)
    if args.node not in snap.nodes:
        raise NotFoundError(f"no node {args.node!r} in cluster {snap.cluster_name} (nodes: {', '.join(snap.nodes)})")
    store = Store(args.store or default_path(env.environ))
    _run(client, config.balancing, store, env, args.json, _tests_book(config, store)).wake_node(args.node)
    return ExitStatus.OK


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def render_status(data: dict[str, Any]) -> str:
    may = data["may_sleep"]
    q = data["quorum"]
    lines = [f"Power saving: {data['mode']}; "
             + (f"{len(may)} node{'s' if len(may) != 1 else ''} may sleep ({', '.join(may)})" if may
                else "no node may sleep (balancing.power.nodes)") + f"; at least {data['min_awake']} awake",
             f"Quorum: {q['awake_votes']} of {q['expected_votes']} corosync votes awake, quorum needs "
             f"{q['quorum']}" + ("" if q["quorate"] else " (NO QUORUM)")]
    when = []
    if data["never_sleep_open"]:
        when.append(f"never_sleep {data['never_sleep_open']} is open: no node goes to sleep")
    if data["next_wake_all"]:
        when.append("next wake_all " + time.strftime("%a %Y-%m-%d %H:%M UTC", time.gmtime(data["next_wake_all"])))
    if when:
        lines.append("Schedule: " + "; ".join(when))
    if data["ceph"]:
        ceph = data["ceph"]
        lines.append(f"Ceph: {ceph['error'] or ceph['health']}"
                     + (f", flags {','.join(ceph['flags'])}" if ceph["flags"] else ""))
    asleep = data["asleep"]
    lines.append(f"Asleep: {', '.join(asleep)}, saving about {data['saving_watts']:.0f} W" if asleep
                 else "Asleep: none")
    lines.append("")
    header = f"{'NODE':<10} {'POWER':<7} {'MAY SLEEP':<9} {'VOTES':>5}  {'WAKE-ON-LAN':<18} {'CEPH':<12} " \
             f"{'HA':<12} {'GUESTS':>6} {'CPU':>5} {'MEM':>5}"
    lines.append(header)
    for n in data["nodes"]:
        ceph = (f"{n['ceph_osds']} OSDs" if n["ceph_osds"] else "") + \
            ((", mon" if n["ceph_osds"] else "mon") if n["ceph_mon"] else "")
        may_sleep = "yes" if n["may_sleep"] else "no"
        if n["api_node"]:
            may_sleep = "no (API)"
        wol = n["wakeonlan"] or ("-" if n["power"] != "awake" else "none")
        if n.get("keel_state") not in (None, "awake", "asleep"):
            may_sleep += f" ({n['keel_state']})"
        lines.append(f"{n['node']:<10} {n['power']:<7} {may_sleep:<9} {n['votes'] if n['votes'] is not None else '-':>5}  "
                     f"{wol:<18} {ceph or '-':<12} {n['ha_state'] or '-':<12} "
                     f"{n['running']:>3}/{n['guests']:<2} {_pct(n['cpu']):>5} {_pct(n['memory']):>5}")
    for n in data["nodes"]:
        if n.get("retry_at"):
            lines.append(f"{n['node']}: Wake-on-LAN not sent ({n['wake_error']}); Keel wakes it again by itself "
                         f"from {time.strftime('%H:%M:%S', time.localtime(n['retry_at']))}")
    energy = data.get("energy")
    if energy:
        lines += ["", f"Asleep so far: {energy['node_hours_asleep']:.1f} node-hours, about {energy['kwh_saved']:.1f} kWh "
                      f"saved; {energy['wakes_failed']} wake{'s' if energy['wakes_failed'] != 1 else ''} failed"]
    if data.get("events"):
        lines += ["", "Sleeps and wakes"]
        for e in data["events"][-10:]:
            lines.append(f"  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e['time']))}  {e['node']:<8} "
                         f"{e['detail']}  ({e['by']})")
    return "\n".join(lines) + "\n"


def render_plan(plan: dict[str, Any]) -> str:
    """A consolidation plan (``PowerPlan.to_json()``, as the engine answers it too) as text."""
    from keel.units import format_bytes
    lines = [f"Power plan: {plan['verdict']}: {plan['reason']}"]
    steps = plan.get("steps") or []
    if steps:
        lines += ["", "Steps"]
        width = max(len(s["action"]) for s in steps)
        for i, step in enumerate(steps, 1):
            lines.append(f"  {i}. {step['action']:<{width}}  {step['node'] or 'cluster':<8} {step['detail']}")
    if plan.get("moves"):
        lines += ["", "Moves"]
        for m in plan["moves"]:
            lines.append(f"  {m['vmid']:>6} {m['name']:<18} {m['from']} -> {m['to']}  {format_bytes(m['mem_bytes']):>9}  "
                         f"wave {m['wave']}  ({m['reason']})")
    if plan.get("forecast"):
        lines += ["", "Awake nodes " + ("after the moves" if plan["sleep"] else "now")]
        for f in plan["forecast"]:
            lines.append(f"  {f['node']:<10} cpu {f['cpu']:>4.0%}  memory {f['memory']:>4.0%}")
    if plan.get("refusals"):
        lines += ["", "Staying awake"]
        for r in plan["refusals"]:
            lines.append(f"  {r['node'] or 'every node':<10} {r['gate']}: {r['detail']}")
    if plan.get("notices"):
        lines += ["", "Notices"] + [f"  {n}" for n in plan["notices"]]
    if plan["sleep"]:
        watts = plan["summary"]["saving_watts"]
        lines += ["", f"Saving about {watts:.0f} W while {'it sleeps' if len(plan['sleep']) == 1 else 'they sleep'}."
                  + (" Nothing is done: this is a dry run." if plan["mode"] != "automatic" else "")]
    return "\n".join(lines) + "\n"
