"""kube-scheduler's ``/filter`` and ``/prioritize`` calls answered straight from a connection's buffered bytes.

The scheduler makes one filter and one prioritize call per pod, each waited for in turn, so their latency sets how
many pods it binds per second. Through gunicorn and WSGI a call costs a request object, an environ, a response
object and several socket writes before the service (:mod:`extender.service`) is even asked. The poller worker
(:mod:`extender.worker`) gives the bytes of a complete request to :func:`answer` first, with the app's
:class:`DirectDoor`: it reads exactly the form Go's client sends and builds the whole response, which the worker
then sends in one piece.

Only this form is read here::

    POST /filter HTTP/1.1            (or /prioritize; no query string)
    Host: ...                        (each header at most once; names from _HEADERS only)
    User-Agent: ...
    Content-Length: <digits>         (required, at least 1, within the path's body limit)
    Content-Type: application/json   (optional; a parameter such as charset allowed)
    Accept-Encoding: gzip            (optional, as is Accept; the answer is never compressed)
    Connection: keep-alive | close   (optional)

Anything else (another method, path or version, chunked or ``Expect``, another header, a header repeated,
folded or holding bytes outside printable ASCII, a body that is not all there) gives None and the request goes
through gunicorn and Flask unchanged. So does every call the door does not answer with a decided 200 (a Nodes
call, bad JSON, cache not synced, too late, an internal error): its answer is decided here, once, and left in
the :class:`~extender.service.Handoff` for Flask to send with gunicorn's headers.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable

from extender.errors import ExtenderError
from extender.service import Handoff, Service, decode_extender_args, error_answer

__all__ = ["MAX_HEAD", "DirectRequest", "DirectDoor", "parse", "http_response", "answer"]

# A scheduler call's head is ~150 bytes; a longer one is not the form read here.
MAX_HEAD = 4096
_MAX_HEADERS = 16

_PATHS = {b"POST /filter HTTP/1.1": "/filter", b"POST /prioritize HTTP/1.1": "/prioritize"}
_HEADERS = frozenset(
    {b"host", b"user-agent", b"content-length", b"content-type", b"accept", b"accept-encoding", b"connection"}
)
# name ":" optional whitespace, value of visible ASCII with inner spaces, optional whitespace (RFC 9110 5.5)
_FIELD = re.compile(rb"([A-Za-z][A-Za-z0-9-]*):[ \t]*((?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?)[ \t]*")
_DIGITS = re.compile(rb"[0-9]{1,10}")
_JSON = re.compile(rb"application/json(?:[ \t]*;[\x20-\x7e]*)?", re.IGNORECASE)


class DirectRequest:
    """A scheduler call read from a connection's buffer: its path, body, whether the client asked to close,
    and where in the buffer the request ends."""

    __slots__ = ("path", "body", "close", "end")

    def __init__(self, path: str, body: bytes, close: bool, end: int) -> None:
        self.path, self.body, self.close, self.end = path, body, close, end


def parse(data: bytes, body_limit: Callable[[str], int] | None = None) -> DirectRequest | None:
    """The request at the start of ``data`` if it is exactly the form this module reads, else None."""
    head_end = data.find(b"\r\n\r\n", 0, MAX_HEAD)
    if head_end < 0:
        return None
    lines = data[:head_end].split(b"\r\n")
    path = _PATHS.get(lines[0])
    if path is None or len(lines) > _MAX_HEADERS + 1:
        return None
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        match = _FIELD.fullmatch(line)
        if match is None:
            return None
        name = match[1].lower()
        if name not in _HEADERS or name in fields:
            return None
        fields[name] = match[2]
    length_field = fields.get(b"content-length")
    if length_field is None or _DIGITS.fullmatch(length_field) is None:
        return None
    length = int(length_field)
    if length == 0 or (body_limit is not None and length > body_limit(path)):
        return None
    content_type = fields.get(b"content-type")
    if content_type is not None and _JSON.fullmatch(content_type) is None:
        return None
    connection = fields.get(b"connection", b"keep-alive").lower()
    if connection not in (b"keep-alive", b"close"):
        return None
    start = head_end + 4
    end = start + length
    if len(data) < end:
        return None
    return DirectRequest(path, data[start:end], connection == b"close", end)


_date_second = -1
_date = b""


def _http_date() -> bytes:
    """The ``Date`` header's value, formatted once a second."""
    global _date_second, _date
    now = time.time()
    if int(now) != _date_second:
        _date_second = int(now)
        _date = email.utils.formatdate(_date_second, usegmt=True).encode()
    return _date


def http_response(body: bytes, keep_alive: bool) -> bytes:
    """The whole HTTP/1.1 200 response carrying the JSON ``body``; ``Connection: close`` unless ``keep_alive``."""
    return b"HTTP/1.1 200 OK\r\nDate: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b" % (
        _http_date(),
        len(body),
        b"" if keep_alive else b"Connection: close\r\n",
        body,
    )


def answer(
    data: bytes,
    decide: Callable[[str, bytes, float | None], bytes | None],
    arrived: float | None,
    may_keep_alive: bool,
    body_limit: Callable[[str], int] | None = None,
) -> tuple[bytes, int, bool] | None:
    """``(response, end of the request in data, keep the connection)`` for a scheduler call at the start of
    ``data`` that ``decide(path, body, arrived)`` answers with a 200 body; None to leave the request to gunicorn.

    The connection is kept unless the client asked to close or ``may_keep_alive`` (the worker's own say: stopping,
    keep-alive off, too many kept-alive connections) is false.
    """
    request = parse(data, body_limit)
    if request is None:
        return None
    try:
        body = decide(request.path, request.body, arrived)
    except Exception:  # the app's own path logs it and answers for itself
        return None
    if body is None:
        return None
    keep_alive = may_keep_alive and not request.close
    return http_response(body, keep_alive), request.end, keep_alive


_ENDPOINTS = {"/filter": "filter", "/prioritize": "prioritize"}


class DirectDoor:
    """The service's door for the scheduler's calls read by :func:`answer`: the body of a decided 200 answer to
    a NodeNames call, counted; None for anything else, whose answer is left in ``handoff`` for Flask to send."""

    __slots__ = ("service", "handoff", "max_nodes")

    def __init__(self, service: Service, handoff: Handoff, max_nodes: int) -> None:
        self.service, self.handoff, self.max_nodes = service, handoff, max_nodes

    def decide(self, path: str, body: bytes, arrived: float | None) -> bytes | None:
        started = time.perf_counter()
        endpoint = _ENDPOINTS[path]
        decide = self.service.filter if endpoint == "filter" else self.service.prioritize
        try:
            args = decode_extender_args(body, self.max_nodes)
            answer = decide(args, arrived)
        except ExtenderError as e:
            self.handoff.put(path, body, error_answer(e))
            return None
        if args.names is None or answer.status != 200 or not answer.decided:
            self.handoff.put(path, body, answer)
            return None
        self.service.count(endpoint, 200, started)
        return answer.body
