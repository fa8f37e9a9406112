"""``keel``: the command line.  Every command is declared once in ``build_parser``.

``main(argv, env)`` is the whole program: tests call it with an ``Env`` holding their
own streams and environment and check stdout, stderr and the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from keel import __version__
from keel.errors import ExitStatus, KeelError

log = logging.getLogger("keel")


@dataclass
class Env:
    """What the CLI touches outside itself; the real ones by default."""

    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: TextIO | None = field(default_factory=lambda: sys.stdin)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def color(self) -> bool:
        return (hasattr(self.stdout, "isatty") and self.stdout.isatty()
                and "NO_COLOR" not in self.environ and self.environ.get("TERM") != "dumb")

    @property
    def unicode(self) -> bool:
        encoding = getattr(self.stdout, "encoding", None) or "utf-8"
        return encoding.lower().replace("-", "") in ("utf8", "utf16")


def _add_connection(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection to Proxmox VE (default: the config file)")
    group.add_argument("--config", metavar="FILE",
                       help="Keel config file (default: $KEEL_CONFIG or /etc/pve/keel/keel.yaml)")
    group.add_argument("--pve-url", metavar="URL", help="https://host:8006 ($KEEL_PVE_URL)")
    group.add_argument("--pve-token-file", metavar="FILE",
                       help="file holding user@realm!name=secret ($KEEL_PVE_TOKEN holds the token itself)")
    group.add_argument("--pve-user", metavar="USER@REALM", help="log in with a password ($KEEL_PVE_USER)")
    group.add_argument("--pve-password-file", metavar="FILE", help="file holding the password "
                                                                  "($KEEL_PVE_PASSWORD)")
    group.add_argument("--ca-file", metavar="FILE", help="CA certificate to verify PVE's TLS with")
    group.add_argument("--insecure", action="store_true",
                       help="do not verify PVE's TLS certificate (test clusters only)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keel", description="Keel keeps a Proxmox VE cluster level and runs CI runners on it.")
    parser.add_argument("--version", action="version", version=f"keel {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (repeatable)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    status = sub.add_parser("status", help="show the cluster: node load, guests, HA, imbalance")
    status.add_argument("--guests", action="store_true", help="list the guests under each node")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--psi", action="store_true",
                        help="also read pressure stall figures (one more API call per node)")
    _add_connection(status)

    sim = sub.add_parser("sim", help="run a simulated Proxmox VE cluster (or generate a scenario)",
                         description="Serve a simulated Proxmox VE cluster over HTTPS on loopback.")
    sim.add_argument("--scenario", metavar="FILE", help="scenario file (YAML, docs/simulator.md)")
    sim.add_argument("--port", type=int, default=8006, help="port (0 picks a free one; default 8006)")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument("--clock-factor", type=float, default=1.0, metavar="F",
                     help="simulated seconds per real second (0 stops the clock; default 1)")
    sim.add_argument("--tls-dir", metavar="DIR",
                     help="write the certificate (sim.crt) here, for clients that verify TLS")
    sim_sub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    gen = sim_sub.add_parser("generate", help="write a scenario of any size")
    gen.add_argument("--nodes", type=int, required=True)
    gen.add_argument("--guests", type=int, required=True)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--profile", default="skewed", help="even, skewed, random or hotspot")
    gen.add_argument("--pve-version", default="9.1.4", help="8.x or 9.x (default 9.1.4)")
    gen.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")

    from keel import cli_balance, cli_service
    cli_balance.add_parsers(sub, _add_connection)
    from keel import cli_runners
    cli_runners.add_parsers(sub, _add_connection)
    cli_service.add_parsers(sub, _add_connection)
    from keel import cli_power
    cli_power.add_parsers(sub, _add_connection)

    demo = sub.add_parser("demo", help="start the simulator on the demo cluster and show it")
    demo.add_argument("--scenario", metavar="FILE", help="another scenario than the built-in demo")
    demo.add_argument("--keep-running", action="store_true",
                      help="leave the simulator running until Ctrl-C")
    demo.add_argument("--harness", metavar="DIR",
                      help="then serve the web UI harness in DIR (the repository's www/; make demo does) "
                           "with keel-engine and keel-web on the simulator, until Ctrl-C")
    demo.add_argument("--port", type=int, metavar="PORT",
                      help="keel-web's port for the web UI (default 8443, or a free one if 8443 is in use)")

    imp = sub.add_parser("import-proxlb", help="convert a ProxLB config to Keel's (YAML with comments)",
                         description="Print the Keel config (proxmox: and balancing:) equivalent to a "
                                     "ProxLB config, with comments on every difference. Secrets are not "
                                     "copied. See docs/balancing-from-proxlb.md.")
    imp.add_argument("file", metavar="FILE",
                     help="ProxLB's config: proxlb.yaml (1.1, 2.x) or the INI proxlb.conf (0.9, 1.0)")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    return parser


def main(argv: list[str] | None = None, env: Env | None = None) -> int:
    env = env or Env()
    try:
        status = _main(argv, env)
        env.stdout.flush()                  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        if not _reader_gone(env.stdout):
            raise                           # another pipe or socket broke: a real error
        with contextlib.suppress(AttributeError, OSError, ValueError):
            fd = env.stdout.fileno()        # what is still buffered goes nowhere, so that
            devnull = os.open(os.devnull, os.O_WRONLY)     # Python's flush at exit is quiet
            os.dup2(devnull, fd)
            os.close(devnull)
        return ExitStatus.OK                # `keel status --json | head`: quiet, as Unix tools
    return status


def _reader_gone(stream: Any) -> bool:
    """Whether the reader of ``stream`` went away (a pipe with no reader: poll says POLLERR)."""
    import select
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        try:
            stream.flush()
        except BrokenPipeError:
            return True
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _main(argv: list[str] | None, env: Env) -> int:
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(env.stdout), contextlib.redirect_stderr(env.stderr):
            args = parser.parse_args(argv)   # --help, --version and usage errors
    except SystemExit as exit_:
        return int(exit_.code or 0)
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                        format="%(levelname)s %(name)s: %(message)s", stream=env.stderr)
    if args.command is None:
        parser.print_help(env.stdout)
        return ExitStatus.USAGE
    try:
        return COMMANDS[args.command](args, env)
    except KeelError as err:
        print(f"keel: {err}", file=env.stderr)
        return err.exit_status
    except KeyboardInterrupt:
        return ExitStatus.ERROR


def connect(args: argparse.Namespace, env: Env) -> Any:
    """A PveClient from flags, environment and config file, in that order of precedence."""
    return connect_with_config(args, env)[0]


def load_config(args: argparse.Namespace, env: Env) -> Any:
    from keel import config as cfg
    config_path = args.config or env.environ.get("KEEL_CONFIG")
    if config_path:
        return cfg.load(config_path)
    if cfg.DEFAULT_CONFIG_FILE.exists():
        return cfg.load(cfg.DEFAULT_CONFIG_FILE)
    return cfg.Config()


def connect_with_config(args: argparse.Namespace, env: Env) -> tuple[Any, Any]:
    """(PveClient, Config): flags, then environment, then the config file."""
    from keel import config as cfg
    from keel.errors import InvalidError
    from keel.pve.client import PveClient

    config = load_config(args, env)
    settings = config.proxmox
    overrides = dict(env.environ)
    sources: dict[str, str] = {}
    if args.pve_url:
        overrides["KEEL_PVE_URL"], sources["KEEL_PVE_URL"] = args.pve_url, "--pve-url"
    if args.ca_file:
        overrides["KEEL_PVE_CA_FILE"], sources["KEEL_PVE_CA_FILE"] = args.ca_file, "--ca-file"
    if args.insecure:
        overrides["KEEL_PVE_INSECURE"] = "1"
    if args.pve_token_file:
        overrides["KEEL_PVE_TOKEN"] = cfg.read_secret(args.pve_token_file, "API token")
        sources["KEEL_PVE_TOKEN"] = f"--pve-token-file {args.pve_token_file}"
    if args.pve_user:
        overrides["KEEL_PVE_USER"] = args.pve_user
        overrides.pop("KEEL_PVE_TOKEN", None) if not args.pve_token_file else None
    if args.pve_password_file:
        overrides["KEEL_PVE_PASSWORD"] = cfg.read_secret(args.pve_password_file, "password")
    given = ("KEEL_PVE_URL", "KEEL_PVE_TOKEN", "KEEL_PVE_USER", "KEEL_PVE_PASSWORD")
    if config.source == cfg.Config().source and not any(overrides.get(k) for k in given) \
            and not cfg.DEFAULT_TOKEN_FILE.exists():
        raise InvalidError(f"no config file and no PVE URL or token given (looked for --config, $KEEL_CONFIG "
                           f"and {cfg.DEFAULT_CONFIG_FILE}): on a Proxmox VE node run `keel setup`; "
                           f"elsewhere give --pve-url and --pve-token-file (or KEEL_PVE_URL and "
                           f"KEEL_PVE_TOKEN), or --config FILE")
    return PveClient(cfg.target_from(settings, overrides, sources=sources)), config


def cmd_status(args: argparse.Namespace, env: Env) -> int:
    from keel.pve import snapshot
    from keel.status_view import Style, render, summary

    client, config = connect_with_config(args, env)
    snap = snapshot.collect(client, psi=args.psi)
    if args.json:
        json.dump(summary(snap, config.balancing), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        env.stdout.write(render(snap, Style(env.color, env.unicode), show_guests=args.guests,
                                settings=config.balancing))
    return ExitStatus.OK


def cmd_sim(args: argparse.Namespace, env: Env) -> int:
    if args.sim_command == "generate":
        from keel.sim.generate import generate
        try:
            data = generate(args.nodes, args.guests, args.seed, args.profile, args.pve_version)
        except ValueError as err:
            print(f"keel sim generate: {err}", file=env.stderr)
            return ExitStatus.USAGE
        import yaml
        text = yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                         sort_keys=False, default_flow_style=None, width=120)
        if args.output:
            Path(args.output).write_text(text)
            print(f"wrote {args.output}: {args.nodes} nodes, {args.guests} guests", file=env.stderr)
        else:
            env.stdout.write(text)
        return ExitStatus.OK
    if not args.scenario:
        print("keel sim: give --scenario FILE (or use `keel sim generate`)", file=env.stderr)
        return ExitStatus.USAGE
    from keel.sim.serve import run
    if not args.verbose:
        logging.getLogger("keel.sim").setLevel(logging.INFO)
    return run(args.scenario, args.port, args.clock_factor, args.host, args.tls_dir, env.stdout,
               env.stderr)


def cmd_import_proxlb(args: argparse.Namespace, env: Env) -> int:
    from keel.importers.proxlb import import_file
    return write_converted(import_file(args.file), args, env)


def write_converted(text: str, args: argparse.Namespace, env: Any) -> int:
    """An importer's output: to ``--output`` if given, else to stdout."""
    from keel.errors import InvalidError
    if not args.output:
        env.stdout.write(text)
        return ExitStatus.OK
    try:
        Path(args.output).write_text(text)
    except OSError as err:
        raise InvalidError(f"cannot write {args.output}: {err.strerror}") from None
    print(f"wrote {args.output} (converted from {args.file}); read its comments before using it",
          file=env.stderr)
    return ExitStatus.OK


def cmd_demo(args: argparse.Namespace, env: Env) -> int:
    from keel.demo import run_demo
    return run_demo(env, args.scenario, args.keep_running, args.harness, args.port)


def _balance_command(name: str) -> Any:
    def run(args: argparse.Namespace, env: Env) -> int:
        from keel import cli_balance
        return cli_balance.COMMANDS[name](args, env)
    return run


COMMANDS = {"status": cmd_status, "sim": cmd_sim, "demo": cmd_demo,
            **{name: _balance_command(name) for name in
               ("plan", "apply", "maintenance", "best-node", "balance", "history")}}
COMMANDS["import-proxlb"] = cmd_import_proxlb


def _runners_command(name: str) -> Any:
    def run(args: argparse.Namespace, env: Env) -> int:
        from keel import cli_runners
        return cli_runners.COMMANDS[name](args, env)
    return run


COMMANDS.update({name: _runners_command(name) for name in ("runners", "import-rungar")})


def _service_command(name: str) -> Any:
    def run(args: argparse.Namespace, env: Env) -> int:
        from keel import cli_service
        return cli_service.COMMANDS[name](args, env)
    return run


COMMANDS.update({name: _service_command(name) for name in ("engine", "web", "setup")})


def cmd_power(args: argparse.Namespace, env: Env) -> int:
    from keel import cli_power
    return cli_power.cmd_power(args, env)


COMMANDS["power"] = cmd_power


if __name__ == "__main__":
    sys.exit(main())
