"""The scheduler extender's decisions: which nodes to drop (``/filter``) and how to score them (``/prioritize``).

Pure over small precomputed values. A node is reduced once — when the node cache sees it, or per request
when the scheduler sends full Node objects — to a :class:`NodeEntry`: its class (:mod:`shared.classes`),
why it is being reclaimed if it is, and its two possible answers already serialised, so a 5,000-name
``/prioritize`` is a dict look-up and a ``bytes.join`` per node.

Per-workload spot ceilings (:mod:`shared.workloads`, the policy the rescheduler keeps too): a pod whose template says
``spotshift.io/max-spot-percent: "70"`` or ``spotshift.io/min-on-demand: "2"`` (names configurable, cluster
defaults in ``spot_ceiling``) gets the spot and on-demand scores *swapped* when one more pod on spot would
break its workload's ceiling. The workload's current split comes from the pod cache (:class:`PodIndex`),
grouping pods by their controller, with a Deployment's ReplicaSets folded into the Deployment by the
``pod-template-hash`` label so a rollout counts as one workload. The cache learns of a binding a few
milliseconds after it happens, so a burst of replicas scheduled back to back may overshoot by the pods in
flight; the rescheduler's plan enforces the same ceiling afterwards. Scores steer, never forbid: a full
on-demand pool still leaves spot feasible.

Spot pools (:mod:`extender.pools`): the node cache learns spot reclaims from its own watch, and a spot node of a
pool reclaimed within ``spot.stability_window`` scores as on-demand, one of a pool reclaimed earlier between the
two; its fragment is rendered again when its pool's score changes, so an answer still costs a look-up per node.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from extender.pools import PoolScores
from extender.reviews import ExtenderFilterResult
from shared.classes import NodeClass, classifier, reclaim_reason
from shared.config import Config, ExtenderConfig, NodeClasses, SpotCeilingConfig
from shared.fit_reasons import ERR_RECLAIMED
from shared.model import Node, Taint
from shared.spot_pools import PoolKey, pool_of
from shared.workloads import SpotCeiling, SpotShare, spot_allowed, spot_ceiling
from shared.workloads import workload_key_of_meta as workload_key

__all__ = [
    "NodeEntry",
    "ExtenderPolicy",
    "SpotShare",
    "PodPlacement",
    "PodIndex",
    "NodeIndex",
    "reduce_node",
    "reduce_pod",
    "workload_key",
    "spot_allowed",
    "filter_names",
    "filter_nodes",
    "prioritize_names",
    "prioritize_nodes",
]

_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class ExtenderPolicy:
    """The extender's part of the configuration."""

    classes: NodeClasses
    scores: ExtenderConfig
    ceiling: SpotCeilingConfig

    @classmethod
    def from_config(cls, config: Config) -> ExtenderPolicy:
        return cls(config.node_classes, config.extender, config.spot_ceiling)

    def score(self, node_class: NodeClass, *, spot_allowed: bool = True) -> int:
        s = self.scores
        if node_class == "spot":
            return s.spot_score if spot_allowed else s.on_demand_score
        if node_class == "on-demand":
            return s.on_demand_score if spot_allowed else s.spot_score
        return s.other_score


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """What the extender needs of one node. ``fragment``/``fragment_swapped`` are serialised HostPriority."""

    name: str
    node_class: NodeClass
    reclaim: str | None
    fragment: bytes
    fragment_swapped: bytes
    pool: PoolKey | None = None
    """The spot pool of a spot node (:func:`shared.spot_pools.pool_of`)."""


def _fragment(name: str, score: int) -> bytes:
    """One serialised ``HostPriority``, allocated at its exact size.

    ``orjson.dumps`` returns its working buffer shrunk in place; thousands of such results kept alive (the
    node cache's fragments, or a join over many names) pinned far more heap than their length, and a
    worker that once answered a flood of unknown names kept gigabytes.
    """
    return b'{"Host":%b,"Score":%d}' % (orjson.dumps(name), score)


def reduce_node(raw: Mapping[str, Any], policy: ExtenderPolicy) -> NodeEntry:
    """A Node (API JSON) to its :class:`NodeEntry`; reads only labels, taints and ``spec.unschedulable``."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    name = meta.get("name") or ""
    labels = meta.get("labels") or {}
    node = Node(
        name=name,
        labels=labels,
        taints=tuple(Taint.from_api(t) for t in spec.get("taints") or ()),
        unschedulable=bool(spec.get("unschedulable")),
    )
    node_class = classifier(policy.classes).node_class(labels)
    reclaim = reclaim_reason(node, policy.classes)
    # A node being reclaimed scores 0 whatever its class: /prioritize may be configured without /filter.
    return NodeEntry(
        name=name,
        node_class=node_class,
        reclaim=reclaim,
        fragment=_fragment(name, 0 if reclaim else policy.score(node_class)),
        fragment_swapped=_fragment(name, 0 if reclaim else policy.score(node_class, spot_allowed=False)),
        pool=pool_of(node, policy.classes) if node_class == "spot" else None,
    )


# --- workloads and their spot share ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodPlacement:
    workload: str
    node: str


def reduce_pod(raw: Mapping[str, Any], ceiling: SpotCeilingConfig | None = None) -> PodPlacement | None:
    """A bound, live pod whose workload may have a spot ceiling, else ``None`` (not worth caching).

    With the cluster defaults off (100 %, 0), only pods carrying a ceiling annotation can matter: their
    siblings come from the same template and carry it too, so the index stays small in a large cluster.
    """
    meta = raw.get("metadata") or {}
    node = (raw.get("spec") or {}).get("nodeName")
    if not node or meta.get("deletionTimestamp") or (raw.get("status") or {}).get("phase") in _TERMINAL:
        return None
    if ceiling is not None and ceiling.default_max_spot_percent >= 100 and ceiling.default_min_on_demand <= 0:
        annotations = meta.get("annotations") or {}
        if (
            ceiling.max_spot_percent_annotation not in annotations
            and ceiling.min_on_demand_annotation not in annotations
        ):
            return None
    workload = workload_key(meta)
    return PodPlacement(workload, node) if workload else None


class NodeIndex:
    """The node cache's store: name → :class:`NodeEntry`, plus name → serialised answer for each score set.

    The two fragment maps let :func:`prioritize_names` answer with one C-level ``map``/``join`` over the
    request's names, and ``reclaimed`` (name → reason, only the nodes being reclaimed) lets
    :func:`filter_names` answer with one C-level set test. Each map is replaced whole or updated by single
    assignments (atomic under the GIL).

    With ``pools`` (:class:`extender.pools.PoolScores`) the index learns spot reclaims from its own watch and a
    spot node's fragment carries its pool's score: when a pool's score changes (a reclaim, or a window running
    out, checked by :meth:`refresh`), the fragments of that pool's nodes are rendered again, under a lock the
    answers do not take.
    """

    def __init__(self, pools: PoolScores | None = None) -> None:
        self.items: dict[str, NodeEntry] = {}
        self.fragments: dict[str, bytes] = {}
        self.fragments_swapped: dict[str, bytes] = {}
        self.reclaimed: dict[str, str] = {}
        self.pools = pools
        self._members: dict[PoolKey, set[str]] = {}
        self._lock = threading.Lock()

    def replace_all(self, items: dict[str, NodeEntry]) -> None:
        fragments = {k: v.fragment for k, v in items.items()}
        swapped = {k: v.fragment_swapped for k, v in items.items()}
        reclaimed = {k: v.reclaim for k, v in items.items() if v.reclaim is not None}
        if self.pools is None:
            self.items, self.fragments, self.fragments_swapped, self.reclaimed = items, fragments, swapped, reclaimed
            return
        with self._lock:
            members: dict[PoolKey, set[str]] = {}
            for k, v in items.items():
                if v.pool is not None:
                    members.setdefault(v.pool, set()).add(k)
            self.pools.relist((k, v.pool, v.reclaim, True) for k, v in items.items() if v.pool is not None)
            for k in (k for pool in self.pools.scored() for k in members.get(pool, ())):
                fragments[k] = self._fragment(items[k])
            self._members = members
            self.items, self.fragments, self.fragments_swapped, self.reclaimed = items, fragments, swapped, reclaimed

    def put(self, key: str, value: NodeEntry) -> None:
        if self.pools is not None:
            self._put_pooled(key, value)
            return
        self.items[key] = value
        self.fragments[key] = value.fragment
        self.fragments_swapped[key] = value.fragment_swapped
        if value.reclaim is not None:
            self.reclaimed[key] = value.reclaim
        else:
            self.reclaimed.pop(key, None)

    def _put_pooled(self, key: str, value: NodeEntry) -> None:
        assert self.pools is not None
        with self._lock:
            before = self.items.get(key)
            if before is not None and before.pool is not None and before.pool != value.pool:
                self._members.get(before.pool, set()).discard(key)
                self.pools.spotter.forget(key)
            self.items[key] = value
            self.fragments_swapped[key] = value.fragment_swapped
            if value.reclaim is not None:
                self.reclaimed[key] = value.reclaim
            else:
                self.reclaimed.pop(key, None)
            changed: set[PoolKey] = set()
            if value.pool is not None:
                self._members.setdefault(value.pool, set()).add(key)
                changed = self.pools.note(key, value.pool, value.reclaim)
            self.fragments[key] = self._fragment(value)
            self._rescore(changed)

    def delete(self, key: str) -> None:
        if self.pools is not None:
            with self._lock:
                gone = self.items.get(key)
                if gone is not None and gone.pool is not None:
                    self._members.get(gone.pool, set()).discard(key)
                self._rescore(self.pools.gone(key))
        self.items.pop(key, None)
        self.fragments.pop(key, None)
        self.fragments_swapped.pop(key, None)
        self.reclaimed.pop(key, None)

    def refresh(self) -> None:
        """Render the fragments again of the pools whose score changed with time (a window ran out); one
        comparison when none did."""
        if self.pools is not None and self.pools.due():
            with self._lock:
                self._rescore(self.pools.update())

    def _fragment(self, entry: NodeEntry) -> bytes:
        if self.pools is None or entry.pool is None or entry.reclaim is not None or entry.node_class != "spot":
            return entry.fragment
        score = self.pools.spot_score(entry.pool)
        return entry.fragment if score == self.pools.scores.spot_score else _fragment(entry.name, score)

    def _rescore(self, pools: Iterable[PoolKey]) -> None:
        for pool in pools:
            for name in self._members.get(pool, ()):
                entry = self.items.get(name)
                if entry is not None:
                    self.fragments[name] = self._fragment(entry)

    def __len__(self) -> int:
        return len(self.items)


class PodIndex:
    """The pod cache's store: bound pods grouped by workload, so a share is O(pods of that workload).

    Writes come from one reflector thread; a reader copies one workload's small dict under the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodPlacement] = {}
        self._by_workload: dict[str, dict[str, str]] = {}

    def replace_all(self, items: dict[str, PodPlacement]) -> None:
        by_workload: dict[str, dict[str, str]] = {}
        for uid, p in items.items():
            by_workload.setdefault(p.workload, {})[uid] = p.node
        with self._lock:
            self._by_uid, self._by_workload = dict(items), by_workload

    def put(self, key: str, value: PodPlacement) -> None:
        with self._lock:
            self._remove(key)
            self._by_uid[key] = value
            self._by_workload.setdefault(value.workload, {})[key] = value.node

    def delete(self, key: str) -> None:
        with self._lock:
            self._remove(key)

    def _remove(self, key: str) -> None:
        old = self._by_uid.pop(key, None)
        if old is not None:
            pods = self._by_workload.get(old.workload)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del self._by_workload[old.workload]

    def nodes_of(self, workload: str) -> list[str]:
        with self._lock:
            return list((self._by_workload.get(workload) or {}).values())

    def __len__(self) -> int:
        return len(self._by_uid)


def share_of(workload: str, pods: PodIndex, nodes: Mapping[str, NodeEntry]) -> SpotShare:
    spot = on_demand = total = 0
    for name in pods.nodes_of(workload):
        entry = nodes.get(name)
        total += 1
        if entry is None:
            continue
        if entry.node_class == "spot":
            spot += 1
        elif entry.node_class == "on-demand":
            on_demand += 1
    return SpotShare(spot, on_demand, total)


def ceilings(pod_meta: Mapping[str, Any], ceiling: SpotCeilingConfig) -> SpotCeiling:
    """``(max spot percent, min on-demand pods)`` for the pod's workload (:func:`shared.workloads.spot_ceiling`)."""
    annotations = pod_meta.get("annotations") or {}
    return spot_ceiling(annotations if isinstance(annotations, Mapping) else {}, ceiling)


# --- filter and prioritize ------------------------------------------------------------------------


def filter_names(names: list[str], nodes: NodeIndex, policy: ExtenderPolicy) -> ExtenderFilterResult:
    """Drop nodes being reclaimed. A name the cache does not know yet passes: the scheduler's view is newer.

    Most of the time no node the scheduler asks about is being reclaimed: the index keeps the names of those
    that are, so the answer is then the request's own list, without a look-up per name.
    """
    check = policy.scores.filter_reclaimed
    if not check or nodes.reclaimed.keys().isdisjoint(names):
        return _filter_result(None, names, {})
    keep: list[str] = []
    failed: dict[str, str] = {}
    entries = nodes.items
    for name in names:
        entry = entries.get(name)
        if entry is not None and entry.reclaim is not None:
            failed[name] = ERR_RECLAIMED
        else:
            keep.append(name)
    return _filter_result(None, keep, failed)


def filter_nodes(node_list: Mapping[str, Any], policy: ExtenderPolicy) -> tuple[ExtenderFilterResult, list[str]]:
    """Full-Node variant: returns the result (``Nodes`` a NodeList of the kept items) and the reclaim reasons."""
    keep: list[Any] = []
    failed: dict[str, str] = {}
    why: list[str] = []
    check = policy.scores.filter_reclaimed
    for raw in node_list.get("items") or ():
        entry = reduce_node(raw, policy) if check else None
        if entry is not None and entry.reclaim is not None:
            failed[entry.name] = ERR_RECLAIMED
            why.append(entry.reclaim)
        else:
            keep.append(raw)
    out = {k: v for k, v in node_list.items() if k != "items"}
    out["items"] = keep
    return _filter_result(out, None, failed), why


def _filter_result(
    nodes: Mapping[str, Any] | None, names: list[str] | None, failed: dict[str, str]
) -> ExtenderFilterResult:
    # Reclaimed nodes go in both maps. FailedAndUnresolvableNodes (kube-scheduler 1.21+; it takes precedence
    # there when a node is in both) keeps preemption from evicting pods on a node that is leaving anyway;
    # FailedNodes is all that 1.20 reads.
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": dict(failed),
        "Error": "",
    }


def prioritize_names(names: Sequence[str], nodes: NodeIndex, *, spot_ok: bool = True) -> bytes:
    """The serialised ``HostPriorityList``; a node the cache does not know (yet) scores 0."""
    nodes.refresh()
    fragments = nodes.fragments if spot_ok else nodes.fragments_swapped
    try:
        return b"[" + b",".join(map(fragments.__getitem__, names)) + b"]"
    except KeyError:
        return b"[" + b",".join(fragments.get(n) or _fragment(n, 0) for n in names) + b"]"


def prioritize_nodes(items: Iterable[Mapping[str, Any]], policy: ExtenderPolicy, *, spot_ok: bool = True) -> bytes:
    """Full-Node variant: classifies each node from its labels; only a node that would score above 0 has its
    taints read, to score it 0 if it is being reclaimed (as :func:`reduce_node` does for the cache)."""
    node_class = classifier(policy.classes).node_class
    score = policy.score
    out = []
    for raw in items:
        meta = raw.get("metadata") or {}
        value = score(node_class(meta.get("labels") or {}), spot_allowed=spot_ok)
        if value and reduce_node(raw, policy).reclaim:
            value = 0
        out.append({"Host": meta.get("name") or "", "Score": value})
    return orjson.dumps(out)
