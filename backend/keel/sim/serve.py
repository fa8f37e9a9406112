"""``keel sim --scenario FILE``: serve a simulated cluster over HTTPS until told to stop."""

from __future__ import annotations

import ipaddress
import logging
import signal
import ssl
import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

from keel.errors import ExitStatus
from keel.sim import scenario as sc
from keel.sim.clock import Clock
from keel.sim.cluster import Cluster
from keel.sim.httpd import HttpsServer
from keel.sim.server import SimApp
from keel.sim.tls import make_certificate

log = logging.getLogger("keel.sim")


class ListenError(Exception):
    """The server could not bind its address (in use, not an address of this machine, ...)."""

    def __init__(self, host: str, port: int, reason: str):
        super().__init__(f"cannot listen on {host}:{port}: {reason}")


class SimServer:
    """A running simulator: ``start()`` binds and serves in a thread, ``stop()`` ends it."""

    def __init__(self, scenario: sc.Scenario, port: int = 0, host: str = "127.0.0.1",
                 clock_factor: float = 1.0, tls_dir: Path | None = None):
        self.cluster = Cluster(scenario, Clock(scenario.start_time, clock_factor))
        self._tmp = None
        if tls_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="keel-sim-")
            tls_dir = Path(self._tmp.name)
        self.cert_file, key_file = make_certificate(Path(tls_dir), host)
        # PVE's CSRF key, as /etc/pve/pve-www.key: keel-web checks the simulator's
        # CSRFPreventionToken with it (web.www_key).
        self.www_key_file = Path(tls_dir) / "pve-www.key"
        self.www_key_file.touch(mode=0o600)
        self.www_key_file.write_bytes(self.cluster.www_key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, key_file)
        try:
            self.server = HttpsServer(host, port, SimApp(self.cluster), context)
        except OSError as err:   # EADDRINUSE, EADDRNOTAVAIL, an unknown host name, ...
            if self._tmp is not None:
                self._tmp.cleanup()
            raise ListenError(host, port, err.strerror or str(err)) from None
        self.host = host
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, name="keel-sim",
                                        daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()


def is_loopback(host: str) -> bool:
    """Whether ``host`` keeps the simulator on this machine (``localhost`` or 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(scenario_path: str, port: int, clock_factor: float, host: str = "127.0.0.1",
        tls_dir: str | None = None, out: TextIO = sys.stdout, err: TextIO | None = None) -> int:
    """Serve until SIGTERM or SIGINT (status 0).  One line on ``out`` once listening; a port
    that cannot be bound is one line on ``err`` (default: standard error) and status 1."""
    err = err if err is not None else sys.stderr
    scenario = sc.load(scenario_path)
    if not is_loopback(host):
        print(f"keel sim: warning: listening on {host}, not on loopback: the control API (/_sim) "
              f"has no authentication, so anyone who reaches this port can change the "
              f"simulation", file=err, flush=True)
    try:
        server = SimServer(scenario, port, host, clock_factor, Path(tls_dir) if tls_dir else None)
    except ListenError as error:
        print(f"keel sim: {error}", file=err, flush=True)
        return ExitStatus.ERROR

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"listening on {server.url}", file=out, flush=True)
    log.info("simulating %s: %d nodes, %d guests, PVE %s, clock x%g, certificate %s",
             scenario.name, len(scenario.nodes), len(scenario.guests), scenario.pve_version,
             clock_factor, server.cert_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
