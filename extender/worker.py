"""The gunicorn worker of ``spot-extender``: gthread's poller, with threads only for requests that are slow.

Stock ``gthread`` hands every *new* connection to a pool thread, which does the TLS handshake and then blocks
reading the first request. kube-apiserver and kube-scheduler are Go clients: during a burst Go's transport
dials spare connections and may park them, handshaken but without a request, for up to 90 s. Each one held a
pool thread, so with few threads one parked connection stalled the worker (the webhook then missed the API
server's deadline and pods were admitted unmutated); with many threads every busy thread contends for the
one GIL, which costs tail latency. :class:`PollerHandshakeWorker` changes three things:

1. New connections stay on the poller. The TLS handshake is driven there without blocking (``do_handshake``
   on a non-blocking socket, one step per readable or writable event; closed after :data:`HANDSHAKE_TIMEOUT`),
   then the connection waits for its first request like a kept-alive one. An idle connection, new or kept
   alive, costs one poller registration and no thread.
2. Requests are gathered on the poller too (non-blocking reads into gunicorn's parser buffer) and answered on
   the poller thread once complete, without the two thread hand-offs of the pool. A slow client holds no
   thread; one whose request is not complete :data:`IO_TIMEOUT` seconds after its first bytes is cut off.
   Only chunked bodies and requests over :data:`READ_AHEAD_LIMIT` are read by a pool thread (each blocking
   read at most :data:`IO_TIMEOUT` seconds). The answer is collected in memory and written without blocking:
   a client that does not take it waits on the poller and is cut off after :data:`IO_TIMEOUT` seconds, so
   nothing a client does (or fails to do) blocks the poller thread.
3. Workers spread new connections: a worker holding k connections lets the others take a new one for k ms
   (at most 5), so a client's few long-lived connections do not all land on one worker.

A stopping worker closes connections that have not sent a request within gunicorn's keep-alive linger
instead of waiting for them. This extends gunicorn's ``ThreadWorker`` internals (``enqueue_req``,
``finish_request``, ``pending_conns``, ``murder_pending``, ``set_accept_enabled``, ``TConn``), so
``pyproject.toml`` pins gunicorn's major version and tests/unit/test_worker.py drives the worker with real
sockets.
"""

from __future__ import annotations

import contextlib
import errno
import io
import selectors
import socket
import ssl
import time
from collections import deque
from concurrent import futures
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

__all__ = ["HANDSHAKE_TIMEOUT", "IO_TIMEOUT", "READ_AHEAD_LIMIT", "PollerHandshakeWorker"]

# A client that opened a connection has this long to finish the TLS handshake (Go's default TLS handshake
# timeout is 10 s; a slow client gets as long as it would give itself).
HANDSHAKE_TIMEOUT = 10.0

# Every worker polls the shared listening socket and the first to call accept() wins, so keep-alive clients
# with a few long-lived connections (kube-apiserver, kube-scheduler) often ended up on one worker: measured
# with wrk's 8 connections over 2 workers, splits of 8/0, 7/1 and 6/2 were as common as 4/4, and the loaded
# worker's queue set throughput and tail latency. A worker holding k connections now waits k ms (at most
# 5 ms) before taking a new one, so the worker with fewer connections takes it; a connection nobody else
# takes is accepted after that delay. Only connection set-up pays it, never a request on an open connection.
ACCEPT_DELAY_PER_CONNECTION = 0.001
ACCEPT_DELAY_MAX = 0.005

_ACCEPT_RETRY = (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK)

# A request must arrive within this many seconds of its first bytes, and a blocking socket read or write
# (a pool thread reading a chunked or huge body, a response the client does not take) gives up after as
# long: a client that stalls mid-request must not hold a thread, or the poller, indefinitely.
# kube-apiserver's webhook timeout is 3 s (deploy/) and 30 s at most; kube-scheduler's extender httpTimeout
# is 5 s, so neither is still waiting by then.
IO_TIMEOUT = 10.0

# A request up to this size is gathered on the poller; a larger one (5,000 full Node objects to /prioritize)
# is read by a pool thread.
READ_AHEAD_LIMIT = 8 * 1024 * 1024


def _with_io_timeout(cls: type) -> type:
    """A socket class whose ``setblocking(True)`` (what gunicorn calls before serving) means "block, with
    :data:`IO_TIMEOUT`" instead of "block forever"."""

    class Timed(cls):  # type: ignore[misc, valid-type]
        def setblocking(self, flag: bool) -> None:
            if flag:
                self.settimeout(IO_TIMEOUT)
            else:
                super().setblocking(False)

    Timed.__name__ = Timed.__qualname__ = f"Timed{cls.__name__}"
    return Timed


TimedSocket = _with_io_timeout(socket.socket)
TimedSSLSocket = _with_io_timeout(ssl.SSLSocket)

_NOT_YET = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_WRITE_CHUNK = 64 * 1024


class _CollectedWrites:
    """Stands in for a connection's socket while the poller thread answers a request: what gunicorn writes
    (``sendall``) is kept in memory and sent afterwards without blocking; everything else is the socket's."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.chunks: list[bytes] = []

    def sendall(self, data: Any) -> None:
        self.chunks.append(bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


COMPLETE, PARTIAL, TO_POOL = "complete", "partial", "pool"
_HEAD_LIMIT = 64 * 1024  # gunicorn refuses larger request heads anyway


def _read_ahead(conn: Any) -> str:
    """Read what the socket holds, without blocking, into ``conn``'s parser buffer, and say what is there:
    ``COMPLETE`` (a whole request with a ``Content-Length`` body, or the end of the stream), ``PARTIAL`` (more
    to come) or ``TO_POOL`` (a chunked body, or a request larger than :data:`READ_AHEAD_LIMIT`)."""
    conn.init()
    buf = conn.parser.unreader.buf
    buf.seek(0, io.SEEK_END)
    have = buf.tell()
    conn.sock.setblocking(False)
    try:
        while have < READ_AHEAD_LIMIT:
            try:
                data = conn.sock.recv(256 * 1024)
            except _NOT_YET:
                break
            if not data:
                return COMPLETE  # the parser meets the end of the stream at once
            buf.write(data)
            have += len(data)
    finally:
        conn.sock.setblocking(True)
    with buf.getbuffer() as view:
        head = bytes(view[:_HEAD_LIMIT])
    total = _request_size(head)
    if total is None:
        return PARTIAL if have < _HEAD_LIMIT else TO_POOL
    if total < 0:
        return TO_POOL
    if have >= total:
        return COMPLETE
    return PARTIAL if total <= READ_AHEAD_LIMIT else TO_POOL


def _request_size(data: bytes) -> int | None:
    """Bytes of the request starting ``data``: None while its head is incomplete, -1 for a chunked body."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    length = 0
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return -1
        if name == b"content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return end + 4  # malformed: gunicorn's parser answers 400 without reading a body
    return end + 4 + length


class PolledConn(TConn):  # type: ignore[misc]
    """A connection whose TLS handshake (if any) was done on the poller; ``init`` only builds the parser."""

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.handshaken = False
        self.request_deadline: float | None = None  # set while a request is partly received
        self.write_deadline: float | None = None  # set while an answer waits for the client to take it

    def init(self) -> None:
        if self.initialized:
            return
        if not self.handshaken:  # plain HTTP: nothing was done on the poller
            super().init()
            return
        self.initialized = True
        self.sock.setblocking(True)
        # ALPN offers HTTP/1.1 only (gunicorn's http_protocols default, never changed by spot-extender).
        self.parser = http.get_parser(self.cfg, self.sock, self.client)


class PollerHandshakeWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose poller does the handshakes, reads and writes, and answers complete requests itself;
    see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handshaking: deque[PolledConn] = deque()
        self.reading: deque[PolledConn] = deque()  # requests partly received, oldest first
        self._serving = False  # a request is being answered on the poller thread
        self.writing: deque[PolledConn] = deque()  # answers waiting for the client to take them, oldest first
        self._resume_accepting_at: float | None = None  # accepting paused (listeners off the poller) until then

    def load_wsgi(self) -> None:
        """gunicorn drops a ``Connection: close`` header set by the application and keeps the connection; the
        app sets it when the connection must end (a body past the drain cap, a body that stopped arriving)."""
        super().load_wsgi()
        app = self.wsgi

        def closing_app(environ: dict[str, Any], start_response: Any) -> Any:
            def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
                    start_response.__self__.force_close()  # gunicorn's Response: sends "Connection: close"
                return start_response(status, headers, exc_info)

            return app(environ, start)

        self.wsgi = closing_app

    # -- spreading connections over the workers --------------------------------------------------------------

    def _accept_delay(self) -> float:
        """How long this worker lets the others take a new connection first (0: take it now)."""
        if self.cfg.workers < 2:
            return 0.0
        return min(self.nr_conns * ACCEPT_DELAY_PER_CONNECTION, ACCEPT_DELAY_MAX)

    def set_accept_enabled(self, enabled: bool) -> None:
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
                self._accept_now(listener)  # still queued after the others had their chance: ours

    # -- requests -------------------------------------------------------------------------------------------

    def enqueue_req(self, conn: Any) -> None:
        """Serve a request once it is all here, on the poller thread; hand only chunked or huge ones to the pool.

        kube-apiserver and kube-scheduler write a request in one go, so it is usually complete by the time
        its connection turns readable. Answering it right here skips two thread hand-offs (pool queue, then the
        pipe back to the poller), each a wake-up and a GIL hand-over: measured ~15% less CPU per request and a
        lower tail. A request still arriving waits on the poller, without a thread, until the rest is there;
        one not complete within :data:`IO_TIMEOUT` seconds of its first bytes has its connection closed.
        """
        try:
            state = _read_ahead(conn)
        except (OSError, ValueError) as e:  # reset, TLS alert: the connection is gone
            self.log.debug("Reading a request failed: %s", e)
            self._forget_reading(conn)
            self._drop(conn)
            return
        if state == PARTIAL:
            if conn.request_deadline is None:
                conn.request_deadline = time.monotonic() + IO_TIMEOUT
                self.reading.append(conn)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_more_request, conn))
            return
        self._forget_reading(conn)
        if state == TO_POOL:
            super().enqueue_req(conn)
            return
        if self._serving:
            # finish_request found the next request already buffered (pipelining): serve it on the next poller
            # turn, after the other connections, instead of recursing once per buffered request.
            self.method_queue.defer(self.enqueue_req, conn)
            return
        self._serving = True
        try:
            self._answer(conn)
        finally:
            self._serving = False

    def _answer(self, conn: Any) -> None:
        """Run the request with the answer collected in memory, then write it without blocking the poller."""
        sock = conn.sock
        conn.sock = collected = _CollectedWrites(sock)
        try:
            keepalive = self.handle(conn)
        finally:
            conn.sock = sock
        self._write(conn, memoryview(b"".join(collected.chunks)), keepalive)

    def _write(self, conn: Any, data: memoryview, keepalive: Any) -> None:
        sock = conn.sock
        try:
            sock.setblocking(False)
            while data:
                try:
                    sent = sock.send(data[:_WRITE_CHUNK])
                except _NOT_YET:  # the client is not taking it yet: wait for room, holding nothing
                    if conn.write_deadline is None:
                        conn.write_deadline = time.monotonic() + IO_TIMEOUT
                        self.writing.append(conn)
                    events = selectors.EVENT_READ | selectors.EVENT_WRITE
                    self.poller.register(sock, events, partial(self._on_writable, conn, data, keepalive))
                    return
                data = data[sent:]
        except OSError as e:  # reset, closed by handle() after an error
            self.log.debug("Writing an answer failed: %s", e)
            self._forget_writing(conn)
            self._drop(conn)
            return
        self._forget_writing(conn)
        done: futures.Future[Any] = futures.Future()
        done.set_result(keepalive)
        self.finish_request(conn, done)

    def _on_writable(self, conn: Any, data: memoryview, keepalive: Any, _fileobj: Any) -> None:
        self.poller.unregister(conn.sock)
        self._write(conn, data, keepalive)

    def _forget_writing(self, conn: Any) -> None:
        if conn.write_deadline is not None:
            self.writing.remove(conn)
            conn.write_deadline = None

    def _on_more_request(self, conn: Any, _fileobj: Any) -> None:
        self.poller.unregister(conn.sock)
        self.enqueue_req(conn)

    def _forget_reading(self, conn: Any) -> None:
        if conn.request_deadline is not None:
            self.reading.remove(conn)
            conn.request_deadline = None

    # -- new connections -----------------------------------------------------------------------------------

    def accept(self, listener: Any) -> None:
        delay = self._accept_delay()
        if delay:
            for sock in self.sockets:
                self.poller.unregister(sock)
            self._resume_accepting_at = time.monotonic() + delay
            return
        self._accept_now(listener)

    def _accept_now(self, listener: Any) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in _ACCEPT_RETRY:
                raise
            return
        self.nr_conns += 1
        client_sock = TimedSocket(client_sock.family, client_sock.type, client_sock.proto, client_sock.detach())
        conn = PolledConn(self.cfg, client_sock, client_addr, listener.getsockname())  # non-blocking
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
        conn.timeout = time.monotonic() + self.cfg.keepalive
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def _forget_handshaking(self, conn: PolledConn) -> None:
        self.poller.unregister(conn.sock)
        self.handshaking.remove(conn)

    def _drop(self, conn: PolledConn) -> None:
        self.nr_conns -= 1
        conn.close()

    # -- timeouts and shutdown -----------------------------------------------------------------------------

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.handshaking and self.handshaking[0].timeout <= now:
            conn = self.handshaking.popleft()
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            self._drop(conn)
        self._expire(self.reading, "request_deadline", now, "its request did not arrive")
        self._expire(self.writing, "write_deadline", now, "its answer was not taken")

    def _expire(self, conns: deque[PolledConn], deadline: str, now: float, what: str) -> None:
        """Close the connections of ``conns`` (oldest first) whose ``deadline`` attribute has passed."""
        while conns and getattr(conns[0], deadline) <= now:
            conn = conns.popleft()
            setattr(conn, deadline, None)
            self.log.info("Closing the connection of %s: %s within %g s", conn.client, what, IO_TIMEOUT)
            with contextlib.suppress(OSError, KeyError, ValueError):
                self.poller.unregister(conn.sock)
            self._drop(conn)

    def _cap_keepalive(self, deadline: float) -> None:
        """On stop, connections that have not sent a request are closed by ``deadline`` too."""
        super()._cap_keepalive(deadline)
        for conn in (*self.pending_conns, *self.handshaking):
            conn.timeout = min(conn.timeout, deadline)
