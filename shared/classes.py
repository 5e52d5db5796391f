"""Node classes: which nodes are spot, which are on-demand, and which spot nodes are being reclaimed.

A node is **spot** when any configured spot matcher matches its labels: the enabled provider presets
plus the custom ``node_classes.spot_selectors``. A node is **on-demand** when it is not spot, not
control-plane, and (only if ``node_classes.on_demand_selectors`` is set) matches one of those.
Everything else is **other** (control-plane nodes, or nodes outside the configured on-demand set).
Spot wins: a node carrying both a spot and an on-demand label is spot, so a node is never both.

Provider presets, as each provider documents its nodes (the spot label; the taint it puts on spot nodes):

* ``karpenter``: ``karpenter.sh/capacity-type=spot``; no taint (taints come from the NodePool, if any).
* ``eks`` (managed node groups): ``eks.amazonaws.com/capacityType=SPOT``; no taint unless the node group
  asks for one.
* ``gke-spot``: ``cloud.google.com/gke-spot=true``; ``cloud.google.com/gke-spot=true:NoSchedule`` on
  Autopilot, and on Standard when the node pool is created with it (GKE recommends it).
* ``gke-preemptible``: ``cloud.google.com/gke-preemptible=true``;
  ``cloud.google.com/gke-preemptible=true:NoSchedule`` when configured (GKE recommends it).
* ``aks``: ``kubernetes.azure.com/scalesetpriority=spot``;
  ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule``, always added by AKS.
* ``spot-worker``: ``node-role.kubernetes.io/spot-worker`` with any value (pusher/k8s-spot-rescheduler's
  convention); no taint (that convention taints the on-demand nodes ``PreferNoSchedule`` instead).

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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from shared.model import NO_SCHEDULE, Node, Taint, Toleration
from shared.selectors import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, Requirement

if TYPE_CHECKING:
    from shared.config import NodeClasses

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

# --- label syntax (apimachinery/pkg/util/validation/validation.go) -------------------------------

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME_RE = re.compile(_NAME)
_PREFIX_RE = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")


def is_qualified_name(key: str) -> bool:
    """``IsQualifiedName``: ``[prefix/]name``, name ≤ 63 characters, prefix a DNS subdomain ≤ 253."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX_RE.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME_RE.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    """``IsValidLabelValue``: empty, or ≤ 63 characters of ``[-A-Za-z0-9_.]`` with alphanumeric ends."""
    return value == "" or (len(value) <= 63 and _NAME_RE.fullmatch(value) is not None)


# --- selector strings -----------------------------------------------------------------------------


class SelectorSyntaxError(ValueError):
    """A selector string that does not parse; the message is a phrase (``must ...``) for ConfigError."""


_SET_RE = re.compile(r"(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorSyntaxError("must have balanced parentheses")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorSyntaxError("must have balanced parentheses")
    parts.append(text[start:])
    return parts


def _checked_key(key: str) -> str:
    key = key.strip()
    if not is_qualified_name(key):
        raise SelectorSyntaxError(f"must use valid label keys like example.com/name, and {key!r} is not one")
    return key


def _checked_values(values: Iterable[str]) -> frozenset[str]:
    out = []
    for v in values:
        v = v.strip()
        if not is_label_value(v):
            raise SelectorSyntaxError(f"must use valid label values, and {v!r} is not one")
        out.append(v)
    return frozenset(out)


def _parse_requirement(part: str) -> Requirement:
    p = part.strip()
    if not p:
        raise SelectorSyntaxError("must not contain an empty requirement")
    if p.startswith("!"):
        return Requirement(_checked_key(p[1:]), DOES_NOT_EXIST)
    m = _SET_RE.fullmatch(p)
    if m:
        values = m["values"].split(",")
        if not m["values"].strip():
            raise SelectorSyntaxError(f"must list at least one value for {m['op']}")
        return Requirement(_checked_key(m["key"]), IN if m["op"] == "in" else NOT_IN, _checked_values(values))
    for op, kind in (("!=", NOT_IN), ("==", IN), ("=", IN)):
        if op in p:
            key, _, value = p.partition(op)
            return Requirement(_checked_key(key), kind, _checked_values((value,)))
    if any(c.isspace() for c in p):
        raise SelectorSyntaxError("must be key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)")
    return Requirement(_checked_key(p), EXISTS)


@dataclass(frozen=True, slots=True)
class Selector:
    """A node label selector written as text, the ``kubectl get -l`` syntax (``labels.Parse``).

    Requirements are separated by commas and ANDed: ``key`` (exists), ``!key`` (does not exist),
    ``key=value`` / ``key==value``, ``key!=value`` (true also when the key is absent),
    ``key in (a,b)``, ``key notin (a,b)``. ``text`` is kept as written, for messages.
    """

    text: str
    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, text: str) -> Selector:
        if not isinstance(text, str) or not text.strip():
            raise SelectorSyntaxError("must be a non-empty label selector like key=value, key or key in (a,b)")
        return cls(text, tuple(_parse_requirement(p) for p in _split_top_level(text)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    def __str__(self) -> str:
        return self.text


# --- presets --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preset:
    """A provider's spot label and the taint it puts on spot nodes (``None``: the provider adds none)."""

    name: str
    selector: Selector
    taint: Taint | None
    provider: str


def _preset(name: str, selector: str, taint: Taint | None, provider: str) -> tuple[str, Preset]:
    return name, Preset(name, Selector.parse(selector), taint, provider)


PRESETS: Mapping[str, Preset] = MappingProxyType(
    dict(
        (
            _preset("karpenter", "karpenter.sh/capacity-type=spot", None, "Karpenter"),
            _preset("eks", "eks.amazonaws.com/capacityType=SPOT", None, "EKS managed node groups"),
            _preset(
                "gke-spot",
                "cloud.google.com/gke-spot=true",
                Taint("cloud.google.com/gke-spot", "true", NO_SCHEDULE),
                "GKE Spot VMs",
            ),
            _preset(
                "gke-preemptible",
                "cloud.google.com/gke-preemptible=true",
                Taint("cloud.google.com/gke-preemptible", "true", NO_SCHEDULE),
                "GKE preemptible VMs",
            ),
            _preset(
                "aks",
                "kubernetes.azure.com/scalesetpriority=spot",
                Taint("kubernetes.azure.com/scalesetpriority", "spot", NO_SCHEDULE),
                "AKS spot node pools",
            ),
            _preset("spot-worker", "node-role.kubernetes.io/spot-worker", None, "pusher/k8s-spot-rescheduler labels"),
        )
    )
)
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)

CONTROL_PLANE_SELECTORS: tuple[Selector, ...] = (
    Selector.parse("node-role.kubernetes.io/control-plane"),
    Selector.parse("node-role.kubernetes.io/master"),
)

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
