"""The greedy packings the planner runs, as data: the order of candidate nodes, the order of a node's pods,
and how a target is chosen.

Each is a value of a small enum, so a strategy is a frozen record that can be compared, hashed and printed,
and the code that runs it matches on the enums (:mod:`rescheduler.plan.placement`). Why several: a
multi-dimensional bin packing with all-or-nothing groups has no single good greedy order; the planner runs
a portfolio from the same start and keeps the plan that drains the most nodes, with pusher's order among
them, so it never drains fewer nodes than pusher/k8s-spot-rescheduler's algorithm would
(docs/architecture.md, "Inside the plan folder"; how the portfolio compares with the exact optimum: bench/README.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "NodeOrder",
    "PodOrder",
    "TargetRule",
    "Strategy",
    "PUSHER",
    "PORTFOLIO",
    "LARGE_PORTFOLIO",
    "RETRIES",
    "NONE",
]


class NodeOrder(enum.Enum):
    """The order candidate on-demand nodes are taken in (ties keep the snapshot's node order)."""

    REQUESTED_CPU = "requested-cpu"
    """Least requested CPU first (pusher's)."""
    SIZE = "size"
    """Normalised CPU plus memory of the pods to move, smallest first."""
    PODS = "pods"
    """Fewest pods to move first (then size)."""
    SCARCITY = "scarcity"
    """Size weighted by how scarce the room its pods can use is."""
    CONFLICTS = "conflicts"
    """Fewest PodDisruptionBudget conflicts with other candidates first, re-ranked as budgets are used; ties
    by size."""
    CONFLICTS_SCARCITY = "conflicts-scarcity"
    """As ``CONFLICTS``, ties by scarcity."""


class PodOrder(enum.Enum):
    """The order a node's pods are placed in, largest first (ties by the pod's name)."""

    CPU = "cpu"
    """CPU request (pusher's)."""
    MEMORY = "memory"
    SIZE = "size"
    """Normalised CPU plus memory."""


class TargetRule(enum.Enum):
    """How a spot node is chosen for a pod among those that take it."""

    FIRST_FIT = "first-fit"
    """Spot nodes by requested CPU, fullest first (pusher's)."""
    BEST_FIT = "best-fit"
    """Least free CPU that fits."""
    BEST_FIT_MEMORY = "best-fit-memory"
    """Least free memory that fits."""
    TIERED = "tiered"
    """Best fit in the least wanted group of spot nodes the pod may use first."""


@dataclass(frozen=True, slots=True)
class Strategy:
    """One greedy packing: the order of candidate nodes, the order of a node's pods, how a target is chosen."""

    name: str
    node_order: NodeOrder
    pod_order: PodOrder
    target: TargetRule
    retry: bool = True
    """When a node's pods do not all fit, try again with the placement rules of :data:`RETRIES`."""


PUSHER = Strategy("pusher", NodeOrder.REQUESTED_CPU, PodOrder.CPU, TargetRule.FIRST_FIT, retry=False)
RETRIES: tuple[tuple[TargetRule, PodOrder], ...] = (
    (TargetRule.BEST_FIT_MEMORY, PodOrder.MEMORY),
    (TargetRule.BEST_FIT, PodOrder.CPU),
)
"""Placement rules tried, in order, for a node whose pods did not all fit by its strategy's rule."""
PORTFOLIO: tuple[Strategy, ...] = (
    Strategy("best-fit", NodeOrder.CONFLICTS, PodOrder.SIZE, TargetRule.BEST_FIT),
    PUSHER,
    Strategy("best-fit-scarcity", NodeOrder.CONFLICTS_SCARCITY, PodOrder.SIZE, TargetRule.TIERED),
    Strategy("best-fit-least-contended", NodeOrder.CONFLICTS, PodOrder.SIZE, TargetRule.TIERED),
    Strategy("best-fit-by-size", NodeOrder.SIZE, PodOrder.SIZE, TargetRule.BEST_FIT),
    Strategy("best-fit-by-cpu", NodeOrder.REQUESTED_CPU, PodOrder.CPU, TargetRule.BEST_FIT),
    Strategy("best-fit-fewest-pods", NodeOrder.PODS, PodOrder.SIZE, TargetRule.BEST_FIT),
    Strategy("first-fit-by-size", NodeOrder.SIZE, PodOrder.SIZE, TargetRule.FIRST_FIT),
)
LARGE_PORTFOLIO: tuple[Strategy, ...] = (PORTFOLIO[0], PUSHER, PORTFOLIO[3])
"""For clusters with many drainable candidates (:data:`rescheduler.plan.search.IMPROVE_MAX_CANDIDATES`), where
each pass costs more: the other strategies drain about as many nodes there, and scarcity weighting costs a
pass of its own."""
NONE = Strategy("none", NodeOrder.SIZE, PodOrder.SIZE, TargetRule.BEST_FIT)
"""Named in a plan's summary when no strategy ran."""
