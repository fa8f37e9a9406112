"""The services' commands: ``keel engine`` and ``keel web`` (what the systemd units run),
and ``keel setup``.  ``keel.cli`` declares them."""

from __future__ import annotations

import argparse
import grp
import logging
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from keel.errors import ExitStatus, InvalidError


def add_parsers(sub: Any, add_connection: Any = None) -> None:
    engine = sub.add_parser("engine", help="run keel-engine in the foreground (the local API, the leader's loops)")
    engine.add_argument("--config", metavar="FILE", help="default: $KEEL_CONFIG or /etc/pve/keel/keel.yaml")
    web = sub.add_parser("web", help="run keel-web in the foreground (the HTTPS gateway for the web UI)")
    web.add_argument("--config", metavar="FILE", help="default: $KEEL_CONFIG or /etc/pve/keel/keel.yaml")
    web.add_argument("--harness", metavar="DIR",
                     help="development aid: also serve the standalone web UI harness in DIR (the "
                          "repository's www/) at /harness/, with a login against proxmox.url")
    setup = sub.add_parser("setup", help="make Keel's PVE user, role, token and a default config (idempotent)",
                           description="Log in as an administrator (for example --pve-user root@pam "
                                       "--pve-password-file FILE) and make what Keel needs. Safe to run again.")
    setup.add_argument("--token-file", metavar="FILE", default=None,
                       help="where the token secret goes (default /etc/pve/priv/keel/pve-token)")
    if add_connection is not None:
        add_connection(setup)


def _config_path(args: argparse.Namespace, env: Any) -> Path:
    from keel import config as cfg
    path = Path(args.config or env.environ.get("KEEL_CONFIG") or cfg.DEFAULT_CONFIG_FILE)
    if not path.exists():
        raise InvalidError(f"no config file {path}: `keel setup` writes one, or give --config FILE")
    return path


def _logging(name: str) -> None:
    """To stderr, which systemd hands to journald; no time stamps (journald adds them)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{name}: %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def cmd_engine(args: argparse.Namespace, env: Any) -> int:
    from keel import config as cfg
    from keel.engine.serve import serve
    path = _config_path(args, env)
    config = cfg.load(path)                       # refuse a bad file before forking anything
    # ... and credentials it cannot use: no URL, no token, a CA or secret file it refuses
    cfg.target_from(config.proxmox, env.environ, strict=config.engine.open_secret_files == "refuse")
    es = config.engine
    socket_path = Path(es.socket)
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    _logging("keel-engine")
    holder: dict[str, Any] = {}

    def load() -> Any:
        from keel.engine.api import create_app
        from keel.engine.core import Engine
        engine = Engine(path, env.environ)
        engine.start()
        holder["engine"] = engine
        return create_app(engine)

    def when_ready(_server: Any) -> None:
        os.chmod(socket_path, 0o660)
        try:
            os.chown(socket_path, -1, grp.getgrnam(es.socket_group).gr_gid)
        except (KeyError, PermissionError):
            pass                                  # no such group here (tests): root only

    def worker_exit(_server: Any, _worker: Any) -> None:
        engine = holder.get("engine")
        if engine is not None:
            engine.stop()

    # 32 threads: requests waiting on PVE share one reading (engine.reading) but each holds a
    # thread; the calls that never wait on PVE must still find one.  keel-web passes a
    # user's privileges in a header, which on a cluster with many ACLs outgrows gunicorn's
    # 8 KiB default (the socket is root's and keel-web's only).
    serve(load, {"bind": [f"unix:{socket_path}"], "workers": 1, "threads": 32, "timeout": 120,
                 "limit_request_field_size": 0,
                 "graceful_timeout": 90, "umask": 0o007, "proc_name": "keel-engine",
                 "when_ready": when_ready, "worker_exit": worker_exit})
    return ExitStatus.OK


def cmd_web(args: argparse.Namespace, env: Any) -> int:
    from keel import config as cfg
    from keel.engine.serve import serve
    path = _config_path(args, env)
    config = cfg.load(path)
    cert, key = config.web.cert_files()
    for what, file in (("certificate", cert), ("key", key)):
        if not os.access(file, os.R_OK):
            raise InvalidError(f"keel-web cannot read its TLS {what} {file}; set web.cert and web.key")
    harness = None
    if getattr(args, "harness", None):
        from keel.web.harness import Harness
        harness = Harness.from_dir(args.harness)
    _logging("keel-web")

    def load() -> Any:
        from keel.web.app import create_app
        from keel.web.worker import pools
        pve_calls, engine_calls = pools()
        return create_app(cfg.load(path), harness, pve_calls, engine_calls)

    # One worker process (the auth cache and the count of refused credentials are its
    # own), gevent's: a slow client holds a greenlet, not a thread (keel.web.worker says
    # which deadlines and limits apply; docs/service.md why).
    from keel.web import limits
    serve(load, {"bind": [f"{config.web.host}:{config.web.port}"], "workers": 1,
                 "worker_class": "keel.web.worker.GatewayWorker", "worker_connections": limits.CONNECTIONS,
                 "keepalive": int(limits.HEADERS_S), "timeout": 60, "graceful_timeout": 15,
                 "certfile": cert, "keyfile": key, "proc_name": "keel-web",
                 "post_worker_init": _watch_cert(cert, key)})
    return ExitStatus.OK


def _watch_cert(cert: str, key: str) -> Any:
    """After an ACME renewal the certificate changes on disk: reload (SIGHUP to the master)."""
    def start(worker: Any) -> None:
        import signal
        import threading
        import time

        def stamp() -> tuple[float, float]:
            try:
                return os.stat(cert).st_mtime, os.stat(key).st_mtime
            except OSError:
                return (0.0, 0.0)

        first = stamp()

        def watch() -> None:
            while True:
                time.sleep(5)
                if stamp() != first:
                    logging.getLogger("keel.web").info("TLS certificate %s changed: reloading", cert)
                    os.kill(worker.ppid, signal.SIGHUP)
                    return
        threading.Thread(target=watch, name="keel-cert-watch", daemon=True).start()
    return start


DEFAULT_CONFIG = """\
# Keel's configuration, written by `keel setup`; shared by every node of the cluster.
# docs/balancing.md and docs/service.md list every key.
proxmox:
  url: {url}
  token_file: {token_file}
{ca}balancing:
  enable: false        # plans are shown (keel plan, the UI); nothing migrates until this is true
"""


def cmd_setup(args: argparse.Namespace, env: Any) -> int:
    from keel import config as cfg
    from keel.cli import connect_with_config
    from keel.pve.provision import provision
    from keel.files import atomic_write
    config_path = Path(args.config or env.environ.get("KEEL_CONFIG") or cfg.DEFAULT_CONFIG_FILE)
    # the config is read from any directory: every path written into it is absolute
    token_file = Path(args.token_file or cfg.DEFAULT_TOKEN_FILE).absolute()
    if not config_path.exists():
        args.config = None                    # not there yet: this command writes it
        env.environ.pop("KEEL_CONFIG", None)
    client, _ = connect_with_config(args, env)
    have_secret = token_file.exists() and token_file.read_text().strip().startswith("keel@pve!keel=")
    if have_secret:
        from keel.files import check_secret_mode
        check_secret_mode(token_file, "API token")
    outcome = provision(client, have_secret)
    for line in outcome.steps:
        env.stdout.write(line + "\n")
    if outcome.token is not None:
        token_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(token_file, outcome.token + "\n", mode=0o600, what="the token secret file")
        env.stdout.write(f"token secret written to {token_file} (root only)\n")
    if config_path.exists():
        env.stdout.write(f"config {config_path}: exists, left as it is\n")
    else:
        target = client.target
        ca = getattr(args, "ca_file", None) or env.environ.get("KEEL_PVE_CA_FILE")
        ca = str(Path(ca).absolute()) if ca else None
        text = DEFAULT_CONFIG.format(url=target.url, token_file=token_file,
                                     ca=f"  ca_file: {ca}\n" if ca else "")
        cfg.parse(yaml.safe_load(text), str(config_path))      # what we write must load
        atomic_write(config_path, text)
        env.stdout.write(f"config {config_path}: written (balancing off until you enable it)\n")
    return ExitStatus.OK


COMMANDS = {"engine": cmd_engine, "web": cmd_web, "setup": cmd_setup}
