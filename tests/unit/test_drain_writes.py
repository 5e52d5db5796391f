"""A drain's node writes (its mark, its finishing write, its rollback) meeting API errors: one attempt per advance,
the next after a backoff, and no drain held up by another's.

Time is the drainer's clock, moved by the test: nothing here waits for a backoff to pass. The loop's passes are
the test's calls (``advance_drains``), each made on a state the watch has shown.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rescheduler import run
from rescheduler.cluster.drain import WRITE_BACKOFF, WRITE_MAX_BACKOFF, Drain, DrainOutcome, DrainResult, Phase
from rescheduler.cluster.marking import FAILURES_ANNOTATION
from rescheduler.plan.drain_marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION
from rescheduler.plan.labels import DrainLabel
from rescheduler.run import Rescheduler, RunOptions
from shared.config import Config
from tests.support.fake_api import FakeApiServer, pod
from tests.unit.test_drain import Cluster, populate, taints
from tests.unit.test_drain_steps import budgeted, not_ready_replacements, world

NODE = r"^/api/v1/nodes/od-1$"

# --- one drain, one write ------------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.now = [100.0]  # type: ignore[attr-defined]
    c.drainer.clock = c.drainer.evictor.clock = lambda: c.now[0]  # type: ignore[attr-defined]
    yield c
    c.close()


def tick(c: Cluster, seconds: float) -> None:
    c.now[0] += seconds  # type: ignore[attr-defined]


def annotations(c: Cluster, name: str = "od-1") -> dict[str, str]:
    return c.node_obj(name)["metadata"].get("annotations") or {}


def started(c: Cluster, keys: list[str]) -> Drain:
    drain = c.drainer.start("od-1", keys)
    assert isinstance(drain, Drain), drain
    return drain


TRANSIENT = [
    pytest.param(("PATCH", 0), id="the-api-server-answers-nothing"),
    pytest.param(("PATCH", 503), id="the-api-server-answers-503-while-it-starts"),
    pytest.param(("GET", 500), id="etcd-restarting-answers-500-to-the-read"),
    pytest.param(("PATCH", *[409] * 6), id="the-node-kept-changing-under-six-writes"),
]
"""What a node write can meet that may pass by itself: the method that meets it, and the answers in order."""


@pytest.mark.parametrize("failure", TRANSIENT)
def test_a_mark_that_meets_an_api_error_is_tried_again_after_a_backoff_and_nothing_is_evicted_before(
    cluster: Cluster, failure: tuple[Any, ...]
) -> None:
    keys = populate(cluster, budget=None)
    method, *statuses = failure
    cluster.server.fail(method, NODE, *statuses)

    drain = started(cluster, keys)
    assert drain.phase is Phase.MARKING and drain.write.attempts == 1
    assert drain.write.next_at == cluster.now[0] + WRITE_BACKOFF  # type: ignore[attr-defined]
    assert STATE_ANNOTATION not in annotations(cluster)
    assert cluster.drainer.advance(drain) is None and drain.write.attempts == 1, "not due yet: no second attempt"
    assert cluster.server.evictions == [] and drain.to_evict == drain.pods

    tick(cluster, WRITE_BACKOFF)
    assert cluster.drainer.advance(drain) is None
    assert annotations(cluster)[STATE_ANNOTATION] == "draining" and drain.write.attempts == 2
    assert sorted(k for k, _ in cluster.server.evictions) == keys, "marked: the evictions follow in the same step"


@pytest.mark.parametrize(
    ("statuses", "label_in_message"),
    [
        pytest.param([403], "HTTP 403", id="a-refusal-by-rbac-fails-the-drain-at-once"),
        pytest.param([503] * 40, "HTTP 503", id="an-error-lasting-past-the-eviction-timeout-fails-it-then"),
    ],
)
def test_a_mark_that_cannot_be_written_rolls_the_drain_back_with_nothing_evicted(
    cluster: Cluster, statuses: list[int], label_in_message: str
) -> None:
    keys = populate(cluster, budget=None)
    cluster.server.fail("PATCH", NODE, *statuses)
    drain = started(cluster, keys)
    timeout = cluster.config.rescheduler.pod_eviction_timeout
    result = None
    for _ in range(20):
        if result is not None:
            break
        tick(cluster, WRITE_MAX_BACKOFF)
        result = cluster.drainer.advance(drain)
        assert drain.phase is not Phase.EVICTING
    assert isinstance(result, DrainResult), "the mark's attempts end at its deadline"
    assert (result.outcome, result.reason) == (DrainOutcome.FAILED, DrainLabel.MARK_FAILED)
    assert label_in_message in result.message and cluster.server.evictions == []
    assert drain.write.attempts >= 1 and cluster.now[0] - drain.since < timeout + 2 * WRITE_MAX_BACKOFF  # type: ignore[attr-defined]
    assert taints(cluster, "od-1") == [] and STATE_ANNOTATION not in annotations(cluster)


def failed_and_rolling_back(c: Cluster, keys: list[str], *statuses: int) -> Drain:
    """od-1's drain after its replacements never came: failed, rolling back, its node writes answered
    ``statuses`` meanwhile (the first rollback attempt made)."""
    not_ready_replacements(c)
    drain = started(c, keys)
    c.drainer.advance(drain)
    assert c.state.wait_until(lambda: all(k not in c.state.pods for k in keys), 5)
    assert c.drainer.advance(drain) is None and drain.phase is Phase.REPLACING
    c.server.fail("GET", NODE, *statuses)
    tick(c, c.config.rescheduler.replacement_timeout)
    assert c.drainer.advance(drain) is None
    assert drain.phase is Phase.ROLLING_BACK and drain.write.attempts == 1
    return drain


def test_a_rollback_keeps_trying_past_every_deadline_and_removes_the_mark_with_the_rest_in_one_write(
    cluster: Cluster,
) -> None:
    keys = populate(cluster, budget=None)
    drain = failed_and_rolling_back(cluster, keys, *[0] * 30)
    patches_before = sum(1 for m, p, _ in cluster.server.requests if m == "PATCH" and p == "/api/v1/nodes/od-1")
    result = None
    for _ in range(30):  # attempts 2 to 31: the first 29 meet the outage
        assert result is None, "ended before the API server answered"
        tick(cluster, WRITE_MAX_BACKOFF)
        result = cluster.drainer.advance(drain)
    assert drain.write.attempts == 31, "one attempt per advance, long past pod_eviction_timeout"
    assert isinstance(result, DrainResult) and result.reason == DrainLabel.REPLACEMENT_TIMEOUT
    assert "could not remove the mark" not in result.message and "in memory" not in result.message
    ann = annotations(cluster)
    assert STATE_ANNOTATION not in ann and taints(cluster, "od-1") == []
    assert ann[FAILURES_ANNOTATION] == "1" and BACKOFF_UNTIL_ANNOTATION in ann
    patches = [b for m, p, b in cluster.server.requests if m == "PATCH" and p == "/api/v1/nodes/od-1"]
    assert len(patches) == patches_before + 1, "the mark and the rest go in one write"


def test_a_rollback_refused_for_good_leaves_the_mark_to_the_reconciler_and_the_rest_in_memory(
    cluster: Cluster,
) -> None:
    keys = populate(cluster, budget=None)
    drain = failed_and_rolling_back(cluster, keys, 0)
    cluster.server.fail("PATCH", NODE, 403)
    tick(cluster, WRITE_BACKOFF)
    result = cluster.drainer.advance(drain)
    assert isinstance(result, DrainResult) and result.reason == DrainLabel.REPLACEMENT_TIMEOUT
    assert "could not remove the mark" in result.message and "backoff kept in memory only" in result.message
    assert annotations(cluster)[STATE_ANNOTATION] == "draining"
    assert cluster.drainer.memory_backoff["od-1"] > 0


def test_the_finishing_write_meets_an_outage_and_the_drain_succeeds_once_it_is_written(cluster: Cluster) -> None:
    keys = populate(cluster, budget=None)
    made = not_ready_replacements(cluster)
    drain = started(cluster, keys)
    cluster.drainer.advance(drain)
    assert cluster.state.wait_until(lambda: all(k in cluster.state.pods for k in made), 5)
    for key in made:
        obj = cluster.server.get_obj("pods", key)
        assert obj is not None
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        cluster.server.put("pods", obj)
    assert cluster.state.wait_until(lambda: all(cluster.state.pods[k].ready for k in made), 5)
    cluster.server.unreachable(NODE)
    assert cluster.drainer.advance(drain) is None and drain.phase is Phase.FINISHING
    cluster.server.unreachable(None)
    assert cluster.drainer.advance(drain) is None, "not due yet"
    tick(cluster, WRITE_BACKOFF)
    result = cluster.drainer.advance(drain)
    assert isinstance(result, DrainResult) and result.outcome == DrainOutcome.SUCCEEDED
    assert annotations(cluster)[STATE_ANNOTATION] == "drained"


def test_the_marks_own_and_the_rests_write_are_one_merge_patch(cluster: Cluster) -> None:
    populate(cluster, budget=None)
    cluster.marker.mark("od-1", 0.0)
    until, failures = cluster.marker.roll_back("od-1", 0.0, 60.0) or (0.0, 0)
    assert (until, failures) == (60.0, 1)
    ann = annotations(cluster)
    assert STATE_ANNOTATION not in ann and ann[FAILURES_ANNOTATION] == "1" and taints(cluster, "od-1") == []
    assert cluster.marker.roll_back("gone", 0.0, 60.0) is None, "a node that is gone needs no rest"


# --- many drains, one loop -------------------------------------------------------------------------------------


class Loop:
    """A Rescheduler on ``server`` whose passes the test makes, on a clock the test moves."""

    def __init__(self, server: FakeApiServer, config: Config) -> None:
        self.server = server
        self.now = [0.0]
        self.r = Rescheduler(
            server, config, RunOptions(identity="me"), stop=threading.Event(), clock=lambda: self.now[0]
        )
        self.r.start_informers()
        assert self.r.state.wait_synced(5)

    def start(self, node: str) -> Drain:
        """Start ``node``'s drain as the loop's cycle would, with every movable pod the watch shows on it."""
        keys = [p.key for p in self.r.state.pods_on(node)]
        drain = self.r.drainer.start(node, keys)
        assert isinstance(drain, Drain), drain
        self.r.drains[node] = drain
        return drain

    def evicted(self, node: str) -> list[str]:
        return [k for k, _ in self.server.evictions if k.startswith(f"default/w{node[-1]}-")]

    def marked(self, node: str) -> bool:
        obj = self.server.get_obj("nodes", node) or {}
        return STATE_ANNOTATION in (obj["metadata"].get("annotations") or {})

    def close(self) -> None:
        self.r.stop_informers()
        self.server.close()


@pytest.fixture
def three() -> Iterator[Loop]:
    """od-0, od-1 with one pod each; od-2 with three pods whose evictions the API server lets through one per
    pass (429 for the others); room for all on spot-1."""
    server = world(3)
    for i in (1, 2):
        server.put("pods", pod(f"w2-{i}", "od-2", app="w2", owner="rs-2"))
    loop = Loop(server, budgeted("3", per_cycle=3))
    yield loop
    loop.close()


OUTAGES = [
    pytest.param(0, id="the-api-server-answers-nothing"),
    pytest.param(503, id="the-api-server-answers-503"),
    pytest.param(500, id="etcd-restarting-answers-500"),
]


@pytest.mark.parametrize("status", OUTAGES)
def test_an_outage_during_one_drains_start_and_anothers_rollback_holds_up_neither_the_third_nor_each_other(
    three: Loop, status: int
) -> None:
    server, r = three.server, three.r
    evicting = three.start("od-2")
    rolling_back = three.start("od-1")
    server.fail("POST", r"/w1-0/eviction$", 403)  # od-1's eviction is refused for good: its drain rolls back
    server.fail("POST", r"/w2-1/eviction$", 429)
    server.fail("POST", r"/w2-2/eviction$", 429, 429)
    server.unreachable(r"^/api/v1/nodes/od-[01]$", status)  # od-0's and od-1's node writes meet the outage
    marking = three.start("od-0")
    assert marking.phase is Phase.MARKING and marking.write.attempts == 1

    for passes in (1, 2, 3):
        three.now[0] += WRITE_MAX_BACKOFF
        r.advance_drains()
        assert len(three.evicted("od-2")) == passes, "the third drain evicts in the same pass"
        assert (marking.phase, marking.write.attempts) == (Phase.MARKING, 1 + passes)
        assert (rolling_back.phase, rolling_back.write.attempts) == (Phase.ROLLING_BACK, passes)
        assert three.evicted("od-0") == [], "no eviction before the mark is written"
        assert set(r.drains) == {"od-0", "od-1", "od-2"}, "a drain rolling back is still in flight"
        assert {p.key for p in rolling_back.to_evict} == set(), "its one pod's eviction was the one that failed"
        assert {p.key for p in marking.to_evict} == {"default/w0-0"}, "the pods a drain will evict stay claimed"
    assert evicting.phase is Phase.TERMINATING

    server.unreachable(None)
    three.now[0] += WRITE_MAX_BACKOFF
    r.advance_drains()
    assert [(res.node, res.reason) for res in r.results] == [("od-1", DrainLabel.EVICTION_FAILED)]
    assert "od-1" not in r.drains and not three.marked("od-1")
    assert three.marked("od-0") and three.evicted("od-0") == ["default/w0-0"], "marked, then evicting at once"


def test_a_lost_lease_leaves_an_interrupted_drain_rolling_back_in_flight_until_its_mark_is_gone(three: Loop) -> None:
    server, r = three.server, three.r
    drain = three.start("od-0")
    r.advance_drains()
    server.unreachable(r"^/api/v1/nodes/od-0$")
    r.interrupt_drains()
    assert drain.phase is Phase.ROLLING_BACK and r.drains == {"od-0": drain}
    assert drain.rollback is not None and drain.rollback.label is DrainLabel.INTERRUPTED
    three.now[0] += WRITE_BACKOFF
    r.interrupt_drains()  # the next pass while following: one more attempt, no further eviction
    assert drain.write.attempts == 2 and len(server.evictions) == 1
    server.unreachable(None)
    three.now[0] += 2 * WRITE_BACKOFF
    r.interrupt_drains()
    assert r.drains == {} and [res.reason for res in r.results] == [DrainLabel.INTERRUPTED]
    assert not three.marked("od-0")


def test_on_the_way_out_the_rollbacks_ride_out_errors_for_a_bounded_time_then_leave_the_marks(
    three: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, r = three.server, three.r
    monkeypatch.setattr(run, "SHUTDOWN_GRACE", 0.2)
    for node in ("od-0", "od-1"):
        three.start(node)
    server.unreachable(r"^/api/v1/nodes/od-[01]$")
    r.shutdown()
    assert r.drains == {}
    assert [res.reason for res in r.results] == [DrainLabel.INTERRUPTED] * 2
    assert all("could not remove the mark" in res.message for res in r.results)
    assert three.marked("od-0") and three.marked("od-1"), "left to the next leader's reconciler"
