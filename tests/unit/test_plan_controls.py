"""The operator's controls in a plan (rescheduler/plan/gate.py): each holds a node with its own kind of reason,
grouped in the summary like the others; budgets keep a prefix of the plan; the run loop's planner answer carries
what the controls held back."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

from rescheduler.output.table import render_table
from rescheduler.plan.cycle import decide, plan_nodes
from rescheduler.plan.drain_marks import STATE_ANNOTATION, TAINT_VALUE
from rescheduler.plan.planner import plan
from rescheduler.plan.records import DisruptionBudget
from rescheduler.plan.stay_reasons import CONTROLS, Kind, control_of
from shared.config import Config, parse_config
from shared.model import Pod, Taint
from tests.builders.planner import cluster, node, pod, snapshot_state
from tests.support.plan_check import check_plan

NOW = datetime.datetime(2026, 5, 4, 12, 0, tzinfo=datetime.UTC).timestamp()


def stamp(seconds_ago: float) -> str:
    return datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def config(**fields: Any) -> Config:
    return parse_config({"disruption": fields})


def three_drainable() -> Any:
    """Three on-demand nodes with one small pod each, and room for all on one spot node."""
    nodes = [node("od-1"), node("od-2"), node("od-3"), node("spot-1", spot=True, cpu="16", memory="64Gi")]
    pods = [pod(f"web-{i}", f"od-{i}", app="web") for i in (1, 2, 3)]
    return cluster(nodes, pods)


def planned(snap: Any, cfg: Config, now: float | None = NOW) -> Any:
    before = snapshot_state(snap)
    result = plan(snap, cfg, verify=True, now=now)
    assert snapshot_state(snap) == before
    check_plan(snap, result, cfg)
    return result


def test_defaults_plan_alike_with_or_without_a_time() -> None:
    snap = three_drainable()
    with_time, without = planned(snap, Config()), planned(snap, Config(), now=None)
    assert with_time.to_json() == without.to_json()
    assert with_time.summary.disruption_budget is None and with_time.summary.spot_too_young is None


def test_a_budget_keeps_the_first_nodes_of_the_plan_and_holds_the_rest() -> None:
    result = planned(three_drainable(), config(budgets=[{"nodes": "1"}]))
    assert len(result.drained) == 1
    assert {m.source for m in result.moves} == set(result.drained)
    held = {n: r for n, r in result.reasons.items() if r.kind is Kind.DISRUPTION_BUDGET}
    assert len(held) == 2 and all(control_of(r) == "budget" for r in held.values())
    assert result.summary.drained == 1 and result.summary.pods_moved == 1
    assert result.summary.disruption_budget == DisruptionBudget(
        limit=1, budget="1", draining=0, outside_window_until=None
    )
    top = result.summary.top_reasons[0]
    assert (top["kind"], top["nodes"]) == ("disruption-budget", 2)


def test_a_node_already_draining_takes_its_place_in_the_budget() -> None:
    snap = three_drainable()
    draining = replace(
        snap["od-3"].node,
        annotations={STATE_ANNOTATION: "draining"},
    )
    nodes = [snap[n].node for n in ("od-1", "od-2", "spot-1")] + [draining]
    pods = [p for info in snap for p in info.pods]
    result = planned(cluster(nodes, pods), config(budgets=[{"nodes": "2"}]))
    assert len(result.drained) == 1  # od-3 counts as one of the two
    assert result.summary.disruption_budget.draining == 1


def test_a_zero_percent_budget_holds_everything_and_a_hundred_percent_nothing() -> None:
    assert planned(three_drainable(), config(budgets=[{"nodes": "0%"}])).drained == ()
    assert len(planned(three_drainable(), config(budgets=[{"nodes": "100%"}])).drained) == 3


def test_outside_the_drain_window_the_plan_says_until_when() -> None:
    cfg = config(budgets=[{"nodes": "3", "schedule": "0 22 * * *", "duration": "8h"}], time_zone="Europe/Berlin")
    result = planned(three_drainable(), cfg)
    assert result.drained == () and result.moves == ()
    why = "outside drain window until 2026-05-04T22:00:00+02:00 (Europe/Berlin)"
    assert {r.message for r in result.reasons.values()} == {why}
    assert {r.kind for r in result.reasons.values()} == {Kind.OUTSIDE_DRAIN_WINDOW}
    assert result.summary.disruption_budget.outside_window_until == why
    assert f"Nothing is drained now: {why}." in render_table(result)


def test_inside_the_drain_window_the_budget_applies() -> None:
    cfg = config(budgets=[{"nodes": "2", "schedule": "0 12 * * *", "duration": "1h"}])
    assert len(planned(three_drainable(), cfg).drained) == 2


def aged(p: Pod, seconds: float) -> Pod:
    return replace(p, creation_timestamp=stamp(seconds))


def test_a_young_pod_makes_its_node_wait_and_its_room_goes_to_others() -> None:
    nodes = [node("od-1"), node("od-2"), node("spot-1", spot=True, cpu="1", memory="2Gi")]
    pods = [aged(pod("new", "od-1", cpu="600m"), 60), aged(pod("old", "od-2", cpu="600m"), 3600)]
    result = planned(cluster(nodes, pods), config(min_pod_age="10m"))
    assert result.drained == ("od-2",)
    why = result.reasons["od-1"]
    assert (why.kind, why.pod) == (Kind.POD_TOO_YOUNG, "shop/new")
    assert control_of(why) == "min-pod-age"


def test_a_pod_exactly_min_pod_age_old_moves() -> None:
    nodes = [node("od-1"), node("spot-1", spot=True)]
    result = planned(cluster(nodes, [aged(pod("p", "od-1"), 600)]), config(min_pod_age="10m"))
    assert result.drained == ("od-1",)


def ready(p: Pod) -> Pod:
    return replace(p, ready=True)


def test_a_workload_with_too_few_ready_replicas_holds_its_node() -> None:
    nodes = [node("od-1"), node("od-2"), node("spot-1", spot=True)]
    pods = [
        ready(pod("solo", "od-1", owner=("StatefulSet", "solo"))),
        ready(pod("web-1", "od-2", owner=("ReplicaSet", "web-5d8f"))),
        ready(pod("web-2", "spot-1", owner=("ReplicaSet", "web-5d8f"))),
    ]
    result = planned(cluster(nodes, pods), config(min_replicas=2))
    assert result.drained == ("od-2",)
    why = result.reasons["od-1"]
    assert (why.kind, why.pod) == (Kind.TOO_FEW_REPLICAS, "shop/solo")
    assert "1 Ready replica(s), fewer than disruption.min_replicas (2)" in why.detail


def test_scope_and_jobs_hold_with_their_own_kinds() -> None:
    nodes = [node("od-1"), node("od-2"), node("od-3"), node("spot-1", spot=True)]
    job = Pod.from_api(
        {
            "metadata": {
                "name": "report",
                "namespace": "shop",
                "ownerReferences": [{"kind": "Job", "name": "report", "apiVersion": "batch/v1", "controller": True}],
            },
            "spec": {"nodeName": "od-3", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
    )
    pods = [pod("a", "od-1", ns="payments"), pod("b", "od-2"), job]
    result = planned(cluster(nodes, pods), config(excluded_namespaces=["payments"]))
    assert result.drained == ("od-2",)
    assert result.reasons["od-1"].kind is Kind.OUT_OF_SCOPE
    assert result.reasons["od-3"].kind is Kind.JOB_RUNNING
    groups = {r["kind"] for r in result.summary.top_reasons}
    assert groups == {"out-of-scope", "job-running"}
    waited = planned(cluster(nodes, pods), config(excluded_namespaces=["payments"], jobs="wait"))
    assert set(waited.drained) == {"od-2", "od-3"}
    assert [m.pod for m in waited.moves if m.source == "od-3"] == []  # the Job pod finishes in place


def young_spot(name: str, seconds: float, **kw: Any) -> Any:
    return replace(node(name, spot=True, **kw), creation_timestamp=stamp(seconds))


def test_a_young_spot_node_is_not_a_target() -> None:
    nodes = [node("od-1"), young_spot("spot-new", 60), young_spot("spot-old", 3600, cpu="1", memory="1Gi")]
    pods = [pod("big", "od-1", cpu="2")]
    assert planned(cluster(nodes, pods), Config()).drained == ("od-1",)  # fits spot-new only
    result = planned(cluster(nodes, pods), config(min_target_age="5m"))
    assert result.drained == ()
    assert result.summary.spot_too_young == 1
    assert "1 spot node(s) are younger than disruption.min_target_age" in render_table(result)


def test_the_run_loops_planner_answer_carries_what_the_controls_held() -> None:
    snap = three_drainable()
    cfg = config(budgets=[{"nodes": "1"}], min_target_age="1s")
    planned_nodes = plan_nodes(snap, cfg, now=NOW)
    assert len(planned_nodes.drains) == 1
    assert {control_of(r) for r in planned_nodes.held.values()} == {"budget"} and len(planned_nodes.held) == 2
    d = decide(snap, planned_nodes, cfg)
    assert dict(d.held) == planned_nodes.held
    assert sorted(why for _, why in d.skipped) == ["budget", "budget"]
    assert [nm.node for nm in d.drains] == [nm.node for nm in planned_nodes.drains]


def test_every_control_kind_has_a_metric_label() -> None:
    from rescheduler.metrics import HELD_BACK_CONTROLS

    assert set(CONTROLS.values()) | {"min-target-age"} == set(HELD_BACK_CONTROLS)


def test_a_tainted_node_counts_as_draining_and_a_drained_one_does_not() -> None:
    snap = three_drainable()
    mark = Taint("spotshift.io/draining", TAINT_VALUE, "PreferNoSchedule")
    tainted = replace(snap["od-2"].node, taints=(mark,))
    done = replace(snap["od-3"].node, taints=(mark,), annotations={STATE_ANNOTATION: "drained"})
    nodes = [snap["od-1"].node, tainted, done, snap["spot-1"].node]
    pods = [p for info in snap for p in info.pods]
    result = planned(cluster(nodes, pods), config(budgets=[{"nodes": "1"}]))
    assert result.summary.disruption_budget.draining == 1
    assert result.drained == ()


def test_the_html_page_and_the_table_group_held_nodes_by_control() -> None:
    from rescheduler.output.page import reason_groups

    result = planned(three_drainable(), config(budgets=[{"nodes": "1"}]))
    (group,) = reason_groups(result)
    assert group["kind"] == "disruption-budget" and len(group["nodes"]) == 2
    table = render_table(result)
    assert "Disruption budget 1: at most 1 node(s) draining at once (0 draining now)." in table
    assert "disruption budget: enough nodes draining at once (disruption.budgets)  2" in table
