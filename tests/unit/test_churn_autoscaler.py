"""The churn benchmark's cluster-autoscaler model (bench/churnlab/provisioner.py): its scale-down of under-used
nodes, as cluster-autoscaler decides it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bench.churnlab.books import Setup
from bench.churnlab.policies import Actor, config_of
from bench.churnlab.provisioner import ScaleDown, fit_elsewhere, movable_by_autoscaler, utilization
from bench.churnlab.scenario import NODE_TYPES, Trace, Workload
from bench.churnlab.sim import play
from bench.churnlab.world import World
from tests.builders import node, owner, pod, snapshot

SMALL = NODE_TYPES[0]  # m.xlarge: three 1-CPU pods a node


def _world(scale_down: ScaleDown | None) -> World:
    """Nine 1-CPU pods on spot nodes of one type, nothing reclaimed."""
    return World(
        seed=1,
        workloads=[Workload("web", "Deployment", 1_000, 2_048, 9, floor=9)],
        trace=Trace("none", "no cut"),
        setup=Setup(),
        config=config_of({}),
        spot_fraction=0.3,
        node_types=(SMALL,),
        scale_down=scale_down,
    )


@pytest.mark.parametrize("scale_down", [ScaleDown(), None], ids=["scale-down", "empty-nodes-only"])
def test_under_used_nodes_are_drained_by_the_autoscaler_only_with_its_scale_down(scale_down: ScaleDown | None) -> None:
    world = _world(scale_down)
    play(world, Actor(), 1_200.0)
    before = len(world.nodes)
    assert before >= 3
    # Three pods stay, one per node at most: every node is under half used, none empty.
    world.workloads["web"] = replace(world.workloads["web"], peak=3, floor=3)
    play(world, Actor(), 1_500.0)
    assert all(len(world.view.by_node.get(name) or ()) <= 3 for name in world.nodes)
    play(world, Actor(), 4_800.0)
    t = world.tally
    assert t.evictions == 0 and t.lost_pods == 0 and t.pdb_violations == 0
    if scale_down is None:
        assert t.autoscaler_evictions == 0
        assert len(world.nodes) == len({p.node for p in world.pods.values()})
    else:
        assert t.autoscaler_evictions > 0
        assert len(world.nodes) == 1  # the three pods packed onto one node, the others drained and removed
    assert len([p for p in world.pods.values() if p.node]) == 3


def test_utilization_is_the_larger_of_cpu_and_memory() -> None:
    n = node("n", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    pods = [pod("a", requests={"cpu": "1", "memory": "6Gi"}), pod("b", requests={"cpu": "500m"})]
    assert utilization(n, pods) == pytest.approx(0.75)
    assert utilization(n, []) == 0.0


@pytest.mark.parametrize(
    ("kw", "movable"),
    [
        pytest.param({"owners": [owner("ReplicaSet", "web")]}, True, id="replicated-pod-moves"),
        pytest.param({}, False, id="pod-without-controller-blocks"),
        pytest.param(
            {"owners": [owner("ReplicaSet", "web")], "volumes": [{"name": "tmp", "emptyDir": {}}]},
            False,
            id="local-storage-blocks",
        ),
        pytest.param(
            {
                "owners": [owner("ReplicaSet", "web")],
                "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
            },
            False,
            id="safe-to-evict-false-blocks",
        ),
    ],
)
def test_cluster_autoscalers_drain_rules(kw: dict[str, Any], movable: bool) -> None:
    assert movable_by_autoscaler(pod("p", node_name="n", **kw)) is movable


def test_pods_must_all_fit_elsewhere_and_the_snapshot_is_left_as_it_was() -> None:
    room = {"cpu": "2", "memory": "4Gi", "pods": "110"}
    pods = [pod(f"p{i}", node_name="a", requests={"cpu": "1"}, owners=[owner("ReplicaSet", "w")]) for i in range(3)]
    snap = snapshot([node("a", allocatable=room), node("b", allocatable=room)], pods)
    on = {name: sorted(p.key for p in info.pods) for name, info in snap.nodes.items()}
    assert not fit_elsewhere("a", list(snap.nodes["a"].pods), snap)  # three CPUs, two free on b
    assert {name: sorted(p.key for p in info.pods) for name, info in snap.nodes.items()} == on
    snap2 = snapshot([node("a", allocatable=room), node("b", allocatable=room)], pods[:2])
    assert fit_elsewhere("a", list(snap2.nodes["a"].pods), snap2)
    assert sorted(p.key for p in snap2.nodes["a"].pods) == ["default/p0", "default/p1"]
    assert not snap2.nodes["b"].pods
