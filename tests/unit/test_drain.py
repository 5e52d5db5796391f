"""Draining one node: pre-checks, the mark, evictions, replacements, backoff, rollback, leftovers."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from rescheduler.cluster.drain import (
    Drainer,
    DrainOutcome,
)
from rescheduler.cluster.events import EventRecorder
from rescheduler.cluster.evictor import Evictor
from rescheduler.cluster.marking import DRAINED, FAILURES_ANNOTATION, NodeMarker, clean_leftovers
from rescheduler.cluster.watch_cache import PDBS, WATCHES, ClusterState, StateInformer
from rescheduler.metrics import Metrics
from rescheduler.plan.drain_marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION, TAINT_VALUE
from rescheduler.plan.labels import DrainLabel
from shared.config import PDB_ALL_AT_ONCE, Config
from shared.kube.api import Kube
from tests.support.fake_api import FakeApiServer, namespace, node, pdb, pod

KEY = "spotshift.io/draining"


class Cluster:
    """The fake API server, a watch-backed state over it, and a drainer wired like the run loop wires it."""

    def __init__(self, config: Config | None = None, *, dry_run: bool = False) -> None:
        base = config or Config()
        self.config = replace(
            base,
            rescheduler=replace(
                base.rescheduler,
                max_graceful_termination=2.0,
                replacement_timeout=3.0,
                pod_eviction_timeout=2.0,
                node_backoff=60.0,
                dry_run=dry_run,
            ),
        )
        self.server = FakeApiServer()
        self.server.put("namespaces", namespace("default"))
        self.state = ClusterState(pdb_api_version="policy/v1")
        self.stop = threading.Event()
        self.abort = False
        self.metrics = Metrics()
        self.kube = Kube(self.server)
        self.events = EventRecorder(self.kube, enabled=not dry_run)
        self.informers: list[StateInformer] = []
        self.marker = NodeMarker(self.kube, taint_key=KEY, mode=self.config.rescheduler.drain_taint)
        evictor = Evictor(
            self.kube,
            timeout=self.config.rescheduler.pod_eviction_timeout,
            max_grace=self.config.rescheduler.max_graceful_termination,
            dry_run=dry_run,
            metrics=self.metrics,
            events=self.events,
            should_abort=self.should_abort,
            wait=lambda s: self.stop.wait(min(s, 0.05)),
        )
        self.drainer = Drainer(
            self.kube,
            self.state,
            self.config,
            evictor,
            self.events,
            self.metrics,
            self.marker,
            dry_run=dry_run,
            should_abort=self.should_abort,
            stop=self.stop,
        )

    def should_abort(self) -> bool:
        return self.abort or self.stop.is_set()

    def start(self) -> None:
        for kind, path, query in ((PDBS, "/apis/policy/v1/poddisruptionbudgets", ()), *WATCHES):
            informer = StateInformer(self.kube, self.state, kind, path, threading.Event(), query=query, backoff=0.01)
            informer.start()
            self.informers.append(informer)
        assert self.state.wait_synced(5)

    def close(self) -> None:
        self.stop.set()
        for informer in self.informers:
            informer.close()
        self.server.close()
        for informer in self.informers:
            informer.join(5)

    def replicate_to(self, target: Callable[[dict[str, Any]], str]) -> None:
        """Play the ReplicaSet: each evicted pod gets a Running, Ready replacement on ``target(pod)``."""
        counter = iter(range(1000))

        def on_evict(evicted: dict[str, Any]) -> None:
            name = f"{evicted['metadata']['name']}-r{next(counter)}"
            new = pod(name, target(evicted), app=evicted["metadata"]["labels"]["app"])
            new["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
            self.server.put("pods", new)

        self.server.on_evict = on_evict

    def node_obj(self, name: str) -> dict[str, Any]:
        obj = self.server.get_obj("nodes", name)
        assert obj is not None
        return obj


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


def populate(c: Cluster, *, pods_on_od: int = 2, budget: int | None = 1) -> list[str]:
    c.server.put("nodes", node("od-1", cpu="4"))
    c.server.put("nodes", node("od-2", cpu="4"))
    c.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    keys = []
    for i in range(pods_on_od):
        c.server.put("pods", pod(f"web-{i}", "od-1", app=f"web{i}", owner=f"rs-{i}"))
        keys.append(f"default/web-{i}")
    if budget is not None:
        for i in range(pods_on_od):
            c.server.put("pdbs", pdb(f"web{i}", f"web{i}", allowed=budget))
    c.start()
    return keys


def taints(c: Cluster, name: str) -> list[dict[str, Any]]:
    return c.node_obj(name)["spec"].get("taints") or []


def reasons(c: Cluster) -> list[str]:
    return sorted(e["reason"] for e in c.server.store["events"].values())


def test_a_drainable_node_is_tainted_evicted_and_left_marked_drained(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "spot-1")

    result = cluster.drainer.drain("od-1", keys)

    assert result.outcome == DrainOutcome.SUCCEEDED, result.message
    assert sorted(result.evicted) == keys
    assert {n for _, n in result.replacements} == {"spot-1"}
    od = cluster.node_obj("od-1")
    assert {"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"} in od["spec"]["taints"]
    assert od["metadata"]["annotations"][STATE_ANNOTATION] == DRAINED
    assert reasons(cluster).count("SpotshiftDrainSucceeded") == 1
    assert cluster.metrics.registry.get_sample_value("spotshift_rescheduler_drains_succeeded_total") == 1


def test_the_taint_is_applied_before_the_first_eviction(cluster: Cluster) -> None:
    keys = populate(cluster, pods_on_od=1)
    seen: list[list[dict[str, Any]]] = []

    def target(evicted: dict[str, Any]) -> str:
        seen.append(taints(cluster, "od-1"))
        return "spot-1"

    cluster.replicate_to(target)
    assert cluster.drainer.drain("od-1", keys).outcome == DrainOutcome.SUCCEEDED
    assert seen and any(t["key"] == KEY for t in seen[0])


def test_keep_drained_tainted_false_makes_the_empty_node_schedulable_again() -> None:
    config = Config()
    c = Cluster(replace(config, rescheduler=replace(config.rescheduler, keep_drained_tainted=False)))
    try:
        keys = populate(c)
        c.replicate_to(lambda p: "spot-1")
        assert c.drainer.drain("od-1", keys).outcome == DrainOutcome.SUCCEEDED
        assert taints(c, "od-1") == []
        assert STATE_ANNOTATION not in (c.node_obj("od-1")["metadata"].get("annotations") or {})
    finally:
        c.close()


def test_cordon_mode_cordons_and_rollback_uncordons() -> None:
    config = Config()
    c = Cluster(replace(config, rescheduler=replace(config.rescheduler, drain_taint="cordon")))
    try:
        keys = populate(c)
        c.replicate_to(lambda p: "od-2")  # replacements land on on-demand: rolled back
        result = c.drainer.drain("od-1", keys)
        assert result.reason == DrainLabel.REPLACED_ON_DEMAND
        od = c.node_obj("od-1")
        assert not od["spec"].get("unschedulable")
        cordons = [
            b["spec"].get("unschedulable") for m, p, b in c.server.requests if m == "PATCH" and "spec" in (b or {})
        ]
        assert True in cordons
    finally:
        c.close()


def test_a_node_whose_pdb_forbids_an_eviction_is_never_touched(cluster: Cluster) -> None:
    keys = populate(cluster, budget=0)

    result = cluster.drainer.drain("od-1", keys)

    assert result.outcome == DrainOutcome.SKIPPED
    assert result.reason == DrainLabel.PDB_PRECHECK
    assert cluster.server.evictions == []
    assert [m for m, p, _ in cluster.server.requests if m in ("PATCH", "POST") and "/events" not in p] == []
    assert taints(cluster, "od-1") == []


def test_all_at_once_two_pods_of_one_budget_that_allows_one_disruption_skip_the_node() -> None:
    base = Config()
    c = Cluster(replace(base, rescheduler=replace(base.rescheduler, pdb_rule=PDB_ALL_AT_ONCE)))
    try:
        c.server.put("nodes", node("od-1"))
        c.server.put("nodes", node("spot-1", spot=True))
        for i in range(2):
            c.server.put("pods", pod(f"web-{i}", "od-1", app="web"))
        c.server.put("pdbs", pdb("web", "web", allowed=1))
        c.start()
        result = c.drainer.drain("od-1", ["default/web-0", "default/web-1"])
        assert (result.outcome, result.reason) == (DrainOutcome.SKIPPED, DrainLabel.PDB_PRECHECK)
        assert "needs 2" in result.message
        assert c.server.evictions == []
    finally:
        c.close()


def test_three_pods_of_one_budget_allowing_one_are_evicted_one_at_a_time_as_replacements_become_ready(
    cluster: Cluster,
) -> None:
    # kubectl drain's behaviour: the budget answers 429 while its one disruption is used; the evictor retries,
    # and the disruption controller (played here) gives it back once the replacement is Ready.
    cluster.server.put("nodes", node("od-1", cpu="4"))
    cluster.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    keys = []
    for i in range(3):
        cluster.server.put("pods", pod(f"web-{i}", "od-1", app="web", owner="rs-web"))
        keys.append(f"default/web-{i}")
    cluster.server.put("pdbs", pdb("web", "web", allowed=1, healthy=3, desired=2))
    cluster.start()
    allowed_at_eviction: list[int] = []
    replicate = iter(range(10))

    def on_evict(evicted: dict[str, Any]) -> None:
        budget = cluster.server.get_obj("pdbs", "default/web")
        assert budget is not None
        allowed_at_eviction.append(budget["status"]["disruptionsAllowed"])
        new = pod(f"web-r{next(replicate)}", "spot-1", app="web")
        new["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
        cluster.server.put("pods", new)

        def ready_again() -> None:  # the replacement is Ready: currentHealthy is back, one disruption allowed
            restored = copy.deepcopy(cluster.server.get_obj("pdbs", "default/web"))
            restored["status"]["disruptionsAllowed"] = 1
            cluster.server.put("pdbs", restored)

        threading.Timer(0.05, ready_again).start()

    cluster.server.on_evict = on_evict
    result = cluster.drainer.drain("od-1", keys)
    assert result.outcome is DrainOutcome.SUCCEEDED, result.message
    assert sorted(result.evicted) == keys
    assert allowed_at_eviction == [0, 0, 0]  # each eviction used the one disruption the budget allowed
    posts = [p for m, p, _ in cluster.server.requests if m == "POST" and p.endswith("/eviction")]
    assert len(posts) > 3, "later evictions were refused with 429 and retried"


def test_a_plan_that_no_longer_matches_the_node_is_not_started(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.server.put("pods", pod("late", "od-1", app="late", owner="rs-late"))
    assert cluster.state.wait_until(lambda: "default/late" in cluster.state.pods, 5)
    result = cluster.drainer.drain("od-1", keys)
    assert (result.outcome, result.reason) == (DrainOutcome.SKIPPED, DrainLabel.PLAN_STALE)
    assert cluster.server.evictions == []


def test_replacements_on_on_demand_untaint_and_back_off_exponentially(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "od-2")

    first = cluster.drainer.drain("od-1", keys)

    assert first.reason == DrainLabel.REPLACED_ON_DEMAND
    assert taints(cluster, "od-1") == []
    ann = cluster.node_obj("od-1")["metadata"]["annotations"]
    assert ann[FAILURES_ANNOTATION] == "1"
    assert BACKOFF_UNTIL_ANNOTATION in ann
    assert STATE_ANNOTATION not in ann
    assert "SpotshiftNodeBackoff" in reasons(cluster)

    # A second failure doubles the rest (the decision step reads the annotation; here we call back_off).
    until1 = ann[BACKOFF_UNTIL_ANNOTATION]
    until2, failures = cluster.marker.back_off("od-1", 0.0, 60.0)
    assert (until2, failures) == (120.0, 2)
    assert until1 != cluster.node_obj("od-1")["metadata"]["annotations"][BACKOFF_UNTIL_ANNOTATION]


def test_replacements_that_never_run_fail_the_drain_and_remove_the_mark(cluster: Cluster) -> None:
    keys = populate(cluster)
    result = cluster.drainer.drain("od-1", keys)  # no ReplicaSet plays along
    assert result.reason == DrainLabel.REPLACEMENT_TIMEOUT
    assert taints(cluster, "od-1") == []


def test_an_eviction_refused_until_the_timeout_rolls_back(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.server.fail("POST", r"web-1/eviction$", *([429] * 200))
    cluster.replicate_to(lambda p: "spot-1")
    result = cluster.drainer.drain("od-1", keys)
    assert result.reason == DrainLabel.EVICTION_REFUSED
    assert result.evicted == ("default/web-0",)
    assert taints(cluster, "od-1") == []


def test_interruption_mid_drain_stops_evicting_and_removes_the_taint(cluster: Cluster) -> None:
    keys = populate(cluster, pods_on_od=3)

    def on_evict(evicted: dict[str, Any]) -> None:
        cluster.abort = True  # SIGTERM arrives after the first eviction

    cluster.server.on_evict = on_evict
    result = cluster.drainer.drain("od-1", keys)
    assert result.reason == DrainLabel.INTERRUPTED
    assert len(cluster.server.evictions) == 1
    assert taints(cluster, "od-1") == []
    assert "SpotshiftDrainAborted" in reasons(cluster)


def test_dry_run_performs_no_write() -> None:
    c = Cluster(dry_run=True)
    try:
        keys = populate(c)
        result = c.drainer.drain("od-1", keys)
        assert result.outcome == DrainOutcome.DRY_RUN
        assert [m for m, _, _ in c.server.requests if m != "GET"] == []
        assert c.server.evictions == []
    finally:
        c.close()


def test_leftover_marks_are_cleaned_but_an_empty_drained_node_keeps_its_mark(cluster: Cluster) -> None:
    cluster.server.put(
        "nodes", node("od-left", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}])
    )
    cluster.server.put("pods", pod("web-0", "od-left", app="web", owner="rs-web"))  # the drain stopped short
    drained = node("od-empty", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}])
    drained["metadata"]["annotations"] = {STATE_ANNOTATION: DRAINED}
    cluster.server.put("nodes", drained)
    foreign = node("od-foreign", taints=[{"key": KEY, "value": "someone-else", "effect": "NoSchedule"}])
    cluster.server.put("nodes", foreign)
    cluster.start()

    cleaned = clean_leftovers(cluster.state, cluster.marker, cluster.config, cluster.events, dry_run=False)

    assert cleaned == ["od-left"]
    assert taints(cluster, "od-left") == []
    assert taints(cluster, "od-empty") != []
    assert taints(cluster, "od-foreign") == [{"key": KEY, "value": "someone-else", "effect": "NoSchedule"}]
    assert "SpotshiftTaintRemoved" in reasons(cluster)


def test_a_concurrent_node_update_is_not_lost(cluster: Cluster) -> None:
    populate(cluster)
    cluster.server.fail("PATCH", r"^/api/v1/nodes/od-1$", 409)  # the kubelet wrote in between
    cluster.marker.mark("od-1", 0.0)
    assert any(t["key"] == KEY for t in taints(cluster, "od-1"))


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_transient_error_on_the_rollback_is_retried_so_no_mark_is_left(cluster: Cluster, status: int) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "od-2")  # the drain fails and rolls back
    patches = [0]

    def on_evict(evicted: dict[str, Any]) -> None:
        patches[0] += 1
        if patches[0] == len(keys):  # after the last eviction: the API server restarts
            cluster.server.fail("GET", r"^/api/v1/nodes/od-1$", status, status)
            cluster.server.fail("PATCH", r"^/api/v1/nodes/od-1$", status)

    replicate = cluster.server.on_evict
    assert replicate is not None

    def both(evicted: dict[str, Any]) -> None:
        replicate(evicted)
        on_evict(evicted)

    cluster.server.on_evict = both
    result = cluster.drainer.drain("od-1", keys)

    assert result.reason == DrainLabel.REPLACED_ON_DEMAND
    assert "could not remove the mark" not in result.message
    assert taints(cluster, "od-1") == []
    assert STATE_ANNOTATION not in cluster.node_obj("od-1")["metadata"]["annotations"]


def test_a_transient_error_on_the_mark_is_retried(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "spot-1")
    cluster.server.fail("PATCH", r"^/api/v1/nodes/od-1$", 503)
    assert cluster.drainer.drain("od-1", keys).outcome == DrainOutcome.SUCCEEDED


def test_a_transient_error_listing_the_budgets_skips_the_node_untouched_until_the_next_start(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "spot-1")
    cluster.server.fail("GET", r"poddisruptionbudgets$", 500)
    skipped = cluster.drainer.drain("od-1", keys)
    assert (skipped.outcome, skipped.reason) == (DrainOutcome.SKIPPED, DrainLabel.PDB_LIST_FAILED)
    assert taints(cluster, "od-1") == [] and cluster.server.evictions == []
    assert cluster.drainer.drain("od-1", keys).outcome == DrainOutcome.SUCCEEDED


def test_a_transient_error_on_a_pod_read_mid_drain_does_not_fail_the_drain(cluster: Cluster) -> None:
    keys = populate(cluster)
    cluster.replicate_to(lambda p: "spot-1")
    cluster.server.fail("GET", r"/pods/web-1$", 500)  # "transport is closing" while etcd restarts
    result = cluster.drainer.drain("od-1", keys)
    assert result.outcome == DrainOutcome.SUCCEEDED, result.message
    assert BACKOFF_UNTIL_ANNOTATION not in cluster.node_obj("od-1")["metadata"]["annotations"]


def test_a_marked_node_left_empty_with_nothing_pending_is_finished_not_rolled_back(cluster: Cluster) -> None:
    cluster.server.put("nodes", node("od-1", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]))
    cluster.server.put("nodes", node("spot-1", spot=True))
    cluster.server.put("pods", pod("web-0-r1", "spot-1", app="web", owner="rs-web"))  # the replacement
    cluster.start()

    assert clean_leftovers(cluster.state, cluster.marker, cluster.config, cluster.events, dry_run=False) == ["od-1"]

    assert cluster.node_obj("od-1")["metadata"]["annotations"][STATE_ANNOTATION] == DRAINED
    assert taints(cluster, "od-1") != []
    assert "SpotshiftTaintRemoved" in reasons(cluster)


def test_a_marked_empty_node_is_rolled_back_while_pods_wait_to_be_scheduled(cluster: Cluster) -> None:
    cluster.server.put("nodes", node("od-1", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]))
    cluster.server.put("pods", pod("web-0-r1", phase="Pending", app="web", owner="rs-web"))
    cluster.start()
    assert clean_leftovers(cluster.state, cluster.marker, cluster.config, cluster.events, dry_run=False) == ["od-1"]
    assert taints(cluster, "od-1") == []


def test_an_empty_drained_node_keeps_its_mark_while_other_pods_wait_to_be_scheduled(cluster: Cluster) -> None:
    drained = node("od-1", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}])
    drained["metadata"]["annotations"] = {STATE_ANNOTATION: DRAINED}
    cluster.server.put("nodes", drained)
    cluster.server.put("pods", pod("elsewhere", phase="Pending", app="other", owner="rs-other"))
    cluster.start()
    assert clean_leftovers(cluster.state, cluster.marker, cluster.config, cluster.events, dry_run=False) == []
    assert taints(cluster, "od-1") != []
    assert cluster.node_obj("od-1")["metadata"]["annotations"][STATE_ANNOTATION] == DRAINED


def test_the_node_as_it_is_now_decides_not_the_watch_that_is_behind(cluster: Cluster) -> None:
    from rescheduler.cluster.marking import MarkReconciler

    marked = node("od-1", taints=[{"key": KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}])
    marked["metadata"]["annotations"] = {STATE_ANNOTATION: "draining"}
    cluster.server.put("nodes", marked)
    cluster.server.put("pods", pod("elsewhere", phase="Pending", app="other", owner="rs-other"))
    cluster.start()
    # The drain has just recorded the node as drained; the watch has not delivered that yet.
    cluster.informers[0].close()
    cluster.informers[0].join(5)
    now = cluster.node_obj("od-1")
    now["metadata"]["annotations"][STATE_ANNOTATION] = DRAINED
    cluster.server.put("nodes", now)
    assert cluster.state.nodes["od-1"].annotations[STATE_ANNOTATION] == "draining"

    reconciler = MarkReconciler(cluster.state, cluster.marker, cluster.config, cluster.events, dry_run=False)
    assert reconciler.reconcile() == []
    assert cluster.node_obj("od-1")["metadata"]["annotations"][STATE_ANNOTATION] == DRAINED
    assert taints(cluster, "od-1") != []


@pytest.mark.parametrize(
    ("policy", "healthy", "starts"),
    [
        pytest.param("AlwaysAllow", 1, True, id="always-allow-budget-unhealthy"),
        pytest.param(None, 2, True, id="unset-budget-healthy"),
        pytest.param("IfHealthyBudget", 2, True, id="if-healthy-budget-budget-healthy"),
        pytest.param(None, 1, False, id="unset-budget-unhealthy"),
        pytest.param("IfHealthyBudget", 1, False, id="if-healthy-budget-budget-unhealthy"),
    ],
)
def test_the_live_check_lets_a_not_ready_pod_go_when_the_eviction_api_does(
    cluster: Cluster, policy: str | None, healthy: int, starts: bool
) -> None:
    # A budget allowing 0, desiredHealthy 2: eviction.go evicts the not-Ready pod without using the budget under
    # AlwaysAllow, and otherwise only while currentHealthy >= desiredHealthy.
    cluster.server.put("nodes", node("od-1", cpu="4"))
    cluster.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    cluster.server.put("pods", pod("web-0", "od-1", app="web", ready=False))
    budget = pdb("web", "web", allowed=0, healthy=healthy, desired=2)
    if policy is not None:
        budget["spec"]["unhealthyPodEvictionPolicy"] = policy
    cluster.server.put("pdbs", budget)
    cluster.start()
    cluster.replicate_to(lambda _: "spot-1")

    result = cluster.drainer.drain("od-1", ["default/web-0"])

    if starts:
        assert result.outcome is DrainOutcome.SUCCEEDED, result.message
        assert [key for key, _ in cluster.server.evictions] == ["default/web-0"]
        assert cluster.server.get_obj("pdbs", "default/web")["status"]["disruptionsAllowed"] == 0
    else:
        assert (result.outcome, result.reason) == (DrainOutcome.SKIPPED, DrainLabel.PDB_PRECHECK)
        assert cluster.server.evictions == []


def stale_budget(app: str, *, allowed: int) -> dict[str, Any]:
    """A budget edited to generation 2 whose status still describes generation 1."""
    raw = pdb(app, app, allowed=allowed)
    raw["metadata"]["generation"] = 2
    return raw


def test_a_stale_budget_whose_pods_allow_a_disruption_lets_the_drain_start_and_paces_it(cluster: Cluster) -> None:
    # The status says 0 for the old spec; the pods (two Ready, maxUnavailable 1) allow 1 under the new one. The API
    # server refuses evictions until the disruption controller (played here) writes the status for generation 2.
    cluster.server.put("nodes", node("od-1", cpu="4"))
    cluster.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    cluster.server.put("pods", pod("web-0", "od-1", app="web"))
    cluster.server.put("pods", pod("web-1", "spot-1", app="web"))
    cluster.server.put("pdbs", stale_budget("web", allowed=0))
    cluster.start()
    cluster.replicate_to(lambda _: "spot-1")

    def refused() -> bool:
        return any(m == "POST" and p.endswith("/eviction") for m, p, _ in cluster.server.requests)

    def catch_up() -> None:  # once the first eviction was refused, not on a timer
        deadline = time.monotonic() + 5
        while not refused() and time.monotonic() < deadline:
            time.sleep(0.01)
        budget = copy.deepcopy(cluster.server.get_obj("pdbs", "default/web"))
        budget["status"].update(observedGeneration=2, disruptionsAllowed=1)
        cluster.server.put("pdbs", budget)

    controller = threading.Thread(target=catch_up)
    controller.start()
    result = cluster.drainer.drain("od-1", ["default/web-0"])
    controller.join(5)
    assert result.outcome is DrainOutcome.SUCCEEDED, result.message
    assert [key for key, _ in cluster.server.evictions] == ["default/web-0"]
    posts = [p for m, p, _ in cluster.server.requests if m == "POST" and p.endswith("/eviction")]
    assert len(posts) > 1, "the stale budget's 429s were retried"


def test_a_stale_budget_whose_pods_allow_no_disruption_skips_the_node(cluster: Cluster) -> None:
    # The stale status says 1; the pods say 0 (one of the two is not Ready), which is what the controller will write.
    cluster.server.put("nodes", node("od-1", cpu="4"))
    cluster.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    cluster.server.put("pods", pod("web-0", "od-1", app="web"))
    cluster.server.put("pods", pod("web-1", "spot-1", app="web", ready=False))
    cluster.server.put("pdbs", stale_budget("web", allowed=1))
    cluster.start()
    result = cluster.drainer.drain("od-1", ["default/web-0"])
    assert (result.outcome, result.reason) == (DrainOutcome.SKIPPED, DrainLabel.PDB_PRECHECK)
    assert "computed from its pods" in result.message
    assert cluster.server.evictions == []
