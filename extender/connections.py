"""The connection objects of spot-extender's poller worker (extender/worker.py): sockets whose blocking mode
means "block, with :data:`IO_TIMEOUT`", the in-memory writer the poller answers through, and the connection
with the state the poller keeps while it handshakes, gathers a request and writes an answer."""

from __future__ import annotations

import socket
import ssl
from typing import Any

from gunicorn import http
from gunicorn.workers.gthread import TConn

from extender.framing import Framing

__all__ = ["IO_TIMEOUT", "TimedSocket", "TimedSSLSocket", "NOT_YET", "WRITE_CHUNK", "CollectedWrites", "PolledConn"]

# A request must arrive within this many seconds of its first bytes, and a blocking socket read or write
# (the large-request thread writing an answer the client does not take) gives up after as
# long: a client that stalls mid-request must not hold a thread, or the poller, indefinitely.
# kube-apiserver's webhook timeout is 3 s (deploy/) and 30 s at most; kube-scheduler's extender httpTimeout
# is 5 s, so neither is still waiting by then.
IO_TIMEOUT = 10.0


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

NOT_YET = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
WRITE_CHUNK = 64 * 1024


class CollectedWrites:
    """Stands in for a connection's socket while the poller thread answers a request: what gunicorn writes
    (``sendall``) is kept in memory and sent afterwards without blocking; everything else is the socket's."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.chunks: list[bytes] = []

    def sendall(self, data: Any) -> None:
        self.chunks.append(data if type(data) is bytes else bytes(data))

    def setblocking(self, flag: bool) -> None:
        # The request is all buffered: a read that would need the socket fails at once instead of blocking
        # the poller (the app answers such a body with 400).
        self._sock.setblocking(False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class PolledConn(TConn):  # type: ignore[misc]
    """A connection whose TLS handshake (if any) was done on the poller; ``init`` only builds the parser."""

    initialized: bool  # gunicorn's TConn attributes used here
    parser: Any

    def __init__(self, cfg: Any, sock: Any, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.handshaken = False
        self.request_deadline: float | None = None  # set while a request is partly received
        self.write_deadline: float | None = None  # set while an answer waits for the client to take it
        self.close_deadline: float | None = None  # set while a closing connection drains
        self.framing: Framing | None = None  # the request being gathered
        self.arrived = 0.0  # time.monotonic() at the request's first bytes
        self.held = 0  # bytes of a partly received request counted against the worker's budget
        self.lingered = 0

    def init(self) -> None:
        if getattr(self, "initialized", False):  # set by gunicorn's TConn, which carries no type information
            return
        if not self.handshaken:  # plain HTTP: nothing was done on the poller
            super().init()
            return
        self.initialized = True
        self.sock.setblocking(True)
        # ALPN offers HTTP/1.1 only (gunicorn's http_protocols default, never changed by spot-extender).
        self.parser = http.get_parser(self.cfg, self.sock, self.client)
