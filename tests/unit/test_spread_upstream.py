"""Topology spread (DoNotSchedule), transcribed from kube-scheduler's own tables.

Upstream: ``pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go`` (``TestSingleConstraint``
including its minDomains and NodeAffinityPolicy/NodeTaintsPolicy cases, ``TestMultipleConstraints``, and
``TestPreFilterState``'s matchLabelKeys cases, the one with an empty selector at each served release's tag),
run with NodeInclusionPolicyInPodTopologySpread and MatchLabelKeysInPodTopologySpread enabled (their defaults
since 1.26 and 1.27). Each pytest id names the
upstream case. Upstream's status codes map to: Success → ``None``, Unschedulable → ``ERR_SPREAD``,
UnschedulableAndUnresolvable → ``ERR_SPREAD_MISSING_LABEL``. Only the spread predicate runs, so (as the
upstream comments say) nodes that node affinity or taints would reject may still pass here.
"""

from __future__ import annotations

import pytest

from shared.model import Node, Pod
from shared.switches import for_version
from tests.builders.spread import (
    BAR,
    FOO,
    MISSING,
    NIL,
    OK,
    SKEW,
    UNSCHEDULABLE_TAINT,
    abxy,
    abxy_zone2,
    foo_pods,
    node,
    plain,
    pod,
    run_filter,
    spread,
    zoned,
)

# --- TestSingleConstraint ----------------------------------------------------------------------------

INCLUSION_NODES = [
    plain("node-a", {"node": "node-a", "foo": ""}),
    plain("node-b", {"node": "node-b", "foo": ""}),
    plain("node-x", {"node": "node-x", "foo": ""}),
    plain("node-y", {"node": "node-y"}),
]
TAINTED_NODES = [*INCLUSION_NODES[:3], node("node-y", {"node": "node-y"}, UNSCHEDULABLE_TAINT)]
INCLUSION_PODS = [
    ("p-b1", "node-a"),
    ("p-b2", "node-b"),
    ("p-y1", "node-y"),
]


def inclusion_pods() -> list[Pod]:
    return [pod(n, "foo", node=at) for n, at in INCLUSION_PODS]


SINGLE = [
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone")]),
        abxy(),
        [],
        [OK, OK, OK, OK],
        id="no-existing-pods",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone", BAR)]),
        abxy(),
        [],
        [OK, OK, OK, OK],
        id="no-existing-pods-incoming-pod-does-not-match-itself",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone")]),
        abxy(),
        [
            pod("p-a1", "foo", ns="ns1", node="node-a"),
            pod("p-b1", "foo", ns="ns2", node="node-a"),
            pod("p-x1", "foo", node="node-x"),
            pod("p-y1", "foo", node="node-y"),
        ],
        [OK, OK, SKEW, SKEW],
        id="existing-pods-in-a-different-namespace-do-not-count",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone", NIL)]),
        abxy(),
        foo_pods(x=1, y=1),
        [OK, OK, OK, OK],
        id="existing-pods-do-not-match-null-selector",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone")]),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [OK, OK, OK, OK],
        id="pods-spread-across-zones-as-3/3-all-nodes-fit",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone")]),
        [zoned("node-a", "zone1"), node("node-b", {"zon": "zone1", "node": "node-b"}), *abxy_zone2()],
        foo_pods(a=1, b=1, x=1, y=1),
        [OK, MISSING, SKEW, SKEW],
        id="pods-spread-across-zones-as-1/2-due-to-absence-of-label-zone-on-node-b",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "rack")]),
        [zoned("node-a", "zone1"), zoned("node-x", "zone2")],
        [],
        [MISSING, MISSING],
        id="pod-cannot-be-scheduled-as-all-nodes-do-not-have-label-rack",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")]),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [SKEW, SKEW, OK, SKEW],
        id="pods-spread-across-nodes-as-2/1/0/3-only-node-x-fits",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(2, "node")]),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [SKEW, OK, OK, SKEW],
        id="pods-spread-across-nodes-as-2/1/0/3-maxSkew-is-2-node-b-and-node-x-fit",
    ),
    pytest.param(
        pod("p", "bar", constraints=[spread(1, "node")]),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [SKEW, OK, OK, SKEW],
        id="pods-spread-across-nodes-as-2/1/0/3-but-pod-does-not-match-itself",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")], affinity_in=("node", ["node-a", "node-y"])),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [OK, OK, OK, SKEW],
        id="incoming-pod-has-nodeAffinity-pods-spread-as-2/~1~/~0~/3-hence-node-a-fits",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")]),
        [plain("node-a", {"node": "node-a"}), plain("node-b", {"node": "node-b"})],
        [pod("p-a", "foo", node="node-a", terminating=True), pod("p-b", "foo", node="node-b")],
        [OK, SKEW],
        id="terminating-pods-should-be-excluded",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone")], affinity_not_in=("node", ["node-b"])),
        abxy(),
        foo_pods(b=2, y=1),
        [OK, OK, SKEW, SKEW],
        id="incoming-pod-has-nodeAffinity-pods-spread-as-0/~2~/0/1-hence-node-a-fits",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(2, "node", min_domains=4)]),
        [plain(n, {"node": n}) for n in ("node-a", "node-b", "node-c")],
        foo_pods(a=2, b=2, c=1),
        [SKEW, SKEW, OK],
        id="pods-spread-across-nodes-as-2/2/1-maxSkew-2-domains-fewer-than-minDomains-third-node-fits",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(2, "node", min_domains=2)]),
        [plain(n, {"node": n}) for n in ("node-a", "node-b", "node-c")],
        foo_pods(a=2, b=2, c=1),
        [OK, OK, OK],
        id="pods-spread-across-nodes-as-2/2/1-maxSkew-2-domains-more-than-minDomains-all-nodes-fit",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(2, "zone", min_domains=3)]),
        abxy(),
        [pod("p-b1", "foo", node="node-a"), pod("p-b2", "foo", node="node-b"), pod("p-y1", "foo", node="node-y")],
        [SKEW, SKEW, OK, OK],
        id="pods-spread-across-zone-as-2/1-maxSkew-2-domains-fewer-than-minDomains-third-and-fourth-nodes-fit",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(2, "zone", min_domains=1)]),
        abxy(),
        [pod("p-b1", "foo", node="node-a"), pod("p-b2", "foo", node="node-b"), pod("p-y1", "foo", node="node-y")],
        [OK, OK, OK, OK],
        id="pods-spread-across-zone-as-2/1-maxSkew-2-domains-more-than-minDomains-all-nodes-fit",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")], node_selector={"foo": ""}),
        INCLUSION_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, OK],
        id="NodeAffinityPolicy-honored-with-labelSelectors",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node", node_affinity_policy="Ignore")], node_selector={"foo": ""}),
        INCLUSION_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, SKEW],
        id="NodeAffinityPolicy-ignored-with-labelSelectors",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")], affinity_in=("foo", [""])),
        INCLUSION_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, OK],
        id="NodeAffinityPolicy-honored-with-nodeAffinity",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node", node_affinity_policy="Ignore")], affinity_in=("foo", [""])),
        INCLUSION_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, SKEW],
        id="NodeAffinityPolicy-ignored-with-labelSelectors(second-case,with-nodeAffinity)",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node", node_taints_policy="Honor")]),
        TAINTED_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, OK],
        id="NodeTaintsPolicy-honored",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "node")]),
        TAINTED_NODES,
        inclusion_pods(),
        [SKEW, SKEW, OK, SKEW],
        id="NodeTaintsPolicy-ignored",
    ),
]

# --- TestMultipleConstraints -------------------------------------------------------------------------

ZONE_NODE = [spread(1, "zone"), spread(1, "node")]
ZONE_FOO_NODE_BAR = [spread(1, "zone", FOO), spread(1, "node", BAR)]

MULTIPLE = [
    pytest.param(
        pod("p", "foo", constraints=ZONE_NODE),
        abxy(),
        foo_pods(a=2, b=1, y=3),
        [SKEW, SKEW, OK, SKEW],
        id="two-constraints-on-zone-and-node-spreads-[3/3,2/1/0/3]",
    ),
    pytest.param(
        pod("p", "foo", constraints=ZONE_NODE),
        abxy(),
        foo_pods(a=2, b=1, y=4),
        [SKEW, SKEW, SKEW, SKEW],
        id="two-constraints-on-zone-and-node-spreads-[3/4,2/1/0/4]",
    ),
    pytest.param(
        pod("p", "foo", "bar", constraints=ZONE_FOO_NODE_BAR),
        abxy(),
        [pod("p-a1", "foo", node="node-a"), pod("p-y1", "bar", node="node-y")],
        [SKEW, SKEW, OK, SKEW],
        id="constraints-hold-different-labelSelectors-spreads-[1/0,1/0/0/1]",
    ),
    pytest.param(
        pod("p", "foo", "bar", constraints=ZONE_FOO_NODE_BAR),
        abxy(),
        [pod("p-a1", "foo", node="node-a"), pod("p-x1", "bar", node="node-x"), pod("p-y1", "bar", node="node-y")],
        [SKEW, SKEW, SKEW, SKEW],
        id="constraints-hold-different-labelSelectors-spreads-[1/0,0/0/1/1]",
    ),
    pytest.param(
        pod("p", "foo", "bar", constraints=ZONE_FOO_NODE_BAR),
        abxy(),
        [
            pod("p-a1", "foo", node="node-a"),
            pod("p-a2", "foo", "bar", node="node-a"),
            pod("p-y1", "foo", node="node-y"),
            pod("p-y2", "foo", "bar", node="node-y"),
            pod("p-y3", "foo", node="node-y"),
        ],
        [SKEW, OK, SKEW, SKEW],
        id="constraints-hold-different-labelSelectors-spreads-[2/3,1/0/0/1]",
    ),
    pytest.param(
        pod("p", "bar", constraints=ZONE_FOO_NODE_BAR),
        abxy(),
        [pod("p-a1", "foo", node="node-a"), pod("p-x1", "bar", node="node-x"), pod("p-y1", "bar", node="node-y")],
        [OK, OK, SKEW, SKEW],
        id="constraints-hold-different-labelSelectors-but-pod-does-not-match-itself-on-zone-constraint",
    ),
    pytest.param(
        pod("p", "foo", constraints=ZONE_NODE),
        [
            zoned("node-a", "zone1"),
            zoned("node-b", "zone1"),
            node("node-x", {"zone": "zone2"}),
            zoned("node-y", "zone2"),
        ],
        [pod("p-a1", "foo", node="node-a"), pod("p-y3", "foo", node="node-y")],
        [SKEW, OK, MISSING, SKEW],
        id="two-constraints-on-zone-and-node-absence-of-label-node-on-node-x-spreads-[1/1,1/0/0/1]",
    ),
    pytest.param(
        pod(
            "p",
            "foo",
            node_selector={"foo": ""},
            constraints=[spread(1, "zone"), spread(1, "node", node_affinity_policy="Ignore")],
        ),
        [
            zoned("node-a", "zone1", foo=""),
            zoned("node-b", "zone1", foo=""),
            zoned("node-x", "zone2", foo=""),
            zoned("node-y", "zone2"),
        ],
        foo_pods(a=1, b=1, y=1),
        [SKEW, SKEW, OK, SKEW],
        id="two-node-inclusion-constraints-zone-honor/ignore-node-ignore/ignore",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone", node_taints_policy="Honor"), spread(1, "node")]),
        [
            zoned("node-a", "zone1", foo=""),
            zoned("node-b", "zone1", foo=""),
            zoned("node-x", "zone2", foo=""),
            node("node-y", {"zone": "zone2", "node": "node-y"}, UNSCHEDULABLE_TAINT),
        ],
        foo_pods(a=1, b=1, y=1),
        [SKEW, SKEW, OK, SKEW],
        id="two-node-inclusion-constraints-zone-honor/honor-node-honor/ignore",
    ),
    pytest.param(
        pod("p", "foo", node_selector={"foo": ""}, constraints=ZONE_NODE),
        [
            zoned("node-a", "zone1", foo=""),
            zoned("node-b", "zone1"),
            zoned("node-x", "zone2", foo=""),
            node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, UNSCHEDULABLE_TAINT),
        ],
        foo_pods(a=1, b=1, y=1),
        [SKEW, OK, OK, SKEW],
        id="two-node-inclusion-constraints-zone-honor/ignore-node-honor/ignore",
    ),
    pytest.param(
        pod(
            "p",
            "foo",
            node_selector={"foo": ""},
            constraints=[
                spread(1, "zone", node_taints_policy="Honor"),
                spread(1, "node", node_affinity_policy="Ignore"),
            ],
        ),
        [
            zoned("node-a", "zone1", foo=""),
            zoned("node-b", "zone1"),
            zoned("node-x", "zone2", foo=""),
            node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, UNSCHEDULABLE_TAINT),
        ],
        foo_pods(a=1, b=1, y=1),
        [SKEW, SKEW, OK, SKEW],
        id="two-node-inclusion-constraints-zone-honor/honor-node-ignore/ignore",
    ),
]


# --- TestPreFilterState, matchLabelKeys -------------------------------------------------------------------
#
# Upstream checks the counts PreFilter computes (TpValueToMatchNum); here they are checked through the Filter
# they lead to on node-a, node-b (zone1), node-x, node-y (zone2), maxSkew 1: a node fails when its zone's count
# + 1 (the pod matches its own selector) - the smaller count > 1. Upstream's counts are in each comment.


def _keyed_pods(*, unlabelled_first: bool) -> list[Pod]:
    """p-a1, p-a2 on node-a, p-b1 on node-b, p-y1, p-y2 on node-y: all ``foo=a`` (or the first case's mix)."""
    if unlabelled_first:
        return [
            pod("p-a1", "foo", node="node-a"),
            pod("p-a2", "foo", label_values={"bar": "a"}, node="node-a"),
            pod("p-b1", "foo", node="node-b"),
            pod("p-y1", "foo", label_values={"bar": "a"}, node="node-y"),
            pod("p-y2", "bar", node="node-y"),
        ]
    at = [("p-a1", "a"), ("p-a2", "a"), ("p-b1", "b"), ("p-y1", "y"), ("p-y2", "y")]
    return [pod(n, label_values={"foo": "a"}, node=f"node-{x}") for n, x in at]


MATCH_LABEL_KEYS = [
    pytest.param(
        pod("p", "foo", label_values={"bar": "a"}, constraints=[spread(1, "zone", match_label_keys=["bar"])]),
        _keyed_pods(unlabelled_first=True),
        [OK, OK, OK, OK],  # zone1: 1, zone2: 1 (without the keys 3 and 1: node-a and node-b would fail)
        id="matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
    ),
    pytest.param(
        pod("p", label_values={"foo": "a"}, constraints=[spread(1, "zone", {}, match_label_keys=["foo"])]),
        _keyed_pods(unlabelled_first=False),
        [SKEW, SKEW, OK, OK],  # zone1: 3, zone2: 2
        id="matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone", NIL, match_label_keys=["bar"])]),
        _keyed_pods(unlabelled_first=False),
        [OK, OK, OK, OK],  # zone1: 0, zone2: 0 (a nil selector matches no pod, the keys change nothing)
        id="key in matchLabelKeys is ignored when LabelSelector is nil when feature gate enabled",
    ),
    pytest.param(
        pod("p", "foo", constraints=[spread(1, "zone", match_label_keys=["bar"])]),
        _keyed_pods(unlabelled_first=False),
        [SKEW, SKEW, OK, OK],  # zone1: 3, zone2: 2 (the pod has no "bar": the selector is foo's alone)
        id="key in matchLabelKeys is ignored when it isn't exist in pod.labels",
    ),
]


@pytest.mark.parametrize(("incoming", "pods", "want"), MATCH_LABEL_KEYS)
def test_match_label_keys(incoming: Pod, pods: list[Pod], want: list[str | None]) -> None:
    assert run_filter(incoming, abxy(), pods) == want


# --- An empty selector, release by release ------------------------------------------------------------------
#
# common.go countPodsMatchSelector begins with ``if selector.Empty() { return 0 }`` at every tag read (line 145
# at v1.34.4, 146 at v1.35.4, v1.36.3 and v1.37.2), the selector being the one after matchLabelKeys are merged.
# Upstream's only DoNotSchedule case with an empty selector is TestPreFilterState's "matchLabelKeys ANDed with
# LabelSelector when LabelSelector is empty" (filtering_test.go:1279 at v1.34.4 to v1.36.3, :1278 at v1.37.2):
# the merged selector foo=a is not empty, so the pods count (zone1: 3, zone2: 2) on every release. The same
# case without matchLabelKeys has no upstream twin; by countPodsMatchSelector its counts are 0 and every node
# passes, while a release not read (or not known) counts all five pods, as the first case does.

SERVED = ["v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"]
_MERGED = pod("p", label_values={"foo": "a"}, constraints=[spread(1, "zone", {}, match_label_keys=["foo"])])
_EMPTY = pod("p", label_values={"foo": "a"}, constraints=[spread(1, "zone", {})])
EMPTY_SELECTOR = [
    *(
        pytest.param(
            _MERGED,
            v,
            [SKEW, SKEW, OK, OK],
            id=f"{v} TestPreFilterState/matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        )
        for v in SERVED
    ),
    *(
        pytest.param(
            _EMPTY,
            v,
            [OK, OK, OK, OK],
            id=f"{v} the same case without matchLabelKeys counts no pod (common.go countPodsMatchSelector)",
        )
        for v in SERVED
    ),
    pytest.param(_EMPTY, None, [SKEW, SKEW, OK, OK], id="an unknown release counts every pod of the namespace"),
    pytest.param(_EMPTY, "v1.38.0", [SKEW, SKEW, OK, OK], id="a release not read counts every pod of the namespace"),
    pytest.param(_MERGED, None, [SKEW, SKEW, OK, OK], id="an unknown release counts the merged selector's pods"),
]


@pytest.mark.parametrize(("incoming", "version", "want"), EMPTY_SELECTOR)
def test_an_empty_selector_counts_as_each_release_counts(
    incoming: Pod, version: str | None, want: list[str | None]
) -> None:
    assert run_filter(incoming, abxy(), _keyed_pods(unlabelled_first=False), for_version(version)) == want


@pytest.mark.parametrize(("incoming", "nodes", "pods", "want"), SINGLE)
def test_single_constraint(incoming: Pod, nodes: list[Node], pods: list[Pod], want: list[str | None]) -> None:
    assert run_filter(incoming, nodes, pods) == want


@pytest.mark.parametrize(("incoming", "nodes", "pods", "want"), MULTIPLE)
def test_multiple_constraints(incoming: Pod, nodes: list[Node], pods: list[Pod], want: list[str | None]) -> None:
    assert run_filter(incoming, nodes, pods) == want
