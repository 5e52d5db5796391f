"""extender/framing.py: where a request ends, found incrementally, and what the worker refuses itself."""

from __future__ import annotations

import io

import pytest

from extender.framing import COMPLETE, MAX_CHUNKS, PARTIAL, Framing, UnreadableRequest


def head(path: str = "/mutate", *, length: int | None = None, chunked: bool = False) -> bytes:
    framing = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {length}\r\n"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{framing}\r\n".encode()


def feed(pieces: list[bytes], limit: int = 1000) -> list[str]:
    """The state after each piece arrives, as the worker sees it (one Framing for the whole request)."""
    framing, buf, states = Framing(), io.BytesIO(), []
    for piece in pieces:
        buf.seek(0, io.SEEK_END)
        buf.write(piece)
        states.append(framing.scan(buf, buf.tell(), lambda _path: limit))
    return states


def test_a_content_length_request_is_complete_when_its_body_is_all_there() -> None:
    assert feed([head(length=4)[:10], head(length=4)[10:] + b"ab", b"cd"]) == [PARTIAL, PARTIAL, COMPLETE]


def test_a_body_over_the_limit_is_complete_at_once_for_the_app_to_refuse_unread() -> None:
    assert feed([head(length=10_000)], limit=1000) == [COMPLETE]


def test_a_chunked_body_is_followed_chunk_by_chunk_byte_by_byte() -> None:
    body = head(chunked=True) + b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
    states = feed([body[i : i + 1] for i in range(len(body))])
    assert states[-1] == COMPLETE and set(states[:-1]) == {PARTIAL}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param(b"zz\r\n{}\r\n0\r\n\r\n", 400, id="size-not-hex"),
        pytest.param(b"2\r\n{}XX", 400, id="chunk-not-followed-by-crlf"),
        pytest.param(b"\r\n", 400, id="empty-size"),
        pytest.param(b"1" * 2000, 400, id="size-line-too-long"),
        pytest.param(b"ffffffffff\r\n", 413, id="over-the-limit-before-the-data-arrives"),
        pytest.param(b"1\r\nx\r\n" * (MAX_CHUNKS + 1), 400, id="too-many-chunks"),
    ],
)
def test_chunking_the_app_cannot_read_is_refused_by_the_worker(body: bytes, status: int) -> None:
    with pytest.raises(UnreadableRequest) as refused:
        feed([head(chunked=True) + body], limit=10**9)
    assert refused.value.status == status
    assert refused.value.response().startswith(b"HTTP/1.1 %d " % status)
    assert b"Connection: close" in refused.value.response()


def test_a_head_over_64_kib_is_refused() -> None:
    with pytest.raises(UnreadableRequest) as refused:
        feed([b"POST /mutate HTTP/1.1\r\nX: " + b"a" * 70_000])
    assert refused.value.status == 431
