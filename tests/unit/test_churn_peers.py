"""The churn benchmark's models of the peers (bench/churnlab/policies.py) follow the real tools' rules.

The descheduler's cases transcribe upstream's ``TestRemovePodsViolatingNodeAffinity`` (sigs.k8s.io/descheduler
v0.36.0, ``pkg/framework/plugins/removepodsviolatingnodeaffinity``), named after its descriptions, plus the cases
that set its rule apart from "a better node that fits"; the chart's ``balance`` plugins' cases transcribe
``TestFindDuplicatePods`` and ``TestRemoveDuplicatesUniformly`` (sigs.k8s.io/descheduler v0.36.0
``pkg/framework/plugins/removeduplicates``) and ``TestLowNodeUtilization`` and ``TestLowNodeUtilizationWithTaints``
(sigs.k8s.io/descheduler v0.36.0 ``pkg/framework/plugins/nodeutilization``). Pusher's (k8s-spot-rescheduler) rules
are checked over a few simulated hours of a spiky trace, in which pods go Unschedulable at every cut.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest

from bench.churnlab import policies, replay
from bench.churnlab.policies import (
    DESCHEDULER_CHART,
    DESCHEDULER_SPOT,
    PREFERRED,
    PUSHER_TAINT,
    REQUIRED,
    SYSTEM_CRITICAL,
    Descheduler,
    DeschedulerRun,
    PusherLike,
    Thresholds,
    Utilization,
    any_unschedulable,
    evict,
)
from bench.churnlab.sim import Scenario, simulate
from bench.churnlab.world import World
from shared.model import Node, Pod
from shared.nodeaffinity import preferred_affinity_score
from tests.builders import (
    affinity,
    container,
    expr,
    node_json,
    node_selector,
    node_selector_term,
    owner,
    pod_json,
    snapshot,
    taint,
    toleration,
)
from tests.support.fake_api import FakeApiServer

HOURS = 4 * 3_600.0
SCENARIO = Scenario("pdb-heavy", "spiky", 7)
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
        keys = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.pods}
        assert run.evicted == keys - set(self.server.store["pods"])
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


# --- RemoveDuplicates: upstream's builders (nodes of 2000m CPU, 3000 bytes, 10 pods; pods of 100m, one container
# without an image, owned by ReplicaSet "replicaset-1") ---

DUPLICATES = Descheduler(interval=120.0, remove_duplicates=True)


def _dup_node(name: str, **kw: Any) -> dict[str, Any]:
    return node_json(name, allocatable={"cpu": "2", "memory": "3000", "pods": "10"}, **kw)


def _dup_pod(name: str, node: str = "n1", namespace: str = "default", **kw: Any) -> dict[str, Any]:
    kw.setdefault("owners", [owner("ReplicaSet", "replicaset-1", controller=False)])
    kw.setdefault("containers", [container(requests={"cpu": "100m"})])
    return pod_json(name, namespace=namespace, node_name=node, **kw)


def _two_nodes() -> list[dict[str, Any]]:
    return [_dup_node("n1"), _dup_node("n2")]


def _with_image(name: str, image: str) -> dict[str, Any]:
    # upstream's buildTestPodWithImage: a second container with the image
    return _dup_pod(name, containers=[container(requests={"cpu": "100m"}), container(image, image=image)])


def _not_owned_alike() -> list[dict[str, Any]]:
    """A DaemonSet's pod, a pod owned by a Pod with local storage, a mirror pod, a system-critical pod."""
    local = [{"name": "data", "hostPath": {"path": "/tmp"}}, {"name": "scratch", "emptyDir": {}}]
    mirror = {"kubernetes.io/config.mirror": "mirror"}
    return [
        _dup_pod("p4", owners=[owner("DaemonSet", "ds")]),
        _dup_pod("p5", owners=[owner("Pod", "", controller=False)], volumes=local),
        _dup_pod("p6", owners=[], annotations=mirror),
        _dup_pod("p7", "n1", "kube-system", owners=[], priority=SYSTEM_CRITICAL),
    ]


def _rs(namespace: str, *names: str) -> list[dict[str, Any]]:
    return [_dup_pod(n, namespace=namespace) for n in names]


FIND_DUPLICATE_PODS = {
    "three pods in the dev namespace bound to same replicaset 1 should be evicted": (_rs("dev", "p1", "p2", "p3"), 1),
    "three pods in the test namespace bound to same replicaset 1 should be evicted": (
        _rs("test", "p8", "p9", "p10"),
        1,
    ),
    "three pods in dev three in test bound to replicaset with same name": (
        _rs("dev", "p1", "p2", "p3") + _rs("test", "p8", "p9", "p10"),
        2,
    ),
    "daemonset local storage mirror critical none should be evicted": (_not_owned_alike(), 0),
    "test all pods": (_rs("dev", "p1", "p2", "p3") + _not_owned_alike() + _rs("test", "p8", "p9", "p10"), 2),
    "pods with the same owner but different images should not be evicted": (
        [
            _dup_pod("p11", namespace="different-images", containers=[container(image="foo")]),
            _dup_pod("p12", namespace="different-images", containers=[container(image="bar")]),
        ],
        0,
    ),
    "pods with multiple containers should not match themselves": (
        [_dup_pod("p13", namespace="different-images", containers=[container(), container("foo", image="foo")])],
        0,
    ),
    "pods with matching ownerrefs and at not all matching image should not trigger an eviction": (
        [
            _dup_pod("p11", namespace="different-images", containers=[container(image="foo")]),
            _dup_pod("p13", namespace="different-images", containers=[container(), container("foo", image="foo")]),
        ],
        0,
    ),
}


@pytest.mark.parametrize("case", list(FIND_DUPLICATE_PODS))
def test_find_duplicate_pods(case: str) -> None:
    # upstream: TestFindDuplicatePods (sigs.k8s.io/descheduler v0.36.0
    # pkg/framework/plugins/removeduplicates/removeduplicates_test.go), its cases without excludeOwnerKinds or
    # nodeFit (the chart sets neither)
    pods, evicted = FIND_DUPLICATE_PODS[case]
    assert len(Cluster(_two_nodes(), pods).cycle(DUPLICATES)) == evicted


def _spread(names: range, counts: tuple[int, ...], nodes: tuple[str, ...], **kw: Any) -> list[dict[str, Any]]:
    """Pods ``p<i>`` placed ``counts[j]`` on ``nodes[j]`` in turn, each built with ``kw``."""
    placed = [node for node, n in zip(nodes, counts, strict=True) for _ in range(n)]
    return [_dup_pod(f"p{i}", node, **kw) for i, node in zip(names, placed, strict=True)]


N123 = ("n1", "n2", "n3")
WORKERS = ("worker1", "worker2", "worker3")
RS2 = [owner("ReplicaSet", "replicaset-2", controller=False)]
BOTH_RS = [owner("ReplicaSet", "replicaset-1", controller=False), *RS2]
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
WORKER = "node-role.kubernetes.io/worker"


def _tolerating(key: str, value: str) -> dict[str, Any]:
    return {"tolerations": [toleration(key, "Equal", value, "NoSchedule")]}


def _not_master(key: str) -> dict[str, Any]:
    term = node_selector_term([expr(CONTROL_PLANE, "DoesNotExist"), expr(key, "DoesNotExist")])
    return {"affinity": affinity(node_required=node_selector(term))}


def _alternating(names: range, counts: tuple[int, ...], first: dict[str, Any], second: dict[str, Any]) -> list:
    """Upstream's taint, affinity and selector cases: pods alternate between two variants (k1, k2, k1, ...)."""
    pods = _spread(names, counts, WORKERS)
    for i, pod in enumerate(pods):
        extra = first if i % 2 == 0 else second
        pod["spec"].update({k: v for k, v in pod_json("x", **extra)["spec"].items() if k != "containers"})
    return pods


def _masters(**kw: Any) -> list[dict[str, Any]]:
    return [_dup_node(n, **kw) for n in ("master1", "master2", "master3")]


def _uniform_cases() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], int]]:
    nine = range(1, 10)
    workers = [_dup_node(n) for n in WORKERS]
    labelled = [_dup_node(n, labels={WORKER: "k2"}) for n in WORKERS]
    return {
        "evict pods uniformly": ([_dup_node(n) for n in N123], _spread(nine, (5, 3, 1), N123), 2),
        "evict pods uniformly with one node left out": (_two_nodes(), _spread(nine, (5, 3, 1), N123), 1),
        "evict pods uniformly with two replica sets": (
            [_dup_node(n) for n in N123],
            _spread(range(11, 20), (5, 3, 1), N123, owners=BOTH_RS),
            2,  # upstream counts 4 Eviction calls: each of these 2 pods is a duplicate for both owners
        ),
        "evict pods uniformly with two owner references": (
            [_dup_node(n) for n in N123],
            _spread(range(11, 20), (5, 3, 1), N123) + _spread(range(21, 30), (1, 3, 5), N123, owners=RS2),
            4,
        ),
        "evict pods with number of pods less than nodes": (
            [_dup_node(n) for n in N123],
            _spread(range(1, 3), (2,), ("n1",)),
            1,
        ),
        "evict pods with number of pods less than nodes but ignore different pods with the same ownerref": (
            [_dup_node(n) for n in N123],
            [_with_image("p1", "foo"), _with_image("p2", "bar"), _with_image("p3", "baz"), _with_image("p4", "foo")],
            1,
        ),
        "evict pods with a single pod with three nodes": ([_dup_node(n) for n in N123], [_dup_pod("p1")], 0),
        "evict pods uniformly respecting taints": (
            workers + _masters(taints=[taint(CONTROL_PLANE)]),
            _alternating(nine, (5, 3, 1), _tolerating("k1", "v1"), _tolerating("k2", "v2")),
            2,
        ),
        "evict pods uniformly respecting requiredduringschedulingignoredduringexecution node affinity": (
            workers + _masters(labels={CONTROL_PLANE: ""}),
            _alternating(nine, (5, 3, 1), _not_master("k1"), _not_master("k2")),
            2,
        ),
        "evict pods uniformly respecting node selector": (
            labelled + _masters(),
            _alternating(nine, (5, 3, 1), {"node_selector": {WORKER: "k1"}}, {"node_selector": {WORKER: "k2"}}),
            2,
        ),
        "evict pods uniformly respecting node selector with zero target nodes": (
            workers + _masters(),
            _alternating(nine, (5, 3, 1), {"node_selector": {WORKER: "k1"}}, {"node_selector": {WORKER: "k2"}}),
            0,
        ),
    }


@pytest.mark.parametrize("case", list(_uniform_cases()))
def test_remove_duplicates_uniformly(case: str) -> None:
    # upstream: TestRemoveDuplicatesUniformly (sigs.k8s.io/descheduler v0.36.0
    # pkg/framework/plugins/removeduplicates/removeduplicates_test.go), named after its descriptions
    nodes, pods, evicted = _uniform_cases()[case]
    assert len(Cluster(nodes, pods).cycle(DUPLICATES)) == evicted


# --- LowNodeUtilization ---

CPU_PODS = Utilization(Thresholds(cpu=30, pods=30), Thresholds(cpu=50, pods=50))


def _lnu(settings: Utilization) -> Descheduler:
    return Descheduler(interval=120.0, low_node_utilization=settings)


def _lnu_node(name: str, cpu: str, pods: str, **kw: Any) -> dict[str, Any]:
    return node_json(name, allocatable={"cpu": cpu, "memory": "3000", "pods": pods}, **kw)


def _lnu_pod(name: str, node: str, cpu: str = "400m", **kw: Any) -> dict[str, Any]:
    kw.setdefault("owners", [owner("ReplicaSet", "replicaset-1", controller=False)])
    return pod_json(name, namespace=kw.pop("namespace", "default"), node_name=node, requests={"cpu": cpu}, **kw)


def _n1_pods(priorities: tuple[int | None, ...] = (None,) * 5) -> list[dict[str, Any]]:
    """n1's pods in upstream's cases: five of a ReplicaSet, then a DaemonSet's, a mirror pod with local storage, a
    system-critical pod (none of these three evictable)."""
    mirror = {"kubernetes.io/config.mirror": "mirror"}
    return [
        *(_lnu_pod(f"p{i}", "n1", priority=p) for i, p in enumerate(priorities, start=1)),
        _lnu_pod("p6", "n1", owners=[owner("DaemonSet", "ds")]),
        _lnu_pod("p7", "n1", owners=[owner("Pod", "", controller=False)], annotations=mirror),
        _lnu_pod(
            "p8", "n1", namespace="kube-system", owners=[owner("Pod", "", controller=False)], priority=SYSTEM_CRITICAL
        ),
    ]


def test_low_node_utilization_without_priorities() -> None:
    # upstream: TestLowNodeUtilization "without priorities" and "without priorities stop when cpu capacity is
    # depleted" (sigs.k8s.io/descheduler v0.36.0 pkg/framework/plugins/nodeutilization/lownodeutilization_test.go)
    nodes = [_lnu_node("n1", "4", "9"), _lnu_node("n2", "4", "10"), _lnu_node("n3", "4", "10", unschedulable=True)]
    pods = [*_n1_pods(), _lnu_pod("p9", "n2")]
    assert len(Cluster(nodes, pods).cycle(_lnu(CPU_PODS))) == 4


def test_low_node_utilization_with_priorities() -> None:
    # upstream: TestLowNodeUtilization "with priorities": the low-priority pod goes first
    nodes = [_lnu_node("n1", "4", "9"), _lnu_node("n2", "4", "10"), _lnu_node("n3", "4", "10", unschedulable=True)]
    pods = [*_n1_pods((10000, 10000, 10000, 10000, 0)), _lnu_pod("p9", "n2")]
    cluster = Cluster(nodes, pods)
    run = DeschedulerRun(cast(World, cluster), _lnu(CPU_PODS), snapshot(nodes, pods))
    order: list[str] = []
    real_evict = policies.evict
    try:
        policies.evict = lambda world, obj: order.append(obj["metadata"]["name"]) or real_evict(world, obj)  # type: ignore[assignment]
        run.run()
    finally:
        policies.evict = real_evict
    assert len(order) == 4 and order[0] == "p5"


def test_low_node_utilization_without_priorities_but_only_other_node_is_unschedulable() -> None:
    # upstream: TestLowNodeUtilization "without priorities, but only other node is unschedulable"
    nodes = [_lnu_node("n1", "4", "9"), _lnu_node("n2", "4", "10", unschedulable=True)]
    assert Cluster(nodes, _n1_pods()).cycle(_lnu(CPU_PODS)) == set()


def test_low_node_utilization_no_evictable_pods() -> None:
    # upstream: TestLowNodeUtilization "no evictable pods"
    nodes = [_lnu_node("n1", "4", "9"), _lnu_node("n2", "4", "10"), _lnu_node("n3", "4", "10", unschedulable=True)]
    pods = [p for p in _n1_pods() if p["metadata"]["name"] not in {"p1", "p2", "p3", "p4", "p5"}]
    pods += [_lnu_pod(f"d{i}", "n1", owners=[owner("DaemonSet", "ds")]) for i in range(4)]
    assert Cluster(nodes, [*pods, _lnu_pod("p9", "n2")]).cycle(_lnu(CPU_PODS)) == set()


@pytest.mark.parametrize(
    ("case", "tainted", "tolerates", "evicted"),
    [
        ("no taints", False, False, 1),
        ("no pod tolerates node taint", True, False, 0),
        ("pod which tolerates node taint", True, True, 1),
    ],
)
def test_low_node_utilization_with_taints(case: str, tainted: bool, tolerates: bool, evicted: int) -> None:
    # upstream: TestLowNodeUtilizationWithTaints (sigs.k8s.io/descheduler v0.36.0
    # pkg/framework/plugins/nodeutilization/lownodeutilization_test.go), thresholds on pods only: 20% and 70%
    n3 = _lnu_node("n3", "1", "10", taints=[taint("key", "value")] if tainted else None)
    nodes = [_lnu_node("n1", "2", "10"), *([] if tainted else [_lnu_node("n2", "1", "10")]), n3]
    pods = [_lnu_pod(f"pod_{i}_n1", "n1", "200m") for i in range(1, 8)]
    tolerating = [toleration("key", value="value")] if tolerates else None
    pods.append(_lnu_pod("pod_8_n1", "n1", "200m", tolerations=tolerating))
    pods.append(_lnu_pod("pod_9", "n3" if tainted else "n2", "200m"))
    pods_only = Utilization(Thresholds(pods=20), Thresholds(pods=70))
    got = Cluster(nodes, pods).cycle(_lnu(pods_only))
    assert len(got) == evicted, case
    if tolerates:
        assert got == {"default/pod_8_n1"}


def test_the_chart_runs_both_balance_plugins() -> None:
    assert DESCHEDULER_CHART.remove_duplicates and DESCHEDULER_CHART.low_node_utilization == Utilization(
        Thresholds(20, 20, 20), Thresholds(50, 50, 50)
    )
    assert not DESCHEDULER_SPOT.remove_duplicates and DESCHEDULER_SPOT.low_node_utilization is None


def test_a_cycle_that_evicts_has_the_cluster_react_at_the_next_tick() -> None:
    # The owners' replacements are created at the next tick, not at the next cycle two minutes later (when a cycle
    # would find them not Ready yet and every budget spent).
    world = simulate(SCENARIO, "none", until=600.0)
    actor = policies.DeschedulerLike(world, DESCHEDULER_CHART)
    pods = set(world.server.store["pods"])
    actor.step()
    assert pods - set(world.server.store["pods"])  # the chart's RemoveDuplicates spreads this cluster's pods
    assert actor.busy()
    world.tick(10.0)
    actor.step()  # before the next cycle is due
    assert not actor.busy()


@pytest.mark.parametrize("policy", ["none", "spotshift"])
def test_the_simulated_on_demand_count_by_minute_adds_up_to_its_node_minutes(policy: str) -> None:
    # With no rescheduler the simulation ticks only when something happens: the per-minute count must still hold
    # the nodes that came between two ticks (the real side counts the nodes alive at each minute).
    outcome = replay.simulate_outcome(policy, "pending", replay.SHORT)
    assert abs(sum(outcome.on_demand_series) - outcome.on_demand_node_minutes) <= max(outcome.on_demand_series)
