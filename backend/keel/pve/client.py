"""Keel's connection to one Proxmox VE API endpoint, over proxmoxer.

``PveClient`` adds three things to proxmoxer: PVE's errors become Keel's exceptions
with PVE's own message (and never a secret); reads that fail for a passing reason
(connection refused, a node briefly unreachable) are retried with backoff, writes
never are; and every HTTP request is counted (``calls``), so tests and the benchmark
can hold the snapshot to its budget.

    >>> client = PveClient(Target("pve1.example.com", user="keel@pve", token_name="keel",
    ...                           token_secret="..."))          # doctest: +SKIP
    >>> client.get("/cluster/resources", type="node")          # doctest: +SKIP
    [{'id': 'node/pve1', 'node': 'pve1', 'status': 'online', ...}]
"""

from __future__ import annotations

import logging
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

import proxmoxer
import requests
from proxmoxer.core import ResourceException

try:
    from proxmoxer.core import AuthenticationError
except ImportError:  # proxmoxer 1.x (Debian 12) keeps it in the https backend
    from proxmoxer.backends.https import AuthenticationError  # type: ignore[no-redef]

from keel.errors import (AuthError, BusyError, InvalidError, KeelError, NotFoundError,
                         PermissionDeniedError, UnavailableError)

log = logging.getLogger("keel.pve")

DEFAULT_PORT = 8006
DEFAULT_TIMEOUT_S = 30.0
RETRY_DELAYS_S = (0.5, 1.5, 4.0)
_UNAVAILABLE_HINTS = ("no quorum", "cluster not ready", "No route to host", "Connection refused",
                      "Connection timed out", "node is offline")


@dataclass(frozen=True)
class Target:
    """Where a PVE API is and how to log in. Secrets are left out of ``repr``."""

    host: str
    port: int = DEFAULT_PORT
    user: str | None = None             # user@realm (both for tokens and passwords)
    token_name: str | None = None       # the part after "!" in user@realm!name
    token_secret: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    verify: bool | str = True           # True, False, or a CA bundle file
    timeout_s: float = DEFAULT_TIMEOUT_S
    origin: str = ""                    # where the token came from, for errors ("KEEL_PVE_TOKEN")

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Target":
        """``https://host:8006`` (or ``host``, ``host:port``) → Target."""
        given = url
        if "//" not in url:
            url = "https://" + url
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as err:          # "Port out of range", "Invalid IPv6 URL"
            raise InvalidError(f"PVE URL must look like https://host:8006, got {given!r} ({err})") from None
        if parts.scheme != "https" or not parts.hostname:
            raise InvalidError(f"PVE URL must look like https://host:8006, got {given!r}")
        return cls(parts.hostname, port or DEFAULT_PORT, **kwargs)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    @property
    def who(self) -> str:
        if self.token_name:
            return f"{self.user}!{self.token_name}"
        return self.user or "?"

    def with_token(self, token: str, origin: str = "") -> "Target":
        """``user@realm!name=secret`` (as PVE shows it once) → a Target using that token;
        ``origin`` says where it came from (``KEEL_PVE_TOKEN``, ``proxmox.token_file FILE``)."""
        if "!" not in token or "=" not in token:
            raise InvalidError(f"an API token must look like user@realm!name=secret"
                               f"{f' (the one from {origin} does not)' if origin else ''}")
        ident, secret = token.split("=", 1)
        user, name = ident.split("!", 1)
        return Target(self.host, self.port, user, name, secret, None, self.verify, self.timeout_s, origin)


class PveClient:
    """Calls on one PVE API endpoint; see the module docstring."""

    def __init__(self, target: Target, sleep: Callable[[float], None] = time.sleep,
                 retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
                 fence: Callable[[str], None] | None = None):
        if not target.user:
            raise InvalidError("no PVE user given (user@realm, or a token user@realm!name)")
        if not (target.token_name and target.token_secret) and target.password is None:
            raise InvalidError(f"no credentials for {target.user}: give an API token or a password")
        self.target = target
        # Called before every call that may change the cluster (anything but GET); raises
        # to stop it.  keel-engine's leader lease (engine.lease.Fence): only the leader acts.
        self.fence = fence
        self.calls = 0
        self._sleep = sleep
        self._retry_delays = retry_delays_s
        kwargs: dict[str, Any] = dict(host=target.host, port=target.port, user=target.user,
                                      verify_ssl=target.verify, timeout=target.timeout_s)
        if target.token_name and target.token_secret:
            kwargs.update(token_name=target.token_name, token_value=target.token_secret)
        else:
            kwargs.update(password=target.password)
            self.calls += 1   # the ticket request
        self._seen = threading.local()
        try:
            self._api = proxmoxer.ProxmoxAPI(backend="https", **kwargs)
        except AuthenticationError:
            raise AuthError(f"PVE at {target.url} refused the login of {target.user} "
                            f"(wrong user or password?)") from None
        except requests.exceptions.SSLError as err:
            raise UnavailableError(_tls_message(target, err)) from None
        except requests.exceptions.RequestException as err:
            raise UnavailableError(f"cannot reach PVE at {target.url}: {_short(err)}") from None
        # proxmoxer 1.x (Debian 12) drops PVE's per-parameter "errors" from error answers;
        # a response hook on its session keeps them (the session is proxmoxer's own).
        session = getattr(self._api, "_store", {}).get("session")
        if session is not None:
            session.hooks["response"].append(self._remember_errors)
            session.mount("https://", _Adapter(fence, target.timeout_s))
        elif fence is not None:
            raise AssertionError("proxmoxer keeps no session here: the fence cannot be put in place")

    def close(self) -> None:
        """Close the kept-alive connections."""
        session = getattr(self._api, "_store", {}).get("session")
        if session is not None:
            session.close()

    def __enter__(self) -> "PveClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _remember_errors(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self._seen.errors = None
        if response.status_code >= 400:
            try:
                errors = response.json().get("errors")
            except ValueError:
                errors = None
            self._seen.errors = errors if isinstance(errors, dict) else None

    # -- calls ---------------------------------------------------------------------

    def get(self, path: str, /, **params: Any) -> Any:
        return self._call("GET", path, params)

    def post(self, path: str, /, **params: Any) -> Any:
        return self._call("POST", path, params)

    def put(self, path: str, /, **params: Any) -> Any:
        return self._call("PUT", path, params)

    def delete(self, path: str, /, **params: Any) -> Any:
        return self._call("DELETE", path, params)

    def _call(self, method: str, path: str, params: dict[str, Any]) -> Any:
        params = {k: _wire(v) for k, v in params.items() if v is not None}
        attempts = 1 + (len(self._retry_delays) if method == "GET" else 0)
        for attempt in range(attempts):
            self.calls += 1
            try:
                resource = self._api(path.strip("/"))
                return getattr(resource, method.lower())(**params)
            except ResourceException as err:
                error = _map_resource_error(method, path, err, getattr(self._seen, "errors", None))
                if err.status_code == 401 and self.target.token_name:
                    error = AuthError(_token_refused(self.target))
            except requests.exceptions.SSLError as err:
                raise UnavailableError(_tls_message(self.target, err)) from None
            except requests.exceptions.RequestException as err:
                error = UnavailableError(f"cannot reach PVE at {self.target.url} "
                                         f"({method} {path}): {_short(err)}")
            except AuthenticationError:
                error = AuthError(f"PVE at {self.target.url} refused the login of {self.target.user}")
            if not isinstance(error, UnavailableError) or attempt == attempts - 1:
                raise error
            delay = self._retry_delays[attempt]
            log.warning("%s %s failed (%s); retrying in %.1fs", method, path, error, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")


class _Adapter(requests.adapters.HTTPAdapter):
    """Every request Keel sends to PVE goes out here.  It checks the fence as late as it can
    be checked, after proxmoxer and requests have built the request, so that a process that
    stalls between the check and the socket has the least time to do so (docs/service.md,
    "What the fence cannot do").  And it gives every request the client's timeout:
    proxmoxer 1.2 (Debian 12) applies its ``timeout`` to the login only, so a call to a
    PVE that stopped answering would wait for ever."""

    def __init__(self, fence: Callable[[str], None] | None, timeout_s: float):
        super().__init__()
        self.fence = fence
        self.timeout_s = timeout_s

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        if request.method != "GET" and self.fence is not None:
            path = urlsplit(request.url or "").path
            self.fence(f"{request.method} {path.removeprefix('/api2/json')}")
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self.timeout_s
        return super().send(request, *args, **kwargs)


def _wire(value: Any) -> Any:
    """PVE wants booleans as 0/1."""
    if isinstance(value, bool):
        return int(value)
    return value


def _short(err: Exception) -> str:
    text = str(err)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host name"
    return text.splitlines()[0][:200] if text else type(err).__name__


def _tls_message(target: Target, err: Exception) -> str:
    return (f"TLS verification of {target.url} failed ({_tls_reason(err)}): give the cluster's CA "
            f"certificate (--ca-file, KEEL_PVE_CA_FILE or proxmox.ca_file; on a node "
            f"/etc/pve/pve-root-ca.pem) or, for a test cluster only, turn verification off "
            f"(--insecure, KEEL_PVE_INSECURE=1 or proxmox.verify_tls: false)")


def _tls_reason(err: BaseException) -> str:
    """What OpenSSL said, whole ("certificate verify failed: self-signed certificate"), from
    the chain requests and urllib3 wrap it in."""
    seen: list[BaseException] = []
    todo: list[object] = [err]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or item in seen:
            continue
        seen.append(item)
        if isinstance(item, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {item.verify_message}" if item.verify_message \
                else "certificate verify failed"
        if isinstance(item, ssl.SSLError) and item.reason:
            return str(item.reason).replace("_", " ").lower()
        todo += [*item.args, getattr(item, "reason", None), item.__cause__, item.__context__]
    found = re.search(r"\[SSL: [A-Z_]+\] ([^()'\"]+)", str(err))
    return found.group(1).strip() if found else type(err).__name__


def _token_refused(target: Target) -> str:
    origin = f" (from {target.origin})" if target.origin else ""
    return (f"PVE at {target.url} refused the API token {target.who}{origin}: check that the token "
            f"exists (`pveum user token list {target.user}`) and that its secret is the one PVE showed "
            f"when it was made; `keel setup` makes a new one")


def _map_resource_error(method: str, path: str, err: ResourceException,
                        seen_errors: dict[str, Any] | None = None) -> KeelError:
    """A PVE error answer → the Keel exception for what the caller should do."""
    status = err.status_code
    text = (err.content or err.status_message or "").strip()
    raw_errors = err.errors if isinstance(err.errors, dict) and err.errors else seen_errors
    errors = {str(k): str(v).strip() for k, v in (raw_errors or {}).items()}
    message = f"PVE {method} {path}: {text}" if text else f"PVE {method} {path}: HTTP {status}"
    if status == 400:
        return InvalidError(message, errors)
    if status == 401:
        return AuthError(message)
    if status == 403:
        return PermissionDeniedError(message)
    if status == 501:
        return NotFoundError(message)
    if status >= 595 or any(hint in text for hint in _UNAVAILABLE_HINTS):
        return UnavailableError(message)
    if "does not exist" in text or "no such" in text.lower():
        return NotFoundError(message)
    if "is locked" in text or "already running" in text:
        return BusyError(message)
    return KeelError(message, errors)
