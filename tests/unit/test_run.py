"""The run loop and its command line, over the fake API server; plus the small parts it is built from."""

from __future__ import annotations

import argparse
import io
import json
import logging
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rescheduler.cluster.events import EventRecorder, Ref
from rescheduler.logs import JsonFormatter, fields
from rescheduler.metrics import Metrics, MetricsServer
from rescheduler.plan.cycle import PlannedCycle
from rescheduler.plan.drain_marks import STATE_ANNOTATION
from rescheduler.plan.records import Plan, Summary
from rescheduler.run import Rescheduler, RunOptions, add_run_arguments, config_from_args
from shared.config import Config, ConfigError, load_config
from shared.kube.api import (
    ApiError,
    Conflict,
    Gone,
    Kube,
    NotFound,
    ServerError,
    TooManyRequests,
    error_for,
)
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, STRICTEST, Switches, for_version
from tests.support.fake_api import FakeApiServer, namespace, node, pdb, pod

# --- the command line ------------------------------------------------------------------------------------------


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(list(argv))


def test_pusher_flags_override_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("rescheduler:\n  housekeeping_interval: 30s\n  node_drain_delay: 1m\n")
    env = {"SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY": "2m"}
    config = config_from_args(
        args(
            f"--config={path}",
            "--housekeeping-interval=5s",
            "--pod-eviction-timeout=1m",
            "--max-graceful-termination=45s",
            "--listen-address=127.0.0.1:9999",
            "--delete-non-replicated-pods",
            "--dry-run",
        ),
        env,
    )
    r = config.rescheduler
    assert (r.housekeeping_interval, r.node_drain_delay, r.pod_eviction_timeout) == (5.0, 120.0, 60.0)
    assert (r.max_graceful_termination, r.metrics_bind, r.dry_run) == (45.0, "127.0.0.1:9999", True)
    assert config.movability.delete_non_replicated_pods is True


def test_a_bad_flag_value_is_one_sentence_naming_the_flag() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_args(args("--node-drain-delay=soon"), {})
    assert str(e.value) == (
        "config field rescheduler.node_drain_delay (from --node-drain-delay): must be a duration of zero or more "
        "like 30s, 5m or 1h30m, got 'soon'."
    )


def test_node_label_flags_set_the_classes_and_are_validated_together() -> None:
    config = config_from_args(
        args("--spot-node-label=node-role.kubernetes.io/spot-worker", "--on-demand-node-label=lifecycle=normal"), {}
    )
    assert [s.text for s in config.node_classes.spot_selectors] == ["node-role.kubernetes.io/spot-worker"]
    assert [s.text for s in config.node_classes.on_demand_selectors] == ["lifecycle=normal"]
    with pytest.raises(ConfigError, match="--on-demand-node-label"):
        config_from_args(args("--on-demand-node-label=karpenter.sh/capacity-type=spot"), {})


def test_without_flags_the_configuration_is_the_files() -> None:
    assert config_from_args(args(), {}) == load_config(None, {})


# --- the loop over the fake API server ---------------------------------------------------------------------------


def cluster() -> FakeApiServer:
    server = FakeApiServer(eviction_version="v1beta1", pdb_version="v1beta1")
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("od-1", cpu="2"))
    server.put("nodes", node("spot-1", spot=True, cpu="8"))
    for i in range(2):
        server.put("pods", pod(f"web-{i}", "od-1", app=f"web{i}", owner=f"rs-{i}"))

    def replace(evicted: dict[str, Any]) -> None:
        new = pod(evicted["metadata"]["name"] + "-new", "spot-1", app=evicted["metadata"]["labels"]["app"])
        new["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
        server.put("pods", new)

    server.on_evict = replace
    return server


def fast(config_args: tuple[str, ...] = ()) -> Any:
    return config_from_args(
        args("--max-graceful-termination=2s", "--replacement-timeout=5s", "--node-drain-delay=0s", *config_args), {}
    )


def test_one_cycle_drains_the_node_with_the_lease_held_and_released() -> None:
    server = cluster()
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert [(res.node, res.outcome) for res in r.results] == [("od-1", "succeeded")]
    od = server.get_obj("nodes", "od-1")
    assert od["metadata"]["annotations"][STATE_ANNOTATION] == "drained"
    assert {key for key, _ in server.evictions} == {"default/web-0", "default/web-1"}
    assert server.evictions[0][1]["apiVersion"] == "policy/v1beta1"
    lease = server.get_obj("leases", "spotshift/spotshift-rescheduler")
    assert lease is not None and lease["spec"].get("holderIdentity") == "", "released on exit"
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_drains_succeeded_total") == 1
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_nodes", {"class": "spot"}) == 1


def test_a_pod_whose_volume_is_pinned_to_a_zone_without_spot_keeps_its_node_under_run() -> None:
    # The run loop watches PersistentVolumes and claims, so the volume check applies as it does under plan.
    zone = "topology.kubernetes.io/zone"
    server = FakeApiServer()
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("od-1", cpu="2", labels={zone: "a"}))
    server.put("nodes", node("spot-1", spot=True, cpu="8", labels={zone: "b"}))
    db = pod(
        "db-0", "od-1", app="db", owner="sts-db", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "d-0"}}]
    )
    server.put("pods", db)
    server.put(
        "persistentvolumes",
        {
            "metadata": {"name": "pv-d-0", "labels": {zone: "a"}},
            "spec": {
                "claimRef": {"namespace": "default", "name": "d-0"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": zone, "operator": "In", "values": ["a"]}]}]
                    }
                },
            },
        },
    )
    server.put(
        "persistentvolumeclaims",
        {"metadata": {"name": "d-0", "namespace": "default"}, "spec": {"volumeName": "pv-d-0"}},
    )
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
        snap = r.state.snapshot()
    finally:
        server.close()
    assert list(snap.pvs) == ["pv-d-0"] and list(snap.pvcs) == ["default/d-0"]
    assert r.results == [] and server.evictions == []
    # Without the volume objects the same pod would have moved: the check is what keeps it.
    server2 = FakeApiServer()
    server2.put("namespaces", namespace("default"))
    server2.put("namespaces", namespace("spotshift"))
    server2.put("nodes", node("od-1", cpu="2", labels={zone: "a"}))
    server2.put("nodes", node("spot-1", spot=True, cpu="8", labels={zone: "b"}))
    server2.put("pods", db)
    r2 = Rescheduler(server2, fast(("--dry-run",)), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r2.run() == 0
    finally:
        server2.close()
    assert [res.node for res in r2.results] == ["od-1"]


def nothing_planned(snapshot: ClusterSnapshot, config: Config, exclude: Any) -> PlannedCycle:
    """A plan that empties no node (a stand-in planner for tests of the loop itself)."""
    return PlannedCycle(Plan((), (), {}, Summary()), (), {})


@pytest.mark.parametrize(
    ("extra", "pending"),
    [
        pytest.param({}, 1, id="an-unschedulable-pod-is-counted"),
        pytest.param({"schedulingGates": [{"name": "example.com/quota"}]}, 0, id="a-gated-pod-is-not"),
    ],
)
def test_a_waiting_pod_is_planned_for_not_a_pause(extra: dict[str, Any], pending: int) -> None:
    """A Pending pod the scheduler could not place is counted and the loop plans (the planner places it first); one
    held by scheduling gates is not waiting for room at all."""
    server = cluster()
    server.put("pods", pod("stuck", phase="Pending", **extra))
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert [res.node for res in r.results] == ["od-1"], "spot-1 has room for the waiting pod and od-1's pods"
    assert r.plans.last_plan is not None and r.plans.last_plan.summary.safe_to_act is True
    assert r.metrics.registry.get_sample_value("spotshift_rescheduler_pods_pending") == pending


def counting_planner(calls: list[int]) -> Any:
    def plan(snapshot: ClusterSnapshot, config: Config, exclude: Any) -> PlannedCycle:
        calls.append(1)
        return nothing_planned(snapshot, config, exclude)

    return plan


def synced(config: Config, calls: list[int]) -> tuple[FakeApiServer, Rescheduler]:
    server = cluster()
    r = Rescheduler(server, config, RunOptions(identity="me", sync_timeout=5), plan=counting_planner(calls))
    r.start_informers()
    assert r.state.wait_synced(5)
    return server, r


def touch_spot_node(server: FakeApiServer, r: Rescheduler) -> None:
    """A label set on spot-1 through the API, and its watch event applied to the loop's state."""
    before = r.state.version
    obj = server.get_obj("nodes", "spot-1")
    assert obj is not None
    obj["metadata"]["labels"]["touched"] = "yes"
    server.put("nodes", obj)
    assert r.state.wait_until(lambda: r.state.version > before, 5)


def test_a_cluster_that_did_not_change_is_not_planned_again_until_a_watch_event_changes_it() -> None:
    calls: list[int] = []
    server, r = synced(fast(), calls)
    try:
        r._cycle()
        r._cycle()
        assert calls == [1], "nothing changed between the cycles: the plan is the last one"
        assert r.plans.last_planned is not None and r.plans.planned_from is not None
        touch_spot_node(server, r)
        r._cycle()
        assert calls == [1, 1], "a watch event changed the cluster: planned again"
    finally:
        r.stop_informers()
        server.close()


def test_a_reused_plan_keeps_its_decision_until_a_watch_event_changes_the_cluster() -> None:
    calls: list[int] = []
    server, r = synced(fast(), calls)
    try:
        r._cycle()
        first = r.plans.last_decision
        r._cycle()
        assert r.plans.reused and r.plans.last_decision is first, "the same plan, state and claims: not decided again"
        touch_spot_node(server, r)
        r._cycle()
        assert not r.plans.reused and r.plans.last_decision is not first, "planned again, decided again"
    finally:
        r.stop_informers()
        server.close()


def test_a_cycle_after_one_that_reused_its_plan_takes_the_same_snapshot_copying_no_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = cluster()  # the planner's own moves, in a dry run: nothing starts, so the plan can be reused
    r = Rescheduler(server, fast(("--dry-run", "--leader-elect=false")), RunOptions(identity="me", sync_timeout=5))
    r.start_informers()
    assert r.state.wait_synced(5)
    seen: list[ClusterSnapshot] = []
    project = r.queue.project
    monkeypatch.setattr(r.queue, "project", lambda snapshot: (seen.append(snapshot), project(snapshot))[1])
    try:
        for _ in range(4):
            r._cycle()
        planned, idle = seen[0], seen[1:]
        assert r.plans.reused and planned.version > 0, "the first cycle planned, and its plan changed its snapshot"
        assert idle[0] is not planned, "a snapshot a plan changed is not handed out again"
        assert idle[1] is idle[0] and idle[2] is idle[0], "cycles that reuse their plan share one snapshot"
        touch_spot_node(server, r)
        r._cycle()
        assert seen[-1] is not idle[0] and not r.plans.reused, "a watch event: a fresh snapshot, planned again"
    finally:
        r.stop_informers()
        server.close()


def test_a_dry_run_checks_and_logs_a_drain_once_while_the_plan_is_reused() -> None:
    server = cluster()
    r = Rescheduler(server, fast(("--dry-run", "--leader-elect=false")), RunOptions(identity="me", sync_timeout=5))
    r.start_informers()
    try:
        assert r.state.wait_synced(5)

        def budget_lists() -> int:
            return sum(1 for m, path, _ in server.requests if m == "GET" and path.endswith("/poddisruptionbudgets"))

        r._cycle()
        assert [res.node for res in r.results] == ["od-1"] and not r.plans.reused
        lists = budget_lists()
        assert lists > 0, "the would-be drain read its budgets live"
        r._cycle()
        assert r.plans.reused and [res.node for res in r.results] == ["od-1"], "not checked and logged again"
        assert budget_lists() == lists
        before = r.state.version
        server.put("pods", pod("web-9", "od-1", app="web9", owner="rs-9"))
        assert r.state.wait_until(lambda: r.state.version > before, 5)
        r._cycle()
        assert not r.plans.reused and [res.node for res in r.results] == ["od-1", "od-1"], "a new plan: checked again"
    finally:
        r.stop_informers()
        server.close()


def test_a_dry_run_shows_the_drains_a_real_run_would_start_in_the_cycle() -> None:
    server = cluster()
    server.put("nodes", node("od-2", cpu="2"))
    server.put("pods", pod("api-0", "od-2", app="api", owner="rs-api"))
    config = fast(("--dry-run", "--leader-elect=false", "--max-nodes-per-cycle=1"))
    r = Rescheduler(server, config, RunOptions(identity="me", sync_timeout=5))
    r.start_informers()
    try:
        assert r.state.wait_synced(5)
        decision = r._cycle()
        assert decision is not None and len(decision.drains) == 2, "the plan empties both on-demand nodes"
        assert [res.outcome for res in r.results] == ["dry-run"], "one start per cycle (--max-nodes-per-cycle)"
    finally:
        r.stop_informers()
        server.close()


def test_a_plan_that_judges_ages_is_made_again_every_cycle(tmp_path: Path) -> None:
    """Pod ages change with the clock alone: an unchanged cluster may plan differently a minute later."""
    path = tmp_path / "c.yaml"
    path.write_text("disruption:\n  min_pod_age: 10m\n")
    calls: list[int] = []
    server, r = synced(fast((f"--config={path}",)), calls)
    try:
        r._cycle()
        r._cycle()
        assert calls == [1, 1]
        assert r.plans.planned_from is None
    finally:
        r.stop_informers()
        server.close()


def test_a_change_in_the_nodes_left_out_plans_again() -> None:
    calls: list[int] = []
    server, r = synced(fast(), calls)
    try:
        r._cycle()
        r.drainer.memory_backoff["od-1"] = r.wall() + 600  # the node is now backing off: left out of the plan
        r._cycle()
        assert calls == [1, 1]
    finally:
        r.stop_informers()
        server.close()


def test_once_without_the_lease_does_nothing_and_says_so() -> None:
    server = cluster()
    server.put(
        "leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "spotshift-rescheduler", "namespace": "spotshift"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 60, "renewTime": "2030-01-01T00:00:00.000000Z"},
        },
    )
    options = RunOptions(
        once=True, identity="me", sync_timeout=5, lease_duration=1.5, renew_deadline=1.0, retry_period=0.2
    )
    r = Rescheduler(server, fast(), options)
    try:
        assert r.run() == 3
    finally:
        server.close()
    assert server.evictions == []


def test_once_without_the_lease_namespace_exits_non_zero_saying_how_to_fix_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = cluster()
    server.remove("namespaces", "spotshift")
    options = RunOptions(
        once=True, identity="me", sync_timeout=5, lease_duration=1.5, renew_deadline=1.0, retry_period=0.2
    )
    r = Rescheduler(server, fast(), options)
    with caplog.at_level(logging.WARNING, logger="spotshift.rescheduler"):
        try:
            assert r.run() == 1
            assert not r.ready(), "readiness is false while the Lease cannot be used"
        finally:
            server.close()
    errors = [rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1
    assert errors[0].startswith("cannot create or read the leader-election Lease spotshift/spotshift-rescheduler")
    assert "--leader-elect=false" in errors[0]
    assert server.evictions == []


def test_stop_during_the_wait_for_replacements_rolls_the_node_back() -> None:
    server = cluster()
    stop = threading.Event()
    server.on_evict = lambda evicted: stop.set()  # SIGTERM right after the first eviction; no replacement
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5), stop=stop)
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert [res.reason for res in r.results] == ["interrupted"]
    od = server.get_obj("nodes", "od-1")
    assert not od["spec"].get("taints")
    assert STATE_ANNOTATION not in (od["metadata"].get("annotations") or {})


def test_a_node_in_backoff_leaves_the_shared_budget_to_another_node() -> None:
    server = cluster()
    backing_off = server.get_obj("nodes", "od-1")
    assert backing_off is not None
    backing_off["metadata"]["annotations"] = {"spotshift.io/drain-backoff-until": "2999-01-01T00:00:00Z"}
    server.put("nodes", backing_off)
    server.put("nodes", node("od-2", cpu="2"))
    server.remove("pods", "default/web-1")
    server.put("pods", pod("web-big", "od-2", app="web0", owner="rs-0", cpu="500m"))  # od-1 is smaller: first
    server.put("pdbs", pdb("web0", "web0", allowed=1))  # one disruption for the two nodes

    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert [(res.node, res.outcome) for res in r.results] == [("od-2", "succeeded")]
    assert r.plans.last_decision is not None and ("od-1", "backoff") in r.plans.last_decision.skipped


OUR_TAINT = {"key": "spotshift.io/draining", "value": "spotshift-rescheduler", "effect": "PreferNoSchedule"}


def mark(server: FakeApiServer, name: str) -> None:
    """A mark left behind: the node as a drain that could not roll back (API server down) leaves it."""
    obj = server.get_obj("nodes", name)
    assert obj is not None
    obj["spec"]["taints"] = [OUR_TAINT]
    obj["metadata"].setdefault("annotations", {})[STATE_ANNOTATION] = "draining"
    server.put("nodes", obj)


def marked(server: FakeApiServer, name: str) -> bool:
    obj = server.get_obj("nodes", name) or {}
    return bool(obj["spec"].get("taints")) or STATE_ANNOTATION in (obj["metadata"].get("annotations") or {})


def wait_for(condition: Any, timeout: float = 30.0) -> bool:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if condition():
                return True
            done.wait(0.05)
        return condition()
    finally:
        deadline.cancel()


def test_a_mark_that_appears_while_running_is_rolled_back_by_the_next_cycle() -> None:
    server = cluster()
    cycles: list[int] = []

    def plan(snapshot: ClusterSnapshot, config: Config, exclude: Any) -> PlannedCycle:
        cycles.append(1)
        return nothing_planned(snapshot, config, exclude)

    r = Rescheduler(server, fast(("--housekeeping-interval=1s",)), RunOptions(identity="me", sync_timeout=5), plan=plan)
    runner = threading.Thread(target=r.run)
    runner.start()
    try:
        assert wait_for(lambda: len(cycles) >= 1), "the loop did not plan"
        mark(server, "od-1")  # long after start-up and leadership
        assert wait_for(lambda: not marked(server, "od-1")), "the mark was never removed"

        def why() -> list[str]:  # the Event is posted just after the mark is removed
            return [e["message"] for e in server.store["events"].values() if e["reason"] == "SpotshiftTaintRemoved"]

        assert wait_for(lambda: bool(why())), "no Event says why the mark was removed"
        assert "before the node was empty" in why()[0]
    finally:
        r.stop.set()
        runner.join(30)
        server.close()


def test_a_mark_whose_removal_fails_is_retried_in_later_cycles() -> None:
    from shared.kube.api import Retry

    server = cluster()
    cycles: list[int] = []

    def plan(snapshot: ClusterSnapshot, config: Config, exclude: Any) -> PlannedCycle:
        cycles.append(1)
        return nothing_planned(snapshot, config, exclude)

    r = Rescheduler(server, fast(("--housekeeping-interval=1s",)), RunOptions(identity="me", sync_timeout=5), plan=plan)
    r.parts.reconciler.backoff = 0.1
    r.parts.reconciler.marker.retry = Retry(0.0)  # one attempt per cycle: the later cycles must do the retrying
    runner = threading.Thread(target=r.run)
    runner.start()
    try:
        assert wait_for(lambda: len(cycles) >= 1)
        server.fail("GET", r"^/api/v1/nodes/od-1$", 503, 500)  # refused twice, in two cycles
        server.fail("PATCH", r"^/api/v1/nodes/od-1$", 503)  # and the write once more
        mark(server, "od-1")
        assert wait_for(lambda: not marked(server, "od-1")), "the mark was never removed"
        assert r.parts.reconciler.failures == {}
    finally:
        r.stop.set()
        runner.join(30)
        server.close()


def test_shutdown_removes_a_leftover_mark_while_the_lease_is_still_held() -> None:
    server = cluster()
    r = Rescheduler(server, fast(("--leader-elect=false",)), RunOptions(identity="me", sync_timeout=5))
    try:
        r.start_informers()
        assert r.state.wait_synced(5)
        mark(server, "od-1")
        assert r.state.wait_until(lambda: STATE_ANNOTATION in r.state.nodes["od-1"].annotations, 5)
        server.fail("PATCH", r"^/api/v1/nodes/od-1$", 503)  # the API server still settling
        r.shutdown()
    finally:
        server.close()
    assert not marked(server, "od-1")


# --- the parts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        pytest.param(404, NotFound, id="404-not-found"),
        pytest.param(409, Conflict, id="409-conflict"),
        pytest.param(410, Gone, id="410-gone"),
        pytest.param(429, TooManyRequests, id="429-too-many-requests"),
        pytest.param(500, ServerError, id="500-server-error"),
        pytest.param(503, ServerError, id="503-server-error"),
        pytest.param(418, ApiError, id="anything-else"),
    ],
)
def test_status_codes_map_to_one_exception_class_each(status: int, cls: type[ApiError]) -> None:
    body = json.dumps({"kind": "Status", "code": status, "reason": "R", "message": "the message"}).encode()
    e = error_for(status, body, method="GET", path="/x", retry_after=3)
    assert type(e) is cls
    assert (e.status, e.reason, e.message, e.retry_after) == (status, "R", "the message", 3)
    assert str(e) == f"GET /x: HTTP {status}: the message"


def test_a_repeated_event_bumps_the_count_instead_of_creating_another() -> None:
    server = FakeApiServer()
    events = EventRecorder(Kube(server))
    ref = Ref.node("od-1", "uid-1")
    events.record(ref, "Normal", "SpotshiftDrainStarted", "moving 2 pods")
    events.record(ref, "Normal", "SpotshiftDrainStarted", "moving 2 pods")
    (stored,) = server.store["events"].values()
    assert stored["count"] == 2
    assert stored["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "od-1", "uid": "uid-1"}
    assert stored["metadata"]["namespace"] == "default"
    assert stored["source"]["component"] == "spotshift-rescheduler"


def test_a_failed_event_never_raises() -> None:
    server = FakeApiServer()
    server.fail("POST", r"/events$", 500)
    EventRecorder(Kube(server)).record(Ref.pod("ns", "p"), "Normal", "X", "y")


def test_metrics_health_and_readiness_endpoints() -> None:
    metrics = Metrics()
    metrics.evictions.labels("evicted").inc()
    ready = {"value": False}
    server = MetricsServer(metrics, "127.0.0.1:0", ready=lambda: ready["value"]).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        body = urllib.request.urlopen(base + "/metrics").read().decode()
        assert 'spotshift_rescheduler_evictions_total{result="evicted"} 1.0' in body
        assert "spotshift_rescheduler_leader 0.0" in body
        assert urllib.request.urlopen(base + "/healthz").status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/readyz")
        assert e.value.code == 503
        ready["value"] = True
        assert urllib.request.urlopen(base + "/readyz").status == 200
    finally:
        server.stop()


def test_logs_are_one_json_object_per_line_with_the_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.rescheduler.json")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("drain of node %s failed", "od-1", extra=fields(node="od-1", reason="interrupted"))
    line = json.loads(stream.getvalue())
    assert (line["level"], line["msg"], line["node"], line["reason"]) == (
        "warning",
        "drain of node od-1 failed",
        "od-1",
        "interrupted",
    )


# --- the cluster's kube-scheduler rules (rescheduler/cluster/rules.py) -------------------------------------------


def over_committed(git_version: str | None) -> FakeApiServer:
    """A memory-only pod on od-1; the only spot node (cpu: 1) holds a pod bound with cpu: 2."""
    server = FakeApiServer(git_version=git_version)
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("od-1", cpu="2"))
    server.put("nodes", node("spot-1", spot=True, cpu="1"))
    server.put("pods", pod("big", "spot-1", app="big", owner=None, cpu="2"))
    server.put("pods", pod("mem", "od-1", app="mem", owner="rs-mem", cpu="0"))

    def replace(evicted: dict[str, Any]) -> None:
        new = pod("mem-new", "spot-1", app="mem", owner="rs-mem", cpu="0")
        server.put("pods", new)

    server.on_evict = replace
    return server


def run_once(server: FakeApiServer) -> Rescheduler:
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    return r


def test_the_loop_plans_with_the_rules_of_the_api_servers_release(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="spotshift.rescheduler")
    r = run_once(over_committed("v1.20.2"))
    assert r.switches == for_version("v1.20.2")
    assert r.results == [] and r.plans.last_decision is not None and r.plans.last_decision.drains == ()
    lines = [rec for rec in caplog.records if "API server version v1.20.2" in rec.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "spread_counts_only_eligible_nodes=false" in lines[0].getMessage()


def test_on_a_current_release_the_memory_only_pod_moves_to_the_cpu_over_committed_node() -> None:
    r = run_once(over_committed("v1.27.3-eks-2d98532"))
    assert r.switches == for_version("v1.27.3")
    assert [(res.node, res.outcome) for res in r.results] == [("od-1", "succeeded")]


@pytest.mark.parametrize(
    ("git_version", "fail", "logged"),
    [
        pytest.param("v1.30.2", 500, "cannot read the API server's version", id="version-not-readable"),
        pytest.param(None, None, "cannot read the API server's version", id="version-not-served"),
        pytest.param("custom-build", None, "is not a Kubernetes 1.x version", id="version-not-parsable"),
    ],
)
def test_without_a_usable_version_the_loop_plans_with_the_strictest_rules_and_says_so(
    git_version: str | None, fail: int | None, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spotshift.rescheduler")
    server = over_committed(git_version)
    if fail is not None:
        server.fail("GET", r"^/version$", fail)
    r = run_once(server)
    assert r.switches == STRICTEST
    assert r.results == []  # the strict rule keeps the memory-only pod off the over-committed node
    warnings = [rec for rec in caplog.records if logged in rec.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "strictest kube-scheduler rules" in warnings[0].getMessage()


def test_default_planner_asks_for_the_rules_at_each_plan() -> None:
    from rescheduler.decode.reader import load_bytes
    from rescheduler.run import default_planner

    server = over_committed(None)
    items = [*server.store["nodes"].values(), *server.store["pods"].values()]
    snapshot = load_bytes(json.dumps({"kind": "List", "items": items}).encode())
    config = fast()
    current: list[Switches] = [CURRENT]
    planner = default_planner(None, lambda: current[0])
    assert [nm.node for nm in planner(snapshot, config, {}).drains] == ["od-1"]
    current[0] = for_version("v1.26.0")
    assert planner(snapshot, config, {}).drains == ()


def test_the_rescheduler_role_lists_and_watches_every_kind_the_state_watches() -> None:
    import yaml

    from rescheduler.cluster.watch_cache import KINDS

    rbac = Path(__file__).resolve().parents[2] / "deploy/base/rescheduler/rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text()) if d and d["kind"] == "ClusterRole")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for kind in KINDS:
        assert (kind.name, "list") in granted and (kind.name, "watch") in granted, kind.name
