"""Who is calling keel-engine: the peer of its Unix socket, and whom keel-web speaks for.

The socket is ``0660 root:keel`` and only keel-web's user is in the group ``keel``; the
engine does not rely on that alone.  It asks the kernel who is at the other end
(``SO_PEERCRED``):

* **root** is root: every privilege, every section of the config (the CLI on the node);
* **keel-web** (the system user ``keel-web``) must say whom it speaks for: the Proxmox VE
  user it verified (``X-Keel-User``) and that user's privileges as PVE answered them
  (``X-Keel-Privileges``, ``keel.authz``).  The engine then decides per object;
* anyone else is refused, whatever headers they send.

A root caller that sends ``X-Keel-Privileges`` (keel-web run as root, as the tests and the
demo do) is treated as keel-web: it asked for the end user's rights, never more than root's.
"""

from __future__ import annotations

import pwd
import socket
import struct
from typing import Any, Mapping

from keel.authz import HEADER_PRIVILEGES, HEADER_USER, Principal, decode
from keel.errors import InvalidError, NotAllowedError

WEB_USER = "keel-web"
_CREDS = struct.Struct("3i")


def peer_uid(environ: Mapping[str, Any]) -> int | None:
    """The uid at the other end of the request's Unix socket (None: not a Unix socket)."""
    sock = environ.get("gunicorn.socket")
    if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
        return None
    try:
        _pid, uid, _gid = _CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))
    except OSError:
        return None
    return uid


def web_uid() -> int | None:
    try:
        return pwd.getpwnam(WEB_USER).pw_uid
    except KeyError:
        return None


def check_peer(environ: Mapping[str, Any]) -> int:
    """The peer's uid if it is root or keel-web, else NotAllowedError."""
    uid = peer_uid(environ)
    if uid is not None and (uid == 0 or uid == web_uid()):
        return uid
    raise NotAllowedError("keel-engine's socket answers root and keel-web only "
                                f"(this caller is {'not on a Unix socket' if uid is None else f'uid {uid}'})")


def principal(uid: int, headers: Mapping[str, str]) -> Principal:
    """Whom the request is for, from the peer's uid and keel-web's headers."""
    privileges = headers.get(HEADER_PRIVILEGES)
    user = (headers.get(HEADER_USER) or "").strip()
    if privileges is None:
        if uid != 0:
            raise NotAllowedError(f"keel-web must say whose request this is ({HEADER_USER}, "
                                        f"{HEADER_PRIVILEGES})")
        return Principal.root(user[:200] or "root")
    if not user or len(user) > 200 or not user.isprintable():
        raise InvalidError(f"{HEADER_USER}: expected the Proxmox VE user keel-web verified")
    return Principal(user, decode(privileges), via_web=True)
