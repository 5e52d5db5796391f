"""Watch-backed in-memory caches of nodes and pods, so no request ever waits on the API server.

Each gunicorn worker runs one :class:`Reflector` per resource, on the project's one list+watch loop
(:mod:`shared.kube.informer`): list (paginated, raw JSON parsed with orjson rather than the client's model
classes, which cost far more), then watch from the list's resourceVersion with bookmarks, relisting on
``410 Gone`` and retrying other errors after a short backoff. Every object is reduced at once by a
caller-supplied function to the small immutable value the request path needs (a node's class and its
pre-serialised score fragments; a pod's workload and node), so the cache holds no raw JSON.

Readers see a plain ``dict`` that is only ever updated by single assignments or swapped whole on relist:
under the GIL a lookup never sees a half-applied change, and readers take no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from shared.kube.credentials import load_client_configuration
from shared.kube.informer import Informer, ResponseLines

__all__ = ["Lister", "Store", "DictStore", "Reflector", "kube_lister", "wait_synced"]

T = TypeVar("T")

Lister = Callable[..., Any]
"""``lister(**params)`` performs a GET of the collection and returns a urllib3 response (unread)."""


class Store(Protocol[T]):
    """Where a reflector puts what it reduced. Called from the reflector's thread only."""

    def replace_all(self, items: dict[str, T]) -> None: ...

    def put(self, key: str, value: T) -> None: ...

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


# kubernetes client keyword → API query parameter, for the informer's queries.
_CLIENT_PARAMS = {
    "limit": "limit",
    "continue": "_continue",
    "resourceVersion": "resource_version",
    "allowWatchBookmarks": "allow_watch_bookmarks",
    "timeoutSeconds": "timeout_seconds",
    "watch": "watch",
    "fieldSelector": "field_selector",
    "labelSelector": "label_selector",
}
_CLIENT_BOOLEANS = frozenset({"watch", "allowWatchBookmarks"})


def _client_params(query: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    params: dict[str, Any] = {"_preload_content": False}
    for name, value in query:
        params[_CLIENT_PARAMS[name]] = value == "true" if name in _CLIENT_BOOLEANS else value
    return params


class _ClientCollection:
    """A collection through the kubernetes client's generated list call (raw responses, not model objects)."""

    def __init__(self, lister: Lister) -> None:
        self._lister = lister

    def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
        resp = self._lister(**_client_params(query))
        try:
            return bytes(resp.data)
        finally:
            resp.release_conn()

    def watch(self, query: Sequence[tuple[str, Any]], timeout: float) -> ResponseLines:
        return ResponseLines(self._lister(**_client_params(query), _request_timeout=(10, timeout)))


class Reflector(Generic[T]):
    """List-then-watch one collection into ``store``, on the project's one informer (:mod:`shared.kube.informer`).

    ``reduce(obj)`` maps an API object to the cached value, or ``None`` to leave it out (a pod the extender
    does not care about); the value goes into ``store``. ``key(obj)`` names it (``metadata.name`` for nodes,
    ``metadata.uid`` for pods). Listed objects are reduced page by page, so no raw list is held.
    ``on_change`` runs after every applied event and after each relist, on the informer's thread.
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
        backoff: float = 0.5,
    ) -> None:
        self.name = name
        self.store = store
        self._reduce = reduce
        self._key = key
        self._on_change = on_change
        self._informer: Informer[tuple[str, T | None]] = Informer(
            name,
            _ClientCollection(lister),
            self,
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=backoff,
        )
        self.synced = self._informer.synced

    @property
    def relists(self) -> int:
        return self._informer.lists

    @property
    def events(self) -> int:
        return self._informer.events

    def start(self) -> Reflector[T]:
        self._informer.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._informer.close()
        if self._informer.is_alive():
            self._informer.join(timeout)

    # EventHandler, called on the informer's thread
    def convert(self, obj: dict[str, Any]) -> tuple[str, T | None]:
        return self._key(obj), self._reduce(obj)

    def replace(self, items: list[tuple[str, T | None]]) -> None:
        self.store.replace_all({key: value for key, value in items if value is not None})
        if self._on_change is not None:
            self._on_change()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key = self._key(obj)
        value = None if event_type == "DELETED" else self._reduce(obj)
        if value is None:
            self.store.delete(key)
        else:
            self.store.put(key, value)
        if self._on_change is not None:
            self._on_change()


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

    Credentials as every spotshift command finds them (:func:`shared.kube.credentials.load_client_configuration`);
    raises its one-line ``KubeconfigError``.
    """
    from kubernetes import client

    api = client.CoreV1Api(client.ApiClient(load_client_configuration(kubeconfig, context)))
    if kind == "nodes":
        return api.list_node
    if kind == "pods":
        return api.list_pod_for_all_namespaces
    raise ValueError(f"unknown kind {kind!r}")


def wait_synced(*reflectors: Reflector[Any], timeout: float) -> bool:
    """Wait until every reflector has listed once; False on timeout."""
    deadline = time.monotonic() + timeout
    return all(r.synced.wait(max(0.0, deadline - time.monotonic())) for r in reflectors)
