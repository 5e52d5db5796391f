"""Builders for the inter-pod (anti-)affinity tests, shaped like upstream's ``st.MakePod()`` calls.

Upstream's pods are nameless in namespace ``""``; :func:`pod` names each pod uniquely and ``Pod.from_api``
reads ``""`` as ``default``, which changes nothing in the semantics. Upstream's nodes carry no Ready
condition (the predicates never read it), nor do :func:`node`'s.
"""

from __future__ import annotations

import itertools
from typing import Any

from shared.fit_reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
from shared.model import Node, Pod
from tests import builders
from tests.builders import expr, namespace, weighted
from tests.builders import pod_affinity_term as term

__all__ = [
    "AA",
    "EA",
    "NAMESPACES",
    "RG_CHINA",
    "RG_CHINA_AZ1",
    "RG_INDIA",
    "TEAM1",
    "ZONES",
    "A",
    "exists",
    "in_",
    "namespace",
    "node",
    "not_in",
    "pod",
    "sel",
    "term",
    "weighted",
]

_names = itertools.count()


def sel(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    """A label selector with one requirement."""
    return {"matchExpressions": [expr(key, op, *(values or ()))]}


def in_(key: str, topology_key: str, values: list[str]) -> dict[str, Any]:
    """``st.PodAffinityIn`` / ``PodAntiAffinityIn``."""
    return term(sel(key, "In", values), topology_key)


def not_in(key: str, topology_key: str, values: list[str]) -> dict[str, Any]:
    return term(sel(key, "NotIn", values), topology_key)


def exists(key: str, topology_key: str) -> dict[str, Any]:
    return term(sel(key, "Exists"), topology_key)


def pod(
    *,
    ns: str = "",
    labels: dict[str, str] | None = None,
    node: str = "",
    affinity: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    preferred_affinity: list[dict[str, Any]] | None = None,
    preferred_anti: list[dict[str, Any]] | None = None,
    name: str | None = None,
    uid: str = "",
    terminating: bool = False,
) -> Pod:
    """``st.MakePod().Namespace(ns).Labels(labels).Node(node).PodAffinity(...)...``: required and preferred
    terms of both directions."""
    return builders.pod(
        name or f"p{next(_names)}",
        namespace=ns,
        labels=labels or {},
        node_name=node,
        uid=uid,
        terminating=terminating,
        affinity=builders.affinity(
            pod_required=affinity or None,
            pod_preferred=preferred_affinity or None,
            anti_required=anti or None,
            anti_preferred=preferred_anti or None,
        ),
    )


def node(name: str, labels: dict[str, str] | None = None) -> Node:
    """``st.MakeNode().Name(name).Labels(labels)``."""
    return builders.node(name, labels=labels or {}, ready=None)


# scoring_test.go: nsLabelT1 / nsLabelT2 namespaces, used by the single-node NamespaceSelector cases.
NAMESPACES = [
    namespace("subteam1.team1", {"team": "team1"}),
    namespace("subteam2.team1", {"team": "team1"}),
    namespace("subteam1.team2", {"team": "team2"}),
    namespace("subteam2.team2", {"team": "team2"}),
]
TEAM1 = sel("team", "In", ["team1"])

# filtering_test.go / scoring_test.go node labels.
RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}

# Two zones of one node each, for the cases beyond upstream's tables.
ZONES = [node("a1", {"zone": "a", "hostname": "a1"}), node("b1", {"zone": "b", "hostname": "b1"})]

A, AA, EA = ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
