"""The churn benchmark's cluster-autoscaler model (bench/churnlab/provisioner.py): its scale-down of under-used
nodes, as cluster-autoscaler decides it."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from bench.churnlab.books import Setup
from bench.churnlab.policies import Actor, config_of
from bench.churnlab.provisioner import (
    ScaleDown,
    ScaleUpTimeout,
    cheapest_nodes,
    fit_elsewhere,
    least_waste_nodes,
    movable_by_autoscaler,
    utilization,
)
from bench.churnlab.scenario import NODE_TYPES, ZONES, Trace, Workload
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


# --- spot scale-ups that fail, per-pool prices and reclaims ------------------------------------------------------

DRY = Trace("dry", "no spot room anywhere", [], {(z, nt.name): 0 for z in ZONES for nt in NODE_TYPES})


SILENT = ScaleUpTimeout(capacity_error_delay=None)
"""A cloud that reports no capacity error: the nodes beyond a pool's room are given up after 15 minutes."""


def _dry_world(timeout: ScaleUpTimeout | None, kind: str = "Deployment", seed: int = 1, **kw: Any) -> World:
    """Six 1-CPU pods (a StatefulSet's: their volumes in zone-a) and no spot room anywhere."""
    return World(
        seed=seed,
        workloads=[Workload("web", kind, 1_000, 2_048, 6, floor=6, zone=ZONES[0] if kind == "StatefulSet" else "")],
        trace=DRY,
        setup=Setup(),
        config=config_of({}),
        spot_fraction=0.3,
        node_types=(SMALL,),
        scale_up_timeout=timeout,
        **kw,
    )


def test_a_spot_pool_without_room_is_asked_anyway_given_up_and_backed_off() -> None:
    world = _dry_world(SILENT)
    p = world.provisioner
    play(world, Actor(), 880.0)
    assert not world.nodes and all(c.spot for c in p.coming)  # asked, never came: the pods wait
    first = {(c.zone, c.node_type.name) for c in p.coming}
    assert len(first) == 1
    play(world, Actor(), 950.0)
    assert set(p.backed_off) == first and p.backed_off[next(iter(first))] == pytest.approx(900.0 + 300.0, abs=10.0)
    assert {(c.zone, c.node_type.name) for c in p.coming if c.spot} - first  # the next cheapest pool, spot again
    # Each try takes 15 minutes and a backoff at most 30: the three zones' pools are never all backed off at
    # once, so the autoscaler keeps trying spot and the pods keep waiting (it cannot know the pools are dry).
    play(world, Actor(), 3 * 3_600.0)
    assert set(p.failures) == {(z, SMALL.name) for z in ZONES} and max(p.failures.values()) >= 3
    assert not world.nodes and not any(b.node for b in world.pods.values())


def test_with_its_only_spot_pool_backed_off_the_provisioner_takes_on_demand() -> None:
    world = _dry_world(SILENT, "StatefulSet")
    play(world, Actor(), 1_200.0)
    assert world.provisioner.failures == {(ZONES[0], SMALL.name): 1}
    assert all(b.node for b in world.pods.values())
    assert [(b.zone, b.spot) for b in world.nodes.values()] == [(ZONES[0], False)] * 2
    assert world.tally.pending_pod_seconds >= 6 * 900.0


def test_without_the_timeout_the_provisioner_knows_the_pools_are_dry() -> None:
    world = _dry_world(None)
    play(world, Actor(), 300.0)
    assert all(b.node for b in world.pods.values()) and not any(b.spot for b in world.nodes.values())
    assert world.tally.pending_pod_seconds < 6 * 200.0


def test_the_cloud_reports_a_dry_spot_pool_after_the_capacity_error_delay_not_15_minutes() -> None:
    rules = ScaleUpTimeout()
    assert rules.capacity_error_delay == 120.0 and rules.give_up_after(False) == 900.0
    world = _dry_world(rules)
    p = world.provisioner
    play(world, Actor(), 100.0)
    first = {(c.zone, c.node_type.name) for c in p.coming}
    assert len(first) == 1 and not p.failures  # asked at the first scan, not yet reported
    play(world, Actor(), 125.0)
    pool = next(iter(first))
    assert p.failures == {pool: 1} and p.backed_off[pool] == pytest.approx(120.0 + 300.0, abs=10.0)
    play(world, Actor(), 140.0)  # the pods' next scan: another pool, spot again
    assert {(c.zone, c.node_type.name) for c in p.coming if c.spot} - first
    assert not any(c.spot and (c.zone, c.node_type.name) == pool for c in p.coming)


def test_with_capacity_errors_the_pods_waiting_for_a_dry_zone_get_on_demand_within_minutes() -> None:
    world = _dry_world(ScaleUpTimeout(), "StatefulSet")
    play(world, Actor(), 300.0)
    assert world.provisioner.failures == {(ZONES[0], SMALL.name): 1}
    assert all(b.node for b in world.pods.values())
    assert [(b.zone, b.spot) for b in world.nodes.values()] == [(ZONES[0], False)] * 2
    assert 6 * 120.0 <= world.tally.pending_pod_seconds < 6 * 300.0


def _asked(seed: int) -> list[tuple[float, str]]:
    """The spot pools a dry world's autoscaler asks in its first two hours, with the least-waste expander."""
    world = _dry_world(ScaleUpTimeout(), seed=seed, least_waste=True)
    asked: list[tuple[float, str]] = []
    seen: set[tuple[str, float]] = set()

    def note(w: World) -> None:
        for c in w.provisioner.coming:
            if c.spot and (c.zone, c.give_up) not in seen:
                seen.add((c.zone, c.give_up))
                asked.append((c.give_up, c.zone))

    play(world, Actor(), 2 * 3_600.0, note)
    return asked


def test_the_least_waste_expanders_ties_follow_the_seed() -> None:
    runs = {seed: _asked(seed) for seed in (1, 2, 3, 4)}
    # Each zone's pool asked once, two minutes apart (each reported dry after 120 s), then on-demand for good.
    assert [t for t, _ in runs[1]] == [120.0, 240.0, 360.0] and sorted(z for _, z in runs[1]) == list(ZONES)
    assert runs[1] == _asked(1)
    assert len({tuple(z for _, z in run) for run in runs.values()}) > 1  # the zones drawn differ between seeds


def test_the_least_waste_expander_prefers_spot_then_the_least_waste() -> None:
    types = NODE_TYPES[:2]  # m.xlarge, m.2xlarge
    zones = {True: list(ZONES), False: list(ZONES)}
    rng = random.Random(1)
    pools = {(z, nt.name): 10 for z in ZONES for nt in types}
    # Three 1-CPU pods fill one m.xlarge; one m.2xlarge would leave more than half of it idle.
    requests = [(1_000, 2_048)] * 3
    choice = least_waste_nodes(requests, types, pools, zones, rng)
    assert choice is not None and choice[0] is SMALL and choice[2] == 1 and choice[3]
    # Six: two m.xlarge or one m.2xlarge waste the same; the tie is drawn, spot either way.
    drawn = {least_waste_nodes([(1_000, 2_048)] * 6, types, pools, zones, rng) for _ in range(30)}
    assert {(c[0].name, c[3]) for c in drawn if c} == {(SMALL.name, True), (types[1].name, True)}
    dry = dict.fromkeys(pools, 0)
    choice = least_waste_nodes(requests, types, dry, zones, rng)
    assert choice is not None and not choice[3]  # no spot room: on-demand
    assert least_waste_nodes([(99_000, 1)], types, pools, zones, rng) is None


def test_the_backoff_doubles_up_to_its_maximum() -> None:
    rules = ScaleUpTimeout()
    assert [rules.backoff(n) for n in (1, 2, 3, 4, 5)] == [300.0, 600.0, 1_200.0, 1_800.0, 1_800.0]


def test_the_provisioner_takes_the_cheapest_spot_pool() -> None:
    pools = {(z, SMALL.name): 10 for z in ZONES}
    prices = {pool: 0.3 for pool in pools}
    prices[(ZONES[2], SMALL.name)] = 0.25
    zones = {True: list(ZONES), False: list(ZONES)}
    choice = cheapest_nodes([(1_000, 2_048)] * 3, (SMALL,), spot_room=pools, zones=zones, zone_nodes={}, prices=prices)
    assert choice == (SMALL, ZONES[2], 1, True)
    prices[(ZONES[2], SMALL.name)] = 0.3  # a tie: the zone with the fewest nodes
    choice = cheapest_nodes(
        [(1_000, 2_048)] * 3, (SMALL,), spot_room=pools, zones=zones, zone_nodes={ZONES[0]: 2}, prices=prices
    )
    assert choice == (SMALL, ZONES[1], 1, True)


def _volatile_world(seed: int) -> World:
    rates = {(z, SMALL.name): 0.0 for z in ZONES}
    rates[(ZONES[0], SMALL.name)] = 2.0  # two reclaims per node-hour
    return World(
        seed=seed,
        workloads=[Workload("web", "Deployment", 1_000, 2_048, 18, floor=18)],
        trace=Trace("none", "no cut"),
        setup=Setup(),
        config=config_of({}),
        spot_fraction=0.3,
        node_types=(SMALL,),
        reclaim_rates=rates,
        spot_prices={(z, SMALL.name): 0.3 for z in ZONES},
    )


def test_background_reclaims_hit_the_volatile_pool_only_and_follow_the_seed() -> None:
    runs = []
    for seed in (1, 1, 2):
        world = _volatile_world(seed)
        notices: list[tuple[float, str]] = []
        play(world, Actor(), 4 * 3_600.0, lambda w, out=notices: _noticed(w, out))
        assert notices and {zone for _, zone in notices} == {ZONES[0]}
        assert world.tally.reclaimed_pods > 0 and world.tally.lost_pods == 0
        runs.append(notices)
    assert runs[0] == runs[1] and runs[0] != runs[2]


def _noticed(world: World, out: list[tuple[float, str]]) -> None:
    out.extend((world.now, b.zone) for b in world.nodes.values() if b.ends_at == world.now + 120.0)


def test_a_spot_node_costs_its_pools_price() -> None:
    world = _volatile_world(1)
    play(world, Actor(), 600.0)
    spot = next(b for b in world.nodes.values() if b.spot)
    world.books.spot_prices[(spot.zone, spot.node_type.name)] = 0.5
    world.tally.cost_seconds = 0.0
    world.account(3_600.0)
    expected = sum(
        SMALL.price * (world.books.price_share(b.zone, b.node_type.name) if b.spot else 1.0)
        for b in world.nodes.values()
    )
    assert 0.5 in {world.books.price_share(b.zone, b.node_type.name) for b in world.nodes.values() if b.spot}
    assert world.tally.cost_seconds == pytest.approx(expected * 3_600.0)
