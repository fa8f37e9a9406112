"""Who is calling keel-web, and what may they do: the caller's own ticket or API token,
checked by Proxmox VE itself (``GET /access/permissions``).

keel-web never checks a ticket's signature or PVE's ACLs on its own: PVE answers with the
caller's effective privileges per path, each with its propagate flag (1: it passes down to
the paths below, 0: it holds on that path only), or 401.  The whole answer is kept, flags
and all: ``keel.authz`` evaluates it per object as PVE does, and keel-web passes it on to
keel-engine.  The call is a GET, so it needs no CSRF token and writes nothing to PVE's
logs.  The credential is passed through and never logged or kept, except as a SHA-256 key
of keel-web's short cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import requests

from keel.authz import Principal
from keel.errors import AuthError, UnavailableError

_TICKET = re.compile(r"^PVEAuthCookie=(PVE:([^:]+):[0-9A-Fa-f]+::\S+)$")
_TOKEN = re.compile(r"^PVEAPIToken=(([^!=\s]+)![^=\s]+)=\S+$")


@dataclass(frozen=True)
class Caller:
    user: str                                   # alice@pam, or alice@pam!ci for a token
    tree: dict[str, dict[str, int]]             # path -> {privilege: propagate (1 or 0)}
    ticket: bool = False                        # a ticket (writes need a CSRF token), or an API token

    @property
    def principal(self) -> Principal:
        return Principal(self.user, self.tree, via_web=True)

    def can(self, privilege: str, path: str = "/") -> bool:
        """As PVE decides for ``path`` (``keel.authz``: a privilege set on a path holds
        there whatever its propagate flag; below it only if it propagates)."""
        return self.principal.can(privilege, path)

    def anywhere(self, privilege: str) -> bool:
        """Has ``privilege`` on some path: worth asking keel-engine, which checks each object."""
        return self.principal.anywhere(privilege)


def parse_authorization(header: str) -> tuple[str, bool]:
    """The user a credential claims to be (not yet checked) and whether it is a ticket, or
    AuthError if it is no PVE credential at all."""
    header = header.strip()
    ticket = _TICKET.match(header)
    if ticket:
        return ticket.group(2), True
    token = _TOKEN.match(header)
    if token:
        return token.group(1), False
    raise AuthError("no PVE ticket or API token: send Authorization: PVEAuthCookie=<ticket> "
                    "or PVEAPIToken=<user@realm!name>=<secret>")


def check(base_url: str, authorization: str, verify: bool | str, timeout_s: float = 10.0) -> Caller:
    """Ask PVE at ``base_url`` (https://127.0.0.1:8006) who this is and what they may do."""
    user, is_ticket = parse_authorization(authorization)
    url = base_url.rstrip("/") + "/api2/json/access/permissions"
    try:
        response = requests.get(url, headers={"Authorization": authorization.strip()},
                                verify=verify, timeout=timeout_s)
    except requests.exceptions.SSLError as err:
        raise UnavailableError(f"cannot check credentials with Proxmox VE at {base_url}: TLS: {err}") from None
    except requests.RequestException as err:
        raise UnavailableError(f"cannot check credentials with Proxmox VE at {base_url}: "
                               f"{type(err).__name__}") from None
    if response.status_code == 401:
        raise AuthError("authentication failure: the ticket or token was refused by Proxmox VE")
    if response.status_code != 200:
        raise UnavailableError(f"Proxmox VE answered {response.status_code} to a permission check")
    try:
        tree = _tree(response.json()["data"] or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UnavailableError("Proxmox VE's permission answer was not understood") from None
    return Caller(user, tree, is_ticket)


def _tree(data: dict) -> dict[str, dict[str, int]]:
    """PVE's answer, ``{path: {privilege: 1|0}}``, with every flag kept: a 0 is a privilege
    granted on that path without propagation, not a missing one."""
    if not isinstance(data, dict):
        raise TypeError("expected a map of path to privileges")
    tree: dict[str, dict[str, int]] = {}
    for path, privileges in data.items():
        if not isinstance(path, str) or not isinstance(privileges, dict):
            raise TypeError("expected a map of path to privileges")
        tree[path] = {str(name): 1 if flag else 0 for name, flag in privileges.items()}
    return tree


def login(base_url: str, username: str, password: str, verify: bool | str,
          timeout_s: float = 10.0) -> dict[str, object]:
    """A PVE ticket for a user name and password (``POST /access/ticket``), as PVE's login
    window gets one: ``{"username", "ticket", "CSRFPreventionToken", "cap"}``.  Only the
    web UI harness (a development aid) uses it; the password is passed through, never kept."""
    url = base_url.rstrip("/") + "/api2/json/access/ticket"
    try:
        response = requests.post(url, data={"username": username, "password": password},
                                 verify=verify, timeout=timeout_s)
    except requests.RequestException as err:
        raise UnavailableError(f"cannot log in at Proxmox VE {base_url}: {type(err).__name__}") from None
    if response.status_code == 401:
        raise AuthError(f"login failed for {username!r}: Proxmox VE refused the user name or password")
    if response.status_code != 200:
        raise UnavailableError(f"Proxmox VE answered {response.status_code} to a login")
    try:
        data = response.json()["data"]
        return {key: data[key] for key in ("username", "ticket", "CSRFPreventionToken", "cap")}
    except (ValueError, KeyError, TypeError):
        raise UnavailableError("Proxmox VE's login answer was not understood") from None
