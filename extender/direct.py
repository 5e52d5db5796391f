"""The extender's door for kube-scheduler's ``/filter`` and ``/prioritize``: every such call is answered here.

The scheduler makes one filter and one prioritize call per pod, each waited for in turn, so their latency sets how
many pods it binds per second. The poller worker (:mod:`extender.worker`) never hands these calls to gunicorn's
WSGI handling or to Flask (:mod:`extender.app` serves ``/mutate`` and the probes only). It gives the door the
request in one of two forms:

* the bytes of a complete request, to :func:`answer`, which reads exactly the form Go's client sends::

    POST /filter HTTP/1.1            (or /prioritize; no query string)
    Host: ...                        (each header at most once; names from _HEADERS only)
    User-Agent: ...
    Content-Length: <digits>         (required, at least 1, within the path's body limit)
    Content-Type: application/json   (optional; a parameter such as charset allowed)
    Accept-Encoding: gzip            (optional, as is Accept; the answer is never compressed)
    Connection: keep-alive | close   (optional)

  Anything else (another method or version, a query string, chunked or ``Expect``, another header, a header
  repeated, folded or holding bytes outside printable ASCII, a body that is not all there) gives None;
* any other form, parsed by gunicorn's parser, to :meth:`DirectDoor.respond`: its method, length and body
  reader. A method other than POST is answered 405 (OPTIONS: 200 with ``Allow``), a body over the path's limit
  413, a body that cannot be read 400 (408 when it stopped arriving), all with ``Connection: close``.

Either way :meth:`DirectDoor.decide` decodes the body once, asks the service and counts the answer: the decided
one, a 400 naming what is wrong, or the no-opinion answer (not synced, too late, an internal error, counted in
``spotshift_internal_errors_total``). :func:`http_response` builds the whole response, which the worker sends in
one piece. The hops of a call are listed in :mod:`extender.worker`.
"""

from __future__ import annotations

import email.utils
import logging
import re
import time
from collections.abc import Callable
from http import HTTPStatus

import orjson

from extender.errors import ExtenderError, InvalidRequest, PayloadTooLarge, RequestTimeout
from extender.service import Answer, Service, decode_extender_args, error_answer

__all__ = ["MAX_HEAD", "PATHS", "DirectRequest", "DirectDoor", "parse", "http_response", "answer", "read_body"]

log = logging.getLogger(__name__)

# A scheduler call's head is ~150 bytes; a longer one is not the form read here.
MAX_HEAD = 4096
_MAX_HEADERS = 16

PATHS = {"/filter": "filter", "/prioritize": "prioritize"}
"""The paths this door answers, whatever the request's form, and their endpoint label."""
_GO_FORM = {b"POST /filter HTTP/1.1": "/filter", b"POST /prioritize HTTP/1.1": "/prioritize"}
_HEADERS = frozenset(
    {b"host", b"user-agent", b"content-length", b"content-type", b"accept", b"accept-encoding", b"connection"}
)
# name ":" optional whitespace, value of visible ASCII with inner spaces, optional whitespace (RFC 9110 5.5)
_FIELD = re.compile(rb"([A-Za-z][A-Za-z0-9-]*):[ \t]*((?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?)[ \t]*")
_DIGITS = re.compile(rb"[0-9]{1,10}")
_JSON = re.compile(rb"application/json(?:[ \t]*;[\x20-\x7e]*)?", re.IGNORECASE)
_NOT_ALLOWED = "The method is not allowed for the requested URL."


class DirectRequest:
    """A scheduler call read from a connection's buffer: its path, body, whether the client asked to close,
    and where in the buffer the request ends."""

    __slots__ = ("path", "body", "close", "end")

    def __init__(self, path: str, body: bytes, close: bool, end: int) -> None:
        self.path, self.body, self.close, self.end = path, body, close, end


def parse(data: bytes, body_limit: Callable[[str], int] | None = None) -> DirectRequest | None:
    """The request at the start of ``data`` if it is exactly the form Go's client sends, else None."""
    head_end = data.find(b"\r\n\r\n", 0, MAX_HEAD)
    if head_end < 0:
        return None
    lines = data[:head_end].split(b"\r\n")
    path = _GO_FORM.get(lines[0])
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


_STATUS_LINES = {s.value: b"HTTP/1.1 %d %b\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}


def http_response(
    body: bytes, keep_alive: bool, status: int = 200, *, extra: bytes = b"", content_type: bytes = b"application/json"
) -> bytes:
    """The whole HTTP/1.1 response carrying ``body``; ``Connection: close`` unless ``keep_alive``; ``extra``
    holds further CRLF-terminated header lines."""
    return b"%bDate: %b\r\nContent-Type: %b\r\nContent-Length: %d\r\n%b%b\r\n%b" % (
        _STATUS_LINES[status],
        _http_date(),
        content_type,
        len(body),
        extra,
        b"" if keep_alive else b"Connection: close\r\n",
        body,
    )


def answer(
    data: bytes,
    decide: Callable[[str, bytes, float | None], Answer],
    arrived: float | None,
    may_keep_alive: bool,
    body_limit: Callable[[str], int] | None = None,
) -> tuple[bytes, int, bool] | None:
    """``(response, end of the request in data, keep the connection)`` for a scheduler call at the start of
    ``data`` in Go's form, answered by ``decide(path, body, arrived)``; None when the bytes are not that form.

    The connection is kept unless the client asked to close or ``may_keep_alive`` (the worker's own say: stopping,
    keep-alive off, too many kept-alive connections) is false.
    """
    request = parse(data, body_limit)
    if request is None:
        return None
    decided = decide(request.path, request.body, arrived)
    keep_alive = may_keep_alive and not request.close
    return http_response(decided.body, keep_alive, decided.status), request.end, keep_alive


class DirectDoor:
    """The service's door for the scheduler's calls: every answer to ``/filter`` and ``/prioritize``, counted."""

    __slots__ = ("service", "max_nodes", "body_limit")

    def __init__(self, service: Service, max_nodes: int, body_limit: Callable[[str], int]) -> None:
        self.service, self.max_nodes, self.body_limit = service, max_nodes, body_limit

    def decide(self, path: str, body: bytes, arrived: float | None) -> Answer:
        """The answer to the call's ``body``, counted by endpoint and status: the service's, a 400 saying what is
        wrong with the body, or (a bug of ours before the service decided) the counted no-opinion answer."""
        started = time.perf_counter()
        endpoint = PATHS[path]
        decide = self.service.filter if endpoint == "filter" else self.service.prioritize
        try:
            decided = decide(decode_extender_args(body, self.max_nodes), arrived)
        except ExtenderError as e:
            decided = error_answer(e)
        except Exception:
            log.exception("%s: internal error before the request was decided", path)
            decided = self.service.internal_error(endpoint)
        self.service.count(endpoint, decided.status, started)
        return decided

    def respond(
        self,
        method: str,
        path: str,
        length: int | None,
        read: Callable[[int], bytes],
        arrived: float | None,
        may_keep_alive: bool,
    ) -> tuple[bytes, bool]:
        """``(response, keep the connection)`` for a scheduler call in any form: its ``method``, its
        ``Content-Length`` (None: chunked or absent) and ``read(n)``, which reads its buffered body."""
        started = time.perf_counter()
        if method != "POST":
            # The body (if any) is left unread: the connection closes rather than drain it.
            keep_alive = may_keep_alive and not length
            if method == "OPTIONS":
                self.service.count(PATHS[path], 200, started)
                extra = b"Allow: OPTIONS, POST\r\n"
                return http_response(b"", keep_alive, extra=extra, content_type=b"text/html; charset=utf-8"), keep_alive
            self.service.count("unknown", 405, started)
            refused = orjson.dumps({"error": _NOT_ALLOWED, "status": 405})
            response = http_response(refused, keep_alive, 405)
            return (response[: -len(refused)] if method == "HEAD" else response), keep_alive
        try:
            body = read_body(length, read, self.body_limit(path))
        except ExtenderError as e:
            refused_answer = error_answer(e)
            self.service.count(PATHS[path], refused_answer.status, started)
            return http_response(refused_answer.body, False, refused_answer.status), False
        decided = self.decide(path, body, arrived)
        return http_response(decided.body, may_keep_alive, decided.status), may_keep_alive


def read_body(length: int | None, read: Callable[[int], bytes], limit: int) -> bytes:
    """The request body of ``Content-Length`` ``length`` (None: chunked or absent) read by ``read(n)``, at most
    ``limit`` bytes: past the limit it is refused (413) unread, a body that stopped arriving is a 408, one that
    cannot be read or ended short a 400. Both doors read bodies here."""
    if length is not None and length > limit:
        raise PayloadTooLarge(f"request body of {length} bytes is over the limit of {limit} bytes")
    try:
        data = read(limit + 1)
    except TimeoutError:
        raise RequestTimeout("the request body stopped arriving before it was complete") from None
    except Exception as e:  # a malformed chunked body, a client gone mid-body: the stream cannot go on
        raise InvalidRequest(f"the request body could not be read: {type(e).__name__}") from None
    if len(data) > limit:
        raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    if length is not None and len(data) < length:
        raise InvalidRequest(f"the request body ended after {len(data)} of its {length} bytes")
    return data
