"""The mutating webhook: one pure function from an AdmissionReview to its answer.

:func:`build_response` takes the decoded review and a :class:`MutationPolicy` (compiled once from
:class:`shared.config.Config`) and returns the review to send back plus a :class:`Mutation` saying what was
done and why, for metrics. It reads no clock, no environment and no cluster, so a ``dryRun`` request gets
exactly the answer a real one would, and tests need no server.

What a pod gets, by ``webhook.mode``:

* ``prefer``: one preferred node-affinity term per spot selector (weight ``webhook.weight``; a node matches
  one of them, so it scores ``weight``) plus the spot tolerations;
* ``tolerate-only``: the spot tolerations only;
* ``require`` (opt-in): the spot constraint in the required node affinity plus the tolerations. With no
  required affinity yet, one term per spot selector is added. Each of the pod's own terms ``T`` becomes
  ``T AND spot`` and nothing else: the first spot selector's expressions are appended to ``T`` and, for
  every further selector ``S``, a term ``T AND S`` is appended (terms are ORed, so the result allows
  exactly the spot nodes ``T`` allowed). A term that already requires a spot selector is left alone, which
  makes a second invocation add nothing. Terms that cannot hold a spot requirement are left as they are,
  with a warning: an empty term (it matches no node) and a ``matchFields`` term (it names its nodes, which
  need not be spot);
* ``off``: nothing.

Rules that keep it safe to run on every pod:

* only ``add`` at new paths or ``/-`` appends: nothing the user wrote is replaced or reordered; missing
  parents (``affinity``, ``nodeAffinity``, ``tolerations``...) are created by one ``add`` of the subtree
  (the one ``replace`` is ``schedulerName: default-scheduler``, which the API server wrote, when
  ``webhook.scheduler_name`` is set);
* idempotent: a toleration already covered by one of the pod's (the same, an ``Exists`` on the key, or a
  key-less ``Exists``) is not added again, and a preferred term equal, as a set of expressions, to one the
  pod has is not added again (so ``reinvocationPolicy: IfNeeded`` adds nothing the second time);
* well-typed: :func:`parse_review` refuses (400, naming the field) a review whose fields the webhook reads have
  other JSON types than the API server's Go structs give them, so every patch applies to the object it was
  computed from and nothing below meets a list where it reads an object;
* bounded: a pod over :data:`LIMITS` (selector terms, requirements, values, tolerations) is admitted unchanged
  with a warning, so the work per review is linear in a size that is itself capped;
* skipped, in this order: mode ``off``; not a CREATE; an excluded namespace (``kube-system`` and
  spotshift's own by default); mirror/static pods; DaemonSet pods (they must run on every node anyway);
  the opt-out label or annotation (``movability.opt_out_key: "true"``); pods pinned to on-demand by
  ``nodeSelector`` or required node affinity; pods that already carry everything. The four pod checks are
  :mod:`shared.movable`'s own (``is_mirror_pod``, ``is_daemonset_pod``, ``is_opted_out``,
  ``pinned_to_on_demand``), so the webhook steers exactly the pods the rescheduler would move.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.errors import InvalidRequest
from extender.patches import Op, Patch
from extender.podcheck import LIMITS, SKIP_OVER_LIMITS, PodLimits, pod_problem
from extender.reviews import (
    ADMISSION_API_VERSION,
    REVIEW_SHAPE,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionReview,
    ShapeError,
    check_shape,
)
from shared.classes import Selector, classifier
from shared.config import Config, NodeClasses
from shared.model import EMPTY, NO_EXECUTE, OwnerRef, Pod, Toleration
from shared.movable import is_daemonset_pod, is_mirror_pod, is_opted_out, pinned_to_on_demand
from shared.selectors import IN, NOT_IN, Requirement, parse_node_selector

__all__ = [
    "MutationPolicy",
    "Mutation",
    "parse_review",
    "mutate_pod",
    "build_response",
    "MutationMemo",
    "allow_unchanged",
    "lean_pod",
    "SKIP_MODE_OFF",
    "SKIP_NOT_CREATE",
    "SKIP_EXCLUDED_NAMESPACE",
    "SKIP_MIRROR_POD",
    "SKIP_DAEMONSET",
    "SKIP_OPT_OUT",
    "SKIP_PINNED_ON_DEMAND",
    "SKIP_ALREADY_PRESENT",
    "SKIP_OVER_LIMITS",
    "LIMITS",
    "PodLimits",
    "PATCH_PREFERRED_AFFINITY",
    "PATCH_REQUIRED_AFFINITY",
    "PATCH_TOLERATIONS",
    "PATCH_SCHEDULER_NAME",
    "ACCEPTED_API_VERSIONS",
]

# Skip reasons (the ``reason`` label of spotshift_webhook_skips).
SKIP_MODE_OFF = "mode-off"
SKIP_NOT_CREATE = "not-create"
SKIP_EXCLUDED_NAMESPACE = "excluded-namespace"
SKIP_MIRROR_POD = "mirror-pod"
SKIP_DAEMONSET = "daemonset"
SKIP_OPT_OUT = "opt-out"
SKIP_PINNED_ON_DEMAND = "pinned-on-demand"
SKIP_ALREADY_PRESENT = "already-present"

# What a patch adds (the ``kind`` label of spotshift_webhook_patches).
PATCH_PREFERRED_AFFINITY = "preferred-affinity"
PATCH_REQUIRED_AFFINITY = "required-affinity"
PATCH_TOLERATIONS = "tolerations"
PATCH_SCHEDULER_NAME = "scheduler-name"

ACCEPTED_API_VERSIONS = frozenset({ADMISSION_API_VERSION, "admission.k8s.io/v1beta1"})
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
DEFAULT_SCHEDULER = "default-scheduler"

_NODE_AFFINITY = ("spec", "affinity", "nodeAffinity")
_PREFERRED = (*_NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution")
_REQUIRED = (*_NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution")
_REQUIRED_TERMS = (*_REQUIRED, "nodeSelectorTerms")
_TOLERATIONS = ("spec", "tolerations")

Signature = frozenset[tuple[str, str, str, frozenset[str]]]
"""A node selector term as a set of ``(section, key, operator, values)``: order-blind equality."""


def _expression(r: Requirement) -> dict[str, Any]:
    if r.operator in (IN, NOT_IN):
        return {"key": r.key, "operator": r.operator, "values": sorted(r.values)}
    return {"key": r.key, "operator": r.operator}


def _expression_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's own ``NodeSelectorRequirement`` copied into a new term: only its three fields, which the review's
    shape checked (an unknown field, whatever it holds, would be dropped by the API server anyway)."""
    return {k: raw[k] for k in ("key", "operator", "values") if raw.get(k) is not None}


def _term(selector: Selector) -> dict[str, Any]:
    return {"matchExpressions": [_expression(r) for r in selector.requirements]}


def _signature(term: Any) -> Signature | None:
    """The set form of a ``NodeSelectorTerm``; ``None`` for something that is not a term."""
    if not isinstance(term, Mapping):
        return None
    out: set[tuple[str, str, str, frozenset[str]]] = set()
    for section in ("matchExpressions", "matchFields"):
        for e in term.get(section) or ():
            if not isinstance(e, Mapping):
                return None
            values = e.get("values") or ()
            out.add((section, str(e.get("key")), str(e.get("operator")), frozenset(map(str, values))))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class MutationPolicy:
    """What to inject and whom to skip, compiled once from the configuration.

    ``spot_terms`` are the node selector terms (as API JSON) that describe spot nodes, one per spot
    selector: the enabled presets plus ``node_classes.spot_selectors``; the tolerations are
    :func:`shared.classes.spot_tolerations`.
    """

    classes: NodeClasses = field(default_factory=NodeClasses)
    mode: str = "prefer"
    weight: int = 100
    excluded_namespaces: frozenset[str] = frozenset({"kube-system"})
    opt_out_key: str = "spotshift.io/exclude"
    scheduler_name: str = ""
    limits: PodLimits = LIMITS
    spot_selectors: tuple[Selector, ...] = field(init=False)
    tolerations: tuple[Toleration, ...] = field(init=False)
    spot_terms: tuple[dict[str, Any], ...] = field(init=False)
    preferred_terms: tuple[dict[str, Any], ...] = field(init=False)
    spot_signatures: frozenset[Signature] = field(init=False)
    toleration_items: tuple[tuple[Toleration, dict[str, Any]], ...] = field(init=False)
    toleration_keys: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # Built once: the request path only references these (emitted JSON values are never mutated).
        compiled = classifier(self.classes)
        object.__setattr__(self, "spot_selectors", compiled.spot_selectors)
        object.__setattr__(self, "tolerations", compiled.tolerations)
        terms = tuple(_term(s) for s in self.spot_selectors)
        object.__setattr__(self, "spot_terms", terms)
        object.__setattr__(self, "preferred_terms", tuple({"weight": self.weight, "preference": t} for t in terms))
        object.__setattr__(self, "spot_signatures", frozenset(s for s in map(_signature, terms) if s is not None))
        object.__setattr__(self, "toleration_items", tuple((t, t.to_api()) for t in self.tolerations))
        object.__setattr__(self, "toleration_keys", frozenset(t.key for t in self.tolerations))

    @classmethod
    def from_config(cls, config: Config) -> MutationPolicy:
        return cls(
            classes=config.node_classes,
            mode=config.webhook.mode,
            weight=config.webhook.weight,
            excluded_namespaces=config.webhook_excluded_namespaces,
            opt_out_key=config.movability.opt_out_key,
            scheduler_name=config.webhook.scheduler_name,
        )


@dataclass(frozen=True, slots=True)
class Mutation:
    """The outcome for one pod: the JSON patch, what it adds, or why nothing was done."""

    ops: tuple[Op, ...] = ()
    kinds: tuple[str, ...] = ()
    skipped: str | None = None
    warnings: tuple[str, ...] = ()


# --- review decoding ------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """A short, safe rendering of a client's value for an error message (never a deep ``repr``)."""
    if isinstance(value, str):
        return repr(value if len(value) <= 64 else value[:64] + "...")
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return "a JSON " + ("object" if isinstance(value, dict) else "array" if isinstance(value, list) else "value")


def parse_review(body: bytes) -> AdmissionReview:
    """Decode and check an AdmissionReview carrying a Pod; anything else is an :class:`InvalidRequest`.

    Every field the webhook reads is checked for its type at once (:data:`extender.reviews.REVIEW_SHAPE`), the
    pod's too, whatever the operation: the message names the first wrong field. Then the envelope's values.
    """
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidRequest(f"request body is not valid JSON: {e}") from None
    try:
        shape = check_shape(review, REVIEW_SHAPE, "")
    except ShapeError as e:
        raise InvalidRequest(str(e)) from None
    if shape.kind != "AdmissionReview":
        raise InvalidRequest(f"kind must be AdmissionReview, got {_describe(shape.kind)}")
    if shape.apiVersion not in ACCEPTED_API_VERSIONS:
        raise InvalidRequest(f"apiVersion must be {ADMISSION_API_VERSION}, got {_describe(shape.apiVersion)}")
    request = shape.request
    if request is None:
        raise InvalidRequest("AdmissionReview has no request object")
    if not request.uid:
        raise InvalidRequest("request.uid is missing: the API server could not match the answer to its request")
    gvk = request.kind
    if gvk is None or gvk.kind != "Pod" or gvk.group:
        raise InvalidRequest(f"request.kind must be the core Pod kind, got {_describe(review['request'].get('kind'))}")
    if request.operation not in OPERATIONS:
        raise InvalidRequest(
            f"request.operation must be one of {', '.join(OPERATIONS)}, got {_describe(request.operation)}"
        )
    if request.operation in ("CREATE", "UPDATE"):
        pod = request.object
        if pod is None or pod.kind not in (None, "Pod"):
            raise InvalidRequest("request.object must be a Pod object")
        if pod.spec is None:
            raise InvalidRequest("request.object is not a Pod: it has no spec object")
    return review  # type: ignore[no-any-return]


# --- pod checks -----------------------------------------------------------------------------------


def lean_pod(pod: Mapping[str, Any], namespace: str) -> Pod:
    """The part of :class:`shared.model.Pod` the skip rules read, parsed without the resource requests.

    ``Pod.from_api`` parses quantities, ports and pod affinity too (~35 µs): more than the rest of a mutation.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    node_selector = spec.get("nodeSelector")
    return Pod(
        namespace=namespace,
        name=meta.get("name") or meta.get("generateName") or "",
        labels=_strmap(meta.get("labels")),
        annotations=_strmap(meta.get("annotations")),
        owners=tuple(
            OwnerRef(str(o.get("kind") or ""), str(o.get("name") or ""), controller=bool(o.get("controller")))
            for o in meta.get("ownerReferences") or ()
            if isinstance(o, Mapping)
        ),
        node_selector=_strmap(node_selector),
        required_affinity=parse_node_selector(required, "spec.affinity.nodeAffinity.required") if required else None,
    )


def _strmap(raw: Any) -> Mapping[str, str]:
    return raw if isinstance(raw, Mapping) and raw else EMPTY


def _term_requires(selector: Selector, term: Any) -> bool:
    """Whether ``term`` contains each of ``selector``'s requirements (the term can only match such nodes)."""
    sig = _signature(term) or frozenset()
    for r in selector.requirements:
        want = ("matchExpressions", r.key, r.operator, r.values)
        if want not in sig:
            return False
    return True


def _covers(have: Toleration, want: Toleration) -> bool:
    """Whether ``have`` tolerates at least every taint ``want`` tolerates (so ``want`` adds nothing)."""
    if have.key and have.key != want.key:
        return False
    if have.operator == "Exists":
        pass
    elif want.operator == "Exists" or not have.key or have.value != want.value:
        return False
    if have.effect and have.effect != want.effect:
        return False
    # A NoExecute toleration with tolerationSeconds evicts after a while: weaker than a permanent one.
    return not (
        have.toleration_seconds is not None and want.toleration_seconds is None and (want.effect in ("", NO_EXECUTE))
    )


def _pod_tolerations(spec: Mapping[str, Any], keys: frozenset[str]) -> list[Toleration]:
    """The pod's tolerations that could cover one of ours: key-less ones and those on one of ``keys``.

    Every pod carries the API server's not-ready/unreachable tolerations; skipping what cannot matter keeps
    the common case free of parsing.
    """
    out = []
    for raw in spec.get("tolerations") or ():
        if not raw.get("key") or raw.get("key") in keys:
            out.append(Toleration.from_api(raw))
    return out


def _get(doc: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = doc
    for t in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(t)
    return node


# --- the mutation ---------------------------------------------------------------------------------


def _add_preferred(pod: Mapping[str, Any], patch: Patch, policy: MutationPolicy) -> bool:
    have = {_signature(p.get("preference")) for p in _get(pod, _PREFERRED) or ()}
    if have & policy.spot_signatures:
        return False  # the pod already prefers spot in its own words (or ours, on reinvocation)
    patch.append(_PREFERRED, *policy.preferred_terms)
    return bool(policy.preferred_terms)


def _add_required(pod: Mapping[str, Any], patch: Patch, policy: MutationPolicy) -> tuple[bool, str | None]:
    """Returns (added, warning): each term T becomes T AND spot (see the module docstring)."""
    terms = _get(pod, _REQUIRED_TERMS)
    if not terms:
        if _get(pod, _REQUIRED) is not None and terms is not None:
            return False, None  # an explicit empty term list matches nothing: leave the user's choice alone
        patch.append(_REQUIRED_TERMS, *policy.spot_terms)
        return bool(policy.spot_terms), None
    if not policy.spot_terms:
        return False, None
    first, *rest = (t["matchExpressions"] for t in policy.spot_terms)
    left_alone = 0
    added = False
    appended: list[dict[str, Any]] = []
    for i, t in enumerate(terms):
        if any(_term_requires(sel, t) for sel in policy.spot_selectors):
            continue  # already spot only: ours from an earlier invocation, or the user's own
        expressions = t.get("matchExpressions") or []
        if t.get("matchFields") or not expressions:
            left_alone += 1
            continue
        patch.append((*_REQUIRED_TERMS, i, "matchExpressions"), *first)
        added = True
        own = [_expression_of(e) for e in expressions]
        appended.extend({"matchExpressions": [*own, *more]} for more in rest)
    patch.append(_REQUIRED_TERMS, *appended)
    warning = None
    if left_alone:
        warning = (
            f"spotshift: webhook.mode require left {left_alone} required node-affinity term(s) as they are: "
            "an empty term matches no node and a matchFields term names its nodes"
        )
    return added, warning


def _add_tolerations(pod: Mapping[str, Any], patch: Patch, policy: MutationPolicy) -> bool:
    have = _pod_tolerations(pod.get("spec") or {}, policy.toleration_keys)
    missing = [api for want, api in policy.toleration_items if not any(_covers(h, want) for h in have)]
    patch.append(_TOLERATIONS, *missing)
    return bool(missing)


def mutate_pod(pod: Mapping[str, Any], namespace: str, policy: MutationPolicy, operation: str = "CREATE") -> Mutation:
    """What to do with ``pod`` (API JSON) created in ``namespace``: the pure heart of the webhook."""
    if policy.mode == "off":
        return Mutation(skipped=SKIP_MODE_OFF)
    if operation != "CREATE":
        return Mutation(skipped=SKIP_NOT_CREATE)
    if namespace in policy.excluded_namespaces:
        return Mutation(skipped=SKIP_EXCLUDED_NAMESPACE)
    problem = pod_problem(pod, policy.limits)
    if problem is not None:
        reason, why = problem
        return Mutation(skipped=reason, warnings=(f"spotshift: pod admitted unchanged: {why}",))
    # The rescheduler's own movability checks: the two parts agree on which pods are left alone.
    lean = lean_pod(pod, namespace)
    if is_mirror_pod(lean):
        return Mutation(skipped=SKIP_MIRROR_POD)
    if is_daemonset_pod(lean):
        return Mutation(skipped=SKIP_DAEMONSET)
    if is_opted_out(lean, policy.opt_out_key):
        return Mutation(skipped=SKIP_OPT_OUT)
    if (lean.node_selector or lean.required_affinity is not None) and pinned_to_on_demand(lean, policy.classes):
        return Mutation(skipped=SKIP_PINNED_ON_DEMAND)
    spec = pod.get("spec") or {}

    patch = Patch(pod)
    kinds: list[str] = []
    warnings: list[str] = []
    if policy.mode == "prefer" and _add_preferred(pod, patch, policy):
        kinds.append(PATCH_PREFERRED_AFFINITY)
    elif policy.mode == "require":
        added, warning = _add_required(pod, patch, policy)
        if added:
            kinds.append(PATCH_REQUIRED_AFFINITY)
        if warning:
            warnings.append(warning)
    if _add_tolerations(pod, patch, policy):
        kinds.append(PATCH_TOLERATIONS)
    if not kinds and not warnings:
        return Mutation(skipped=SKIP_ALREADY_PRESENT)
    if kinds and policy.scheduler_name and spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
        # The API server defaults schedulerName before admission, so "default-scheduler" is not the user's
        # choice: it is the only value replaced. A pod naming any other scheduler keeps it.
        patch.replace(("spec", "schedulerName"), policy.scheduler_name)
        kinds.append(PATCH_SCHEDULER_NAME)
    return Mutation(ops=tuple(patch.ops), kinds=tuple(kinds), warnings=tuple(warnings))


def _response(review: Mapping[str, Any], response: AdmissionResponse) -> AdmissionReview:
    return {
        "apiVersion": review.get("apiVersion") or ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": response,
    }


def allow_unchanged(review: Mapping[str, Any], warning: str | None = None) -> AdmissionReview:
    """Allow the pod as it is, echoing the uid: the answer when something on our side went wrong."""
    uid = str((review.get("request") or {}).get("uid") or "")
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if warning:
        response["warnings"] = [warning]
    return _response(review, response)


class MutationMemo:
    """Remembers the answer for pods that look the same to :func:`mutate_pod`: a workload's replicas do.

    The key is everything :func:`mutate_pod` reads (namespace, operation, labels, annotations, owners,
    nodeSelector, affinity, tolerations, schedulerName) serialised, so a hit returns exactly what the
    function would compute; the memo only saves the work. Bounded: cleared when full.
    """

    __slots__ = ("_items", "size", "hits")

    def __init__(self, size: int = 1024) -> None:
        self._items: dict[bytes, tuple[Mutation, str | None]] = {}
        self.size = size
        self.hits = 0

    @staticmethod
    def key(pod: Mapping[str, Any], namespace: str, operation: str) -> bytes | None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        try:
            return orjson.dumps(
                (
                    namespace,
                    operation,
                    "spec" in pod,
                    meta.get("labels"),
                    meta.get("annotations"),
                    meta.get("ownerReferences"),
                    spec.get("nodeSelector"),
                    spec.get("affinity"),
                    spec.get("tolerations"),
                    spec.get("schedulerName"),
                )
            )
        except TypeError:
            return None

    def get(self, key: bytes) -> tuple[Mutation, str | None] | None:
        hit = self._items.get(key)
        if hit is not None:
            self.hits += 1
        return hit

    def put(self, key: bytes, value: tuple[Mutation, str | None]) -> None:
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[key] = value


def build_response(
    review: AdmissionReview, policy: MutationPolicy, memo: MutationMemo | None = None
) -> tuple[AdmissionReview, Mutation]:
    """The AdmissionReview to answer ``review`` with, and what it does. Always ``allowed: true``.

    ``dryRun`` changes nothing here: the answer is the same and this server has no side effects to skip.
    ``memo`` (optional) caches the mutation and its encoded patch for pods that read alike.
    """
    request: AdmissionRequest = review["request"]
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        pod = {}  # DELETE and CONNECT carry no object (or, forged, anything): nothing to mutate
    namespace = request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
    operation = request.get("operation") or "CREATE"
    key = memo.key(pod, namespace, operation) if memo is not None else None
    hit = memo.get(key) if memo is not None and key is not None else None
    if hit is not None:
        mutation, patch = hit
    else:
        mutation = mutate_pod(pod, namespace, policy, operation)
        patch = base64.b64encode(orjson.dumps(mutation.ops)).decode("ascii") if mutation.ops else None
        if memo is not None and key is not None:
            memo.put(key, (mutation, patch))
    response: AdmissionResponse = {"uid": request["uid"], "allowed": True}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = patch
    if mutation.warnings:
        response["warnings"] = list(mutation.warnings)
    return _response(review, response), mutation
