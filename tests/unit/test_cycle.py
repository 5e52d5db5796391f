"""The cycle's decision: pause, backoff, marks, cordons, unreadable pods, cached PDB check, own node last."""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

from rescheduler.cluster.state import NODES, PDBS, PODS, ClusterState
from rescheduler.plan.cycle import (
    SKIP_BACKOFF,
    SKIP_CORDONED,
    SKIP_MARKED,
    SKIP_NOTHING_TO_MOVE,
    SKIP_PDB_CACHED,
    SKIP_UNREADABLE_POD,
    NodeMoves,
    decide,
    excluded_nodes,
    plan_nodes,
)
from rescheduler.plan.marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION, TAINT_VALUE
from shared.config import PDB_ALL_AT_ONCE, Config
from tests.unit.fake_api import node, pdb, pod

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


def test_unschedulable_pods_pause_the_cycle() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("stuck", phase="Pending")])
    d = decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW)
    assert d.paused == "1 pods are unschedulable"
    assert d.drains == ()


def test_a_pod_held_by_scheduling_gates_does_not_pause_the_cycle() -> None:
    # Gated with a stale Unschedulable condition: the scheduler does not try it until the gates are removed.
    held = pod("held", phase="Pending", schedulingGates=[{"name": "example.com/quota"}])
    s = state(node("od-1"), pods=[pod("a", "od-1"), held])
    d = decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW)
    assert d.paused == ""
    assert [nm.node for nm in d.drains] == ["od-1"]


def annotated(name: str, **annotations: str) -> dict:
    n = node(name)
    n["metadata"]["annotations"] = annotations
    return n


@pytest.mark.parametrize(
    ("the_node", "reason"),
    [
        pytest.param(annotated("od-1", **{BACKOFF_UNTIL_ANNOTATION: iso(NOW + 60)}), SKIP_BACKOFF, id="backing-off"),
        pytest.param(annotated("od-1", **{STATE_ANNOTATION: "drained"}), SKIP_MARKED, id="already-drained"),
        pytest.param(
            node("od-1", taints=[{"key": "spotshift.io/draining", "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]),
            SKIP_MARKED,
            id="our-taint",
        ),
        pytest.param(node("od-1", unschedulable=True), SKIP_CORDONED, id="cordoned-by-someone"),
    ],
)
def test_nodes_left_alone(the_node: dict, reason: str) -> None:
    s = state(the_node, pods=[pod("a", "od-1")])
    d = decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW)
    assert d.drains == ()
    assert d.skipped == (("od-1", reason),)


def test_an_expired_backoff_no_longer_holds() -> None:
    s = state(annotated("od-1", **{BACKOFF_UNTIL_ANNOTATION: iso(NOW - 1)}), pods=[pod("a", "od-1")])
    assert [nm.node for nm in decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW).drains] == ["od-1"]


def test_a_backoff_kept_in_memory_holds_too() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1")])
    d = decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW, memory_backoff={"od-1": NOW + 5})
    assert d.skipped == (("od-1", SKIP_BACKOFF),)


def test_a_node_with_an_unreadable_pod_is_not_drained() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("bad", "od-1", cpu="lots")])
    d = decide(s.snapshot(), [moves("od-1", "a")], Config(), now=NOW, broken_nodes=s.broken_nodes())
    assert d.skipped == (("od-1", SKIP_UNREADABLE_POD),)


def test_an_empty_node_needs_nothing() -> None:
    s = state(node("od-1"))
    assert decide(s.snapshot(), [moves("od-1")], Config(), now=NOW).skipped == (("od-1", SKIP_NOTHING_TO_MOVE),)


def test_the_cached_pdb_precheck_skips_before_any_api_call() -> None:
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("b", "od-1")], pdbs=[pdb("web", "web", allowed=0)])
    d = decide(s.snapshot(), [moves("od-1", "a", "b")], Config(), now=NOW)
    assert d.skipped == (("od-1", SKIP_PDB_CACHED),)


def test_the_cached_pdb_precheck_follows_the_configured_rule() -> None:
    # Two pods of a budget allowing one: a rate limit paces them, the all-at-once rule skips the node.
    s = state(node("od-1"), pods=[pod("a", "od-1"), pod("b", "od-1")], pdbs=[pdb("web", "web", allowed=1)])
    paced = decide(s.snapshot(), [moves("od-1", "a", "b")], Config(), now=NOW)
    assert [nm.node for nm in paced.drains] == ["od-1"] and paced.skipped == ()
    base = Config()
    all_at_once = replace(base, rescheduler=replace(base.rescheduler, pdb_rule=PDB_ALL_AT_ONCE))
    d = decide(s.snapshot(), [moves("od-1", "a", "b")], all_at_once, now=NOW)
    assert d.skipped == (("od-1", SKIP_PDB_CACHED),)


def test_the_node_the_rescheduler_runs_on_goes_last() -> None:
    s = state(node("od-1"), node("od-2"), pods=[pod("a", "od-1", app="a"), pod("b", "od-2", app="b")])
    planned = [moves("od-1", "a"), moves("od-2", "b")]
    d = decide(s.snapshot(), planned, Config(), now=NOW, own_node="od-1")
    assert [nm.node for nm in d.drains] == ["od-2", "od-1"]


def test_nodes_are_counted_by_class() -> None:
    s = state(node("od-1"), node("spot-1", spot=True), node("spot-2", spot=True))
    assert decide(s.snapshot(), [], Config(), now=NOW).nodes_by_class == {"spot": 2, "on-demand": 1, "other": 0}


def test_plan_nodes_groups_the_planners_moves_by_node() -> None:
    s = state(
        node("od-1", cpu="2"),
        node("spot-1", spot=True, cpu="8"),
        pods=[pod("a", "od-1", app="a", owner="rs-a"), pod("b", "od-1", app="b", owner="rs-b")],
    )
    snapshot = s.snapshot()
    planned = plan_nodes(snapshot, Config())
    assert [nm.node for nm in planned] == ["od-1"]
    assert sorted(planned[0].pods) == ["default/a", "default/b"]
    assert set(planned[0].targets.values()) == {"spot-1"}
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
        pytest.param(annotated("od-a", **{BACKOFF_UNTIL_ANNOTATION: iso(NOW + 60)}), SKIP_BACKOFF, id="backing-off"),
        pytest.param(annotated("od-a", **{STATE_ANNOTATION: "draining"}), SKIP_MARKED, id="marked"),
        pytest.param(node("od-a", cpu="2", unschedulable=True), SKIP_CORDONED, id="cordoned"),
    ],
)
def test_a_node_the_cycle_leaves_alone_does_not_hold_back_another(the_node: dict, reason: str) -> None:
    s = two_nodes_one_budget()
    s.replace(NODES, [the_node, node("od-b", cpu="2"), node("spot-1", spot=True, cpu="8")])
    snapshot = s.snapshot()
    excluded = excluded_nodes(snapshot, ALL_AT_ONCE, now=NOW)
    assert excluded == {"od-a": reason}

    d = decide(snapshot, plan_nodes(snapshot, ALL_AT_ONCE, exclude=excluded), ALL_AT_ONCE, now=NOW, excluded=excluded)

    assert [nm.node for nm in d.drains] == ["od-b"]
    assert d.skipped == (("od-a", reason),)


def test_only_on_demand_nodes_are_excluded() -> None:
    spot = node("spot-1", spot=True, unschedulable=True)
    s = state(node("od-1", unschedulable=True), spot)
    assert excluded_nodes(s.snapshot(), Config(), now=NOW) == {"od-1": SKIP_CORDONED}


def test_an_unreadable_pod_or_a_backoff_in_memory_excludes_too() -> None:
    s = state(node("od-1"), node("od-2"))
    got = excluded_nodes(s.snapshot(), Config(), now=NOW, memory_backoff={"od-1": NOW + 1}, broken_nodes={"od-2"})
    assert got == {"od-1": SKIP_BACKOFF, "od-2": SKIP_UNREADABLE_POD}
