"""Whether a drain is worth its evictions (:mod:`rescheduler.plan.worth`), and the planner draining only those."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.output.document import render_json
from rescheduler.output.page import page_data
from rescheduler.output.table import render_table
from rescheduler.plan.capacity_needs import capacity_needs
from rescheduler.plan.planner import PlanCache, plan
from rescheduler.plan.stay_reasons import Kind
from rescheduler.plan.worth import (
    NOT_WORTH,
    WORTH,
    constant_stay,
    eviction_cost,
    expected_stay,
    node_price,
    pool_stay,
    restart_seconds,
    weigh,
)
from shared.config import Config, WorthConfig
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import PoolKey, PoolOutlook
from tests.builders.planner import cluster, node, planned, pod
from tests.support import cluster_gen
from tests.support.plan_check import check_plan

HOUR = 3600.0
DEFAULT = WorthConfig()
BASE = Config()
PVC_VOLUME = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


def _with(config: Config = BASE, **worth: object) -> Config:
    return replace(config, worth=replace(config.worth, **worth))


def _generated(seed: int, nodes: int, pods: int, profile: str) -> ClusterSnapshot:
    """A cluster of the golden plans' generator (``tests/unit/test_plan_golden.py``)."""
    items = cluster_gen.generate(seed, nodes, pods, getattr(cluster_gen, profile))
    return load_bytes(orjson.dumps({"kind": "List", "items": items}))


# --- the rule -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "memory", "price"),
    [
        pytest.param("4", "16Gi", 4.0, id="balanced-node-is-its-vcpus"),
        pytest.param("2", "32Gi", 8.0, id="memory-heavy-node-is-its-memory-over-4"),
        pytest.param("8", "8Gi", 8.0, id="cpu-heavy-node-is-its-vcpus"),
    ],
)
def test_a_nodes_price_is_the_larger_of_its_vcpus_and_its_memory_over_4(cpu: str, memory: str, price: float) -> None:
    assert node_price(node("od-1", cpu=cpu, memory=memory)) == pytest.approx(price)


def test_the_saving_is_the_price_less_spot_over_the_stay_less_the_removal_delay() -> None:
    w = weigh(node("od-1", cpu="4", memory="16Gi"), [], 6 * HOUR, DEFAULT)
    assert w.saving == pytest.approx(4 * (1 - 0.3) * (6 * HOUR - 600) / HOUR)  # 16.33 vCPU-hours
    assert w.cost == 0 and w.worth and w.verdict == WORTH and w.evictions == 0


def test_a_stay_shorter_than_the_removal_delay_saves_nothing_and_a_long_one_counts_up_to_the_horizon() -> None:
    od = node("od-1", cpu="4", memory="16Gi")
    assert weigh(od, [], 300, DEFAULT).saving == 0
    assert weigh(od, [], 100 * HOUR, DEFAULT).saving == pytest.approx(weigh(od, [], 24 * HOUR, DEFAULT).saving)
    assert weigh(od, [], 100 * HOUR, DEFAULT).stay == 24 * HOUR


def test_an_eviction_costs_the_fixed_cost_plus_the_pods_vcpus_idle_while_it_restarts() -> None:
    web = pod("web-1", "od-1", cpu="500m")
    assert restart_seconds(web, DEFAULT) == 30  # default_start_up: the status does not tell
    assert eviction_cost(web, DEFAULT) == pytest.approx(0.25 + 0.5 * 30 / HOUR)


def test_a_pod_with_a_claim_costs_more_by_the_volumes_attach_time() -> None:
    plain = pod("web-1", "od-1", cpu="2")
    claimed = pod("db-1", "od-1", cpu="2", spec_extra=PVC_VOLUME)
    assert restart_seconds(claimed, DEFAULT) == 30 + 60
    assert eviction_cost(claimed, DEFAULT) - eviction_cost(plain, DEFAULT) == pytest.approx(2 * 60 / HOUR)


def test_a_slow_starting_pod_costs_more_by_its_own_start_up_time() -> None:
    quick = replace(pod("web-1", "od-1", cpu="1"), start_up=5)
    slow = replace(pod("web-2", "od-1", cpu="1"), start_up=900)
    assert restart_seconds(quick, DEFAULT) == 5 and restart_seconds(slow, DEFAULT) == 900
    assert eviction_cost(slow, DEFAULT) - eviction_cost(quick, DEFAULT) == pytest.approx(895 / HOUR)


def test_the_stay_is_the_mean_of_stay_of_over_the_moves_capped_at_the_horizon() -> None:
    stays = {"spot-1": 1 * HOUR, "spot-2": 4 * HOUR, "spot-3": 90 * HOUR}
    assert expected_stay(["spot-1", "spot-2", "spot-2"], stays.__getitem__, DEFAULT) == 3 * HOUR
    assert expected_stay(["spot-3"], stays.__getitem__, DEFAULT) == DEFAULT.horizon
    assert expected_stay([], stays.__getitem__, DEFAULT) == DEFAULT.horizon  # nothing moves, nothing comes back
    assert expected_stay(["spot-1"], constant_stay(DEFAULT), DEFAULT) == DEFAULT.expected_stay


@pytest.mark.parametrize(
    ("fixed", "enabled", "worth"),
    [
        pytest.param(1.0, True, True, id="saving-equal-to-cost-times-margin-is-worth-it"),
        pytest.param(1.001, True, False, id="a-little-more-cost-is-not"),
        pytest.param(1.001, False, True, id="disabled-everything-is-worth-it"),
    ],
)
def test_the_verdict_at_the_margin(fixed: float, enabled: bool, worth: bool) -> None:
    # 4 vCPUs at half price for one hour save 2.0 vCPU-hours; one free-to-restart eviction costs ``fixed``.
    config = WorthConfig(spot_price_ratio=0.5, removal_delay=0, eviction_cost=fixed, margin=2.0, enabled=enabled)
    idle = pod("idle-1", "od-1", cpu="0")
    w = weigh(node("od-1", cpu="4", memory="16Gi"), [idle], HOUR, config)
    assert w.saving == pytest.approx(2.0) and w.cost == pytest.approx(fixed)
    assert w.worth is worth and w.verdict == (WORTH if worth else NOT_WORTH)


# --- the planner --------------------------------------------------------------------------------------------


def _two_nodes_one_room() -> tuple[list[Node], list[Pod]]:
    """od-small (2 vCPUs, 2 pods) and od-big (16 vCPUs, 3 pods): spot-1 has room for either node's pods, not both.
    Alone, the plan drains od-small (as many nodes, fewer moves)."""
    small = [pod(f"small-{i}", "od-small", cpu="1500m") for i in range(2)]
    big = [pod(f"big-{i}", "od-big", cpu="1") for i in range(3)]
    nodes = [
        node("od-small", cpu="2", memory="4Gi"),
        node("od-big", cpu="16", memory="64Gi"),
        node("spot-1", spot=True, cpu="4", memory="16Gi"),
    ]
    return nodes, small + big


def test_the_eviction_cost_kept_with_a_nodes_analysis_follows_the_worth_settings() -> None:
    # The plan cache keeps each on-demand node's eviction cost with its analysis: new worth settings weigh anew.
    snapshot = _generated(3, 40, 900, "DRAINABLE")
    cache = PlanCache()
    cheap, dear = BASE, _with(eviction_cost=40.0)
    verdicts = []
    for config in (cheap, dear, cheap):
        cached, fresh = plan(snapshot, config, cache=cache), plan(snapshot, config)
        assert cached.to_json() == fresh.to_json()
        verdicts.append(sorted(n for n, w in cached.worth.items() if w.worth))
    assert verdicts[0] and verdicts[0] == verdicts[2] and verdicts[1] != verdicts[0]


def test_a_node_not_worth_it_stays_and_the_room_it_would_take_drains_a_node_that_is() -> None:
    nodes, pods = _two_nodes_one_room()
    without = planned(cluster(nodes, pods), _with(enabled=False, eviction_cost=5.0))
    assert without.drained == ("od-small",), "the case needs the small node to win without the rule"
    off = without.worth["od-small"]
    assert off.verdict == WORTH and off.saving < off.cost, "disabled: weighed and shown, every drain is worth it"
    config = _with(eviction_cost=5.0)  # od-small saves 8.2 for 2 evictions (10.0); od-big 65.3 for 3 (15.0)
    result = planned(cluster(nodes, pods), config)
    assert result.drained == ("od-big",)
    assert {m.source for m in result.moves} == {"od-big"} and result.summary.pods_moved == 3
    why = result.reasons["od-small"]
    assert why.kind is Kind.NOT_WORTH and why.pod is None
    small = result.worth["od-small"]
    assert small.verdict == NOT_WORTH and small.evictions == 2
    assert f"saves {small.saving:.2f} vCPU-h" in why.message and f"cost {small.cost:.2f} vCPU-h" in why.message
    assert result.worth["od-big"].verdict == WORTH
    assert orjson.loads(orjson.dumps(result.to_json()))["worth"]["od-small"]["verdict"] == NOT_WORTH


def test_stay_of_is_asked_for_each_moves_target_and_a_short_stay_keeps_the_node() -> None:
    nodes = [node("od-1"), node("spot-1", spot=True), node("spot-2", spot=True)]
    pods = [pod("web-1", "od-1", cpu="3"), pod("web-2", "od-1", cpu="3")]
    asked: list[str] = []

    def brief(target: str) -> float:
        asked.append(target)
        return 300.0  # gone before the node is: nothing saved

    result = plan(cluster(nodes, pods), Config(), stay_of=brief)
    assert result.drained == () and result.reasons["od-1"].kind is Kind.NOT_WORTH
    assert sorted(set(asked)) == ["spot-1", "spot-2"]
    assert plan(cluster(nodes, pods), Config()).drained == ("od-1",), "with worth.expected_stay it drains"


def test_a_target_pool_the_memory_saw_reclaimed_often_shortens_the_stay_and_keeps_the_node() -> None:
    nodes = [node("od-1"), node("spot-1", spot=True, zone="a")]
    pods = [pod("web-1", "od-1", cpu="1"), pod("web-2", "od-1", cpu="1")]
    config = _with(eviction_cost=2.0)  # 4 vCPUs x 0.7 x 5h50m = 16.3 saved against 2 x 2.0: worth it at 6h
    assert planned(cluster(nodes, pods), config).drained == ("od-1",)
    often = cluster(nodes, pods)  # zone a reclaimed 23 times a day: an hour's stay, 0.7 x 4 x 50m = 2.3 < 4.0
    often.spot_outlook = PoolOutlook(frozenset(), ((PoolKey("", "", "", "a"), HOUR),), 24 * HOUR)
    result = planned(often, config)
    assert result.drained == () and result.reasons["od-1"].kind is Kind.NOT_WORTH
    assert result.worth["od-1"].stay == HOUR


def test_the_memory_never_lengthens_the_stay_beyond_worth_expected_stay() -> None:
    nodes = [node("od-1"), node("spot-1", spot=True, zone="a"), node("spot-2", spot=True, zone="b")]
    snap = cluster(nodes, [])
    assert pool_stay(snap, BASE)("spot-1") == DEFAULT.expected_stay, "no memory: worth.expected_stay"
    snap.spot_outlook = PoolOutlook(frozenset(), ((PoolKey("", "", "", "a"), 2 * HOUR),), 24 * HOUR)
    stay = pool_stay(snap, BASE)
    assert stay("spot-1") == 2 * HOUR
    assert stay("spot-2") == DEFAULT.expected_stay, "a pool never reclaimed: 24h by the memory, capped"
    assert stay("gone") == DEFAULT.expected_stay


def test_a_node_worth_it_only_on_a_spot_node_without_room_for_it_is_planned_again_without_it() -> None:
    # Up front od-1 looks worth it (spot-long keeps pods a day), but its pods fit only spot-short, whose pods are
    # reclaimed within minutes: the plan it drains od-1 in is made again without od-1.
    nodes = [node("od-1"), node("spot-long", spot=True, cpu="1"), node("spot-short", spot=True, cpu="8")]
    pods = [pod("web-1", "od-1", cpu="2"), pod("web-2", "od-1", cpu="2")]
    stays = {"spot-long": 24 * HOUR, "spot-short": 300.0}
    result = plan(cluster(nodes, pods), Config(), stay_of=stays.__getitem__, verify=True)
    assert result.drained == () and result.moves == ()
    assert result.reasons["od-1"].kind is Kind.NOT_WORTH
    assert result.worth["od-1"].stay == 300.0 and result.worth["od-1"].saving == 0
    assert plan(cluster(nodes, pods), Config(), stay_of=lambda _t: 24 * HOUR).drained == ("od-1",)


def test_capacity_is_not_asked_for_a_node_not_worth_draining() -> None:
    nodes = [node("od-1"), node("spot-1", spot=True, cpu="1", memory="1Gi")]
    pods = [pod("web-1", "od-1", cpu="2"), pod("web-2", "od-1", cpu="2")]
    snap = cluster(nodes, pods)
    result = plan(snap, Config())
    assert result.reasons["od-1"].kind is Kind.NO_CAPACITY
    assert [n.node for n in capacity_needs(snap, result.reasons, Config())] == ["od-1"]
    assert capacity_needs(snap, result.reasons, _with(eviction_cost=100.0)) == []
    assert [n.node for n in capacity_needs(snap, result.reasons, _with(eviction_cost=100.0, enabled=False))] == ["od-1"]


@pytest.mark.parametrize("case", [(105, 60, 720, "DRAINABLE"), (106, 45, 540, "MILP_PROFILE")], ids=["105", "106"])
def test_on_generated_clusters_a_costly_eviction_keeps_some_nodes_and_the_plan_stays_valid(
    case: tuple[int, int, int, str],
) -> None:
    off = _with(enabled=False)
    costly = _with(eviction_cost=2.0)
    before = plan(_generated(*case), off)
    snap = _generated(*case)
    after = plan(snap, costly, verify=True)
    assert after.summary.verify_rejections == 0
    check_plan(snap, after, costly)
    kept = [n for n, why in after.reasons.items() if why.kind is Kind.NOT_WORTH]
    assert kept, "an eviction cost of 2 vCPU-hours should keep some node of this cluster"
    assert all(after.worth[n].verdict == NOT_WORTH for n in kept)
    assert all(after.worth[n].verdict == WORTH for n in after.drained)
    assert len(after.moves) < len(before.moves)
    again = plan(_generated(*case), costly, verify=True)
    assert orjson.dumps(again.to_json()) == orjson.dumps(after.to_json()), "deterministic"


# --- the plan's renderings ----------------------------------------------------------------------------------


def test_the_table_json_and_page_show_each_weighed_nodes_saving_cost_and_verdict() -> None:
    nodes, pods = _two_nodes_one_room()
    snap = cluster(nodes, pods)
    config = _with(eviction_cost=5.0)
    result = plan(snap, config)
    big, small = result.worth["od-big"], result.worth["od-small"]
    table = render_table(result)
    drained_row = next(line for line in table.splitlines() if line.startswith("od-big "))
    assert drained_row.split()[:5] == ["od-big", "3", f"{big.saving:.2f}", f"{big.cost:.2f}", WORTH]
    assert "Weighed, not drained" in table
    kept_row = next(line for line in table.splitlines() if line.startswith("od-small "))
    assert kept_row.split() == ["od-small", "2", f"{small.saving:.2f}", f"{small.cost:.2f}", NOT_WORTH, NOT_WORTH]
    doc = orjson.loads(render_json(result))
    assert doc["worth"]["od-small"] == {
        "saving": round(small.saving, 3),
        "cost": round(small.cost, 3),
        "verdict": NOT_WORTH,
        "stay_seconds": 6 * 3600,
        "evictions": 2,
    }
    page = {n["name"]: n for n in page_data(snap, result, config)["nodes"]}
    assert page["od-small"]["worth"]["verdict"] == NOT_WORTH and page["od-big"]["worth"]["verdict"] == WORTH
    assert page["spot-1"]["worth"] is None
    assert "Weighed, not drained" not in render_table(plan(cluster(nodes, pods), Config()))
