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
* **not an unsettled spot pool**: with pools reclaimed within ``spot.stability_window`` (``avoid``), each term
  is ANDed with :func:`avoiding_terms`, node affinity that matches every node but those of the avoided pools;
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
from collections.abc import Collection, Mapping
from typing import Any

from shared.classes import spot_node_selector_terms, spot_tolerations
from shared.config import Config
from shared.model import Pod, PodAffinityTerm, TopologySpreadConstraint
from shared.names import is_label_value
from shared.placeholders import NODE_ANNOTATION, PLACEHOLDER_LABEL, POD_ANNOTATION, REQUEST_LABEL
from shared.selectors import LabelSelector, NodeSelectorTerm, Requirement
from shared.spot_pools import INSTANCE_TYPE_LABELS, ZONE_LABELS, PoolKey

__all__ = ["placeholder_pod", "node_label_value", "avoiding_terms", "GENERATE_NAME", "CONTAINER", "MAX_AVOIDING_TERMS"]

GENERATE_NAME = "spotshift-placeholder-"
CONTAINER = "hold"
MAX_AVOIDING_TERMS = 32
"""At most this many node-selector terms avoid the unsettled pools; more, and no placeholder is asked for."""
_TYPE, _ZONE = INSTANCE_TYPE_LABELS[0], ZONE_LABELS[0]

Expressions = list[dict[str, Any]]


def _op(key: str, operator: str, values: Collection[str]) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": sorted(values)}


def _avoid_levels(levels: Mapping[tuple[str, str], Mapping[str, Collection[str]]]) -> list[Expressions]:
    """Terms (ORed) matching every node outside the pools ``(label, group) -> type -> zones``; a ``""`` label
    stands for any group (the pool's instance type and zone alone)."""
    named: dict[str, set[str]] = {}
    for label, group in levels:
        if label:
            named.setdefault(label, set()).add(group)
    anon = [(label, group) for label, group in levels if not label]
    outside = [_op(label, "NotIn", groups) for label, groups in sorted(named.items())]
    terms: list[Expressions] = [] if anon else [outside]
    for label, group in sorted(levels):
        types = levels[(label, group)]
        own = [_op(label, "In", [group])] if label else []
        terms.append([*own, _op(_TYPE, "NotIn", types)])
        for instance_type, zones in sorted(types.items()):
            terms.append([*own, _op(_TYPE, "In", [instance_type]), _op(_ZONE, "NotIn", zones)])
    return terms


def avoiding_terms(pools: Collection[PoolKey]) -> list[Expressions] | None:
    """Node-selector terms (their ``matchExpressions``; ORed) that match every node except those of ``pools``;
    ``[]`` for no pool, ``None`` when more than :data:`MAX_AVOIDING_TERMS` would be needed.

    A pool is a conjunction (group, type, zone), so leaving it out is a disjunction, built level by level: a node
    of no avoided group (``NotIn`` the groups, which a node without the label matches too); of an avoided group but
    of none of its avoided instance types; of an avoided group and type but in none of its avoided zones. Each
    node outside the pools matches one term, no node inside matches any. A pool without a node-group label is
    avoided by its instance type and zone in every group (its nodes cannot be told apart otherwise), and the terms
    of both kinds are ANDed (their cross product). The instance type and zone are read from
    ``node.kubernetes.io/instance-type`` and ``topology.kubernetes.io/zone`` (set by the kubelet on every node)."""
    if not pools:
        return []
    named: dict[tuple[str, str], dict[str, set[str]]] = {}
    anon: dict[tuple[str, str], dict[str, set[str]]] = {}
    for p in pools:
        levels = named if p.group_label else anon
        types = levels.setdefault((p.group_label, p.group if p.group_label else ""), {})
        types.setdefault(p.instance_type, set()).add(p.zone)
    both = [_avoid_levels(levels) for levels in (named, anon) if levels]
    terms = both[0] if len(both) == 1 else [a + b for a in both[0] for b in both[1]]
    return terms if len(terms) <= MAX_AVOIDING_TERMS else None


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


def _required_terms(pod: Pod, config: Config, avoid: list[Expressions]) -> list[dict[str, Any]]:
    """``(pod's required terms) AND (any spot selector) AND (any avoiding term)``: one term per triple."""
    spot = [dict(t) for t in spot_node_selector_terms(config.node_classes)]
    if avoid:
        spot = [{"matchExpressions": t["matchExpressions"] + a} for t in spot for a in avoid]
    if pod.required_affinity is None:
        return spot
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
    pod: Pod,
    node: str,
    config: Config,
    request: str,
    owner: Mapping[str, Any] | None = None,
    avoid: list[Expressions] | None = None,
) -> dict[str, Any]:
    """The placeholder (a Pod to POST in ``config.namespace``) holding room for ``pod`` of on-demand ``node``,
    part of ``request`` (a label value naming the request), controlled by ``owner`` (an ``ownerReference``:
    the rescheduler's Lease), on no node of the unsettled spot pools (``avoid``: :func:`avoiding_terms`). See the
    module docstring for what it carries.

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
        "affinity": _affinity(pod, config, avoid or []),
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


def _affinity(pod: Pod, config: Config, avoid: list[Expressions]) -> dict[str, Any]:
    """Node affinity to spot only (:func:`_required_terms`), and the pod's required pod (anti-)affinity terms."""
    home = config.namespace
    terms = _required_terms(pod, config, avoid)
    affinity: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
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
