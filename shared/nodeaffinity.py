"""``spec.nodeSelector`` and node affinity, as kube-scheduler's NodeAffinity plugin evaluates them.

Upstream: ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`` (``Filter``, ``Score``) over
``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``
(``GetRequiredNodeAffinity(pod).Match(node)``, ``PreferredSchedulingTerms.Score``).

Rules, all decided at parse time in :mod:`shared.selectors` and :class:`shared.model.Pod`:

* ``nodeSelector`` is plain equality on every key (``labels.SelectorFromSet``): the node must carry each key
  with exactly that value (``{"k": ""}`` needs the label present and empty).
* It is ANDed with the required node affinity. No ``requiredDuringScheduling...`` at all means no constraint;
  a present one with nil or empty ``nodeSelectorTerms`` matches no node.
* Terms are ORed, a term's expressions and fields ANDed; a nil or empty term matches nothing; a term that does
  not parse (invalid key or value, unknown operator, ``Gt`` with a non-integer) matches nothing, while the
  other terms still count.
"""

from __future__ import annotations

from shared.fit_reasons import ERR_NODE_AFFINITY, Reason
from shared.model import Node, Pod

__all__ = ["check_node_affinity", "matches_node_selector_and_affinity", "preferred_affinity_score"]

_NODE_AFFINITY_MISMATCH = Reason(ERR_NODE_AFFINITY, ERR_NODE_AFFINITY, True)
# One shared instance: Reason is frozen, and the failure path then allocates nothing either.


def matches_node_selector_and_affinity(pod: Pod, node: Node) -> bool:
    """``GetRequiredNodeAffinity(pod).Match(node)``: ``spec.nodeSelector`` AND required node affinity.

    The webhook uses this too, to tell a pod already pinned to on-demand nodes from one it may steer.
    """
    selector = pod.node_selector
    if selector:
        labels = node.labels
        for key in selector:
            if labels.get(key) != selector[key]:
                return False
    required = pod.required_affinity
    if required is not None:
        return required.matches(node.name, node.labels)
    return True


def check_node_affinity(pod: Pod, node: Node) -> Reason | None:
    """NodeAffinity ``Filter``: ``None`` if the node matches, else ``ErrReasonPod``, unresolvable.

    Parse errors in the pod's terms are ignored like upstream ("for backwards compatibility"): such a term
    simply never matches. The scheduler's ``addedAffinity`` plugin argument is not modelled.
    """
    if not pod.node_selector and pod.required_affinity is None:
        return None
    if matches_node_selector_and_affinity(pod, node):
        return None
    return _NODE_AFFINITY_MISMATCH


def preferred_affinity_score(pod: Pod, node: Node) -> int:
    """NodeAffinity ``Score`` before normalisation: the sum of the weights of the preferred terms that match.

    Terms with weight 0 or no expressions and no fields add nothing. Upstream fails the whole scoring step
    when any weighted preferred term does not parse; here such a term just never matches, so the other terms
    still score (the extender's prioritize errors are ignored by the scheduler anyway).
    """
    score = 0
    name, labels = node.name, node.labels
    for weight, term in pod.preferred_affinity:
        if weight and term.matches(name, labels):
            score += weight
    return score
