"""Builders for the node-affinity tests: a pod named ``pod`` and a ready node named ``node`` by default, as
upstream's ``node_affinity_test.go`` tables build them, with node-selector terms spelled as the API spells them.
"""

from __future__ import annotations

from typing import Any

from shared.fit_reasons import ERR_NODE_AFFINITY, Reason
from shared.model import Node, Pod
from tests import builders
from tests.builders import expr
from tests.builders import node_selector as required
from tests.builders import node_selector_term as term

__all__ = ["H1", "L1", "MISMATCH", "NAME", "expr", "make_node", "make_pod", "node_json", "pod_json", "required", "term"]

MISMATCH = Reason(ERR_NODE_AFFINITY, ERR_NODE_AFFINITY, True)
NAME = "metadata.name"

# helpers_test.go TestMatchNodeSelectorTerms requirements, reused by the score tables.
L1 = [expr("label_1", "In", "label_1_val")]
H1 = [expr(NAME, "In", "host_1")]


def pod_json(
    *,
    node_selector: dict[str, str] | None = None,
    node_affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    affinity = {"nodeAffinity": node_affinity} if node_affinity is not None else None
    return builders.pod_json("pod", image="pause", node_selector=node_selector, affinity=affinity)


def make_pod(
    *,
    node_selector: dict[str, str] | None = None,
    req: dict[str, Any] | None = None,
    preferred: list[tuple[int, dict[str, Any]]] | None = None,
    node_affinity: dict[str, Any] | None = None,
) -> Pod:
    """``node_affinity`` as given, or built from ``req`` (a ``NodeSelector``) and ``preferred`` (weight, term)."""
    if node_affinity is None and (req is not None or preferred is not None):
        node_affinity = builders.affinity(node_required=req, node_preferred=preferred)["nodeAffinity"]
    return Pod.from_api(pod_json(node_selector=node_selector, node_affinity=node_affinity))


def node_json(name: str = "node", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return builders.node_json(name, labels=labels or {})


def make_node(name: str = "node", labels: dict[str, str] | None = None) -> Node:
    return Node.from_api(node_json(name, labels))
