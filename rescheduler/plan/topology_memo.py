"""What a :class:`~rescheduler.plan.topology.TopologyIndex` reads from each node's pods, kept between builds.

Building the index reads every pod. The run loop's snapshots hold the very ``Pod`` objects of the previous
cycle until a watch event replaces one, so a :class:`TopologyMemo` kept from one build to the next (inside
the planner's :class:`~rescheduler.plan.candidates.PlanCache`) keeps what was read per node while the node
holds the same objects, and the last index itself, which the next one takes over: only the nodes whose pods
changed are read and indexed again. The index built with a memo answers as the index built without one
(``tests/unit/test_plan_cache.py``, ``tests/unit/test_topology.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from shared.model import Pod, PodAffinityTerm
from shared.selectors import IN, LabelSelector
from shared.snapshot import NodeInfo

__all__ = ["TopologyMemo", "NodePart", "Block", "AntiEntries", "anchor_of", "selectors_of"]


def anchor_of(selector: LabelSelector | None) -> tuple[str, frozenset[str]] | None:
    """An ``In`` requirement of the selector (the one with fewest values): a pod can match the selector
    only if its label ``key`` has one of ``values``. ``None`` if the selector has no ``In``."""
    best = None
    if selector is None:
        return None
    for r in selector.requirements:
        if r.operator == IN and (best is None or len(r.values) < len(best[1])):
            best = (r.key, r.values)
    return best


def selectors_of(pod: Pod) -> Iterable[LabelSelector | None]:
    for t in pod.pod_affinity:
        yield t.selector
    for t in pod.pod_anti_affinity:
        yield t.selector
    for c in pod.topology_spread:
        yield c.selector


class Block(NamedTuple):
    """The pods of one node that a :class:`~rescheduler.plan.topology.TopologyIndex` indexes up front."""

    pods: list[Pod]
    """Those carrying an indexed key, then the other pods with required anti-affinity."""
    offsets: list[int]
    """Per posting: the pod's offset in ``pods``."""
    slots: list[int]
    """Per posting: the memo's number for its ``(namespace, key, value)``."""
    anti_offsets: list[int]
    """Per pod with required anti-affinity: its offset in ``pods``."""


class AntiEntries(NamedTuple):
    """The required anti-affinity terms of one node's pods: anchored ones once per ``(key, value)`` they
    require, the others apart; each with its pod's position among the node's pods with anti-affinity."""

    pod_of: list[int]
    slots: list[int]
    terms: list[PodAffinityTerm]
    general_pod_of: list[int]
    general: list[PodAffinityTerm]


class NodePart:
    """What :class:`TopologyIndex` reads from one node's pods, derived once per list of pods.

    ``pods`` and ``anti`` are the node's pods and its pods with required anti-affinity, in the node's
    order; what is derived from them depends on nothing else but, for :meth:`block`, the indexed keys
    (and the memo numbering the keys, which owns the part).
    """

    __slots__ = ("pods", "anti", "stamp", "_keys", "_key_tuple", "_block", "_where", "_anti_entries")

    def __init__(self, pods: tuple[Pod, ...], anti: tuple[Pod, ...]) -> None:
        self.pods = pods
        self.anti = anti
        self.stamp = 0
        """The :attr:`~shared.snapshot.NodeInfo.stamp` of the node's pods when last compared."""
        self._keys: frozenset[str] | None = None
        self._key_tuple: tuple[str, ...] | None = None
        self._block = Block([], [], [], [])
        self._where: dict[int, int] | None = None
        self._anti_entries: AntiEntries | None = None

    def anchor_keys(self) -> frozenset[str]:
        """The label keys that the ``In`` anchors of the pods' affinity, anti-affinity and spread selectors
        require (what the index keeps posting lists for)."""
        if self._keys is None:
            keys: set[str] = set()
            for p in self.pods:
                if p.pod_affinity or p.pod_anti_affinity or p.topology_spread:
                    for sel in selectors_of(p):
                        a = anchor_of(sel)
                        if a is not None:
                            keys.add(a[0])
            self._keys = frozenset(keys)
        return self._keys

    def block(self, key_tuple: tuple[str, ...], memo: TopologyMemo) -> Block:
        """The pods indexed up front, in order: those carrying one of the keys, then the other pods with
        required anti-affinity; per posting, the pod's offset in the block and the memo's number for its
        ``(namespace, key, value)``; per pod with required anti-affinity, its offset in the block."""
        if self._key_tuple != key_tuple:
            block: list[Pod] = []
            offsets: list[int] = []
            slots: list[int] = []
            slot = memo.posting_slot
            if key_tuple:
                for p in self.pods:
                    labels = p.labels
                    off = -1
                    for k in key_tuple:
                        v = labels.get(k)
                        if v is None:
                            continue
                        if off < 0:
                            off = len(block)
                            block.append(p)
                        offsets.append(off)
                        slots.append(slot((p.namespace, k, v)))
            anti_offsets: list[int] = []
            if self.anti:
                where = {id(p): i for i, p in enumerate(block)}
                for p in self.anti:
                    off = where.get(id(p), -1)
                    if off < 0:
                        off = where[id(p)] = len(block)
                        block.append(p)
                    anti_offsets.append(off)
            self._block = Block(block, offsets, slots, anti_offsets)
            self._key_tuple = key_tuple
            self._where = None
        return self._block

    def offset(self, pod: Pod) -> int | None:
        """The pod's offset in the block (as last computed), ``None`` if it is not in it."""
        where = self._where
        if where is None:
            where = self._where = {id(p): i for i, p in enumerate(self._block[0])}
        return where.get(id(pod))

    def anti_entries(self, memo: TopologyMemo) -> AntiEntries:
        """The terms of the pods with required anti-affinity that select something, in order: those with
        an ``In`` requirement once per ``(key, value)`` it requires (under the memo's number for it), and
        the others; each with its pod's position in ``anti``. Flat lists: few objects for the collector."""
        if self._anti_entries is None:
            slot = memo.anti_slot
            entries = AntiEntries([], [], [], [], [])
            pod_of, slots, terms, general_pod_of, general = entries
            for k, p in enumerate(self.anti):
                for t in p.pod_anti_affinity:
                    if t.selector is None:
                        continue  # matches no pod
                    a = anchor_of(t.selector)
                    if a is None:
                        general_pod_of.append(k)
                        general.append(t)
                    else:
                        for v in a[1]:
                            pod_of.append(k)
                            slots.append(slot((a[0], v)))
                            terms.append(t)
            self._anti_entries = entries
        return self._anti_entries


def _same(kept: Sequence[Pod], now: Sequence[Pod]) -> bool:
    return len(kept) == len(now) and all(map(operator.is_, kept, now))


class TopologyMemo:
    """Per node, the parts of a :class:`TopologyIndex` that only depend on the node's pods, kept from one
    index to the next: for the run loop, whose snapshots hold the very ``Pod`` objects of the previous
    cycle until a watch event replaces one.

    A node's part is reused only while the node holds the same objects in the same order (the same
    :attr:`~shared.snapshot.NodeInfo.stamp`, else compared by identity against a copy of its lists, which also
    keeps the objects alive, so an ``id`` is never reused); a node absent from the snapshot is forgotten. The
    index built with a memo answers as the one built without. Not thread-safe: one index at a time.
    """

    __slots__ = ("_nodes", "_posting_slots", "posting_keys", "_anti_slots", "anti_keys", "index")

    def __init__(self) -> None:
        self.index: object = None
        """The last :class:`~rescheduler.plan.topology.TopologyIndex` built with this memo, which the next one takes
        over (``None``: the next starts anew)."""
        self._nodes: dict[str, NodePart] = {}
        self._posting_slots: dict[tuple[str, str, str], int] = {}
        self.posting_keys: list[tuple[str, str, str]] = []
        """Every ``(namespace, key, value)`` numbered so far, by number."""
        self._anti_slots: dict[tuple[str, str], int] = {}
        self.anti_keys: list[tuple[str, str]] = []
        """Every ``(key, value)`` an anti-affinity term required, by number."""

    def clear(self) -> None:
        self.index = None
        self._nodes = {}
        self._posting_slots = {}
        self.posting_keys = []
        self._anti_slots = {}
        self.anti_keys = []

    def posting_slot(self, key: tuple[str, str, str]) -> int:
        n = self._posting_slots.get(key)
        if n is None:
            n = self._posting_slots[key] = len(self.posting_keys)
            self.posting_keys.append(key)
        return n

    def anti_slot(self, key: tuple[str, str]) -> int:
        n = self._anti_slots.get(key)
        if n is None:
            n = self._anti_slots[key] = len(self.anti_keys)
            self.anti_keys.append(key)
        return n

    def parts(self, infos: Sequence[NodeInfo]) -> list[NodePart]:
        kept = self._nodes
        fresh: dict[str, NodePart] = {}
        out: list[NodePart] = []
        for info in infos:
            part = kept.get(info.name)
            if part is None or part.stamp != info.stamp:
                anti = info.pods_with_required_anti_affinity
                if part is None or not _same(part.pods, info.pods) or not _same(part.anti, anti):
                    part = NodePart(tuple(info.pods), tuple(anti))
                part.stamp = info.stamp
            fresh[info.name] = part
            out.append(part)
        self._nodes = fresh
        return out

    def trim(self, postings: int, anti: int) -> None:
        """Start over when most numbered keys are no longer used (pods replaced over many cycles)."""
        if len(self.posting_keys) > 2 * postings + 4096 or len(self.anti_keys) > 2 * anti + 4096:
            self.clear()
