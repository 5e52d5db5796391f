"""Watch-backed in-memory caches of nodes and pods, so no request ever waits on the API server.

Each gunicorn worker runs one :class:`Reflector` thread per resource: list (paginated, raw JSON parsed with
orjson — the client's model classes cost ~50x more), then watch from the list's resourceVersion with
bookmarks, relisting on ``410 Gone`` or any error after a short backoff. Every object is reduced at once by
a caller-supplied function to the small immutable value the request path needs (a node's class and its
pre-serialised score fragments; a pod's workload and node), so the cache holds no raw JSON.

Readers see a plain ``dict`` that is only ever updated by single assignments or swapped whole on relist:
under the GIL a lookup never sees a half-applied change, and readers take no lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

import orjson

__all__ = ["Lister", "Store", "DictStore", "Reflector", "kube_lister", "wait_synced"]

log = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

Lister = Callable[..., Any]
"""``lister(**params)`` performs a GET of the collection and returns a urllib3 response (unread)."""


def _lines(resp: Any) -> Iterator[bytes]:
    buf = b""
    for chunk in resp.stream(65536, decode_content=True):
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i], buf[i + 1 :]
            if line:
                yield line
    if buf.strip():
        yield buf


class Store(Protocol[T_contra]):
    """Where a reflector puts what it reduced. Called from the reflector's thread only."""

    def replace_all(self, items: dict[str, T_contra]) -> None: ...

    def put(self, key: str, value: T_contra) -> None: ...

    def delete(self, key: str) -> None: ...


class DictStore(Generic[T]):
    """The plain store: ``items`` is swapped whole on relist, updated key by key on events."""

    def __init__(self) -> None:
        self.items: dict[str, T] = {}

    def replace_all(self, items: dict[str, T]) -> None:
        self.items = items

    def put(self, key: str, value: T) -> None:
        self.items[key] = value

    def delete(self, key: str) -> None:
        self.items.pop(key, None)


class Reflector(Generic[T]):
    """List-then-watch one collection into ``store``.

    ``reduce(obj)`` maps an API object to the cached value, or ``None`` to leave it out (a pod the extender
    does not care about); the value goes into ``store``. ``key(obj)`` names it (``metadata.name`` for nodes,
    ``metadata.uid`` for pods).
    ``on_change`` runs after every applied event and after each relist, on the reflector's thread.
    """

    def __init__(
        self,
        name: str,
        lister: Lister,
        reduce: Callable[[Mapping[str, Any]], T | None],
        store: Store[T],
        *,
        key: Callable[[Mapping[str, Any]], str] = lambda o: o["metadata"]["name"],
        page_size: int = 500,
        watch_timeout: int = 300,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self.synced = threading.Event()
        self._lister = lister
        self._reduce = reduce
        self._key = key
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._on_change = on_change
        self._stop = threading.Event()
        self._resp: Any = None
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.events = 0

    def start(self) -> Reflector[T]:
        self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # Closing a half-read stream may raise from urllib3; we are leaving anyway.
            with contextlib.suppress(Exception):
                resp.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                rv = self._list()
                backoff = 0.5
                while not self._stop.is_set():
                    rv = self._watch(rv)
                    if rv is None:
                        break  # 410 Gone: the resourceVersion is too old, relist
            except Exception as e:
                if self._stop.is_set():
                    return
                log.warning("%s reflector: %s; relisting in %.1fs", self.name, e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _list(self) -> str:
        items: dict[str, T] = {}
        cont: str | None = None
        while True:
            params: dict[str, Any] = {"limit": self._page_size, "_preload_content": False}
            if cont:
                params["_continue"] = cont
            resp = self._lister(**params)
            try:
                body = orjson.loads(resp.data)
            finally:
                resp.release_conn()
            for obj in body.get("items") or ():
                value = self._reduce(obj)
                if value is not None:
                    items[self._key(obj)] = value
            meta = body.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                break
        self.store.replace_all(items)
        self.relists += 1
        self.synced.set()
        if self._on_change is not None:
            self._on_change()
        return meta.get("resourceVersion") or ""

    def _watch(self, rv: str) -> str | None:
        resp = self._lister(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=(10, self._watch_timeout + 30),
        )
        self._resp = resp
        try:
            for line in _lines(resp):
                event = orjson.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if kind == "BOOKMARK":
                    continue
                key = self._key(obj)
                value = None if kind == "DELETED" else self._reduce(obj)
                if value is None:
                    self.store.delete(key)
                else:
                    self.store.put(key, value)
                self.events += 1
                if self._on_change is not None:
                    self._on_change()
        finally:
            self._resp = None
            resp.release_conn()
        return rv


class ClusterCache:
    """The server's view of the cluster: a node index and, for spot ceilings, a pod index, each watched.

    One per gunicorn worker (each worker is a process; sharing would need IPC on the request path). Two
    watches per worker are cheap for the API server: they are served from its watch cache.
    """

    def __init__(self, nodes: Reflector[Any], pods: Reflector[Any] | None = None) -> None:
        self.node_reflector = nodes
        self.pod_reflector = pods

    @property
    def nodes(self) -> Any:
        return self.node_reflector.store

    @property
    def pods(self) -> Any:
        return self.pod_reflector.store if self.pod_reflector is not None else None

    def start(self) -> ClusterCache:
        self.node_reflector.start()
        if self.pod_reflector is not None:
            self.pod_reflector.start()
        return self

    def stop(self) -> None:
        self.node_reflector.stop()
        if self.pod_reflector is not None:
            self.pod_reflector.stop()

    def synced(self) -> bool:
        """Ready to answer NodeNames requests: the nodes have been listed once (pods only refine scores)."""
        return self.node_reflector.synced.is_set()


def kube_lister(kind: str, *, kubeconfig: str | None = None, context: str | None = None) -> Lister:
    """A raw GET of ``nodes`` or ``pods`` (all namespaces) through the kubernetes client's auth and TLS.

    Credentials come from ``kubeconfig`` if given, else the in-cluster service account, else ``~/.kube/config``
    (the client's own order). The client's ``ConfigException`` says what is missing.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(context=context, client_configuration=configuration)
    api = client.CoreV1Api(client.ApiClient(configuration))
    if kind == "nodes":
        return api.list_node
    if kind == "pods":
        return api.list_pod_for_all_namespaces
    raise ValueError(f"unknown kind {kind!r}")


def wait_synced(*reflectors: Reflector[Any], timeout: float) -> bool:
    """Wait until every reflector has listed once; False on timeout."""
    deadline = time.monotonic() + timeout
    return all(r.synced.wait(max(0.0, deadline - time.monotonic())) for r in reflectors)
