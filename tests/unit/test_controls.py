"""The operator's controls (``disruption`` settings): validation, budgets and windows, ages, ready replicas,
scoping and Jobs as movability rules (shared/controls.py, shared/movable.py)."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

import pytest

from shared.config import Config, ConfigError, DisruptionConfig, parse_config
from shared.config_values import Budget
from shared.controls import (
    allowance,
    format_time,
    parse_time,
    pod_too_young,
    ready_replicas,
    target_too_young,
    too_few_replicas,
)
from shared.movable import (
    BLOCK_JOB,
    BLOCK_NAMESPACE_SCOPE,
    BLOCK_SELECTOR_SCOPE,
    MOVE,
    SKIP_JOB_WAIT,
    SKIP_TERMINAL,
    Outcome,
    is_job_pod,
    movability,
)
from tests.builders import node, owner, pod

NOW = datetime.datetime(2026, 5, 4, 12, 0, tzinfo=datetime.UTC).timestamp()
HOUR = 3600.0


def stamp(seconds_ago: float) -> str:
    return datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def disruption(**fields: Any) -> DisruptionConfig:
    return parse_config({"disruption": fields}).disruption


def config(**fields: Any) -> Config:
    return parse_config({"disruption": fields})


def error(data: Any) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    return str(e.value)


# --- validation -------------------------------------------------------------------------------------------


def test_defaults_change_nothing_but_jobs() -> None:
    d = Config().disruption
    assert d.budgets == () and d.min_pod_age == 0 and d.min_target_age == 0 and d.min_replicas == 0
    assert d.namespaces == () and d.excluded_namespaces == () and d.pod_selector is None
    assert d.jobs == "block"


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(
            {"budgets": [{"nodes": "101%"}]},
            "config field disruption.budgets[0].nodes: must be a node count like 3 or a percentage of on-demand "
            "nodes like 20%, got '101%'.",
            id="percent-above-100",
        ),
        pytest.param(
            {"budgets": [{"nodes": -1}]},
            "config field disruption.budgets[0].nodes: must be a node count like 3 or a percentage of on-demand "
            "nodes like 20%, got -1.",
            id="negative-count",
        ),
        pytest.param(
            {"budgets": [{"schedule": "@daily", "duration": "1h"}]},
            "config field disruption.budgets[0].nodes: must be a node count like 3 or a percentage of on-demand "
            "nodes like 20%, got null.",
            id="nodes-missing",
        ),
        pytest.param(
            {"budgets": [{"nodes": "1", "duration": "8h"}]},
            "config field disruption.budgets[0].schedule: must be set together with duration, got null.",
            id="duration-without-schedule",
        ),
        pytest.param(
            {"budgets": [{"nodes": "1", "schedule": "0 22 * * *", "duration": "0s"}]},
            "config field disruption.budgets[0].duration: must be a positive duration like 30s, 5m or 1h30m, got '0s'.",
            id="zero-duration",
        ),
        pytest.param(
            {"budgets": [{"nodes": "1", "schedule": "0 25 * * *", "duration": "1h"}]},
            "config field disruption.budgets[0].schedule: must be a cron schedule like '0 22 * * mon-fri' "
            "(hour 25 is outside 0-23), got '0 25 * * *'.",
            id="hour-out-of-range",
        ),
        pytest.param(
            {"budgets": [{"nodes": "1", "schedule": "0 0 30 2 *", "duration": "1h"}]},
            "config field disruption.budgets[0].schedule: must be a cron schedule that matches some day (this "
            "one never does), got '0 0 30 2 *'.",
            id="never-matches",
        ),
        pytest.param(
            {"budgets": [{"nodes": "1", "window": "night"}]},
            "config field disruption.budgets[0].window: is not a budget field (one of nodes, schedule, duration).",
            id="unknown-budget-field",
        ),
        pytest.param(
            {"time_zone": "Europe/Atlantis"},
            "config field disruption.time_zone: must be an IANA time zone name like UTC or Europe/Berlin, "
            "got 'Europe/Atlantis'.",
            id="unknown-zone",
        ),
        pytest.param(
            {"jobs": "kill"},
            "config field disruption.jobs: must be one of block, wait, evict, got 'kill'.",
            id="unknown-jobs-mode",
        ),
        pytest.param(
            {"namespaces": ["shop"], "excluded_namespaces": ["shop"]},
            "config field disruption.excluded_namespaces: must not name a namespace that disruption.namespaces "
            "includes (shop), got a list.",
            id="namespace-included-and-excluded",
        ),
        pytest.param(
            {"min_replicas": -1},
            "config field disruption.min_replicas: must be an integer of at least 0, got -1.",
            id="negative-min-replicas",
        ),
        pytest.param(
            {"min_pod_age": "soon"},
            "config field disruption.min_pod_age: must be a duration of zero or more like 30s, 5m or 1h30m, "
            "got 'soon'.",
            id="bad-age",
        ),
    ],
)
def test_bad_settings_fail_with_one_sentence_naming_the_field(data: dict[str, Any], want: str) -> None:
    assert error({"disruption": data}) == want


def test_budgets_come_from_the_environment_as_a_yaml_flow_list() -> None:
    env = {"SPOTSHIFT_DISRUPTION_BUDGETS": '[{nodes: "10%", schedule: "0 22 * * *", duration: 8h}]'}
    (b,) = parse_config({}, env).disruption.budgets
    assert (b.percent, b.nodes, b.duration) == (10, None, 8 * HOUR)
    assert b.schedule is not None and b.schedule.text == "0 22 * * *"


def test_a_selector_setting_of_an_empty_string_selects_every_pod() -> None:
    assert disruption(pod_selector="").pod_selector is None


# --- budgets ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "on_demand", "limit"),
    [
        pytest.param("0%", 10, 0, id="zero-percent-is-none"),
        pytest.param("100%", 7, 7, id="hundred-percent-is-all"),
        pytest.param("10%", 5, 1, id="ten-percent-of-five-rounds-up-to-one"),
        pytest.param("25%", 8, 2, id="exact-percent-needs-no-rounding"),
        pytest.param("34%", 3, 2, id="a-fraction-above-one-rounds-up"),
        pytest.param("50%", 0, 0, id="no-nodes-no-drains"),
        pytest.param("3", 2, 3, id="a-count-is-not-capped-by-the-nodes"),
        pytest.param("0", 9, 0, id="zero-count"),
    ],
)
def test_percentages_round_up_like_karpenters_budgets(nodes: str, on_demand: int, limit: int) -> None:
    a = allowance(disruption(budgets=[{"nodes": nodes}]), on_demand=on_demand, in_progress=0, now=NOW)
    assert (a.limit, a.closed) == (limit, False)


def test_without_budgets_nothing_is_limited() -> None:
    a = allowance(DisruptionConfig(), on_demand=10, in_progress=3, now=NOW)
    assert a.limit is None and a.more is None and not a.closed


def test_drains_in_progress_count_against_the_budget() -> None:
    d = disruption(budgets=[{"nodes": "2"}])
    assert allowance(d, on_demand=9, in_progress=1, now=NOW).more == 1
    assert allowance(d, on_demand=9, in_progress=3, now=NOW).more == 0


def test_the_most_restrictive_budget_in_force_applies() -> None:
    d = disruption(
        budgets=[{"nodes": "50%"}, {"nodes": "1", "schedule": "0 12 * * *", "duration": "1h"}],
    )
    inside = allowance(d, on_demand=10, in_progress=0, now=NOW)  # 12:00 UTC: the window is open
    outside = allowance(d, on_demand=10, in_progress=0, now=NOW + HOUR)
    assert (inside.limit, inside.budget) == (1, "1")
    assert (outside.limit, outside.budget, outside.closed) == (5, "50%", False)


def test_outside_every_window_nothing_drains_until_the_next_opens() -> None:
    d = disruption(
        budgets=[{"nodes": "3", "schedule": "0 22 * * *", "duration": "8h"}],
        time_zone="Europe/Berlin",
    )
    a = allowance(d, on_demand=10, in_progress=0, now=NOW)  # 14:00 in Berlin
    assert a.closed and a.more == 0
    assert a.closed_until is not None
    assert format_time(a.closed_until, d.time_zone) == "2026-05-04T22:00:00+02:00 (Europe/Berlin)"


@pytest.mark.parametrize(
    ("offset", "closed"),
    [
        pytest.param(-1.0, True, id="a-second-before-the-start"),
        pytest.param(0.0, False, id="at-the-start"),
        pytest.param(HOUR - 1, False, id="a-second-before-the-end"),
        pytest.param(HOUR, True, id="at-the-end"),
    ],
)
def test_window_edges_start_inclusive_end_exclusive(offset: float, closed: bool) -> None:
    d = disruption(budgets=[{"nodes": "1", "schedule": "0 12 * * *", "duration": "1h"}])
    assert allowance(d, on_demand=4, in_progress=0, now=NOW + offset).closed is closed


def test_a_budget_limit_is_its_count_or_percentage() -> None:
    assert Budget(nodes=2).limit(100) == 2 and Budget(nodes=2).text == "2"
    assert Budget(percent=1).limit(101) == 2 and Budget(percent=1).text == "1%"


# --- ages -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "young"),
    [
        pytest.param(599.0, True, id="younger-than-the-limit-stays"),
        pytest.param(600.0, False, id="exactly-the-limit-may-move"),
        pytest.param(601.0, False, id="older-may-move"),
    ],
)
def test_pod_age_boundary(age: float, young: bool) -> None:
    p = pod("web")
    p = replace(p, creation_timestamp=stamp(age))
    assert pod_too_young(p, 600.0, NOW) is young


def test_a_pod_without_a_creation_time_is_not_held_and_zero_disables_the_check() -> None:
    assert not pod_too_young(pod("web"), 600.0, NOW)
    assert not pod_too_young(replace(pod("web"), creation_timestamp=stamp(1)), 0.0, NOW)


def spot_node(created_ago: float, ready_ago: float | None) -> Any:
    conditions = [{"type": "Ready", "status": "True"}]
    if ready_ago is not None:
        conditions[0]["lastTransitionTime"] = stamp(ready_ago)
    return replace(node("spot-1", conditions=conditions), creation_timestamp=stamp(created_ago))


@pytest.mark.parametrize(
    ("created", "ready", "young"),
    [
        pytest.param(3600.0, 3600.0, False, id="old-and-long-ready"),
        pytest.param(299.0, None, True, id="created-too-recently"),
        pytest.param(300.0, 300.0, False, id="exactly-the-limit"),
        pytest.param(3600.0, 299.0, True, id="ready-too-recently"),
        pytest.param(3600.0, None, False, id="no-ready-transition-time"),
    ],
)
def test_target_age_counts_creation_and_the_ready_transition(created: float, ready: float | None, young: bool) -> None:
    assert target_too_young(spot_node(created, ready), 300.0, NOW) is young


def test_ready_since_is_parsed_from_the_ready_conditions_transition_time() -> None:
    n = node("n", conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-05-04T11:00:00Z"}])
    assert parse_time(n.ready_since) == NOW - HOUR


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("2026-05-04T12:00:00Z", NOW, id="utc"),
        pytest.param("2026-05-04T14:00:00+02:00", NOW, id="offset"),
        pytest.param("2026-05-04T12:00:00.5Z", NOW + 0.5, id="fraction"),
        pytest.param("", None, id="empty"),
        pytest.param("yesterday", None, id="unreadable"),
    ],
)
def test_timestamps(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds


# --- ready replicas ---------------------------------------------------------------------------------------

READY = [{"type": "Ready", "status": "True"}]


def replica(name: str, *, ready: bool = True, rs: str = "web-5d8f", **kw: Any) -> Any:
    return pod(
        name,
        node_name="n1",
        labels={"pod-template-hash": "5d8f"},
        owners=[owner("ReplicaSet", rs)],
        conditions=READY if ready else [{"type": "Ready", "status": "False"}],
        **kw,
    )


def test_ready_replicas_fold_a_deployments_replicasets_and_count_only_ready_running_pods() -> None:
    pods = [
        replica("a"),
        replica("b"),
        replica("c", ready=False),
        replica("d", terminating=True),
        replica("e", phase="Pending"),
        pod("bare", node_name="n1", conditions=READY),
    ]
    assert ready_replicas(pods) == {"default/Deployment/web": 2}


@pytest.mark.parametrize(
    ("ready", "minimum", "held"),
    [
        pytest.param(1, 2, 1, id="fewer-than-the-minimum-stays"),
        pytest.param(2, 2, None, id="exactly-the-minimum-may-move"),
        pytest.param(0, 0, None, id="zero-disables-the-check"),
    ],
)
def test_min_replicas_boundary(ready: int, minimum: int, held: int | None) -> None:
    counts = {"default/Deployment/web": ready}
    assert too_few_replicas(replica("a"), counts, minimum) == held


def test_a_pod_without_a_controller_is_left_to_the_movability_rules() -> None:
    assert too_few_replicas(pod("bare"), {}, 5) is None


# --- scope and Jobs, as movability rules ------------------------------------------------------------------

JOB = owner("Job", "report-1", api_version="batch/v1")


def rs_pod(name: str = "web", **kw: Any) -> Any:
    return pod(name, owners=[owner("ReplicaSet", "web-5d8f")], node_name="od-1", **kw)


@pytest.mark.parametrize(
    ("fields", "p", "want"),
    [
        pytest.param({}, rs_pod(namespace="shop"), MOVE, id="no-scope-moves-everything"),
        pytest.param({"namespaces": ["shop"]}, rs_pod(namespace="shop"), MOVE, id="included-namespace-moves"),
        pytest.param(
            {"namespaces": ["shop"]}, rs_pod(namespace="blog"), BLOCK_NAMESPACE_SCOPE, id="other-namespace-blocks"
        ),
        pytest.param(
            {"excluded_namespaces": ["payments"]},
            rs_pod(namespace="payments"),
            BLOCK_NAMESPACE_SCOPE,
            id="excluded-namespace-blocks",
        ),
        pytest.param(
            {"pod_selector": "tier!=critical"},
            rs_pod(labels={"tier": "critical"}),
            BLOCK_SELECTOR_SCOPE,
            id="selector-mismatch-blocks",
        ),
        pytest.param({"pod_selector": "tier!=critical"}, rs_pod(labels={"tier": "web"}), MOVE, id="selector-match"),
    ],
)
def test_scope(fields: dict[str, Any], p: Any, want: Any) -> None:
    m = movability(p, config(**fields))
    assert m == MOVE if want is MOVE else (m.outcome, m.reason) == (Outcome.BLOCK, want)


def test_scope_does_not_make_daemonset_pods_block() -> None:
    ds = pod("agent", owners=[owner("DaemonSet", "agent")], namespace="kube-system", node_name="od-1")
    assert movability(ds, config(namespaces=["shop"])).outcome is Outcome.SKIP


@pytest.mark.parametrize(
    ("mode", "outcome", "reason"),
    [
        pytest.param("block", Outcome.BLOCK, BLOCK_JOB, id="block-by-default"),
        pytest.param("wait", Outcome.SKIP, SKIP_JOB_WAIT, id="wait-leaves-it-to-finish"),
        pytest.param("evict", Outcome.MOVE, "", id="evict-moves-it-as-before"),
    ],
)
def test_running_job_pods(mode: str, outcome: Outcome, reason: str) -> None:
    m = movability(pod("report-1-abc", owners=[JOB], node_name="od-1"), config(jobs=mode))
    assert (m.outcome, m.reason) == (outcome, reason)


def test_finished_job_pods_never_block() -> None:
    done = pod("report-1-abc", owners=[JOB], node_name="od-1", phase="Succeeded")
    assert movability(done, Config()).reason == SKIP_TERMINAL


def test_job_protection_is_the_default_and_safe_to_evict_true_lifts_it() -> None:
    running = pod("report-1-abc", owners=[JOB], node_name="od-1")
    assert movability(running, Config()).reason == BLOCK_JOB
    allowed = pod(
        "report-1-abc",
        owners=[JOB],
        node_name="od-1",
        annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"},
    )
    assert movability(allowed, Config()).moves


@pytest.mark.parametrize(
    ("ref", "job"),
    [
        pytest.param(owner("Job", "j", api_version="batch/v1"), True, id="batch-v1"),
        pytest.param(owner("Job", "j", api_version="batch/v1beta1", controller=False), True, id="any-owner-ref"),
        pytest.param(owner("Job", "j", api_version="example.com/v1"), False, id="another-groups-job-kind"),
        pytest.param(owner("CronJob", "j", api_version="batch/v1"), False, id="cronjob-owns-jobs-not-pods"),
    ],
)
def test_what_counts_as_a_job_pod(ref: dict[str, Any], job: bool) -> None:
    assert is_job_pod(pod("p", owners=[ref])) is job
