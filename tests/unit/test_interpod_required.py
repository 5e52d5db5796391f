"""Required inter-pod (anti-)affinity, transcribed from kube-scheduler's own tables.

Upstream: ``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go``
(``TestRequiredAffinitySingleNode``, ``TestRequiredAffinityMultipleNodes``) and ``scoring_test.go``
(namespaces fixture). Each pytest id names the upstream case. Upstream's pods are nameless in namespace
``""``; here every pod gets a unique name and ``""`` is ``default`` (as ``Pod.from_api`` reads it), which
changes nothing in the semantics.

Not transcribed: the two "fails PreFilter with an invalid (anti)affinity label syntax" cases, which test
the API's label-value validation (objects read from the API server are already valid).
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.fit_reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
from shared.interpod import check_inter_pod_affinity
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from tests.builders.interpod import (
    AA,
    EA,
    NAMESPACES,
    RG_CHINA,
    RG_CHINA_AZ1,
    RG_INDIA,
    TEAM1,
    A,
    exists,
    in_,
    namespace,
    node,
    not_in,
    pod,
    sel,
    term,
)

# --- TestRequiredAffinitySingleNode ------------------------------------------------------------------

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
LABELS1 = {"region": "r1", "zone": "z11"}
SECURITYSCAN_OR_VALUE2 = sel("service", "In", ["securityscan", "value2"])


def existing() -> Pod:
    """Upstream's ``pod``: service=securityscan on node1."""
    return pod(labels=POD_LABEL, node="node1")


def multi_terms(second_value: str) -> list[dict[str, Any]]:
    return [
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": "service", "operator": "Exists"},
                    {"key": "wrongkey", "operator": "DoesNotExist"},
                ]
            },
            "topologyKey": "region",
        },
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": "service", "operator": "In", "values": [second_value]},
                    {"key": "service", "operator": "NotIn", "values": ["WrongValue"]},
                ]
            },
            "topologyKey": "region",
        },
    ]


SINGLE_NODE = [
    pytest.param(
        pod(),
        [],
        None,
        id="pod-without-required-pod-affinity-schedules-onto-a-node-with-no-existing-pods",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=[in_("service", "region", ["securityscan", "value2"])]),
        [existing()],
        None,
        id="satisfies-required-pod-affinity-using-In-operator-that-matches-the-existing-pod",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=[not_in("service", "region", ["securityscan3", "value3"])]),
        [existing()],
        None,
        id="satisfies-required-pod-affinity-using-NotIn-operator-that-matches-the-existing-pod",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=[term(SECURITYSCAN_OR_VALUE2, "", namespaces=["DiffNameSpace"])]),
        [pod(ns="ns", labels=POD_LABEL, node="node1")],
        ERR_AFFINITY,
        id="does-not-satisfy-pod-affinity-with-labelSelector-because-of-diff-namespace",
    ),
    pytest.param(
        pod(labels=POD_LABEL, affinity=[in_("service", "", ["antivirusscan", "value2"])]),
        [existing()],
        ERR_AFFINITY,
        id="does-not-satisfy-pod-affinity-because-of-unmatching-labelSelector-with-the-existing-pod",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=multi_terms("securityscan")),
        [existing()],
        None,
        id="satisfies-pod-affinity-with-different-label-operators-in-multiple-required-terms",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=multi_terms("securityscan2")),
        [existing()],
        ERR_AFFINITY,
        id="labelSelector-requirements-are-ANDed-one-matchExpression-item-does-not-match",
    ),
    pytest.param(
        pod(
            labels=POD_LABEL2,
            affinity=[in_("service", "region", ["securityscan", "value2"])],
            anti=[in_("service", "node", ["antivirusscan", "value2"])],
        ),
        [existing()],
        None,
        id="satisfies-pod-affinity-and-pod-anti-affinity-with-the-existing-pod",
    ),
    pytest.param(
        pod(
            labels=POD_LABEL2,
            affinity=[in_("service", "region", ["securityscan", "value2"])],
            anti=[in_("service", "node", ["antivirusscan", "value2"])],
        ),
        [pod(labels=POD_LABEL, node="node1", anti=[in_("service", "node", ["antivirusscan", "value2"])])],
        None,
        id="satisfies-pod-affinity-and-pod-anti-affinity-and-anti-affinity-symmetry-with-the-existing-pod",
    ),
    pytest.param(
        pod(
            labels=POD_LABEL2,
            affinity=[in_("service", "region", ["securityscan", "value2"])],
            anti=[in_("service", "zone", ["securityscan", "value2"])],
        ),
        [existing()],
        ERR_ANTI_AFFINITY,
        id="satisfies-pod-affinity-but-not-pod-anti-affinity-with-the-existing-pod",
    ),
    pytest.param(
        pod(
            labels=POD_LABEL,
            affinity=[in_("service", "region", ["securityscan", "value2"])],
            anti=[in_("service", "node", ["antivirusscan", "value2"])],
        ),
        [pod(labels=POD_LABEL, node="node1", anti=[in_("service", "zone", ["securityscan", "value2"])])],
        ERR_EXISTING_ANTI_AFFINITY,
        id="satisfies-pod-affinity-and-anti-affinity-but-not-anti-affinity-symmetry-with-the-existing-pod",
    ),
    pytest.param(
        pod(labels=POD_LABEL, affinity=[not_in("service", "region", ["securityscan", "value2"])]),
        [pod(labels={"service": "securityscan"}, node="node2")],
        ERR_AFFINITY,
        id="pod-matches-its-own-label-in-pod-affinity-and-that-matches-the-existing-pod-labels",
    ),
    pytest.param(
        pod(labels=POD_LABEL),
        [pod(labels=POD_LABEL, node="node1", anti=[in_("service", "zone", ["securityscan", "value2"])])],
        ERR_EXISTING_ANTI_AFFINITY,
        id="existing-pod-anti-affinity-respected-when-pod-has-none-does-not-satisfy-symmetry",
    ),
    pytest.param(
        pod(labels=POD_LABEL),
        [pod(labels=POD_LABEL, node="node1", anti=[not_in("service", "zone", ["securityscan", "value2"])])],
        None,
        id="existing-pod-anti-affinity-respected-when-pod-has-none-satisfies-symmetry",
    ),
    pytest.param(
        pod(labels=POD_LABEL, anti=[exists("service", "region"), exists("security", "region")]),
        [pod(labels=POD_LABEL2, node="node1", anti=[exists("security", "zone")])],
        ERR_ANTI_AFFINITY,
        id="satisfies-anti-affinity-with-existing-pod-but-not-anti-affinity-symmetry-with-incoming-pod",
    ),
    pytest.param(
        pod(labels=POD_LABEL, anti=[exists("service", "zone"), exists("security", "zone")]),
        [pod(labels=POD_LABEL2, node="node1", anti=[exists("security", "zone")])],
        ERR_ANTI_AFFINITY,
        id="anti-affinity-symmetry-check-a1-incoming-and-existing-pod-partially-match-each-other",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, anti=[exists("security", "zone")]),
        [pod(labels=POD_LABEL, node="node1", anti=[exists("service", "zone"), exists("security", "zone")])],
        ERR_EXISTING_ANTI_AFFINITY,
        id="anti-affinity-symmetry-check-a2-incoming-and-existing-pod-partially-match-each-other",
    ),
    pytest.param(
        pod(labels={"abc": "", "xyz": ""}, anti=[exists("abc", "zone"), exists("def", "zone")]),
        [pod(labels={"def": "", "xyz": ""}, node="node1", anti=[exists("abc", "zone"), exists("def", "zone")])],
        ERR_ANTI_AFFINITY,
        id="anti-affinity-symmetry-check-b1-incoming-and-existing-pod-partially-match-each-other",
    ),
    pytest.param(
        pod(labels={"def": "", "xyz": ""}, anti=[exists("abc", "zone"), exists("def", "zone")]),
        [pod(labels={"abc": "", "xyz": ""}, node="node1", anti=[exists("abc", "zone"), exists("def", "zone")])],
        ERR_ANTI_AFFINITY,
        id="anti-affinity-symmetry-check-b2-incoming-and-existing-pod-partially-match-each-other",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=[term(SECURITYSCAN_OR_VALUE2, "region", namespace_selector=TEAM1)]),
        [pod(ns="subteam1.team1", labels=POD_LABEL, node="node1")],
        None,
        id="affinity-with-namespaceSelector",
    ),
    pytest.param(
        pod(labels=POD_LABEL2, affinity=[term(SECURITYSCAN_OR_VALUE2, "region", namespace_selector=TEAM1)]),
        [pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")],
        ERR_AFFINITY,
        id="affinity-with-non-matching-namespaceSelector",
    ),
    pytest.param(
        pod(
            ns="subteam1.team1",
            labels=POD_LABEL2,
            anti=[term(SECURITYSCAN_OR_VALUE2, "zone", namespace_selector=TEAM1)],
        ),
        [pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")],
        ERR_ANTI_AFFINITY,
        id="anti-affinity-with-matching-namespaceSelector",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=POD_LABEL2, anti=[term(SECURITYSCAN_OR_VALUE2, "zone", namespace_selector={})]),
        [pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")],
        ERR_ANTI_AFFINITY,
        id="anti-affinity-with-matching-all-namespaceSelector",
    ),
    pytest.param(
        pod(
            ns="subteam1.team1",
            labels=POD_LABEL2,
            anti=[term(SECURITYSCAN_OR_VALUE2, "zone", namespace_selector=TEAM1)],
        ),
        [pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")],
        None,
        id="anti-affinity-with-non-matching-namespaceSelector",
    ),
]


@pytest.mark.parametrize(("incoming", "pods", "want"), SINGLE_NODE)
def test_required_affinity_single_node(incoming: Pod, pods: list[Pod], want: str | None) -> None:
    snapshot = ClusterSnapshot([node("node1", LABELS1)], pods, namespaces=NAMESPACES)
    got = check_inter_pod_affinity(incoming, snapshot["node1"], snapshot)
    assert (got.code if got else None) == want


# --- TestRequiredAffinityMultipleNodes ---------------------------------------------------------------


def nodes_abc_region_zone(zone_b: str, *, with_c: bool = False) -> list[Node]:
    out = [
        node("nodeA", {"region": "r1", "zone": "z1", "hostname": "nodeA"}),
        node("nodeB", {"region": "r1", "zone": zone_b, "hostname": "nodeB"}),
    ]
    if with_c:
        out.append(node("nodeC", {"region": "r1", "zone": "z3", "hostname": "nodeC"}))
    return out


MULTIPLE_NODES = [
    pytest.param(
        pod(affinity=[in_("foo", "region", ["bar"])]),
        [pod(name="p1", node="node1", labels={"foo": "bar"})],
        [node("node1", RG_CHINA), node("node2", RG_CHINA_AZ1), node("node3", RG_INDIA)],
        [None, None, A],
        id="pod-schedules-onto-all-nodes-with-same-topology-value-as-one-with-a-matching-existing-pod",
    ),
    pytest.param(
        pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[in_("foo", "zone", ["bar"]), in_("service", "zone", ["securityscan"])],
        ),
        [pod(name="p1", node="nodeA", labels={"foo": "bar"})],
        [node("nodeA", {"zone": "az1", "hostname": "h1"}), node("nodeB", {"zone": "az2", "hostname": "h2"})],
        [None, None],
        id="first-pod-of-the-collection-is-not-blocked-even-with-no-existing-pod-matching-anywhere",
    ),
    pytest.param(
        pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[in_("foo", "zone", ["bar"]), in_("service", "zone", ["securityscan"])],
        ),
        [pod(name="p1", node="nodeA", labels={"foo": "bar"})],
        [
            node("nodeA", {"zoneLabel": "az1", "hostname": "h1"}),
            node("nodeB", {"zoneLabel": "az2", "hostname": "h2"}),
        ],
        [A, A],
        id="first-pod-of-the-collection-only-on-nodes-labelled-with-the-requested-topology-keys",
    ),
    pytest.param(
        pod(anti=[in_("foo", "region", ["abc"])]),
        [pod(node="nodeA", labels={"foo": "abc"})],
        [
            node("nodeA", {"region": "r1", "hostname": "nodeA"}),
            node("nodeB", {"region": "r1", "hostname": "nodeB"}),
        ],
        [AA, AA],
        id="nodeA-and-nodeB-same-topology-value-nodeA-has-matching-pod-pod-cannot-go-on-either",
    ),
    pytest.param(
        pod(anti=[in_("foo", "region", ["abc"]), in_("service", "zone", ["securityscan"])]),
        [pod(node="nodeA", labels={"foo": "abc", "service": "securityscan"})],
        [
            node("nodeA", {"region": "r1", "zone": "z1", "hostname": "nodeA"}),
            node("nodeB", {"region": "r1", "zone": "z2", "hostname": "nodeB"}),
        ],
        [AA, AA],
        id="anti-affinity-matches-a-pod-when-any-term-of-the-rule-matches",
    ),
    pytest.param(
        pod(anti=[in_("foo", "region", ["abc"])]),
        [pod(node="nodeA", labels={"foo": "abc"})],
        [node("nodeA", RG_CHINA), node("nodeB", RG_CHINA_AZ1), node("nodeC", RG_INDIA)],
        [AA, AA, None],
        id="nodeA-and-nodeB-same-topology-value-pod-cannot-go-there-but-can-go-onto-nodeC",
    ),
    pytest.param(
        pod(ns="NS1", labels={"foo": "123"}, anti=[in_("foo", "region", ["bar"])]),
        [
            pod(node="nodeA", ns="NS1", labels={"foo": "bar"}),
            pod(node="nodeC", ns="NS2", anti=[in_("foo", "region", ["123"])]),
        ],
        [node("nodeA", RG_CHINA), node("nodeB", RG_CHINA_AZ1), node("nodeC", RG_INDIA)],
        [AA, AA, None],
        id="pod-can-go-onto-nodeC-whose-matching-existing-pod-is-in-a-different-namespace",
    ),
    pytest.param(
        pod(labels={"foo": ""}),
        [pod(node="nodeA", anti=[exists("foo", "invalid-node-label")])],
        nodes_abc_region_zone("z1"),
        [None, None],
        id="existing-pod-anti-affinity-term-with-invalid-topologyKey-checks-selector-then-topologyKey",
    ),
    pytest.param(
        pod(node="nodeA", anti=[exists("foo", "invalid-node-label")]),
        [pod(node="nodeA", labels={"foo": ""})],
        nodes_abc_region_zone("z1"),
        [None, None],
        id="incoming-pod-anti-affinity-selector-matches-but-topologyKey-is-still-checked",
    ),
    pytest.param(
        pod(labels={"foo": "", "bar": ""}),
        [
            pod(node="nodeA", anti=[exists("foo", "zone")]),
            pod(node="nodeA", anti=[exists("bar", "region")]),
        ],
        nodes_abc_region_zone("z2"),
        [EA, EA],
        id="existing-pod-anti-affinity-incoming-pod-violates-each-existing-pod-terms-on-all-nodes",
    ),
    pytest.param(
        pod(anti=[exists("foo", "zone"), exists("bar", "region")]),
        [pod(node="nodeA", labels={"foo": ""}), pod(node="nodeB", labels={"bar": ""})],
        nodes_abc_region_zone("z2"),
        [AA, AA],
        id="incoming-pod-anti-affinity-violates-at-least-one-anti-affinity-rule-of-existing-pod",
    ),
    pytest.param(
        pod(labels={"foo": "", "bar": ""}),
        [pod(node="nodeA", anti=[exists("foo", "invalid-node-label"), exists("bar", "zone")])],
        nodes_abc_region_zone("z2"),
        [EA, None],
        id="existing-pod-anti-affinity-selector-and-topologyKey-both-match-one-term-invalid-key",
    ),
    pytest.param(
        pod(anti=[exists("foo", "invalid-node-label"), exists("bar", "zone")]),
        [pod(name="podA", node="nodeA", labels={"foo": "", "bar": ""})],
        nodes_abc_region_zone("z2"),
        [AA, None],
        id="incoming-pod-anti-affinity-selector-and-topologyKey-both-match-one-term-invalid-key",
    ),
    pytest.param(
        pod(labels={"foo": "", "bar": ""}),
        [pod(node="nodeA", anti=[exists("foo", "region"), exists("bar", "zone")])],
        nodes_abc_region_zone("z2"),
        [EA, EA],
        id="existing-pod-anti-affinity-selector-and-topologyKey-both-match-all-terms-valid-key",
    ),
    pytest.param(
        pod(anti=[exists("foo", "region"), exists("bar", "zone")]),
        [pod(node="nodeA", labels={"foo": "", "bar": ""})],
        nodes_abc_region_zone("z2"),
        [AA, AA],
        id="incoming-pod-anti-affinity-selector-and-topologyKey-both-match-all-terms-valid-key",
    ),
    pytest.param(
        pod(labels={"foo": "", "bar": ""}),
        [
            pod(node="nodeA", anti=[exists("foo", "zone"), exists("labelA", "zone")]),
            pod(node="nodeB", anti=[exists("bar", "zone"), exists("labelB", "zone")]),
        ],
        nodes_abc_region_zone("z2", with_c=True),
        [EA, EA, None],
        id="existing-pods-on-nodeA-and-nodeB-each-have-a-matching-anti-affinity-term-only-nodeC-fits",
    ),
    pytest.param(
        pod(affinity=[exists("foo", "region"), exists("bar", "zone")]),
        [pod(name="pod1", labels={"foo": "", "bar": ""}, node="nodeA")],
        nodes_abc_region_zone("z1"),
        [None, None],
        id="incoming-pod-affinity-first-all-terms-match-then-all-topologyKeys-match",
    ),
    pytest.param(
        pod(affinity=[exists("foo", "region"), exists("bar", "zone")]),
        [pod(node="nodeA", name="pod1", labels={"foo": ""}), pod(node="nodeB", name="pod2", labels={"bar": ""})],
        nodes_abc_region_zone("z2"),
        [A, A],
        id="incoming-pod-affinity-terms-and-topologyKeys-must-be-satisfied-by-the-same-pod",
    ),
]


@pytest.mark.parametrize(("incoming", "pods", "nodes", "want"), MULTIPLE_NODES)
def test_required_affinity_multiple_nodes(
    incoming: Pod, pods: list[Pod], nodes: list[Node], want: list[str | None]
) -> None:
    snapshot = ClusterSnapshot(nodes, pods, namespaces=[namespace("NS1", {})])
    got = [check_inter_pod_affinity(incoming, snapshot[n.name], snapshot) for n in nodes]
    assert [r.code if r else None for r in got] == want
