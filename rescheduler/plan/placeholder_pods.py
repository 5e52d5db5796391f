"""The placeholder pod that holds spot room for one pod of an on-demand node: a pure function of the pod.

What a placeholder carries, and why:

* **requests**: the pod's effective request (``max(containers, init containers)`` plus ``spec.overhead``,
  :func:`shared.podrequests.pod_requests`) as its one container's requests, so the room it holds is the room
  the pod's replacement will need;
* **spot, strictly**: every required node-affinity term of the pod ANDed with each spot selector of the
  configured node classes (terms are ORed, so ``(pod's terms) AND (any spot selector)`` is the cross product),
  plus the pod's ``nodeSelector``. It can never run on, nor make an autoscaler add, an on-demand node;
* **tolerations**: the pod's, plus the spot tolerations the webhook injects into its replacement;
* no **host ports**: spotshift's namespace enforces the restricted Pod Security profile, which forbids them
  (a node that stays for want of a free host port is not asked capacity for);
* **pod affinity and anti-affinity** (required terms) and **topology spread**: the pod's, with the pod's
  labels copied, so placeholders of one workload keep apart (or together) as its pods would. A placeholder
  lives in spotshift's namespace, so a term that named no namespace (the pod's own) or listed some names the
  pod's namespace and spotshift's explicitly; a ``namespaceSelector`` is kept as it is. Spread constraints
  count only pods of the placeholder's namespace (upstream ``podtopologyspread`` has no namespace list),
  that is: the other placeholders;
* **priority**: ``capacity.priority_class_name``; the scheduler preempts it for any workload pod;
* the pod's **scheduler** (``spec.schedulerName``), so the scheduler that preempts for the pod holds the room;
* labels :data:`~shared.placeholders.PLACEHOLDER_LABEL` and :data:`~shared.placeholders.REQUEST_LABEL`, by
  which the rescheduler recognises, counts and deletes its placeholders (when the request ends, on shutdown,
  and any left by a predecessor on its first cycle); the rescheduler's leader-election Lease as their
  controller, so no ReplicaSet or Job adopts them and deleting the Lease (uninstalling) deletes them too;
* a container that cannot do anything: non-root, read-only, no capabilities, no service-account token,
  ``terminationGracePeriodSeconds: 0`` so a preemption frees the room at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from shared.classes import spot_node_selector_terms, spot_tolerations
from shared.config import Config
from shared.model import Pod, PodAffinityTerm, TopologySpreadConstraint
from shared.names import is_label_value
from shared.placeholders import NODE_ANNOTATION, PLACEHOLDER_LABEL, POD_ANNOTATION, REQUEST_LABEL
from shared.selectors import LabelSelector, NodeSelectorTerm, Requirement

__all__ = ["placeholder_pod", "node_label_value", "GENERATE_NAME", "CONTAINER"]

GENERATE_NAME = "spotshift-placeholder-"
CONTAINER = "hold"


def node_label_value(node: str) -> str:
    """The node's name if it is a valid label value, else ``h-`` and a hash of it (names may be 253 long)."""
    if is_label_value(node):
        return node
    return "h-" + hashlib.sha256(node.encode()).hexdigest()[:32]


def _expr(r: Requirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = sorted(r.values)
    return out


def _term(term: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if term.expressions:
        out["matchExpressions"] = [_expr(r) for r in term.expressions]
    if term.fields:
        out["matchFields"] = [_expr(r) for r in term.fields]
    return out


def _label_selector(sel: LabelSelector | None) -> dict[str, Any] | None:
    if sel is None:
        return None
    return {"matchExpressions": [_expr(r) for r in sel.requirements]} if sel.requirements else {}


def _required_terms(pod: Pod, config: Config) -> list[dict[str, Any]]:
    """``(pod's required terms) AND (any spot selector)``: one term per pair."""
    spot = spot_node_selector_terms(config.node_classes)
    if pod.required_affinity is None:
        return [dict(t) for t in spot]
    out = []
    for own in pod.required_affinity.terms:
        if not own.valid:
            continue
        base = _term(own)
        if not base:  # an empty term matches nothing, in a pair as well
            continue
        for s in spot:
            term = {k: list(v) for k, v in base.items()}
            term["matchExpressions"] = term.get("matchExpressions", []) + list(s["matchExpressions"])
            out.append(term)
    return out


def _pod_term(term: PodAffinityTerm, pod: Pod, home: str) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": term.topology_key}
    selector = _label_selector(term.selector)
    if selector is not None:
        out["labelSelector"] = selector
    namespaces = set(term.namespaces)
    if term.namespace_selector is not None:
        out["namespaceSelector"] = _label_selector(term.namespace_selector)
    if not namespaces and term.namespace_selector is None:
        namespaces = {pod.namespace}
    if namespaces:
        out["namespaces"] = sorted(namespaces | {home})
    return out


def _spread(c: TopologySpreadConstraint) -> dict[str, Any]:
    out: dict[str, Any] = {
        "maxSkew": c.max_skew,
        "topologyKey": c.topology_key,
        "whenUnsatisfiable": c.when_unsatisfiable,
    }
    selector = _label_selector(c.selector)
    if selector is not None:
        out["labelSelector"] = selector
    if c.min_domains is not None:
        out["minDomains"] = c.min_domains
    if c.node_affinity_policy != "Honor":
        out["nodeAffinityPolicy"] = c.node_affinity_policy
    if c.node_taints_policy != "Ignore":
        out["nodeTaintsPolicy"] = c.node_taints_policy
    return out


def _quantity(resource: str, amount: int) -> str:
    return f"{amount}m" if resource == "cpu" else str(amount)


def placeholder_pod(
    pod: Pod, node: str, config: Config, request: str, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The placeholder (a Pod to POST in ``config.namespace``) holding room for ``pod`` of on-demand ``node``,
    part of ``request`` (a label value naming the request), controlled by ``owner`` (an ``ownerReference``:
    the rescheduler's Lease). See the module docstring for what it carries.

    The pod's labels are copied only under an owner that is a controller: a controller in spotshift's namespace
    whose selector matched them (a ReplicaSet, a Job) would otherwise adopt the placeholder as its own pod and
    could delete a real one to scale back; a pod with a controller reference is never adopted."""
    cap = config.capacity
    spec: dict[str, Any] = {
        "priorityClassName": cap.priority_class_name,
        "schedulerName": pod.scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Always",
        "affinity": _affinity(pod, config),
        "tolerations": _tolerations(pod, config),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "runAsGroup": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(pod, cap.image)],
    }
    if pod.node_selector:
        spec["nodeSelector"] = dict(sorted(pod.node_selector.items()))
    if pod.topology_spread:
        spec["topologySpreadConstraints"] = [_spread(c) for c in pod.topology_spread]
    meta: dict[str, Any] = {
        "generateName": GENERATE_NAME,
        "namespace": config.namespace,
        "labels": _labels(pod, node, request, owner),
        "annotations": {NODE_ANNOTATION: node, POD_ANNOTATION: pod.key},
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _labels(pod: Pod, node: str, request: str, owner: Mapping[str, Any] | None) -> dict[str, str]:
    """The placeholder's labels: the pod's (only under an ``owner``, see :func:`placeholder_pod`), then the two
    by which the rescheduler finds it."""
    # The pod's labels, but none of spotshift's own and none that its own Services and budgets select by.
    labels = {
        k: v
        for k, v in pod.labels.items()
        if owner is not None
        and not k.startswith("spotshift.io/")
        and not (k == "app.kubernetes.io/name" and v.startswith("spotshift"))
    }
    labels[PLACEHOLDER_LABEL] = node_label_value(node)
    labels[REQUEST_LABEL] = request
    return labels


def _tolerations(pod: Pod, config: Config) -> list[dict[str, Any]]:
    """The pod's tolerations, then the spot tolerations it lacks."""
    tolerations = [t.to_api() for t in pod.tolerations]
    for t in spot_tolerations(config.node_classes):
        if t not in pod.tolerations:
            tolerations.append(t.to_api())
    return tolerations


def _affinity(pod: Pod, config: Config) -> dict[str, Any]:
    """Node affinity to spot only (:func:`_required_terms`), and the pod's required pod (anti-)affinity terms."""
    home = config.namespace
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _required_terms(pod, config)}
        }
    }
    if pod.pod_affinity:
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(t, pod, home) for t in pod.pod_affinity]
        }
    if pod.pod_anti_affinity:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(t, pod, home) for t in pod.pod_anti_affinity]
        }
    return affinity


def _container(pod: Pod, image: str) -> dict[str, Any]:
    """The one container: requests the pod's effective requests, and can do nothing else."""
    requests = {r: _quantity(r, n) for r, n in sorted(pod.requests.items()) if r != "pods" and n > 0}
    return {
        "name": CONTAINER,
        "image": image,
        "resources": {"requests": requests},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
