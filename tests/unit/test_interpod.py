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

import copy
import gc
import itertools
from typing import Any

import pytest

from shared.interpod import check_inter_pod_affinity, preferred_inter_pod_affinity_score
from shared.memo import SnapshotMemo
from shared.model import Namespace, Node, Pod
from shared.reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
from shared.snapshot import ClusterSnapshot

# --- builders ----------------------------------------------------------------------------------------

_names = itertools.count()


def sel(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": op}
    if values is not None:
        expr["values"] = values
    return {"matchExpressions": [expr]}


def term(
    selector: dict[str, Any] | None,
    topology_key: str,
    *,
    namespaces: list[str] | None = None,
    namespace_selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``PodAffinityTerm``; ``selector=None`` leaves ``labelSelector`` out (nil)."""
    out: dict[str, Any] = {"topologyKey": topology_key}
    if selector is not None:
        out["labelSelector"] = selector
    if namespaces is not None:
        out["namespaces"] = namespaces
    if namespace_selector is not None:
        out["namespaceSelector"] = namespace_selector
    return out


def in_(key: str, topology_key: str, values: list[str]) -> dict[str, Any]:
    """``st.PodAffinityIn`` / ``PodAntiAffinityIn``."""
    return term(sel(key, "In", values), topology_key)


def not_in(key: str, topology_key: str, values: list[str]) -> dict[str, Any]:
    return term(sel(key, "NotIn", values), topology_key)


def exists(key: str, topology_key: str) -> dict[str, Any]:
    return term(sel(key, "Exists"), topology_key)


def weighted(weight: int, t: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": t}


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
    meta: dict[str, Any] = {"name": name or f"p{next(_names)}", "namespace": ns, "labels": labels or {}}
    if uid:
        meta["uid"] = uid
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c"}], "affinity": {}}
    if node:
        spec["nodeName"] = node
    if affinity or preferred_affinity:
        spec["affinity"]["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": affinity or [],
            "preferredDuringSchedulingIgnoredDuringExecution": preferred_affinity or [],
        }
    if anti or preferred_anti:
        spec["affinity"]["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti or [],
            "preferredDuringSchedulingIgnoredDuringExecution": preferred_anti or [],
        }
    return Pod.from_api({"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}})


def node(name: str, labels: dict[str, str] | None = None) -> Node:
    return Node.from_api({"metadata": {"name": name, "labels": labels or {}}, "status": {}})


def namespace(name: str, labels: dict[str, str]) -> Namespace:
    return Namespace.from_api({"metadata": {"name": name, "labels": labels}})


# scoring_test.go: nsLabelT1 / nsLabelT2 namespaces, used by the single-node NamespaceSelector cases.
NAMESPACES = [
    namespace("subteam1.team1", {"team": "team1"}),
    namespace("subteam2.team1", {"team": "team1"}),
    namespace("subteam1.team2", {"team": "team2"}),
    namespace("subteam2.team2", {"team": "team2"}),
]

# --- TestRequiredAffinitySingleNode ------------------------------------------------------------------

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
LABELS1 = {"region": "r1", "zone": "z11"}
TEAM1 = sel("team", "In", ["team1"])
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

RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}


def nodes_abc_region_zone(zone_b: str, *, with_c: bool = False) -> list[Node]:
    out = [
        node("nodeA", {"region": "r1", "zone": "z1", "hostname": "nodeA"}),
        node("nodeB", {"region": "r1", "zone": zone_b, "hostname": "nodeB"}),
    ]
    if with_c:
        out.append(node("nodeC", {"region": "r1", "zone": "z3", "hostname": "nodeC"}))
    return out


A, AA, EA = ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY

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


# --- beyond upstream's tables ------------------------------------------------------------------------

ZONES = [node("a1", {"zone": "a", "hostname": "a1"}), node("b1", {"zone": "b", "hostname": "b1"})]


def test_reasons_carry_upstream_resolvability() -> None:
    # ErrReasonAffinityRulesNotMatch is UnschedulableAndUnresolvable; the anti-affinity ones are Unschedulable.
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1", anti=[exists("app", "zone")])])
    aff = check_inter_pod_affinity(pod(affinity=[in_("app", "nope", ["x"])]), snapshot["a1"], snapshot)
    anti = check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["a1"], snapshot)
    existing_anti = check_inter_pod_affinity(pod(labels={"app": "y"}), snapshot["a1"], snapshot)
    assert aff is not None and aff.code == ERR_AFFINITY and aff.unresolvable
    assert anti is not None and anti.code == ERR_ANTI_AFFINITY and not anti.unresolvable
    assert existing_anti is not None and existing_anti.code == ERR_EXISTING_ANTI_AFFINITY
    assert not existing_anti.unresolvable
    assert aff.message == "node(s) didn't match pod affinity rules"


def test_nil_label_selector_matches_no_pod() -> None:
    incoming = pod(labels={"app": "x"}, affinity=[term(None, "zone")], anti=[term(None, "hostname")])
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1")])
    # Affinity: nothing matches the nil selector, and the pod does not match it itself either.
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_AFFINITY  # type: ignore[union-attr]
    only_anti = pod(labels={"app": "x"}, anti=[term(None, "zone")])
    assert check_inter_pod_affinity(only_anti, snapshot["a1"], snapshot) is None


def test_empty_label_selector_matches_every_pod_in_the_namespace() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"anything": "1"}, node="a1"), pod(ns="other", node="b1")])
    incoming = pod(anti=[term({}, "zone")])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_ANTI_AFFINITY  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_node_without_the_topology_key_fails_affinity_but_not_anti_affinity() -> None:
    nodes = [*ZONES, node("bare")]
    snapshot = ClusterSnapshot(nodes, [pod(labels={"app": "x"}, node="a1")])
    assert check_inter_pod_affinity(pod(affinity=[exists("app", "zone")]), snapshot["bare"], snapshot).code == (  # type: ignore[union-attr]
        ERR_AFFINITY
    )
    assert check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["bare"], snapshot) is None


def test_first_pod_of_a_series_needs_no_match_anywhere() -> None:
    # A pod matching no term elsewhere but matching its own terms may go anywhere that has the keys ...
    incoming = pod(labels={"app": "web"}, affinity=[in_("app", "zone", ["web"])])
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "db"}, node="a1")])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None
    # ... but once one pod of the series runs somewhere, only that domain is left.
    snapshot.add_pod(pod(labels={"app": "web"}), "b1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_AFFINITY  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_existing_anti_affinity_namespace_selector_reads_the_incoming_pods_namespace_labels() -> None:
    namespaces = [namespace("prod", {"env": "prod"}), namespace("dev", {"env": "dev"})]
    guard = pod(ns="guard", node="a1", anti=[term({}, "zone", namespace_selector=sel("env", "In", ["prod"]))])
    snapshot = ClusterSnapshot(ZONES, [guard], namespaces=namespaces)
    assert check_inter_pod_affinity(pod(ns="prod"), snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(pod(ns="dev"), snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(pod(ns="prod"), snapshot["b1"], snapshot) is None


def test_namespaces_and_namespace_selector_are_ORed() -> None:
    namespaces = [namespace("team-a", {"team": "a"}), namespace("team-b", {"team": "b"})]
    t = term(sel("app", "Exists"), "zone", namespaces=["listed"], namespace_selector=sel("team", "In", ["a"]))
    snapshot = ClusterSnapshot(
        ZONES,
        [pod(ns="listed", labels={"app": "1"}, node="a1"), pod(ns="team-a", labels={"app": "1"}, node="b1")],
        namespaces=namespaces,
    )
    incoming = pod(ns="team-b", anti=[t])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot).code == AA  # type: ignore[union-attr]


def test_terminating_pods_still_count_like_upstream() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1", terminating=True)])
    assert check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]


def test_pod_is_never_counted_against_itself() -> None:
    # The rescheduler asks where a bound pod could go; its own anti-affinity must not repel it.
    me = pod(labels={"app": "x"}, node="a1", anti=[exists("app", "zone")], uid="u-1")
    snapshot = ClusterSnapshot(ZONES, [me])
    assert check_inter_pod_affinity(me, snapshot["a1"], snapshot) is None
    # A copy with the same uid (e.g. the pod re-parsed) is the same pod too.
    again = pod(labels={"app": "x"}, anti=[exists("app", "zone")], uid="u-1")
    assert check_inter_pod_affinity(again, snapshot["a1"], snapshot) is None
    # A sibling with another uid is a different pod.
    sibling = pod(labels={"app": "x"}, anti=[exists("app", "zone")], uid="u-2")
    assert check_inter_pod_affinity(sibling, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]


def test_pods_on_nodes_outside_the_snapshot_are_ignored() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="ghost", anti=[exists("app", "zone")])])
    assert check_inter_pod_affinity(pod(labels={"app": "x"}), snapshot["a1"], snapshot) is None


# --- memoisation -------------------------------------------------------------------------------------


def test_memo_invalidates_on_add_pod() -> None:
    snapshot = ClusterSnapshot(ZONES)
    incoming = pod(anti=[in_("app", "zone", ["db"])])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    snapshot.add_pod(pod(labels={"app": "db"}), "a1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_memo_invalidates_on_remove_pod() -> None:
    guard = pod(labels={"app": "db"}, node="a1", anti=[exists("app", "zone")])
    snapshot = ClusterSnapshot(ZONES, [guard])
    incoming = pod(labels={"app": "web"})
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
    snapshot.remove_pod(guard)
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None


def test_memo_invalidates_on_move_pod() -> None:
    db = pod(labels={"app": "db"}, node="a1")
    snapshot = ClusterSnapshot(ZONES, [db])
    incoming = pod(labels={"app": "web"}, affinity=[in_("app", "zone", ["db"])])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot).code == A  # type: ignore[union-attr]
    snapshot.move_pod(db, "b1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == A  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_memo_keeps_snapshots_apart() -> None:
    incoming = pod(anti=[in_("app", "zone", ["db"])])
    empty = ClusterSnapshot(ZONES)
    busy = ClusterSnapshot(ZONES, [pod(labels={"app": "db"}, node="a1")])
    # Both at version 0: only the snapshot's identity tells them apart.
    assert check_inter_pod_affinity(incoming, empty["a1"], empty) is None
    assert check_inter_pod_affinity(incoming, busy["a1"], busy).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, empty["a1"], empty) is None


def test_snapshot_memo_builds_once_per_version_and_forgets_dead_snapshots() -> None:
    memo: SnapshotMemo[Pod, int] = SnapshotMemo(max_keys=2)
    builds: list[str] = []

    def build(p: Pod, _: ClusterSnapshot) -> int:
        builds.append(p.name)
        return len(builds)

    snapshot = ClusterSnapshot(ZONES)
    a, b, c = pod(name="a"), pod(name="b"), pod(name="c")
    assert memo.lookup(snapshot, a, build) == memo.lookup(snapshot, a, build) == 1
    snapshot.add_pod(pod(), "a1")  # version bump: rebuilt
    assert memo.lookup(snapshot, a, build) == 2
    memo.lookup(snapshot, b, build)
    memo.lookup(snapshot, c, build)  # third key at max_keys=2: the memo starts over, no unbounded growth
    assert memo.lookup(snapshot, a, build) == 5
    assert builds == ["a", "a", "b", "c", "a"]
    del snapshot
    gc.collect()
    assert not memo._entries  # the memo never keeps a snapshot (or its entry) alive


# --- purity ------------------------------------------------------------------------------------------


def _state(snapshot: ClusterSnapshot) -> Any:
    return (
        snapshot.version,
        [(i.name, list(i.pods), dict(i.requested), list(i.pods_with_affinity)) for i in snapshot],
        copy.deepcopy({k: dict(v.labels) for k, v in snapshot.namespaces.items()}),
    )


def test_predicates_do_not_mutate_their_inputs() -> None:
    pods = [
        pod(labels={"app": "db"}, node="a1", anti=[exists("app", "zone")]),
        pod(labels={"app": "web"}, node="b1", preferred_affinity=[weighted(5, exists("app", "zone"))]),
    ]
    snapshot = ClusterSnapshot(ZONES, pods, namespaces=NAMESPACES)
    incoming = pod(
        labels={"app": "web"},
        affinity=[exists("app", "zone")],
        anti=[in_("app", "hostname", ["cache"])],
        preferred_anti=[weighted(3, exists("app", "zone"))],
    )
    before = _state(snapshot)
    incoming_before = (dict(incoming.labels), incoming.pod_affinity, incoming.pod_anti_affinity)
    for info in snapshot:
        check_inter_pod_affinity(incoming, info, snapshot)
        preferred_inter_pod_affinity_score(incoming, info, snapshot)
    assert _state(snapshot) == before
    assert (dict(incoming.labels), incoming.pod_affinity, incoming.pod_anti_affinity) == incoming_before


# --- preferred score (scoring.go, before NormalizeScore) ---------------------------------------------


def test_preferred_score_sums_both_directions() -> None:
    nodes = [node("a1", {"zone": "a"}), node("a2", {"zone": "a"}), node("b1", {"zone": "b"}), node("bare")]
    pods = [
        pod(labels={"app": "db"}, node="a1"),
        pod(labels={"app": "cache"}, node="b1"),
        # existing pod that prefers pods like the incoming one in its zone (+7) and requires it (+hard weight)
        pod(labels={"app": "x"}, node="a2", preferred_affinity=[weighted(7, in_("app", "zone", ["web"]))]),
        pod(labels={"app": "x"}, node="b1", affinity=[in_("app", "zone", ["web"])]),
        # existing pod that prefers to avoid the incoming pod (-2)
        pod(labels={"app": "y"}, node="b1", preferred_anti=[weighted(2, exists("app", "zone"))]),
    ]
    snapshot = ClusterSnapshot(nodes, pods)
    incoming = pod(
        labels={"app": "web"},
        preferred_affinity=[weighted(10, in_("app", "zone", ["db"]))],
        preferred_anti=[weighted(4, in_("app", "zone", ["cache"]))],
    )
    scores = {n.name: preferred_inter_pod_affinity_score(incoming, snapshot[n.name], snapshot) for n in nodes}
    assert scores == {"a1": 10 + 7, "a2": 10 + 7, "b1": -4 + 1 - 2, "bare": 0}
    no_hard = preferred_inter_pod_affinity_score(incoming, snapshot["b1"], snapshot, hard_pod_affinity_weight=0)
    assert no_hard == -4 - 2


def test_preferred_score_uses_existing_pods_terms_even_without_own_preferences() -> None:
    snapshot = ClusterSnapshot(
        ZONES, [pod(labels={"app": "x"}, node="a1", preferred_anti=[weighted(9, in_("app", "zone", ["web"]))])]
    )
    incoming = pod(labels={"app": "web"})
    assert preferred_inter_pod_affinity_score(incoming, snapshot["a1"], snapshot) == -9
    assert preferred_inter_pod_affinity_score(incoming, snapshot["b1"], snapshot) == 0


# --- TestPreferredAffinity / TestPreferredAffinityWithHardPodAffinitySymmetricWeight (scoring_test.go) --
# Upstream compares NormalizeScore's output; ``normalize`` below is that function over our raw scores.
# Upstream's pods live in namespace "" (read as "default" here), so a term listing namespace "" lists
# "default" in this transcription.

RG_CHINA_AZ1_ONLY = {"az": "az1"}
AZ2 = {"az": "az2"}
S1, S2 = {"security": "S1"}, {"security": "S2"}
SECURITY_EXISTS_NO_WRONGKEY = {
    "matchExpressions": [
        {"key": "security", "operator": "Exists"},
        {"key": "wrongkey", "operator": "DoesNotExist"},
    ]
}
STAY_WITH_S1_IN_REGION: dict[str, Any] = {"preferred_affinity": [weighted(5, in_("security", "region", ["S1"]))]}
STAY_WITH_S2_IN_REGION: dict[str, Any] = {"preferred_affinity": [weighted(6, in_("security", "region", ["S2"]))]}
AFFINITY3: dict[str, Any] = {
    "preferred_affinity": [
        weighted(
            8,
            term(
                {
                    "matchExpressions": [
                        {"key": "security", "operator": "NotIn", "values": ["S1"]},
                        {"key": "security", "operator": "In", "values": ["S2"]},
                    ]
                },
                "region",
            ),
        ),
        weighted(2, term(SECURITY_EXISTS_NO_WRONGKEY, "region")),
    ]
}
HARD_AFFINITY: dict[str, Any] = {
    "affinity": [in_("security", "region", ["S1", "value2"]), term(SECURITY_EXISTS_NO_WRONGKEY, "region")]
}
AWAY_FROM_S1_IN_AZ: dict[str, Any] = {"preferred_anti": [weighted(5, in_("security", "az", ["S1"]))]}
AWAY_FROM_S2_IN_AZ: dict[str, Any] = {"preferred_anti": [weighted(5, in_("security", "az", ["S2"]))]}
STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ: dict[str, Any] = {
    "preferred_affinity": [weighted(8, in_("security", "region", ["S1"]))],
    "preferred_anti": [weighted(5, in_("security", "az", ["S2"]))],
}
_NS_SELECTOR_TERM = term(
    sel("security", "In", ["S1"]), "region", namespaces=["subteam2.team2"], namespace_selector=TEAM1
)
AFFINITY_NAMESPACE_SELECTOR: dict[str, Any] = {"preferred_affinity": [weighted(5, _NS_SELECTOR_TERM)]}
ANTI_AFFINITY_NAMESPACE_SELECTOR: dict[str, Any] = {"preferred_anti": [weighted(5, _NS_SELECTOR_TERM)]}
HARD_POD_AFFINITY: dict[str, Any] = {
    "affinity": [
        term(
            sel("service", "In", ["S1"]),
            "region",
            namespaces=["default", "subteam2.team2"],
            namespace_selector=TEAM1,
        )
    ]
}


def normalize(raw: list[int]) -> list[int]:
    """``InterPodAffinity.NormalizeScore``: ``MaxNodeScore * (s - min) / (max - min)``, truncated."""
    if not raw:
        return []
    lo, hi = min(raw), max(raw)
    return [int(100 * ((s - lo) / (hi - lo))) if hi > lo else 0 for s in raw]


def china_india_az1() -> list[Node]:
    return [node("node1", RG_CHINA), node("node2", RG_INDIA), node("node3", RG_CHINA_AZ1_ONLY)]


def on(node_name: str, labels: dict[str, str] | None = None, ns: str = "", **affinity: Any) -> Pod:
    return pod(node=node_name, labels=labels, ns=ns, **affinity)


PREFERRED = [
    pytest.param(
        pod(labels=S1),
        [],
        china_india_az1(),
        [0, 0, 0],
        id="all-nodes-are-same-priority-as-affinity-is-nil",
    ),
    pytest.param(
        pod(labels=S1, **STAY_WITH_S1_IN_REGION),
        [on("node1", S1), on("node2", S2), on("node3", S1)],
        china_india_az1(),
        [100, 0, 0],
        id="affinity-pod-matching-topology-key-and-pods-in-nodes-gets-high-score",
    ),
    pytest.param(
        pod(**STAY_WITH_S1_IN_REGION),
        [on("node1", S1)],
        [node("node1", RG_CHINA), node("node2", RG_CHINA_AZ1), node("node3", RG_INDIA)],
        [100, 100, 0],
        id="all-nodes-with-same-topology-value-as-one-with-a-matching-pod-have-the-same-score",
    ),
    pytest.param(
        pod(labels=S1, **STAY_WITH_S2_IN_REGION),
        [on("node1", S2), on("node1", S2), on("node2", S2), on("node3", S2), on("node4", S2), on("node5", S2)],
        [node(f"node{i}", RG_CHINA if i in (1, 3, 4) else RG_INDIA) for i in range(1, 6)],
        [100, 0, 100, 100, 0],
        id="affinity-region-with-more-matching-pods-gets-high-score",
    ),
    pytest.param(
        pod(labels=S1, **AFFINITY3),
        [on("node1", S1), on("node2", S2), on("node3", S1)],
        china_india_az1(),
        [20, 100, 0],
        id="affinity-different-label-operators-and-values-including-some-match-failures",
    ),
    pytest.param(
        pod(labels=S2),
        [on("node1", S1, **STAY_WITH_S1_IN_REGION), on("node2", S2, **STAY_WITH_S2_IN_REGION)],
        china_india_az1(),
        [0, 100, 0],
        id="affinity-symmetry-considered-only-preferred-terms",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1),
        [on("node1", S1, **AFFINITY_NAMESPACE_SELECTOR), on("node2", S2, **STAY_WITH_S2_IN_REGION)],
        china_india_az1(),
        [100, 0, 0],
        id="affinity-symmetry-with-namespace-selector",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1),
        [on("node1", S1, **ANTI_AFFINITY_NAMESPACE_SELECTOR), on("node2", S2, **STAY_WITH_S2_IN_REGION)],
        china_india_az1(),
        [0, 100, 100],
        id="anti-affinity-symmetry-with-namespace-selector",
    ),
    pytest.param(
        pod(labels=S1),
        [on("node1", S1, **HARD_AFFINITY), on("node2", S2, **HARD_AFFINITY)],
        china_india_az1(),
        [100, 100, 0],
        id="affinity-symmetry-considered-required-terms",
    ),
    pytest.param(
        pod(labels=S1, **AWAY_FROM_S1_IN_AZ),
        [on("node1", S1), on("node2", S2)],
        [node("node1", RG_CHINA_AZ1_ONLY), node("node2", RG_CHINA)],
        [0, 100],
        id="anti-affinity-pod-not-matching-existing-pods-in-node-gets-high-score",
    ),
    pytest.param(
        pod(labels=S1, **AWAY_FROM_S1_IN_AZ),
        [on("node1", S1), on("node2", S1)],
        [node("node1", RG_CHINA_AZ1_ONLY), node("node2", RG_CHINA)],
        [0, 100],
        id="anti-affinity-node-not-matching-topology-key-gets-higher-score",
    ),
    pytest.param(
        pod(labels=S1, **AWAY_FROM_S1_IN_AZ),
        [on("node1", S1), on("node1", S1), on("node2", S2)],
        [node("node1", RG_CHINA_AZ1_ONLY), node("node2", RG_INDIA)],
        [0, 100],
        id="anti-affinity-node-with-more-matching-pods-gets-lower-score",
    ),
    pytest.param(
        pod(labels=S2),
        [on("node1", S1, **AWAY_FROM_S2_IN_AZ), on("node2", S2, **AWAY_FROM_S1_IN_AZ)],
        [node("node1", RG_CHINA_AZ1_ONLY), node("node2", AZ2)],
        [0, 100],
        id="anti-affinity-symmetry-existing-pods-with-matching-anti-affinity",
    ),
    pytest.param(
        pod(labels=S1, **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        [on("node1", S1), on("node2", S1)],
        [node("node1", RG_CHINA), node("node2", RG_CHINA_AZ1_ONLY)],
        [100, 0],
        id="affinity-and-anti-affinity-considered-only-preferred-terms",
    ),
    pytest.param(
        pod(labels=S1, **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        [
            on("node1", S1),
            on("node1", S1),
            on("node2", S1),
            on("node3", S1),
            on("node3", S1),
            on("node4", S1),
            on("node5", S1),
        ],
        [
            node("node1", RG_CHINA_AZ1),
            node("node2", RG_INDIA),
            node("node3", RG_CHINA),
            node("node4", RG_CHINA),
            node("node5", RG_INDIA),
        ],
        [100, 0, 100, 100, 0],
        id="affinity-and-anti-affinity-pod-and-existing-pods-have-the-same-labels",
    ),
    pytest.param(
        pod(labels=S1, **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
        [
            on("node1", S1),
            on("node2", S2),
            on("node3", **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ),
            on("node4", **AWAY_FROM_S1_IN_AZ),
        ],
        [node("node1", RG_CHINA), node("node2", RG_CHINA_AZ1_ONLY), node("node3", RG_INDIA), node("node4", AZ2)],
        [100, 0, 100, 0],
        id="affinity-and-anti-affinity-and-symmetry-considered-only-preferred-terms",
    ),
    pytest.param(
        pod(labels=S1),
        [on("node1", S1), on("node2", **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ)],
        [node("node1", RG_CHINA), node("node2", RG_CHINA)],
        [0, 0],
        id="avoid-panic-when-partial-nodes-in-a-topology-do-not-have-pods-with-affinity",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1, **AFFINITY_NAMESPACE_SELECTOR),
        [
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team2"),
            on("node2", S1, "subteam2.team1"),
        ],
        [node("node1", RG_CHINA), node("node2", RG_INDIA)],
        [100, 0],
        id="affinity-with-pods-matching-namespaceSelector",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1, **AFFINITY_NAMESPACE_SELECTOR),
        [
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam2.team2"),
            on("node2", S1, "subteam2.team1"),
        ],
        [node("node1", RG_CHINA), node("node2", RG_INDIA)],
        [100, 0],
        id="affinity-with-pods-matching-both-namespaceSelector-and-namespaces-fields",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1, **ANTI_AFFINITY_NAMESPACE_SELECTOR),
        [
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team2"),
            on("node2", S1, "subteam2.team1"),
        ],
        [node("node1", RG_CHINA), node("node2", RG_INDIA)],
        [0, 100],
        id="affinity-with-pods-matching-namespaceSelector(anti-affinity-variant)",
    ),
    pytest.param(
        pod(ns="subteam1.team1", labels=S1, **ANTI_AFFINITY_NAMESPACE_SELECTOR),
        [
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam1.team1"),
            on("node1", S1, "subteam2.team2"),
            on("node2", S1, "subteam2.team1"),
        ],
        [node("node1", RG_CHINA), node("node2", RG_INDIA)],
        [0, 100],
        id="affinity-with-pods-matching-both-namespaceSelector-and-namespaces-fields(anti-affinity-variant)",
    ),
    pytest.param(
        pod(labels=S2),
        [on("node1", S1, **STAY_WITH_S1_IN_REGION_AWAY_FROM_S2_IN_AZ), on("node2", S2, **STAY_WITH_S2_IN_REGION)],
        [node("node1", RG_CHINA), node("node2", RG_INDIA)],
        [0, 100],
        id="do-not-ignore-preferred-terms-of-existing-pods",
    ),
]


@pytest.mark.parametrize(("incoming", "pods", "nodes", "want"), PREFERRED)
def test_preferred_affinity(incoming: Pod, pods: list[Pod], nodes: list[Node], want: list[int]) -> None:
    snapshot = ClusterSnapshot(nodes, pods, namespaces=NAMESPACES)
    raw = [preferred_inter_pod_affinity_score(incoming, snapshot[n.name], snapshot) for n in nodes]
    assert normalize(raw) == want


@pytest.mark.parametrize(
    ("namespace_", "weight", "want"),
    [
        pytest.param("", 1, [100, 100, 0], id="with-default-weight"),
        pytest.param("", 0, [0, 0, 0], id="with-zero-weight"),
        pytest.param("subteam1.team2", 1, [0, 0, 0], id="with-no-matching-namespace"),
        pytest.param("subteam1.team1", 1, [100, 100, 0], id="with-matching-namespaceSelector"),
        pytest.param("subteam2.team2", 1, [100, 100, 0], id="with-matching-namespaces"),
    ],
)
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(
    namespace_: str, weight: int, want: list[int]
) -> None:
    nodes = china_india_az1()
    snapshot = ClusterSnapshot(
        nodes, [on("node1", **HARD_POD_AFFINITY), on("node2", **HARD_POD_AFFINITY)], namespaces=NAMESPACES
    )
    incoming = pod(ns=namespace_, labels={"service": "S1"})
    raw = [
        preferred_inter_pod_affinity_score(incoming, snapshot[n.name], snapshot, hard_pod_affinity_weight=weight)
        for n in nodes
    ]
    assert normalize(raw) == want
