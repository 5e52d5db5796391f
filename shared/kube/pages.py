"""One list of the API, page by page (``limit``/``continue``): the pages' parts, the pager, and the view of a
collection both the informer (:mod:`shared.kube.informer`) and a list in shards (:mod:`shared.kube.shards`) read."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import orjson

from shared.kube.api import LineStream

__all__ = [
    "ListWatch",
    "Page",
    "Query",
    "WatchEvent",
    "list_pages",
    "json_page",
    "json_event",
    "continue_token",
    "page_head",
    "is_gone",
]

T = TypeVar("T")
Query = Sequence[tuple[str, Any]]


class ListWatch(Protocol):
    """One collection of the API. Query parameters use the API's own names (``limit``, ``resourceVersion``)."""

    def list(self, query: Query) -> bytes:
        """One page of the list: the raw response body."""
        ...

    def watch(self, query: Query, timeout: float) -> LineStream:
        """A watch: one JSON event per line."""
        ...


def is_gone(e: BaseException) -> bool:
    """Whether ``e`` is the API's ``410 Gone``: a resourceVersion or continue token too old to use."""
    return getattr(e, "status", None) == 410


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One decoded page of a list: its items (in the decoder's form), ``continue`` token and version."""

    items: T
    continue_token: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch, decoded: its type, its object in the decoder's form (an ``ERROR``'s Status always
    as the API dict) and the object's resourceVersion (``""`` if none)."""

    type: str
    obj: Any
    resource_version: str


def json_page(body: bytes) -> Page[list[dict[str, Any]]]:
    """A list page decoded with orjson into API dicts."""
    doc = orjson.loads(body)
    meta = doc.get("metadata") or {}
    return Page(doc.get("items") or [], meta.get("continue") or "", meta.get("resourceVersion") or "")


def json_event(line: bytes) -> WatchEvent:
    """A watch line decoded with orjson, its object an API dict."""
    event = orjson.loads(line)
    obj = event.get("object") or {}
    return WatchEvent(event.get("type") or "", obj, (obj.get("metadata") or {}).get("resourceVersion") or "")


class _ListMeta(msgspec.Struct):
    continue_: str | None = msgspec.field(default=None, name="continue")
    resourceVersion: str | None = None


class _ListHead(msgspec.Struct):
    metadata: _ListMeta | None = None


_LIST_HEAD = msgspec.json.Decoder(_ListHead)


def continue_token(body: bytes) -> str:
    """The ``continue`` token of a list page, read without building its items (a fraction of decoding them)."""
    meta = _LIST_HEAD.decode(body).metadata
    return (meta.continue_ or "") if meta is not None else ""


def page_head(body: bytes) -> tuple[str, str]:
    """The ``continue`` token and ``resourceVersion`` of a list page, its items left unread."""
    meta = _LIST_HEAD.decode(body).metadata
    return ((meta.continue_ or ""), (meta.resourceVersion or "")) if meta is not None else ("", "")


def list_pages(
    fetch: Callable[[Query], bytes],
    decode: Callable[[bytes], Page[T]],
    *,
    page_size: int,
    query: Query = (),
    ahead: bool = False,
    start: Query = (),
) -> Iterator[Page[T]]:
    """The pages of one list, following ``continue`` tokens; ``query`` (selectors) goes with every request,
    ``start`` with the first only (``resourceVersion``: the API server refuses it beside a ``continue`` token,
    which carries the version of the list's first page).

    A page is fetched only when the previous one has been consumed, so a caller that converts each page
    before asking for the next never holds more than one raw page. With ``ahead``, the next page is fetched
    in a second thread while ``decode`` reads this one (its token read first, :func:`continue_token`): the
    caller holds at most two raw pages, and waits for the API server only where it is slower than the decoding.
    An error of the page fetched ahead is raised when that page is due.
    """

    def request(token: str) -> bytes:
        q: list[tuple[str, Any]] = [("limit", page_size), *query]
        if token:
            q.append(("continue", token))
        else:
            q.extend(start)
        return fetch(q)

    if not ahead:
        token = ""
        while True:
            page = decode(request(token))
            yield page
            token = page.continue_token
            if not token:
                return
    body = request("")
    while True:
        token = continue_token(body)
        following = _in_background(request, token) if token else None
        yield decode(body)
        if following is None:
            return
        body = following.result()


def _in_background(call: Callable[[str], bytes], arg: str) -> Future[bytes]:
    """``call(arg)`` in a daemon thread: a list abandoned (its informer closed) leaves a fetch under way to end on
    its own, and never holds up the process's exit as a pool's worker would."""
    future: Future[bytes] = Future()

    def run() -> None:
        try:
            future.set_result(call(arg))
        except BaseException as e:  # handed to the reader of the page, whatever it is
            future.set_exception(e)

    threading.Thread(target=run, name="list-ahead", daemon=True).start()
    return future
