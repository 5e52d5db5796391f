"""A request's life on the poller worker (:mod:`extender.worker`): gathered, answered and written on the poller.

Requests are gathered without a thread (non-blocking reads into gunicorn's parser buffer; the end of a
``Content-Length`` or chunked body is found by :class:`~extender.framing.Framing`) and answered on the poller
thread once complete, without the two thread hand-offs of gthread's pool. A slow client holds no thread. Memory
is bounded: a body over the path's limit (:meth:`extender.app.ExtenderApp.body_limit`) is refused with 413 from
its head, unread; malformed chunking is a 400; a connection may buffer :data:`CONNECTION_ALLOWANCE` bytes and
beyond that shares :data:`READ_AHEAD_BUDGET` with the others (a connection finding it spent is not read until it
frees up). The answer is collected in memory and written without blocking: a client that does not take it
waits on the poller.

One door per request kind. kube-scheduler's ``/filter`` and ``/prioritize`` are answered by the direct door
(:mod:`extender.direct`, the app's :attr:`~extender.app.ExtenderApp.direct`) alone: Go's form read from the
buffered bytes, skipping gunicorn's request handling altogether (not while gunicorn writes an access log, which
needs its own request objects), any other form read by gunicorn's parser and given to the door in
:meth:`AnsweringWorker.handle_request`. Every other request (``/mutate``, the probes) goes through gunicorn and
the Flask app.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import multiprocessing
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from datetime import datetime
from functools import partial
from typing import Any

from gunicorn.http import wsgi
from gunicorn.workers.gthread import ThreadWorker

from extender import direct
from extender.app import ExtenderApp
from extender.connections import IO_TIMEOUT, NOT_YET, WRITE_CHUNK, CollectedWrites, PolledConn
from extender.direct import DirectDoor
from extender.framing import COMPLETE, PARTIAL, Framing, UnreadableRequest

__all__ = ["CONNECTION_ALLOWANCE", "READ_AHEAD_BUDGET", "LARGE_REQUEST", "AnsweringWorker"]

# Request bytes a worker holds for requests still arriving: each connection may hold CONNECTION_ALLOWANCE
# (a whole admission review, almost always), and beyond that all of them share READ_AHEAD_BUDGET (one
# 5,000-Node extender call is ~25 MB).
CONNECTION_ALLOWANCE = 64 * 1024
READ_AHEAD_BUDGET = 64 * 1024 * 1024


# A complete request larger than this (a Nodes call: up to ~25 MB, hundreds of milliseconds to parse and
# decide) is answered by a thread of its own, one at a time per worker, so the poller keeps answering
# /mutate meanwhile. Its bytes stay counted against READ_AHEAD_BUDGET until it is answered. Across the
# workers, one large request is decided at a time (a semaphore made in the master, before the workers are
# forked): each takes a few hundred MB at its peak, and two at once went over the container's 512 Mi. A
# worker that cannot get it within LARGE_WAIT seconds (its holder died) goes ahead anyway.
LARGE_REQUEST = 1024 * 1024
LARGE_WAIT = 4.0
_large_lock: Any = None

CLOSED, PAUSED = "closed", "paused"


def _trim_heap() -> None:
    """Give the heap's free pages back to the system after a large request (glibc only; else nothing)."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).malloc_trim(0)


class AnsweringWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose poller gathers, answers and writes complete requests; see the module docstring. The
    connections themselves (handshakes, timeouts, closing) are :class:`extender.worker.PollerHandshakeWorker`'s."""

    wsgi: Any  # gunicorn's Worker attribute, wrapped in load_wsgi
    alive: bool  # gunicorn's Worker attribute: False once the worker is stopping

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        global _large_lock
        if _large_lock is None:  # gunicorn builds every worker in the master, then forks: one for all
            _large_lock = multiprocessing.Lock()
        self.reading: deque[PolledConn] = deque()  # requests partly received, oldest first
        self._serving = False  # a request is being answered on the poller thread
        self.writing: deque[PolledConn] = deque()  # answers waiting for the client to take them, oldest first
        self.paused: list[PolledConn] = []  # partial requests waiting for read-ahead budget
        self.buffered = 0  # bytes held by partial requests beyond... all of them (see CONNECTION_ALLOWANCE)
        self._body_limit: Callable[[str], int] | None = None
        self._door: DirectDoor | None = None  # the app's door of the scheduler's calls
        self._go_form = False  # read Go's form of those calls from the bytes (not while an access log is written)
        self._local = threading.local()  # the arrival time of the request a thread is answering
        self._large = futures.ThreadPoolExecutor(1, thread_name_prefix="large-request")

    def load_wsgi(self) -> None:
        """gunicorn drops a ``Connection: close`` header set by the application and keeps the connection; the
        app sets it when the connection must end (a body past the drain cap, a body that stopped arriving)."""
        super().load_wsgi()
        app: Any = getattr(self, "wsgi")  # noqa: B009 - gunicorn's Worker attribute, untyped
        if isinstance(app, ExtenderApp):
            self._body_limit = app.body_limit
            app.arrival = self._arrival
            self._door = app.direct
            # Go's form of a scheduler call is read from the bytes, unless every request goes through gunicorn's
            # parser to be written to the access log.
            self._go_form = not getattr(self.log, "access_log_enabled", True)  # gunicorn's Logger, from its settings

        def closing_app(environ: dict[str, Any], start_response: Any) -> Any:
            def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
                    start_response.__self__.force_close()  # gunicorn's Response: sends "Connection: close"
                return start_response(status, headers, exc_info)

            return app(environ, start)

        self.wsgi = closing_app

    def enqueue_req(self, conn: Any) -> None:
        """Serve a request once it is all here, on the poller thread.

        kube-apiserver and kube-scheduler write a request in one go, so it is usually complete by the time
        its connection turns readable. Answering it right here skips two thread hand-offs (pool queue, then the
        pipe back to the poller), each a wake-up and a GIL hand-over: measured ~15% less CPU per request and a
        lower tail. A request still arriving waits on the poller, without a thread, until the rest is there;
        one not complete within :data:`IO_TIMEOUT` seconds of its first bytes gets 408 and is closed.
        """
        try:
            state = self._read_ahead(conn)
        except UnreadableRequest as refusal:
            self._forget_reading(conn)
            self._refuse(conn, refusal)
            return
        except (OSError, ValueError) as e:  # reset, TLS alert: the connection is gone
            self.log.debug("Reading a request failed: %s", e)
            self._forget_reading(conn)
            self._drop(conn)
            return
        if state == COMPLETE and conn.held > LARGE_REQUEST:
            # Complete and large: a thread of its own; the bytes stay counted until finish_request.
            if conn.request_deadline is not None:
                self.reading.remove(conn)
                conn.request_deadline = None
            conn.framing = None
            done = self._large.submit(self._handle_large, conn)
            done.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))
            return
        if state in (PARTIAL, PAUSED):
            if conn.request_deadline is None:
                conn.request_deadline = conn.arrived + IO_TIMEOUT
                self.reading.append(conn)
            if state == PAUSED:
                self.paused.append(conn)
            else:
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_more_request, conn))
            return
        self._forget_reading(conn)
        if state == CLOSED:  # the client left mid-request: nobody to answer
            self._drop(conn)
            return
        if self._serving:
            # finish_request found the next request already buffered (pipelining): serve it on the next poller
            # turn, after the other connections, instead of recursing once per buffered request.
            self.method_queue.defer(self.enqueue_req, conn)
            return
        self._serving = True
        try:
            conn.framing = None
            if not self._answer_direct(conn):
                self._answer(conn)
        finally:
            self._serving = False

    def _answer_direct(self, conn: Any) -> bool:
        """Answer a kube-scheduler call from the buffered bytes and send it in one piece, without gunicorn's
        request, WSGI or Flask (extender/direct.py); False leaves the request, untouched, to :meth:`_answer`."""
        if self._door is None or not self._go_form or conn.is_http2 or self.nr + 1 >= self.max_requests:
            return False  # gunicorn's parser and handle_request count toward max_requests and restart the worker
        unreader = conn.parser.unreader
        data = unreader.buf.getvalue()
        done = direct.answer(data, self._door.decide, conn.arrived, self._may_keep_alive(), self._body_limit)
        if done is None:
            return False
        response, end, keepalive = done
        unreader.buf = io.BytesIO()
        unreader.buf.write(memoryview(data)[end:])  # a pipelined next request, served after this one
        self.nr += 1
        self._write(conn, deque([memoryview(response)]), keepalive)
        return True

    def _may_keep_alive(self) -> bool:
        return self.alive and bool(self.cfg.keepalive) and len(self.keepalived_conns) < self.max_keepalived

    def handle_request(self, req: Any, conn: Any) -> bool:
        """gunicorn's, except that a scheduler call in any form is answered by the direct door, never the app."""
        if self._door is None or req.path not in direct.PATHS:
            return bool(super().handle_request(req, conn))
        began = datetime.now()
        self.cfg.pre_request(self, req)
        resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, self.cfg)  # sends 100 Continue
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        length = next((int(v) for k, v in req.headers if k == "CONTENT-LENGTH"), None)
        may_keep = self._may_keep_alive() and not req.should_close()
        response, keep = self._door.respond(req.method, req.path, length, req.body.read, self._arrival(), may_keep)
        conn.sock.sendall(response)
        if self.log.access_log_enabled:
            head, _, sent = response.partition(b"\r\n\r\n")
            status, *fields = head.decode("latin-1").split("\r\n")
            resp.status, resp.sent = status.split(" ", 1)[1], len(sent)
            resp.headers = [tuple(field.split(": ", 1)) for field in fields]
            self.log.access(resp, req, environ, datetime.now() - began)
        self.cfg.post_request(self, req, environ, resp)
        return keep

    def _read_ahead(self, conn: PolledConn) -> str:
        """Read what the socket holds, without blocking and within the budget, into ``conn``'s parser buffer,
        and say what is there: ``COMPLETE``, ``PARTIAL`` (more to come), ``PAUSED`` (more to come, no budget
        to read it now) or ``CLOSED`` (the client left before its request was complete)."""
        conn.init()
        buf = conn.parser.unreader.buf
        buf.seek(0, io.SEEK_END)
        have = buf.tell()
        if conn.framing is None:
            conn.framing = Framing()
            conn.arrived = time.monotonic()
        room = max(CONNECTION_ALLOWANCE, READ_AHEAD_BUDGET - (self.buffered - conn.held)) - have
        eof = False
        conn.sock.setblocking(False)
        try:
            while room > 0:
                try:
                    data = conn.sock.recv(min(256 * 1024, room))
                except NOT_YET:
                    break
                if not data:
                    eof = True
                    break
                buf.write(data)
                have += len(data)
                room -= len(data)
        finally:
            conn.sock.setblocking(True)
        if have == 0 and eof:
            return COMPLETE  # closed between requests: the parser meets the end of the stream at once
        state = conn.framing.scan(buf, have, self._body_limit)
        if state != COMPLETE and eof:
            return CLOSED
        self.buffered += have - conn.held
        conn.held = have
        if state == COMPLETE:
            return COMPLETE
        return PAUSED if room <= 0 else PARTIAL

    def _answer(self, conn: Any) -> None:
        """Run the request with the answer collected in memory, then write it without blocking the poller."""
        sock = conn.sock
        conn.sock = collected = CollectedWrites(sock)
        try:
            keepalive = self.handle(conn)
        finally:
            conn.sock = sock
        chunks = collected.chunks
        # Small answers go out as one piece (one TLS record); a large one is not copied into a second buffer.
        pieces = [b"".join(chunks)] if sum(map(len, chunks)) <= WRITE_CHUNK else chunks
        self._write(conn, deque(memoryview(c) for c in pieces if c), keepalive)

    def _refuse(self, conn: Any, refusal: UnreadableRequest) -> None:
        """Answer a request the worker cannot hand to the app (its body cannot be read), then close."""
        self.log.info("Refusing a request from %s: %d %s", conn.client, refusal.status, refusal.message)
        conn.framing = None
        self._write(conn, deque([memoryview(refusal.response())]), False)

    def _write(self, conn: Any, pieces: deque[memoryview], keepalive: Any) -> None:
        sock = conn.sock
        try:
            sock.setblocking(False)
            while pieces:
                data = pieces[0]
                try:
                    sent = sock.send(data[:WRITE_CHUNK])
                except NOT_YET:  # the client is not taking it yet: wait for room, holding nothing
                    if conn.write_deadline is None:
                        conn.write_deadline = time.monotonic() + IO_TIMEOUT
                        self.writing.append(conn)
                    events = selectors.EVENT_READ | selectors.EVENT_WRITE
                    self.poller.register(sock, events, partial(self._on_writable, conn, pieces, keepalive))
                    return
                if sent == len(data):
                    pieces.popleft()
                else:
                    pieces[0] = data[sent:]
        except OSError as e:  # reset, closed by handle() after an error
            self.log.debug("Writing an answer failed: %s", e)
            self._forget_writing(conn)
            self._drop(conn)
            return
        self._forget_writing(conn)
        done: futures.Future[Any] = futures.Future()
        done.set_result(keepalive)
        self.finish_request(conn, done)

    def _on_writable(self, conn: Any, pieces: deque[memoryview], keepalive: Any, _fileobj: Any) -> None:
        self.poller.unregister(conn.sock)
        self._write(conn, pieces, keepalive)

    def _forget_writing(self, conn: Any) -> None:
        if conn.write_deadline is not None:
            self.writing.remove(conn)
            conn.write_deadline = None

    def _arrival(self) -> float | None:
        """When the first byte of the request this thread answers arrived, for the app's deadlines."""
        arrived: float | None = getattr(self._local, "arrived", None)
        return arrived

    def handle(self, conn: Any) -> Any:
        self._local.arrived = conn.arrived
        return super().handle(conn)

    def _handle_large(self, conn: Any) -> Any:
        held = _large_lock.acquire(timeout=LARGE_WAIT)
        try:
            return self.handle(conn)
        finally:
            if held:
                _large_lock.release()
            _trim_heap()

    def _on_more_request(self, conn: Any, _fileobj: Any) -> None:
        self.poller.unregister(conn.sock)
        self.enqueue_req(conn)

    def _forget_reading(self, conn: Any) -> None:
        if conn.request_deadline is not None:
            self.reading.remove(conn)
            conn.request_deadline = None
        if conn in self.paused:
            self.paused.remove(conn)
        self._release(conn)

    def _release(self, conn: Any) -> None:
        """Give the bytes of ``conn``'s request back to the read-ahead budget, and wake who waits for it."""
        if conn.held:
            self.buffered -= conn.held
            conn.held = 0
            if self.paused:  # budget freed: the waiting connections read again, on the next poller turn
                waiting, self.paused = self.paused, []
                for other in waiting:
                    self.method_queue.defer(self._resume_reading, other)

    def _resume_reading(self, conn: Any) -> None:
        if conn.request_deadline is not None:  # still waiting (not expired meanwhile)
            self.enqueue_req(conn)

    def _drop(self, conn: PolledConn) -> None:
        self.nr_conns -= 1
        conn.close()
