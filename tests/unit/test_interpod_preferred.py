"""Preferred inter-pod (anti-)affinity scores, transcribed from kube-scheduler's own tables.

Upstream: ``pkg/scheduler/framework/plugins/interpodaffinity/scoring_test.go`` (``TestPreferredAffinity``,
``TestPreferredAffinityWithHardPodAffinitySymmetricWeight``), plus the raw score before ``NormalizeScore``.
Each pytest id names the upstream case.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.interpod import preferred_inter_pod_affinity_score
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from tests.builders.interpod import (
    NAMESPACES,
    RG_CHINA,
    RG_CHINA_AZ1,
    RG_INDIA,
    TEAM1,
    ZONES,
    exists,
    in_,
    node,
    pod,
    sel,
    term,
    weighted,
)

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
