"""The churn benchmark's models of the peers (bench/churnlab/policies.py) follow the real tools' rules.

The descheduler's cases transcribe upstream's ``TestRemovePodsViolatingNodeAffinity`` (sigs.k8s.io/descheduler
v0.36.0, ``pkg/framework/plugins/removepodsviolatingnodeaffinity``), named after its descriptions, plus the cases
that set its rule apart from "a better node that fits". Pusher's (k8s-spot-rescheduler) rules are checked over a
few simulated hours of a spiky trace, in which pods go Unschedulable at every cut.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest

from bench.churnlab import policies
from bench.churnlab.policies import (
    DESCHEDULER_CHART,
    DESCHEDULER_SPOT,
    PREFERRED,
    PUSHER_TAINT,
    REQUIRED,
    Descheduler,
    DeschedulerRun,
    PusherLike,
    any_unschedulable,
    evict,
)
from bench.churnlab.sim import Scenario, simulate
from bench.churnlab.world import World
from shared.model import Node, Pod
from shared.nodeaffinity import preferred_affinity_score
from tests.builders import (
    affinity,
    expr,
    node_json,
    node_selector,
    node_selector_term,
    owner,
    pod_json,
    snapshot,
    taint,
)
from tests.support.fake_api import FakeApiServer

HOURS = 4 * 3_600.0
SCENARIO = Scenario("pdb-heavy", "spiky", 2)
ROOM = {"cpu": "2", "memory": "4Gi", "pods": "110"}
FULL = {"cpu": "1", "memory": "4Gi", "pods": "110"}
"""A node with room for nothing but the 1-CPU pod already there."""


class Cluster:
    """What one descheduling cycle reads and writes: an API server holding the nodes and pods, and kube-scheduler's
    preferred-affinity score."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.server = FakeApiServer()
        self.nodes, self.pods = nodes, pods
        for n in nodes:
            self.server.put("nodes", n)
        for p in pods:
            self.server.put("pods", p)

    @staticmethod
    def affinity_score(pod: Pod, node: Node) -> int:
        return preferred_affinity_score(pod, node)

    def cycle(self, settings: Descheduler) -> set[str]:
        """One cycle; the keys of the pods it evicted (and the API server deleted)."""
        run = DeschedulerRun(cast(World, self), settings, snapshot(self.nodes, self.pods))
        run.run()
        assert run.evicted == {k for k in (f"default/{p['metadata']['name']}" for p in self.pods)} - set(
            self.server.store["pods"]
        )
        return run.evicted


def _prefers_spot(name: str = "p", node: str = "od", **kw: Any) -> dict[str, Any]:
    """A ReplicaSet's 1-CPU pod on ``node`` preferring (weight 10) nodes labelled ``pool=spot``."""
    prefer = affinity(node_preferred=[(10, node_selector_term([expr("pool", "In", "spot")]))])
    kw.setdefault("affinity", prefer)
    return pod_json(
        name, node_name=node, owners=[owner("ReplicaSet", "web")], requests={"cpu": "1", "memory": "1Gi"}, **kw
    )


def _node(name: str, pool: str, allocatable: dict[str, str] = ROOM, **kw: Any) -> dict[str, Any]:
    return node_json(name, labels={"pool": pool}, allocatable=allocatable, **kw)


PREFERRED_ONLY = Descheduler(interval=10.0, node_affinity=(PREFERRED,))


def test_pod_is_correctly_scheduled_on_node_no_eviction_expected_preferred_affinity() -> None:
    # upstream: "Pod is correctly scheduled on node, no eviction expected [preferred affinity]"
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot(node="spot")])
    assert cluster.cycle(PREFERRED_ONLY) == set()


def test_pod_on_node_without_matching_labels_another_node_with_better_fit_is_evicted() -> None:
    # upstream: "Pod is scheduled on node without matching labels, another schedulable node available with better
    # fit, should be evicted"
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot()])
    assert cluster.cycle(PREFERRED_ONLY) == {"default/p"}


def test_without_node_fit_the_better_weighted_node_need_not_have_room() -> None:
    # The rule compares weights over every Ready node, room or not, and asks only that the pod fit some node: its
    # own counts. A full spot node is enough for the pod to be evicted from its on-demand node.
    full = pod_json("filler", node_name="spot", owners=[owner("ReplicaSet", "other")], requests={"cpu": "1"})
    cluster = Cluster([_node("spot", "spot", FULL), _node("od", "on-demand")], [_prefers_spot(), full])
    assert cluster.cycle(PREFERRED_ONLY) == {"default/p"}
    # ... and so is a spot node under a reclaim notice, where nothing can be scheduled.
    notice = [taint("aws-node-termination-handler/spot-itn", "true")]
    cluster = Cluster([_node("spot", "spot", taints=notice), _node("od", "on-demand")], [_prefers_spot()])
    assert cluster.cycle(PREFERRED_ONLY) == {"default/p"}


def test_pod_on_node_without_matching_labels_but_no_node_where_it_fits_is_not_evicted_with_node_fit() -> None:
    # upstream: "Pod is scheduled on node without matching labels, but no node where pod fits is available, should
    # not evict [preferred affinity]" (nodefit: true)
    full = pod_json("filler", node_name="spot", owners=[owner("ReplicaSet", "other")], requests={"cpu": "1"})
    nodes = [_node("spot", "spot", FULL), _node("od", "on-demand")]
    cluster = Cluster(nodes, [_prefers_spot(), full])
    assert cluster.cycle(replace(PREFERRED_ONLY, node_fit=True)) == set()


def test_unschedulable_node_where_pod_could_fit_is_not_enough_with_node_fit() -> None:
    # upstream: "Pod is scheduled on node without matching labels, and unschedulable node where pod could fit is
    # available, should not evict [preferred affinity]" (maxPodsToEvictPerNode 1, nodefit: true)
    cluster = Cluster([_node("spot", "spot", unschedulable=True), _node("od", "on-demand")], [_prefers_spot()])
    assert cluster.cycle(replace(PREFERRED_ONLY, node_fit=True, max_per_node=1)) == set()
    # the same node schedulable: evicted
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot()])
    assert cluster.cycle(replace(PREFERRED_ONLY, node_fit=True, max_per_node=1)) == {"default/p"}


def test_with_node_fit_any_other_node_with_room_will_do_whatever_its_weight() -> None:
    # nodeFit asks that the pod fit a node other than its own, not a better one: a second on-demand node with
    # room lets the pod go although the only spot node is full.
    full = pod_json("filler", node_name="spot", owners=[owner("ReplicaSet", "other")], requests={"cpu": "1"})
    nodes = [_node("spot", "spot", FULL), _node("od", "on-demand"), _node("od-2", "on-demand")]
    cluster = Cluster(nodes, [_prefers_spot(), full])
    assert cluster.cycle(replace(PREFERRED_ONLY, node_fit=True)) == {"default/p"}


@pytest.mark.parametrize(("limit", "evicted"), [(0, 0), (1, 1), (None, 2)])
def test_max_pods_to_evict_per_node(limit: int | None, evicted: int) -> None:
    # upstream: "... maxPodsToEvictPerNode set to 1, should be evicted [preferred affinity]" and "... set to 0,
    # should be not evicted [preferred affinity]"; unlimited by default
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot("a"), _prefers_spot("b")])
    assert len(cluster.cycle(replace(PREFERRED_ONLY, max_per_node=limit))) == evicted


@pytest.mark.parametrize(("limit", "evicted"), [(0, 0), (1, 1)])
def test_max_no_of_pods_to_evict_per_namespace(limit: int, evicted: int) -> None:
    # upstream: "... maxNoOfPodsToEvictPerNamespace set to 1, should be evicted [preferred affinity]" and "... set
    # to 0, should not be evicted [preferred affinity]"
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot("a"), _prefers_spot("b")])
    assert len(cluster.cycle(replace(PREFERRED_ONLY, max_per_namespace=limit))) == evicted


def test_max_total_ends_the_cycle() -> None:
    nodes = [_node("spot", "spot"), _node("od", "on-demand"), _node("od-2", "on-demand")]
    pods = [_prefers_spot("a"), _prefers_spot("b", node="od-2")]
    assert len(Cluster(nodes, pods).cycle(replace(PREFERRED_ONLY, max_total=1))) == 1


def test_pod_violating_its_required_affinity_is_evicted_only_by_the_required_type() -> None:
    # upstream: "Pod is scheduled on node without matching labels, another schedulable node available, should be
    # evicted" (required affinity): the node's labels changed after the pod was bound
    required = affinity(node_required=node_selector(node_selector_term([expr("pool", "In", "spot")])))
    pods = [_prefers_spot(affinity=required)]
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], pods)
    assert cluster.cycle(Descheduler(interval=10.0, node_affinity=(REQUIRED,))) == {"default/p"}
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], pods)
    assert cluster.cycle(PREFERRED_ONLY) == set()  # no preferred terms


def test_the_chart_moves_nothing_back_to_spot_and_empties_nodes_under_a_reclaim_notice() -> None:
    # The descheduler's Helm chart's policy: RemovePodsViolatingNodeAffinity for required affinity only, so a pod on
    # on-demand preferring spot stays; RemovePodsViolatingNodeTaints evicts what a reclaim notice's taint no longer
    # tolerates, except a pod with a claim (PodsWithPVC protected).
    notice = [taint("aws-node-termination-handler/spot-itn", "true")]
    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}]
    nodes = [_node("spot", "spot"), _node("spot-2", "spot", taints=notice), _node("od", "on-demand")]
    pods = [
        _prefers_spot("stays"),
        _prefers_spot("goes", node="spot-2"),
        _prefers_spot("kept", "spot-2", volumes=claim),
    ]
    assert Cluster(nodes, pods).cycle(DESCHEDULER_CHART) == {"default/goes"}
    assert DESCHEDULER_CHART.interval == 120.0 and DESCHEDULER_CHART.node_affinity == (REQUIRED,)
    assert DESCHEDULER_SPOT.node_affinity == (PREFERRED,) and DESCHEDULER_SPOT.node_fit


def test_a_refused_eviction_skips_the_pod() -> None:
    cluster = Cluster([_node("spot", "spot"), _node("od", "on-demand")], [_prefers_spot("a"), _prefers_spot("b")])
    cluster.server.fail("POST", r"/pods/a/eviction", 429)
    assert cluster.cycle(PREFERRED_ONLY) == {"default/b"}


# --- pusher ----------------------------------------------------------------------------------------------------


def _pusher(monkeypatch: pytest.MonkeyPatch) -> list[PusherLike]:
    """The pusher-like actor of the next simulation, once it is attached."""
    made: list[PusherLike] = []
    init = PusherLike.__init__

    def record(self: PusherLike, world: World) -> None:
        init(self, world)
        made.append(self)

    monkeypatch.setattr(PusherLike, "__init__", record)
    return made


def test_pusher_plans_no_cycle_while_a_pod_is_unschedulable(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _pusher(monkeypatch)
    plan = policies.pusher_plan
    seen = {"plans": 0, "unschedulable_ticks": 0}

    def planned(*args: Any, **kw: Any) -> Any:
        assert not any_unschedulable(made[0].world)
        seen["plans"] += 1
        return plan(*args, **kw)

    def tick(world: World) -> None:
        seen["unschedulable_ticks"] += any_unschedulable(world)

    monkeypatch.setattr(policies, "pusher_plan", planned)
    world = simulate(SCENARIO, "pusher-like", until=HOURS, after_tick=tick)
    assert seen["plans"] > 10 and seen["unschedulable_ticks"] > 10  # both happened, never at once
    assert world.tally.evictions > 0


def test_pusher_lifts_its_taint_when_a_drain_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _pusher(monkeypatch)
    seen = {"drains": 0, "ended_on_a_live_node": 0}
    state: dict[str, str | None] = {"draining": None}

    def tick(world: World) -> None:
        if not made:
            return
        draining = made[0].draining[0] if made[0].draining is not None else None
        tainted = {
            name
            for name, obj in world.server.store["nodes"].items()
            if any(t["key"] == PUSHER_TAINT for t in obj["spec"].get("taints") or ())
        }
        assert tainted <= {draining} - {None}, (tainted, draining)  # only the node being drained carries it
        ended = state["draining"]
        if ended is not None and ended != draining:
            seen["drains"] += 1
            seen["ended_on_a_live_node"] += ended in world.server.store["nodes"]
        state["draining"] = draining

    simulate(SCENARIO, "pusher-like", until=HOURS, after_tick=tick)
    assert seen["drains"] > 0 and seen["ended_on_a_live_node"] > 0


# --- pods reclaimed after a move ----------------------------------------------------------------------------------


def test_each_eviction_marks_the_next_pod_of_its_owner_as_moved() -> None:
    world = simulate(SCENARIO, "none", until=600.0)
    deployment = next(w for w in world.workloads.values() if w.kind == "Deployment" and w.peak > 1)
    keys = sorted(k for k, b in world.pods.items() if b.workload == deployment.name)
    assert not any(world.pods[k].moved for k in world.pods)
    for key in keys[:2]:
        assert evict(world, world.server.store["pods"][key])
    world.tick(10.0)  # the controller replaces both
    moved = {k for k, b in world.pods.items() if b.moved}
    assert len(moved) == 2 and all(world.pods[k].workload == deployment.name for k in moved)
    assert not moved & set(keys)
    world.tick(10.0)
    assert {k for k, b in world.pods.items() if b.moved} == moved  # one for one: nothing more is marked


def test_pods_reclaimed_after_a_move_are_counted() -> None:
    moving = simulate(SCENARIO, "spotshift", until=3 * HOURS)
    still = simulate(SCENARIO, "none", until=3 * HOURS)
    assert still.tally.moved_then_reclaimed == 0 and still.tally.reclaimed_pods > 0
    t = moving.tally
    assert 0 < t.moved_then_reclaimed <= min(t.reclaimed_pods, t.evictions)
