"""Workload identity and per-workload spot ceilings: one policy for the extender, the planner and the tests.

A pod's workload is its controller, ``namespace/Kind/name``, with a Deployment's ReplicaSets folded into the
Deployment by the ``pod-template-hash`` label, so a rollout counts as one workload. A workload's ceiling comes
from annotations on its pods (the template's): at most ``max-spot-percent`` of its pods on spot, at least
``min-on-demand`` of them on on-demand nodes, with the cluster defaults of
:class:`~shared.config.SpotCeilingConfig` where a pod has no annotation or an unreadable one (a typo must not
break scheduling). The extender steers new pods by it (a score swap), the rescheduler's planner keeps every
plan within it; both ask :func:`ceiling_breach` of the split a change would leave (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from shared.config import SpotCeilingConfig
from shared.model import Pod

__all__ = [
    "workload_key",
    "workload_key_of_meta",
    "workload_counts",
    "SpotCeiling",
    "spot_ceiling",
    "SpotShare",
    "BREACH_FLOOR",
    "BREACH_PERCENT",
    "ceiling_breach",
    "spot_allowed",
]

TEMPLATE_HASH = "pod-template-hash"
BREACH_FLOOR = "on-demand floor"
"""Fewer of the workload's pods than its floor would be left on on-demand nodes."""
BREACH_PERCENT = "spot percent"
"""More than the allowed share of the workload's pods would run on spot."""


def _fold(namespace: str, kind: str, name: str, template_hash: str | None) -> str:
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        kind, name = "Deployment", name[: -len(template_hash) - 1]
    return f"{namespace}/{kind}/{name}"


def workload_key(pod: Pod) -> str | None:
    """``namespace/Kind/name`` of the pod's controller (a Deployment's ReplicaSets fold into it); ``None`` for a
    pod without a controller."""
    ctrl = pod.controller
    if ctrl is None:
        return None
    return _fold(pod.namespace, ctrl.kind, ctrl.name, pod.labels.get(TEMPLATE_HASH))


def workload_key_of_meta(meta: Mapping[str, Any]) -> str | None:
    """:func:`workload_key` of a pod's raw ``metadata`` as the API server sends it."""
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or not ref.get("controller"):
            continue
        labels = meta.get("labels") or {}
        return _fold(
            meta.get("namespace") or "default",
            str(ref.get("kind") or ""),
            str(ref.get("name") or ""),
            labels.get(TEMPLATE_HASH) if isinstance(labels, Mapping) else None,
        )
    return None


def workload_counts(pods: Iterable[Pod]) -> dict[str, int]:
    """How many of ``pods`` each workload has (pods without a controller are not counted)."""
    counts: dict[str, int] = {}
    for p in pods:
        if not p.owners:
            continue
        wk = workload_key(p)
        if wk is not None:
            counts[wk] = counts.get(wk, 0) + 1
    return counts


class SpotCeiling(NamedTuple):
    """A workload's limits: ``max_spot_percent`` (0-100) of its pods on spot, ``min_on_demand`` pods kept on
    on-demand nodes."""

    max_spot_percent: int
    min_on_demand: int

    @property
    def restrictive(self) -> bool:
        """Whether it limits anything (100 % and no floor do not)."""
        return self.max_spot_percent < 100 or self.min_on_demand > 0


def _annotation_int(annotations: Mapping[str, Any], key: str, default: int, hi: int | None) -> int:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip().rstrip("%"))
    except ValueError:
        return default  # a typo in an annotation must not break scheduling: the cluster default applies
    if value < 0 or (hi is not None and value > hi):
        return default
    return value


def spot_ceiling(annotations: Mapping[str, Any], config: SpotCeilingConfig) -> SpotCeiling:
    """The ceiling a pod's annotations set, the cluster defaults where they set none (or nothing readable)."""
    return SpotCeiling(
        _annotation_int(annotations, config.max_spot_percent_annotation, config.default_max_spot_percent, 100),
        _annotation_int(annotations, config.min_on_demand_annotation, config.default_min_on_demand, None),
    )


@dataclass(frozen=True, slots=True)
class SpotShare:
    """How a workload's pods are split between spot and on-demand nodes (``total`` counts every class)."""

    spot: int = 0
    on_demand: int = 0
    total: int = 0


def ceiling_breach(ceiling: SpotCeiling, spot: int, on_demand: int, total: int) -> str | None:
    """Which limit a split of the workload (after a change) breaks: :data:`BREACH_FLOOR`, :data:`BREACH_PERCENT`,
    or ``None`` when it keeps both. The floor is asked first."""
    if on_demand < ceiling.min_on_demand:
        return BREACH_FLOOR
    if ceiling.max_spot_percent < 100 and spot * 100 > ceiling.max_spot_percent * total:
        return BREACH_PERCENT
    return None


def spot_allowed(max_spot_percent: int, min_on_demand: int, share: SpotShare) -> bool:
    """Whether one more (new) pod of the workload may go to spot without breaking its ceiling or floor."""
    ceiling = SpotCeiling(max_spot_percent, min_on_demand)
    return ceiling_breach(ceiling, share.spot + 1, share.on_demand, share.total + 1) is None
