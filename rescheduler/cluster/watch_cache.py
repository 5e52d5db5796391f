"""Watch-backed cluster state: nodes, pods, PodDisruptionBudgets, namespaces, PersistentVolumes,
PersistentVolumeClaims and StorageClasses, kept current between cycles.

The run loop plans from the same kinds of objects as ``spot-rescheduler plan`` (:mod:`rescheduler.cluster.listing`):
without the PersistentVolumes, their claims and the claims' StorageClasses the volume check
(:mod:`shared.volumes`) would pass every pod, and a pod whose volume is pinned to a zone with no spot node, or
whose unbound claim's class provisions only in such a zone, would be moved where it cannot follow.

Why not list everything each housekeeping interval: a 150,000-pod cluster is about a gigabyte of JSON, so a
relist every 10 seconds would load the API server and this process far more than the planning itself. Each kind
is kept by a :class:`StateInformer` on the project's one list+watch loop (:mod:`shared.kube.informer`): listed once
(paginated, raw JSON, the lean views of :mod:`shared.model`), then watched from the list's ``resourceVersion``
with bookmarks; ``410 Gone`` means list again, any other failure means watch again after a short backoff.

The views are kept in plain dicts under one condition variable. Writers (one informer thread per kind) apply
an event in O(1) and notify; the run loop and the drainer read under the same lock, or wait on it for "the
evicted pods are gone" without polling the API server. A :class:`~shared.snapshot.NodeInfo` per node (its pods,
summed requests, host ports, affinity pods) is maintained event by event too, so :meth:`ClusterState.snapshot`
only copies those small lists and dicts rather than re-adding every pod (``bench/run_cycle.py`` times a
cycle, snapshot included) and hands the planner a :class:`~shared.snapshot.ClusterSnapshot` it may mutate freely.

Karpenter's NodePools are watched where the API server serves them (:func:`node_pools_access`, asked once at
start-up): a cluster without Karpenter has none, and nothing retries for them. Where RBAC refuses them the state
says so (:attr:`ClusterState.node_pools_problem`) and the planner leaves Karpenter's nodes alone
(:func:`rescheduler.plan.candidates.left_to_karpenter`).

Pods are listed and watched with ``status.phase!=Succeeded,status.phase!=Failed``: finished pods hold no
resources and never move, and a pod that finishes arrives as a ``DELETED`` event. A pod that cannot be read
(a malformed quantity, say) is not dropped silently: its node is remembered in :attr:`ClusterState.broken`,
and the run loop never drains a node holding a pod it could not read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from msgspec import Raw, Struct

from rescheduler.cluster.listing import NODEPOOLS_PATH, raw_page
from rescheduler.decode.pods import NONE, POD_ITEM, PodReader
from rescheduler.decode.reader import LIST_DECODERS
from shared.disruption import with_computed_status
from shared.kube.api import Collection, Forbidden, Kube, NotFound
from shared.kube.informer import Informer, Page, WatchEvent, json_event
from shared.kube.shards import namespaced
from shared.model import PDB, Namespace, Node, ParseError, PersistentVolume, PersistentVolumeClaim, Pod
from shared.nodepools import NodePool
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.storage import StorageClass

__all__ = [
    "ClusterState",
    "StateInformer",
    "PodPages",
    "Parsed",
    "WatchedKind",
    "KINDS",
    "NODES",
    "PODS",
    "PDBS",
    "NAMESPACES",
    "PVS",
    "PVCS",
    "STORAGE_CLASSES",
    "NODEPOOLS",
    "node_pools_access",
    "WATCHES",
    "POD_FIELD_SELECTOR",
]

log = logging.getLogger("spotshift.rescheduler.cluster.state")

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """One watched kind: its name in logs and the store, and whether its objects are namespaced."""

    name: str
    namespaced: bool


NODES = WatchedKind("nodes", False)
PODS = WatchedKind("pods", True)
PDBS = WatchedKind("poddisruptionbudgets", True)
NAMESPACES = WatchedKind("namespaces", False)
PVS = WatchedKind("persistentvolumes", False)
PVCS = WatchedKind("persistentvolumeclaims", True)
STORAGE_CLASSES = WatchedKind("storageclasses", False)
KINDS = (NODES, PODS, PDBS, NAMESPACES, PVS, PVCS, STORAGE_CLASSES)
"""The kinds every cluster serves: the state is synced once each is listed (and the optional kinds watched)."""
NODEPOOLS = WatchedKind("nodepools", False)
"""Karpenter's NodePools: optional, watched only where served (:meth:`ClusterState.watch_node_pools`)."""
WATCHES: tuple[tuple[WatchedKind, str, tuple[tuple[str, str], ...]], ...] = (
    (NODES, "/api/v1/nodes", ()),
    (PODS, "/api/v1/pods", (("fieldSelector", POD_FIELD_SELECTOR),)),
    (NAMESPACES, "/api/v1/namespaces", ()),
    (PVS, "/api/v1/persistentvolumes", ()),
    (PVCS, "/api/v1/persistentvolumeclaims", ()),
    (STORAGE_CLASSES, "/apis/storage.k8s.io/v1/storageclasses", ()),
)
"""``(kind, collection path, query)`` of every kind the run loop lists and watches but the PodDisruptionBudgets,
whose path depends on the API versions the server serves (``policy/v1`` or ``v1beta1``)."""


Parsed = tuple[str, Any, str]
"""A listed object parsed: key, view (None if it could not be parsed) and, for such a pod, its node's name."""


def node_pools_access(kube: Kube) -> str | None:
    """Whether Karpenter's NodePools can be watched: ``None`` if so; ``"absent"`` where the API server does not
    serve them (no Karpenter: a 404); else the problem (``"forbidden: ..."``, RBAC refusing the list)."""
    try:
        kube.get_raw(NODEPOOLS_PATH, [("limit", 1)])
    except NotFound:
        return "absent"
    except Forbidden:
        return f"forbidden: RBAC needs list and watch on nodepools.karpenter.sh ({NODEPOOLS_PATH})"
    return None


def _key(kind: WatchedKind, meta: Mapping[str, Any]) -> str:
    name = meta.get("name") or ""
    return f"{meta.get('namespace') or 'default'}/{name}" if kind.namespaced else name


class ClusterState:
    """The lean views of every watched object, by key (``name`` or ``namespace/name``).

    All public methods are thread-safe. ``version`` grows by one per applied change.
    """

    def __init__(self, *, pdb_api_version: str = "policy/v1") -> None:
        self.cond = threading.Condition()
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.pdbs: dict[str, PDB] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.pvs: dict[str, PersistentVolume] = {}
        self.pvcs: dict[str, PersistentVolumeClaim] = {}
        self.storage_classes: dict[str, StorageClass] = {}
        self.node_pools: dict[str, NodePool] = {}
        self.node_pools_problem: str | None = None
        """Why the NodePools cannot be read (RBAC), ``None`` when they can or are not served at all."""
        self.required = {kind.name for kind in KINDS}
        """The kinds listed before the state is synced: :data:`KINDS`, and the NodePools where watched."""
        self.by_node: dict[str, dict[str, Pod]] = {}
        """Pods bound to each node name (also for nodes not, or no longer, in :attr:`nodes`)."""
        self.by_owner: dict[str, dict[str, Pod]] = {}
        """Pods by the UID of their controller owner (where an evicted pod's replacement shows up)."""
        self.broken: dict[str, str] = {}
        """Pods that could not be parsed: key → node name (``""`` if unbound)."""
        self._infos: dict[str, NodeInfo] = {}
        self._pending: dict[str, Pod] = {}
        self._unknown: dict[str, Pod] = {}
        self.pdb_api_version = pdb_api_version
        self.synced: set[str] = set()
        self.version = 0
        self._again: tuple[int, ClusterSnapshot, int] | None = None
        """The snapshot last made with ``again`` (:meth:`snapshot`), with the state's and its own version then."""
        self._stores: dict[str, dict[str, Any]] = {
            NODES.name: self.nodes,
            PODS.name: self.pods,
            PDBS.name: self.pdbs,
            NAMESPACES.name: self.namespaces,
            PVS.name: self.pvs,
            PVCS.name: self.pvcs,
            STORAGE_CLASSES.name: self.storage_classes,
            NODEPOOLS.name: self.node_pools,
        }

    def watch_node_pools(self) -> None:
        """The NodePools are watched: the state is synced only once they are listed too."""
        with self.cond:
            self.required.add(NODEPOOLS.name)

    # ---- writers (informer threads, tests, the benchmark) ---------------------------------------------------

    def replace(self, kind: WatchedKind, items: Iterable[Mapping[str, Any]]) -> None:
        """Set the whole content of ``kind`` from a fresh list (the initial list, or a relist after 410)."""
        self.replace_parsed(kind, [self.parse(kind, raw) for raw in items])

    def parse(self, kind: WatchedKind, raw: Mapping[str, Any]) -> Parsed:
        """One listed object as :meth:`replace_parsed` takes it: its key and view (None: it could not be parsed,
        and then the node it is bound to). The informer parses each page as it arrives, so a big list is never
        held as API dicts (30,000 pods would take about 20 KB each)."""
        key, view = self._parse(kind, raw)
        return key, view, ((raw.get("spec") or {}).get("nodeName") or "") if view is None else ""

    def replace_parsed(self, kind: WatchedKind, items: Iterable[Parsed]) -> None:
        """:meth:`replace` with objects already parsed (:meth:`parse`)."""
        parsed: dict[str, Any] = {}
        broken: dict[str, str] = {}
        for key, view, node_name in items:
            if view is None:
                broken[key] = node_name
            else:
                parsed[key] = view
        with self.cond:
            if kind is PODS:
                self.pods.clear()
                self.by_node.clear()
                self.by_owner.clear()
                self._pending.clear()
                self._unknown.clear()
                self._infos = {name: NodeInfo(node) for name, node in self.nodes.items()}
                self.broken = broken
                for key, pod in parsed.items():
                    self._put_pod(key, pod)
            elif kind is NODES:
                self.nodes.clear()
                self.nodes.update(parsed)
                self._rebuild_infos()
            else:
                store = self._stores[kind.name]
                store.clear()
                store.update(parsed)
            self.synced.add(kind.name)
            self.version += 1
            self.cond.notify_all()

    def apply(self, kind: WatchedKind, event_type: str, raw: Mapping[str, Any]) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED`` or ``DELETED``) carrying the object ``raw``."""
        self.apply_parsed(kind, event_type, self.parse_event(kind, event_type, raw))

    def parse_event(self, kind: WatchedKind, event_type: str, raw: Mapping[str, Any]) -> Parsed:
        """A watch event's object as :meth:`apply_parsed` takes it (a deleted object: its key only)."""
        if event_type == "DELETED":
            return _key(kind, raw.get("metadata") or {}), None, ""
        return self.parse(kind, raw)

    def apply_parsed(self, kind: WatchedKind, event_type: str, parsed: Parsed) -> None:
        """:meth:`apply` with the object already parsed (:meth:`parse_event`, or :class:`PodPages` for pods):
        a view replaces the object of its key; none deletes it, or for a pod that could not be read (any
        event but ``DELETED``) marks its node."""
        key, view, node_name = parsed
        with self.cond:
            if kind is PODS:
                self._drop_pod(key, view)
                self.broken.pop(key, None)
                if view is not None:
                    self._put_pod(key, view)
                elif event_type != "DELETED":
                    self.broken[key] = node_name
            elif kind is NODES:
                if view is None:
                    self.nodes.pop(key, None)
                    self._drop_info(key)
                else:
                    self.nodes[key] = view
                    self._put_info(view)
            else:
                store = self._stores[kind.name]
                if view is None:
                    store.pop(key, None)
                else:
                    store[key] = view
            self.version += 1
            self.cond.notify_all()

    # ---- NodeInfos, kept current so a snapshot is a cheap copy ---------------------------------------------

    def _rebuild_infos(self) -> None:
        self._infos = {name: NodeInfo(node, self.by_node.get(name, {}).values()) for name, node in self.nodes.items()}
        self._unknown = {
            key: pod for name, pods in self.by_node.items() if name not in self._infos for key, pod in pods.items()
        }

    def _put_info(self, node: Node) -> None:
        info = self._infos.get(node.name)
        if info is not None:
            info.node = node  # same pods; only the node's own fields changed
            return
        info = self._infos[node.name] = NodeInfo(node)
        for key, pod in self.by_node.get(node.name, {}).items():
            self._unknown.pop(key, None)
            info.add_pod(pod)

    def _drop_info(self, name: str) -> None:
        if self._infos.pop(name, None) is not None:
            self._unknown.update(self.by_node.get(name, {}))

    def _parse(self, kind: WatchedKind, raw: Mapping[str, Any]) -> tuple[str, Any]:
        key = _key(kind, raw.get("metadata") or {})
        try:
            if kind is PODS:
                return key, Pod.from_api(raw)
            if kind is NODES:
                return key, Node.from_api(raw)
            if kind is PDBS:
                if "apiVersion" not in raw:  # items of a list carry no apiVersion; v1beta1 reads selectors differently
                    raw = {**raw, "apiVersion": self.pdb_api_version}
                return key, PDB.from_api(raw)
            if kind is PVS:
                return key, PersistentVolume.from_api(raw)
            if kind is PVCS:
                return key, PersistentVolumeClaim.from_api(raw)
            if kind is STORAGE_CLASSES:
                return key, StorageClass.from_api(raw)
            if kind is NODEPOOLS:
                return key, NodePool.from_api(raw)
            return key, Namespace.from_api(raw)
        except (ParseError, TypeError, ValueError, AttributeError) as e:
            log.warning("cannot read %s %s: %s", kind.name, key, e, extra={"fields": {"kind": kind.name, "key": key}})
            return key, None

    def _put_pod(self, key: str, pod: Pod) -> None:
        self.pods[key] = pod
        if pod.node_name:
            self.by_node.setdefault(pod.node_name, {})[key] = pod
            info = self._infos.get(pod.node_name)
            if info is None:
                self._unknown[key] = pod
            else:
                info.add_pod(pod)  # ignores finished pods, like the scheduler's cache
        elif not pod.terminal:
            self._pending[key] = pod
        ctrl = pod.controller
        if ctrl is not None and ctrl.uid:
            self.by_owner.setdefault(ctrl.uid, {})[key] = pod

    def _drop_pod(self, key: str, new: Pod | None = None) -> None:
        """Take the pod of ``key`` out of the views and indexes. The slots that ``new``, its replacement, takes
        again (the key, on the same node, of the same owner) are left for :meth:`_put_pod` to overwrite: a big
        dict that loses a key and gains it again keeps a dead slot until it is resized."""
        old = self.pods.get(key) if new is not None else self.pods.pop(key, None)
        if old is None:
            return
        if old.node_name:
            if new is None or new.node_name != old.node_name:
                _discard(self.by_node, old.node_name, key)
            info = self._infos.get(old.node_name)
            if self._unknown.pop(key, None) is None and info is not None and not old.terminal:
                with contextlib.suppress(KeyError):
                    info.remove_pod(old)
        else:
            self._pending.pop(key, None)
        ctrl = old.controller
        if ctrl is not None and ctrl.uid:
            kept = new.controller if new is not None else None
            if kept is None or kept.uid != ctrl.uid:
                _discard(self.by_owner, ctrl.uid, key)

    # ---- readers -------------------------------------------------------------------------------------------

    def is_synced(self) -> bool:
        with self.cond:
            return self.required <= self.synced

    def snapshot(self, *, again: bool = False) -> ClusterSnapshot:
        """A fresh snapshot of everything, for the planner to mutate (nodes in name order: stable plans).

        Equal to ``ClusterSnapshot(nodes, pods, ...)`` built from the views (a test checks it after random
        events), but made by copying the maintained NodeInfos' lists and dicts. Budgets whose status is absent
        or stale get it computed from the pods (:mod:`shared.disruption`), as ``plan`` does.

        With ``again`` (the run loop's cycles), the snapshot last made with ``again`` is handed out once more while
        neither the state (its :attr:`version`) nor that snapshot (its own ``version``: every pod added, removed or
        moved) has changed since: it is then what a fresh copy would be, and a quiet cluster's cycle copies none of
        its nodes. Otherwise the new snapshot takes from that one each node that neither changed: the state's node
        holds the same pods (the same :attr:`~shared.snapshot.NodeInfo.stamp` as the copy, which no plan or
        projection changed since) and the same ``Node``; the others are copied. One caller only: the snapshot and
        its nodes are shared with their last use.
        """
        with self.cond:
            kept = self._again
            if again and kept is not None and kept[0] == self.version and kept[1].version == kept[2]:
                return kept[1]
            snap = ClusterSnapshot(
                pdbs=with_computed_status(list(self.pdbs.values()), self.pods.values()),
                namespaces=list(self.namespaces.values()),
                pvs=list(self.pvs.values()),
                pvcs=list(self.pvcs.values()),
                storage_classes=list(self.storage_classes.values()),
                node_pools=list(self.node_pools.values()),
                node_pools_problem=self.node_pools_problem,
            )
            last = kept[1].nodes if again and kept is not None else {}
            snap.nodes = {name: _copy_or_keep(self._infos[name], last.get(name)) for name in sorted(self._infos)}
            snap.pending = list(self._pending.values())
            snap.unknown_node_pods = list(self._unknown.values())
            if again:
                self._again = (self.version, snap, snap.version)
        return snap

    def node(self, name: str) -> Node | None:
        with self.cond:
            return self.nodes.get(name)

    def pod(self, key: str) -> Pod | None:
        with self.cond:
            return self.pods.get(key)

    def pods_on(self, node_name: str) -> list[Pod]:
        with self.cond:
            return list(self.by_node.get(node_name, {}).values())

    def pods_of_owner(self, owner_uid: str) -> list[Pod]:
        """Pods whose controller owner has this UID (the replacements of an evicted pod come from here)."""
        with self.cond:
            return list(self.by_owner.get(owner_uid, {}).values())

    def broken_nodes(self) -> set[str]:
        with self.cond:
            return {n for n in self.broken.values() if n}

    def wait_until(self, predicate: Callable[[], bool], timeout: float, stop: threading.Event | None = None) -> bool:
        """Wait until ``predicate()`` (called under the lock) holds, ``timeout`` passes, or ``stop`` is set.

        Returns the predicate's last value. Woken by every applied change, and at least every half second
        so that ``stop`` is noticed.
        """
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if predicate():
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()):
                    return False
                self.cond.wait(min(left, 0.5))

    def wait_change(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Wait until the next applied change, ``timeout`` passes, or ``stop`` is set (noticed within half a
        second): the drains in flight then look again."""
        if stop is not None and stop.is_set():
            return
        with self.cond:
            self.cond.wait(min(max(timeout, 0.0), 0.5))

    def wait_synced(self, timeout: float, stop: threading.Event | None = None) -> bool:
        return self.wait_until(lambda: self.required <= self.synced, timeout, stop)


_INFO_SLOTS = NodeInfo.__slots__


def _copy_info(info: NodeInfo) -> NodeInfo:
    """A NodeInfo the planner may mutate: its lists and dicts copied (shallowly: the Pods are immutable)."""
    out = NodeInfo.__new__(NodeInfo)
    for slot in _INFO_SLOTS:
        value = getattr(info, slot)
        setattr(out, slot, value.copy() if isinstance(value, list | dict) else value)
    return out


def _copy_or_keep(info: NodeInfo, kept: NodeInfo | None) -> NodeInfo:
    """``kept`` (a copy in the last snapshot) when it is still what a copy of ``info`` would be, else a copy."""
    if kept is not None and kept.stamp == info.stamp and kept.node is info.node:
        return kept
    return _copy_info(info)


def _discard(index: dict[str, dict[str, Pod]], bucket: str, key: str) -> None:
    pods = index.get(bucket)
    if pods is not None:
        pods.pop(key, None)
        if not pods:
            del index[bucket]


class _Handler:
    """Raw objects of one kind into a :class:`ClusterState` (it parses them under its own rules)."""

    def __init__(self, state: ClusterState, kind: WatchedKind) -> None:
        self.state = state
        self.kind = kind

    def convert(self, obj: dict[str, Any]) -> Parsed:
        return self.state.parse(self.kind, obj)

    def replace(self, items: list[Parsed]) -> None:
        self.state.replace_parsed(self.kind, items)

    def apply(self, event_type: str, obj: Any) -> None:
        self.state.apply(self.kind, event_type, obj)


class _PodHandler(_Handler):
    """Pods into a :class:`ClusterState`, their watch events already parsed by :class:`PodPages`."""

    def __init__(self, state: ClusterState, pages: PodPages) -> None:
        super().__init__(state, PODS)
        self.pages = pages

    def replace(self, items: list[Parsed]) -> None:
        super().replace(items)
        self.pages.prune()

    def apply(self, event_type: str, obj: Any) -> None:
        self.state.apply_parsed(PODS, event_type, obj)
        self.pages.prune_if_grown()


class _Event(Struct):
    """A watch line with its object left as bytes, for the pod decoder."""

    type: str = ""
    object: Raw = NONE


_EVENT = msgspec.json.Decoder(_Event)
_PRUNE_FLOOR = 10_000
"""The watch reader's caches are pruned once they hold more entries than this, and than twice what they held
after the last pruning (pruning walks every pod: with that rule its cost per event stays constant)."""
_UNREADABLE = (msgspec.ValidationError, msgspec.DecodeError, ParseError, TypeError, ValueError, KeyError)


class PodPages:
    """Pod list pages and watch events read by the typed decoder of snapshot files and live ``plan``
    (:mod:`rescheduler.decode`): a list about three times faster than a dict per pod and ``Pod.from_api``, an
    event about as fast, and the parts replicas share (containers, tolerations, affinity) are held once. The pods
    are equal to ``Pod.from_api``'s (a test of the snapshot reader checks it for pages, one of the state for
    events). A page that decoder refuses is read the dict way, object by object, and so is an event's pod, so a
    pod that cannot be parsed is counted as broken either way, and the rest of its page is kept.

    A list has its own reader, dropped with the list. The watch events have one that lives as long as the
    state (:class:`~rescheduler.decode.pods.PodReader` with ``compact``): its caches are pruned against the
    state's pods (:meth:`prune_if_grown`), so a part every pod of which was replaced goes, and after every pod
    has been replaced once the state is about as big as after its list (``bench/state_memory.py``) rather
    than three times as big."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.reader = PodReader()
        self.watch_reader = PodReader(compact=True)
        self._prune_above = _PRUNE_FLOOR

    def __call__(self, body: bytes) -> Page[list[Parsed]]:
        page = self._read(self.reader, body)
        if not page.continue_token:
            self.reader = PodReader()  # the list is complete: its caches go with it
        return page

    def list_decoder(self) -> Callable[[bytes], Page[list[Parsed]]]:
        """A decoder of one list's pages with a reader of its own (one shard of a list fetched in shards at
        once: :mod:`shared.kube.shards`), dropped with it."""
        reader = PodReader()
        return lambda body: self._read(reader, body)

    def _read(self, reader: PodReader, body: bytes) -> Page[list[Parsed]]:
        page = raw_page(body)
        items = bytes(page.items)
        try:
            pods = LIST_DECODERS["Pod"].decode(items) if items not in (b"", b"null") else []
            parsed: list[Parsed] = []
            for item in pods:
                pod = reader.read(item)
                parsed.append((pod.key, pod, ""))
        except (msgspec.ValidationError, msgspec.DecodeError, ParseError, TypeError, ValueError, KeyError):
            parsed = [self.state.parse(PODS, raw) for raw in orjson.loads(items) or ()]
        return Page(parsed, page.continue_token, page.resource_version)

    def event(self, line: bytes) -> WatchEvent:
        """One watch line. A pod event's object becomes a :data:`Parsed` (a deleted pod: its key only), read
        from the bytes by the typed decoder and the watch reader; other events keep the API dict."""
        head = _EVENT.decode(line)
        if head.type not in ("ADDED", "MODIFIED", "DELETED"):
            return json_event(line)
        body = bytes(head.object)
        try:
            item = POD_ITEM.decode(body)
            meta = item.metadata
            if meta is None:
                raise ParseError("pod: metadata is missing")
            if head.type == "DELETED":
                parsed: Parsed = (_key(PODS, {"namespace": meta.namespace, "name": meta.name}), None, "")
            else:
                pod = self.watch_reader.read(item)
                parsed = (pod.key, pod, "")
            return WatchEvent(head.type, parsed, meta.resourceVersion or "")
        except _UNREADABLE:
            raw = orjson.loads(body)
            version = (raw.get("metadata") or {}).get("resourceVersion") or ""
            return WatchEvent(head.type, self.state.parse_event(PODS, head.type, raw), version)

    def prune(self) -> None:
        """Drop what the watch reader caches for no pod of the state (after a list, or when it has grown)."""
        with self.state.cond:
            pods = list(self.state.pods.values())
        self.watch_reader.prune(pods)
        self._prune_above = max(_PRUNE_FLOOR, 2 * self.watch_reader.size())

    def prune_if_grown(self) -> None:
        if self.watch_reader.size() > self._prune_above:
            self.prune()


LIST_WORKERS = 4
"""Shards of the pods listed at once (:mod:`shared.kube.shards`): a raw page each in memory at most."""


class StateInformer(Informer[Parsed]):
    """List then watch one kind into a :class:`ClusterState` (:mod:`shared.kube.informer`), until closed.

    ``path`` is the collection (``/api/v1/pods``), ``query`` extra selectors for both list and watch. The pods,
    when they take more than a page, are listed in one shard per namespace, ``list_workers`` at once, all at the
    version of their first page (:mod:`shared.kube.shards`); ``list_workers=1``: page after page.
    """

    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        kind: WatchedKind,
        path: str,
        stop: threading.Event,
        *,
        query: tuple[tuple[str, Any], ...] = (),
        page_size: int = 500,
        watch_timeout: float = 300.0,
        backoff: float = 1.0,
        list_workers: int = LIST_WORKERS,
    ) -> None:
        pages = PodPages(state) if kind is PODS else None
        sharded = pages is not None and list_workers > 1
        split = namespaced(kube.get_raw, "pods", page_size=page_size) if sharded else None
        super().__init__(
            kind.name,
            Collection(kube, path),
            _Handler(state, kind) if pages is None else _PodHandler(state, pages),
            stop=stop,
            query=query,
            page_size=page_size,
            watch_timeout=watch_timeout,
            backoff=backoff,
            decode_page=pages,
            decode_event=pages.event if pages is not None else json_event,
            split=split,
            shard_decoder=pages.list_decoder if pages is not None else None,
            list_workers=list_workers,
        )
        self.kube = kube
        self.state = state
        self.kind = kind
        self.path = path
