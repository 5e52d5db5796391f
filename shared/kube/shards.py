"""One consistent list of a big collection, fetched in shards at once: the start-up list of 150,000 pods.

A list follows its ``continue`` tokens one page after the other, each token in the page before it, so one list
is as fast as the API server serves one page at a time. The same collection at the same resourceVersion, split
into parts the server lists separately (the pods of each namespace), can be fetched by several requests at once
and still be one consistent cut of the cluster:

1. The first page of the whole collection, asked as a plain list asks it (the newest data), gives the list's
   resourceVersion ``R``. A collection that fits in that page is listed: nothing is split.
2. ``split(R)`` names the shards: :class:`~shared.kube.informer.ListWatch` es of parts of the collection that
   together hold every object once. :func:`namespaced` lists the namespaces at exactly ``R``: a namespace goes
   only once its objects are gone, so those are all the namespaces any object at ``R`` is in.
3. Each shard is listed page by page, its first request with ``resourceVersion=R&resourceVersionMatch=Exact``
   (its ``continue`` tokens carry ``R``), by at most ``workers`` threads at once. A worker decodes each page as it
   arrives, with a decoder of the shard's own, so no more than ``workers`` raw pages are held at any time. A page
   whose resourceVersion is not ``R`` (a server that answered with newer data) fails the shards.
4. The shards' items are joined in the order of their keys in storage (``namespace/name``): the items of the
   one list, in its order. The watch that follows starts from ``R`` and so brings every change after the cut.

Which server answers an exact list, and from what (``ShouldDelegateList`` in
``staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator/interface.go``, ``Cacher.ShouldDelegateExactRV`` in
``staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go``): from Kubernetes 1.34 (``ListFromCacheSnapshot``,
beta and on by default) the watch cache serves it from the snapshot it keeps of ``R``, and etcd when it holds none;
before 1.34, etcd always. etcd serves ``R`` until the API server compacts it away (every 5 minutes by default,
``--etcd-compaction-interval``), and then answers 410 Gone; a server before 1.19 ignores
``resourceVersionMatch``, but a list with a ``limit`` and a resourceVersion other than ``0`` is exact there too
(the "legacy exact match" of the same function).

A shard refused with 410 Gone, 400 Bad Request or 422 Invalid (parameters the server does not take), 403 or 404,
or answered at another version, raises :class:`NoShards`: the
caller lists the collection the plain way, page after page, and says so. Any other failure of a shard stops the
others (each before its next page) and is raised as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from shared.kube.pages import ListWatch, Page, Query, list_pages

__all__ = ["NoShards", "exact", "list_shards", "namespaced", "Split", "no_shards"]

log = logging.getLogger("spotshift.informer")

T = TypeVar("T")

Split = Callable[[str], Sequence[ListWatch]]
"""The shards of a collection at a resourceVersion."""


class NoShards(Exception):
    """The server cannot serve the shards at the list's version (410 Gone, 400, or newer data)."""


def exact(version: str) -> Query:
    """The parameters of a list at exactly ``version``."""
    return (("resourceVersion", version), ("resourceVersionMatch", "Exact"))


_NOT_SERVED = (400, 403, 404, 410, 422)
"""Answers that say the shards cannot be had at all: bad parameters (400, 422), a part refused or not served (403,
404), the version compacted away (410 Gone). Any other is a failure like a plain list's."""


def no_shards(e: BaseException) -> bool:
    """Whether ``e`` says the shards cannot be had at the list's version (so the plain list is the way)."""
    return isinstance(e, NoShards) or getattr(e, "status", None) in _NOT_SERVED


class _Named(msgspec.Struct):
    name: str = ""


class _Item(msgspec.Struct):
    metadata: _Named | None = None


class _ListMeta(msgspec.Struct):
    continue_: str | None = msgspec.field(default=None, name="continue")
    resourceVersion: str | None = None


class _Names(msgspec.Struct):
    metadata: _ListMeta | None = None
    items: list[_Item] | None = None


_NAMES = msgspec.json.Decoder(_Names)


def _names_page(body: bytes) -> Page[list[str]]:
    doc = _NAMES.decode(body)
    meta = doc.metadata or _ListMeta()
    names = [i.metadata.name for i in doc.items or () if i.metadata is not None and i.metadata.name]
    return Page(names, meta.continue_ or "", meta.resourceVersion or "")


class _Source:
    """A namespaced collection's part in one namespace (list only: the watch is of the whole collection)."""

    def __init__(self, fetch: Callable[[str, Query], bytes], path: str) -> None:
        self.fetch = fetch
        self.path = path

    def list(self, query: Query) -> bytes:
        return self.fetch(self.path, query)

    def watch(self, query: Query, timeout: float) -> Any:
        raise NotImplementedError("a shard is listed, never watched")


def namespaced(fetch: Callable[[str, Query], bytes], resource: str, *, page_size: int = 500) -> Split:
    """Shards of a core namespaced collection (``pods``): one per namespace at the list's version, in the order
    of the keys in storage (``namespace/name``). ``fetch(path, query)`` is one GET's raw body."""

    def split(version: str) -> list[ListWatch]:
        names: list[str] = []
        pages = list_pages(
            lambda q: fetch("/api/v1/namespaces", q), _names_page, page_size=page_size, start=exact(version)
        )
        for page in pages:
            if not names and page.resource_version != version:
                raise NoShards(f"namespaces listed at {page.resource_version or '?'}, not at {version}")
            names.extend(page.items)
        names.sort(key=lambda n: n + "/")
        return [_Source(fetch, f"/api/v1/namespaces/{quote(n)}/{resource}") for n in names]

    return split


def list_shards(
    shards: Sequence[ListWatch],
    version: str,
    decoder: Callable[[], Callable[[bytes], Page[list[T]]]],
    *,
    page_size: int,
    query: Query = (),
    workers: int = 4,
    stop: threading.Event | None = None,
) -> list[T]:
    """The items of every shard at exactly ``version``, in the shards' order (see the module docstring).

    ``decoder()`` makes the page decoder of one shard. Raises :class:`NoShards` where the server cannot serve a
    shard at ``version``, the first other failure of a shard as it is, and :class:`InterruptedError` if ``stop``
    is set before every shard is listed."""
    if not shards:
        raise NoShards("the collection has no shards at this version")
    results: list[list[T]] = [[] for _ in shards]
    failures: list[BaseException] = []
    todo = list(range(len(shards)))
    todo.reverse()
    lock = threading.Lock()
    halt = stop if stop is not None else threading.Event()

    def failed(halt: threading.Event) -> bool:
        return bool(failures) or halt.is_set()

    def work() -> None:
        while True:
            with lock:
                if failures or halt.is_set() or not todo:
                    return
                i = todo.pop()
            try:
                results[i] = _list_one(shards[i], version, decoder(), page_size, query, lambda: failed(halt))
            except BaseException as e:  # handed to the caller, whatever it is
                with lock:
                    failures.append(e)
                return

    threads = [threading.Thread(target=work, name=f"list-shard-{n}", daemon=True) for n in range(workers)]
    for thread in threads[: max(1, min(workers, len(shards)))]:
        thread.start()
    for thread in threads:
        if thread.ident is not None:
            thread.join()
    real = [e for e in failures if not isinstance(e, _Abandoned)]
    if real:
        if no_shards(real[0]) and not isinstance(real[0], NoShards):
            raise NoShards(str(real[0])) from real[0]
        raise real[0]
    if failures or halt.is_set():
        raise InterruptedError("the list was stopped")
    return [item for part in results for item in part]


class _Abandoned(Exception):
    """Another shard failed: this one stops before its next page."""


def _list_one(
    shard: ListWatch,
    version: str,
    decode: Callable[[bytes], Page[list[T]]],
    page_size: int,
    query: Query,
    failed: Callable[[], bool],
) -> list[T]:
    items: list[T] = []
    first = True
    for page in list_pages(shard.list, decode, page_size=page_size, query=query, start=exact(version)):
        if first and page.resource_version != version:
            raise NoShards(f"a shard was listed at {page.resource_version or '?'}, not at {version}")
        first = False
        items.extend(page.items)
        if failed():
            raise _Abandoned()
    return items
