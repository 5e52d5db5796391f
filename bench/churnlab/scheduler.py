"""kube-scheduler: pending pods in queue order (priority, then age), each filtered by :func:`shared.fit.fits` (and,
with the extender, by its filter) and scored by kube-scheduler's default score plugins that apply here
(``NodeResourcesFit`` least-allocated, ``NodeResourcesBalancedAllocation``, ``NodeAffinity``, ``TaintToleration``;
weights 1, 1, 2, 3) plus the extender's score (weight 5, as ``deploy/scheduler`` sets it); ties broken at random
(seeded), as ``selectHost`` does; a pod that fits nowhere preempts lower-priority pods (spotshift's placeholders)
where that makes room, else is marked ``Unschedulable``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bench.churnlab.books import Books, Obj
from extender.scheduling import ExtenderPolicy, reduce_node
from shared.fit import fits
from shared.model import Node, Pod
from shared.nodeaffinity import preferred_affinity_score
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.taints import count_intolerable_prefer_no_schedule

_UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


class Scheduler:
    """See the module docstring; ``extender``: the extender's policy, ``None`` without the extender."""

    def __init__(self, books: Books, extender: ExtenderPolicy | None) -> None:
        self.books = books
        self.extender = extender
        self.scores: dict[tuple[Any, str], int] = {}
        self.entries: dict[str, tuple[str | None, tuple[bool, int]]] = {}
        """The extender's answer per node name, with the resourceVersion of the Node it was computed from."""
        self.last_pass = -1
        """:meth:`_scheduling_inputs` after the last pass over the pending pods."""

    def step(self) -> None:
        """One pass over the pending pods, unless nothing they depend on changed since the last."""
        b = self.books
        if not b.server.unbound:
            return
        # kube-scheduler tries an unschedulable pod again when something in the cluster changes: with nothing
        # changed since the last pass, every pod still waiting would fail exactly as it did.
        if self._scheduling_inputs() == self.last_pass:
            return
        snap = b.view.snapshot()
        queue = sorted(snap.pending, key=lambda p: (-p.priority, self._created(p), p.key))
        if not queue:
            self.last_pass = self._scheduling_inputs()
            return
        entries = self._extender_entries(snap)
        lowest: list[int] = []  # the lowest priority bound anywhere, found when a pod first needs preemption

        def may_preempt(pod: Pod) -> bool:
            if not lowest:
                lowest.append(min((p.priority for info in snap.nodes.values() for p in info.pods), default=0))
            return pod.priority > lowest[0]

        room = {name: info.free("cpu") for name, info in snap.nodes.items() if not entries or entries[name][0]}
        for pod in queue:
            self._schedule_one(pod, snap, entries, room, may_preempt)
        self.last_pass = self._scheduling_inputs()

    def affinity_score(self, pod: Pod, node: Node) -> int:
        """:func:`shared.nodeaffinity.preferred_affinity_score`, kept per (preferred terms, node): node labels do
        not change here, and the pods of a workload share their terms."""
        if not pod.preferred_affinity:
            return 0
        key = (pod.preferred_affinity, node.name)
        score = self.scores.get(key)
        if score is None:
            score = self.scores[key] = preferred_affinity_score(pod, node)
        return score

    def _scheduling_inputs(self) -> int:
        """A count that changes whenever anything kube-scheduler's filters or scores read changes."""
        log = self.books.server.log
        return sum(len(log[k]) for k in ("nodes", "pods", "persistentvolumes", "persistentvolumeclaims"))

    def _created(self, pod: Pod) -> float:
        book = self.books.pods.get(pod.key)
        return book.created if book is not None else -1.0

    def _extender_entries(self, snap: ClusterSnapshot) -> dict[str, tuple[bool, int]]:
        """The extender's answer per node: (passes its filter, its score 0-10), from its own functions."""
        if self.extender is None:
            return {}
        out = {}
        nodes, known = self.books.server.store["nodes"], self.entries
        for name in snap.nodes:
            raw = nodes[name]
            version = raw["metadata"].get("resourceVersion")
            hit = known.get(name)
            if hit is None or hit[0] != version:
                entry = reduce_node(raw, self.extender)
                score = self.extender.score(entry.node_class) if entry.reclaim is None else 0
                hit = known[name] = (version, (entry.reclaim is None, score))
            out[name] = hit[1]
        return out

    def _feasible(self, pod: Pod, snap: ClusterSnapshot, room: dict[str, int]) -> list[NodeInfo]:
        """The nodes ``pod`` fits, in the snapshot's order; ``room`` holds the free CPU of every node the
        extender's filter passes (CPU first: it rules out most nodes for the price of a lookup)."""
        cpu = pod.node_requests.get("cpu", 0)
        infos = snap.nodes
        return [
            infos[name]
            for name, free in room.items()
            if free >= cpu and not fits(pod, infos[name], snap, first_only=True)
        ]

    def _schedule_one(
        self,
        pod: Pod,
        snap: ClusterSnapshot,
        entries: dict[str, tuple[bool, int]],
        room: dict[str, int],
        may_preempt: Callable[[Pod], bool],
    ) -> None:
        b = self.books
        feasible = self._feasible(pod, snap, room)
        if not feasible and may_preempt(pod):
            feasible = self._preempt(pod, snap, entries)
        if not feasible:
            self._unschedulable(pod)
            return
        best = self._select(pod, feasible, entries)
        snap.add_pod(pod, best.name)
        room[best.name] = snap.nodes[best.name].free("cpu")
        obj = b.server.store["pods"][pod.key]
        obj = {**obj, "spec": {**obj["spec"], "nodeName": best.name}}
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        b.server.put("pods", obj)
        book = b.pods.get(pod.key)
        if book is not None:
            book.bound_at = b.now
            book.node = best.name
            b.starting.add(pod.key)
        self._bound_placeholder(pod.key, obj)

    def _bound_placeholder(self, key: str, obj: Obj) -> None:
        if key not in self.books.pods:  # placeholders are Ready as soon as they run (a pause container)
            obj = {**obj, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
            self.books.server.put("pods", obj)

    def _select(self, pod: Pod, feasible: list[NodeInfo], entries: dict[str, tuple[bool, int]]) -> NodeInfo:
        affinity = [self.affinity_score(pod, info.node) for info in feasible]
        top_affinity = max(affinity, default=0)
        taints = [count_intolerable_prefer_no_schedule(pod, info.node) for info in feasible]
        top_taints = max(taints, default=0)
        cpu = pod.node_requests.get("cpu", 0)
        mem = pod.node_requests.get("memory", 0)
        best: list[NodeInfo] = []
        best_score = -math.inf
        for i, info in enumerate(feasible):
            ac, am = info.allocatable("cpu") or 1, info.allocatable("memory") or 1
            fc = min(1.0, (info.requested.get("cpu", 0) + cpu) / ac)
            fm = min(1.0, (info.requested.get("memory", 0) + mem) / am)
            least = ((1 - fc) * 100 + (1 - fm) * 100) / 2
            balanced = (1 - abs(fc - fm) / 2) * 100
            score = int(least) + int(balanced)
            if top_affinity:
                score += 2 * (100 * affinity[i] // top_affinity)
            score += 3 * (100 - (100 * taints[i] // top_taints if top_taints else 0))
            if entries:
                score += 5 * 10 * entries[info.name][1]
            if score > best_score:
                best, best_score = [info], score
            elif score == best_score:
                best.append(info)
        return best[self.books.rng.randrange(len(best))] if len(best) > 1 else best[0]

    def _preempt(self, pod: Pod, snap: ClusterSnapshot, entries: dict[str, tuple[bool, int]]) -> list[NodeInfo]:
        """kube-scheduler's preemption, for the lower-priority pods here (placeholders): the node where removing
        the fewest of them makes room; the victims are deleted."""
        best: tuple[int, str] | None = None
        for info in snap.nodes.values():
            victims = [p for p in info.pods if p.priority < pod.priority]
            if not victims or (entries and not entries[info.name][0]):
                continue
            for v in victims:
                info.remove_pod(v)
            ok = not fits(pod, info, snap, first_only=True)
            for v in victims:
                info.add_pod(v)
            if ok and (best is None or (len(victims), info.name) < best):
                best = (len(victims), info.name)
        if best is None:
            return []
        info = snap.nodes[best[1]]
        for v in [p for p in info.pods if p.priority < pod.priority]:
            snap.remove_pod(v)
            self.books.server.remove("pods", v.key)
        return [info]

    def _unschedulable(self, pod: Pod) -> None:
        obj = self.books.server.store["pods"][pod.key]
        if (obj.get("status") or {}).get("conditions"):
            return
        obj = {**obj, "status": {"phase": "Pending", "conditions": [_UNSCHEDULABLE]}}
        self.books.server.put("pods", obj)
