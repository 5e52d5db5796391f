"""spot-extender's gunicorn worker (extender/worker.py) with real sockets: no connection ties up the worker.

Servers here run with ONE pool thread, so a connection that tied up a thread would stall every other request.
Go's transport (kube-apiserver, kube-scheduler) parks freshly dialled connections without a request during
bursts; with gunicorn's stock gthread worker a parked connection blocked a pool thread on its first read and
the webhook missed the API server's deadline. Slow, stalled, chunked, pipelined and oversized requests, failed
handshakes, certificate rotation and shutdown with idle connections are covered too (the spreading of
connections over workers: tests/unit/test_spreading.py). (Checked: the parked, half-handshake, idle-plain,
slow, stalled and SIGTERM tests fail with ``worker_class="gthread"``.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from extender.certs import write_bundle
from tests.support.servers import Server, start_server, stop_server
from tests.unit.test_server_errors import review

STALL = 2.0  # a stalled request waits for a client timeout (5-10 s here); an unstalled one takes milliseconds


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("tls"), threads=1)
    yield server
    stop_server(server)


def _mutate(server: Server) -> float:
    """Seconds one /mutate took on a fresh connection; fails on anything but a patched admission."""
    with server.session() as session:
        start = time.monotonic()
        r = session.post(server.base + "/mutate", data=orjson.dumps(review()), timeout=10)
        elapsed = time.monotonic() - start
    assert r.status_code == 200, r.text
    assert r.json()["response"]["patchType"] == "JSONPatch"
    return elapsed


def _http_get(conn: socket.socket, path: str) -> bytes:
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: spotshift\r\n\r\n".encode())
    conn.settimeout(5)
    return conn.recv(4096)


def test_parked_tls_connections_do_not_stall_the_only_thread(tls_server: Server) -> None:
    parked = [tls_server.tls_connection() for _ in range(4)]
    try:
        elapsed = _mutate(tls_server)
        assert elapsed < STALL, f"/mutate took {elapsed:.1f} s behind {len(parked)} parked connections"
        # a parked connection is served when it finally sends its request
        for conn in parked:
            assert _http_get(conn, "/healthz").startswith(b"HTTP/1.1 200 ")
    finally:
        for conn in parked:
            conn.close()


def test_a_half_done_handshake_does_not_stall_the_only_thread(tls_server: Server) -> None:
    silent = socket.create_connection((tls_server.host, tls_server.port))  # TCP only, no ClientHello
    partial = socket.create_connection((tls_server.host, tls_server.port))
    partial.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the first bytes of a ClientHello
    try:
        elapsed = _mutate(tls_server)
        assert elapsed < STALL, f"/mutate took {elapsed:.1f} s behind two unfinished handshakes"
    finally:
        silent.close()
        partial.close()


def test_a_failed_handshake_closes_that_connection_and_the_server_keeps_serving(tls_server: Server) -> None:
    plain = socket.create_connection((tls_server.host, tls_server.port), timeout=5)
    try:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: spotshift\r\n\r\n")  # plain HTTP to the TLS port
        try:
            answer = plain.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 200"), "a plain-HTTP request over the TLS port was served"
    finally:
        plain.close()
    untrusting = ssl.create_default_context()  # system CAs only: refuses spotshift's certificate
    with (
        pytest.raises(ssl.SSLCertVerificationError),
        untrusting.wrap_socket(
            socket.create_connection((tls_server.host, tls_server.port), timeout=5), server_hostname="127.0.0.1"
        ),
    ):
        pass
    assert _mutate(tls_server) < STALL
    assert tls_server.proc.poll() is None


def test_a_rotated_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    server = start_server(tmp_path, threads=1)
    try:
        before = server.tls_connection()
        first = before.getpeercert(binary_form=True)
        before.close()
        rotated = tmp_path / "rotated"
        write_bundle(rotated, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
        certs = tmp_path / "certs"
        for name in ("tls.key", "tls.crt"):
            os.replace(rotated / name, certs / name)
        (certs / "ca.crt").write_bytes((rotated / "ca.crt").read_bytes())
        after = server.tls_connection()
        try:
            assert after.getpeercert(binary_form=True) != first
            assert _http_get(after, "/healthz").startswith(b"HTTP/1.1 200 ")
        finally:
            after.close()
    finally:
        stop_server(server)


def test_idle_plain_http_connections_do_not_stall_the_only_thread(tmp_path: Path) -> None:
    server = start_server(tmp_path, tls=False, threads=1)
    idle = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(3)]
    try:
        elapsed = _mutate(server)
        assert elapsed < STALL, f"/mutate took {elapsed:.1f} s behind idle connections"
        assert _http_get(idle[0], "/healthz").startswith(b"HTTP/1.1 200 ")
    finally:
        for conn in idle:
            conn.close()
        stop_server(server)


def test_sigterm_does_not_wait_for_idle_connections(tmp_path: Path) -> None:
    """gunicorn waits up to graceful_timeout (20 s) for open connections; idle ones are closed within ~2 s."""
    server = start_server(tmp_path, threads=1)
    parked = [server.tls_connection() for _ in range(2)]
    silent = socket.create_connection((server.host, server.port))
    kept_alive = server.tls_connection()
    assert _http_get(kept_alive, "/healthz").startswith(b"HTTP/1.1 200 ")
    try:
        time.sleep(0.3)
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(30)
        took = time.monotonic() - start
        assert server.proc.returncode == 0, server.log.read_text()
        assert took < 10, f"stopping took {took:.1f} s with idle connections open"
    finally:
        for conn in (*parked, silent, kept_alive):
            conn.close()
        stop_server(server)


def _post_head(path: str, length: int, *, chunked: bool = False) -> bytes:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    return f"POST {path} HTTP/1.1\r\nHost: spotshift\r\nContent-Type: application/json\r\n{framing}\r\n\r\n".encode()


def _read_response(conn: socket.socket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length body: (status, body)."""
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    while len(body) < length:
        body += conn.recv(65536)
    return int(head.split(b" ", 2)[1]), body


def test_a_request_that_arrives_slowly_is_answered_without_stalling_the_others(tls_server: Server) -> None:
    body = orjson.dumps(review())
    slow = tls_server.tls_connection()
    try:
        slow.sendall(_post_head("/mutate", len(body)) + body[:100])  # the rest comes later
        time.sleep(0.3)
        assert _mutate(tls_server) < STALL, "a half-sent request held up a complete one"
        slow.sendall(body[100:])
        status, answer = _read_response(slow)
        assert status == 200 and orjson.loads(answer)["response"]["patchType"] == "JSONPatch"
    finally:
        slow.close()


def test_a_chunked_request_and_pipelined_requests_are_answered(tls_server: Server) -> None:
    body = orjson.dumps(review())
    conn = tls_server.tls_connection()
    try:
        conn.sendall(_post_head("/mutate", 0, chunked=True) + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        status, answer = _read_response(conn)
        assert status == 200 and orjson.loads(answer)["response"]["uid"] == review()["request"]["uid"]
        conn.sendall((_post_head("/mutate", len(body)) + body) * 2 + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert [_read_response(conn)[0] for _ in range(3)] == [200, 200, 200]
    finally:
        conn.close()


def _closed(conn: socket.socket, wait: float = 5) -> bool:
    conn.settimeout(wait)
    try:
        return conn.recv(4096) == b""
    except TimeoutError:
        return False
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_a_client_that_stalls_mid_request_is_cut_off_after_the_io_timeout(tls_server: Server) -> None:
    """Content-Length and chunked requests alike wait on the poller, without a thread, and get 408 and a closed
    connection once their first bytes are IO_TIMEOUT old; a connection that never sends a request is closed
    after FIRST_REQUEST_TIMEOUT, while a kept-alive one stays."""
    from extender.worker import FIRST_REQUEST_TIMEOUT, IO_TIMEOUT

    stalled = tls_server.tls_connection()
    chunked = tls_server.tls_connection()
    trickling = tls_server.tls_connection()
    never_used = tls_server.tls_connection()
    kept_alive = tls_server.tls_connection()
    try:
        assert _http_get(kept_alive, "/healthz").startswith(b"HTTP/1.1 200 ")
        stalled.sendall(_post_head("/mutate", 5000) + b'{"apiVersion"')  # and nothing more
        chunked.sendall(_post_head("/mutate", 0, chunked=True) + b'1388\r\n{"apiVersion"')
        trickling.sendall(_post_head("/mutate", 0, chunked=True))
        start = time.monotonic()
        time.sleep(0.5)
        assert _mutate(tls_server) < STALL, "a stalled request held up a complete one"
        while time.monotonic() - start < IO_TIMEOUT - 2:  # a chunk every second: each read is quick, the whole not
            trickling.sendall(b"1\r\n \r\n")
            time.sleep(1)
        for conn in (stalled, chunked, trickling):
            status, answer = _read_response(conn)
            assert status == 408 and orjson.loads(answer)["error"], answer
            assert _closed(conn), "the connection stays open after a 408"
        waited = time.monotonic() - start
        assert IO_TIMEOUT - 1 < waited < IO_TIMEOUT + 5, f"cut off after {waited:.1f} s"
        assert _closed(never_used, max(0.1, start + FIRST_REQUEST_TIMEOUT + 5 - time.monotonic()))
        assert _http_get(kept_alive, "/healthz").startswith(b"HTTP/1.1 200 "), "a kept-alive connection was closed"
        assert _mutate(tls_server) < STALL
    finally:
        for conn in (stalled, chunked, trickling, never_used, kept_alive):
            conn.close()


def test_a_body_over_the_limit_is_refused_from_its_head_unread(tls_server: Server) -> None:
    """413 with Connection: close as soon as the head says the body is too large: nothing of it is read."""
    conn = tls_server.tls_connection()
    try:
        conn.sendall(_post_head("/filter", 1 << 30))  # 1 GiB announced, none sent
        status, answer = _read_response(conn)
        assert status == 413 and b"over the limit" in answer
        assert _closed(conn)
    finally:
        conn.close()
    assert _mutate(tls_server) < STALL


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param(b"zz\r\n{}\r\n0\r\n\r\n", 400, id="chunk-size-not-hex"),
        pytest.param(b"2\r\n{}XX0\r\n\r\n", 400, id="chunk-not-followed-by-crlf"),
        pytest.param(b"%x\r\n" % (5 * 1024 * 1024), 413, id="chunked-body-over-the-limit"),
    ],
)
def test_a_malformed_or_oversized_chunked_body_is_a_4xx_not_a_5xx(tls_server: Server, body: bytes, status: int) -> None:
    conn = tls_server.tls_connection()
    try:
        conn.sendall(_post_head("/mutate", 0, chunked=True) + body)
        got, answer = _read_response(conn)
        assert got == status and orjson.loads(answer)["error"], answer
        assert _closed(conn)
    finally:
        conn.close()
    assert _mutate(tls_server) < STALL
    assert "Traceback" not in tls_server.log.read_text()


def test_a_client_leaving_mid_body_gets_no_answer_and_leaves_no_traceback(tls_server: Server) -> None:
    for chunked in (False, True):
        conn = tls_server.tls_connection()
        conn.sendall(_post_head("/mutate", 5000, chunked=chunked) + (b"1388\r\n" if chunked else b"") + b'{"kind"')
        time.sleep(0.2)
        conn.close()
    assert _mutate(tls_server) < STALL
    assert "Traceback" not in tls_server.log.read_text()


def test_idle_connections_past_the_cap_do_not_lock_callers_out(tmp_path: Path) -> None:
    """At the connection cap the worker closes its oldest idle connection to take a new one: a fresh /mutate
    and /healthz are answered at once behind twice the cap of idle TLS connections (without that, they waited
    in the kernel's queue until idle ones timed out, FIRST_REQUEST_TIMEOUT = 10 s)."""
    server = start_server(tmp_path, threads=1, extra=["--worker-connections", "20"])
    idle = []
    try:
        for _ in range(40):
            with contextlib.suppress(OSError):
                idle.append(server.tls_connection())
        assert _mutate(server) < STALL
        with server.session() as session:
            assert session.get(server.base + "/healthz", timeout=STALL).status_code == 200
        assert sum(_closed(c, 0.05) for c in idle) >= 20, "the oldest idle connections were closed"
    finally:
        for conn in idle:
            conn.close()
        stop_server(server)


def test_thousands_of_pipelined_requests_are_all_answered(tls_server: Server) -> None:
    """Requests already buffered behind the one being answered are served one poller turn each, not by
    recursion: 3,000 pipelined requests in one write once blew the stack and killed the worker."""
    conn = tls_server.tls_connection()
    try:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: spotshift\r\n\r\n" * 3000)
        conn.settimeout(30)
        received = b""
        while received.count(b"HTTP/1.1 200 ") < 3000:
            chunk = conn.recv(1 << 20)
            assert chunk, f"connection closed after {received.count(b'HTTP/1.1 200 ')} answers"
            received += chunk
        assert _mutate(tls_server) < STALL
        assert tls_server.proc.poll() is None
        assert "RecursionError" not in tls_server.log.read_text()
    finally:
        conn.close()


def test_a_client_that_does_not_read_its_answers_cannot_stall_the_worker(tls_server: Server) -> None:
    """Answers are written without blocking the poller: a client that never reads fills the socket buffers,
    then waits alone, and is cut off after the I/O timeout."""
    import threading

    from extender.worker import IO_TIMEOUT

    nodes = {"items": [{"metadata": {"name": f"node-{i}"}} for i in range(60000)]}
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "Nodes": nodes})
    requests_ = (_post_head("/prioritize", len(body)) + body) * 4  # ~7 MB in, ~7 MB of answers out
    deaf = tls_server.tls_connection()

    def send() -> None:
        with contextlib.suppress(OSError):  # the server hangs up before taking everything
            deaf.sendall(requests_)

    sender = threading.Thread(target=send, daemon=True)
    try:
        start = time.monotonic()
        sender.start()
        time.sleep(3)  # long enough for the server to answer and block on the full socket
        assert _mutate(tls_server) < STALL, "a client that does not read held up the worker"
        time.sleep(max(0.0, start + IO_TIMEOUT + 3 - time.monotonic()))
        # The server has hung up, which ends the sender; only then is the connection read here (an SSL object
        # written and read from two threads at once can crash the interpreter).
        sender.join(30)
        deaf.settimeout(5)
        received = 0
        while True:
            try:
                chunk = deaf.recv(1 << 20)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += len(chunk)
        assert received < 4 * 60000 * 25, "every answer arrived: the server never stopped writing"
        assert _mutate(tls_server) < STALL
    finally:
        if sender.is_alive():
            sender.join(30)
        deaf.close()


def _worker_rss(server: Server) -> int:
    """RSS in bytes of the (only) worker process."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != server.proc.pid:
                    continue
            with open(f"/proc/{entry}/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except OSError:
            continue
    raise AssertionError("no worker process")


def test_partial_requests_share_one_read_ahead_budget(tmp_path: Path) -> None:
    """Six connections each send 24 MiB of a 30 MiB body and stop: the worker holds at most its 64 MiB budget
    of them (it stops reading the others), not 144 MiB; each still gets its 408 when its time is up."""
    import threading

    from extender.worker import READ_AHEAD_BUDGET

    server = start_server(tmp_path, threads=1)
    conns = [server.tls_connection() for _ in range(6)]
    part = b" " * (24 * 1024 * 1024)
    statuses: dict[int, int] = {}
    measured = threading.Event()

    def send_then_read(i: int, conn: ssl.SSLSocket) -> None:
        # One thread per connection does both, one after the other: an SSL object written and read from two
        # threads at once can crash the interpreter (OpenSSL's objects are not thread-safe). It reads once the
        # memory has been measured.
        conn.settimeout(20)
        with contextlib.suppress(OSError):
            conn.sendall(_post_head("/filter", 30 * 1024 * 1024) + part)
        measured.wait(60)
        statuses[i], _ = _read_response(conn)

    senders = [threading.Thread(target=send_then_read, args=(i, c), daemon=True) for i, c in enumerate(conns)]
    try:
        before = _worker_rss(server)
        for t in senders:
            t.start()
        grown = 0
        for _ in range(30):
            time.sleep(0.2)
            grown = max(grown, _worker_rss(server) - before)
        assert grown < READ_AHEAD_BUDGET + 40 * 1024 * 1024, f"the worker grew by {grown >> 20} MiB"
        assert _mutate(server) < STALL
        measured.set()
        for t in senders:
            t.join(60)
        assert statuses == dict.fromkeys(range(len(conns)), 408)
    finally:
        measured.set()
        for t in senders:
            if t.is_alive():
                t.join(60)  # no connection is closed while its thread may still use it
        for conn in conns:
            conn.close()
        stop_server(server)
