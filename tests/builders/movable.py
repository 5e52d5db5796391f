"""What shared.movable's tests share: pods as a ReplicaSet owns them (thin wrappers over :mod:`tests.builders`
with this module's defaults), budgets, configs and the expected results.
"""

from __future__ import annotations

from typing import Any

from shared.config import Config, NodeClasses, parse_config
from shared.model import PDB, Pod
from shared.movable import Movability, Outcome
from tests import builders

DEFAULT = Config()
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "u1", "controller": True}
DELETED_AT = "2020-12-18T17:00:00Z"
CT = "karpenter.sh/capacity-type"


def pod_json(
    name: str = "bar",
    namespace: str = "default",
    *,
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    deleting: bool = False,
    priority: int | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    resource_claims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """:func:`tests.builders.pod_json` of a running pod on node ``node`` asking for 100m CPU, owned by :data:`RS`
    unless ``owners`` is given, with ``labels`` always present; ``deleting`` marks it terminating;
    ``resource_claims`` is ``spec.resourceClaims``."""
    raw = builders.pod_json(
        name,
        namespace=namespace,
        labels=labels or {},
        annotations=annotations or None,
        owners=[RS] if owners is None else owners,
        node_name="node",
        phase=phase,
        requests={"cpu": "100m"},
        volumes=volumes or None,
        priority=priority,
        node_selector=node_selector or None,
        affinity=affinity or None,
        spec={"resourceClaims": resource_claims} if resource_claims is not None else None,
    )
    if deleting:
        raw["metadata"]["deletionTimestamp"] = DELETED_AT
    return raw


def pod(name: str = "bar", namespace: str = "default", **kw: Any) -> Pod:
    return Pod.from_api(pod_json(name, namespace, **kw))


def owner(kind: str, name: str = "x", controller: bool = True) -> dict[str, Any]:
    return builders.owner(kind, name, controller=controller, uid="u", api_version="apps/v1")


def empty_dir(name: str, medium: str = "") -> dict[str, Any]:
    return {"name": name, "emptyDir": {"medium": medium} if medium else {}}


def pdb(namespace: str, match_labels: dict[str, str] | None) -> PDB:
    """A policy/v1 budget named ``pdb`` with ``minAvailable: 1``; ``None`` leaves the selector out."""
    selector = {"matchLabels": match_labels} if match_labels is not None else None
    return builders.pdb("pdb", namespace=namespace, selector=selector, min_available=1)


def config(**movability_yaml: Any) -> Config:
    return parse_config({"movability": movability_yaml})


def classes(**node_classes_yaml: Any) -> NodeClasses:
    return parse_config({"node_classes": node_classes_yaml}).node_classes


def required(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node_terms: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields:
        node_terms.append({"matchFields": fields})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}}


def skip(reason: str) -> Movability:
    return Movability(Outcome.SKIP, reason)


def block(reason: str) -> Movability:
    return Movability(Outcome.BLOCK, reason)
