"""The ``engine:`` and ``web:`` sections of Keel's config: every path the two services
use, so that several can run side by side on one machine (tests do).

.. code-block:: yaml

    engine:
      socket: /run/keel/engine.sock       # the local API (root and group keel only)
      socket_group: keel
      store: /var/lib/keel/keel.db        # history (SQLite)
      lock: /etc/pve/priv/lock/keel-leader
      lock_expiry: 120s                   # pmxcfs's; shorter only on ordinary directories
      lock_renew: 10s
      shared_dir: /etc/pve/keel           # cluster-wide state: maintenance, the leader
      node: pve1                          # this node's name (default: the host name)
      status_interval: 30s                # followers: how old a cluster reading may be
      secrets_dir: /etc/pve/priv/keel     # where the web UI's secrets are written (0600)
      open_secret_files: refuse           # a PVE token or password file others may read: refuse | warn
    web:
      listen: 0.0.0.0:8443
      cert: /etc/pve/local/pveproxy-ssl.pem   # default: this, else pve-ssl.pem
      key: /etc/pve/local/pveproxy-ssl.key
      origins: []                         # more browser origins than https://<host>:8006
      auth_cache: 60s
      metrics: auth                       # auth | open | off
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from keel.engine.lease import DEFAULT_LOCK_DIR, PMXCFS_EXPIRY_S
from keel.validate import Reader

PVE_LOCAL = Path("/etc/pve/local")
METRICS_ACCESS = ("auth", "open", "off")
OPEN_SECRET_FILES = ("refuse", "warn")


def _hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class EngineSettings:
    socket: str = "/run/keel/engine.sock"
    socket_group: str = "keel"
    store: str = "/var/lib/keel/keel.db"
    lock: str = str(DEFAULT_LOCK_DIR)
    lock_expiry_s: float = PMXCFS_EXPIRY_S
    lock_renew_s: float = 10.0
    shared_dir: str = "/etc/pve/keel"
    node: str = ""
    status_interval_s: float = 30.0
    secrets_dir: str = "/etc/pve/priv/keel"
    open_secret_files: str = "refuse"    # PVE's token or password file readable by others: refuse | warn

    @property
    def node_name(self) -> str:
        return self.node or _hostname()


def default_cert() -> tuple[str, str]:
    """pveproxy's certificate: the custom or ACME one if there is one, else the node's own."""
    custom = PVE_LOCAL / "pveproxy-ssl.pem"
    if custom.exists():
        return str(custom), str(PVE_LOCAL / "pveproxy-ssl.key")
    return str(PVE_LOCAL / "pve-ssl.pem"), str(PVE_LOCAL / "pve-ssl.key")


@dataclass(frozen=True)
class WebSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    cert: str = ""
    key: str = ""
    origins: tuple[str, ...] = ()
    auth_cache_s: float = 60.0
    metrics: str = "auth"
    www_key: str = "/etc/pve/pve-www.key"     # PVE's CSRF key (root:www-data 0640 in pmxcfs)

    def cert_files(self) -> tuple[str, str]:
        if self.cert:
            return self.cert, self.key or self.cert
        return default_cert()


def read_engine(r: Reader) -> EngineSettings:
    d = EngineSettings()
    expiry = r.duration("lock_expiry", d.lock_expiry_s)
    renew = r.duration("lock_renew", d.lock_renew_s)
    if renew * 4 > expiry:
        r.problems.add(r.sub("lock_renew"), f"renew at most every quarter of lock_expiry "
                                            f"({expiry:g} s), got {renew:g} s")
    settings = EngineSettings(
        socket=r.get("socket", str, d.socket), socket_group=r.get("socket_group", str, d.socket_group),
        store=r.get("store", str, d.store), lock=r.get("lock", str, d.lock),
        lock_expiry_s=expiry, lock_renew_s=renew, shared_dir=r.get("shared_dir", str, d.shared_dir),
        node=r.get("node", str, d.node), status_interval_s=r.duration("status_interval", d.status_interval_s),
        secrets_dir=r.get("secrets_dir", str, d.secrets_dir),
        open_secret_files=r.choice("open_secret_files", OPEN_SECRET_FILES, d.open_secret_files))
    r.done()
    return settings


def read_web(r: Reader) -> WebSettings:
    d = WebSettings()
    listen = r.get("listen", str, f"{d.host}:{d.port}")
    host, _, port_text = listen.rpartition(":")
    port = d.port
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        r.problems.add(r.sub("listen"), f"expected host:port such as 0.0.0.0:8443, got {listen!r}")
        host = d.host
    else:
        port = int(port_text)
    settings = WebSettings(host=host.strip("[]"), port=port, cert=r.get("cert", str, ""),
                           key=r.get("key", str, ""), origins=r.string_list("origins"),
                           auth_cache_s=r.duration("auth_cache", d.auth_cache_s),
                           metrics=r.choice("metrics", METRICS_ACCESS, d.metrics),
                           www_key=r.get("www_key", str, d.www_key))
    if settings.auth_cache_s > 60:
        r.problems.add(r.sub("auth_cache"), "at most 60s: a revoked ticket must stop working soon")
    r.done()
    return settings
