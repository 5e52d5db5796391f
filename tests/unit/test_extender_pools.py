"""The extender's score by spot pool: the node cache learns reclaims from its own watch, a spot node of an unsettled
pool scores as on-demand, a pool reclaimed earlier between the two, and a window running out is picked up by
/prioritize without any per-call work beyond a comparison."""

from __future__ import annotations

from typing import Any

import orjson

from extender.pools import PoolScores
from extender.scheduling import ExtenderPolicy, NodeIndex, prioritize_names, reduce_node
from shared.config import Config, parse_config
from tests.builders import node_json, taint

HOUR = 3600.0
ITN = "aws-node-termination-handler/spot-itn"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def spot(name: str, group: str, *taint_keys: str) -> dict[str, Any]:
    labels = {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": group, "topology.kubernetes.io/zone": "a"}
    return node_json(name, labels=labels, taints=[taint(k) for k in taint_keys] or None)


def on_demand(name: str) -> dict[str, Any]:
    return node_json(name, labels={"karpenter.sh/capacity-type": "on-demand"})


def scores(index: NodeIndex, *names: str) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in orjson.loads(prioritize_names(list(names), index))}


def cache(config: Config | None = None) -> tuple[NodeIndex, ExtenderPolicy, Clock]:
    config = config or Config()
    clock = Clock()
    policy = ExtenderPolicy.from_config(config)
    index = NodeIndex(PoolScores(config.extender, config.spot, clock))
    nodes = [spot("a1", "a"), spot("a2", "a"), spot("b1", "b"), on_demand("od")]
    index.replace_all({n["metadata"]["name"]: reduce_node(n, policy) for n in nodes})
    return index, policy, clock


NAMES = ("a1", "a2", "b1", "od")


def test_without_a_reclaim_seen_every_spot_node_scores_spot() -> None:
    index, _, _ = cache()
    assert scores(index, *NAMES) == {"a1": 10, "a2": 10, "b1": 10, "od": 0}


def test_a_node_of_a_pool_reclaimed_a_moment_ago_scores_as_on_demand_and_later_between_the_two() -> None:
    index, policy, clock = cache(parse_config({"extender": {"on_demand_score": 2}}))
    index.put("a1", reduce_node(spot("a1", "a", ITN), policy))
    assert scores(index, *NAMES) == {"a1": 0, "a2": 2, "b1": 10, "od": 2}
    clock.now += 0.5 * HOUR  # the window runs out: reclaimed once in the memory, half-way
    assert scores(index, *NAMES) == {"a1": 0, "a2": 6, "b1": 10, "od": 2}
    clock.now += 24 * HOUR  # forgotten
    assert scores(index, "a2", "b1") == {"a2": 10, "b1": 10}


def test_a_spot_node_deleted_without_a_notice_counts_and_a_new_node_of_its_pool_scores_low() -> None:
    index, policy, _ = cache()
    index.delete("b1")
    index.put("b2", reduce_node(spot("b2", "b"), policy))
    assert scores(index, "a1", "b2") == {"a1": 10, "b2": 0}


def test_the_first_list_and_a_notice_seen_twice_count_once() -> None:
    index, policy, _ = cache()
    index.put("a1", reduce_node(spot("a1", "a", ITN), policy))
    index.put("a1", reduce_node(spot("a1", "a", ITN), policy))
    index.delete("a1")
    pools = index.pools
    assert pools is not None
    (pool,) = pools.memory.pools()
    assert len(pools.memory.times(pool)) == 1


def test_a_relist_counts_the_spot_nodes_gone_meanwhile() -> None:
    index, policy, _ = cache()
    nodes = [spot("a1", "a"), spot("b1", "b"), on_demand("od")]
    index.replace_all({n["metadata"]["name"]: reduce_node(n, policy) for n in nodes})
    assert scores(index, "a1", "b1") == {"a1": 0, "b1": 10}


def test_an_index_without_pools_scores_as_before() -> None:
    policy = ExtenderPolicy.from_config(Config())
    index = NodeIndex()
    index.replace_all({"a1": reduce_node(spot("a1", "a"), policy)})
    index.delete("a1")
    index.put("a2", reduce_node(spot("a2", "a"), policy))
    assert scores(index, "a2") == {"a2": 10}
