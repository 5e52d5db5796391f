"""Whether a pod can be mutated with bounded work: its node-selection input counted in one pass.

Sizes are capped so that one review's work stays small: every check the webhook runs is linear in them. A pod
over a limit is admitted unchanged with a warning (a mutating webhook must never block a pod it cannot
improve). The pod's JSON types were checked where the review came in (:func:`extender.admission.parse_review`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PodLimits", "LIMITS", "SKIP_OVER_LIMITS", "pod_problem"]

SKIP_OVER_LIMITS = "over-limits"


@dataclass(frozen=True, slots=True)
class PodLimits:
    """How much node-selection input one pod may carry before the webhook admits it unchanged.

    Real pods carry a handful of each; the limits are far above that and keep one review's work to
    milliseconds (the checks are linear in these sizes). Kubernetes itself only caps the object's size.
    """

    terms: int = 100
    """Required plus preferred node-affinity terms."""
    requirements: int = 1000
    """``nodeSelector`` entries plus every ``matchExpressions``/``matchFields`` entry of every term."""
    values: int = 10000
    """Values across all expressions."""
    tolerations: int = 1000


LIMITS = PodLimits()


def pod_problem(pod: Mapping[str, Any], limits: PodLimits) -> tuple[str, str] | None:
    """``(skip reason, warning)`` when the pod carries more node-selection input than ``limits``, else None.

    ``pod`` has the types :data:`extender.reviews.REVIEW_SHAPE` checked (a null anywhere counts as absent).
    """
    spec = pod.get("spec") or {}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    terms = [*(required.get("nodeSelectorTerms") or ()), *(p.get("preference") or {} for p in preferred)]
    if len(terms) > limits.terms:
        return SKIP_OVER_LIMITS, f"{len(terms)} node-affinity terms, over the limit of {limits.terms}"
    requirements = len(spec.get("nodeSelector") or ())
    values = 0
    for term in terms:
        for section in ("matchExpressions", "matchFields"):
            for e in term.get(section) or ():
                requirements += 1
                values += len(e.get("values") or ())
    if requirements > limits.requirements:
        return SKIP_OVER_LIMITS, f"{requirements} node selector requirements, over the limit of {limits.requirements}"
    if values > limits.values:
        return SKIP_OVER_LIMITS, f"{values} node selector values, over the limit of {limits.values}"
    tolerations = len(spec.get("tolerations") or ())
    if tolerations > limits.tolerations:
        return SKIP_OVER_LIMITS, f"{tolerations} tolerations, over the limit of {limits.tolerations}"
    return None
