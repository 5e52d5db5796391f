"""Why a pod does not fit a node: named constants and structured records.

The strings are kube-scheduler's own (cited per constant), so the extender's ``FailedNodes``, the
rescheduler's "why this node stays" and ``kubectl describe pod`` events read the same. Where a release prints
another text for the same failure (:mod:`shared.switches`), the reason keeps one ``code``, today's constant,
and its ``message`` is the release's text. Tests compare against these constants, never against literals.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Reason",
    "InsufficientResource",
    "ERR_UNSCHEDULABLE",
    "ERR_NOT_READY",
    "ERR_NODE_AFFINITY",
    "ERR_UNTOLERATED_TAINT",
    "ERR_UNTOLERATED_TAINT_NAMED",
    "ERR_NODE_PORTS",
    "ERR_INSUFFICIENT",
    "ERR_TOO_MANY_PODS",
    "ERR_INSUFFICIENT_CPU",
    "ERR_INSUFFICIENT_MEMORY",
    "is_insufficient",
    "ERR_EXISTING_ANTI_AFFINITY",
    "ERR_AFFINITY",
    "ERR_ANTI_AFFINITY",
    "ERR_SPREAD",
    "ERR_SPREAD_MISSING_LABEL",
    "ERR_VOLUME_NODE_AFFINITY",
    "ERR_VOLUME_NODE_AFFINITY_CONFLICT",
    "ERR_VOLUME_ZONE",
    "ERR_UNBOUND_IMMEDIATE_CLAIMS",
    "ERR_VOLUME_BIND_CONFLICT",
    "ERR_NOT_SPOT",
    "ERR_RECLAIMED",
]

# nodeunschedulable/node_unschedulable.go ErrReasonUnschedulable
ERR_UNSCHEDULABLE = "node(s) were unschedulable"
# Not a scheduler plugin (the scheduler relies on the node.kubernetes.io/not-ready taint); worded alike.
ERR_NOT_READY = "node(s) were not ready"
# nodeaffinity/node_affinity.go ErrReasonPod
ERR_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
# tainttoleration/taint_toleration.go Filter, a literal with no constant of its own (line 120 at v1.34.4, 131 at
# v1.35.4 and v1.36.3, 133 at v1.37.2): fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) had untolerated
# taint(s)"). Also the code of the reason on every release (Switches.taint_reason_omits_taint).
ERR_UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
# The same Filter at v1.29.6 to v1.33.13 (line 118 at v1.33.13): errReason := fmt.Sprintf("node(s) had untolerated
# taint {%s: %s}", taint.Key, taint.Value), the first untolerated taint.
ERR_UNTOLERATED_TAINT_NAMED = "node(s) had untolerated taint {{{key}: {value}}}"
# nodeports/node_ports.go ErrReason
ERR_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
# noderesources/fit.go: fmt.Sprintf("Insufficient %v", resourceName) and "Too many pods"
ERR_INSUFFICIENT = "Insufficient {resource}"
ERR_TOO_MANY_PODS = "Too many pods"
ERR_INSUFFICIENT_CPU = ERR_INSUFFICIENT.format(resource="cpu")
ERR_INSUFFICIENT_MEMORY = ERR_INSUFFICIENT.format(resource="memory")


def is_insufficient(text: str) -> bool:
    """Whether ``text`` is noderesources' ``Insufficient <resource>`` for some resource."""
    return text.startswith(ERR_INSUFFICIENT.removesuffix("{resource}"))


# interpodaffinity/filtering.go
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
# podtopologyspread/plugin.go ErrReasonConstraintsNotMatch / ErrReasonNodeLabelNotMatch
ERR_SPREAD = "node(s) didn't match pod topology spread constraints"
ERR_SPREAD_MISSING_LABEL = ERR_SPREAD + " (missing required label)"
# volumebinding/binder.go ErrReasonNodeConflict at v1.33.13 to v1.37.2 (line 66 at v1.37.2), the code of the
# reason on every release; at v1.29.6 to v1.32.13 its text was ERR_VOLUME_NODE_AFFINITY_CONFLICT
# (Switches.volume_reason_names_persistent_volume).
ERR_VOLUME_NODE_AFFINITY = "node(s) didn't match PersistentVolume's node affinity"
ERR_VOLUME_NODE_AFFINITY_CONFLICT = "node(s) had volume node affinity conflict"
# volumezone/volume_zone.go ErrReasonConflict
ERR_VOLUME_ZONE = "node(s) had no available volume zone"
# volumebinding/volume_binding.go PreFilter; volumebinding/binder.go ErrReasonBindConflict
ERR_UNBOUND_IMMEDIATE_CLAIMS = "pod has unbound immediate PersistentVolumeClaims"
ERR_VOLUME_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
# spotshift's own, for targets: the rescheduler moves pods only onto spot nodes that are not reclaimed.
ERR_NOT_SPOT = "node(s) were not spot"
ERR_RECLAIMED = "node(s) were being reclaimed"


@dataclass(frozen=True, slots=True)
class Reason:
    """One failure. ``code`` is the constant (a template for resources), ``message`` the text the cluster's
    release prints.

    ``unresolvable`` mirrors ``UnschedulableAndUnresolvable``: preempting pods on the node would not
    help (taints, affinity, unschedulable), which the extender reports as ``FailedAndUnresolvableNodes``.
    """

    code: str
    message: str
    unresolvable: bool = False

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class InsufficientResource(Reason):
    """``noderesources.InsufficientResource``: what the pod asks, what is used, what the node has."""

    resource: str = ""
    requested: int = 0
    used: int = 0
    capacity: int = 0


def reason(code: str, *, unresolvable: bool = False, **fmt: str) -> Reason:
    """Build a :class:`Reason` whose message is ``code`` formatted with ``fmt``."""
    return Reason(code, code.format(**fmt) if fmt else code, unresolvable)
