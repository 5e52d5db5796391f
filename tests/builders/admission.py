"""What the webhook's tests share: the pod a ReplicaSet creates, its AdmissionReview, policies, and a strict
RFC 6902 applier.

Each patch is applied with the small, strict applier below (it refuses to add below a missing parent, as the
API server's does), and the result is checked as a pod, not as a list of operations. Pods are
:func:`tests.builders.pod_json` with the defaults of :func:`make_pod`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from extender.admission import Mutation, MutationPolicy, mutate_pod
from shared.config import Config, parse_config
from tests import builders
from tests.builders import Json, container, expr, owner, pod_affinity_term, toleration, weighted

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

# --- a strict JSON patch applier (RFC 6902 add/replace, RFC 6901 pointers) ---------------------------


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        tokens = [unescape(t) for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]  # KeyError: missing parent
        last = tokens[-1]
        value = copy.deepcopy(op["value"])
        if isinstance(parent, list):
            if last == "-":
                parent.append(value)
            else:
                parent.insert(int(last), value)
        else:
            if op["op"] == "replace":
                assert last in parent, f"replace of a missing member {op['path']}"
            parent[last] = value
    return doc


# --- builders -----------------------------------------------------------------------------------------

NOT_READY = toleration("node.kubernetes.io/not-ready", "Exists", effect="NoExecute", seconds=300)
"""The toleration the API server's DefaultTolerationSeconds plugin gives every pod before webhooks run."""

ANTI_AFFINITY = weighted(50, pod_affinity_term({"matchLabels": {"app": "web"}}, "h"))
"""A preferred pod anti-affinity to the other ``app: web`` pods (``make_pod(anti_affinity=True)``)."""


def term(*exprs: Json) -> Json:
    """A ``NodeSelectorTerm`` of the given requirements (ANDed)."""
    return builders.node_selector_term(list(exprs))


def make_pod(
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner_kind: str = "",
    node_selector: Mapping[str, str] | None = None,
    required: Sequence[Any] | None = None,
    preferred: Sequence[tuple[int, Json]] | None = None,
    anti_affinity: bool = False,
    tolerations: Sequence[Json] | None = (NOT_READY,),
    scheduler: str | None = "default-scheduler",
) -> Json:
    """A pod of the Deployment ``web`` in ``shop`` as admission sees it on CREATE: no name yet, one container
    asking for 100m CPU, the defaulted scheduler name and :data:`NOT_READY`.

    ``labels`` are added to ``app: web``; ``owner_kind`` makes a controller of that kind own the pod;
    ``required`` are node-affinity terms (ORed), ``preferred`` ``(weight, term)`` pairs; ``tolerations``
    replaces the default ones; ``tolerations=None`` and ``scheduler=None`` leave those fields out.
    """
    return builders.pod_json(
        "",
        generate_name="web-6d4cf56db6-",
        namespace="shop",
        labels={"app": "web", **(labels or {})},
        annotations=annotations,
        owners=[owner(owner_kind, "owner", uid="u", api_version="apps/v1")] if owner_kind else None,
        containers=[container("web", image="nginx", requests={"cpu": "100m"})],
        tolerations=list(tolerations) if tolerations is not None else None,
        node_selector=node_selector,
        affinity=builders.affinity(
            node_required=builders.node_selector(*required) if required is not None else None,
            node_preferred=preferred,
            anti_preferred=[ANTI_AFFINITY] if anti_affinity else None,
        )
        or None,
        spec={"schedulerName": scheduler} if scheduler is not None else None,
    )


def review(pod: Json, *, namespace: str = "shop", operation: str = "CREATE", dry_run: bool = False) -> Json:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "object": pod,
            "dryRun": dry_run,
        },
    }


def policy(**settings: Any) -> MutationPolicy:
    """A policy from config sections given as keyword dicts, e.g. ``policy(webhook={"mode": "require"})``."""
    return MutationPolicy.from_config(parse_config(settings))


KARPENTER = policy(node_classes={"presets": ["karpenter"]})
KARPENTER_TERM = term(expr("karpenter.sh/capacity-type", "In", "spot"))
AKS_TOLERATION = toleration("kubernetes.azure.com/scalesetpriority", "Equal", "spot", "NoSchedule")
AKS = policy(node_classes={"presets": ["aks"]})
DEFAULT = MutationPolicy.from_config(Config())


def mutated(pod: Json, pol: MutationPolicy, namespace: str = "shop") -> tuple[Json, Mutation]:
    m = mutate_pod(pod, namespace, pol)
    return apply_patch(pod, list(m.ops)), m


def node_affinity(pod: Json) -> Json:
    return pod["spec"].get("affinity", {}).get("nodeAffinity", {})
