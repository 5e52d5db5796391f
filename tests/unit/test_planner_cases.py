"""rescheduler.plan.planner on hand-made clusters: what moves, what keeps its node and the reason given, budgets,
(anti-)affinity, spread, ceilings and floors, reclaimed spot nodes, and the plan's JSON shape.

Every plan is checked with :func:`tests.support.plan_check.check_plan` (through :func:`planned`).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rescheduler.plan.planner import HELD_BACK, PUSHER, plan
from rescheduler.plan.stay_reasons import Kind
from shared.config import parse_config
from shared.fit_reasons import ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY, ERR_NODE_PORTS
from shared.model import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod
from shared.movable import BLOCK_RESOURCE_CLAIMS
from shared.switches import CURRENT, Switches, for_version
from tests.builders.planner import (
    ALL_AT_ONCE,
    DEFAULT,
    ON_DEMAND,
    SPOT_TAINT,
    TOLERATE_SPOT,
    cluster,
    daemonset_pod,
    node,
    pdb,
    planned,
    pod,
    snapshot_state,
)
from tests.support.pusher import pusher_plan


def test_a_movable_pod_moves_and_its_node_is_drained() -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1"), daemonset_pod("proxy-1", "od-1")])
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert [m.to_json() for m in result.moves] == [{"pod": "shop/web-1", "from": "od-1", "to": "spot-1"}]


def test_pinned_pod_keeps_its_node() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("db-1", "od-1", node_selector=ON_DEMAND), pod("web-1", "od-1")],
    )
    result = planned(snap)
    assert result.drained == ()
    assert result.undrainable["od-1"].startswith("pod shop/db-1: pod is pinned to on-demand")


def test_a_pod_with_dynamic_resource_claims_keeps_its_node_with_the_reason() -> None:
    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    snap = cluster(
        [node("od-1"), node("od-2"), node("spot-1", spot=True)],
        [pod("infer-1", "od-1", spec_extra=claims), pod("web-1", "od-2")],
    )
    result = planned(snap)
    assert result.drained == ("od-2",)
    why = result.reasons["od-1"]
    assert (why.kind, why.group) == (Kind.NOT_MOVABLE, BLOCK_RESOURCE_CLAIMS)
    assert result.undrainable["od-1"] == f"pod shop/infer-1: {BLOCK_RESOURCE_CLAIMS}"
    assert pusher_plan(snap).drained == ("od-2",)


def test_do_not_disrupt_markers_keep_their_node_with_the_reason() -> None:
    marked = Node.from_api(
        {
            "metadata": {
                "name": "od-2",
                "labels": {**ON_DEMAND, "kubernetes.io/hostname": "od-2", "topology.kubernetes.io/zone": "a"},
                "annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"},
            },
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    snap = cluster(
        [node("od-1"), marked, node("od-3"), node("spot-1", spot=True, cpu="16")],
        [
            pod("web-1", "od-1", annotations={"karpenter.sh/do-not-disrupt": "true"}),
            pod("web-2", "od-2"),
            pod("web-3", "od-3"),
        ],
    )
    result = planned(snap)
    assert result.drained == ("od-3",)
    assert result.undrainable["od-1"] == 'pod shop/web-1: pod is annotated karpenter.sh/do-not-disrupt: "true"'
    assert (
        result.undrainable["od-2"] == 'node is annotated cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"'
    )
    assert result.reasons["od-2"].kind is Kind.NODE_DO_NOT_DISRUPT
    assert pusher_plan(snap).drained == ("od-3",)


def test_pdb_with_zero_disruptions_allowed_blocks_the_node() -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1", app="web")], [pdb("web", "web", 0)])
    result = planned(snap)
    assert result.drained == ()
    assert "PodDisruptionBudget shop/web allows 0 disruption(s)" in result.undrainable["od-1"]


def test_all_at_once_pdb_budget_is_counted_across_nodes() -> None:
    snap = cluster(
        [node("od-1"), node("od-2"), node("spot-1", spot=True, cpu="8")],
        [pod("web-1", "od-1", app="web"), pod("web-2", "od-2", app="web")],
        [pdb("web", "web", 1)],
    )
    result = planned(snap, ALL_AT_ONCE)
    assert len(result.drained) == 1
    (stays,) = result.undrainable.values()
    assert "allows 1 disruption(s), 1 already planned" in stays


def test_all_at_once_pdb_blocks_a_node_needing_more_than_it_allows() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="8")],
        [pod(f"web-{i}", "od-1", app="web") for i in range(3)],
        [pdb("web", "web", 1)],
    )
    result = planned(snap, ALL_AT_ONCE)
    assert result.drained == ()
    assert "allows 1 disruption(s), this node needs 3" in result.undrainable["od-1"]
    assert result.pacing == {}


def test_rate_limit_pdb_paces_several_pods_on_one_node_and_across_nodes() -> None:
    # kubectl drain's reading: a budget allowing 1 disruption lets the drain evict one pod at a time.
    snap = cluster(
        [node("od-1"), node("od-2"), node("spot-1", spot=True, cpu="8")],
        [pod(f"web-{i}", "od-1", app="web") for i in range(3)] + [pod("web-9", "od-2", app="web")],
        [pdb("web", "web", 1)],
    )
    result = planned(snap)
    assert sorted(result.drained) == ["od-1", "od-2"]
    assert [p.to_json() for p in result.pacing["od-1"]] == [{"pdb": "shop/web", "pods": 3, "allowed": 1}]
    assert "allows 1 disruption(s) at a time: 3 pod(s) here" in result.pacing["od-1"][0].note
    # od-2's one pod is allowed at once: its drain starts after od-1's replacements are Ready.
    assert "od-2" not in result.pacing


def test_pod_selected_by_two_pdbs_blocks_its_node() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("web-1", "od-1", app="web")],
        [pdb("a", "web", 5), pdb("b", "web", 5)],
    )
    assert "more than one PodDisruptionBudget" in planned(snap).undrainable["od-1"]


# --- evictions a budget lets go (pkg/registry/core/pod/storage/eviction.go, shared.eviction) ------------------

RULES = [pytest.param(DEFAULT, id="rate-limit"), pytest.param(ALL_AT_ONCE, id="all-at-once")]


def agrees_with_pusher(snap: Any, config: Any, result: Any) -> None:
    """The plain pusher baseline decides each case as the planner does, and the planner's own pusher strategy is
    that baseline move for move."""
    theirs = pusher_plan(snap, config)
    assert theirs.drained == result.drained
    ours = plan(snap, config, strategies=(PUSHER,), improve=False, verify=True)
    assert (ours.drained, ours.moves) == (theirs.drained, theirs.moves)


@pytest.mark.parametrize("config", RULES)
@pytest.mark.parametrize(
    ("policy", "ready", "healthy", "drains"),
    [
        pytest.param(None, False, 2, True, id="unset-not-ready-budget-healthy"),
        pytest.param(None, False, 1, False, id="unset-not-ready-budget-unhealthy"),
        pytest.param("IfHealthyBudget", False, 2, True, id="if-healthy-budget-not-ready-budget-healthy"),
        pytest.param("IfHealthyBudget", False, 1, False, id="if-healthy-budget-not-ready-budget-unhealthy"),
        pytest.param("AlwaysAllow", False, 1, True, id="always-allow-not-ready-budget-unhealthy"),
        pytest.param("AlwaysAllow", False, 2, True, id="always-allow-not-ready-budget-healthy"),
        pytest.param("AlwaysAllow", True, 2, False, id="always-allow-ready-pod-still-needs-the-budget"),
        pytest.param(None, True, 2, False, id="unset-ready-pod-needs-the-budget"),
    ],
)
def test_a_zero_allowance_budget_over_a_node_whose_only_pod_is_not_ready(
    config: Any, policy: str | None, ready: bool, healthy: int, drains: bool
) -> None:
    """``disruptionsAllowed: 0``, ``desiredHealthy: 2``: the Eviction API evicts a not-Ready pod without using the
    budget under ``AlwaysAllow``, and under ``IfHealthyBudget`` (or unset) only while ``currentHealthy >= 2``."""
    budget = pdb("web", "web", 0, policy=policy, healthy=healthy, desired=2)
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1", app="web", ready=ready)], [budget])
    result = planned(snap, config)
    assert result.drained == (("od-1",) if drains else ())
    if not drains:
        assert result.reasons["od-1"].kind is Kind.PDB_BUDGET
    assert result.pacing == {}
    agrees_with_pusher(snap, config, result)


@pytest.mark.parametrize(("policy", "drains"), [(None, False), ("IfHealthyBudget", False), ("AlwaysAllow", True)])
def test_all_at_once_counts_only_the_evictions_that_use_the_budget(policy: str | None, drains: bool) -> None:
    # One Ready and one not-Ready pod of an unhealthy budget allowing 1: the Ready pod takes it; under AlwaysAllow
    # the other needs none, otherwise it needs a second.
    budget = pdb("web", "web", 1, policy=policy, healthy=1, desired=2)
    pods = [pod("web-1", "od-1", app="web", ready=True), pod("web-2", "od-1", app="web", ready=False)]
    snap = cluster([node("od-1"), node("spot-1", spot=True)], pods, [budget])
    result = planned(snap, ALL_AT_ONCE)
    assert result.drained == (("od-1",) if drains else ())
    agrees_with_pusher(snap, ALL_AT_ONCE, result)


@pytest.mark.parametrize("config", RULES)
def test_a_not_ready_pod_under_an_unknown_policy_keeps_its_node(config: Any) -> None:
    budget = pdb("web", "web", 3, policy="NewerPolicy", healthy=5, desired=2)
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1", app="web", ready=False)], [budget])
    result = planned(snap, config)
    assert result.drained == ()
    assert result.reasons["od-1"].kind is Kind.PDB_UNKNOWN_POLICY
    assert "unhealthyPodEvictionPolicy 'NewerPolicy'" in result.undrainable["od-1"]
    agrees_with_pusher(snap, config, result)


@pytest.mark.parametrize("config", RULES)
def test_a_pending_pod_is_evicted_whatever_its_budgets_say(config: Any) -> None:
    # canIgnorePDB: a Pending pod is deleted without reading any budget, so neither a budget at 0 nor two
    # budgets selecting it keep its node.
    pods = [pod("web-1", "od-1", app="web", phase="Pending")]
    snap = cluster([node("od-1"), node("spot-1", spot=True)], pods, [pdb("a", "web", 0), pdb("b", "web", 0)])
    result = planned(snap, config)
    assert result.drained == ("od-1",)
    agrees_with_pusher(snap, config, result)


def test_anti_affinity_of_the_moving_pod_avoids_its_peers() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True), node("spot-2", spot=True)],
        [pod("web-1", "od-1", app="web", anti_affinity_to="web"), pod("web-2", "spot-1", app="web")],
    )
    result = planned(snap)
    assert [m.target for m in result.moves] == ["spot-2"]


def test_anti_affinity_of_the_moving_pod_can_block_the_drain() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("web-1", "od-1", app="web", anti_affinity_to="web"), pod("web-2", "spot-1", app="web")],
    )
    assert ERR_ANTI_AFFINITY in planned(snap).undrainable["od-1"]


def test_anti_affinity_of_an_existing_pod_keeps_the_moving_pod_away() -> None:
    # The other direction: the pod already on spot-1 refuses company labelled app=web.
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("web-1", "od-1", app="web"), pod("loner", "spot-1", app="loner", anti_affinity_to="web")],
    )
    assert ERR_EXISTING_ANTI_AFFINITY in planned(snap).undrainable["od-1"]


def test_two_moving_pods_with_anti_affinity_take_different_nodes() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="8"), node("spot-2", spot=True, cpu="8")],
        [
            pod("web-1", "od-1", app="web", anti_affinity_to="web"),
            pod("web-2", "od-1", app="web", anti_affinity_to="web"),
        ],
    )
    result = planned(snap)
    assert sorted(m.target for m in result.moves) == ["spot-1", "spot-2"]


def test_host_ports_conflict_on_a_target() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("agent-1", "od-1", host_port=9100), pod("other", "spot-1", host_port=9100)],
    )
    assert ERR_NODE_PORTS in planned(snap).undrainable["od-1"]


def test_topology_spread_is_kept() -> None:
    # Two zones; app "web" has one pod in zone a (spot) and one on od-1 in zone b. Moving it to the spot
    # node in zone a would make the skew 2, so it must go to zone b's spot node.
    snap = cluster(
        [node("od-1", zone="b"), node("spot-a", spot=True, zone="a"), node("spot-b", spot=True, zone="b")],
        [pod("web-1", "od-1", app="web", spread=True), pod("web-2", "spot-a", app="web", spread=True)],
    )
    result = planned(snap)
    assert [m.target for m in result.moves] == ["spot-b"]


def test_spot_ceiling_keeps_a_share_of_the_workload_on_demand() -> None:
    ann = {"spotshift.io/max-spot-percent": "50"}
    snap = cluster(
        [node("od-1"), node("od-2"), node("spot-1", spot=True, cpu="8")],
        [pod("web-1", "od-1", app="web", annotations=ann), pod("web-2", "od-2", app="web", annotations=ann)],
    )
    result = planned(snap)
    assert len(result.drained) == 1
    (stays,) = result.undrainable.values()
    assert "may run at most 50% of its 2 pods on spot" in stays


def test_on_demand_floor_is_kept() -> None:
    ann = {"spotshift.io/min-on-demand": "1"}
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1", annotations=ann)])
    assert "must keep at least 1 pod(s) on on-demand nodes" in planned(snap).undrainable["od-1"]


def test_reasons_are_grouped_by_their_kind_not_their_wording() -> None:
    # Two workloads' floors and two pairs of overlapping budgets: four sentences, two groups.
    floor = {"spotshift.io/min-on-demand": "1"}
    snap = cluster(
        [node("od-1"), node("od-2"), node("od-3"), node("od-4"), node("spot-1", spot=True, cpu="16")],
        [
            pod("web-1", "od-1", app="web", owner=("ReplicaSet", "web-5d8f"), annotations=floor),
            pod("api-1", "od-2", app="api", owner=("ReplicaSet", "api-7c9d"), annotations=floor),
            pod("db-1", "od-3", app="db", owner=("StatefulSet", "db")),
            pod("mq-1", "od-4", app="mq", owner=("StatefulSet", "mq")),
        ],
        [pdb("db-a", "db", 1), pdb("db-b", "db", 1), pdb("mq-a", "mq", 1), pdb("mq-b", "mq", 1)],
    )
    result = planned(snap)
    kinds = {node_name: why.kind for node_name, why in result.reasons.items()}
    assert kinds == {
        "od-1": Kind.ON_DEMAND_FLOOR,
        "od-2": Kind.ON_DEMAND_FLOOR,
        "od-3": Kind.MULTIPLE_PDBS,
        "od-4": Kind.MULTIPLE_PDBS,
    }
    assert len(set(result.undrainable.values())) == 4
    assert result.summary.top_reasons == (
        {"reason": "per-workload on-demand floor", "nodes": 2, "kind": "on-demand-floor"},
        {"reason": "selected by more than one PodDisruptionBudget", "nodes": 2, "kind": "multiple-pdbs"},
    )
    assert result.reasons["od-3"].pod == "shop/db-1"
    assert result.undrainable["od-3"] == (
        "pod shop/db-1: selected by more than one PodDisruptionBudget (shop/db-a, shop/db-b), which evictions refuse"
    )


def test_ceiling_default_comes_from_the_config() -> None:
    config = parse_config({"spot_ceiling": {"default_max_spot_percent": 0}})
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1")])
    assert planned(snap, config).drained == ()


def test_expendable_pods_on_spot_take_no_room() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="1")],
        [
            pod("web-1", "od-1", cpu="800m"),
            pod("pause", "spot-1", cpu="900m", priority=-100, owner=("ReplicaSet", "op-1")),
        ],
    )
    result = planned(snap)
    assert result.drained == ("od-1",)


def test_expendable_pod_does_not_block_its_node_and_is_not_moved() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("web-1", "od-1"), pod("pause", "od-1", priority=-100, owner=("ReplicaSet", "op-1"))],
    )
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert [m.pod for m in result.moves] == ["shop/web-1"]


@pytest.mark.parametrize(
    "bad_spot",
    [
        pytest.param(
            {"taints": [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]},
            id="interruption-notice",
        ),
        pytest.param({"unschedulable": True}, id="cordoned"),
        pytest.param({"ready": False}, id="not-ready"),
        pytest.param(
            {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}, id="karpenter-disrupting"
        ),
    ],
)
def test_spot_node_being_reclaimed_is_never_a_target(bad_spot: dict[str, Any]) -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True, **bad_spot)], [pod("web-1", "od-1")])
    result = planned(snap)
    assert result.moves == ()
    assert result.undrainable["od-1"] == (
        "pod shop/web-1: there are no spot nodes that are ready, schedulable and not being reclaimed"
    )
    assert result.summary.spot_targets == 0 and result.summary.spot_not_targets == 1


def test_kube_system_pod_without_pdb_blocks() -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("metrics-server", "od-1", ns="kube-system")])
    assert "kube-system pod has no PodDisruptionBudget" in planned(snap).undrainable["od-1"]


def test_kube_system_pod_with_a_pdb_moves() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [pod("coredns-1", "od-1", ns="kube-system", app="coredns")],
        [pdb("coredns", "coredns", 1, ns="kube-system")],
    )
    assert planned(snap).drained == ("od-1",)


@pytest.mark.parametrize(
    ("switches", "text"),
    [
        pytest.param(CURRENT, "node(s) had untolerated taint(s)", id="v1.34 and later: the taint is not named"),
        pytest.param(
            for_version("v1.33.13"), "node(s) had untolerated taint {spot: true}", id="v1.33: the taint is named"
        ),
    ],
)
def test_untolerated_spot_taint_is_the_reason(switches: Switches, text: str) -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True, taints=[SPOT_TAINT])], [pod("web-1", "od-1")])
    why = plan(snap, DEFAULT, verify=True, switches=switches).undrainable["od-1"]
    assert why == f"pod shop/web-1: 0/1 spot nodes are available: 1 {text}"


def test_tolerating_pod_goes_to_the_tainted_spot_node() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, taints=[SPOT_TAINT])],
        [pod("web-1", "od-1", tolerations=[TOLERATE_SPOT])],
    )
    assert planned(snap).drained == ("od-1",)


def test_all_or_nothing_undo_leaves_the_state_unchanged() -> None:
    # Three pods, 1.9 CPU in all, two spot nodes of 1 CPU: the two big ones fit, the last does not. The node
    # stays, and nothing is left half moved.
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="1"), node("spot-2", spot=True, cpu="1")],
        [pod("big-1", "od-1", cpu="700m"), pod("big-2", "od-1", cpu="700m"), pod("small", "od-1", cpu="500m")],
    )
    before = snapshot_state(snap)
    result = planned(snap)
    assert result.moves == () and result.drained == ()
    assert result.undrainable["od-1"] == "pod shop/small: 0/2 spot nodes are available: 2 Insufficient cpu"
    assert snapshot_state(snap) == before


def test_daemonset_pods_stay_on_a_drained_node() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True)],
        [daemonset_pod("proxy-1", "od-1"), daemonset_pod("proxy-2", "spot-1")],
    )
    result = planned(snap)
    assert result.drained == ("od-1",) and result.moves == ()


def test_not_enough_spot_capacity_fails_fast_with_the_totals() -> None:
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="1")], [pod("a", "od-1", cpu="800m"), pod("b", "od-1", cpu="800m")]
    )
    why = planned(snap).undrainable["od-1"]
    assert why.startswith("its 2 pod(s) need 1.6 CPU")


def test_not_ready_on_demand_node_is_not_drained() -> None:
    snap = cluster([node("od-1", ready=False), node("spot-1", spot=True)], [pod("web-1", "od-1")])
    assert planned(snap).undrainable["od-1"] == "node is not ready"


def test_a_pending_pod_that_fits_no_node_is_counted_and_holds_nothing() -> None:
    pending = Pod.from_api(
        {
            "metadata": {
                "name": "stuck",
                "namespace": "shop",
                "ownerReferences": [{"kind": "ReplicaSet", "name": "x", "controller": True}],
            },
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "64"}}}]},
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
    )
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1"), pending])
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert result.summary.pending_unschedulable == 1 and result.summary.safe_to_act is True
    assert result.summary.waiting_pods == {"shop/stuck": ()}


def test_pending_pods_held_by_scheduling_gates_are_not_flagged() -> None:
    raw = {
        "metadata": {"name": "held", "namespace": "shop"},
        "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "example.com/quota"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1"), Pod.from_api(raw)])
    result = planned(snap)
    assert result.summary.pending_unschedulable == 0 and result.summary.safe_to_act is True
    assert result.summary.waiting_pods is None


def test_volume_zone_keeps_a_pod_in_its_zone() -> None:
    pv = PersistentVolume.from_api(
        {
            "metadata": {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "b"}},
            "spec": {"claimRef": {"namespace": "shop", "name": "data"}},
        }
    )
    pvc = PersistentVolumeClaim.from_api(
        {"metadata": {"name": "data", "namespace": "shop"}, "spec": {"volumeName": "pv-1"}}
    )
    p = Pod.from_api(
        {
            "metadata": {
                "name": "db-0",
                "namespace": "shop",
                "ownerReferences": [{"kind": "StatefulSet", "name": "db", "controller": True}],
            },
            "spec": {
                "nodeName": "od-1",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
            "status": {"phase": "Running"},
        }
    )
    snap = cluster(
        [node("od-1", zone="b"), node("spot-a", spot=True, zone="a"), node("spot-b", spot=True, zone="b")],
        [p],
        pvs=[pv],
        pvcs=[pvc],
        namespaces=[Namespace.from_api({"metadata": {"name": "shop"}})],
    )
    assert [m.target for m in planned(snap).moves] == ["spot-b"]


def test_all_at_once_greedy_mistake_on_pdb_budgets_is_repaired() -> None:
    # od-1 holds one pod of each of two PDBs allowing one disruption each; od-2 and od-3 hold one each.
    # Draining od-1 first would cost two nodes: the plan drains od-2 and od-3 and holds od-1 back.
    snap = cluster(
        [node("od-1"), node("od-2"), node("od-3"), node("spot-1", spot=True, cpu="16")],
        [
            pod("a-1", "od-1", app="a", cpu="100m"),
            pod("b-1", "od-1", app="b", cpu="100m"),
            pod("a-2", "od-2", app="a", cpu="900m"),
            pod("b-2", "od-3", app="b", cpu="900m"),
        ],
        [pdb("a", "a", 1), pdb("b", "b", 1)],
    )
    result = planned(snap, ALL_AT_ONCE)
    assert sorted(result.drained) == ["od-2", "od-3"]
    assert result.undrainable["od-1"] in (HELD_BACK,) or "PodDisruptionBudget" in result.undrainable["od-1"]
    # Under the default rate-limit rule the budgets pace the drains and all three nodes go.
    assert sorted(planned(snap).drained) == ["od-1", "od-2", "od-3"]


def test_config_on_demand_selector_limits_the_candidates() -> None:
    config = parse_config({"node_classes": {"on_demand_selectors": ["pool=general"]}})
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1")])
    result = planned(snap, config)
    assert result.drained == () and result.undrainable == {}
    assert result.summary.on_demand_nodes == 0


def test_plan_json_has_exactly_the_documented_shape() -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1")])
    doc = planned(snap).to_json()
    assert list(doc) == ["moves", "drained", "undrainable", "summary", "reasons", "pacing", "worth"]
    assert doc["moves"] == [{"pod": "shop/web-1", "from": "od-1", "to": "spot-1"}]
    assert doc["drained"] == ["od-1"] and doc["undrainable"] == {} and doc["reasons"] == {} and doc["pacing"] == {}
    assert list(doc["worth"]) == ["od-1"]
    assert list(doc["worth"]["od-1"]) == ["saving", "cost", "verdict", "stay_seconds", "evictions"]
    assert doc["worth"]["od-1"]["verdict"] == "worth" and doc["worth"]["od-1"]["evictions"] == 1
    orjson.dumps(doc)  # serialisable as is
