"""Proxmox VE's CSRF prevention tokens, checked as pveproxy checks them.

A ticket (``PVEAuthCookie``) travels in a cookie in PVE's own UI, so every write made with
one must also carry the ``CSRFPreventionToken`` header that PVE handed out with the ticket.
PVE makes that token from a cluster-wide key file, ``/etc/pve/pve-www.key``
(pve-access-control, ``PVE::AccessControl``; pve-common, ``PVE::Ticket``):

* the secret is ``Digest::SHA::hmac_sha256_base64(<contents of the key file>)``.  Perl's
  Digest::SHA takes the *last* argument as the key and the ones before it as the data, so
  this is HMAC-SHA256 keyed with the file's contents over no data (not an empty key over
  the file), base64 without padding;
* a token is ``XXXXXXXX:<sig>``, ``XXXXXXXX`` the time it was made as eight upper-case hex
  digits, ``<sig>`` = base64 (no padding) of HMAC-SHA256 keyed with the secret over
  ``"XXXXXXXX:<userid>"``;
* it is accepted while ``-300 < now - time < 7200`` (the ticket's lifetime).

keel-web reads the key file (group ``www-data`` on a node, as pveproxy) and verifies the
token a browser sends with a ticket; API tokens need none, as with PVE.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import threading
import time

from keel.errors import UnavailableError

DEFAULT_KEY_FILE = "/etc/pve/pve-www.key"
MIN_AGE_S = -300
MAX_AGE_S = 7200
_TOKEN = re.compile(r"^([A-Z0-9]{8}):(\S+)$")


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode().rstrip("=")


def secret(key_file_contents: bytes) -> str:
    """The CSRF secret PVE derives from ``pve-www.key``."""
    return _b64(hmac.new(key_file_contents, b"", hashlib.sha256).digest())


def make_token(csrf_secret: str, userid: str, now: float | None = None) -> str:
    stamp = f"{int(time.time() if now is None else now):08X}"
    return f"{stamp}:{_b64(hmac.new(csrf_secret.encode(), f'{stamp}:{userid}'.encode(), hashlib.sha256).digest())}"


def verify_token(csrf_secret: str, userid: str, token: str | None, now: float | None = None) -> bool:
    """Whether ``token`` is ``userid``'s and still fresh (PVE::Ticket::verify_csrf_prevention_token)."""
    match = _TOKEN.match(token or "")
    if match is None:
        return False
    stamp, signature = match.groups()
    expected = _b64(hmac.new(csrf_secret.encode(), f"{stamp}:{userid}".encode(), hashlib.sha256).digest())
    age = (time.time() if now is None else now) - int(stamp, 16)
    return hmac.compare_digest(signature.encode(), expected.encode()) and MIN_AGE_S < age < MAX_AGE_S


class KeyFile:
    """The secret from a ``pve-www.key`` file, read when first needed and again when the
    file changes (checked at most every ``recheck_s``)."""

    def __init__(self, path: str, recheck_s: float = 10.0):
        self.path, self.recheck_s = path, recheck_s
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._secret: str | None = None
        self._checked = float("-inf")

    def secret(self) -> str:
        """UnavailableError naming the file and the setting if it cannot be read."""
        now = time.monotonic()
        with self._lock:
            if self._secret is not None and now - self._checked < self.recheck_s:
                return self._secret
            try:
                info = os.stat(self.path)
                stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
                if stamp != self._stamp or self._secret is None:
                    with open(self.path, "rb") as handle:
                        self._secret = secret(handle.read())
                    self._stamp = stamp
            except OSError as err:
                raise UnavailableError(
                    f"keel-web cannot read Proxmox VE's CSRF key {self.path} (web.www_key): "
                    f"{err.strerror or type(err).__name__}; writes with a ticket are refused "
                    f"until it can (API tokens still work)") from None
            self._checked = now
            return self._secret
