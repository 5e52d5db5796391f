"""Topology spread beyond upstream's tables: empty and missing selectors by release, the v1.24 counting
change, domain edge cases, memoisation and purity (semantics of ``podtopologyspread/filtering.go`` and
``common.go``; the upstream issues and files are named in each section).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit_reasons import ERR_SPREAD, ERR_SPREAD_MISSING_LABEL
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.spread import check_topology_spread
from shared.switches import CURRENT, STRICTEST, Switches, for_version
from tests.builders.spread import (
    MISSING,
    NIL,
    OK,
    SKEW,
    UNSCHEDULABLE_TAINT,
    abxy,
    foo_pods,
    node,
    pod,
    run_filter,
    spread,
    zoned,
)

# --- beyond upstream's tables ------------------------------------------------------------------------

TWO_ZONES = [zoned("a1", "a"), zoned("b1", "b")]


def test_reasons_carry_upstream_resolvability() -> None:
    snapshot = ClusterSnapshot([*TWO_ZONES, node("bare", {})], foo_pods())
    snapshot.add_pod(pod("f1", "foo"), "a1")
    incoming = pod("p", "foo", constraints=[spread(1, "zone")])
    skew = check_topology_spread(incoming, snapshot["a1"], snapshot)
    missing = check_topology_spread(incoming, snapshot["bare"], snapshot)
    assert skew is not None and skew.code == ERR_SPREAD and not skew.unresolvable
    assert missing is not None and missing.code == ERR_SPREAD_MISSING_LABEL and missing.unresolvable
    assert missing.message == "node(s) didn't match pod topology spread constraints (missing required label)"


def test_schedule_anyway_constraints_are_not_filters() -> None:
    snapshot = ClusterSnapshot(TWO_ZONES, [pod("f1", "foo", node="a1"), pod("f2", "foo", node="a1")])
    incoming = pod(
        "p", "foo", constraints=[spread(1, "zone", when="ScheduleAnyway"), spread(1, "rack", when="ScheduleAnyway")]
    )
    assert check_topology_spread(incoming, snapshot["a1"], snapshot) is None


# --- empty and missing selectors ------------------------------------------------------------------------
#
# common.go countPodsMatchSelector returns 0 when selector.Empty(), which is true for labelSelector: {}
# (labels.Everything, no matchLabelKeys value merged into it) and false for a missing one (labels.Nothing,
# which matches no pod anyway). At v1.29.6 to v1.37.2, the releases read, an empty selector so counts no pod
# and the constraint never fails on skew (CURRENT); every other release is given the stricter reading, which
# counts every pod of the namespace (STRICTEST, v1.20). These cases are upstream TestPreFilterState's "normal
# case with one spreadConstraint" / "namespace mismatch doesn't count" / "normal case with null label
# selector" with the selector replaced.


@pytest.mark.parametrize("selector", [{}, {"matchExpressions": []}], ids=["labelSelector {}", "no expressions"])
def test_empty_selector_counts_every_pod_of_the_namespace_where_the_release_was_not_read(
    selector: dict[str, Any],
) -> None:
    # zone1 holds 3 pods, zone2 2 (one of them unlabelled, which {} still counts): zone2 is the minimum.
    pods = [*foo_pods(a=2, b=1, y=1), pod("p-y2", node="node-y")]
    empty = pod("p", constraints=[spread(1, "zone", selector)])
    assert run_filter(empty, abxy(), pods, STRICTEST) == [SKEW, SKEW, OK, OK]
    assert run_filter(empty, abxy(), pods, V1_20) == [SKEW, SKEW, OK, OK]
    assert run_filter(empty, abxy(), pods) == [OK, OK, OK, OK]  # v1.37.2: no pod counts


def test_empty_selector_counts_only_the_incoming_pods_namespace() -> None:
    pods = [
        pod("p-a1", node="node-a"),
        pod("p-a2", ns="ns1", node="node-a"),
        pod("p-a3", ns="ns1", node="node-a"),
        pod("p-x1", node="node-x"),
    ]
    empty, empty_ns1 = (
        pod("p", constraints=[spread(1, "zone", {})]),
        pod("p", ns="ns1", constraints=[spread(1, "zone", {})]),
    )
    assert run_filter(empty, abxy(), pods, STRICTEST) == [OK, OK, OK, OK]
    assert run_filter(empty_ns1, abxy(), pods, STRICTEST) == [SKEW, SKEW, OK, OK]
    assert run_filter(empty_ns1, abxy(), pods) == [OK, OK, OK, OK]


def test_empty_selector_still_needs_the_topology_key() -> None:
    # filtering.go Filter reports a node without the key before it looks at any count.
    nodes = [*abxy(), node("node-z", {"node": "node-z"})]
    incoming = pod("p", constraints=[spread(1, "zone", {})])
    assert run_filter(incoming, nodes, foo_pods(a=2)) == [OK, OK, OK, OK, MISSING]


def test_missing_selector_counts_nothing_and_the_incoming_pod_does_not_match_it() -> None:
    # "normal case with null label selector": every domain counts 0 and selfMatch is 0.
    pods = foo_pods(a=2, b=1, y=2)
    for switches in (CURRENT, STRICTEST):
        assert run_filter(pod("p", "foo", constraints=[spread(1, "zone", NIL)]), abxy(), pods, switches) == [OK] * 4


def test_two_pods_in_one_zone_and_an_empty_selector() -> None:
    # Node a (zone za) holds app=x and app=y, node b (zone zb) none; the incoming pod's {} counts both there
    # where it counts any: 2 + 1 - 0 > 1.
    nodes = [node("a", {"zone": "za"}), node("b", {"zone": "zb"}, [{"key": "k", "effect": "NoSchedule"}])]
    pods = [
        Pod.from_api({"metadata": {"name": n, "labels": {"app": v}}, "spec": {"nodeName": "a"}, "status": {}})
        for n, v in (("x", "x"), ("y", "y"))
    ]
    incoming = pod("p", constraints=[spread(1, "zone", {})])
    for switches, want in ((CURRENT, None), (V1_20, ERR_SPREAD), (STRICTEST, ERR_SPREAD)):
        snapshot = ClusterSnapshot(nodes, pods)
        r = check_topology_spread(incoming, snapshot["a"], snapshot, switches=switches)
        assert (r.code if r is not None else None) == want


# --- kubernetes#107009 (v1.24): both sides -------------------------------------------------------------
#
# Before v1.24, PreFilter took the domains from the nodes passing the pod's nodeSelector/affinity and
# carrying every key, then counted matching pods on *all* nodes whose value is such a domain (v1.20
# filtering.go calPreFilterState, processNode). kubernetes#107009 counts only on the eligible nodes.

V1_20, V1_23, V1_24 = for_version("v1.20.2"), for_version("1.23.17-eks-1"), for_version("v1.24.0")


def _issue_106971() -> tuple[list[Node], list[Pod], Pod]:
    """kubernetes#106971's reproduction: worker1, worker2 in zoneA, worker3 in zoneB; two pods on worker2 and
    one on worker3; a pod that spreads over zones (maxSkew 1) and whose node affinity excludes worker2."""
    nodes = [zoned("worker1", "zoneA"), zoned("worker2", "zoneA"), zoned("worker3", "zoneB")]
    pods = [pod("p1", "foo", node="worker2"), pod("p2", "foo", node="worker2"), pod("p3", "foo", node="worker3")]
    incoming = pod("p", "foo", affinity_not_in=("node", ["worker2"]), constraints=[spread(1, "zone")])
    return nodes, pods, incoming


@pytest.mark.parametrize(
    ("switches", "want"),
    [
        # zoneA counts only worker1 (0), zoneB 1: worker1 gives skew 1, worker3 skew 2.
        pytest.param(CURRENT, [OK, OK, SKEW], id="v1.24+-excludes-pods-on-nodes-the-affinity-excludes"),
        pytest.param(V1_24, [OK, OK, SKEW], id="v1.24.0"),
        # zoneA counts worker2's pods too (2), zoneB 1: worker1 gives skew 2, worker3 skew 1.
        pytest.param(V1_23, [SKEW, SKEW, OK], id="v1.23-counts-pods-on-nodes-the-affinity-excludes"),
        pytest.param(V1_20, [SKEW, SKEW, OK], id="v1.20"),
        # Unknown version: a node must pass both ways.
        pytest.param(STRICTEST, [SKEW, SKEW, SKEW], id="unknown-version-both-rules"),
    ],
)
def test_issue_106971_affinity_excluded_nodes_count_only_before_v1_24(switches: Switches, want: list[Any]) -> None:
    nodes, pods, incoming = _issue_106971()
    snapshot = ClusterSnapshot(nodes, pods)
    got = [
        r.code if (r := check_topology_spread(incoming, snapshot[n.name], snapshot, switches=switches)) else None
        for n in nodes
    ]
    # worker2 is the affinity-excluded node: only this predicate runs here, so it is judged like worker1.
    assert got == want


@pytest.mark.parametrize(
    ("switches", "want"),
    [
        pytest.param(CURRENT, [OK, OK], id="v1.24+-node-missing-rack-is-not-counted"),
        # node r (zone a, no rack) counts in zone a for the zone constraint: a = 2, b = 0.
        pytest.param(V1_20, [SKEW, OK], id="v1.20-node-missing-rack-counts-in-its-zone"),
        pytest.param(STRICTEST, [SKEW, OK], id="unknown-version-both-rules"),
    ],
)
def test_nodes_missing_another_constraints_key_count_only_before_v1_24(switches: Switches, want: list[Any]) -> None:
    nodes = [node("r", {"zone": "a"}), node("a1", {"zone": "a", "rack": "r1"}), node("b1", {"zone": "b", "rack": "r2"})]
    snapshot = ClusterSnapshot(nodes, [pod("f1", "foo", node="r"), pod("f2", "foo", node="r")])
    incoming = pod("p", "foo", constraints=[spread(1, "zone"), spread(5, "rack")])
    got = [
        r.code if (r := check_topology_spread(incoming, snapshot[n], snapshot, switches=switches)) else None
        for n in ("a1", "b1")
    ]
    assert got == want


@pytest.mark.parametrize("switches", [CURRENT, V1_20], ids=["current", "v1.20"])
def test_upstream_case_node_affinity_with_per_node_domains_is_the_same_on_both_sides(switches: Switches) -> None:
    # v1.20 and current TestSingleConstraint: "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3,
    # hence node-a fits". With node-level domains an excluded node is its own, ineligible, domain.
    incoming = pod("p", "foo", affinity_in=("node", ["node-a", "node-y"]), constraints=[spread(1, "node")])
    snapshot = ClusterSnapshot(abxy(), foo_pods(a=2, b=1, y=3))
    got = [r.code if (r := check_topology_spread(incoming, i, snapshot, switches=switches)) else None for i in snapshot]
    assert got == [OK, OK, OK, SKEW]


def test_before_v1_24_inclusion_policies_and_min_domains_do_not_exist() -> None:
    nodes = [*abxy()[:3], node("node-y", {"zone": "zone2", "node": "node-y"}, UNSCHEDULABLE_TAINT)]
    incoming = pod("p", "foo", constraints=[spread(2, "zone", min_domains=3, node_taints_policy="Honor")])
    snapshot = ClusterSnapshot(nodes, foo_pods(a=2, y=1))
    # v1.20: tainted node-y counts (no nodeTaintsPolicy) and minDomains is unknown: zone1 2, zone2 1, minimum 1,
    # so node-a/b reach skew 2 = maxSkew.
    got = [r.code if (r := check_topology_spread(incoming, i, snapshot, switches=V1_20)) else None for i in snapshot]
    assert got == [OK, OK, OK, OK]
    # Today: node-y is no domain (Honor), and 2 domains < minDomains 3 makes the minimum 0: node-a/b skew 3.
    got = [r.code if (r := check_topology_spread(incoming, i, snapshot)) else None for i in snapshot]
    assert got == [SKEW, SKEW, OK, OK]


def test_memo_keeps_the_two_counting_rules_apart() -> None:
    nodes, pods, incoming = _issue_106971()
    snapshot = ClusterSnapshot(nodes, pods)
    w1 = snapshot["worker1"]
    assert check_topology_spread(incoming, w1, snapshot) is None
    assert check_topology_spread(incoming, w1, snapshot, switches=V1_20) is not None
    assert check_topology_spread(incoming, w1, snapshot) is None


def test_nodes_missing_any_constraint_key_are_not_counted_for_any_constraint() -> None:
    # node-r has "zone" but not "rack": its pods do not count in zone a for the zone constraint either.
    nodes = [node("r", {"zone": "a"}), node("a1", {"zone": "a", "rack": "r1"}), node("b1", {"zone": "b", "rack": "r2"})]
    pods = [pod("f1", "foo", node="r"), pod("f2", "foo", node="r")]
    incoming = pod("p", "foo", constraints=[spread(1, "zone"), spread(5, "rack")])
    snapshot = ClusterSnapshot(nodes, pods)
    assert check_topology_spread(incoming, snapshot["a1"], snapshot) is None
    assert check_topology_spread(incoming, snapshot["b1"], snapshot) is None


def test_candidate_in_an_ineligible_domain_counts_zero() -> None:
    # zone c has only a node the pod's nodeSelector excludes: zone c is not a domain, the candidate counts 0.
    nodes = [zoned("a1", "a", pool="x"), zoned("b1", "b", pool="x"), zoned("c1", "c")]
    pods = [pod("f1", "foo", node="a1"), pod("f2", "foo", node="b1"), pod("f3", "foo", node="c1")]
    incoming = pod("p", "foo", node_selector={"pool": "x"}, constraints=[spread(1, "zone")])
    snapshot = ClusterSnapshot(nodes, pods)
    assert check_topology_spread(incoming, snapshot["c1"], snapshot) is None


def test_taints_honored_only_for_do_not_schedule_effects_and_tolerations_count() -> None:
    prefer = [{"key": "k", "effect": "PreferNoSchedule"}]
    no_sched = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    nodes = [node("a1", {"zone": "a"}, prefer), node("b1", {"zone": "b"}, no_sched), node("c1", {"zone": "c"})]
    pods = [pod("fa", "foo", node="a1"), pod("fb", "foo", node="b1")]
    snapshot = ClusterSnapshot(nodes, pods)
    honor = [spread(1, "zone", node_taints_policy="Honor")]
    # b1 (untolerated NoSchedule) is not a domain; a1 (PreferNoSchedule only) is: min over {a:1, c:0} = 0.
    assert check_topology_spread(pod("p", "foo", constraints=honor), snapshot["a1"], snapshot) is not None
    assert check_topology_spread(pod("p", "foo", constraints=honor), snapshot["b1"], snapshot) is None
    tolerant = pod("p", "foo", constraints=honor, tolerations=[{"key": "k", "operator": "Exists"}])
    assert check_topology_spread(tolerant, snapshot["b1"], snapshot) is not None


def test_pod_is_never_counted_against_itself() -> None:
    me = pod("me", "foo", node="a1", uid="u-1", constraints=[spread(1, "zone")])
    snapshot = ClusterSnapshot(TWO_ZONES, [me])
    assert check_topology_spread(me, snapshot["a1"], snapshot) is None
    again = pod("me", "foo", uid="u-1", constraints=[spread(1, "zone")])
    assert check_topology_spread(again, snapshot["a1"], snapshot) is None
    sibling = pod("sib", "foo", uid="u-2", constraints=[spread(0, "zone")])
    assert check_topology_spread(sibling, snapshot["a1"], snapshot) is not None


# --- memoisation -------------------------------------------------------------------------------------


def test_memo_invalidates_on_add_pod() -> None:
    snapshot = ClusterSnapshot(TWO_ZONES)
    incoming = pod("p", "foo", constraints=[spread(1, "zone")])
    assert check_topology_spread(incoming, snapshot["a1"], snapshot) is None
    snapshot.add_pod(pod("f1", "foo"), "a1")
    assert check_topology_spread(incoming, snapshot["a1"], snapshot).code == SKEW  # type: ignore[union-attr]
    assert check_topology_spread(incoming, snapshot["b1"], snapshot) is None


def test_memo_invalidates_on_remove_pod() -> None:
    f1 = pod("f1", "foo", node="a1")
    snapshot = ClusterSnapshot(TWO_ZONES, [f1])
    incoming = pod("p", "foo", constraints=[spread(1, "zone")])
    assert check_topology_spread(incoming, snapshot["a1"], snapshot).code == SKEW  # type: ignore[union-attr]
    snapshot.remove_pod(f1)
    assert check_topology_spread(incoming, snapshot["a1"], snapshot) is None


def test_memo_invalidates_on_move_pod() -> None:
    f1 = pod("f1", "foo", node="a1")
    snapshot = ClusterSnapshot(TWO_ZONES, [f1])
    incoming = pod("p", "foo", constraints=[spread(1, "zone")])
    assert [check_topology_spread(incoming, snapshot[n], snapshot) is None for n in ("a1", "b1")] == [False, True]
    snapshot.move_pod(f1, "b1")
    assert [check_topology_spread(incoming, snapshot[n], snapshot) is None for n in ("a1", "b1")] == [True, False]


def test_memo_keeps_snapshots_apart() -> None:
    incoming = pod("p", "foo", constraints=[spread(1, "zone")])
    empty = ClusterSnapshot(TWO_ZONES)
    busy = ClusterSnapshot(TWO_ZONES, [pod("f1", "foo", node="a1")])
    assert check_topology_spread(incoming, empty["a1"], empty) is None
    assert check_topology_spread(incoming, busy["a1"], busy) is not None
    assert check_topology_spread(incoming, empty["a1"], empty) is None


# --- purity ------------------------------------------------------------------------------------------


def test_predicate_does_not_mutate_its_inputs() -> None:
    nodes = [*abxy(), node("node-t", {"zone": "zone3", "node": "node-t"}, UNSCHEDULABLE_TAINT)]
    snapshot = ClusterSnapshot(nodes, foo_pods(a=2, b=1, y=3))
    incoming = pod(
        "p",
        "foo",
        node_selector={"zone": "zone1"},
        constraints=[spread(1, "zone", node_taints_policy="Honor"), spread(1, "node", min_domains=3)],
    )
    before = (
        snapshot.version,
        [(i.name, list(i.pods), dict(i.requested), i.node) for i in snapshot],
        copy.deepcopy(dict(incoming.labels)),
        incoming.topology_spread,
    )
    for info in snapshot:
        check_topology_spread(incoming, info, snapshot)
    after = (
        snapshot.version,
        [(i.name, list(i.pods), dict(i.requested), i.node) for i in snapshot],
        dict(incoming.labels),
        incoming.topology_spread,
    )
    assert after == before
