"""kube-scheduler's calls answered by the poller worker straight from the bytes (extender/direct.py), with real
sockets through a real ``spot-extender``: kept-alive and pipelined calls, ``Connection: close``, and calls of
every other form, read by gunicorn's parser and answered by the same door on the same connection.

An answer built by extender/direct.py carries no ``Server`` header and gunicorn's always does: that tells the
tests which door answered.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import orjson
import pytest

from extender.app import create_app
from shared.config import Config
from tests.support.door_client import AppClient
from tests.support.servers import Server, start_server, stop_server
from tests.unit.test_extender_api import pod, post_chunked

NAMES = [f"node-{i}" for i in range(200)]
BODY = orjson.dumps({"Pod": pod(), "Nodes": None, "NodeNames": NAMES})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # --no-node-cache: NodeNames calls are answered from an empty index (every node passes, scores 0)
    started = start_server(tmp_path_factory.mktemp("direct"), threads=1)
    yield started
    stop_server(started)


def call(path: str, body: bytes = BODY, *, headers: bytes = b"") -> bytes:
    """A call as Go's client writes it; ``headers`` are added (CRLF-terminated lines)."""
    head = b"POST %s HTTP/1.1\r\nHost: spotshift\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: %d\r\n" % (
        path.encode(),
        len(body),
    )
    return head + b"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n%s\r\n%s" % (headers, body)


class Reader:
    """HTTP/1.1 responses with a Content-Length body, read one by one from a connection (several may arrive in
    one read)."""

    def __init__(self, conn: ssl.SSLSocket) -> None:
        self.conn = conn
        self.data = b""
        conn.settimeout(10)

    def _more(self) -> None:
        chunk = self.conn.recv(65536)
        assert chunk, f"connection closed before a whole response: {self.data!r}"
        self.data += chunk

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, _, rest = self.data.partition(b"\r\n\r\n")
        status, *lines = head.decode("latin-1").split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(fields["content-length"])
        while len(rest) < length:
            self.data = head + b"\r\n\r\n" + rest
            self._more()
            head, _, rest = self.data.partition(b"\r\n\r\n")
        self.data = rest[length:]
        return int(status.split(" ")[1]), fields, rest[:length]

    def closed(self) -> bool:
        if self.data:
            return False
        self.conn.settimeout(5)
        try:
            return self.conn.recv(4096) == b""
        except TimeoutError:
            return False
        except (ConnectionResetError, ssl.SSLError):
            return True


def expected(path: str, body: bytes = BODY) -> tuple[int, bytes]:
    """What the door answers for the same call given in another form (a chunked body)."""
    r = post_chunked(AppClient(create_app(Config())), path, body)
    return r.status_code, r.data


def direct(fields: dict[str, str]) -> bool:
    return "server" not in fields


def test_kept_alive_calls_are_answered_directly_with_flasks_bytes(server: Server) -> None:
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        for path in ("/filter", "/prioritize", "/filter", "/prioritize"):
            conn.sendall(call(path))
            status, fields, body = reader.response()
            assert (status, body) == expected(path)
            assert direct(fields), f"{path} went through gunicorn: {fields}"
            assert fields["content-type"] == "application/json" and "connection" not in fields
    finally:
        conn.close()


def test_pipelined_calls_are_answered_in_order(server: Server) -> None:
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        conn.sendall(call("/filter") + call("/prioritize") + healthz + call("/filter"))
        answers = [reader.response() for _ in range(4)]
        assert [(status, body) for status, _, body in answers[:2]] == [expected("/filter"), expected("/prioritize")]
        assert answers[2][0] == 200 and orjson.loads(answers[2][2]) == {"status": "ok"}
        assert (answers[3][0], answers[3][2]) == expected("/filter")
        assert [direct(fields) for _, fields, _ in answers] == [True, True, False, True]
    finally:
        conn.close()


def test_connection_close_is_answered_then_the_connection_ends(server: Server) -> None:
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        conn.sendall(call("/filter", headers=b"Connection: close\r\n"))
        status, fields, body = reader.response()
        assert (status, body) == expected("/filter") and direct(fields)
        assert fields["connection"] == "close"
        assert reader.closed()
    finally:
        conn.close()


def test_other_forms_are_answered_by_the_direct_door_on_the_same_connection(server: Server) -> None:
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        chunked = (
            b"POST /filter HTTP/1.1\r\nHost: spotshift\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
        )
        conn.sendall(chunked)
        status, fields, body = reader.response()
        assert (status, body) == expected("/filter") and direct(fields)

        conn.sendall(call("/prioritize", headers=b"X-Request-Id: 1\r\n"))  # a header Go's form does not have
        status, fields, body = reader.response()
        assert (status, body) == expected("/prioritize") and direct(fields)

        conn.sendall(b"GET /filter?x=1 HTTP/1.1\r\nHost: spotshift\r\n\r\n")  # another method: 405
        status, fields, body = reader.response()
        assert status == 405 and orjson.loads(body)["status"] == 405 and direct(fields)

        conn.sendall(call("/filter"))  # and the usual form is answered directly again
        status, fields, body = reader.response()
        assert (status, body) == expected("/filter") and direct(fields)
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
def test_a_malformed_body_gets_a_400_and_the_connection_goes_on(server: Server, path: str) -> None:
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        conn.sendall(call(path, b'{"Pod": {'))
        status, fields, body = reader.response()
        assert (status, body) == expected(path, b'{"Pod": {') and direct(fields)
        assert status == 400 and b"not valid JSON" in body
        conn.sendall(call(path))
        status, fields, body = reader.response()
        assert (status, body) == expected(path) and direct(fields)
    finally:
        conn.close()


def _count(server: Server, endpoint: str) -> float:
    conn = server.tls_connection()
    try:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        _, _, text = Reader(conn).response()
    finally:
        conn.close()
    key = f'spotshift_http_requests_total{{code="200",endpoint="{endpoint}"}}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines() if line.startswith(key))


def test_direct_answers_are_counted_in_the_metrics(server: Server) -> None:
    before = _count(server, "filter")
    conn = server.tls_connection()
    try:
        reader = Reader(conn)
        conn.sendall(call("/filter") * 3)
        assert all(direct(fields) for _, fields, _ in (reader.response() for _ in range(3)))
    finally:
        conn.close()
    assert _count(server, "filter") == before + 3


def test_without_tls_the_same(tmp_path_factory: pytest.TempPathFactory) -> None:
    plain = start_server(tmp_path_factory.mktemp("plain"), tls=False, threads=1)
    try:
        with socket.create_connection((plain.host, plain.port), timeout=10) as conn:
            reader = Reader(conn)  # type: ignore[arg-type]
            conn.sendall(call("/filter") + call("/prioritize"))
            answers = [reader.response() for _ in range(2)]
            assert [(s, b) for s, _, b in answers] == [expected("/filter"), expected("/prioritize")]
            assert all(direct(fields) for _, fields, _ in answers)
    finally:
        stop_server(plain)
