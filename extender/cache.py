"""Watch-backed in-memory caches of nodes and pods, so no request ever waits on the API server.

Each gunicorn worker runs one :class:`Reflector` per resource, on the project's one list+watch loop
(:mod:`shared.kube.informer`) over the one API transport (:mod:`shared.kube.api`), which the worker builds for
itself after gunicorn forks it (:func:`worker_kube`): list (paginated, raw JSON parsed with orjson rather than
model classes, which cost far more), then watch from the list's resourceVersion with bookmarks, relisting on
``410 Gone`` and retrying other errors after a short backoff. Every object is reduced at once by a
caller-supplied function to the small immutable value the request path needs (a node's class and its
pre-serialised score fragments; a pod's workload and node), so the cache holds no raw JSON.

Readers see a plain ``dict`` that is only ever updated by single assignments or swapped whole on relist:
under the GIL a lookup never sees a half-applied change, and readers take no lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from extender import USER_AGENT
from shared.kube.api import Collection, Kube, transport_from_kubeconfig
from shared.kube.informer import Informer, ListWatch

__all__ = [
    "Store",
    "DictStore",
    "Reflector",
    "ClusterCache",
    "worker_kube",
    "node_collection",
    "pod_collection",
    "wait_synced",
]

T = TypeVar("T")


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


class Reflector(Generic[T]):
    """List-then-watch one collection into ``store``, on the project's one informer (:mod:`shared.kube.informer`).

    ``source`` is the collection (:func:`node_collection`, :func:`pod_collection`: the one transport of
    :mod:`shared.kube.api`).
    ``reduce(obj)`` maps an API object to the cached value, or ``None`` to leave it out (a pod the extender
    does not care about); the value goes into ``store``. ``key(obj)`` names it (``metadata.name`` for nodes,
    ``metadata.uid`` for pods). Listed objects are reduced page by page, so no raw list is held.
    ``on_change`` runs after every applied event and after each relist, on the informer's thread.
    """

    def __init__(
        self,
        name: str,
        source: ListWatch,
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
            source,
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


def worker_kube(kubeconfig: str | None = None, context: str | None = None) -> Kube:
    """JSON over a new :class:`~shared.kube.api.HttpTransport` named :data:`extender.USER_AGENT`, with credentials as
    every spotshift command finds them (:func:`shared.kube.credentials.load_client_configuration`); raises its
    one-line ``KubeconfigError``. Call it in the worker that uses it: its connection pool must not cross a fork.
    """
    return Kube(transport_from_kubeconfig(kubeconfig, context, user_agent=USER_AGENT))


def node_collection(kube: Kube) -> Collection:
    """Every node: what the node cache lists and watches."""
    return Collection(kube, "/api/v1/nodes")


def pod_collection(kube: Kube) -> Collection:
    """Every pod of every namespace: what the pod index lists and watches."""
    return Collection(kube, "/api/v1/pods")


def wait_synced(*reflectors: Reflector[Any], timeout: float) -> bool:
    """Wait until every reflector has listed once; False on timeout."""
    deadline = time.monotonic() + timeout
    return all(r.synced.wait(max(0.0, deadline - time.monotonic())) for r in reflectors)
