"""Spreading new connections over spot-extender's workers: each goes to the worker holding the fewest.

Go clients (kube-apiserver for /mutate, kube-scheduler for /filter and /prioritize) keep a few long-lived
connections. Every worker polls the one listening socket and the first to call ``accept()`` wins, so those few
connections often all landed on one worker (8/0 and 7/1 splits of 8 were as common as 4/4): that worker's queue
set the latency while the other idled. ``SO_REUSEPORT`` listeners per worker (gunicorn's ``reuse_port``) do not
fix it: the kernel hashes each connection's addresses to a listener, so two connections share a worker half the
time, and a stopping worker's queued connections are reset.

Instead the workers share a count of connections per worker, in memory the master makes before it forks them
(:class:`Spreader`). Whichever worker accepts a connection picks, under a lock, the live worker holding the
fewest (itself on a tie); if that is another worker, the accepted socket is passed to it over a Unix datagram
socket pair (``SCM_RIGHTS``) before any TLS byte is read. Where a connection goes depends only on the counts,
never on which worker the kernel woke first or how busy the machine is. Only connection set-up pays for it (one
``sendmsg``); requests on an open connection never do.

A worker takes a free slot when it starts (one whose process is gone: a worker that died is replaced in its
slot) and gives it up when it stops accepting, passing on what was handed to it and not yet taken. A worker
started beyond the configured count (gunicorn's ``TTIN``) has no slot: it keeps what it accepts.
"""

from __future__ import annotations

import multiprocessing
import os
import selectors
import socket
from typing import Any

__all__ = ["Spreader", "SpreadConnections", "shared_spreader"]


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process reusing the pid: not our worker
        return False
    return True


class Spreader:
    """Connection counts and hand-over sockets shared by the workers of one server.

    Made in the master, before the workers are forked; each worker then calls :meth:`join` once. All methods
    run on the worker's poller thread.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._lock = multiprocessing.Lock()
        self._pids: Any = multiprocessing.RawArray("q", slots)
        self._counts: Any = multiprocessing.RawArray("q", slots)
        self._pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(slots)]
        for send, receive in self._pairs:
            send.setblocking(False)
            receive.setblocking(False)
        self.slot: int | None = None  # this process's slot, once joined

    def join(self) -> tuple[socket.socket, list[socket.socket]] | None:
        """Take a free slot for this process: the socket that handed-over connections arrive on, and those
        already waiting there (handed to a worker that died; counted for this one). None: no slot is free."""
        with self._lock:
            for slot in range(self.slots):
                if not _alive(self._pids[slot]):
                    self.slot = slot
                    self._pids[slot] = os.getpid()
                    waiting = self._drain(slot)
                    self._counts[slot] = len(waiting)
                    return self._pairs[slot][1], waiting
        return None

    def leave(self) -> list[socket.socket]:
        """Take no more connections; returns those handed to this worker and not yet taken (no longer counted
        here: the caller gives each to :meth:`pass_on`, or serves it)."""
        if self.slot is None:
            return []
        with self._lock:
            slot, self.slot = self.slot, None
            self._pids[slot] = 0
            self._counts[slot] = 0
            return self._drain(slot)

    def add(self, delta: int) -> None:
        """This worker's connections went up or down by ``delta`` (not for connections :meth:`place` kept)."""
        if self.slot is not None and delta:
            with self._lock:
                self._counts[self.slot] += delta

    def place(self, conn: socket.socket) -> bool:
        """Give a just-accepted connection to the worker holding the fewest: True when that is this worker
        (counted here), False when it went to another (and ``conn`` is closed here)."""
        mine = self.slot
        if mine is None:
            return True
        with self._lock:
            best, fewest = mine, self._counts[mine]
            for slot in range(self.slots):
                if slot != mine and self._counts[slot] < fewest and _alive(self._pids[slot]):
                    best, fewest = slot, self._counts[slot]
            if best != mine:
                try:
                    socket.send_fds(self._pairs[best][0], [b"c"], [conn.fileno()])
                except OSError:  # its queue is full (that worker is stuck): keep the connection
                    pass
                else:
                    self._counts[best] += 1
                    conn.close()
                    return False
            self._counts[mine] += 1
            return True

    def pass_on(self, conn: socket.socket) -> bool:
        """After :meth:`leave`: give ``conn`` to the live worker holding the fewest; False when there is none
        (``conn`` is left to the caller)."""
        with self._lock:
            live = [slot for slot in range(self.slots) if _alive(self._pids[slot]) and self._pids[slot] != os.getpid()]
            for slot in sorted(live, key=lambda s: self._counts[s]):
                try:
                    socket.send_fds(self._pairs[slot][0], [b"c"], [conn.fileno()])
                except OSError:
                    continue
                self._counts[slot] += 1
                conn.close()
                return True
        return False

    def received(self) -> list[socket.socket]:
        """Connections handed to this worker since the last call (already counted for it)."""
        if self.slot is None:
            return []
        return self._drain(self.slot)

    def _drain(self, slot: int) -> list[socket.socket]:
        conns: list[socket.socket] = []
        receive = self._pairs[slot][1]
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(receive, 1, 1)
            except (BlockingIOError, InterruptedError):
                return conns
            for fd in fds:
                try:
                    conns.append(socket.socket(fileno=fd))
                except OSError:
                    os.close(fd)


_shared: Spreader | None = None


def shared_spreader(workers: int) -> Spreader | None:
    """The server's one :class:`Spreader` (None for a single worker). Called where gunicorn builds its workers,
    in the master before forking them, so every worker shares it."""
    global _shared
    if _shared is None and workers > 1:
        _shared = Spreader(workers)
    return _shared


class SpreadConnections:
    """What a gunicorn ``ThreadWorker`` needs to take part: its connection count (gunicorn's ``nr_conns``) is
    published, it joins a slot when it starts running and serves the connections handed to it. The worker
    sets :attr:`spreader`, offers each accepted connection to :meth:`Spreader.place`, calls
    :meth:`_stop_taking_connections` when it stops accepting, and provides ``_serve_new``."""

    spreader: Spreader | None = None
    poller: Any
    _nr = 0
    _receiver: socket.socket | None = None  # where other workers hand this one connections

    def _serve_new(self, sock: socket.socket, client_addr: Any, server_addr: Any) -> None:
        raise NotImplementedError

    @property
    def nr_conns(self) -> int:
        """gunicorn's count of this worker's connections; every change is published to the other workers."""
        return self._nr

    @nr_conns.setter
    def nr_conns(self, value: int) -> None:
        delta, self._nr = value - self._nr, value
        if self.spreader is not None:
            self.spreader.add(delta)

    def run(self) -> None:
        joined = self.spreader.join() if self.spreader is not None else None
        if joined is not None:
            self._receiver, waiting = joined
            self.poller.register(self._receiver, selectors.EVENT_READ, self._on_handed_over)
            for sock in waiting:  # handed to this slot's previous worker, which died
                self._take_over(sock)
        super().run()  # type: ignore[misc]

    def _on_handed_over(self, _fileobj: Any) -> None:
        if self.spreader is not None:
            for sock in self.spreader.received():
                self._take_over(sock)

    def _take_over(self, sock: socket.socket) -> None:
        """Serve a connection another worker accepted (already counted for this one)."""
        self._nr += 1
        try:
            client_addr, server_addr = sock.getpeername(), sock.getsockname()
        except OSError:  # the client already left
            sock.close()
            self.nr_conns -= 1
            return
        self._serve_new(sock, client_addr, server_addr)

    def _stop_taking_connections(self) -> None:
        """A stopping worker leaves its slot; connections handed to it and not yet taken go to another."""
        if self.spreader is None or self._receiver is None:
            return
        self.poller.unregister(self._receiver)
        self._receiver = None
        for sock in self.spreader.leave():
            if not self.spreader.pass_on(sock):  # no other worker is left: serve it here
                self._take_over(sock)
