"""Spot pools in the rescheduler: an unsettled pool is no target and the steadier pools are tried first (the plan),
placeholders avoid unsettled pools, and the memory of reclaims travels in the Lease and feeds the loop."""

from __future__ import annotations

import datetime
import io
import itertools
import json
from pathlib import Path

import pytest

from rescheduler.cluster.leader import LeaderElector, LeaseConfig
from rescheduler.cluster.spot_memory import ANNOTATION, SpotMemory
from rescheduler.cluster.watch_cache import NODES, PODS, ClusterState
from rescheduler.plan.placeholder_pods import MAX_AVOIDING_TERMS, avoiding_terms, placeholder_pod
from rescheduler.run import Rescheduler, RunOptions
from shared.config import Config, parse_config
from shared.kube.api import Kube
from shared.model import Node, Pod
from shared.nodeaffinity import matches_node_selector_and_affinity
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import PoolKey, PoolOutlook, ReclaimMemory
from tests.builders import api_list, node_json, owner, pod_json
from tests.builders.planner import DEFAULT, cluster, node, planned, pod
from tests.support.fake_api import FakeApiServer, namespace
from tests.support.fake_api import node as api_node
from tests.support.fake_api import pod as api_pod

HOUR = 3600.0
ZONE_A, ZONE_B = PoolKey("", "", "", "a"), PoolKey("", "", "", "b")


def two_pools() -> ClusterSnapshot:
    """One on-demand node with one pod; a spot node in zone ``a`` with little room (best fit) and one in ``b``."""
    return cluster(
        [node("od"), node("spot-a", spot=True, cpu="1", zone="a"), node("spot-b", spot=True, cpu="8", zone="b")],
        [pod("web-1", "od")],
    )


def outlook(*, unsettled: tuple[PoolKey, ...] = (), stays: dict[PoolKey, float] | None = None) -> PoolOutlook:
    return PoolOutlook(frozenset(unsettled), tuple(sorted((stays or {}).items())), 24 * HOUR)


def target_of(snap: ClusterSnapshot) -> tuple[str, ...]:
    return tuple(m.target for m in planned(snap).moves)


# --- the plan ---------------------------------------------------------------------------------------------------


def test_without_a_reclaim_remembered_the_best_fit_is_taken_and_the_summary_is_unchanged() -> None:
    snap = two_pools()
    result = planned(snap)
    assert [m.target for m in result.moves] == ["spot-a"]
    assert result.summary.spot_unsettled is None and "spot_unsettled" not in result.summary.to_json()


def test_a_node_of_an_unsettled_pool_is_not_a_target() -> None:
    snap = two_pools()
    snap.spot_outlook = outlook(unsettled=(ZONE_A,), stays={ZONE_A: 12 * HOUR})
    result = planned(snap)
    assert [m.target for m in result.moves] == ["spot-b"]
    s = result.summary
    assert (s.spot_targets, s.spot_not_targets, s.spot_unsettled) == (1, 1, 1)


def test_after_the_window_the_pool_is_a_target_again_but_the_steadier_pool_comes_first() -> None:
    snap = two_pools()
    snap.spot_outlook = outlook(stays={ZONE_A: 12 * HOUR})  # reclaimed once, settled
    assert target_of(snap) == ("spot-b",)
    snap.spot_outlook = outlook(stays={ZONE_A: 12 * HOUR, ZONE_B: 8 * HOUR})  # b reclaimed more often
    assert target_of(snap) == ("spot-a",)


def test_a_pod_goes_to_a_less_steady_pool_when_no_steadier_one_takes_it() -> None:
    snap = cluster(
        [node("od"), node("spot-a", spot=True, cpu="8", zone="a"), node("spot-b", spot=True, cpu="1", zone="b")],
        [pod("web-1", "od", cpu="2")],
    )
    snap.spot_outlook = outlook(stays={ZONE_A: 2 * HOUR})
    assert target_of(snap) == ("spot-a",)


def test_the_plan_with_an_outlook_is_the_same_every_time() -> None:
    plans = []
    for _ in range(2):
        snap = two_pools()
        snap.spot_outlook = outlook(unsettled=(ZONE_B,), stays={ZONE_A: 12 * HOUR, ZONE_B: 24 * HOUR})
        plans.append(planned(snap).to_json())
    assert plans[0] == plans[1]


# --- placeholders -----------------------------------------------------------------------------------------------

GROUP = "karpenter.sh/nodepool"
TYPE, ZONE = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone"


def spot_in(group: str | None, instance_type: str, zone: str) -> Node:
    labels = {"karpenter.sh/capacity-type": "spot", TYPE: instance_type, ZONE: zone}
    if group is not None:
        labels[GROUP] = group
    name = f"{group}-{instance_type}-{zone}"
    return Node.from_api({"metadata": {"name": name, "labels": labels}, "spec": {}, "status": {}})


def placeholder(avoid: list[PoolKey]) -> Pod:
    terms = avoiding_terms(avoid)
    assert terms is not None
    raw = placeholder_pod(pod("web-1", "od"), "od", DEFAULT, "r1", None, terms)
    raw["metadata"]["name"] = "spotshift-placeholder-x"
    return Pod.from_api(raw)


EVERY_POOL = [
    (group, instance_type, zone)
    for group, instance_type, zone in itertools.product(("g1", "g2", None), ("m5", "c5"), ("za", "zb"))
]


@pytest.mark.parametrize(
    "avoid",
    [
        pytest.param([PoolKey(GROUP, "g1", "m5", "za")], id="one-pool"),
        pytest.param([PoolKey(GROUP, "g1", "m5", "za"), PoolKey(GROUP, "g1", "c5", "zb")], id="two-of-one-group"),
        pytest.param([PoolKey(GROUP, "g1", "m5", "za"), PoolKey(GROUP, "g2", "m5", "za")], id="two-groups"),
    ],
)
def test_a_placeholder_fits_every_spot_pool_but_the_unsettled_ones(avoid: list[PoolKey]) -> None:
    held = placeholder(avoid)
    for group, instance_type, zone in EVERY_POOL:
        n = spot_in(group, instance_type, zone)
        avoided = group is not None and PoolKey(GROUP, group, instance_type, zone) in avoid
        assert matches_node_selector_and_affinity(held, n) is not avoided, n.name


def test_a_pool_without_a_group_label_is_avoided_by_its_type_and_zone_in_every_group() -> None:
    held = placeholder([PoolKey("", "", "m5", "za"), PoolKey(GROUP, "g2", "c5", "zb")])
    for group, instance_type, zone in EVERY_POOL:
        n = spot_in(group, instance_type, zone)
        avoided = (instance_type, zone) == ("m5", "za") or (group, instance_type, zone) == ("g2", "c5", "zb")
        assert matches_node_selector_and_affinity(held, n) is not avoided, n.name


def test_a_placeholder_never_fits_an_on_demand_node_and_without_pools_is_unchanged() -> None:
    held = placeholder([PoolKey(GROUP, "g1", "m5", "za")])
    od = Node.from_api({"metadata": {"name": "od", "labels": {"karpenter.sh/capacity-type": "on-demand"}}})
    assert not matches_node_selector_and_affinity(held, od)
    moving = pod("web-1", "od")
    assert placeholder_pod(moving, "od", DEFAULT, "r1", None, []) == placeholder_pod(moving, "od", DEFAULT, "r1")


def test_too_many_unsettled_pools_ask_for_no_placeholder() -> None:
    pools = [PoolKey(GROUP, f"g{i}", "m5", "za") for i in range(MAX_AVOIDING_TERMS)]
    assert avoiding_terms(pools) is None
    assert avoiding_terms([]) == []


# --- the memory in the Lease and the loop -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(server: FakeApiServer, identity: str, clock: Clock, memory: SpotMemory) -> LeaderElector:
    config = LeaseConfig("spotshift", "spotshift-rescheduler", identity, 15.0, 10.0, 2.0)
    return LeaderElector(Kube(server), config, clock=clock, carry=memory)


def test_a_new_leader_inherits_the_memory_its_predecessor_wrote_into_the_lease() -> None:
    server, clock = FakeApiServer(), Clock()
    server.put("namespaces", namespace("spotshift"))
    first, second = SpotMemory(Config()), SpotMemory(Config())
    a, b = elector(server, "a", clock, first), elector(server, "b", clock, second)
    assert a.try_acquire_or_renew()
    first.record(ZONE_A, 5000.0)
    assert a.try_acquire_or_renew()  # the renewal writes it
    annotations = server.get_obj("leases", "spotshift/spotshift-rescheduler")["metadata"]["annotations"]
    assert ReclaimMemory.from_json(annotations[ANNOTATION], HOUR, 60.0).times(ZONE_A) == (5000,)
    assert not b.try_acquire_or_renew() and second.memory.times(ZONE_A) == ()
    assert a.release()
    assert b.try_acquire_or_renew()
    assert second.memory.times(ZONE_A) == (5000,)
    assert second.outlook(5000.0 + 60).unsettled == {ZONE_A}


def test_a_lease_annotation_that_is_not_a_memory_is_ignored() -> None:
    memory = SpotMemory(Config())
    memory.inherit("{not json")
    memory.inherit(None)
    assert len(memory.memory) == 0


def spot_cluster() -> FakeApiServer:
    server = FakeApiServer(eviction_version="v1beta1", pdb_version="v1beta1")
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", api_node("od-1", cpu="4"))
    server.put("nodes", api_node("spot-1", spot=True, cpu="4"))
    server.put("nodes", api_node("spot-2", spot=True, cpu="4"))
    server.put("pods", api_pod("web-0", "spot-1", app="web", owner="rs-web", cpu="500m"))
    return server


def test_the_loop_records_a_reclaim_from_its_state_and_forgets_the_window_on_its_own_clock() -> None:
    server, wall = spot_cluster(), Clock()
    config = parse_config({"rescheduler": {"leader_elect": False}, "capacity": {"enabled": False}})
    r = Rescheduler(server, config, RunOptions(identity="me"), wall=wall)
    r.state.replace(NODES, [server.get_obj("nodes", n) for n in ("od-1", "spot-1", "spot-2")])
    r.state.replace(PODS, [server.get_obj("pods", "default/web-0")])
    r.cycle()
    assert r.plans.last_plan is not None and r.plans.last_plan.summary.spot_unsettled is None
    wall.now += 60
    spot_1 = server.get_obj("nodes", "spot-1")
    assert spot_1 is not None
    spot_1["spec"]["taints"] = [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]
    r.state.apply(NODES, "MODIFIED", spot_1)
    r.cycle()
    (pool,) = r.parts.spot.memory.pools()
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_spot_reclaims_total") == 1
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_unsettled_spot_pools") == 1
    plan = r.plans.last_plan
    assert plan is not None and plan.summary.spot_unsettled == 1, "spot-2 shares spot-1's pool"
    wall.now += config.spot.stability_window
    r.cycle()
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_unsettled_spot_pools") == 0
    assert r.parts.spot.memory.times(pool) == (1060,)


# --- spot-rescheduler plan --spot-reclaims --------------------------------------------------------------------


def plan_cli(tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    from rescheduler.cli import main

    labels = {"karpenter.sh/capacity-type": "spot", GROUP: "g1", TYPE: "m5", ZONE: "za"}
    snap = api_list(
        [
            node_json("od", labels={"karpenter.sh/capacity-type": "on-demand"}, allocatable=ALLOCATABLE),
            node_json("spot-1", labels=labels, allocatable=ALLOCATABLE),
            pod_json("web-1", node_name="od", owners=[owner("ReplicaSet", "web")], requests={"cpu": "100m"}),
        ]
    )
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", "--snapshot", str(path), "-o", "json", *flags], env={}, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110"}
NOW = "2027-01-15T08:00:00Z"


def test_plan_without_a_memory_treats_every_pool_alike_and_with_one_leaves_out_the_unsettled(tmp_path: Path) -> None:
    code, out, _ = plan_cli(tmp_path)
    assert code == 0 and json.loads(out)["summary"]["drained"] == 1
    memory = ReclaimMemory(24 * HOUR, 0.5 * HOUR)
    at = datetime.datetime(2027, 1, 15, 7, 50, tzinfo=datetime.UTC).timestamp()
    memory.record(PoolKey(GROUP, "g1", "m5", "za"), at)
    (tmp_path / "reclaims.json").write_text(memory.to_json())
    code, out, _ = plan_cli(tmp_path, "--spot-reclaims", str(tmp_path / "reclaims.json"), "--now", NOW)
    summary = json.loads(out)["summary"]
    assert code == 0 and (summary["drained"], summary["spot_unsettled"]) == (0, 1)
    code, out, _ = plan_cli(
        tmp_path, "--spot-reclaims", str(tmp_path / "reclaims.json"), "--now", "2027-01-15T09:00:00Z"
    )
    assert code == 0 and json.loads(out)["summary"]["drained"] == 1


def test_plan_with_a_file_that_is_not_a_memory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "reclaims.json").write_text("[]")
    code, out, err = plan_cli(tmp_path, "--spot-reclaims", str(tmp_path / "reclaims.json"))
    assert (
        code == 2 and out == "" and err.startswith("spot-rescheduler: error: --spot-reclaims") and err.count("\n") == 1
    )


# --- the capacity requests -------------------------------------------------------------------------------------


def test_the_capacity_requests_keep_placeholders_off_unsettled_pools_and_ask_none_when_too_many() -> None:
    from tests.unit.test_capacity_run import ON, no_room, requester, sync
    from tests.unit.test_capacity_run import Clock as CapacityClock

    server = no_room()
    req, state, _ = requester(server, ON, CapacityClock())
    sync(server, state)
    snapshot = state.snapshot()
    snapshot.spot_outlook = PoolOutlook(frozenset({PoolKey(GROUP, "g1", "m5", "za")}))
    result = planned(snapshot, ON)
    req.step(snapshot, result.reasons, result.drained)
    created = [p for k, p in server.store["pods"].items() if k.startswith("spotshift/")]
    assert len(created) == 2
    held = Pod.from_api({**created[0], "metadata": {**created[0]["metadata"], "name": "x"}})
    assert not matches_node_selector_and_affinity(held, spot_in("g1", "m5", "za"))
    assert matches_node_selector_and_affinity(held, spot_in("g1", "m5", "zb"))

    server = no_room()
    req, state, _ = requester(server, ON, CapacityClock())
    sync(server, state)
    snapshot = state.snapshot()
    many = frozenset(PoolKey(GROUP, f"g{i}", "m5", "za") for i in range(MAX_AVOIDING_TERMS))
    snapshot.spot_outlook = PoolOutlook(many)
    result = planned(snapshot, ON)
    req.step(snapshot, result.reasons, result.drained)
    assert req.needs and not [k for k in server.store["pods"] if k.startswith("spotshift/")]


def test_placeholders_that_keep_off_a_pool_are_asked_for_again_once_it_settles() -> None:
    from tests.unit.test_capacity_run import ON, no_room, requester, sync
    from tests.unit.test_capacity_run import Clock as CapacityClock

    server = no_room()
    req, state, _ = requester(server, ON, CapacityClock())
    sync(server, state)
    za = PoolKey(GROUP, "g1", "m5", "za")

    def placeholders() -> list[Pod]:
        return [
            Pod.from_api({**o, "metadata": {**o["metadata"], "name": "x"}})
            for k, o in server.store["pods"].items()
            if k.startswith("spotshift/")
        ]

    snapshot = state.snapshot()
    snapshot.spot_outlook = PoolOutlook(frozenset({za}))
    result = planned(snapshot, ON)
    req.step(snapshot, result.reasons, result.drained)
    assert placeholders() and not any(
        matches_node_selector_and_affinity(p, spot_in("g1", "m5", "za")) for p in placeholders()
    )
    snapshot = state.snapshot()  # the pool settled: the placeholders that kept off it are made again without that
    result = planned(snapshot, ON)
    req.step(snapshot, result.reasons, result.drained)
    assert placeholders() and all(
        matches_node_selector_and_affinity(p, spot_in("g1", "m5", "za")) for p in placeholders()
    )
    assert all(r.avoided == frozenset() for r in req.requests.values())


def test_a_snapshot_of_the_state_version_last_observed_is_not_looked_at_again() -> None:
    memory = SpotMemory(Config())
    memory.observe(cluster([node("od"), node("spot-a", spot=True, zone="a")], [pod("web-1", "spot-a")]), 0.0, 1)
    gone = cluster([node("od")], [])
    # Not a snapshot of version 1, to show that it is not read: the state's version changes with every event.
    assert memory.observe(gone, 10.0, 1) == [], "the version last observed: its nodes tell nothing new"
    assert memory.observe(gone, 10.0, 2) == [ZONE_A], "a new version: spot-a deleted with its pod is a reclaim"
    assert memory.observe(gone, 20.0, 2) == [] and memory.memory.times(ZONE_A) == (10.0,)


def test_a_node_whose_pods_changed_is_looked_at_again_and_one_whose_did_not_is_not() -> None:
    # The run loop's snapshots copy the state's nodes with their stamps: whether a node holds workload is kept per
    # stamp, so a pod that came since counts when the node goes.
    state = ClusterState()
    zone = {"topology.kubernetes.io/zone": "a"}
    state.replace(NODES, [api_node("spot-a", spot=True, labels=zone), api_node("spot-b", spot=True, labels=zone)])
    state.replace(PODS, [api_pod("web-1", "spot-b")])
    memory = SpotMemory(Config())
    assert memory.observe(state.snapshot(), 0.0, state.version) == []
    state.apply(PODS, "ADDED", api_pod("web-2", "spot-a"))  # spot-a now holds workload: its stamp changed
    assert memory.observe(state.snapshot(), 5.0, state.version) == []
    state.apply(NODES, "DELETED", api_node("spot-a", spot=True, labels=zone))
    state.apply(NODES, "DELETED", api_node("spot-b", spot=True, labels=zone))
    assert memory.observe(state.snapshot(), 10.0, state.version) == [ZONE_A, ZONE_A], "both held workload"
