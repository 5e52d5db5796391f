"""Node classes: which nodes are spot, which are on-demand, and which spot nodes are being reclaimed.

A node is **spot** when any configured spot matcher matches its labels: the enabled provider presets
plus the custom ``node_classes.spot_selectors``. A node is **on-demand** when it is not spot, not
control-plane, and (only if ``node_classes.on_demand_selectors`` is set) matches one of those.
Everything else is **other** (control-plane nodes, or nodes outside the configured on-demand set).
Spot wins: a node carrying both a spot and an on-demand label is spot, so a node is never both.

Provider presets (their labels and taints) are listed in :mod:`shared.presets`.

The default spot tolerations are the presets' taints, each explicit (key, ``Equal``, value, effect).
Tolerating a taint a node does not carry is harmless, so the GKE tolerations are included even where
the node pools are not tainted.

Reclaim signals (:func:`reclaim_reason`) are the taints the reclaiming components put on a node:
aws-node-termination-handler (``pkg/node/node.go``: ``spot-itn``, ``rebalance-recommendation``,
``asg-lifecycle-termination``, ``scheduled-maintenance``), GKE's node termination handler
(``cloud.google.com/impending-node-termination``), cluster-autoscaler (``ToBeDeletedByClusterAutoscaler``,
``utils/taints``), Karpenter v1 (``karpenter.sh/disrupted``, ``pkg/apis/v1/taints.go``) and v1beta1
(``karpenter.sh/disruption=disrupting``), plus GKE's ``cloud.google.com/active-node-maintenance=ONGOING``
label (a Spot VM cannot live-migrate, so host maintenance ends it) and a cordoned node
(``spec.unschedulable``; the termination handlers cordon as well as taint).

The classifiers are compiled once per :class:`~shared.config.NodeClasses` object and cached, so
:func:`is_spot` is a handful of dict look-ups: the extender calls it per node per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from shared.config import NodeClasses
from shared.model import Node, Toleration
from shared.names import is_label_value, is_qualified_name
from shared.presets import CONTROL_PLANE_SELECTORS, PRESET_NAMES, PRESETS, Preset
from shared.selectors import EXISTS, IN, Requirement, Selector, SelectorSyntaxError

__all__ = [
    "SelectorSyntaxError",
    "Selector",
    "Preset",
    "PRESETS",
    "PRESET_NAMES",
    "CONTROL_PLANE_SELECTORS",
    "NodeClass",
    "NodeClassifier",
    "classifier",
    "is_spot",
    "is_on_demand",
    "is_control_plane",
    "node_class",
    "reclaim_reason",
    "spot_tolerations",
    "spot_node_selector_terms",
    "is_qualified_name",
    "is_label_value",
    "RECLAIM_TAINTS",
    "RECLAIM_SPOT_INTERRUPTION",
    "RECLAIM_REBALANCE",
    "RECLAIM_ASG_TERMINATION",
    "RECLAIM_SCHEDULED_MAINTENANCE",
    "RECLAIM_GCE_TERMINATION",
    "RECLAIM_GKE_MAINTENANCE",
    "RECLAIM_CLUSTER_AUTOSCALER",
    "RECLAIM_KARPENTER",
    "RECLAIM_CONFIGURED_TAINT",
    "RECLAIM_CORDONED",
]

NodeClass = Literal["spot", "on-demand", "other"]

# --- reclaim signals ------------------------------------------------------------------------------

RECLAIM_SPOT_INTERRUPTION = "spot interruption notice (aws-node-termination-handler/spot-itn)"
RECLAIM_REBALANCE = "EC2 rebalance recommendation (aws-node-termination-handler/rebalance-recommendation)"
RECLAIM_ASG_TERMINATION = "auto scaling group termination (aws-node-termination-handler/asg-lifecycle-termination)"
RECLAIM_SCHEDULED_MAINTENANCE = "scheduled maintenance (aws-node-termination-handler/scheduled-maintenance)"
RECLAIM_GCE_TERMINATION = "impending termination (cloud.google.com/impending-node-termination)"
RECLAIM_GKE_MAINTENANCE = "host maintenance in progress (cloud.google.com/active-node-maintenance)"
RECLAIM_CLUSTER_AUTOSCALER = "being deleted by cluster-autoscaler (ToBeDeletedByClusterAutoscaler)"
RECLAIM_KARPENTER = "being disrupted by Karpenter (karpenter.sh/disrupted)"
RECLAIM_CONFIGURED_TAINT = "carries a configured reclaim taint"
RECLAIM_CORDONED = "cordoned (spec.unschedulable)"

RECLAIM_TAINTS: Mapping[str, str] = MappingProxyType(
    {
        "aws-node-termination-handler/spot-itn": RECLAIM_SPOT_INTERRUPTION,
        "aws-node-termination-handler/rebalance-recommendation": RECLAIM_REBALANCE,
        "aws-node-termination-handler/asg-lifecycle-termination": RECLAIM_ASG_TERMINATION,
        "aws-node-termination-handler/scheduled-maintenance": RECLAIM_SCHEDULED_MAINTENANCE,
        "cloud.google.com/impending-node-termination": RECLAIM_GCE_TERMINATION,
        "ToBeDeletedByClusterAutoscaler": RECLAIM_CLUSTER_AUTOSCALER,
        "karpenter.sh/disrupted": RECLAIM_KARPENTER,
        # Karpenter v1beta1 (v0.32-v0.37): karpenter.sh/disruption=disrupting:NoSchedule.
        "karpenter.sh/disruption": RECLAIM_KARPENTER,
    }
)
"""Taint key → reclaim reason. Any effect counts: the key alone says the node is going away."""

_RECLAIM_LABELS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"cloud.google.com/active-node-maintenance": ("ONGOING", RECLAIM_GKE_MAINTENANCE)}
)


def reclaim_reason(node: Node, classes: NodeClasses | None = None) -> str | None:
    """Why ``node`` is being reclaimed, or ``None``. Such a node is never a target for new pods.

    Taints are checked first (they name the component), then labels, then cordoning.
    ``classes.extra_reclaim_taints`` adds keys of the cluster's own termination tooling.
    """
    extra = classes.extra_reclaim_taints if classes is not None else ()
    for t in node.taints:
        found = RECLAIM_TAINTS.get(t.key)
        if found is not None:
            return found
        if t.key in extra:
            return f"{RECLAIM_CONFIGURED_TAINT} ({t.key})"
    labels = node.labels
    if labels:
        for key, (value, why) in _RECLAIM_LABELS.items():
            if labels.get(key) == value:
                return why
    if node.unschedulable:
        return RECLAIM_CORDONED
    return None


# --- compiled classifier --------------------------------------------------------------------------


def _split_selectors(
    selectors: Iterable[Selector],
) -> tuple[tuple[tuple[str, frozenset[str]], ...], tuple[str, ...], tuple[Selector, ...]]:
    """Single ``In`` and ``Exists`` requirements become dict look-ups; the rest stay general."""
    in_pairs: list[tuple[str, frozenset[str]]] = []
    exists: list[str] = []
    general: list[Selector] = []
    for s in selectors:
        if len(s.requirements) == 1 and s.requirements[0].operator == IN:
            in_pairs.append((s.requirements[0].key, s.requirements[0].values))
        elif len(s.requirements) == 1 and s.requirements[0].operator == EXISTS:
            exists.append(s.requirements[0].key)
        else:
            general.append(s)
    return tuple(in_pairs), tuple(exists), tuple(general)


class _Matcher:
    """Any of a set of selectors, compiled for speed: most are one ``key=value`` or ``key``."""

    __slots__ = ("in_pairs", "exists", "general", "empty")

    def __init__(self, selectors: Iterable[Selector]) -> None:
        self.in_pairs, self.exists, self.general = _split_selectors(selectors)
        self.empty = not (self.in_pairs or self.exists or self.general)

    def any(self, labels: Mapping[str, str]) -> bool:
        for key, values in self.in_pairs:
            v = labels.get(key)
            if v is not None and v in values:
                return True
        for key in self.exists:
            if key in labels:
                return True
        for s in self.general:
            if s.matches(labels):
                return True
        return False


class NodeClassifier:
    """The node classes of one configuration, compiled. Get it with :func:`classifier`."""

    __slots__ = (
        "classes",
        "spot_selectors",
        "spot_keys",
        "_spot",
        "_on_demand",
        "_control_plane",
        "tolerations",
    )

    def __init__(self, classes: NodeClasses) -> None:
        self.classes = classes
        self.spot_selectors: tuple[Selector, ...] = tuple(PRESETS[n].selector for n in classes.presets) + tuple(
            classes.spot_selectors
        )
        keys: dict[str, list[Requirement]] = {}
        for s in self.spot_selectors:
            if len(s.requirements) == 1:
                keys.setdefault(s.requirements[0].key, []).append(s.requirements[0])
        # Spot-class label keys: the key of each one-requirement spot selector → those requirements.
        self.spot_keys: Mapping[str, tuple[Requirement, ...]] = MappingProxyType({k: tuple(v) for k, v in keys.items()})
        self._spot = _Matcher(self.spot_selectors)
        self._on_demand = _Matcher(classes.on_demand_selectors)
        self._control_plane = _Matcher(classes.control_plane_selectors)
        self.tolerations = _tolerations(classes)

    def is_spot(self, labels: Mapping[str, str]) -> bool:
        return self._spot.any(labels)

    def is_control_plane(self, labels: Mapping[str, str]) -> bool:
        return self._control_plane.any(labels)

    def is_on_demand(self, labels: Mapping[str, str]) -> bool:
        if self._spot.any(labels) or self._control_plane.any(labels):
            return False
        return self._on_demand.empty or self._on_demand.any(labels)

    def node_class(self, labels: Mapping[str, str]) -> NodeClass:
        if self._spot.any(labels):
            return "spot"
        if self._control_plane.any(labels):
            return "other"
        if self._on_demand.empty or self._on_demand.any(labels):
            return "on-demand"
        return "other"


def _tolerations(classes: NodeClasses) -> tuple[Toleration, ...]:
    if classes.spot_tolerations is not None:
        return tuple(classes.spot_tolerations)
    out: list[Toleration] = []
    for name in classes.presets:
        taint = PRESETS[name].taint
        if taint is None:
            continue
        tol = Toleration(taint.key, "Equal", taint.value, taint.effect)
        if tol not in out:
            out.append(tol)
    return tuple(out)


# Keyed by id() with the object kept alongside: NodeClasses is a frozen slots dataclass (no weakref)
# whose hash walks every selector, too slow for a per-node call. A few configs live per process.
_CACHE: dict[int, tuple[NodeClasses, NodeClassifier]] = {}
_CACHE_MAX = 64


def classifier(classes: NodeClasses) -> NodeClassifier:
    """The compiled classifier for ``classes`` (built on first use, then cached by identity)."""
    hit = _CACHE.get(id(classes))
    if hit is not None and hit[0] is classes:
        return hit[1]
    compiled = NodeClassifier(classes)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[id(classes)] = (classes, compiled)
    return compiled


def is_spot(node: Node, classes: NodeClasses) -> bool:
    """Whether any enabled preset or custom spot selector matches the node's labels."""
    return classifier(classes).is_spot(node.labels)


def is_control_plane(node: Node, classes: NodeClasses) -> bool:
    """Whether the node carries a control-plane role label (``node-role.kubernetes.io/control-plane``/``master``)."""
    return classifier(classes).is_control_plane(node.labels)


def is_on_demand(node: Node, classes: NodeClasses) -> bool:
    """Not spot, not control-plane, and matching an on-demand selector when any is configured."""
    return classifier(classes).is_on_demand(node.labels)


def node_class(node: Node, classes: NodeClasses) -> NodeClass:
    """``"spot"``, ``"on-demand"`` or ``"other"``; exactly one, spot first."""
    return classifier(classes).node_class(node.labels)


def spot_tolerations(classes: NodeClasses) -> tuple[Toleration, ...]:
    """The tolerations the webhook injects: configured ones, else the enabled presets' taints.

    Always explicit (key, value, effect); never a key-less ``Exists``, which would tolerate every
    taint, reclaim and not-ready taints included.
    """
    return classifier(classes).tolerations


def spot_node_selector_terms(classes: NodeClasses) -> tuple[dict[str, Any], ...]:
    """One API ``NodeSelectorTerm`` per spot selector (presets first), for the webhook's affinity.

    As required affinity the terms are ORed, so a node matches exactly when :func:`is_spot` says so;
    as preferred terms each carries the configured weight. Values are sorted, so the patch is stable.
    Fresh dicts on every call: the caller may put them into a patch and change them.
    """
    return tuple(_term(s) for s in classifier(classes).spot_selectors)


def _term(selector: Selector) -> dict[str, Any]:
    exprs = []
    for r in selector.requirements:
        e: dict[str, Any] = {"key": r.key, "operator": r.operator}
        if r.values:
            e["values"] = sorted(r.values)
        exprs.append(e)
    return {"matchExpressions": exprs}
