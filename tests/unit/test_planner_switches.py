"""rescheduler.plan.planner per kube-scheduler release (shared/switches.py): the plan follows the predicates of
the cluster's release, and every strategy agrees with the checker under the same switches.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rescheduler.plan.planner import PORTFOLIO, Plan, plan
from shared.model import Node
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, STRICTEST, Switches, for_version
from tests.builders.planner import (
    DEFAULT,
    cluster,
    node,
    pod,
    snapshot_state,
)
from tests.support.plan_check import check_plan


def planned_for(snap: ClusterSnapshot, switches: Switches) -> Plan:
    before = snapshot_state(snap)
    result = plan(snap, DEFAULT, verify=True, switches=switches)
    assert snapshot_state(snap) == before
    assert result.summary.verify_rejections == 0  # the incremental checks agree with fits(switches=...)
    check_plan(snap, result, DEFAULT, switches)
    for strategy in PORTFOLIO:  # first fit, best fit by cpu and by memory, tiered: every fast path
        alone = plan(snap, DEFAULT, strategies=(strategy,), verify=True, improve=False, switches=switches)
        assert alone.summary.verify_rejections == 0
        assert alone.drained == result.drained, strategy.name
    return result


def _over_committed_spot() -> ClusterSnapshot:
    """A memory-only pod on an on-demand node; the one spot node (cpu: 1) holds a pod bound with cpu: 2."""
    return cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="1")],
        [pod("mem-only", "od-1", cpu="0", memory="100Mi"), pod("big", "spot-1", cpu="2", owner=None)],
    )


def test_a_memory_only_pod_goes_to_a_node_over_committed_on_cpu_since_v1_27() -> None:
    for switches in (CURRENT, for_version("v1.27.0")):
        result = planned_for(_over_committed_spot(), switches)
        assert result.drained == ("od-1",)
        assert [m.to_json() for m in result.moves] == [{"pod": "shop/mem-only", "from": "od-1", "to": "spot-1"}]


@pytest.mark.parametrize("switches", [for_version("v1.26.9"), for_version("v1.20.2"), STRICTEST])
def test_before_v1_27_a_memory_only_pod_is_not_planned_onto_a_node_over_committed_on_cpu(switches: Switches) -> None:
    result = planned_for(_over_committed_spot(), switches)
    assert result.drained == ()
    assert "Insufficient cpu" in result.undrainable["od-1"]


def _spread_over_an_excluded_node() -> ClusterSnapshot:
    """kubernetes#106971 in rescheduler terms: zone a holds node ex, which the pod's nodeSelector excludes and
    which runs two pods its zone spread constraint (app=g, maxSkew 1) matches; spot-a (zone a) is the only
    target; the pod runs on od-b (zone b)."""
    pool = {"pool": "p"}
    nodes = [_labelled(node("od-b", zone="b"), pool), _labelled(node("spot-a", spot=True, zone="a"), pool), node("ex")]
    small = {"cpu": "100m", "memory": "64Mi"}
    pods = [
        pod("mover", "od-b", app="g", spread=True, node_selector=pool, **small),
        pod("x1", "ex", app="g", owner=None, **small),
        pod("x2", "ex", app="g", owner=None, **small),
    ]
    return cluster(nodes, pods)


def _labelled(n: Node, extra: dict[str, str]) -> Node:
    return replace(n, labels={**n.labels, **extra})


def test_spread_counts_only_nodes_the_pod_may_use_since_v1_24() -> None:
    result = planned_for(_spread_over_an_excluded_node(), CURRENT)
    assert "od-b" in result.drained
    assert [m.to_json() for m in result.moves] == [{"pod": "shop/mover", "from": "od-b", "to": "spot-a"}]


@pytest.mark.parametrize("switches", [for_version("v1.23.4"), for_version("v1.20.2"), STRICTEST])
def test_before_v1_24_spread_counts_pods_on_nodes_the_pod_cannot_use(switches: Switches) -> None:
    result = planned_for(_spread_over_an_excluded_node(), switches)
    assert "od-b" not in result.drained
    assert "topology spread" in result.undrainable["od-b"]
