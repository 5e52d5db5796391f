"""spotshift's placeholder pods, recognised: pods that hold spot room for an on-demand node's pods.

In capacity mode (``capacity.enabled``) the rescheduler creates pause pods that require spot and carry the
scheduling constraints and requests of an on-demand node's pods, at a priority every workload preempts
(``capacity.priority_class_name``), so an autoscaler adds spot nodes for them. Everything that reads pods
must treat them like expendable pods whatever their priority: on a spot node their room counts as free (the
scheduler preempts them for the pods that arrive), and while they wait for a node they are not a shortage of
room that should pause the rescheduler. A pod is one only in spotshift's own namespace, so a label set
elsewhere never makes a workload's pod expendable.
"""

from __future__ import annotations

from shared.model import Pod

__all__ = ["PLACEHOLDER_LABEL", "REQUEST_LABEL", "NODE_ANNOTATION", "POD_ANNOTATION", "is_placeholder"]

PLACEHOLDER_LABEL = "spotshift.io/placeholder-for"
"""On every placeholder; the value names the on-demand node it holds room for (a hash when the node's name is
not a valid label value, see ``NODE_ANNOTATION``)."""
REQUEST_LABEL = "spotshift.io/placeholder-request"
"""The request (one node's placeholders, made together) a placeholder belongs to."""
NODE_ANNOTATION = "spotshift.io/placeholder-node"
"""The on-demand node's full name."""
POD_ANNOTATION = "spotshift.io/placeholder-of"
"""``namespace/name`` of the pod whose room the placeholder holds."""


def is_placeholder(pod: Pod, namespace: str) -> bool:
    """Whether ``pod`` is one of spotshift's placeholders: labelled so, in spotshift's ``namespace``."""
    return pod.namespace == namespace and PLACEHOLDER_LABEL in pod.labels
