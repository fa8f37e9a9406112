"""keel-web's gunicorn worker: gevent's, so that a slow or idle client costs a greenlet and
a file descriptor, never one of a few threads (docs/service.md, "keel-web").

On top of gunicorn's gevent worker (gunicorn 20.1 in Debian 12, 23 in Debian 13, the
newest on PyPI):

* no monkey-patching: only the listening sockets become gevent's.  The app's two
  blocking calls, PVE's permission check (requests) and keel-engine's Unix socket
  (http.client), run unchanged in two thread pools (``pools``); the certificate watcher
  is an ordinary thread.  So nothing depends on what was imported before the fork;
* the TLS handshake is made here, within ``HANDSHAKE_S``, not by gevent's server
  without a deadline;
* one address (an IPv6 /64) holds at most ``CONNECTIONS_PER_ADDRESS`` connections: more
  are closed at once, before their handshake;
* a request's line and headers, and the idle time before them, get gunicorn's
  ``keepalive`` (``HEADERS_S``); its body is read here within ``BODY_S`` before the app
  sees it (so a body that drips in holds nothing but its own greenlet, for a while).
"""

from __future__ import annotations

import io
import socket
import ssl
import time
from collections import defaultdict
from functools import partial
from typing import Any, Callable

import gevent
from gevent import socket as gsocket
from gevent import ssl as gssl
from gevent.pool import Pool
from gevent.server import StreamServer
from gevent.threadpool import ThreadPool
from gunicorn.workers.ggevent import GeventWorker

from keel.web import limits

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def pools() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(pve_calls, engine_calls) for ``keel.web.app.create_app``: each runs a blocking call
    in its own thread pool while the calling greenlet waits, so a slow PVE fills at most
    ``PVE_THREADS`` threads and never the engine's pool.  Made in the worker, after the fork."""
    pve, engine = ThreadPool(limits.PVE_THREADS), ThreadPool(limits.ENGINE_THREADS)
    return partial(_in_pool, pve), partial(_in_pool, engine)


def _in_pool(pool: ThreadPool, fn: Callable[..., Any], *args: Any) -> Any:
    # The exception comes back as a value: raised in the pool's thread, gevent would print
    # its traceback to the log (a refused credential is no error of keel-web's).
    ok, value = pool.apply(_outcome, (fn, args))
    if ok:
        return value
    raise value


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as err:
        return False, err


class GatewayWorker(GeventWorker):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.open: dict[str, int] = defaultdict(int)
        self.refused_logged: dict[str, float] = {}

    def patch(self) -> None:
        """Not ``monkey.patch_all()``: only the listening sockets become gevent's."""
        self.sockets = [gsocket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach())
                        for s in self.sockets]

    def tls_context(self) -> Any:
        if not self.cfg.is_ssl:
            return None
        context = gssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cfg.certfile, self.cfg.keyfile)
        return context

    def run(self) -> None:
        context = self.tls_context()
        servers = []
        for listener in self.sockets:
            listener.setblocking(1)
            server = StreamServer(listener, handle=partial(self.connection, listener, context),
                                  spawn=Pool(self.worker_connections))
            server.start()
            servers.append(server)
        beat = 0.0
        while self.alive:                      # SIGTERM clears alive: seen within 0.1 s
            if time.monotonic() - beat >= 1.0:
                self.notify()
                beat = time.monotonic()
            gevent.sleep(0.1)
        for server in servers:                 # stop accepting; let what runs finish
            server.close()
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while time.monotonic() < deadline and any(s.pool.free_count() != s.pool.size for s in servers):
            self.notify()
            gevent.sleep(0.5)
        for server in servers:
            server.stop(timeout=1)

    def connection(self, listener: Any, context: Any, sock: Any, addr: Any) -> None:
        """One accepted connection: the per-address cap, the handshake within its deadline,
        then gunicorn's keep-alive loop."""
        who = limits.address_key(addr[0] if isinstance(addr, tuple) else None)
        if self.open[who] >= limits.CONNECTIONS_PER_ADDRESS:
            self.log_refused(who)
            sock.close()
            return
        self.open[who] += 1
        try:
            client = sock
            if context is not None:
                try:
                    with gevent.Timeout(limits.HANDSHAKE_S):
                        client = context.wrap_socket(sock, server_side=True)
                except (gevent.Timeout, OSError) as err:
                    self.log.debug("no TLS handshake from %s: %s", who, type(err).__name__)
                    sock.close()
                    return
            self.handle(listener, client, addr)
        finally:
            self.open[who] -= 1
            if not self.open[who]:
                del self.open[who]

    def log_refused(self, who: str) -> None:
        now = time.monotonic()
        if now - self.refused_logged.get(who, float("-inf")) > 60:
            self.refused_logged[who] = now
            self.log.warning("%s holds %d connections: more are closed at once (logged once a minute)",
                             who, limits.CONNECTIONS_PER_ADDRESS)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        if not self.read_body(req, sock):
            raise StopIteration()              # gunicorn's loop closes the connection quietly
        return super().handle_request(listener_name, req, sock, addr)

    def read_body(self, req: Any, sock: Any) -> bool:
        """The request's body, read within ``BODY_S`` into memory (at most ``MAX_BODY`` and
        one byte), and handed to the app with its length; False if it did not come in time.
        A body announced over the limit is not read: the app refuses it (413) and the
        connection closes."""
        headers = [(name, value) for name, value in req.headers]
        length_text = next((v for n, v in headers if n == "CONTENT-LENGTH"), None)
        chunked = any(n == "TRANSFER-ENCODING" and "chunked" in v.lower() for n, v in headers)
        length = int(length_text) if length_text and length_text.isdigit() else 0
        if not chunked and length == 0:
            return True
        if length > limits.MAX_BODY:
            req.must_close = True
            return True
        if any(n == "EXPECT" and v.lower() == "100-continue" for n, v in headers) and req.version >= (1, 1):
            sock.sendall(CONTINUE)             # the client waits for it before sending the body
        data = bytearray()
        try:
            with gevent.Timeout(limits.BODY_S):
                while len(data) <= limits.MAX_BODY:
                    chunk = req.body.read(64 * 1024)
                    if not chunk:
                        break
                    data += chunk
        except gevent.Timeout:
            self.log.debug("request body from %s not in after %g s", addr_of(sock), limits.BODY_S)
            return False
        if len(data) > limits.MAX_BODY:
            req.must_close = True              # the rest of a chunked body is never read
        req.body = io.BytesIO(bytes(data))
        req._expected_100_continue = False     # answered above (gunicorn >= 22 sends it itself)
        req.headers = [(n, v) for n, v in headers if n not in ("CONTENT-LENGTH", "TRANSFER-ENCODING", "EXPECT")]
        req.headers.append(("CONTENT-LENGTH", str(len(data))))
        return True


def addr_of(sock: Any) -> str:
    try:
        return str(sock.getpeername()[0])
    except (OSError, IndexError, TypeError):
        return "?"
