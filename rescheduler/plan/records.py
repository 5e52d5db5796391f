"""What a plan is: the moves in order, the nodes they empty, and why every other on-demand node stays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rescheduler.plan.reasons import StayReason

if TYPE_CHECKING:
    from rescheduler.plan.budgets import Pacing

__all__ = ["Move", "Plan", "top_reasons", "TOP_REASONS"]

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
class Plan:
    """Moves in the order they were planned (each valid after the ones before it), the nodes they empty,
    and for every other on-demand node why it stays (:class:`~rescheduler.plan.reasons.StayReason`);
    ``pacing``: per drained node, the PodDisruptionBudgets that will pace its drain
    (:func:`rescheduler.plan.budgets.pacing`)."""

    moves: tuple[Move, ...]
    drained: tuple[str, ...]
    reasons: Mapping[str, StayReason]
    summary: Mapping[str, Any]
    pacing: Mapping[str, tuple[Pacing, ...]] = field(default_factory=dict)

    @property
    def undrainable(self) -> dict[str, str]:
        """Node → the one sentence saying why it stays."""
        return {node: why.message for node, why in self.reasons.items()}

    @property
    def window_closed(self) -> bool:
        """Whether every drain window of ``disruption.budgets`` is closed now (the summary says until when)."""
        budget = self.summary.get("disruption_budget")
        return bool(budget and budget.get("outside_window_until"))

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON: ``{"moves": [{"pod", "from", "to"}], "drained", "undrainable" (node → sentence),
        "summary", "reasons" (node → {"kind", "pod", "detail"}), "pacing" (drained node → [{"pdb", "pods",
        "allowed"}], the budgets that pace its drain)}``."""
        return {
            "moves": [m.to_json() for m in self.moves],
            "drained": list(self.drained),
            "undrainable": self.undrainable,
            "summary": dict(self.summary),
            "reasons": {node: why.to_json() for node, why in self.reasons.items()},
            "pacing": {node: [p.to_json() for p in notes] for node, notes in self.pacing.items()},
        }


def top_reasons(reasons: Mapping[str, StayReason], limit: int = TOP_REASONS) -> list[dict[str, Any]]:
    """The most common groups of reasons, most nodes first (ties: first seen first), each with its kind."""
    counts = Counter(why.group for why in reasons.values())
    kinds = {why.group: why.kind for why in reasons.values()}
    return [{"reason": g, "nodes": n, "kind": kinds[g].value} for g, n in counts.most_common(limit)]
