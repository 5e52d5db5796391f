"""List then watch one collection of the API, forever: the one informer of the extender and the rescheduler.

Why list+watch rather than listing every time: a 150,000-pod cluster is about a gigabyte of JSON, so a relist
per request (extender) or per housekeeping interval (rescheduler) would load the API server and the process
far more than the work itself. The protocol is client-go's reflector (``tools/cache/reflector.go``):

1. **List** with pagination (``limit``/``continue``, :func:`list_pages`); each page is decoded and its items
   handed to the handler's ``convert`` as the page arrives, so raw pages are not kept. The pages of one list
   come one after the other (each ``continue`` token is in the previous page), but the next page is fetched
   in a second thread while this one is decoded, so the API server's time and the decoding overlap. If the
   ``continue`` token expires mid-list (``410 Gone``), the list starts over. An informer given a ``split``
   lists a collection bigger than one page in shards instead, several at once, all at the version of its first
   page (:mod:`shared.kube.shards`): the pods of a big cluster.
2. **Watch** from the list's ``resourceVersion`` with ``allowWatchBookmarks``: ``ADDED``, ``MODIFIED`` and
   ``DELETED`` go to the handler's ``apply``, each line decoded by the informer's event decoder (orjson into
   an API dict unless the handler's owner gives a faster one); every event, bookmarks included, advances the
   version. A watch that ends normally (the server's ``timeoutSeconds``) is opened again from the last
   version.
3. ``410 Gone`` from the watch (an ``ERROR`` event or the HTTP status: the version was compacted away) means
   **list again**. Any other failure means wait (exponential backoff, doubling up to 30 s, reset by a good
   list or watch) and watch again from the last version seen, or list again if there was none yet.

The API is reached through a :class:`ListWatch` (one page of the list, or a stream of watch lines): in the
product a :class:`shared.kube.api.Collection` over the one transport, in unit tests a script. The objects go to
an :class:`EventHandler`, which each part builds over its own store. An exception with ``status == 410``
(:class:`shared.kube.api.Gone`) is what "Gone" means here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from shared.kube.api import LineStream
from shared.kube.pages import (
    ListWatch,
    Page,
    Query,
    WatchEvent,
    continue_token,
    is_gone,
    json_event,
    json_page,
    list_pages,
    page_head,
)
from shared.kube.shards import list_shards, no_shards

__all__ = [
    "ListWatch",
    "EventHandler",
    "Page",
    "WatchEvent",
    "Informer",
    "list_pages",
    "json_page",
    "json_event",
    "continue_token",
    "page_head",
    "is_gone",
]

log = logging.getLogger("spotshift.informer")

T = TypeVar("T")

MAX_BACKOFF = 30.0


class EventHandler(Protocol[T]):
    """Where the informer puts what it read. Called from the informer's thread only, but ``convert``: from the
    threads of a list fetched in shards too (:mod:`shared.kube.shards`), several at once."""

    def convert(self, obj: dict[str, Any]) -> T:
        """A listed object, as its page arrives (keep only what is needed: the raw page is dropped)."""
        ...

    def replace(self, items: list[T]) -> None:
        """The complete content of the collection, after a (re)list."""
        ...

    def apply(self, event_type: str, obj: Any) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``; ``obj`` in the form of the informer's event
        decoder (the API dict of :func:`json_event` unless it was given another)."""
        ...


class _WatchError(Exception):
    """An ``ERROR`` event in a watch; ``status`` is its code (410: list again)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Informer(threading.Thread, Generic[T]):
    """List then watch one collection into ``handler`` until :meth:`close` (see the module docstring).

    ``query`` holds extra parameters for both list and watch (``fieldSelector``). ``lists`` and ``events``
    count complete lists and applied events; ``synced`` is set after the first complete list.
    """

    def __init__(
        self,
        name: str,
        source: ListWatch,
        handler: EventHandler[T],
        *,
        stop: threading.Event | None = None,
        query: Query = (),
        page_size: int = 500,
        watch_timeout: float = 300.0,
        backoff: float = 1.0,
        decode_page: Callable[[bytes], Page[list[T]]] | None = None,
        decode_event: Callable[[bytes], WatchEvent] = json_event,
        split: Callable[[str], Sequence[ListWatch]] | None = None,
        shard_decoder: Callable[[], Callable[[bytes], Page[list[T]]]] | None = None,
        list_workers: int = 4,
    ) -> None:
        super().__init__(name=f"informer-{name}", daemon=True)
        self.decode_page = decode_page
        """Reads a list page straight into the handler's form (a faster decoder than ``json_page`` and
        ``convert`` per object), if the handler has one."""
        self.split = split
        """Names the shards of the collection at a resourceVersion: a collection bigger than one page is then
        listed in shards, ``list_workers`` at once (:mod:`shared.kube.shards`)."""
        self.shard_decoder = shard_decoder
        """Makes the page decoder of one shard (``decode_page`` keeps state across one list's pages)."""
        self.list_workers = list_workers
        self.decode_event = decode_event
        """Reads a watch line; its objects go to the handler's ``apply`` as it gives them."""
        self.kind_name = name
        self.source = source
        self.handler = handler
        self.stop_event = stop if stop is not None else threading.Event()
        self.query = tuple(query)
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.synced = threading.Event()
        self.lists = 0
        """How many times the collection was listed completely (1 + relists)."""
        self.events = 0
        """How many watch events were applied."""
        self.shards = 0
        """How many shards the last list was fetched in (0: one list, page after page)."""
        self.version: str | None = None
        """The last resourceVersion seen (``None``: list first)."""
        self._stream: LineStream | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop, and break the open watch so the thread ends promptly."""
        self.stop_event.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # closing a half-read stream may raise; we are leaving anyway
                stream.close()

    def run(self) -> None:
        failures = 0
        while not self.stop_event.is_set():
            try:
                if self.version is None:
                    self.version = self._list()
                self._watch()
                failures = 0
            except Exception as e:
                if self.stop_event.is_set():
                    return
                if is_gone(e) and self.version is not None:
                    log.info("watch of %s expired (410 Gone): listing again", self.kind_name)
                    self.version = None
                    continue
                failures += 1
                delay = min(MAX_BACKOFF, self.backoff * 2 ** min(failures - 1, 5))
                log.warning(
                    "%s of %s failed: %s; retrying in %.1fs",
                    "list" if self.version is None else "watch",
                    self.kind_name,
                    e,
                    delay,
                    extra={"fields": {"kind": self.kind_name}},
                )
                self.stop_event.wait(delay)

    def _pages(self) -> Iterator[Page[list[T]]]:
        """The pages of one list, in the handler's form."""
        fetch, size, query = self.source.list, self.page_size, self.query
        if self.decode_page is not None:
            yield from list_pages(fetch, self.decode_page, page_size=size, query=query, ahead=True)
            return
        convert = self.handler.convert
        for raw in list_pages(fetch, json_page, page_size=size, query=query, ahead=True):
            yield Page([convert(obj) for obj in raw.items], raw.continue_token, raw.resource_version)

    def _list(self) -> str:
        items, version = self._list_plain() if self.split is None else self._list_split(self.split)
        self.handler.replace(items)
        self.lists += 1
        self.synced.set()
        log.info(
            "listed %d %s",
            len(items),
            self.kind_name,
            extra={
                "fields": {
                    "kind": self.kind_name,
                    "count": len(items),
                    "resourceVersion": version,
                    "shards": self.shards,
                }
            },
        )
        return version

    def _list_plain(self) -> tuple[list[T], str]:
        self.shards = 0
        while True:
            items: list[T] = []
            version = ""
            try:
                for page in self._pages():
                    items.extend(page.items)
                    version = page.resource_version
            except Exception as e:
                if is_gone(e) and items:
                    continue  # the continue token expired mid-list: start over, as client-go does
                raise
            return items, version

    def _decode(self, body: bytes) -> Page[list[T]]:
        if self.decode_page is not None:
            return self.decode_page(body)
        raw = json_page(body)
        convert = self.handler.convert
        return Page([convert(obj) for obj in raw.items], raw.continue_token, raw.resource_version)

    def _list_split(self, split: Callable[[str], Sequence[ListWatch]]) -> tuple[list[T], str]:
        """The first page of the collection; if there are more, the rest in shards at its version
        (:mod:`shared.kube.shards`), or page after page where the server cannot serve the shards."""

        first = self.source.list([("limit", self.page_size), *self.query])
        token, version = page_head(first)
        if not token:
            self.shards = 0
            page = self._decode(first)
            return page.items, page.resource_version
        del first
        if not version:  # nothing to list the shards at: a server that gives lists no version
            return self._list_plain()
        try:
            shards = split(version)
            decoder = self.shard_decoder or (lambda: self._decode)
            items = list_shards(
                shards,
                version,
                decoder,
                page_size=self.page_size,
                query=self.query,
                workers=self.list_workers,
                stop=self.stop_event,
            )
        except Exception as e:
            if not no_shards(e):
                raise
            log.warning(
                "cannot list %s in shards at resourceVersion %s (%s): listing them page after page",
                self.kind_name,
                version,
                e,
                extra={"fields": {"kind": self.kind_name, "resourceVersion": version}},
            )
            return self._list_plain()
        self.shards = len(shards)
        return items, version

    def _watch(self) -> None:
        """Watch from :attr:`version` until the stream ends, advancing it with every event (even if one fails)."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.version or ""),
            ("timeoutSeconds", int(self.watch_timeout)),
            *self.query,
        ]
        stream = self.source.watch(query, self.watch_timeout + 30)
        with self._lock:
            self._stream = stream
        if self.stop_event.is_set():  # closed while the watch was being opened
            stream.close()
        decode = self.decode_event
        try:
            for line in stream:
                if self.stop_event.is_set():
                    break
                event = decode(line)
                if event.type == "ERROR":
                    obj, code = event.obj, event.obj.get("code") or 0
                    raise _WatchError(str(obj.get("message") or obj), int(code) if isinstance(code, int) else 0)
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    self.handler.apply(event.type, event.obj)
                    self.events += 1
                if event.resource_version:
                    self.version = event.resource_version
        finally:
            with self._lock:
                self._stream = None
            with contextlib.suppress(Exception):
                stream.close()
