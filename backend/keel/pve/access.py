"""Who is calling keel-web, and what may they do: the caller's own ticket or API token,
checked by Proxmox VE itself (``GET /access/permissions``).

keel-web never checks a ticket's signature or PVE's ACLs on its own: PVE answers with the
caller's effective privileges per path, or 401.  The call is a GET, so it needs no CSRF
token and writes nothing to PVE's logs.  The credential is passed through and never
logged or kept, except as a SHA-256 key of keel-web's short cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import requests

from keel.errors import AuthError, UnavailableError

_TICKET = re.compile(r"^PVEAuthCookie=(PVE:([^:]+):[0-9A-Fa-f]+::\S+)$")
_TOKEN = re.compile(r"^PVEAPIToken=(([^!=\s]+)![^=\s]+)=\S+$")


@dataclass(frozen=True)
class Caller:
    user: str                                   # alice@pam, or alice@pam!ci for a token
    privileges: dict[str, frozenset[str]]       # path -> privileges there

    def can(self, privilege: str, path: str = "/") -> bool:
        """PVE answers with effective privileges per path (propagation already applied)."""
        return privilege in self.privileges.get(path, frozenset())


def parse_authorization(header: str) -> str:
    """The user a credential claims to be (not yet checked), or AuthError if it is no PVE
    credential at all."""
    header = header.strip()
    ticket = _TICKET.match(header)
    if ticket:
        return ticket.group(2)
    token = _TOKEN.match(header)
    if token:
        return token.group(1)
    raise AuthError("no PVE ticket or API token: send Authorization: PVEAuthCookie=<ticket> "
                    "or PVEAPIToken=<user@realm!name>=<secret>")


def check(base_url: str, authorization: str, verify: bool | str, timeout_s: float = 10.0) -> Caller:
    """Ask PVE at ``base_url`` (https://127.0.0.1:8006) who this is and what they may do."""
    user = parse_authorization(authorization)
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
        data = response.json()["data"] or {}
        privileges = {str(path): frozenset(k for k, v in privs.items() if v) for path, privs in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UnavailableError("Proxmox VE's permission answer was not understood") from None
    return Caller(user, privileges)


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
