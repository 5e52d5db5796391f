"""Pods waiting for a node are planned first: the room they can use is theirs before any move.

A *waiting pod* is one kube-scheduler could not place (Pending, unbound, ``PodScheduled=False/Unschedulable``),
that is not gated (:func:`rescheduler.plan.safety.unschedulable_pods`), not one of spotshift's placeholders and
not expendable (priority below ``movability.expendable_priority_cutoff``: cluster-autoscaler adds no node for such
a pod, and the plan already counts their room as free). They are taken in the scheduling queue's order
(kube-scheduler's PrioritySort: higher priority first, then the older), and each is judged on the cluster as
the pods before it left it:

* it **fits a node now** (every filter, :func:`shared.fit.fits`): the scheduler will place it at its next try.
  On a spot target it is placed there in the simulation, before any move: the moves of the plan cannot take
  that room (the spot node with the most free CPU, as kube-scheduler's LeastAllocated score and the extender's
  spot preference choose). On an on-demand node, that node is *held*: it will not be empty.
* it fits no node now, but **fits an on-demand node once that node's movable pods are gone** (by the node's own
  filters and its resources): emptying the node would make room the pod takes at once, so the drain would be
  undone; every such node is held.
* otherwise (an impossible nodeSelector, a missing claim, more than any node offers, a node of another class
  only) it **holds nothing**: no move takes room it could use.

A held node stays with a :class:`~rescheduler.plan.stay_reasons.StayReason` of kind ``waiting-pod`` naming the pod.
Which drains a spot reservation holds is found by planning once more without the reservations
(:func:`rescheduler.plan.planner.plan`): the nodes drained only then, on moves to a reserved node, are held by
the pods reserved there.

Only the first :data:`WAITING_LIMIT` waiting pods in the queue's order are judged each cycle (the cost is a few
filter passes over the nodes per pod); the others would get room only after those, and hold nothing this cycle
(:attr:`Waiting.unjudged` counts them).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from rescheduler.plan.safety import unschedulable_pods
from rescheduler.plan.stay_reasons import Kind, StayReason
from shared.classes import classifier, reclaim_reason
from shared.config import Config
from shared.fit import fits
from shared.model import PDB, Node, Pod
from shared.movable import is_expendable, movability
from shared.nodeaffinity import check_node_affinity
from shared.nodestate import check_ready, check_unschedulable
from shared.resources import check_resources, exceeds_allocatable, requests_exceed
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT, Switches
from shared.taints import check_taints

__all__ = ["WAITING_LIMIT", "Waiting", "EmptiedCache", "waiting_pods", "reserve", "release"]

WAITING_LIMIT = 200
"""How many waiting pods, in the scheduling queue's order, are judged each cycle."""


@dataclass(slots=True)
class Waiting:
    """What the waiting pods of one snapshot hold."""

    pods: tuple[Pod, ...] = ()
    """The waiting pods, in the scheduling queue's order."""
    placed: list[Pod] = field(default_factory=list)
    """Pods placed on spot targets in the snapshot (as bound there), until :func:`release`."""
    holds: dict[str, StayReason] = field(default_factory=dict)
    """On-demand node → why a waiting pod holds it."""
    unjudged: int = 0
    """Waiting pods beyond :data:`WAITING_LIMIT` in the queue's order: not judged this cycle, they hold nothing."""


def waiting_pods(snapshot: ClusterSnapshot, config: Config) -> list[Pod]:
    """The waiting pods of ``snapshot`` (module docstring), in the scheduling queue's order."""
    cutoff = config.movability.expendable_priority_cutoff
    pods = [p for p in unschedulable_pods(snapshot.pending, config.namespace) if not is_expendable(p, cutoff)]
    pods.sort(key=lambda p: (-p.priority, p.creation_timestamp, p.key))
    return pods


def _node_level(pod: Pod, info: NodeInfo) -> bool:
    """The filters that read the node alone (readiness, cordon, taints, node affinity, and a request beyond the
    node's allocatable, such as a GPU on a node without any): cheap, run first."""
    node = info.node
    return (
        check_ready(node) is None
        and check_unschedulable(pod, node) is None
        and check_taints(pod, node) is None
        and check_node_affinity(pod, node) is None
        and not exceeds_allocatable(pod, node)
    )


ANSWERS_KEPT = 4 * WAITING_LIMIT
"""At most this many waiting pods' answers are kept per node (the pods that stopped waiting go when it is full)."""


class EmptiedCache:
    """What the waiting pods' judgments read of each node alone, kept from one cycle to the next: the watch-backed
    state hands each cycle the previous one's ``Node`` and ``Pod`` objects until an event replaces one.

    Per on-demand node, the node as it would be with its movable pods gone, while the node is the same ``Node``
    object holding the very same ``Pod`` objects and the configuration and the PodDisruptionBudgets' selection are
    the same (movability reads both); per node and waiting pod (the same objects), whether the pod passes the node's
    own filters (:func:`_node_level`), and whether it fits the emptied node (:func:`_fits_emptied`), under the same
    kube-scheduler rules. Nodes absent from a cycle are forgotten."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[Node, tuple[Pod, ...], NodeInfo | None, dict[int, tuple[Pod, bool]]]] = {}
        self._level: dict[str, tuple[Node, dict[int, tuple[Pod, bool]]]] = {}
        self._config: Config | None = None
        self._pdbs: tuple[object, ...] = ()
        self._switches: Switches | None = None
        self._checked: set[str] = set()
        """The on-demand nodes whose entry was checked against the snapshot in this cycle (their pods do not change
        while the waiting pods are judged: only spot nodes get pods placed)."""

    def begin(self, config: Config, pdbs: Sequence[PDB], switches: Switches, nodes: Collection[str]) -> None:
        """Forget everything when the configuration, the budgets' selection or the rules changed, and the nodes
        that are gone."""
        sig = tuple((b.namespace, b.name, b.selector) for b in pdbs)
        if config != self._config or sig != self._pdbs or switches != self._switches:
            self._kept.clear()
            self._level.clear()
            self._config, self._pdbs, self._switches = config, sig, switches
        for kept in (self._kept, self._level):
            for name in [name for name in kept if name not in nodes]:
                del kept[name]
        self._checked = set()

    def _entry(
        self, info: NodeInfo, config: Config, pdbs: Sequence[PDB]
    ) -> tuple[Node, tuple[Pod, ...], NodeInfo | None, dict[int, tuple[Pod, bool]]]:
        name = info.name
        kept = self._kept.get(name)
        if kept is not None and name in self._checked:
            return kept
        self._checked.add(name)
        pods = info.pods
        if kept is not None and kept[0] is info.node and _same(kept[1], pods):
            return kept
        staying = [p for p in pods if not movability(p, config, pdbs).moves]
        emptied = NodeInfo(info.node, staying) if len(staying) < len(pods) else None
        kept = self._kept[name] = (info.node, tuple(pods), emptied, {})
        return kept

    def emptied(self, info: NodeInfo, config: Config, pdbs: Sequence[PDB]) -> NodeInfo | None:
        """``info`` with its movable pods gone (``None``: it has none)."""
        return self._entry(info, config, pdbs)[2]

    def fits_emptied(self, pod: Pod, info: NodeInfo, cluster: _Cluster, switches: Switches) -> bool:
        """:func:`_node_level` and :func:`_fits_emptied` of ``pod`` on ``info``, kept with the node's entry."""
        answers = self._entry(info, cluster.config, cluster.snapshot.pdbs)[3]
        seen = answers.get(id(pod))
        if seen is not None and seen[0] is pod:
            return seen[1]
        fits = self.node_level(pod, info) and _fits_emptied(pod, info, cluster, switches)
        if len(answers) >= ANSWERS_KEPT:
            answers.clear()
        answers[id(pod)] = (pod, fits)  # the pod is kept with its answer: its id is not reused meanwhile
        return fits

    def node_level(self, pod: Pod, info: NodeInfo) -> bool:
        """:func:`_node_level`, kept per node (the same ``Node`` object) and pod."""
        kept = self._level.get(info.name)
        if kept is None or kept[0] is not info.node:
            kept = self._level[info.name] = (info.node, {})
        answers = kept[1]
        seen = answers.get(id(pod))
        if seen is not None and seen[0] is pod:
            return seen[1]
        ok = _node_level(pod, info)
        if len(answers) >= ANSWERS_KEPT:
            answers.clear()
        answers[id(pod)] = (pod, ok)
        return ok


def _same(kept: Sequence[Pod], now: Sequence[Pod]) -> bool:
    return len(kept) == len(now) and all(map(operator.is_, kept, now))


class _ByFreeCpu:
    """Nodes sorted by free CPU, most first: the nodes with at least some CPU free are a prefix."""

    def __init__(self, infos: Iterable[NodeInfo], free: Callable[[NodeInfo], int]) -> None:
        self.free = free
        self.order = sorted(infos, key=lambda info: (-free(info), info.name))
        self._having: dict[tuple[tuple[str, int], ...], list[NodeInfo]] = {}

    def with_cpu(self, cpu: int, others: tuple[tuple[str, int], ...] = ()) -> Iterator[NodeInfo]:
        """The nodes with ``cpu`` free, in order; with ``others`` (requests of other resources than cpu and memory),
        only those whose allocatable has them (:func:`shared.resources.requests_exceed`: no other node takes the
        pod, whatever runs there)."""
        order = self.order
        if others:
            having = self._having.get(others)
            if having is None:
                having = self._having[others] = [i for i in order if not requests_exceed(others, i.node.allocatable)]
            order = having
        for info in order:
            if self.free(info) < cpu:
                return
            yield info


class _Cluster:
    """The snapshot's nodes by class, as the waiting pods are judged against them."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: Config,
        exclude: Mapping[str, object],
        cache: EmptiedCache,
        switches: Switches,
    ) -> None:
        self.snapshot, self.config, self.cache = snapshot, config, cache
        cache.begin(config, snapshot.pdbs, switches, snapshot.nodes)
        c = classifier(config.node_classes)
        spot: list[NodeInfo] = []
        on_demand: list[NodeInfo] = []
        other: list[NodeInfo] = []
        for info in snapshot:
            cls = c.node_class(info.node.labels)
            if cls == "spot" and reclaim_reason(info.node, config.node_classes) is None:
                spot.append(info)
            elif cls == "on-demand" and info.name not in exclude:
                on_demand.append(info)
            else:
                other.append(info)
        self.spot, self.on_demand, self.other = (_ByFreeCpu(x, _free_cpu) for x in (spot, on_demand, other))
        self.empty_room = _ByFreeCpu(on_demand, lambda info: info.allocatable("cpu"))
        self.nowhere: set[tuple[object, ...]] = set()
        """Signatures (:func:`_signature`) of the pods judged to fit no node now."""
        """On-demand nodes by allocatable CPU: the room an emptied node could offer at most."""

    def emptied(self, info: NodeInfo) -> NodeInfo | None:
        return self.cache.emptied(info, self.config, self.snapshot.pdbs)

    def placed_on_spot(self) -> None:
        self.spot = _ByFreeCpu(self.spot.order, _free_cpu)


def _free_cpu(info: NodeInfo) -> int:
    return info.free("cpu")


def reserve(
    snapshot: ClusterSnapshot,
    config: Config,
    *,
    exclude: Mapping[str, object] | None = None,
    switches: Switches = CURRENT,
    cache: EmptiedCache | None = None,
) -> Waiting:
    """Judge every waiting pod of ``snapshot`` (module docstring): place those that fit a spot target there (the
    snapshot is changed: :func:`release` undoes it) and say which on-demand nodes they hold. ``exclude``: the
    on-demand nodes the caller leaves alone anyway (no need to hold them). ``cache`` (kept by the caller between
    cycles) spares working out again which pods of an unchanged node would move."""
    pods = waiting_pods(snapshot, config)
    waiting = Waiting(tuple(pods))
    if not pods:
        return waiting
    cluster = _Cluster(snapshot, config, exclude or {}, cache if cache is not None else EmptiedCache(), switches)
    waiting.unjudged = max(0, len(pods) - WAITING_LIMIT)
    for pod in pods[:WAITING_LIMIT]:
        _judge(pod, cluster, switches, waiting)
    return waiting


def _fitting(pod: Pod, nodes: _ByFreeCpu, cluster: _Cluster, switches: Switches) -> Iterator[NodeInfo]:
    """The nodes ``pod`` fits now, most free CPU first: only those with its CPU free are looked at, memory next,
    then the node's own filters, then all of them."""
    cpu, memory = pod.node_requests.get("cpu", 0), pod.node_requests.get("memory", 0)
    snapshot, node_level = cluster.snapshot, cluster.cache.node_level
    return (
        info
        for info in nodes.with_cpu(cpu, _others(pod))
        if info.free("memory") >= memory
        and node_level(pod, info)
        and not check_resources(pod, info, switches=switches)
        and not fits(pod, info, snapshot, first_only=True, switches=switches)
    )


def _others(pod: Pod) -> tuple[tuple[str, int], ...]:
    """The pod's positive requests of other resources than cpu and memory, sorted."""
    requests = pod.requests
    if len(requests) <= 2 and all(name in ("cpu", "memory") for name in requests):
        return ()
    return tuple(sorted((n, v) for n, v in requests.items() if v > 0 and n not in ("cpu", "memory")))


def _best(found: Iterator[NodeInfo]) -> NodeInfo | None:
    """Of the nodes :func:`_fitting` yields, the one with the most free CPU, then memory (the first of equals): as
    they come most free CPU first, the look ends at the first node with less CPU free than the best."""
    best: NodeInfo | None = None
    key = (0, 0)
    for info in found:
        mine = (info.free("cpu"), info.free("memory"))
        if best is None or mine > key:
            best, key = info, mine
        elif mine[0] < key[0]:
            break
    return best


def _judge(pod: Pod, cluster: _Cluster, switches: Switches, waiting: Waiting) -> None:
    """Place or hold for one waiting pod, on the snapshot as the pods before it left it. A pod made from the same
    template as one judged before that fitted nowhere fits nowhere either (the room only shrank): its answer is
    that one's."""
    sig = _signature(pod)
    if sig in cluster.nowhere:
        return
    snapshot = cluster.snapshot
    best = _best(_fitting(pod, cluster.spot, cluster, switches))
    if best is not None:
        waiting.placed.append(snapshot.add_pod(pod, best.name))
        cluster.placed_on_spot()
        return
    best = _best(_fitting(pod, cluster.on_demand, cluster, switches))
    if best is not None:
        _hold(waiting, best.name, pod, "would be scheduled on this node at its next try")
        return
    if next(_fitting(pod, cluster.other, cluster, switches), None) is not None:
        return
    cluster.nowhere.add(sig)
    cpu, memory = pod.node_requests.get("cpu", 0), pod.node_requests.get("memory", 0)
    for info in cluster.empty_room.with_cpu(cpu, _others(pod)):
        if info.name in waiting.holds or info.allocatable("memory") < memory:
            continue  # a node already held stays held: the first pod in the queue's order is named
        if cluster.cache.fits_emptied(pod, info, cluster, switches):
            _hold(waiting, info.name, pod, "waits for room and could use this node once it is emptied")


def _signature(pod: Pod) -> tuple[object, ...]:
    """What the filters read of a pod, as far as the pods of one controller share it."""
    owner = pod.controller.uid if pod.controller is not None and pod.controller.uid else pod.key
    return (pod.namespace, owner, tuple(sorted(pod.node_requests.items())), pod.priority)


def _hold(waiting: Waiting, node: str, pod: Pod, text: str) -> None:
    if node not in waiting.holds:
        waiting.holds[node] = StayReason(Kind.WAITING_POD, f"pending pod {pod.key} {text}", pod=pod.key)


def _fits_emptied(pod: Pod, info: NodeInfo, cluster: _Cluster, switches: Switches) -> bool:
    """Whether ``pod`` would fit ``info`` by the node's own filters (the caller's) and its resources once the
    node's movable pods are gone. The filters that read the whole cluster (inter-pod affinity, topology spread,
    volumes) are not asked: a node is held whenever the pod could use it by what the node itself offers, at worst
    one more node held than needed, and the cost stays that of the node's own pods."""
    emptied = cluster.emptied(info)
    if emptied is None:
        return False
    cpu, memory = pod.node_requests.get("cpu", 0), pod.node_requests.get("memory", 0)
    if emptied.free("cpu") < cpu or emptied.free("memory") < memory:
        return False
    return not check_resources(pod, emptied, switches=switches)


def release(snapshot: ClusterSnapshot, waiting: Waiting) -> None:
    """Take the pods :func:`reserve` placed out of the snapshot again."""
    for p in reversed(waiting.placed):
        snapshot.remove_pod(p)
    waiting.placed.clear()
