"""Whether draining an on-demand node is worth its evictions: the expected saving against the cost (docs/worth.md).

Both are in on-demand vCPU-hours. A node's hourly on-demand price is the larger of its allocatable vCPUs and its
allocatable memory in GiB divided by 4 (:func:`node_price`: the usual 4 GiB per vCPU of general-purpose
instances), so a saving and an eviction's cost add up on one scale whatever the provider's prices.

* **Saving**: the node's price times ``1 - worth.spot_price_ratio`` (what moving its load to spot saves an hour)
  times the hours the node is gone, ``max(0, stay - worth.removal_delay)``, where the stay is the mean over the
  node's moves of ``stay_of(target)`` (how long a pod moved to that spot node is expected to stay there before a
  reclaim sends it back), capped at ``worth.horizon``. A node with no pod to move stays gone for the horizon.
* **Cost**: per pod evicted, ``worth.eviction_cost`` plus the pod's requested vCPUs times the time it takes to
  start again, in hours: its start-up time (:attr:`shared.model.Pod.start_up`, else
  ``worth.default_start_up``) plus ``worth.volume_attach_time`` per PersistentVolumeClaim it mounts.
* **Verdict**: worth it when the saving is at least the cost times ``worth.margin``, or always with
  ``worth.enabled`` false.

Pure: the caller passes ``stay_of``; :func:`constant_stay` is ``worth.expected_stay`` for every spot node, and
:func:`pool_stay` (the planner's) lowers it for a node whose spot pool was reclaimed often: the expected stay the
memory of spot reclaims gives its pool (docs/spot-pools.md), never above ``worth.expected_stay``. Capacity
mode weighs a node whose pods wait for spot room with ``worth.expected_stay``: the spot node they would go to does
not exist yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from shared.config import Config, WorthConfig
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import pool_of

__all__ = [
    "StayOf",
    "Worth",
    "WORTH",
    "NOT_WORTH",
    "constant_stay",
    "pool_stay",
    "node_price",
    "restart_seconds",
    "eviction_cost",
    "expected_stay",
    "weigh",
]

WORTH = "worth"
NOT_WORTH = "not-worth-it"
"""The two verdicts, as the plan's table and JSON show them."""

StayOf = Callable[[str], float]
"""Seconds a pod moved to the named spot node is expected to stay there before a reclaim sends it back."""

HOUR = 3600.0
GIB_PER_VCPU = 4
"""Memory that costs as much as one vCPU, in GiB (general-purpose instances)."""
_CLAIM_KINDS = frozenset({"persistentVolumeClaim", "ephemeral"})
"""Volume kinds backed by a PersistentVolumeClaim, detached and attached again when the pod moves."""


def constant_stay(config: WorthConfig) -> StayOf:
    """``worth.expected_stay`` for every spot node."""
    stay = config.expected_stay
    return lambda _target: stay


def pool_stay(snapshot: ClusterSnapshot, config: Config) -> StayOf:
    """The stay on the named spot node: ``worth.expected_stay``, or less when the memory of spot reclaims (the
    snapshot's ``spot_outlook``) expects its pool to be reclaimed sooner. The memory only ever shortens the stay:
    a pool it has seen no reclaim of, or too few for its estimate to fall below ``worth.expected_stay``, is taken at
    ``worth.expected_stay`` (a memory just started has seen too little to promise more)."""
    outlook, cap = snapshot.spot_outlook, config.worth.expected_stay
    if not outlook:
        return constant_stay(config.worth)

    def stay(target: str) -> float:
        info = snapshot.nodes.get(target)
        pool = pool_of(info.node, config.node_classes) if info is not None else None
        return cap if pool is None else min(cap, outlook.stay(pool))

    return stay


@dataclass(frozen=True, slots=True)
class Worth:
    """One drain weighed: ``saving`` and ``cost`` in on-demand vCPU-hours, ``worth`` the verdict, ``stay`` the
    expected seconds on spot it was judged with (capped at the horizon), ``evictions`` the pods it evicts."""

    saving: float
    cost: float
    worth: bool
    stay: float
    evictions: int

    @property
    def verdict(self) -> str:
        """:data:`WORTH` or :data:`NOT_WORTH`."""
        return WORTH if self.worth else NOT_WORTH

    @property
    def text(self) -> str:
        """``saves 16.33 vCPU-h over a 6h stay, 3 eviction(s) cost 0.78 vCPU-h``."""
        return (
            f"saves {self.saving:.2f} vCPU-h over a {_hours(self.stay)} stay, "
            f"{self.evictions} eviction(s) cost {self.cost:.2f} vCPU-h"
        )

    def to_json(self) -> dict[str, float | int | str]:
        return {
            "saving": round(self.saving, 3),
            "cost": round(self.cost, 3),
            "verdict": self.verdict,
            "stay_seconds": round(self.stay),
            "evictions": self.evictions,
        }


def node_price(node: Node) -> float:
    """The node's hourly on-demand price in vCPU-hours: the larger of its allocatable vCPUs and its allocatable
    memory in GiB divided by :data:`GIB_PER_VCPU`."""
    cpu = node.allocatable.get("cpu", 0) / 1000
    memory = node.allocatable.get("memory", 0) / 2**30 / GIB_PER_VCPU
    return max(cpu, memory)


def restart_seconds(pod: Pod, config: WorthConfig) -> float:
    """How long the pod takes to run again once evicted: its start-up time (``worth.default_start_up`` when its
    status does not tell) plus ``worth.volume_attach_time`` per PersistentVolumeClaim it mounts."""
    start_up = pod.start_up if pod.start_up is not None else config.default_start_up
    claims = sum(1 for v in pod.volumes if v.kind in _CLAIM_KINDS)
    return start_up + claims * config.volume_attach_time


def eviction_cost(pod: Pod, config: WorthConfig) -> float:
    """One eviction in vCPU-hours: ``worth.eviction_cost`` plus the pod's requested vCPUs idle while it restarts."""
    return config.eviction_cost + pod.requests.get("cpu", 0) / 1000 * restart_seconds(pod, config) / HOUR


def expected_stay(targets: Iterable[str], stay_of: StayOf, config: WorthConfig) -> float:
    """Mean of ``stay_of`` over the moves' targets (one entry per move), capped at ``worth.horizon``; the horizon
    when nothing moves (nothing can be sent back)."""
    stays = [stay_of(t) for t in targets]
    mean = sum(stays) / len(stays) if stays else config.horizon
    return min(max(mean, 0.0), config.horizon)


def weigh(node: Node, pods: Sequence[Pod], stay: float, config: WorthConfig, cost: float | None = None) -> Worth:
    """Drain ``node`` by evicting ``pods``, expected to stay ``stay`` seconds on spot (:func:`expected_stay` of
    their targets; capped at ``worth.horizon``): is it worth it? ``cost`` is the pods' :func:`eviction_cost` summed
    in order, when the caller keeps it already."""
    stay = min(max(stay, 0.0), config.horizon)
    gone = max(0.0, stay - config.removal_delay) / HOUR
    saving = node_price(node) * (1 - config.spot_price_ratio) * gone
    if cost is None:
        cost = sum(eviction_cost(p, config) for p in pods)
    return Worth(saving, cost, not config.enabled or saving >= cost * config.margin, stay, len(pods))


def _hours(seconds: float) -> str:
    hours = seconds / HOUR
    return f"{hours:.1f}".removesuffix(".0") + "h"
