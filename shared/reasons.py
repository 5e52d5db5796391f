"""Why a pod does not fit a node: named constants and structured records.

The strings are kube-scheduler's own (cited per constant), so the extender's ``FailedNodes``, the
rescheduler's "why this node stays" and ``kubectl describe pod`` events read the same. Tests compare
against these constants, never against literals.
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
    "ERR_NODE_PORTS",
    "ERR_INSUFFICIENT",
    "ERR_TOO_MANY_PODS",
    "ERR_EXISTING_ANTI_AFFINITY",
    "ERR_AFFINITY",
    "ERR_ANTI_AFFINITY",
    "ERR_SPREAD",
    "ERR_SPREAD_MISSING_LABEL",
    "ERR_VOLUME_NODE_AFFINITY",
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
# tainttoleration/taint_toleration.go: fmt.Sprintf("node(s) had untolerated taint {%s: %s}", key, value)
ERR_UNTOLERATED_TAINT = "node(s) had untolerated taint {{{key}: {value}}}"
# nodeports/node_ports.go ErrReason
ERR_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
# noderesources/fit.go: fmt.Sprintf("Insufficient %v", resourceName) and "Too many pods"
ERR_INSUFFICIENT = "Insufficient {resource}"
ERR_TOO_MANY_PODS = "Too many pods"
# interpodaffinity/filtering.go
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
# podtopologyspread/filtering.go ErrReasonConstraintsNotMatch / ErrReasonNodeLabelNotMatch
ERR_SPREAD = "node(s) didn't match pod topology spread constraints"
ERR_SPREAD_MISSING_LABEL = ERR_SPREAD + " (missing required label)"
# volumebinding/volume_binding.go ErrReasonNodeConflict; volumezone/volume_zone.go ErrReasonConflict
ERR_VOLUME_NODE_AFFINITY = "node(s) had volume node affinity conflict"
ERR_VOLUME_ZONE = "node(s) had no available volume zone"
# volumebinding/volume_binding.go PreFilter; controller/volume/scheduling/scheduler_binder.go ErrReasonBindConflict
ERR_UNBOUND_IMMEDIATE_CLAIMS = "pod has unbound immediate PersistentVolumeClaims"
ERR_VOLUME_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
# spotshift's own, for targets: the rescheduler moves pods only onto spot nodes that are not reclaimed.
ERR_NOT_SPOT = "node(s) were not spot"
ERR_RECLAIMED = "node(s) were being reclaimed"


@dataclass(frozen=True, slots=True)
class Reason:
    """One failure. ``code`` is the constant (a template for taints/resources), ``message`` the text.

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
