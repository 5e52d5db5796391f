"""Why an on-demand node stays: a typed record made where the planner finds the node undrainable.

The record carries the kind of obstacle (an :class:`Kind`), the pod it is about (if one) and the particulars;
its :attr:`StayReason.message` is the sentence people read (``pod shop/web-1: PodDisruptionBudget shop/web
allows 0 disruption(s), this node needs 1``) and its :attr:`StayReason.group` is what the CLI's "WHY NODES
STAY" table, the JSON summary and the HTML page count nodes by. Grouping reads the kind, never the sentence,
so rewording a message cannot regroup the table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "Kind",
    "StayReason",
    "HELD_BACK_TEXT",
    "HELD_BACK_REASON",
    "NO_SPOT_NODES_TEXT",
    "NODE_NOT_READY_TEXT",
    "NODE_DO_NOT_DISRUPT_TEXT",
    "PDB_UNKNOWN_POLICY_TEXT",
    "NODEPOOLS_UNREADABLE_TEXT",
    "CONTROLS",
    "control_of",
]


class Kind(enum.Enum):
    """The kinds of reason a node stays; the value is the stable name in JSON."""

    NODE_NOT_READY = "node-not-ready"
    NODE_DO_NOT_DISRUPT = "node-do-not-disrupt"
    """The node carries another tool's do-not-disrupt annotation (``movability.do_not_disrupt_node_annotations``)."""
    NOT_MOVABLE = "pod-not-movable"
    """A pod that must not be moved (:func:`shared.movable.movability`); ``cause`` is the rule's constant."""
    MULTIPLE_PDBS = "multiple-pdbs"
    PDB_BUDGET = "pdb-budget"
    PDB_UNKNOWN_POLICY = "pdb-unknown-policy"
    """A pod that is not Ready under a budget whose ``unhealthyPodEvictionPolicy`` is not one the Eviction API
    rules here know (:mod:`shared.eviction`): the API asks clients not to evict such pods."""
    SPOT_CEILING = "spot-ceiling"
    ON_DEMAND_FLOOR = "on-demand-floor"
    NO_CAPACITY = "no-capacity"
    """The node's pods need more than all spot targets have free together."""
    NO_SPOT_NODES = "no-spot-nodes"
    NO_FIT = "no-fit"
    """A pod fits no spot node; ``cause`` is the scheduler's most frequent reason."""
    HELD_BACK = "held-back"
    LEFT_ALONE = "left-alone"
    """The caller leaves the node alone this cycle (backing off, already marked, cordoned): it is not a
    candidate, so the PodDisruptionBudget allowances and spot room it would take go to other nodes."""
    # The operator's controls (``disruption`` settings, docs/controls.md).
    OUTSIDE_DRAIN_WINDOW = "outside-drain-window"
    """Every budget has a schedule and no window is open: nothing drains until the next one opens."""
    DISRUPTION_BUDGET = "disruption-budget"
    """The node could drain, but the budget in force allows no more nodes draining at once."""
    POD_TOO_YOUNG = "pod-too-young"
    """A pod to move is younger than ``disruption.min_pod_age``: the node waits."""
    TOO_FEW_REPLICAS = "too-few-replicas"
    """A pod's workload has fewer Ready replicas than ``disruption.min_replicas``: the node waits."""
    OUT_OF_SCOPE = "out-of-scope"
    """A pod outside ``disruption.namespaces`` / ``excluded_namespaces`` / ``pod_selector``."""
    JOB_RUNNING = "job-running"
    """A pod of a running Job (``disruption.jobs: block``)."""
    KARPENTER_CONSOLIDATES = "karpenter-consolidates"
    """The node's Karpenter NodePool consolidates toward spot by itself (:mod:`shared.nodepools`): the node is left
    to Karpenter (``karpenter.defer_to_consolidation``)."""
    KARPENTER_UNREADABLE = "karpenter-nodepools-unreadable"
    """The node belongs to a Karpenter NodePool but the NodePools cannot be read (RBAC): whether Karpenter
    consolidates it is unknown, so it is not drained."""
    WAITING_POD = "waiting-pod"
    """A pod waiting for a node could use the room this drain would take, or the node once emptied
    (:mod:`rescheduler.plan.waiting`); ``pod`` names it."""
    NOT_WORTH = "not-worth-it"
    """The node could drain, but its expected saving is less than its evictions cost (:mod:`rescheduler.plan.worth`)."""


_LABELS = {
    Kind.MULTIPLE_PDBS: "selected by more than one PodDisruptionBudget",
    Kind.PDB_BUDGET: "PodDisruptionBudget budget exhausted",
    Kind.PDB_UNKNOWN_POLICY: "not-Ready pod under a PodDisruptionBudget with an unknown unhealthyPodEvictionPolicy",
    Kind.SPOT_CEILING: "per-workload spot ceiling",
    Kind.ON_DEMAND_FLOOR: "per-workload on-demand floor",
    Kind.NO_CAPACITY: "not enough free spot capacity",
    Kind.OUTSIDE_DRAIN_WINDOW: "outside drain window (disruption.budgets)",
    Kind.DISRUPTION_BUDGET: "disruption budget: enough nodes draining at once (disruption.budgets)",
    Kind.POD_TOO_YOUNG: "pod younger than disruption.min_pod_age",
    Kind.TOO_FEW_REPLICAS: "workload has fewer Ready replicas than disruption.min_replicas",
    Kind.OUT_OF_SCOPE: "pod outside the disruption scope (namespaces or pod_selector)",
    Kind.JOB_RUNNING: "pod of a running Job (disruption.jobs: block)",
    Kind.WAITING_POD: "a pending pod could use the room (it is placed first)",
    Kind.NOT_WORTH: "not worth its evictions (worth)",
    Kind.KARPENTER_CONSOLIDATES: "left to Karpenter's consolidation (karpenter.defer_to_consolidation)",
    Kind.KARPENTER_UNREADABLE: "Karpenter node, NodePools unreadable (RBAC needs nodepools.karpenter.sh list)",
}

CONTROLS: dict[Kind, str] = {
    Kind.OUTSIDE_DRAIN_WINDOW: "drain-window",
    Kind.DISRUPTION_BUDGET: "budget",
    Kind.POD_TOO_YOUNG: "min-pod-age",
    Kind.TOO_FEW_REPLICAS: "min-replicas",
    Kind.OUT_OF_SCOPE: "scope",
    Kind.JOB_RUNNING: "job",
    Kind.WAITING_POD: "waiting-pod",
}
"""The kinds that hold a node back on purpose (an operator's control, or a pod waiting for the room), and the
control's name: the label value of the ``spotshift_rescheduler_nodes_held_back`` metric and the subject of the
node's Event."""


def control_of(reason: StayReason) -> str | None:
    """The control holding the node back (:data:`CONTROLS`), or ``None`` for any other reason."""
    return CONTROLS.get(reason.kind)


HELD_BACK_TEXT = (
    "held back: draining it now would keep more nodes from draining (PDB budgets or spot room); "
    "a later cycle can take it"
)
NO_SPOT_NODES_TEXT = "there are no spot nodes that are ready, schedulable and not being reclaimed"
NODE_NOT_READY_TEXT = "node is not ready"
NODE_DO_NOT_DISRUPT_TEXT = 'node is annotated {key}: "true"'
"""A template naming the annotation found."""
PDB_UNKNOWN_POLICY_TEXT = (
    "pod is not Ready and PodDisruptionBudget {pdb} has unhealthyPodEvictionPolicy {policy!r}, "
    "which is not known here: it is not evicted"
)
"""A template naming the budget and its policy."""
NODEPOOLS_UNREADABLE_TEXT = (
    "node of Karpenter NodePool {pool}, and the NodePools cannot be read ({problem}): "
    "left alone rather than drained beside Karpenter's consolidation"
)
"""A template naming the node's NodePool and why the NodePools could not be read."""


@dataclass(frozen=True, slots=True)
class StayReason:
    """Why one node stays: ``kind``, the pod it is about (``namespace/name``, or ``None`` for the node as a
    whole), the particulars (``detail``), and for the kinds grouped finer than by kind alone the ``cause``
    (the movability rule, or the scheduler's most frequent reason)."""

    kind: Kind
    detail: str
    pod: str | None = None
    cause: str | None = None

    @property
    def message(self) -> str:
        """The sentence people read."""
        return f"pod {self.pod}: {self.detail}" if self.pod is not None else self.detail

    @property
    def group(self) -> str:
        """The row of the "why nodes stay" table this reason counts in."""
        label = _LABELS.get(self.kind)
        if label is not None:
            return label
        if self.kind is Kind.NO_FIT and self.cause is not None:
            return "no spot node fits: " + self.cause
        if self.kind is Kind.NOT_MOVABLE and self.cause is not None:
            return self.cause
        return self.detail

    def to_json(self) -> dict[str, str | None]:
        return {"kind": self.kind.value, "pod": self.pod, "detail": self.detail}


HELD_BACK_REASON = StayReason(Kind.HELD_BACK, HELD_BACK_TEXT)
"""A node not drained on purpose: draining it would keep more nodes from draining."""
