"""What a plan is: the moves in order, the nodes they empty, and why every other on-demand node stays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rescheduler.plan.stay_reasons import StayReason

if TYPE_CHECKING:
    from rescheduler.plan.budgets import Pacing
    from rescheduler.plan.worth import Worth

__all__ = ["Move", "Plan", "Summary", "DisruptionBudget", "top_reasons", "TOP_REASONS"]

TOP_REASONS = 5
"""How many groups of reasons a plan's summary names."""


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``pod`` (``namespace/name``) from ``source``; its replacement is expected on ``target``."""

    pod: str
    source: str
    target: str

    def to_json(self) -> dict[str, str]:
        return {"pod": self.pod, "from": self.source, "to": self.target}


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """The budget in force when the plan was made (``disruption.budgets``)."""

    limit: int | None
    """Nodes draining at once it allows."""
    budget: str
    """As written (``3``, ``20%``)."""
    draining: int
    """Nodes draining when the plan was made."""
    outside_window_until: str | None
    """When every budget has a schedule and none applies: until when (as people read it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "budget": self.budget,
            "draining": self.draining,
            "outside_window_until": self.outside_window_until,
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """A plan's figures. The optional ones are set only where they apply, and only then in the JSON."""

    on_demand_nodes: int = 0
    spot_targets: int = 0
    spot_not_targets: int = 0
    """Spot nodes not ready, cordoned, being reclaimed or of an unsettled spot pool."""
    drained: int = 0
    pods_moved: int = 0
    undrainable: int = 0
    pending_unschedulable: int = 0
    """Pods kube-scheduler could not place (:func:`rescheduler.plan.safety.unschedulable_pods`)."""
    safe_to_act: bool = True
    """False when a pod waiting for a node holds a node back (:mod:`rescheduler.plan.waiting`)."""
    strategy: str = ""
    strategies_tried: tuple[str, ...] = ()
    freed_cpu_millicores: int = 0
    freed_memory_bytes: int = 0
    top_reasons: tuple[dict[str, Any], ...] = ()
    """The most common groups of reasons (:func:`top_reasons`)."""
    disruption_budget: DisruptionBudget | None = None
    """With ``disruption.budgets`` and a time to judge them at."""
    spot_too_young: int | None = None
    """With ``disruption.min_target_age``: spot nodes not yet targets."""
    spot_unsettled: int | None = None
    """With reclaims remembered (:mod:`shared.spot_pools`): spot nodes not targets because their pool is
    unsettled (counted in ``spot_not_targets`` too)."""
    verify_rejections: int | None = None
    """With ``verify``: moves :func:`shared.fit.fits` rejected (a planner bug when not zero)."""
    waiting_pods: Mapping[str, tuple[str, ...]] | None = None
    """When pods wait for a node: each (the first fifty, in the scheduling queue's order) → the nodes it holds."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "on_demand_nodes": self.on_demand_nodes,
            "spot_targets": self.spot_targets,
            "spot_not_targets": self.spot_not_targets,
            "drained": self.drained,
            "pods_moved": self.pods_moved,
            "undrainable": self.undrainable,
            "pending_unschedulable": self.pending_unschedulable,
            "safe_to_act": self.safe_to_act,
            "strategy": self.strategy,
            "strategies_tried": list(self.strategies_tried),
            "freed_cpu_millicores": self.freed_cpu_millicores,
            "freed_memory_bytes": self.freed_memory_bytes,
            "top_reasons": [dict(r) for r in self.top_reasons],
        }
        if self.disruption_budget is not None:
            out["disruption_budget"] = self.disruption_budget.to_json()
        for name in ("spot_too_young", "spot_unsettled", "verify_rejections"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.waiting_pods is not None:
            out["waiting_pods"] = {pod: list(nodes) for pod, nodes in self.waiting_pods.items()}
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    """Moves in the order they were planned (each valid after the ones before it), the nodes they empty,
    and for every other on-demand node why it stays (:class:`~rescheduler.plan.stay_reasons.StayReason`);
    ``pacing``: per drained node, the PodDisruptionBudgets that will pace its drain
    (:func:`rescheduler.plan.budgets.pacing`); ``worth``: per node the plan could drain, its saving, cost and
    verdict (:mod:`rescheduler.plan.worth`): the nodes it drains, those the disruption budget holds, and those
    that stay as not worth it."""

    moves: tuple[Move, ...]
    drained: tuple[str, ...]
    reasons: Mapping[str, StayReason]
    summary: Summary
    pacing: Mapping[str, tuple[Pacing, ...]] = field(default_factory=dict)
    worth: Mapping[str, Worth] = field(default_factory=dict)

    @property
    def undrainable(self) -> dict[str, str]:
        """Node → the one sentence saying why it stays."""
        return {node: why.message for node, why in self.reasons.items()}

    @property
    def window_closed(self) -> bool:
        """Whether every drain window of ``disruption.budgets`` is closed now (the summary says until when)."""
        budget = self.summary.disruption_budget
        return budget is not None and budget.outside_window_until is not None

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON: ``{"moves": [{"pod", "from", "to"}], "drained", "undrainable" (node → sentence),
        "summary", "reasons" (node → {"kind", "pod", "detail"}), "pacing" (drained node → [{"pdb", "pods",
        "allowed"}], the budgets that pace its drain), "worth" (drainable node → {"saving", "cost", "verdict",
        "stay_seconds", "evictions"})}``."""
        return {
            "moves": [m.to_json() for m in self.moves],
            "drained": list(self.drained),
            "undrainable": self.undrainable,
            "summary": self.summary.to_json(),
            "reasons": {node: why.to_json() for node, why in self.reasons.items()},
            "pacing": {node: [p.to_json() for p in notes] for node, notes in self.pacing.items()},
            "worth": {node: w.to_json() for node, w in self.worth.items()},
        }


def top_reasons(reasons: Mapping[str, StayReason], limit: int = TOP_REASONS) -> tuple[dict[str, Any], ...]:
    """The most common groups of reasons, most nodes first (ties: first seen first), each with its kind."""
    counts = Counter(why.group for why in reasons.values())
    kinds = {why.group: why.kind for why in reasons.values()}
    return tuple({"reason": g, "nodes": n, "kind": kinds[g].value} for g, n in counts.most_common(limit))
