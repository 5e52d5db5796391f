"""Cluster state the predicates read: ``NodeInfo`` per node and a ``ClusterSnapshot`` over them.

Mirrors kube-scheduler's ``framework.NodeInfo``: the node, its non-terminal pods, the sum of their
requests, the host ports in use, and the pods that carry (anti-)affinity terms, kept current by
``add_pod``/``remove_pod`` so a planner can try a move and undo it in O(pod) time. Pods in phase
``Succeeded`` or ``Failed`` hold no resources and are not added (the scheduler's cache drops them).
A pod counts for what the scheduler counts for it on its node (:attr:`Pod.node_requests`: during an in-place
resize, its status-aware requests); bound to another node it is a replacement, which counts by its spec.

Pure data: no client, no clock. ``ClusterSnapshot.version`` increments on every change, so a
predicate module may memoise snapshot-wide aggregates (topology counts, anti-affinity indexes)
keyed on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import fields
from itertools import compress, count, repeat
from operator import attrgetter, is_

from shared.model import (
    PDB,
    HostPort,
    Namespace,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
)
from shared.nodepools import NodePool
from shared.spot_pools import PoolOutlook
from shared.storage import StorageClass

__all__ = ["NodeInfo", "ClusterSnapshot", "Saved"]

_STAMPS = count(1)
"""The stamps of :class:`NodeInfo` (``next`` is atomic in CPython: informer threads and the loop may share it)."""

NO_RECLAIMS = PoolOutlook()
"""The outlook of a snapshot without a memory of spot reclaims: every pool alike."""


class NodeInfo:
    """A node and what is scheduled on it. Mutable on purpose: the planner simulates moves."""

    __slots__ = (
        "node",
        "pods",
        "requested",
        "host_ports",
        "pods_with_affinity",
        "pods_with_required_anti_affinity",
        "stamp",
    )

    def __init__(self, node: Node, pods: Iterable[Pod] = ()) -> None:
        self.node = node
        self.stamp = next(_STAMPS)
        """Given anew whenever the pods change (a number not given out before in the process), and given again only
        to the very contents it was first given with (:meth:`restore`, :meth:`take_stamp`): two NodeInfos with the
        same stamp hold the same pods, the very objects in the same order. Memos kept from one snapshot to the next
        compare it before the pods themselves."""
        self.pods: list[Pod] = []
        self.requested: dict[str, int] = {}
        self.host_ports: list[HostPort] = []
        self.pods_with_affinity: list[Pod] = []
        self.pods_with_required_anti_affinity: list[Pod] = []
        for p in pods:
            self.add_pod(p)

    @property
    def name(self) -> str:
        return self.node.name

    def allocatable(self, resource: str) -> int:
        return self.node.allocatable.get(resource, 0)

    def free(self, resource: str) -> int:
        """Allocatable minus requested; ``pods`` counts pods."""
        if resource == "pods":
            return self.node.allocatable.get("pods", 0) - len(self.pods)
        return self.node.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def add_pod(self, pod: Pod) -> None:
        if pod.terminal:
            return
        self.pods.append(pod)
        self.stamp = next(_STAMPS)
        req = self.requested
        for k, v in pod.node_requests.items():
            req[k] = req.get(k, 0) + v
        if pod.host_ports:
            self.host_ports.extend(pod.host_ports)
        if _has_affinity(pod):
            self.pods_with_affinity.append(pod)
        if pod.pod_anti_affinity:
            self.pods_with_required_anti_affinity.append(pod)

    def remove_pod(self, pod: Pod) -> None:
        """Remove ``pod`` (matched by identity, then by namespace/name); a missing pod is an error."""
        idx = _index_of(self.pods, pod)
        if idx is None:
            raise KeyError(f"pod {pod.key} is not on node {self.name}")
        stored = self.pods.pop(idx)
        self.stamp = next(_STAMPS)
        req = self.requested
        for k, v in stored.node_requests.items():
            req[k] = req.get(k, 0) - v
        for hp in stored.host_ports:
            self.host_ports.remove(hp)
        # Only a pod with such terms was added to these lists (add_pod): most pods have none to look for.
        if _has_affinity(stored):
            _remove_from(self.pods_with_affinity, stored)
        if stored.pod_anti_affinity:
            _remove_from(self.pods_with_required_anti_affinity, stored)

    def saved(self) -> Saved:
        """Its contents and stamp now, for :meth:`restore`."""
        return (
            self.stamp,
            self.pods[:],
            dict(self.requested),
            self.host_ports[:],
            self.pods_with_affinity[:],
            self.pods_with_required_anti_affinity[:],
        )

    def restore(self, saved: Saved) -> None:
        """Take back the contents and stamp :meth:`saved` returned (its lists taken over, not copied). The caller
        vouches that the pods changed since were only taken out and are now put back: they are the very pods again,
        and the saved order is theirs."""
        self.stamp, self.pods, self.requested = saved[0], saved[1], saved[2]
        self.host_ports, self.pods_with_affinity, self.pods_with_required_anti_affinity = saved[3], saved[4], saved[5]

    def take_stamp(self, stamp: int) -> None:
        """Take ``stamp``, the caller's word that it was given to these very contents (the same pods taken out of
        the same stamp's contents: :class:`rescheduler.plan.simulation.Preemptions`)."""
        self.stamp = stamp

    def __repr__(self) -> str:
        return f"NodeInfo({self.name!r}, pods={len(self.pods)}, requested={self.requested})"


Saved = tuple[int, list[Pod], dict[str, int], list[HostPort], list[Pod], list[Pod]]
"""A :class:`NodeInfo`'s stamp and contents (:meth:`NodeInfo.saved`)."""


def _has_affinity(pod: Pod) -> bool:
    """Whether the pod has (anti-)affinity terms, required or preferred: kept in ``pods_with_affinity``."""
    return bool(
        pod.pod_affinity or pod.pod_anti_affinity or pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity
    )


def _remove_from(pods: list[Pod], pod: Pod) -> None:
    i = _index_of(pods, pod)
    if i is not None:
        pods.pop(i)


def _index_of(pods: list[Pod], pod: Pod) -> int | None:
    # The element that is ``pod`` itself, found by a scan in C from the end (a node holds tens of pods, and the
    # planner removes pods hundreds of thousands of times at scale, most often the pod it added last: a move undone).
    i = next(compress(count(), map(is_, reversed(pods), repeat(pod))), None)
    if i is not None:
        return len(pods) - 1 - i
    for i, p in enumerate(pods):
        if p.name == pod.name and p.namespace == pod.namespace:
            return i
    return None


_POD_FIELDS = tuple(f.name for f in fields(Pod) if f.init)
_pod_args = attrgetter(*_POD_FIELDS)
_NODE_NAME = _POD_FIELDS.index("node_name")
_STATUS_REQUESTS = _POD_FIELDS.index("status_requests")


def _rebound(pod: Pod, node_name: str) -> Pod:
    """``dataclasses.replace(pod, node_name=node_name, status_requests=None)`` without its per-call field walk: the
    pod as it starts on another node, counting by its spec (a resize in progress stays with the old pod)."""
    args = list(_pod_args(pod))
    args[_NODE_NAME] = node_name
    args[_STATUS_REQUESTS] = None
    return Pod(*args)


class ClusterSnapshot:
    """Every node's ``NodeInfo`` plus what cross-node predicates need (namespaces, PVs, PVCs, StorageClasses,
    PDBs), and Karpenter's NodePools by name (:mod:`shared.nodepools`; empty on a cluster without Karpenter).
    :attr:`node_pools_problem` says why the NodePools could not be read (``None``: read, or not served at all).
    :attr:`spot_outlook` is the memory of spot reclaims read at the snapshot's time (:mod:`shared.spot_pools`;
    empty: no reclaim remembered, every spot pool alike).

    Pods bound to a node the snapshot does not know are kept in :attr:`unknown_node_pods`; pods with no
    node are :attr:`pending`. Nodes keep their insertion order (the API's list order).
    """

    def __init__(
        self,
        nodes: Iterable[Node] = (),
        pods: Iterable[Pod] = (),
        *,
        pdbs: Iterable[PDB] = (),
        namespaces: Iterable[Namespace] = (),
        pvs: Iterable[PersistentVolume] = (),
        pvcs: Iterable[PersistentVolumeClaim] = (),
        storage_classes: Iterable[StorageClass] = (),
        node_pools: Iterable[NodePool] = (),
        node_pools_problem: str | None = None,
        spot_outlook: PoolOutlook = NO_RECLAIMS,
    ) -> None:
        self.nodes: dict[str, NodeInfo] = {n.name: NodeInfo(n) for n in nodes}
        self.pending: list[Pod] = []
        self.unknown_node_pods: list[Pod] = []
        self.pdbs: list[PDB] = list(pdbs)
        self.namespaces: dict[str, Namespace] = {ns.name: ns for ns in namespaces}
        self.pvs: dict[str, PersistentVolume] = {pv.name: pv for pv in pvs}
        self.pvcs: dict[str, PersistentVolumeClaim] = {c.key: c for c in pvcs}
        self.storage_classes: dict[str, StorageClass] = {c.name: c for c in storage_classes}
        self.node_pools: dict[str, NodePool] = {p.name: p for p in node_pools}
        self.node_pools_problem = node_pools_problem
        self.spot_outlook = spot_outlook
        self.version = 0
        for p in pods:
            self._place(p)

    def _place(self, pod: Pod) -> None:
        if not pod.node_name:
            if not pod.terminal:
                self.pending.append(pod)
            return
        info = self.nodes.get(pod.node_name)
        if info is None:
            self.unknown_node_pods.append(pod)
        else:
            info.add_pod(pod)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, node_name: str) -> NodeInfo:
        return self.nodes[node_name]

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """Labels of a namespace; an unknown one still has ``kubernetes.io/metadata.name``."""
        ns = self.namespaces.get(namespace)
        return ns.labels if ns is not None else {"kubernetes.io/metadata.name": namespace}

    def add_pod(self, pod: Pod, node_name: str | None = None) -> Pod:
        """Bind ``pod`` to ``node_name`` (default: its own ``node_name``); returns the bound pod."""
        if node_name is not None and node_name != pod.node_name:
            pod = _rebound(pod, node_name)
        self.nodes[pod.node_name].add_pod(pod)
        self.version += 1
        return pod

    def remove_pod(self, pod: Pod) -> None:
        self.nodes[pod.node_name].remove_pod(pod)
        self.version += 1

    def put_back(self, info: NodeInfo, saved: Saved) -> None:
        """``info`` (one of its nodes) as :meth:`NodeInfo.saved` saved it, the pods taken out since put back
        (:meth:`NodeInfo.restore`, whose conditions the caller vouches for)."""
        info.restore(saved)
        self.version += 1

    def move_pod(self, pod: Pod, to_node: str) -> Pod:
        """Remove ``pod`` from its node and bind it to ``to_node``; returns the moved pod."""
        self.remove_pod(pod)
        return self.add_pod(pod, to_node)
