"""Where an HTTP/1.1 request ends, found from its bytes as they arrive: the poller worker's read-ahead.

:class:`Framing` reads the head once (path, ``Content-Length`` or ``Transfer-Encoding: chunked``) and then
walks chunk-size lines only as far as bytes have arrived, so a body trickling in costs work in proportion
to its new bytes. What it cannot frame is left to gunicorn's parser (a malformed head is answered with 400
from the buffered bytes); what must not reach the app is an :class:`UnreadableRequest`: a head over 64 KiB, malformed
chunking, a chunked body over the path's limit or in more than :data:`MAX_CHUNKS` chunks.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

__all__ = ["COMPLETE", "PARTIAL", "DEFAULT_BODY_LIMIT", "MAX_CHUNKS", "UnreadableRequest", "Framing"]

# Used when the application does not say (``ExtenderApp.body_limit``): the extender's largest body.
DEFAULT_BODY_LIMIT = 32 * 1024 * 1024
MAX_CHUNKS = 65536  # chunks per chunked body (Go's writer sends 4 KiB or larger ones)

COMPLETE, PARTIAL = "complete", "partial"
_HEAD_LIMIT = 64 * 1024  # gunicorn refuses larger request heads anyway
_HEX = b"0123456789abcdefABCDEF"


class UnreadableRequest(Exception):
    """A request the worker answers itself, without the app, and then closes: its body cannot be read."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message

    def response(self) -> bytes:
        body = b'{"error":%b,"status":%d}' % (json.dumps(self.message).encode(), self.status)
        return (
            b"HTTP/1.1 %d %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
            % (self.status, self.reason.encode(), len(body), body)
        )


class Framing:
    """Where the request at the start of a connection's buffer ends, found incrementally as bytes arrive.

    Handles ``Content-Length`` and chunked bodies; anything it cannot frame (a malformed head) is reported
    complete, so gunicorn's parser answers it with 400 from what is buffered.
    """

    __slots__ = ("end", "chunked", "pos", "need", "decoded", "chunks", "trailers", "limit")

    def __init__(self) -> None:
        self.end = -1  # where the request ends, once known
        self.chunked = False
        self.pos = 0  # chunked: the next chunk-size (or trailer) line starts here
        self.need = 0  # chunked: the current chunk's data and CRLF end here
        self.decoded = 0
        self.chunks = 0
        self.trailers = False
        self.limit = -1  # body limit of the request's path; -1 until the head is complete

    def scan(self, buf: io.BytesIO, size: int, body_limit: Callable[[str], int] | None) -> str:
        if self.limit < 0:
            with buf.getbuffer() as view:
                head = bytes(view[: _HEAD_LIMIT + 4])
            state = self._head(head, body_limit)
            if state is not None:
                return state
        if not self.chunked:
            return COMPLETE if size >= self.end else PARTIAL
        return self._chunks(buf, size)

    def _head(self, head: bytes, body_limit: Callable[[str], int] | None) -> str | None:
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > _HEAD_LIMIT:
                raise UnreadableRequest(431, "Request Header Fields Too Large", "the request head is over 64 KiB")
            return PARTIAL
        lines = head[:end].split(b"\r\n")
        target = lines[0].split(b" ")
        path = target[1].split(b"?", 1)[0].decode("latin-1") if len(target) > 1 else ""
        self.limit = body_limit(path) if body_limit is not None else DEFAULT_BODY_LIMIT
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self.chunked = True
            elif name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    return COMPLETE  # malformed: gunicorn's parser answers 400 from the head
        self.pos = end + 4
        if self.chunked:
            return None
        if length < 0 or length > self.limit:
            return COMPLETE  # the app refuses it from its head (413), without reading the body
        self.end = end + 4 + length
        return None

    def _chunks(self, buf: io.BytesIO, size: int) -> str:
        if self.end >= 0:
            return COMPLETE if size >= self.end else PARTIAL
        if self.need and size < self.need:
            return PARTIAL  # the current chunk's data is still arriving: nothing to scan
        with buf.getbuffer() as view:
            while True:
                if self.need:
                    if bytes(view[self.need - 2 : self.need]) != b"\r\n":
                        raise UnreadableRequest(
                            400, "Bad Request", "a chunk of the request body is not followed by CRLF"
                        )
                    self.pos, self.need = self.need, 0
                line_end = bytes(view[self.pos : self.pos + 1024]).find(b"\r\n")
                if line_end < 0:
                    if size - self.pos >= 1024:
                        raise UnreadableRequest(400, "Bad Request", "a chunk-size line of the request body is too long")
                    return PARTIAL
                line = bytes(view[self.pos : self.pos + line_end])
                after = self.pos + line_end + 2
                if self.trailers:
                    self.pos = after
                    if not line:
                        self.end = after
                        return COMPLETE if size >= self.end else PARTIAL
                    continue
                digits = line.split(b";", 1)[0].rstrip(b" \t")
                if not digits or len(digits) > 16 or digits.translate(None, _HEX):
                    raise UnreadableRequest(400, "Bad Request", "the request body has a malformed chunk size")
                chunk = int(digits, 16)
                if chunk == 0:
                    self.trailers, self.pos = True, after
                    continue
                self.decoded += chunk
                self.chunks += 1
                if self.decoded > self.limit:
                    raise UnreadableRequest(
                        413, "Content Too Large", f"request body is over the limit of {self.limit} bytes"
                    )
                if self.chunks > MAX_CHUNKS:
                    raise UnreadableRequest(400, "Bad Request", f"the request body has over {MAX_CHUNKS} chunks")
                self.need = after + chunk + 2
                if size < self.need:
                    return PARTIAL
