"""The one guarded eviction component: discovery of the version, UID precondition, grace cap, 429 retries."""

from __future__ import annotations

import pytest

from rescheduler.cluster.events import EventRecorder
from rescheduler.cluster.evictor import EvictionResult, Evictor
from rescheduler.metrics import Metrics
from shared.kube.api import Kube
from shared.model import Pod
from tests.support.fake_api import FakeApiServer, pdb, pod


class Clock:
    """A clock the evictor's waits advance, so retry tests take no real time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def make(server: FakeApiServer, *, dry_run: bool = False, timeout: float = 30.0, max_grace: float = 120.0, abort=None):
    clock = Clock()
    metrics = Metrics()
    kube = Kube(server)
    evictor = Evictor(
        kube,
        timeout=timeout,
        max_grace=max_grace,
        dry_run=dry_run,
        metrics=metrics,
        events=EventRecorder(kube, enabled=not dry_run),
        should_abort=abort or (lambda: False),
        wait=clock.wait,
        clock=clock,
    )
    return evictor, metrics, clock


def view(server: FakeApiServer, key: str) -> Pod:
    return Pod.from_api(server.get_obj("pods", key))


def count(metrics: Metrics, result: str) -> float:
    return metrics.registry.get_sample_value("spotshift_rescheduler_evictions_total", {"result": result}) or 0.0


@pytest.mark.parametrize(
    ("server_version", "body_version"),
    [
        pytest.param("v1", "policy/v1", id="policy-v1-where-served"),
        pytest.param("v1beta1", "policy/v1beta1", id="policy-v1beta1-on-kubernetes-1.20"),
    ],
)
def test_eviction_uses_the_discovered_version_with_a_uid_precondition(server_version: str, body_version: str) -> None:
    server = FakeApiServer(eviction_version=server_version)
    server.put("pods", pod("web-0", "od-1", terminationGracePeriodSeconds=30))
    target = view(server, "default/web-0")
    evictor, metrics, _ = make(server)

    assert evictor.evict(target, why="test").result is EvictionResult.EVICTED

    ((key, body),) = server.evictions
    assert key == "default/web-0"
    assert body["apiVersion"] == body_version
    assert body["kind"] == "Eviction"
    assert body["deleteOptions"]["preconditions"] == {"uid": target.uid}
    assert body["deleteOptions"]["gracePeriodSeconds"] == 30
    assert count(metrics, "evicted") == 1
    assert [e["reason"] for e in server.store["events"].values()] == ["SpotshiftEvicting"]


def test_grace_period_is_capped_by_max_graceful_termination() -> None:
    server = FakeApiServer()
    server.put("pods", pod("slow", "od-1", terminationGracePeriodSeconds=3600))
    evictor, _, _ = make(server, max_grace=45)
    evictor.evict(view(server, "default/slow"), why="test")
    assert server.evictions[0][1]["deleteOptions"]["gracePeriodSeconds"] == 45


def test_a_pdb_429_is_retried_with_backoff_until_the_budget_allows() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.put("pdbs", pdb("web", "web", allowed=1))
    server.fail("POST", r"/eviction$", 429, 429, 429)
    evictor, metrics, clock = make(server)

    result = evictor.evict(view(server, "default/web-0"), why="test")

    assert result.result is EvictionResult.EVICTED
    assert result.attempts == 4
    assert clock.waits == [1.0, 2.0, 4.0]
    assert count(metrics, "evicted") == 1


def test_a_budget_that_never_allows_ends_as_refused_at_the_timeout() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.put("pdbs", pdb("web", "web", allowed=0))
    evictor, metrics, clock = make(server, timeout=20)

    result = evictor.evict(view(server, "default/web-0"), why="test")

    assert result.result is EvictionResult.REFUSED
    assert clock.now >= 20
    assert server.evictions == []
    assert server.get_obj("pods", "default/web-0") is not None
    assert count(metrics, "refused") == 1
    assert "SpotshiftEvictionRefused" in {e["reason"] for e in server.store["events"].values()}


def test_a_pod_with_two_budgets_is_refused_at_once() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.put("pdbs", pdb("a", "web", allowed=1))
    server.put("pdbs", pdb("b", "web", allowed=1))
    evictor, _, clock = make(server)
    result = evictor.evict(view(server, "default/web-0"), why="test")
    assert result.result is EvictionResult.REFUSED
    assert clock.waits == []


def test_a_pod_replaced_under_the_same_name_is_never_evicted() -> None:
    server = FakeApiServer()
    server.put("pods", pod("db-0", "od-1"))
    old = view(server, "default/db-0")
    server.remove("pods", "default/db-0")
    server.put("pods", pod("db-0", "spot-1"))  # a StatefulSet's new pod: same name, new UID
    evictor, metrics, _ = make(server)

    assert evictor.evict(old, why="test").result is EvictionResult.GONE
    assert server.evictions == []
    assert count(metrics, "gone") == 1


def test_a_pod_already_gone_counts_as_done() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    target = view(server, "default/web-0")
    server.remove("pods", "default/web-0")
    evictor, _, _ = make(server)
    assert evictor.evict(target, why="test").result is EvictionResult.GONE


def test_dry_run_evicts_nothing_and_writes_nothing() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    evictor, metrics, _ = make(server, dry_run=True)
    assert evictor.evict(view(server, "default/web-0"), why="test").result is EvictionResult.DRY_RUN
    assert [m for m, _, _ in server.requests if m != "GET"] == []
    assert count(metrics, "dry-run") == 1


def test_shutdown_while_retrying_aborts_without_evicting() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.put("pdbs", pdb("web", "web", allowed=0))
    calls = []

    def abort() -> bool:
        calls.append(1)
        return len(calls) > 2

    evictor, _, _ = make(server, abort=abort)
    assert evictor.evict(view(server, "default/web-0"), why="test").result is EvictionResult.ABORTED
    assert server.evictions == []


def test_forbidden_fails_with_the_missing_permission_named() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.fail("POST", r"/eviction$", 403)
    evictor, _, _ = make(server)
    result = evictor.evict(view(server, "default/web-0"), why="test")
    assert result.result is EvictionResult.FAILED
    assert "pods/eviction" in result.message


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(500, id="etcd-restarting-transport-is-closing"),
        pytest.param(503, id="api-server-starting"),
        pytest.param(504, id="request-timeout"),
        pytest.param(429, id="priority-and-fairness-throttling"),
    ],
)
def test_a_transient_error_on_the_read_before_the_eviction_is_retried(status: int) -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.fail("GET", r"/pods/web-0$", status, status)
    evictor, _, clock = make(server)

    result = evictor.evict(view(server, "default/web-0"), why="test")

    assert result.result is EvictionResult.EVICTED, result.message
    assert len(clock.waits) == 2
    assert len(server.evictions) == 1


def test_a_read_that_keeps_failing_ends_at_the_eviction_timeout() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.fail("GET", r"/pods/web-0$", *([500] * 100))
    evictor, _, clock = make(server, timeout=20)

    result = evictor.evict(view(server, "default/web-0"), why="test")

    assert result.result is EvictionResult.FAILED
    assert 20 <= clock.now < 30
    assert server.evictions == []


def test_a_definite_answer_on_the_read_is_not_retried() -> None:
    server = FakeApiServer()
    server.put("pods", pod("web-0", "od-1"))
    server.fail("GET", r"/pods/web-0$", 403)
    evictor, _, clock = make(server)
    assert evictor.evict(view(server, "default/web-0"), why="test").result is EvictionResult.FAILED
    assert clock.waits == []
