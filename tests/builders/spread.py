"""Builders for the topology spread tests, shaped like upstream's ``st.MakePod()`` / ``st.MakeNode()`` calls.

Upstream's nodes carry no Ready condition (the spread predicate never reads it), nor do :func:`node`'s;
upstream's pods live in namespace ``""``, which ``Pod.from_api`` reads as ``default``.
"""

from __future__ import annotations

from typing import Any

from shared.fit_reasons import ERR_SPREAD, ERR_SPREAD_MISSING_LABEL
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.spread import check_topology_spread
from shared.switches import CURRENT, Switches
from tests import builders
from tests.builders import expr

FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
UNSCHEDULABLE_TAINT = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
NIL: Any = object()  # marks "labelSelector left out"


def spread(
    max_skew: int,
    key: str,
    selector: Any = FOO,
    *,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
    match_label_keys: list[str] | None = None,
) -> dict[str, Any]:
    """``st.SpreadConstraint(maxSkew, key, action, selector, minDomains, affinityPolicy, taintsPolicy,
    matchLabelKeys)``."""
    return builders.spread_constraint(
        max_skew,
        key,
        None if selector is NIL else selector,
        when=when,
        min_domains=min_domains,
        node_affinity_policy=node_affinity_policy,
        node_taints_policy=node_taints_policy,
        match_label_keys=match_label_keys,
    )


def pod(
    name: str,
    *labels: str,
    label_values: dict[str, str] | None = None,
    node: str = "",
    ns: str = "",
    constraints: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity_in: tuple[str, list[str]] | None = None,
    affinity_not_in: tuple[str, list[str]] | None = None,
    terminating: bool = False,
    uid: str = "",
    tolerations: list[dict[str, Any]] | None = None,
) -> Pod:
    """``st.MakePod().Name(name).Label(l, "")...`` (``label_values``: labels with a value); ``affinity_in`` is
    ``NodeAffinityIn(key, values)``."""
    exprs = []
    if affinity_in is not None:
        exprs.append(expr(affinity_in[0], "In", *affinity_in[1]))
    if affinity_not_in is not None:
        exprs.append(expr(affinity_not_in[0], "NotIn", *affinity_not_in[1]))
    required = builders.node_selector(builders.node_selector_term(exprs))
    return builders.pod(
        name,
        namespace=ns,
        labels={**dict.fromkeys(labels, ""), **(label_values or {})},
        node_name=node,
        uid=uid,
        terminating=terminating,
        spread=constraints or [],
        node_selector=node_selector,
        tolerations=tolerations,
        affinity=builders.affinity(node_required=required) if exprs else None,
    )


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> Node:
    """``st.MakeNode().Name(name).Labels(labels).Taints(taints)``."""
    return builders.node(name, labels=labels, taints=taints or [], ready=None)


def zoned(name: str, zone: str, **extra: str) -> Node:
    return node(name, {"zone": zone, "node": name, **extra})


def abxy(**extra: str) -> list[Node]:
    """node-a, node-b in zone1; node-x, node-y in zone2."""
    return [zoned("node-a", "zone1", **extra), zoned("node-b", "zone1", **extra), *abxy_zone2(**extra)]


def abxy_zone2(**extra: str) -> list[Node]:
    return [zoned("node-x", "zone2", **extra), zoned("node-y", "zone2", **extra)]


def foo_pods(**per_node: int) -> list[Pod]:
    """``p-a1, p-a2 on node-a ...``: ``foo_pods(a=2, y=3)``."""
    return [pod(f"p-{n}{i}", "foo", node=f"node-{n}") for n, count in per_node.items() for i in range(1, count + 1)]


def plain(name: str, lbl: dict[str, str]) -> Node:
    return node(name, lbl)


OK, SKEW, MISSING = None, ERR_SPREAD, ERR_SPREAD_MISSING_LABEL


def run_filter(incoming: Pod, nodes: list[Node], pods: list[Pod], switches: Switches = CURRENT) -> list[str | None]:
    """The spread predicate's code (or None) for ``incoming`` on each of ``nodes``, in order, under the rules
    ``switches`` select (today's by default)."""
    snapshot = ClusterSnapshot(nodes, pods)
    return [
        r.code if (r := check_topology_spread(incoming, snapshot[n.name], snapshot, switches=switches)) else None
        for n in nodes
    ]
