"""Spot pools and the memory of their recent reclaims.

A cloud reclaims spot capacity per **pool**, not per node: the instances of one type in one zone (AWS's "Spot
capacity pool", GCP's and Azure's alike), launched by one node group. A pod moved onto a node of a pool reclaimed
a minute ago is likely moved again soon; a placeholder asking that pool for capacity is likely answered by a node
that is taken back soon. So spotshift remembers, per pool, when it was last reclaimed.

**The pool of a node** (:func:`pool_of`) is only defined for spot nodes (:func:`shared.classes.is_spot`):
``(node group, instance type, zone)`` as a :class:`PoolKey`.

* the node group is named by the first of :data:`GROUP_LABELS` the node carries: Karpenter's
  ``karpenter.sh/nodepool``, EKS managed node groups' ``eks.amazonaws.com/nodegroup``, GKE's
  ``cloud.google.com/gke-nodepool``, AKS's ``kubernetes.azure.com/agentpool``; a node with none of them has the
  group ``""`` (its pool is then its instance type and zone);
* the instance type is ``node.kubernetes.io/instance-type`` (``beta.kubernetes.io/instance-type`` on nodes that
  carry only the deprecated label), the zone ``topology.kubernetes.io/zone`` (``failure-domain.beta.kubernetes.io/
  zone``); a missing one is ``""``.

**What counts as a reclaim** (:class:`ReclaimSpotter`): a spot node that holds workload pods (any pod but
DaemonSet and mirror pods) and is either first seen carrying a reclaim signal (:func:`shared.classes.reclaim_reason`)
or gone (deleted) without one having been seen. Each node counts once. Not counted:

* nodes already there, signal or not, when the spotter first looks (a restarted process would count them again:
  the memory it inherits already holds them);
* a node marked by cluster-autoscaler's own ``ToBeDeletedByClusterAutoscaler`` taint, and its deletion: the
  autoscaler removes that node on purpose (scale down), the cloud takes nothing back;
* an empty node (no workload pods) that ends: autoscalers remove empty nodes on purpose, and nothing placed
  there lost anything. Where the pods are not known (the extender watches nodes only) every node counts. A
  cordoned node (cordoning is a reclaim signal) counts with the pods it held when last seen: a node termination
  handler cordons a noticed spot node and drains it before the cloud deletes it, and a look may come after the
  drain, the cordon's watch event reaching the process after those of its pods.

**The memory** (:class:`ReclaimMemory`) keeps, per pool, the times of its reclaims within ``memory`` seconds
(``spot.memory``), at most :data:`RECLAIMS_PER_POOL` of them (the most recent), for at most :data:`MAX_POOLS`
pools (the most recently reclaimed). A pool is **unsettled** within ``stability_window`` seconds
(``spot.stability_window``) of its last reclaim. Its **expected stay** is what a pod placed on it now is expected
to get before a reclaim: with ``k`` reclaims within the memory ``M``, reclaims are taken as a Poisson process of
rate ``(k + 1) / M`` (one reclaim added as a prior, so a pool never reclaimed gets ``M``, not infinity, and one
reclaimed once gets half of it), whose expected time to the next event is ``M / (k + 1)``, capped at ``M``. The
estimate is coarse on purpose: it ranks pools (steadier first) and gives another part of the product a figure to
weigh a move's worth with; it does not predict a reclaim.

The memory travels as compact JSON (:meth:`ReclaimMemory.to_json`, :data:`MAX_JSON_BYTES` at most): the
rescheduler keeps it in an annotation of its leader-election Lease, so a new leader inherits it.

Pure: times are passed in (Unix seconds, or a simulation's clock), nothing is read from the world.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.classes import RECLAIM_CLUSTER_AUTOSCALER, is_spot, reclaim_reason
from shared.config import NodeClasses
from shared.model import Node, Pod
from shared.movable import is_daemonset_pod, is_mirror_pod

__all__ = [
    "GROUP_LABELS",
    "INSTANCE_TYPE_LABELS",
    "ZONE_LABELS",
    "RECLAIMS_PER_POOL",
    "MAX_POOLS",
    "MAX_JSON_BYTES",
    "PoolKey",
    "PoolOutlook",
    "ReclaimMemory",
    "ReclaimSpotter",
    "Sighting",
    "pool_of",
    "holds_workload",
]

GROUP_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)
"""The node-group labels the providers put on nodes, in the order they are looked for."""
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
RECLAIMS_PER_POOL = 16
"""At most this many reclaim times kept per pool (the most recent)."""
MAX_POOLS = 128
"""At most this many pools remembered (those reclaimed most recently)."""
MAX_JSON_BYTES = 24 * 1024
"""The JSON form stays below this (an annotation's value is limited to 256 KiB for all of an object's annotations
together); the pools reclaimed longest ago are left out to keep it there."""
_SEP = "|"  # in neither a label key nor a label value


@dataclass(frozen=True, slots=True, order=True)
class PoolKey:
    """A spot pool: the node group (its label and value; both ``""`` without one), instance type and zone.

    :attr:`text` is its stable text form, ``karpenter.sh/nodepool=spot|m5.large|us-east-1a`` (``|m5.large|
    us-east-1a`` without a group), read back by :meth:`parse`."""

    group_label: str
    group: str
    instance_type: str
    zone: str

    @property
    def text(self) -> str:
        group = f"{self.group_label}={self.group}" if self.group_label else ""
        return _SEP.join((group, self.instance_type, self.zone))

    @classmethod
    def parse(cls, text: str) -> PoolKey:
        """The key of :attr:`text`; ``ValueError`` when ``text`` is not one."""
        parts = text.split(_SEP)
        if len(parts) != 3:
            raise ValueError(f"not a spot pool: {text!r}")
        group, instance_type, zone = parts
        label, _, value = group.partition("=")
        return cls(label, value, instance_type, zone)

    def __str__(self) -> str:
        return self.text


def _first(labels: Mapping[str, str], keys: Iterable[str]) -> tuple[str, str]:
    for key in keys:
        value = labels.get(key)
        if value is not None:
            return key, value
    return "", ""


def pool_of(node: Node, classes: NodeClasses) -> PoolKey | None:
    """The spot pool of ``node``, ``None`` when it is not a spot node (see the module docstring)."""
    if not is_spot(node, classes):
        return None
    labels = node.labels
    group_label, group = _first(labels, GROUP_LABELS)
    return PoolKey(group_label, group, _first(labels, INSTANCE_TYPE_LABELS)[1], _first(labels, ZONE_LABELS)[1])


def holds_workload(pods: Iterable[Pod]) -> bool:
    """Whether ``pods`` (a node's) hold a pod other than a DaemonSet or mirror pod."""
    return any(not (is_daemonset_pod(p) or is_mirror_pod(p)) for p in pods)


# --- the memory ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolOutlook:
    """The memory read at one time: what the planner and the placeholders judge pools by. Empty (the default)
    when no reclaim is remembered: then every pool is alike and nothing is changed.

    ``stays`` holds the expected stay of every remembered pool (sorted by pool); any other pool has
    ``default_stay``. Frozen and comparable, so a plan made from it can be reused while it is equal."""

    unsettled: frozenset[PoolKey] = frozenset()
    stays: tuple[tuple[PoolKey, float], ...] = ()
    default_stay: float = math.inf

    def __bool__(self) -> bool:
        return bool(self.stays or self.unsettled)

    def stay(self, pool: PoolKey) -> float:
        """The expected stay of ``pool`` (seconds)."""
        for key, seconds in self.stays:
            if key == pool:
                return seconds
        return self.default_stay


class ReclaimMemory:
    """Per pool, the times of its recent reclaims (see the module docstring). ``memory`` and
    ``stability_window`` are seconds (``spot.memory``, ``spot.stability_window``); times are whatever clock the
    caller keeps (Unix seconds in the rescheduler), stored to the second."""

    def __init__(self, memory: float, stability_window: float, *, per_pool: int = RECLAIMS_PER_POOL) -> None:
        self.memory = memory
        self.stability_window = stability_window
        self.per_pool = per_pool
        self._times: dict[PoolKey, list[int]] = {}

    def __len__(self) -> int:
        return len(self._times)

    def pools(self) -> list[PoolKey]:
        return sorted(self._times)

    def times(self, pool: PoolKey) -> tuple[int, ...]:
        return tuple(self._times.get(pool, ()))

    def record(self, pool: PoolKey, at: float, count: int = 1) -> None:
        """Remember ``count`` reclaims of ``pool`` at ``at`` (nodes reclaimed together count one each)."""
        times = self._times.setdefault(pool, [])
        times.extend([int(at)] * count)
        times.sort()
        del times[: -self.per_pool]
        self._bound()

    def merge(self, other: ReclaimMemory) -> None:
        """Add the reclaims ``other`` remembers that this memory does not: of those at one time, as many as the
        memory with more of them holds (a memory merged with itself, or with an older copy of itself, is
        unchanged)."""
        for pool, times in other._times.items():
            mine = Counter(self._times.get(pool, ()))
            for t, n in sorted(Counter(times).items()):
                if n > mine[t]:
                    self.record(pool, t, n - mine[t])

    def forget(self, now: float) -> None:
        """Drop the reclaims older than ``memory``, and the pools left without any."""
        horizon = now - self.memory
        for pool in list(self._times):
            kept = [t for t in self._times[pool] if t > horizon]
            if kept:
                self._times[pool] = kept
            else:
                del self._times[pool]

    def _bound(self) -> None:
        if len(self._times) > MAX_POOLS:
            for pool in sorted(self._times, key=lambda p: (self._times[p][-1], p))[: len(self._times) - MAX_POOLS]:
                del self._times[pool]

    def _recent(self, pool: PoolKey, now: float) -> list[int]:
        horizon = now - self.memory
        return [t for t in self._times.get(pool, ()) if horizon < t <= now]

    def last_reclaim(self, pool: PoolKey, now: float) -> float | None:
        recent = self._recent(pool, now)
        return float(recent[-1]) if recent else None

    def unsettled(self, pool: PoolKey, now: float) -> bool:
        """Whether ``pool`` was reclaimed within ``stability_window`` before ``now``."""
        last = self.last_reclaim(pool, now)
        return last is not None and now - last < self.stability_window

    def rate(self, pool: PoolKey, now: float) -> float:
        """Reclaims per hour over the memory (``0.0`` for a pool never reclaimed within it)."""
        return len(self._recent(pool, now)) * 3600.0 / self.memory

    def expected_stay(self, pool: PoolKey, now: float) -> float:
        """Seconds a pod placed on ``pool`` at ``now`` is expected to stay before a reclaim: ``memory / (k + 1)``
        with ``k`` its reclaims within the memory, at most ``memory`` (see the module docstring)."""
        return min(self.memory, self.memory / (len(self._recent(pool, now)) + 1))

    def next_change(self, now: float) -> float:
        """When, after ``now``, the :meth:`outlook` changes without a new reclaim: a pool settles (its window runs
        out) or a reclaim leaves the memory; ``math.inf`` when never."""
        at = math.inf
        for times in self._times.values():
            if times[-1] + self.stability_window > now:
                at = min(at, times[-1] + self.stability_window)
            if times[0] + self.memory > now:
                at = min(at, times[0] + self.memory)
        return at

    def outlook(self, now: float) -> PoolOutlook:
        """The memory read at ``now`` (:class:`PoolOutlook`)."""
        pools = [p for p in sorted(self._times) if self._recent(p, now)]
        return PoolOutlook(
            unsettled=frozenset(p for p in pools if self.unsettled(p, now)),
            stays=tuple((p, self.expected_stay(p, now)) for p in pools),
            default_stay=self.memory,
        )

    # ---- JSON ---------------------------------------------------------------------------------------------------

    def to_json(self) -> str:
        """``{"v":1,"pools":{"<pool text>":[t, ...]}}``, compact, below :data:`MAX_JSON_BYTES` (the pools reclaimed
        longest ago are left out when it would not be)."""
        pools = sorted(self._times, key=lambda p: (-self._times[p][-1], p))
        while True:
            text = json.dumps({"v": 1, "pools": {p.text: self._times[p] for p in sorted(pools)}}, separators=(",", ":"))
            if len(text.encode()) < MAX_JSON_BYTES or not pools:
                return text
            pools = pools[: max(0, len(pools) - max(1, len(pools) // 8))]

    @classmethod
    def from_json(cls, text: str, memory: float, stability_window: float) -> ReclaimMemory:
        """The memory :meth:`to_json` wrote; ``ValueError`` when ``text`` is not such a document."""
        out = cls(memory, stability_window)
        try:
            doc = json.loads(text)
            pools = doc["pools"] if isinstance(doc, dict) and doc.get("v") == 1 else None
            if not isinstance(pools, dict):
                raise ValueError("not a spot reclaim memory")
            for key, times in pools.items():
                pool = PoolKey.parse(key)
                for t in times:
                    if isinstance(t, bool) or not isinstance(t, int | float):
                        raise ValueError(f"not a time: {t!r}")
                    out.record(pool, t)
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"not a spot reclaim memory: {e}") from None
        return out


Sighting = tuple[str, PoolKey, str | None, bool]
"""One spot node as seen: its name, its pool, its reclaim signal (``None``: none) and whether it holds workload
pods."""


class ReclaimSpotter:
    """Tells reclaims from the spot nodes seen (see the module docstring for what counts): whole lists
    (:meth:`observe`, :meth:`relist`) or one change at a time (:meth:`note`, :meth:`gone`, for a watch). Keeps one
    entry per spot node; the first list only learns what is there."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[PoolKey, bool, bool]] = {}
        """Spot node → (its pool, whether its end was seen already (counted or not to be counted), whether it held
        workload pods when last seen)."""
        self._started = False

    def observe(
        self, nodes: Iterable[Node], classes: NodeClasses, occupied: Mapping[str, bool] | None = None
    ) -> list[PoolKey]:
        """The pools reclaimed since the last observation, one entry per reclaimed node. ``nodes`` is every node
        there is now; ``occupied`` says which hold workload pods (:func:`holds_workload`), ``None`` when that is
        not known (then every node counts as occupied)."""
        sightings: list[Sighting] = []
        for node in nodes:
            pool = pool_of(node, classes)
            if pool is not None:
                busy = True if occupied is None else occupied.get(node.name, False)
                if not busy and node.unschedulable:  # drained while cordoned: what it held counts (see above)
                    before = self._seen.get(node.name)
                    busy = before is not None and before[2]
                sightings.append((node.name, pool, reclaim_reason(node, classes), busy))
        return self.relist(sightings)

    def relist(self, sightings: Iterable[Sighting]) -> list[PoolKey]:
        """:meth:`observe` of the spot nodes already reduced to sightings."""
        out: list[PoolKey] = []
        names: set[str] = set()
        for sighting in sightings:
            names.add(sighting[0])
            pool = self.note(*sighting)
            if pool is not None:
                out.append(pool)
        for name in [n for n in self._seen if n not in names]:
            pool = self.gone(name)
            if pool is not None:
                out.append(pool)
        self._started = True
        return out

    def note(self, name: str, pool: PoolKey, why: str | None, busy: bool = True) -> PoolKey | None:
        """One spot node as seen now; its pool when this sighting is a reclaim."""
        before = self._seen.get(name)
        ended = before is not None and before[1]
        counted = None
        if why is not None and not ended:
            ended = True
            if self._started and why != RECLAIM_CLUSTER_AUTOSCALER and busy:
                counted = pool
        self._seen[name] = (pool, ended, busy)
        return counted

    def gone(self, name: str) -> PoolKey | None:
        """The node ``name`` was deleted; its pool when that is a reclaim."""
        before = self._seen.pop(name, None)
        if before is None or not self._started:
            return None
        pool, ended, busy = before
        return pool if not ended and busy else None

    def forget(self, name: str) -> None:
        """The node ``name`` is no spot node any more (its labels changed): not a reclaim when it goes."""
        self._seen.pop(name, None)
