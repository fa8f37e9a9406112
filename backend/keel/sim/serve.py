"""``keel sim --scenario FILE``: serve a simulated cluster over HTTPS until told to stop."""

from __future__ import annotations

import logging
import signal
import ssl
import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

from keel.sim import scenario as sc
from keel.sim.clock import Clock
from keel.sim.cluster import Cluster
from keel.sim.httpd import HttpsServer
from keel.sim.server import SimApp
from keel.sim.tls import make_certificate

log = logging.getLogger("keel.sim")


class SimServer:
    """A running simulator: ``start()`` binds and serves in a thread, ``stop()`` ends it."""

    def __init__(self, scenario: sc.Scenario, port: int = 0, host: str = "127.0.0.1",
                 clock_factor: float = 1.0, tls_dir: Path | None = None):
        self.cluster = Cluster(scenario, Clock(scenario.start_time, clock_factor))
        self._tmp = None
        if tls_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="keel-sim-")
            tls_dir = Path(self._tmp.name)
        self.cert_file, key_file = make_certificate(Path(tls_dir))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, key_file)
        self.server = HttpsServer(host, port, SimApp(self.cluster), context)
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


def run(scenario_path: str, port: int, clock_factor: float, host: str = "127.0.0.1",
        tls_dir: str | None = None, out: TextIO = sys.stdout) -> int:
    scenario = sc.load(scenario_path)
    server = SimServer(scenario, port, host, clock_factor, Path(tls_dir) if tls_dir else None)

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
