# SPDX-License-Identifier: AGPL-3.0-or-later
"""The runners' secrets, write-only: checked, then written atomically with mode 0600.

The config names each secret's file; the files live in the secrets directory
(``engine.secrets_dir``, ``/etc/pve/priv/keel`` on a node: root-only, replicated by
pmxcfs).  Nothing here ever returns or logs a secret: ``state`` says only whether each
file is set, and every error names the field and the file, never the content.

| id | config key (under ``runners.``) | default file | must be |
|---|---|---|---|
| ``github.app_private_key`` | ``github.app_private_key_path`` | ``github-app.pem`` | a private key in PEM (RSA, as GitHub Apps use) |
| ``github.token`` | ``github.token_path`` | ``github-token`` | a GitHub token (``ghp_``, ``github_pat_``, ``ghs_``... or 40 hex digits) |
| ``webhook.secret`` | ``webhook.secret_path`` | ``github-webhook-secret`` | 16 to 256 printable characters, no spaces at either end |
| ``providers.<name>.token_secret`` | ``providers[i].token_secret_path`` | ``pve-<name>-token`` | a Proxmox VE API token secret (a UUID) |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keel.errors import InvalidError
from keel.files import atomic_write

MAX_SECRET_BYTES = 16 * 1024
TOKEN_RE = re.compile(r"^(?:gh[pousr]_[A-Za-z0-9]{30,251}|github_pat_[A-Za-z0-9_]{22,251}|[0-9a-f]{40})$")
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
PROVIDER_ID = re.compile(r"^providers\.([A-Za-z0-9-]{1,54})\.token_secret$")
# The file each secret is written to, in the secrets directory (a provider's: pve-<name>-token).
DEFAULT_NAMES = {"github.app_private_key": "github-app.pem", "github.token": "github-token",
                 "webhook.secret": "github-webhook-secret"}


@dataclass(frozen=True)
class SecretSlot:
    """Where one secret goes: its id, the config mapping and key naming its file."""

    id: str
    section: tuple[str | int, ...]      # path of the mapping in the runners section
    key: str                            # the *_path key in that mapping
    default_name: str
    field: str                          # the config path used for errors (runners.github.token)

    @property
    def config_key(self) -> str:
        return self.field.rsplit(".", 1)[0] + "." + self.key if "." in self.field else self.key


def slots(runners: dict[str, Any]) -> list[SecretSlot]:
    """Every secret the runners section can name, given its providers (another cluster's
    token secret for each provider with a ``url`` or already naming one)."""
    out = [SecretSlot("github.app_private_key", ("github",), "app_private_key_path",
                      DEFAULT_NAMES["github.app_private_key"], "runners.github.app_private_key"),
           SecretSlot("github.token", ("github",), "token_path", DEFAULT_NAMES["github.token"],
                      "runners.github.token"),
           SecretSlot("webhook.secret", ("webhook",), "secret_path", DEFAULT_NAMES["webhook.secret"],
                      "runners.webhook.secret")]
    providers = runners.get("providers")
    for index, provider in enumerate(providers if isinstance(providers, list) else []):
        if isinstance(provider, dict) and isinstance(provider.get("name"), str) and \
                re.fullmatch(r"[A-Za-z0-9-]{1,54}", provider["name"]):
            name = provider["name"]
            out.append(SecretSlot(f"providers.{name}.token_secret", ("providers", index), "token_secret_path",
                                  f"pve-{name}-token", f"runners.providers[{index}].token_secret"))
    return out


def slot(runners: dict[str, Any], secret_id: str) -> SecretSlot:
    for found in slots(runners):
        if found.id == secret_id:
            return found
    match = PROVIDER_ID.match(secret_id)
    if match:
        raise InvalidError(f"{secret_id}: no provider named {match.group(1)!r} in runners.providers")
    raise InvalidError(f"no secret {secret_id!r}: expected github.app_private_key, github.token, "
                       f"webhook.secret or providers.<name>.token_secret")


def mapping(runners: dict[str, Any], section: tuple[str | int, ...], create: bool) -> dict[str, Any] | None:
    here: Any = runners
    for part in section:
        if isinstance(part, int):
            here = here[part] if isinstance(here, list) and part < len(here) else None
        else:
            if isinstance(here, dict) and create and not isinstance(here.get(part), dict):
                here[part] = {}
            here = here.get(part) if isinstance(here, dict) else None
        if here is None:
            return None
    return here if isinstance(here, dict) else None


def path_of(runners: dict[str, Any], found: SecretSlot) -> str | None:
    where = mapping(runners, found.section, create=False)
    value = where.get(found.key) if where else None
    return value if isinstance(value, str) and value else None


def check(found: SecretSlot, value: Any) -> str:
    """The secret as it will be written, or ``InvalidError`` naming the field (never the value)."""
    field = found.field
    if not isinstance(value, str) or not value.strip():
        raise InvalidError(f"{field}: expected the secret as text", errors={field: "expected the secret as text"})
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        message = "not valid text (it holds a character UTF-8 cannot encode)"
        raise InvalidError(f"{field}: {message}", errors={field: message}) from None
    if size > MAX_SECRET_BYTES:
        message = f"too long: at most {MAX_SECRET_BYTES // 1024} KiB"
        raise InvalidError(f"{field}: {message}", errors={field: message})
    text = value.strip()
    problem = None
    if found.id == "github.app_private_key":
        problem = _pem_problem(text)
        text += "\n"
    elif found.id == "github.token":
        if not TOKEN_RE.match(text):
            problem = ("not a GitHub token: expected ghp_..., github_pat_..., ghs_... "
                       "or 40 hexadecimal digits")
    elif found.id == "webhook.secret":
        if value != text or not 16 <= len(text) <= 256 or not text.isprintable():
            problem = "expected 16 to 256 printable characters, without spaces at either end"
    elif not UUID_RE.match(text):
        problem = "not a Proxmox VE API token secret: expected a UUID (the part after '=')"
    if problem:
        raise InvalidError(f"{field}: {problem}", errors={field: problem})
    return text


def _pem_problem(text: str) -> str | None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    if "-----BEGIN" not in text or "PRIVATE KEY-----" not in text:
        return "not a private key in PEM: expected -----BEGIN RSA PRIVATE KEY----- (as GitHub gives it)"
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except TypeError:
        return "the private key is encrypted; give it without a passphrase"
    except (ValueError, Exception):    # cryptography raises ValueError, or UnsupportedAlgorithm
        return "not a private key in PEM: it does not parse"
    if not isinstance(key, rsa.RSAPrivateKey):
        return "not an RSA private key: GitHub Apps sign with RSA (RS256)"
    if key.key_size < 2048:
        return f"an RSA key of {key.key_size} bits: GitHub's are 2048 bits or more"
    return None


def inside(directory: Path, path: str, field: str) -> Path:
    """``path`` if it is in ``directory`` (after resolving links), else ``InvalidError``."""
    base = directory.resolve()
    target = Path(path)
    if not target.is_absolute():
        message = f"{path} is not an absolute path (the file's path, in the secrets directory {base})"
        raise InvalidError(f"{field}: {message}", errors={field: message})
    resolved = target.parent.resolve() / target.name
    if resolved.parent != base and base not in resolved.parents:
        message = (f"{path} is outside the secrets directory {base}; Keel writes secrets only there "
                   f"(engine.secrets_dir)")
        raise InvalidError(f"{field}: {message}", errors={field: message})
    if resolved.is_symlink() or (resolved.exists() and not resolved.is_file()):
        message = f"{path} is not a plain file"
        raise InvalidError(f"{field}: {message}", errors={field: message})
    return resolved


def write(path: Path, text: str) -> None:
    """Atomically, mode 0600 from the start, in a directory only root may enter."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidError(f"cannot make the secrets directory {path.parent}: {err.strerror}") from None
    atomic_write(path, text, mode=0o600, what="the secret file")


def is_set(path: str | None) -> bool:
    if not path:
        return False
    try:
        return Path(path).is_file() and Path(path).stat().st_size > 0
    except OSError:
        return False


def state(runners: dict[str, Any]) -> list[dict[str, Any]]:
    """Each secret: its id, the config key naming its file, the file, and whether it is set."""
    out = []
    for found in slots(runners):
        path = path_of(runners, found)
        out.append({"id": found.id, "field": found.field, "config_key": found.config_key,
                    "path": path, "set": is_set(path)})
    return out


def values(runners: dict[str, Any]) -> list[str]:
    """The secrets' contents (to scrub them out of messages); never to be shown."""
    found = []
    for item in slots(runners):
        path = path_of(runners, item)
        if path and is_set(path):
            try:
                text = Path(path).read_text().strip()
            except OSError:
                continue
            if len(text) >= 8:
                found.append(text)
                found.extend(line for line in text.splitlines() if len(line) >= 16 and "-----" not in line)
    return found
