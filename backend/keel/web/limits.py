"""keel-web's limits: what one client may hold, and for how long (docs/service.md, "keel-web").

keel-web answers on the management network without a credential for its TLS handshake and
for reading a request, so every one of those steps has a deadline, one address may hold
only so many connections, and refused credentials are counted per address.
"""

from __future__ import annotations

import ipaddress

MAX_BODY = 1024 * 1024            # a request body (the largest is a config file)
HANDSHAKE_S = 10.0                # accept -> TLS handshake done
HEADERS_S = 10.0                  # idle keep-alive + a request's line and headers (gunicorn's keepalive)
BODY_S = 20.0                     # a request's body, once its headers are in
CONNECTIONS_PER_ADDRESS = 64      # open connections per client address (per /64 for IPv6): 50 panels behind one NAT pass
CONNECTIONS = 1000                # open connections in all
FAILURES_FREE = 5                 # refused credentials per address per minute, then 429 until one ages out
FAILURE_WINDOW_S = 60.0
CHECKS_PER_ADDRESS = 4            # different unchecked credentials from one address asked of PVE at once
PVE_THREADS = 8                   # credential checks with PVE at once
ENGINE_THREADS = 16               # calls to keel-engine at once


def address_key(address: str | None) -> str:
    """Whom a limit counts: the IPv4 address, or the /64 of an IPv6 one (one host may hold
    a whole /64, as SLAAC hands out)."""
    if not address:
        return "?"
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{parsed}/64", strict=False))
    return str(parsed)
