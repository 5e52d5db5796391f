"""Karpenter's NodePools (``karpenter.sh/v1``, cluster-scoped ``nodepools``) and whether one consolidates its nodes
toward spot on its own.

Karpenter labels every node it launches with ``karpenter.sh/nodepool=<name>``. A NodePool whose disruption settings
let Karpenter replace an under-used on-demand node by a cheaper spot one does, by itself, what the rescheduler
would: two controllers draining the same nodes, or placeholders asking for spot room that Karpenter's consolidation
takes away again, only add disruption. With ``karpenter.defer_to_consolidation`` (the default) the planner leaves
such nodes to Karpenter (:data:`rescheduler.plan.stay_reasons.Kind.KARPENTER_CONSOLIDATES`).

A NodePool consolidates toward spot (:func:`consolidation_toward_spot`) when all of these hold:

* it is not static: a NodePool with ``spec.replicas`` ignores ``consolidationPolicy`` (sigs.k8s.io/karpenter
  v1.15.0 pkg/apis/v1/nodepool.go, the ``ConsolidationPolicy`` field's comment);
* ``spec.disruption.consolidationPolicy`` is ``WhenEmptyOrUnderutilized`` (the API's default when absent) or
  ``Balanced`` (under-used nodes too, with a cost-benefit threshold); ``WhenEmpty`` removes empty nodes only
  (sigs.k8s.io/karpenter v1.15.0 pkg/controllers/disruption/consolidation.go, line 131);
* ``spec.disruption.consolidateAfter`` is not ``Never``;
* its requirements let a node be spot: every ``karpenter.sh/capacity-type`` requirement admits ``spot`` (``In``
  listing it, ``NotIn`` not listing it, ``Exists``). Consolidation replaces an on-demand node by a spot one only
  where the replacement's capacity-type requirement holds both (sigs.k8s.io/karpenter v1.15.0
  pkg/controllers/disruption/consolidation.go, lines 236-243). A NodePool without any capacity-type requirement
  does not exclude spot: Karpenter sets no default requirement on a NodePool (sigs.k8s.io/karpenter v1.15.0
  pkg/apis/v1/nodepool_defaults.go, ``SetDefaults`` is empty) and takes the capacity types of the offerings its
  cloud provider has for the instance types that fit (sigs.k8s.io/karpenter v1.15.0
  pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go, lines 119-130);
* its disruption budgets do not forbid consolidation for good: a budget without ``schedule`` whose ``nodes`` is
  ``"0"`` or ``"0%"`` and whose ``reasons`` are absent (all reasons) or include ``Underutilized`` stops it at all
  times (sigs.k8s.io/karpenter v1.15.0 pkg/apis/v1/nodepool.go, ``GetAllowedDisruptionsByReason`` and
  ``Budget.GetAllowedDisruptions``). A budget that is at zero only during its ``schedule``/``duration`` window
  does not: Karpenter consolidates once the window is over, and a drain by the rescheduler inside the window
  would go against the operator who closed it, so such a node is left to Karpenter as well.

Pure data and rules: no client, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.model import Node, ParseError

__all__ = [
    "NODEPOOL_LABEL",
    "CAPACITY_TYPE_LABEL",
    "CONSOLIDATING_POLICIES",
    "UNDERUTILIZED",
    "NodePoolBudget",
    "CapacityTypeRequirement",
    "NodePool",
    "consolidation_toward_spot",
    "node_pool_of",
]

NODEPOOL_LABEL = "karpenter.sh/nodepool"
"""The node label naming the NodePool that launched the node."""
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
CONSOLIDATING_POLICIES = ("WhenEmptyOrUnderutilized", "Balanced")
"""The ``consolidationPolicy`` values under which Karpenter replaces under-used nodes, not only empty ones."""
DEFAULT_POLICY = "WhenEmptyOrUnderutilized"
UNDERUTILIZED = "Underutilized"
"""The disruption reason of consolidation in a budget's ``reasons``."""
SPOT = "spot"


@dataclass(frozen=True, slots=True)
class NodePoolBudget:
    """One entry of ``spec.disruption.budgets``."""

    nodes: str = "10%"
    reasons: tuple[str, ...] | None = None
    """``None``: the budget applies to every reason."""
    schedule: str | None = None
    duration: str | None = None

    def forbids_consolidation_always(self) -> bool:
        """Zero nodes, at all times (no schedule), for consolidation (``Underutilized``, or every reason)."""
        zero = self.nodes.strip() in ("0", "0%")
        applies = self.reasons is None or UNDERUTILIZED in self.reasons
        return zero and applies and self.schedule is None


@dataclass(frozen=True, slots=True)
class CapacityTypeRequirement:
    """A ``karpenter.sh/capacity-type`` requirement of the NodePool's template."""

    operator: str
    values: tuple[str, ...] = ()

    def admits_spot(self) -> bool:
        if self.operator == "In":
            return SPOT in self.values
        if self.operator == "NotIn":
            return SPOT not in self.values
        return self.operator == "Exists"  # DoesNotExist, Gt and Lt admit no "spot" label


@dataclass(frozen=True, slots=True)
class NodePool:
    """What the consolidation judgement reads of a NodePool."""

    name: str
    consolidation_policy: str = DEFAULT_POLICY
    consolidate_after: str = "0s"
    capacity_types: tuple[CapacityTypeRequirement, ...] = ()
    budgets: tuple[NodePoolBudget, ...] = (NodePoolBudget(),)
    replicas: int | None = None
    """Set on a static NodePool (a fixed node count), which does not consolidate."""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> NodePool:
        meta = raw.get("metadata") or {}
        name = meta.get("name") or ""
        if not name:
            raise ParseError("nodepool <unnamed>: metadata.name is missing")
        spec = raw.get("spec") or {}
        disruption = spec.get("disruption") or {}
        template = (spec.get("template") or {}).get("spec") or {}
        capacity = tuple(
            CapacityTypeRequirement(str(r.get("operator") or ""), tuple(str(v) for v in r.get("values") or ()))
            for r in template.get("requirements") or ()
            if r.get("key") == CAPACITY_TYPE_LABEL
        )
        raw_budgets = disruption.get("budgets")
        budgets = (NodePoolBudget(),) if raw_budgets is None else tuple(_budget(b) for b in raw_budgets)
        replicas = spec.get("replicas")
        return cls(
            name=name,
            consolidation_policy=str(disruption.get("consolidationPolicy") or DEFAULT_POLICY),
            consolidate_after=str(disruption.get("consolidateAfter") or "0s"),
            capacity_types=capacity,
            budgets=budgets,
            replicas=None if replicas is None else int(replicas),
        )


def _budget(raw: Mapping[str, Any]) -> NodePoolBudget:
    reasons = raw.get("reasons")
    return NodePoolBudget(
        nodes=str(raw.get("nodes", "10%")),
        reasons=None if reasons is None else tuple(str(r) for r in reasons),
        schedule=raw.get("schedule"),
        duration=raw.get("duration"),
    )


def consolidation_toward_spot(pool: NodePool) -> tuple[bool, str]:
    """Whether Karpenter consolidates the NodePool's nodes toward spot, and the sentence saying why (not)."""
    where = f"NodePool {pool.name}"
    if pool.replicas is not None:
        return False, f"{where} is static (spec.replicas): Karpenter does not consolidate it"
    if pool.consolidation_policy not in CONSOLIDATING_POLICIES:
        return False, f"{where} has consolidationPolicy {pool.consolidation_policy}: under-used nodes stay"
    if pool.consolidate_after.strip() == "Never":
        return False, f"{where} has consolidateAfter Never"
    refusing = [r for r in pool.capacity_types if not r.admits_spot()]
    if refusing:
        r = refusing[0]
        return False, f"{where} requires karpenter.sh/capacity-type {r.operator} {list(r.values)}: no spot"
    if any(b.forbids_consolidation_always() for b in pool.budgets):
        return False, f"{where} has a disruption budget of 0 nodes for Underutilized at all times"
    return True, (
        f"Karpenter consolidates it toward spot (NodePool {pool.name}, consolidationPolicy "
        f"{pool.consolidation_policy}): left to Karpenter (karpenter.defer_to_consolidation)"
    )


def node_pool_of(node: Node) -> str | None:
    """The name of the NodePool that launched ``node``, if Karpenter did."""
    return node.labels.get(NODEPOOL_LABEL) or None
