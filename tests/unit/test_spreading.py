"""New connections go to the spot-extender worker holding the fewest (extender/spreading.py), with real sockets.

Go clients keep a few long-lived connections; if they all land on one worker, that worker's queue sets the
latency while the other idles. Each test opens connections one after the other, each with its TLS handshake
done, so each is placed knowing where the earlier ones went: the split is exact, whatever the machine's load.
Which worker holds a connection is read from /proc. (Checked: with every worker accepting for itself, the
first-to-accept rule, these fail most runs.)
"""

from __future__ import annotations

import gc
import os
import signal
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.servers import Server, start_server, stop_server

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads connection owners from /proc")

WAIT = 30.0  # how long the server may take to notice closed connections or replace a worker (never the result)


def _server_side_ports(server: Server) -> dict[int, str]:
    """Client port -> socket inode of every connection the server still holds (not listening, not gone)."""
    held: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if local_port == server.port and fields[3] not in ("0A", "06"):  # LISTEN, TIME_WAIT
                    held[remote_port] = fields[9]
    return held


def _workers(server: Server) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == server.proc.pid:
                        pids.append(int(entry))
            except OSError:
                continue
    return sorted(pids)


def _owners(server: Server, conns: list[ssl.SSLSocket]) -> list[int]:
    """The pid of the worker holding the server side of each client connection."""
    inode_of_port = _server_side_ports(server)
    owner: dict[str, int] = {}
    for pid in _workers(server):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    owner[link[8:-1]] = pid
        except OSError:
            continue
    return [owner[inode_of_port[conn.getsockname()[1]]] for conn in conns]


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"the server did not get there within {WAIT:g} s: {what}"
        time.sleep(0.05)


def _quiet(server: Server, holding: int = 0) -> None:
    """Wait until the server holds exactly ``holding`` connections (closed ones are noticed and uncounted)."""
    _wait_until(lambda: len(_server_side_ports(server)) == holding, f"holding {holding} connections")


def _open(server: Server, n: int) -> list[ssl.SSLSocket]:
    return [server.tls_connection() for _ in range(n)]


def _every_worker_takes_connections(server: Server) -> None:
    """Wait until every worker is up: start_server saw one answer, and a worker still loading the app takes no
    connections (the others keep them). Once all are up, two connections in a row go to two workers."""

    def two_in_a_row_on_two_workers() -> bool:
        conns = _open(server, 2)
        try:
            return len(set(_owners(server, conns))) == 2
        finally:
            for conn in conns:
                conn.close()
            _quiet(server)

    _wait_until(two_in_a_row_on_two_workers, "every worker taking connections")


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path, workers=2, threads=1)
    gc.collect()  # start_server's probe connections, closed once collected
    _quiet(server)
    _every_worker_takes_connections(server)
    yield server
    stop_server(server)


def test_keep_alive_connections_are_spread_over_the_workers(two_workers: Server) -> None:
    conns = _open(two_workers, 8)
    try:
        owners = _owners(two_workers, conns)
        assert sorted(owners.count(pid) for pid in _workers(two_workers)) == [4, 4], owners
        # alternately: whichever worker accepted, each connection went to the one holding fewer
        assert all(owners[i] != owners[i + 1] for i in range(0, 8, 2)), owners
    finally:
        for conn in conns:
            conn.close()


def test_a_worker_whose_connections_closed_takes_the_next_ones(two_workers: Server) -> None:
    conns = _open(two_workers, 4)
    try:
        owners = _owners(two_workers, conns)
        emptied = owners[0]
        for conn, owner in zip(conns, owners, strict=True):
            if owner == emptied:
                conn.close()
        kept = [c for c, o in zip(conns, owners, strict=True) if o != emptied]
        _quiet(two_workers, holding=len(kept))
        more = _open(two_workers, 2)
        conns += more
        assert _owners(two_workers, more) == [emptied, emptied]
    finally:
        for conn in conns:
            conn.close()


def test_a_replaced_worker_takes_its_share(two_workers: Server) -> None:
    old = _workers(two_workers)
    os.kill(old[0], signal.SIGKILL)
    _wait_until(lambda: len(_workers(two_workers)) == 2 and old[0] not in _workers(two_workers), "a new worker")
    _every_worker_takes_connections(two_workers)  # the new one too
    conns = _open(two_workers, 6)
    try:
        owners = _owners(two_workers, conns)
        assert sorted(owners.count(pid) for pid in _workers(two_workers)) == [3, 3], owners
    finally:
        for conn in conns:
            conn.close()
