"""The operator's controls where the run loop acts: Job pods waited for by the drainer (``disruption.jobs: wait``),
and nodes held back by a control reported once per change as an Event and counted in a gauge."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from rescheduler.cluster.drain import DrainOutcome
from rescheduler.plan.cycle import Decision
from rescheduler.plan.drain_marks import BACKOFF_UNTIL_ANNOTATION
from rescheduler.plan.labels import DrainLabel
from rescheduler.plan.stay_reasons import Kind, StayReason
from rescheduler.run import Rescheduler, RunOptions, default_planner
from shared.config import Config, parse_config
from tests.support.fake_api import pod
from tests.unit.test_drain import KEY, Cluster, populate, taints
from tests.unit.test_run import cluster as run_cluster
from tests.unit.test_run import fast

NOW = 1_777_777_777.0  # 2026-05-03T03:09:37Z


def job_pod(name: str, node_name: str) -> dict[str, Any]:
    p = pod(name, node_name, app="report", owner=None)
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "report", "uid": "uid-job", "controller": True}
    ]
    return p


def jobs_config(mode: str, timeout: str = "30s") -> Config:
    return parse_config({"disruption": {"jobs": mode, "job_timeout": timeout}})


def with_job(mode: str, timeout: str = "30s") -> tuple[Cluster, list[str]]:
    c = Cluster(jobs_config(mode, timeout))
    c.server.put("pods", job_pod("report-abc", "od-1"))
    keys = populate(c, pods_on_od=1, budget=None)
    return c, keys


def test_under_wait_the_node_is_marked_the_job_finishes_then_the_rest_is_evicted() -> None:
    c, keys = with_job("wait")
    try:
        c.replicate_to(lambda p: "spot-1")
        finished = threading.Event()

        def waiting() -> bool:
            with c.server.cond:
                return any(e["reason"] == "SpotshiftWaitingForJobs" for e in c.server.store["events"].values())

        def finish_the_job_once_the_drain_waits_for_it() -> None:
            # What the kubelet would do when the Job's container exits: phase Succeeded, through the API.
            if c.state.wait_until(waiting, 10, c.stop):
                assert any(t["key"] == KEY for t in taints(c, "od-1")), "the node is marked while the Job runs"
                assert c.server.evictions == [], "nothing is evicted while the Job runs"
                done = job_pod("report-abc", "od-1")
                done["status"]["phase"] = "Succeeded"
                c.server.put("pods", done)
                finished.set()

        helper = threading.Thread(target=finish_the_job_once_the_drain_waits_for_it)
        helper.start()
        result = c.drainer.drain("od-1", keys)
        helper.join(10)
        assert finished.is_set()
        assert result.outcome == DrainOutcome.SUCCEEDED, result.message
        assert [k for k, _ in c.server.evictions] == keys  # the Job pod was never evicted
    finally:
        c.close()


def test_under_wait_a_job_that_outlives_the_timeout_rolls_back_and_backs_off() -> None:
    c, keys = with_job("wait", timeout="1s")
    try:
        result = c.drainer.drain("od-1", keys)
        assert (result.outcome, result.reason) == (DrainOutcome.FAILED, DrainLabel.JOB_TIMEOUT)
        assert "default/report-abc" in result.message
        assert c.server.evictions == []
        assert taints(c, "od-1") == []
        assert BACKOFF_UNTIL_ANNOTATION in c.node_obj("od-1")["metadata"]["annotations"]
        assert c.metrics.registry.get_sample_value(
            "spotshift_rescheduler_drains_failed_total", {"reason": "job-timeout"}
        )
    finally:
        c.close()


def test_under_the_default_a_running_job_pod_keeps_the_drain_from_starting() -> None:
    c, keys = with_job("block")
    try:
        result = c.drainer.drain("od-1", keys)
        assert (result.outcome, result.reason) == (DrainOutcome.SKIPPED, DrainLabel.PLAN_STALE)
        assert c.server.evictions == [] and taints(c, "od-1") == []
    finally:
        c.close()


# --- the run loop: gauge and Events -------------------------------------------------------------------------


def loop_with(settings: dict[str, Any]) -> tuple[Any, Rescheduler]:
    server = run_cluster()
    base = fast()
    config = replace(base, disruption=parse_config({"disruption": settings}).disruption)
    r = Rescheduler(
        server,
        config,
        RunOptions(identity="me", sync_timeout=5),
        plan=default_planner(None, wall=lambda: NOW),
    )
    r.start_informers()
    assert r.state.wait_synced(5)
    return server, r


def held_events(server: Any) -> list[dict[str, Any]]:
    return [e for e in server.store["events"].values() if e["reason"] == "SpotshiftDrainHeldBack"]


def test_a_closed_window_holds_the_node_counts_it_and_says_so_once() -> None:
    server, r = loop_with({"budgets": [{"nodes": "1", "schedule": "0 22 * * *", "duration": "1h"}]})
    try:
        r.cycle()
        r.cycle()
    finally:
        r.stop_informers()
        server.close()
    assert r.results == [] and server.evictions == []
    (event,) = held_events(server)
    assert event["involvedObject"]["name"] == "od-1" and event["count"] == 1
    assert event["message"] == "Held back by drain-window: outside drain window until 2026-05-03T22:00:00+00:00 (UTC)"
    gauge = r.metrics.registry.get_sample_value
    assert gauge("spotshift_rescheduler_nodes_held_back", {"control": "drain-window"}) == 1
    assert gauge("spotshift_rescheduler_nodes_held_back", {"control": "budget"}) == 0


def test_an_event_is_recorded_again_only_when_the_control_changes() -> None:
    server, r = loop_with({})
    window = StayReason(Kind.OUTSIDE_DRAIN_WINDOW, "outside drain window until later")
    budget = StayReason(Kind.DISRUPTION_BUDGET, "disruption budget 1 allows 1 node(s) draining at once")

    def decision(held: dict[str, StayReason]) -> Decision:
        return Decision((), (), {}, held)

    try:
        for held in ({"od-1": window}, {"od-1": window}, {"od-1": budget}, {}, {"od-1": budget}):
            r.plans._report_held(decision(held))
    finally:
        r.stop_informers()
        server.close()
    messages = sorted(e["message"] for e in held_events(server))
    assert messages == [
        "Held back by budget: disruption budget 1 allows 1 node(s) draining at once",
        "Held back by drain-window: outside drain window until later",
    ]
    (again,) = [e for e in held_events(server) if "budget" in e["message"]]
    assert again["count"] == 2  # the same words within ten minutes bump the one Event, as client-go does
