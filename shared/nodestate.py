"""Node state: cordoned (``spec.unschedulable``) and ``Ready``.

Upstream: ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``. A cordoned node takes
only pods that tolerate the ``node.kubernetes.io/unschedulable:NoSchedule`` taint (DaemonSet pods get that
toleration from their controller); the check is the pod's tolerations, not the node's taints, because the
node lifecycle controller adds the taint after the cordon.

kube-scheduler has no "Ready" filter: the node lifecycle controller taints a not-ready node with
``node.kubernetes.io/not-ready`` (``NoSchedule``, and ``NoExecute`` after a grace period) and
TaintToleration does the rest. The rescheduler and extender must not wait for that taint to decide that a
node is no target, hence :func:`check_ready`.
"""

from __future__ import annotations

from shared.fit_reasons import ERR_NOT_READY, ERR_UNSCHEDULABLE, Reason
from shared.model import NO_SCHEDULE, Node, Pod, Taint
from shared.taints import tolerations_tolerate_taint

__all__ = ["TAINT_NODE_UNSCHEDULABLE", "check_unschedulable", "check_ready"]

TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_UNSCHEDULABLE_TAINT = Taint(TAINT_NODE_UNSCHEDULABLE, "", NO_SCHEDULE)
_CORDONED = Reason(ERR_UNSCHEDULABLE, ERR_UNSCHEDULABLE, True)
_NOT_READY = Reason(ERR_NOT_READY, ERR_NOT_READY, True)


def check_unschedulable(pod: Pod, node: Node) -> Reason | None:
    """NodeUnschedulable ``Filter``: a cordoned node fits only a pod tolerating the unschedulable taint.

    ``UnschedulableAndUnresolvable``: evicting pods does not uncordon a node.
    """
    if not node.unschedulable:
        return None
    if tolerations_tolerate_taint(pod.tolerations, _UNSCHEDULABLE_TAINT):
        return None
    return _CORDONED


def check_ready(node: Node) -> Reason | None:
    """``None`` if the node's ``Ready`` condition is ``True``; a node without the condition is not ready.

    Unresolvable, like the ``not-ready`` taint the scheduler would see.
    """
    return None if node.ready else _NOT_READY
