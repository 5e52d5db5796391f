"""shared/spot_pools.py: the pool of a node, the memory of reclaims (window, forgetting, bounds, JSON), and what
counts as a reclaim."""

from __future__ import annotations

import json

import pytest

from shared.config import Config
from shared.model import Node
from shared.spot_pools import (
    MAX_JSON_BYTES,
    MAX_POOLS,
    RECLAIMS_PER_POOL,
    PoolKey,
    ReclaimMemory,
    ReclaimSpotter,
    pool_of,
)
from tests.builders import SPOT, node, on_demand_node, pod, spot_node, taint

CLASSES = Config().node_classes
TYPE = {"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "eu-west-1a"}
HOUR = 3600.0
A = PoolKey("karpenter.sh/nodepool", "spot-a", "m5.large", "eu-west-1a")
B = PoolKey("karpenter.sh/nodepool", "spot-b", "c5.xlarge", "eu-west-1b")


def memory() -> ReclaimMemory:
    return ReclaimMemory(24 * HOUR, 0.5 * HOUR)


# --- the pool of a node -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "group_label",
    [
        pytest.param("karpenter.sh/nodepool", id="karpenter"),
        pytest.param("eks.amazonaws.com/nodegroup", id="eks-managed-node-group"),
        pytest.param("cloud.google.com/gke-nodepool", id="gke"),
        pytest.param("kubernetes.azure.com/agentpool", id="aks"),
    ],
)
def test_a_spot_node_s_pool_is_its_provider_s_node_group_type_and_zone(group_label: str) -> None:
    n = spot_node(labels={group_label: "pool-1", **TYPE})
    assert pool_of(n, CLASSES) == PoolKey(group_label, "pool-1", "m5.large", "eu-west-1a")


def test_without_a_group_label_the_pool_is_the_type_and_zone() -> None:
    assert pool_of(spot_node(labels=TYPE), CLASSES) == PoolKey("", "", "m5.large", "eu-west-1a")


def test_the_deprecated_type_and_zone_labels_are_read_when_alone() -> None:
    beta = {"beta.kubernetes.io/instance-type": "m4.large", "failure-domain.beta.kubernetes.io/zone": "us-east-1c"}
    assert pool_of(spot_node(labels=beta), CLASSES) == PoolKey("", "", "m4.large", "us-east-1c")


def test_an_on_demand_node_has_no_pool() -> None:
    assert pool_of(on_demand_node(labels={"karpenter.sh/nodepool": "od", **TYPE}), CLASSES) is None


@pytest.mark.parametrize("key", [A, PoolKey("", "", "m5.large", "z"), PoolKey("", "", "", "")], ids=str)
def test_a_pool_s_text_reads_back_as_the_same_pool(key: PoolKey) -> None:
    assert PoolKey.parse(key.text) == key


def test_a_text_that_is_not_a_pool_is_refused() -> None:
    with pytest.raises(ValueError):
        PoolKey.parse("m5.large")


# --- the memory -------------------------------------------------------------------------------------------------


def test_a_pool_reclaimed_within_the_window_is_unsettled_and_after_it_is_not() -> None:
    m = memory()
    m.record(A, 1000.0)
    assert m.unsettled(A, 1000.0 + 0.5 * HOUR - 1)
    assert not m.unsettled(A, 1000.0 + 0.5 * HOUR)
    assert not m.unsettled(B, 1000.0)


def test_the_outlook_names_the_unsettled_pools_and_every_remembered_pool_s_stay() -> None:
    m = memory()
    m.record(A, 1000.0)
    m.record(B, 1000.0 - HOUR)
    outlook = m.outlook(1000.0)
    assert outlook.unsettled == {A}
    assert outlook.stay(A) == outlook.stay(B) == 12 * HOUR
    assert outlook.stay(PoolKey("", "", "t3.large", "z")) == 24 * HOUR
    assert not memory().outlook(1000.0)


def test_the_expected_stay_is_the_memory_over_one_more_than_the_reclaims() -> None:
    m = memory()
    assert m.expected_stay(A, 0.0) == 24 * HOUR
    for t in (100.0, 200.0, 300.0):
        m.record(A, t)
    assert m.expected_stay(A, 400.0) == 6 * HOUR
    assert m.rate(A, 400.0) == pytest.approx(3 / 24)


def test_reclaims_older_than_the_memory_are_forgotten() -> None:
    m = memory()
    m.record(A, 0.0)
    m.record(B, 20 * HOUR)
    assert m.expected_stay(A, 25 * HOUR) == 24 * HOUR  # not counted any more, even before forget()
    m.forget(25 * HOUR)
    assert m.pools() == [B]
    m.forget(45 * HOUR)
    assert len(m) == 0


def test_nodes_reclaimed_together_count_one_each() -> None:
    m = memory()
    m.record(A, 1000.4)
    m.record(A, 1000.0)
    assert m.times(A) == (1000, 1000)
    assert m.expected_stay(A, 1000.0) == 8 * HOUR


def test_a_pool_keeps_only_its_most_recent_reclaims() -> None:
    m = memory()
    for t in range(RECLAIMS_PER_POOL + 5):
        m.record(A, float(t))
    assert m.times(A) == tuple(range(5, RECLAIMS_PER_POOL + 5))


def test_only_the_most_recently_reclaimed_pools_are_kept() -> None:
    m = memory()
    for i in range(MAX_POOLS + 3):
        m.record(PoolKey("karpenter.sh/nodepool", f"p{i}", "m5.large", "z"), float(i))
    assert len(m) == MAX_POOLS
    assert PoolKey("karpenter.sh/nodepool", "p0", "m5.large", "z") not in m.pools()
    assert PoolKey("karpenter.sh/nodepool", f"p{MAX_POOLS + 2}", "m5.large", "z") in m.pools()


def test_the_json_reads_back_as_the_same_memory() -> None:
    m = memory()
    m.record(A, 1000.0)
    m.record(A, 2000.0)
    m.record(B, 1500.0)
    text = m.to_json()
    back = ReclaimMemory.from_json(text, 24 * HOUR, 0.5 * HOUR)
    assert [(p, back.times(p)) for p in back.pools()] == [(p, m.times(p)) for p in m.pools()]
    assert back.to_json() == text
    assert " " not in text


def test_the_json_stays_below_its_bound_with_every_pool_full() -> None:
    m = memory()
    for i in range(MAX_POOLS):
        key = PoolKey("eks.amazonaws.com/nodegroup", f"a-rather-long-node-group-name-{i:04d}", "m5.24xlarge", "z")
        for t in range(RECLAIMS_PER_POOL):
            m.record(key, 1_800_000_000.0 + i * 100 + t)
    text = m.to_json()
    assert len(text.encode()) < MAX_JSON_BYTES
    kept = ReclaimMemory.from_json(text, 24 * HOUR, 0.5 * HOUR)
    newest = PoolKey(
        "eks.amazonaws.com/nodegroup", f"a-rather-long-node-group-name-{MAX_POOLS - 1:04d}", "m5.24xlarge", "z"
    )
    assert 0 < len(kept) < MAX_POOLS and newest in kept.pools()


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"v":2,"pools":{}}', '{"v":1,"pools":{"m5.large":[1]}}', '{"v":1,"pools":{"||":["x"]}}'],
)
def test_a_text_that_is_not_a_memory_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        ReclaimMemory.from_json(text, HOUR, 60.0)


def test_merging_adds_only_the_reclaims_the_memory_lacks() -> None:
    m, other = memory(), memory()
    m.record(A, 1000.0)
    other.record(A, 1000.0, 2)
    other.record(B, 2000.0)
    m.merge(other)
    assert m.times(A) == (1000, 1000) and m.times(B) == (2000,)
    m.merge(m)
    m.merge(other)
    assert json.loads(m.to_json())["pools"] == {A.text: [1000, 1000], B.text: [2000]}


# --- what counts as a reclaim -------------------------------------------------------------------------------------

POOL = {"karpenter.sh/nodepool": "spot-a", **TYPE}


def spot(name: str, **kw: object) -> Node:
    return node(name, labels={**SPOT, **POOL}, **kw)  # type: ignore[arg-type]


def test_the_first_look_counts_nothing_and_a_notice_afterwards_counts_once() -> None:
    s = ReclaimSpotter()
    itn = [taint("aws-node-termination-handler/spot-itn")]
    assert s.observe([spot("s1"), spot("s2", taints=itn)], CLASSES) == []
    assert s.observe([spot("s1", taints=itn), spot("s2", taints=itn)], CLASSES) == [A]
    assert s.observe([spot("s1", taints=itn)], CLASSES) == []  # s2 ended with its notice seen already
    assert s.observe([], CLASSES) == []  # s1 too


def test_a_spot_node_gone_without_a_signal_counts_once() -> None:
    s = ReclaimSpotter()
    s.observe([spot("s1"), on_demand_node("od")], CLASSES)
    assert s.observe([], CLASSES) == [A]
    assert s.observe([], CLASSES) == []


def test_an_empty_node_s_end_and_the_autoscaler_s_own_removal_do_not_count() -> None:
    s = ReclaimSpotter()
    busy = {"s1": True, "s2": False, "s3": True}
    s.observe([spot("s1"), spot("s2"), spot("s3")], CLASSES, busy)
    ca = [taint("ToBeDeletedByClusterAutoscaler")]
    assert s.observe([spot("s1", taints=ca)], CLASSES, busy) == [A]  # s2 (empty) and s3 gone: s3 counts
    assert s.observe([], CLASSES, busy) == []


def test_a_node_seen_cordoned_after_its_pods_went_counts_as_the_pods_it_held() -> None:
    # A node termination handler cordons a noticed node, its pods go, then the node: a cycle may look in between.
    s = ReclaimSpotter()
    s.observe([spot("s1"), spot("s2")], CLASSES, {"s1": True, "s2": True})
    cordoned = [spot("s1", unschedulable=True), spot("s2")]
    # Cordoning is a reclaim signal: s1, seen cordoned and already empty, counts with the pods it held.
    assert s.observe(cordoned, CLASSES, {"s1": False, "s2": False}) == [A]
    assert s.observe([], CLASSES, {}) == []  # s1 counted once; s2 was emptied while schedulable
    # A node cordoned while empty stays empty.
    s.observe([spot("s3")], CLASSES, {"s3": False})
    s.observe([spot("s3", unschedulable=True)], CLASSES, {"s3": False})
    assert s.observe([], CLASSES, {}) == []


def test_observing_does_not_change_the_nodes() -> None:
    n = spot("s1", taints=[taint("aws-node-termination-handler/spot-itn")])
    before = (n.labels, n.taints)
    ReclaimSpotter().observe([n], CLASSES)
    assert (n.labels, n.taints) == before


def test_holds_workload_ignores_daemonset_pods() -> None:
    from shared.spot_pools import holds_workload
    from tests.builders import owner

    assert not holds_workload([pod("ds", owners=[owner("DaemonSet", "agent")])])
    assert holds_workload([pod("ds", owners=[owner("DaemonSet", "agent")]), pod("web")])


def test_the_outlook_changes_next_when_a_window_or_the_memory_runs_out() -> None:
    m = memory()
    assert m.next_change(0.0) == float("inf")
    m.record(A, 1000.0)
    m.record(A, 2000.0)
    assert m.next_change(2000.0) == 2000.0 + 0.5 * HOUR
    assert m.next_change(2000.0 + 0.5 * HOUR) == 1000.0 + 24 * HOUR


def test_a_window_longer_than_the_memory_is_refused_with_one_sentence() -> None:
    from shared.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as e:
        parse_config({"spot": {"stability_window": "2h", "memory": "1h"}})
    assert str(e.value).startswith("config field spot.stability_window: must not be longer than spot.memory")
    assert parse_config({}, {"SPOTSHIFT_SPOT_STABILITY_WINDOW": "10m"}).spot.stability_window == 600.0
