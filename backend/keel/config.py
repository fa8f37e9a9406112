"""Keel's configuration file (``/etc/pve/keel/keel.yaml``): strict, with every bad key named.

Sections: ``proxmox`` (how to reach the Proxmox VE API), ``balancing`` (what the
balancer may do: ``keel.balance.settings``), ``engine`` and ``web`` (the services' paths
and ports: ``keel.engine.settings``).  The file
holds no secrets: the API token secret lives in a root-only file that ``token_file``
names (``keel setup`` writes it to ``/etc/pve/priv/keel/pve-token``).

.. code-block:: yaml

    proxmox:
      url: https://127.0.0.1:8006
      token_file: /etc/pve/priv/keel/pve-token   # holds user@realm!name=secret
      ca_file: /etc/pve/pve-root-ca.pem
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from keel.errors import InvalidError
from keel.files import check_secret_mode
from keel.balance import settings as balance_settings
from keel.balance.settings import BalancingSettings
from keel.engine.settings import EngineSettings, WebSettings, read_engine, read_web
from keel.pve.client import DEFAULT_TIMEOUT_S, Target
from keel.runners import settings as runner_settings
from keel.runners.settings import RunnersSettings
from keel.validate import Problems, Reader

DEFAULT_CONFIG_FILE = Path("/etc/pve/keel/keel.yaml")
DEFAULT_TOKEN_FILE = Path("/etc/pve/priv/keel/pve-token")
DEFAULT_PVE_URL = "https://127.0.0.1:8006"
PVE_CA_FILE = Path("/etc/pve/pve-root-ca.pem")


@dataclass(frozen=True)
class ProxmoxSettings:
    url: str = DEFAULT_PVE_URL
    user: str | None = None
    token_file: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class Config:
    proxmox: ProxmoxSettings = ProxmoxSettings()
    balancing: BalancingSettings = BalancingSettings()
    engine: EngineSettings = EngineSettings()
    web: WebSettings = WebSettings()
    runners: RunnersSettings = RunnersSettings()
    source: str = "(defaults)"


def load(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidError(f"cannot read config {path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidError(f"{path}: not valid YAML: {err}") from None
    except RecursionError:
        raise InvalidError(f"{path}: not valid YAML: nested too deeply") from None
    return parse(data, str(path))


def parse(data: Any, source: str = "config") -> Config:
    problems = Problems(source)
    top = Reader(data, "", problems)
    proxmox = _proxmox(top.mapping("proxmox"))
    balancing = balance_settings.read(top.mapping("balancing"))
    engine = read_engine(top.mapping("engine"))
    web = read_web(top.mapping("web"))
    runners = runner_settings.read(top.mapping("runners"))
    top.done()
    problems.raise_if_any()
    return Config(proxmox=proxmox, balancing=balancing, engine=engine, web=web, runners=runners, source=source)


def _proxmox(r: Reader) -> ProxmoxSettings:
    settings = ProxmoxSettings(
        url=r.get("url", str, DEFAULT_PVE_URL),
        user=r.get("user", str, None),
        token_file=r.get("token_file", str, None),
        password_file=r.get("password_file", str, None),
        ca_file=r.get("ca_file", str, None),
        verify_tls=r.get("verify_tls", bool, True),
        timeout_s=r.duration("timeout", DEFAULT_TIMEOUT_S),
    )
    if r.has("token_secret") or r.has("password"):
        r.seen.update({"token_secret", "password"})
        r.problems.add(r.sub("token_secret" if r.has("token_secret") else "password"),
                       "secrets do not belong in the config file; put them in a root-only file "
                       "and name it with token_file or password_file")
    r.done()
    return settings


OPEN_SECRETS_OVERRIDE = "engine.open_secret_files: warn"


def read_secret(path: str, what: str, strict: bool = False) -> str:
    """A secret from its file (the message names the file, never the content).  A file its
    group or others may read is warned about, or with ``strict`` (keel-engine) refused."""
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise InvalidError(f"cannot read the {what} from {path}: {err.strerror}") from None
    if not value:
        raise InvalidError(f"the {what} file {path} is empty")
    check_secret_mode(Path(path), what, strict, OPEN_SECRETS_OVERRIDE)
    return value


def check_ca_file(path: str, named: str) -> None:
    """A CA file that is not there or holds no certificate, named with where it was given
    (``--ca-file``, ``KEEL_PVE_CA_FILE``, ``proxmox.ca_file``) before any connection."""
    import ssl
    fix = ("give the cluster's CA certificate (on a node /etc/pve/pve-root-ca.pem) or, for a test "
           "cluster only, turn verification off (--insecure or KEEL_PVE_INSECURE=1)")
    file = Path(path)
    if file.is_dir():
        return                                  # a directory of hashed certificates, as OpenSSL takes
    if not file.exists():
        raise InvalidError(f"the CA file {path} ({named}) does not exist: {fix}")
    try:
        ssl.create_default_context(cafile=str(file))
    except (ssl.SSLError, OSError, ValueError, UnicodeDecodeError):
        raise InvalidError(f"the CA file {path} ({named}) cannot be read as PEM certificates: {fix}") from None


def target_from(settings: ProxmoxSettings, env: dict[str, str] | None = None, *, strict: bool = False,
                sources: dict[str, str] | None = None) -> Target:
    """The PVE target from settings, with ``KEEL_PVE_*`` environment variables on top.
    ``sources`` names where an environment value really came from (``{"KEEL_PVE_CA_FILE":
    "--ca-file"}``), for errors; ``strict``: secret files others may read are refused."""
    env = dict(os.environ if env is None else env)
    named = {**{key: key for key in env}, **(sources or {})}
    url_from = named["KEEL_PVE_URL"] if env.get("KEEL_PVE_URL") else "proxmox.url"
    url = env.get("KEEL_PVE_URL") or settings.url
    verify: bool | str = settings.verify_tls
    ca_file = env.get("KEEL_PVE_CA_FILE") or settings.ca_file
    insecure = env.get("KEEL_PVE_INSECURE", "").lower() in ("1", "true", "yes")
    if ca_file:
        verify = ca_file
        if verify and not insecure:
            check_ca_file(ca_file, named["KEEL_PVE_CA_FILE"] if env.get("KEEL_PVE_CA_FILE") else "proxmox.ca_file")
    elif verify and PVE_CA_FILE.exists() and _is_local(url):
        verify = str(PVE_CA_FILE)
    if insecure:
        verify = False
    try:
        target = Target.from_url(url, verify=verify, timeout_s=settings.timeout_s)
    except InvalidError as err:
        raise InvalidError(f"{url_from}: {err}") from None
    token = env.get("KEEL_PVE_TOKEN")
    origin = named.get("KEEL_PVE_TOKEN", "KEEL_PVE_TOKEN")
    # a user given on the command line or in the environment wins over the file's token
    by_user = bool(env.get("KEEL_PVE_USER"))
    if not token and settings.token_file and not by_user:
        token = read_secret(settings.token_file, "API token", strict)
        origin = f"proxmox.token_file {settings.token_file}"
    if not token and not by_user and not settings.password_file and not env.get("KEEL_PVE_PASSWORD") \
            and DEFAULT_TOKEN_FILE.exists():
        token = read_secret(str(DEFAULT_TOKEN_FILE), "API token", strict)
        origin = str(DEFAULT_TOKEN_FILE)
    if token:
        return target.with_token(token, origin)
    user = env.get("KEEL_PVE_USER") or settings.user
    password = env.get("KEEL_PVE_PASSWORD")
    if password is None and settings.password_file:
        password = read_secret(settings.password_file, "password", strict)
    if not user or password is None:
        raise InvalidError("no way to log in to PVE: give an API token (KEEL_PVE_TOKEN or "
                           "proxmox.token_file, as user@realm!name=secret) or a user and password "
                           "(KEEL_PVE_USER and KEEL_PVE_PASSWORD, or proxmox.user and proxmox.password_file); "
                           "`keel setup` makes a token")
    from dataclasses import replace
    return replace(target, user=user, password=password)


def _is_local(url: str) -> bool:
    return "127.0.0.1" in url or "localhost" in url


def replace_section(text: str, key: str, value: dict[str, Any]) -> str:
    """The config file ``text`` with its top-level ``key:`` section replaced by ``value``
    (or added at the end); every other line, comments included, stays as it was.  This is
    how the web UI's settings window saves ``balancing`` alone.

    >>> replace_section("# mine\\nbalancing: {hold: 1}\\nweb: {}\\n", "balancing", {"hold": 2})
    '# mine\\nbalancing:\\n  hold: 2\\nweb: {}\\n'
    """
    try:
        current = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as err:
        raise InvalidError(f"config: the file is not valid YAML, so {key} cannot be set alone: {err}") from None
    if current is not None and not isinstance(current, dict):
        raise InvalidError(f"config: the file is not a mapping, so {key} cannot be set alone")
    block = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    if start is None:
        return "".join(lines) + block
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#" and not
                                (lines[end].startswith("#") and _top_level_follows(lines, end))):
        end += 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def _top_level_follows(lines: list[str], index: int) -> bool:
    """A column-0 comment belongs to the next section when only comments or blank lines lie
    between it and a top-level key."""
    for line in lines[index:]:
        if line.strip() and not line.startswith("#"):
            return not line[0].isspace()
    return True
