"""Whether a pod can be mutated safely and with bounded work: JSON types and sizes, checked in one pass.

The API server sends typed objects, so a wrongly typed field comes from a forged review; a patch computed
against it might not apply, which the API server counts as a webhook failure. Sizes are capped so that one
review's work stays small: every check the webhook runs is linear in them. Either way the webhook admits
the pod unchanged with a warning (a mutating webhook must never block a pod it cannot improve).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PodLimits", "LIMITS", "SKIP_MALFORMED", "SKIP_OVER_LIMITS", "pod_problem"]

SKIP_MALFORMED = "malformed"
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


_STR_OR_NONE = (str, type(None))
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def _maps(value: Any) -> list[dict[str, Any]]:
    """``value`` as a list of objects (null is empty); raises ``TypeError`` for anything else."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TypeError
    return value


def _obj(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError
    return value


def pod_problem(pod: Mapping[str, Any], limits: PodLimits) -> tuple[str, str] | None:
    """``(skip reason, warning)`` when the pod cannot be mutated safely and within bounded work, else None.

    The API server sends typed objects, so a wrongly typed field comes from a forged review: a patch
    computed against it might not apply, which the API server counts as a webhook failure. Sizes are
    counted in one pass, before anything is parsed.
    """
    terms = requirements = values = 0
    try:
        meta = _obj(pod.get("metadata"))
        for field_name in ("labels", "annotations"):
            if not all(isinstance(v, str) for v in _obj(meta.get(field_name)).values()):
                raise TypeError
        _maps(meta.get("ownerReferences"))
        spec = _obj(pod.get("spec"))
        selector = _obj(spec.get("nodeSelector"))
        if not all(isinstance(v, str) for v in selector.values()):
            raise TypeError
        requirements += len(selector)
        if not isinstance(spec.get("schedulerName"), _STR_OR_NONE):
            raise TypeError
        node_affinity = _obj(_obj(spec.get("affinity")).get("nodeAffinity"))
        selector_terms = _maps(
            _obj(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms")
        )
        preferred = _maps(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
        all_terms = [*selector_terms, *(_obj(p.get("preference")) for p in preferred)]
        terms = len(all_terms)
        if terms > limits.terms:
            return SKIP_OVER_LIMITS, f"{terms} node-affinity terms, over the limit of {limits.terms}"
        for term in all_terms:
            for section in ("matchExpressions", "matchFields"):
                for e in _maps(term.get(section)):
                    requirements += 1
                    if not isinstance(e.get("key"), str) or not isinstance(e.get("operator"), _STR_OR_NONE):
                        raise TypeError
                    listed = e.get("values")
                    if listed is not None:
                        if not isinstance(listed, list) or not all(isinstance(v, str) for v in listed):
                            raise TypeError
                        values += len(listed)
        if requirements > limits.requirements:
            return SKIP_OVER_LIMITS, (
                f"{requirements} node selector requirements, over the limit of {limits.requirements}"
            )
        if values > limits.values:
            return SKIP_OVER_LIMITS, f"{values} node selector values, over the limit of {limits.values}"
        tolerations = _maps(spec.get("tolerations"))
        if len(tolerations) > limits.tolerations:
            return SKIP_OVER_LIMITS, f"{len(tolerations)} tolerations, over the limit of {limits.tolerations}"
        for t in tolerations:
            seconds = t.get("tolerationSeconds")
            if not all(isinstance(t.get(k), _STR_OR_NONE) for k in _TOLERATION_FIELDS) or not (
                seconds is None or (isinstance(seconds, int) and not isinstance(seconds, bool))
            ):
                raise TypeError
    except TypeError:
        return SKIP_MALFORMED, "a node-selection field of the pod has the wrong JSON type"
    return None
