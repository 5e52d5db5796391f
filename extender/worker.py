"""The gunicorn worker of ``spot-extender``: gthread's poller, with threads only for requests that are slow.

Stock ``gthread`` hands every *new* connection to a pool thread, which does the TLS handshake and then blocks
reading the first request. kube-apiserver and kube-scheduler are Go clients: during a burst Go's transport
dials spare connections and may park them, handshaken but without a request, for up to 90 s. Each one held a
pool thread, so with few threads one parked connection stalled the worker (the webhook then missed the API
server's deadline and pods were admitted unmutated); with many threads every busy thread contends for the
one GIL, which costs tail latency. This module is a connection's life; a request's life on it (gathered,
answered, written) is :mod:`extender.answering`. :class:`PollerHandshakeWorker` changes three things:

1. New connections stay on the poller. The TLS handshake is driven there without blocking (``do_handshake``
   on a non-blocking socket, one step per readable or writable event; closed after :data:`HANDSHAKE_TIMEOUT`),
   then the connection waits for its first request like a kept-alive one. An idle connection, new or kept
   alive, costs one poller registration and no thread. Its requests are gathered, answered and written on the
   poller too (:mod:`extender.answering`); a connection ending after an answer lingers on the poller to drain
   what the client still sends (:data:`CLOSE_LINGER`), never blocking on it.
2. Workers spread new connections: each goes to the worker holding the fewest, whichever accepted it
   (:mod:`extender.spreading`), so a client's few long-lived connections do not all land on one worker.
3. Connections are bounded: a new connection has :data:`HANDSHAKE_TIMEOUT` seconds for its TLS handshake and
   then :data:`FIRST_REQUEST_TIMEOUT` seconds for its first request (kept-alive connections keep gunicorn's
   ``keepalive``); a request not complete :data:`IO_TIMEOUT` seconds after its first bytes gets 408, an answer
   not taken within as long is cut off. A worker holds at most gunicorn's ``worker_connections``; at the cap it
   closes its oldest idle connection (never used, then handshaking, then kept alive) to take a new one, so a
   flood of idle connections cannot lock out the API server, the scheduler or the kubelet's probes.

The hops of a kube-scheduler ``/filter`` (or ``/prioritize``) call in Go's form on a kept-alive connection:

1. the poller finds the socket readable: gunicorn's ``on_client_socket_readable`` calls
   :meth:`~extender.answering.AnsweringWorker.enqueue_req`;
2. :meth:`~extender.answering.AnsweringWorker._read_ahead` reads what the socket holds and
   :class:`extender.framing.Framing` finds the request complete;
3. :meth:`~extender.answering.AnsweringWorker._answer_direct` gives the bytes to :func:`extender.direct.answer`,
   which reads Go's form (:func:`extender.direct.parse`);
4. :meth:`extender.direct.DirectDoor.decide` decodes the body (:func:`extender.service.decode_extender_args`),
   asks :class:`extender.service.ExtenderService` and counts the answer;
5. :func:`extender.direct.http_response` builds the whole response;
6. :meth:`~extender.answering.AnsweringWorker._write` sends it in one piece and :meth:`finish_request` parks
   the connection for its next request.

A call in any other form (chunked, other headers, another method) or over :data:`extender.answering.LARGE_REQUEST`
leaves at hop 3 for gunicorn's parser (``handle``), whose request
:meth:`~extender.answering.AnsweringWorker.handle_request` gives to :meth:`extender.direct.DirectDoor.respond`:
the same door, then hops 4 to 6. Other paths (``/mutate``, the probes) go from there to the Flask app.

A stopping worker closes connections that have not sent a request within gunicorn's keep-alive linger
instead of waiting for them. This extends gunicorn's ``ThreadWorker`` internals (``enqueue_req``,
``finish_request``, ``pending_conns``, ``murder_pending``, ``set_accept_enabled``, ``TConn``), so
``pyproject.toml`` pins gunicorn's major version and tests/unit/test_worker.py drives the worker with real
sockets.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import ssl
import time
from collections import deque
from functools import partial
from typing import Any

from gunicorn import sock as gsock
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER

from extender.answering import CONNECTION_ALLOWANCE, READ_AHEAD_BUDGET, AnsweringWorker
from extender.connections import (
    IO_TIMEOUT,
    NOT_YET,
    PolledConn,
    TimedSocket,
    TimedSSLSocket,
)
from extender.framing import UnreadableRequest
from extender.spreading import SpreadConnections, shared_spreader

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "FIRST_REQUEST_TIMEOUT",
    "IO_TIMEOUT",
    "READ_AHEAD_BUDGET",
    "CONNECTION_ALLOWANCE",
    "PollerHandshakeWorker",
]

# A client that opened a connection has this long to finish the TLS handshake (Go's default TLS handshake
# timeout is 10 s; a slow client gets as long as it would give itself).
HANDSHAKE_TIMEOUT = 10.0

_ACCEPT_RETRY = (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK)

# A connection that finished its handshake has this long to send its first request. Go parks spare
# connections idle (up to its 90 s idle timeout); closing one early costs the client a new handshake later,
# while keeping thousands a client opened and never used locked callers out.
FIRST_REQUEST_TIMEOUT = 10.0

# How long a closing connection is drained (what the client still sends) before it is closed outright.
CLOSE_LINGER = 2.0


class PollerHandshakeWorker(SpreadConnections, AnsweringWorker):
    """gthread whose poller does the handshakes, reads and writes, and answers complete requests itself;
    see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spreader = shared_spreader(self.cfg.workers)
        self.handshaking: deque[PolledConn] = deque()
        self.closing: deque[PolledConn] = deque()  # connections draining before they close, oldest first
        self.max_connections = self.cfg.worker_connections
        self.worker_connections = 1 << 30  # gunicorn's own cap stops accepting; ours closes idle ones instead
        self._resume_accepting_at: float | None = None  # accepting paused (listeners off the poller) until then

    # -- accepting ------------------------------------------------------------------------------------------

    def set_accept_enabled(self, enabled: bool) -> None:
        if not enabled and not self.alive:
            self._stop_taking_connections()
        if self._resume_accepting_at is not None:  # paused: the listeners are already off the poller
            if not enabled:
                self._resume_accepting_at = None
                self._accepting = False
            return
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self._resume_accepting_at is not None:
            timeout = max(0.0, min(timeout, self._resume_accepting_at - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)
        if self._resume_accepting_at is not None and time.monotonic() >= self._resume_accepting_at:
            self._resume_accepting_at = None
            for listener in self.sockets:
                self.poller.register(listener, selectors.EVENT_READ, self.accept)
                self.accept(listener)

    # -- ending ---------------------------------------------------------------------------------------------

    def finish_request(self, conn: Any, fs: Any) -> None:
        """gunicorn's, except that a connection ending here drains on the poller instead of blocking it (gunicorn
        lingers up to 2 s in a blocking read for what the client still sends)."""
        self._release(conn)
        try:
            keep = fs.result() if not fs.cancelled() else False
        except Exception:
            keep = False
        if keep:
            super().finish_request(conn, fs)
            return
        self._close_gracefully(conn)

    def _close_gracefully(self, conn: Any) -> None:
        """Send FIN, then read and drop what the client still sends (so our last answer is not lost to a reset)
        until it closes, :data:`CLOSE_LINGER` seconds pass or 64 KiB arrived; then close."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            self._drop(conn)
            return
        conn.close_deadline = time.monotonic() + CLOSE_LINGER
        self.closing.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_linger, conn))

    def _on_linger(self, conn: Any, _fileobj: Any) -> None:
        try:
            data = conn.sock.recv(65536)
        except NOT_YET:
            return
        except OSError:
            data = b""
        conn.lingered += len(data)
        if data and conn.lingered < 65536:
            return
        self.poller.unregister(conn.sock)
        self.closing.remove(conn)
        conn.close_deadline = None
        self._drop(conn)

    # -- new connections -----------------------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        if self.nr_conns >= self.max_connections and not self._close_oldest_idle():
            # Every connection is busy with a request: let the kernel queue new ones for a moment.
            for sock in self.sockets:
                with contextlib.suppress(KeyError, ValueError):
                    self.poller.unregister(sock)
            self._resume_accepting_at = time.monotonic() + 0.05
            return
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in _ACCEPT_RETRY:
                raise
            return
        if self.spreader is not None and not self.spreader.place(client_sock):
            return  # the worker holding the fewest connections serves it
        self._nr += 1  # counted for the other workers by place()
        self._serve_new(client_sock, client_addr, listener.getsockname())

    def _serve_new(self, client_sock: socket.socket, client_addr: Any, server_addr: Any) -> None:
        """Start a new (counted) connection: the TLS handshake on the poller, then its first request."""
        client_sock = TimedSocket(client_sock.family, client_sock.type, client_sock.proto, client_sock.detach())
        client_sock.setblocking(False)
        conn = PolledConn(self.cfg, client_sock, client_addr, server_addr)
        if not self.cfg.is_ssl:
            self._wait_for_request(conn)
            return
        try:
            context = gsock.ssl_context(self.cfg)
            context.sslsocket_class = TimedSSLSocket  # the documented way to get an SSLSocket subclass
            conn.sock = context.wrap_socket(
                client_sock,
                server_side=True,
                suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                do_handshake_on_connect=False,
            )
        except (OSError, ValueError, ssl.SSLError) as e:
            self.log.warning("Cannot set up TLS for a new connection: %s", e)
            self._drop(conn)
            return
        conn.timeout = time.monotonic() + HANDSHAKE_TIMEOUT
        self.handshaking.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_handshake_io, conn))

    def _close_oldest_idle(self) -> bool:
        """Make room at the connection cap: close the connection that has waited longest without a request
        (never used, then mid-handshake, then kept alive). False when every connection is in a request."""
        for conns in (self.pending_conns, self.handshaking, self.keepalived_conns):
            if conns:
                conn = conns.popleft()
                with contextlib.suppress(OSError, KeyError, ValueError):
                    self.poller.unregister(conn.sock)
                self.log.debug("At %d connections: closing an idle one from %s", self.max_connections, conn.client)
                self._drop(conn)
                return True
        return False

    def _on_handshake_io(self, conn: PolledConn, _fileobj: Any) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.poller.modify(conn.sock, selectors.EVENT_READ, partial(self._on_handshake_io, conn))
            return
        except ssl.SSLWantWriteError:
            self.poller.modify(conn.sock, selectors.EVENT_WRITE, partial(self._on_handshake_io, conn))
            return
        except (ssl.SSLError, OSError) as e:  # a scanner, a client that distrusts our CA, a reset
            self.log.debug("TLS handshake failed: %s", e)
            self._forget_handshaking(conn)
            self._drop(conn)
            return
        self._forget_handshaking(conn)
        conn.handshaken = True
        if conn.sock.pending():  # request bytes already decrypted into OpenSSL's buffer: no readable event
            self.enqueue_req(conn)
            return
        self._wait_for_request(conn)

    def _wait_for_request(self, conn: PolledConn) -> None:
        """Park ``conn`` on the poller until its first request arrives (gunicorn's pending connections)."""
        conn.timeout = time.monotonic() + min(FIRST_REQUEST_TIMEOUT, self.cfg.keepalive)
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def _forget_handshaking(self, conn: PolledConn) -> None:
        self.poller.unregister(conn.sock)
        self.handshaking.remove(conn)

    # -- timeouts and shutdown -----------------------------------------------------------------------------

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.handshaking and self.handshaking[0].timeout <= now:
            conn = self.handshaking.popleft()
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            self._drop(conn)
        while self.reading and self.reading[0].request_deadline <= now:  # type: ignore[operator]
            conn = self.reading[0]
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            self._forget_reading(conn)
            why = f"the request did not arrive within {IO_TIMEOUT:g} s of its first bytes"
            self._refuse(conn, UnreadableRequest(408, "Request Timeout", why))
        self._expire(self.writing, "write_deadline", now, f"its answer was not taken within {IO_TIMEOUT:g} s")
        self._expire(self.closing, "close_deadline", now, None)

    def _expire(self, conns: deque[PolledConn], deadline: str, now: float, why: str | None) -> None:
        """Close the connections of ``conns`` (oldest first) whose ``deadline`` attribute has passed."""
        while conns and getattr(conns[0], deadline) <= now:
            conn = conns.popleft()
            setattr(conn, deadline, None)
            if why:
                self.log.info("Closing the connection of %s: %s", conn.client, why)
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            self._drop(conn)

    def _cap_keepalive(self, deadline: float) -> None:
        """On stop, connections that have not sent a request are closed by ``deadline`` too."""
        super()._cap_keepalive(deadline)
        for conn in (*self.pending_conns, *self.handshaking):
            conn.timeout = min(conn.timeout, deadline)
