"""The cycle's gate and decision: backoff, marks, cordons, unreadable pods, how many drains may start, cached PDB
check, own node last."""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

from rescheduler.cluster.watch_cache import NODES, PDBS, PODS, ClusterState
from rescheduler.plan.cycle import Decision, NodeMoves, PlannedCycle, decide, excluded_nodes, gate, plan_nodes
from rescheduler.plan.drain_marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION, TAINT_VALUE
from rescheduler.plan.labels import DrainLabel
from rescheduler.plan.records import Plan, Summary
from shared.config import PDB_ALL_AT_ONCE, Config, parse_config
from shared.snapshot import ClusterSnapshot
from tests.support.fake_api import node, pdb, pod

NOW = 1_700_000_000.0


def state(*nodes, pods=(), pdbs=()) -> ClusterState:
    s = ClusterState()
    s.replace(NODES, list(nodes))
    s.replace(PODS, list(pods))
    s.replace(PDBS, list(pdbs))
    return s


def moves(node_name: str, *pod_names: str) -> NodeMoves:
    return NodeMoves(node_name, tuple(f"default/{p}" for p in pod_names))


def iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resting(name: str) -> dict:
    """A node backing off for another minute after a failed drain."""
    return annotated(name, **{BACKOFF_UNTIL_ANNOTATION: iso(NOW + 60)})


def cycle(
    snapshot: ClusterSnapshot,
    planned: list[NodeMoves],
    config: Config,
    *,
    own_node: str = "",
    memory_backoff: dict[str, float] | None = None,
    broken_nodes: set[str] | frozenset[str] = frozenset(),
) -> Decision:
    """The gate, then the decision on ``planned`` (as a plan that left the gate's nodes out would name them)."""
    g = gate(snapshot, config, now=NOW, memory_backoff=memory_backoff, broken_nodes=broken_nodes)
    kept = tuple(nm for nm in planned if nm.node not in g.excluded)
    return decide(
        snapshot, PlannedCycle(Plan((), (), {}, Summary()), kept, {}), config, excluded=g.excluded, own_node=own_node
    )


def with_budget(nodes: str, **rescheduler: object) -> Config:
    base = Config()
    disruption = replace(
        base.disruption, budgets=parse_config({"disruption": {"budgets": [{"nodes": nodes}]}}).disruption.budgets
    )
    return replace(base, disruption=disruption, rescheduler=replace(base.rescheduler, **rescheduler))


def eight_on_demand(*marked: str) -> ClusterSnapshot:
    nodes = [
        annotated(f"od-{i}", **{STATE_ANNOTATION: "draining"}) if f"od-{i}" in marked else node(f"od-{i}")
        for i in range(8)
    ]
    return state(*nodes).snapshot()


def test_without_a_budget_one_node_drains_at_a_time() -> None:
    assert gate(eight_on_demand(), Config(), now=NOW).starts == 1
    assert gate(eight_on_demand(), Config(), now=NOW, in_flight=1).starts == 0
    assert gate(eight_on_demand("od-3"), Config(), now=NOW).starts == 0, "a predecessor's drain counts by its mark"


def test_a_budget_of_half_the_nodes_lets_four_drain_at_once_started_per_cycle_limit_first() -> None:
    assert gate(eight_on_demand(), with_budget("50%"), now=NOW).starts == 1, "max_nodes_per_cycle is 1"
    config = with_budget("50%", max_nodes_per_cycle=8)
    assert gate(eight_on_demand(), config, now=NOW).starts == 4
    assert gate(eight_on_demand("od-1", "od-2"), config, now=NOW).starts == 2
    assert gate(eight_on_demand(), config, now=NOW, in_flight=3).starts == 1
    assert gate(eight_on_demand(), config, now=NOW, in_flight=2, cooling=2).starts == 0, "a drain just ended cools"


def test_a_drained_node_does_not_count_against_the_budget() -> None:
    snapshot = state(
        *[annotated(f"od-{i}", **{STATE_ANNOTATION: "drained"}) for i in range(4)], node("od-9")
    ).snapshot()
    assert gate(snapshot, with_budget("1"), now=NOW).starts == 1


def annotated(name: str, **annotations: str) -> dict:
    n = node(name)
    n["metadata"]["annotations"] = annotations
    return n


@pytest.mark.parametrize(
    ("the_node", "reason"),
    [
        pytest.param(resting("od-1"), DrainLabel.BACKOFF, id="backing-off"),
        pytest.param(
            annotated("od-1", **{STATE_ANNOTATION: "drained"}), DrainLabel.ALREADY_MARKED, id="already-drained"
        ),
        pytest.param(
            node("od-1", taints=[{"key": "spotshift.io/draining", "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]),
            DrainLabel.ALREADY_MARKED,
            id="our-taint",
        ),
        pytest.param(node("od-1", unschedulable=True), DrainLabel.CORDONED, id="cordoned-by-someone"),
    ],
)
def test_nodes_left_alone(the_node: dict, reason: str) -> None:
    s = state(the_node, pods=[pod("a", "od-1")])
    d = cycle(s.snapshot(), [moves("od-1", "a")], Config())
    assert d.drains == ()
    assert d.skipped == (("od-1", reason),)


def test_an_expired_backoff_no_longer_holds() -> None:
    s = state(annotated("od-1", **{BACKOFF_UNTIL_ANNOTATION: iso(NOW - 1)}), pods=[pod("a", "od-1")])
    assert [nm.node for nm in cycle(s.snapshot(), [moves("od-1", "a")], Config()).drains] == ["od-1"]


def test_a_backoff_kept_in_memory_holds_too() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1")])
    d = cycle(s.snapshot(), [moves("od-1", "a")], Config(), memory_backoff={"od-1": NOW + 5})
    assert d.skipped == (("od-1", DrainLabel.BACKOFF),)


def test_a_node_with_an_unreadable_pod_is_not_drained() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("bad", "od-1", cpu="lots")])
    d = cycle(s.snapshot(), [moves("od-1", "a")], Config(), broken_nodes=s.broken_nodes())
    assert d.skipped == (("od-1", DrainLabel.UNREADABLE_POD),)


def test_an_empty_node_needs_nothing() -> None:
    s = state(node("od-1"))
    assert cycle(s.snapshot(), [moves("od-1")], Config()).skipped == (("od-1", DrainLabel.NOTHING_TO_MOVE),)


def test_the_cached_pdb_precheck_skips_before_any_api_call() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("b", "od-1")], pdbs=[pdb("web", "web", allowed=0)])
    d = cycle(s.snapshot(), [moves("od-1", "a", "b")], Config())
    assert d.skipped == (("od-1", DrainLabel.PDB_PRECHECK),)


def test_the_cached_pdb_precheck_follows_the_configured_rule() -> None:
    # Two pods of a budget allowing one: a rate limit paces them, the all-at-once rule skips the node.
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("b", "od-1")], pdbs=[pdb("web", "web", allowed=1)])
    paced = cycle(s.snapshot(), [moves("od-1", "a", "b")], Config())
    assert [nm.node for nm in paced.drains] == ["od-1"] and paced.skipped == ()
    base = Config()
    all_at_once = replace(base, rescheduler=replace(base.rescheduler, pdb_rule=PDB_ALL_AT_ONCE))
    d = cycle(s.snapshot(), [moves("od-1", "a", "b")], all_at_once)
    assert d.skipped == (("od-1", DrainLabel.PDB_PRECHECK),)


def test_the_node_the_rescheduler_runs_on_goes_last() -> None:
    s = state(node("od-1"), node("od-2"), pods=[pod("a", "od-1", app="a"), pod("b", "od-2", app="b")])
    planned = [moves("od-1", "a"), moves("od-2", "b")]
    d = cycle(s.snapshot(), planned, Config(), own_node="od-1")
    assert [nm.node for nm in d.drains] == ["od-2", "od-1"]


def test_nodes_are_counted_by_class() -> None:
    s = state(node("od-1"), node("spot-1", spot=True), node("spot-2", spot=True))
    assert cycle(s.snapshot(), [], Config()).nodes_by_class == {"spot": 2, "on-demand": 1, "other": 0}


def test_plan_nodes_groups_the_planners_moves_by_node() -> None:
    s = state(
        node("od-1", cpu="2"),
        node("spot-1", spot=True, cpu="8"),
        pods=[pod("a", "od-1", app="a", owner="rs-a"), pod("b", "od-1", app="b", owner="rs-b")],
    )
    snapshot = s.snapshot()
    planned = plan_nodes(snapshot, Config())
    assert [nm.node for nm in planned.drains] == ["od-1"]
    assert sorted(planned.drains[0].pods) == ["default/a", "default/b"]
    assert set(planned.drains[0].targets.values()) == {"spot-1"}
    assert planned.plan.drained == ("od-1",) and planned.held == {}
    assert sorted(p.key for p in snapshot["od-1"].pods) == ["default/a", "default/b"], "the snapshot is restored"


ALL_AT_ONCE = replace(Config(), rescheduler=replace(Config().rescheduler, pdb_rule=PDB_ALL_AT_ONCE))
"""Under cluster-autoscaler's rule a budget is shared by every node planned now (under the default rate-limit
rule both nodes below drain, one after the other)."""


def two_nodes_one_budget() -> ClusterState:
    """od-a and od-b each hold one pod of ``web``, whose budget allows one disruption: under :data:`ALL_AT_ONCE`
    only one can go now."""
    return state(
        node("od-a", cpu="2"),
        node("od-b", cpu="2"),
        node("spot-1", spot=True, cpu="8"),
        pods=[pod("a", "od-a", app="web", cpu="100m"), pod("b", "od-b", app="web", cpu="200m")],
        pdbs=[pdb("web", "web", allowed=1)],
    )


def test_the_planner_spends_no_budget_or_room_on_an_excluded_node() -> None:
    from rescheduler.plan.planner import plan

    snapshot = two_nodes_one_budget().snapshot()
    assert plan(snapshot, ALL_AT_ONCE).drained == ("od-a",), "the smaller node goes first"
    result = plan(snapshot, ALL_AT_ONCE, exclude={"od-a": "backing off"})
    assert result.drained == ("od-b",)
    assert result.undrainable["od-a"] == "backing off"


@pytest.mark.parametrize(
    ("the_node", "reason"),
    [
        pytest.param(resting("od-a"), DrainLabel.BACKOFF, id="backing-off"),
        pytest.param(annotated("od-a", **{STATE_ANNOTATION: "draining"}), DrainLabel.ALREADY_MARKED, id="marked"),
        pytest.param(node("od-a", cpu="2", unschedulable=True), DrainLabel.CORDONED, id="cordoned"),
    ],
)
def test_a_node_the_cycle_leaves_alone_does_not_hold_back_another(the_node: dict, reason: str) -> None:
    s = two_nodes_one_budget()
    s.replace(NODES, [the_node, node("od-b", cpu="2"), node("spot-1", spot=True, cpu="8")])
    snapshot = s.snapshot()
    excluded = excluded_nodes(snapshot, ALL_AT_ONCE, now=NOW)
    assert excluded == {"od-a": reason}

    d = decide(snapshot, plan_nodes(snapshot, ALL_AT_ONCE, exclude=excluded), ALL_AT_ONCE, excluded=excluded)

    assert [nm.node for nm in d.drains] == ["od-b"]
    assert d.skipped == (("od-a", reason),)


def test_only_on_demand_nodes_are_excluded() -> None:
    spot = node("spot-1", spot=True, unschedulable=True)
    s = state(node("od-1", unschedulable=True), spot)
    assert excluded_nodes(s.snapshot(), Config(), now=NOW) == {"od-1": DrainLabel.CORDONED}


def test_an_unreadable_pod_or_a_backoff_in_memory_excludes_too() -> None:
    s = state(node("od-1"), node("od-2"))
    got = excluded_nodes(s.snapshot(), Config(), now=NOW, memory_backoff={"od-1": NOW + 1}, broken_nodes={"od-2"})
    assert got == {"od-1": DrainLabel.BACKOFF, "od-2": DrainLabel.UNREADABLE_POD}


def test_a_node_whose_budget_the_drains_in_flight_still_need_waits_its_turn() -> None:
    # od-1 and od-2 each hold a pod of web, whose budget allows one disruption now.
    s = state(
        node("od-1"),
        node("od-2"),
        pods=[pod("a", "od-1", app="web"), pod("b", "od-2", app="web")],
        pdbs=[pdb("web", "web", allowed=1)],
    )
    both = [moves("od-1", "a"), moves("od-2", "b")]
    snapshot = s.snapshot()
    planned = PlannedCycle(Plan((), (), {}, Summary()), tuple(both), {})
    d = decide(snapshot, planned, Config())
    assert [nm.node for nm in d.drains] == ["od-1"], "the second would wait on the first's pacing"
    assert d.skipped == (("od-2", DrainLabel.PDB_IN_USE),)
    in_flight = decide(snapshot, planned, Config(), claimed={"default/web": 1})
    assert in_flight.drains == () and len(in_flight.skipped) == 2


def test_budgets_the_drains_do_not_share_let_them_start_together() -> None:
    s = state(
        node("od-1"),
        node("od-2"),
        pods=[pod("a", "od-1", app="web"), pod("b", "od-2", app="api")],
        pdbs=[pdb("web", "web", allowed=1), pdb("api", "api", allowed=1)],
    )
    planned = PlannedCycle(Plan((), (), {}, Summary()), (moves("od-1", "a"), moves("od-2", "b")), {})
    assert [nm.node for nm in decide(s.snapshot(), planned, Config()).drains] == ["od-1", "od-2"]
