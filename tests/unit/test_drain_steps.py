"""A drain's steps one at a time (Drainer.start, advance, interrupt), and many drains advanced by one loop.

The loop's own passes are called by the test (``step_cycle``, ``advance_drains``), never left to run on a timer:
each assertion is made on a state the test brought about, after the watch has shown it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from rescheduler.cluster.drain import FREE_AGAIN, Drain, DrainOutcome, DrainResult, Phase
from rescheduler.cluster.drain_queue import project_drains
from rescheduler.cluster.watch_cache import NODES, PODS, ClusterState
from rescheduler.plan.drain_marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION
from rescheduler.plan.labels import DrainLabel
from rescheduler.run import Rescheduler, RunOptions
from shared.config import Config, parse_config
from shared.model import Pod
from shared.placeholders import NODE_ANNOTATION, PLACEHOLDER_LABEL, REQUEST_LABEL
from tests.support.fake_api import FakeApiServer, namespace, node, pdb, pod
from tests.unit.test_drain import Cluster, populate

# --- one drain, step by step ----------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


def not_ready_replacements(c: Cluster) -> list[str]:
    """Play the ReplicaSet: each evicted pod gets a replacement on spot-1, Running but not yet Ready."""
    made: list[str] = []

    def on_evict(evicted: dict[str, Any]) -> None:
        name = f"{evicted['metadata']['name']}-new"
        new = pod(name, "spot-1", app=evicted["metadata"]["labels"]["app"], ready=False)
        new["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
        c.server.put("pods", new)
        made.append(f"default/{name}")

    c.server.on_evict = on_evict
    return made


def make_ready(c: Cluster, keys: list[str]) -> None:
    for key in keys:
        obj = c.server.get_obj("pods", key)
        assert obj is not None
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        c.server.put("pods", obj)


def seen(c: Cluster, check: Any) -> None:
    assert c.state.wait_until(check, 5), "the watch never showed the change"


def test_start_marks_the_node_and_hands_back_a_drain_that_has_not_evicted_yet(cluster: Cluster) -> None:
    keys = populate(cluster, budget=None)
    drain = cluster.drainer.start("od-1", keys)
    assert isinstance(drain, Drain) and drain.phase is Phase.EVICTING
    assert cluster.server.evictions == []
    assert cluster.node_obj("od-1")["metadata"]["annotations"][STATE_ANNOTATION] == "draining"


def test_advance_goes_as_far_as_it_can_and_waits_for_the_replacements(cluster: Cluster) -> None:
    keys = populate(cluster, budget=None)
    made = not_ready_replacements(cluster)
    drain = cluster.drainer.start("od-1", keys)
    assert isinstance(drain, Drain)

    assert cluster.drainer.advance(drain) is None
    assert sorted(k for k, _ in cluster.server.evictions) == keys, "every pod evicted in one step"
    seen(cluster, lambda: all(k not in cluster.state.pods for k in keys) and all(k in cluster.state.pods for k in made))
    assert cluster.drainer.advance(drain) is None
    assert drain.phase is Phase.REPLACING, "the pods are gone; the replacements are not Ready"
    assert cluster.drainer.advance(drain) is None, "nothing changed: still waiting, nothing done twice"
    assert len(cluster.server.evictions) == len(keys)

    make_ready(cluster, made)
    seen(cluster, lambda: all(cluster.state.pods[k].ready for k in made))
    result = cluster.drainer.advance(drain)
    assert isinstance(result, DrainResult) and result.outcome == DrainOutcome.SUCCEEDED
    assert cluster.node_obj("od-1")["metadata"]["annotations"][STATE_ANNOTATION] == "drained"


def one_budget(c: Cluster, pods: int) -> None:
    """od-1 holds ``pods`` pods of web, whose budget allows one disruption now; spot-1 has room for them."""
    c.server.put("nodes", node("od-1", cpu="4"))
    c.server.put("nodes", node("spot-1", spot=True, cpu="8"))
    for i in range(pods):
        c.server.put("pods", pod(f"web-{i}", "od-1", app="web", owner="rs-web"))
    c.server.put("pdbs", pdb("web", "web", allowed=1))
    c.start()


def test_a_budget_allowing_one_paces_the_second_eviction_until_the_first_replacement_is_ready(cluster: Cluster) -> None:
    one_budget(cluster, 2)
    made = not_ready_replacements(cluster)
    drain = cluster.drainer.start("od-1", ["default/web-0", "default/web-1"])
    assert isinstance(drain, Drain)

    assert cluster.drainer.advance(drain) is None
    assert [k for k, _ in cluster.server.evictions] == ["default/web-0"], "the budget refused the second (429)"
    assert drain.phase is Phase.EVICTING and len(drain.tries) == 1
    # The disruption controller's part: the replacement is Ready, the budget allows one again.
    make_ready(cluster, made)
    budget = cluster.server.get_obj("pdbs", "default/web")
    assert budget is not None
    budget["status"]["disruptionsAllowed"] = 1
    cluster.server.put("pdbs", budget)
    seen(cluster, lambda: next(iter(cluster.state.pdbs.values())).disruptions_allowed == 1)
    assert cluster.drainer.advance(drain) is None
    assert [k for k, _ in cluster.server.evictions] == ["default/web-0", "default/web-1"], (
        "the watched budget let the retry go before its backoff ran out"
    )


def test_interrupt_removes_the_mark_and_says_how_far_it_got(cluster: Cluster) -> None:
    keys = populate(cluster, budget=None)
    not_ready_replacements(cluster)
    drain = cluster.drainer.start("od-1", keys)
    assert isinstance(drain, Drain)
    cluster.drainer.advance(drain)

    result = cluster.drainer.interrupt(drain)
    assert (result.outcome, result.reason) == (DrainOutcome.FAILED, "interrupted")
    assert sorted(result.evicted) == keys
    assert STATE_ANNOTATION not in (cluster.node_obj("od-1")["metadata"].get("annotations") or {})
    assert not cluster.node_obj("od-1")["spec"].get("taints")


def test_a_replacement_that_never_gets_ready_times_out_on_the_drainers_clock(cluster: Cluster) -> None:
    keys = populate(cluster, budget=None)
    not_ready_replacements(cluster)
    now = [0.0]
    cluster.drainer.clock = lambda: now[0]
    drain = cluster.drainer.start("od-1", keys)
    assert isinstance(drain, Drain)
    cluster.drainer.advance(drain)
    seen(cluster, lambda: all(k not in cluster.state.pods for k in keys))
    assert cluster.drainer.advance(drain) is None and drain.phase is Phase.REPLACING
    now[0] = cluster.config.rescheduler.replacement_timeout + 1
    result = cluster.drainer.advance(drain)
    assert result is not None and result.reason == "replacement-timeout"


# --- the pods of the drains in flight, counted where they are going ---------------------------------------------


def with_uid(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    obj["metadata"]["uid"] = uid
    return obj


def test_the_next_plan_counts_a_drains_pods_at_their_targets() -> None:
    state = ClusterState()
    state.replace(NODES, [node("od-1"), node("spot-1", spot=True)])
    state.replace(
        PODS,
        [
            with_uid(pod("a", "od-1", app="a", owner="rs-a"), "uid-a"),
            with_uid(pod("b", "od-1", app="b", owner="rs-b"), "uid-b"),
        ],
    )
    pods = [state.pods["default/a"], state.pods["default/b"]]
    drain = Drain("od-1", None, tuple(pods), {"default/a": "spot-1", "default/b": "spot-1"}, Phase.EVICTING, 0.0)  # type: ignore[arg-type]
    # b was evicted and is gone; its replacement is not bound yet.
    drain.evicted.append(pods[1])
    drain.need = {"uid-rs-a": 1, "uid-rs-b": 1}
    drain.before = {"uid-rs-a": {pods[0].uid}, "uid-rs-b": {pods[1].uid}}
    state.apply(PODS, "DELETED", pod("b", "od-1", app="b", owner="rs-b"))

    snapshot = state.snapshot()
    project_drains(snapshot, [drain], state)

    on_spot = sorted(p.name for p in snapshot["spot-1"].pods)
    assert on_spot == ["a", "b.in-flight"], "a moved ahead of its eviction, b stands in until its replacement binds"
    assert [p.name for p in snapshot["od-1"].pods] == []


def test_a_bound_replacement_needs_no_stand_in() -> None:
    state = ClusterState()
    state.replace(NODES, [node("od-1"), node("spot-1", spot=True)])
    gone = Pod.from_api(with_uid(pod("b", "od-1", app="b", owner="rs-b"), "uid-b"))
    state.replace(PODS, [with_uid(pod("b-new", "spot-1", app="b", owner="rs-b"), "uid-b-new")])
    drain = Drain("od-1", None, (gone,), {"default/b": "spot-1"}, Phase.REPLACING, 0.0)  # type: ignore[arg-type]
    drain.evicted.append(gone)
    drain.need, drain.before = {"uid-rs-b": 1}, {"uid-rs-b": {gone.uid}}

    snapshot = state.snapshot()
    project_drains(snapshot, [drain], state)
    assert sorted(p.name for p in snapshot["spot-1"].pods) == ["b-new"]


# --- the room: placeholders in the way of the first eviction ------------------------------------------------------


def placeholder(name: str, node_name: str, *, holds_for: str, request: str = "r") -> dict[str, Any]:
    """A placeholder in spotshift's namespace holding room for ``holds_for``'s pods, bound to ``node_name``
    (``""``: waiting for a node)."""
    obj = pod(name, node_name, namespace="spotshift", owner=None, phase="Running" if node_name else "Pending")
    obj["metadata"]["labels"] = {PLACEHOLDER_LABEL: holds_for, REQUEST_LABEL: request}
    obj["metadata"]["annotations"] = {NODE_ANNOTATION: holds_for}
    return obj


def with_placeholders(c: Cluster) -> list[str]:
    """od-1's two pods (planned onto spot-1) and four placeholders: od-1's own on spot-1, od-2's on spot-1 and
    waiting for a node (both in the way), and od-2's on spot-2 (not in the way). Returns od-1's pod keys."""
    c.server.put("namespaces", namespace("spotshift"))
    c.server.put("nodes", node("spot-2", spot=True, cpu="8"))
    c.server.put("pods", placeholder("own", "spot-1", holds_for="od-1", request="r1"))
    c.server.put("pods", placeholder("on-target", "spot-1", holds_for="od-2", request="r2"))
    c.server.put("pods", placeholder("waiting", "", holds_for="od-2", request="r2"))
    c.server.put("pods", placeholder("elsewhere", "spot-2", holds_for="od-2", request="r2"))
    return populate(c, budget=None)


IN_THE_WAY = {"spotshift/own", "spotshift/on-target", "spotshift/waiting"}


def test_no_eviction_until_the_watch_shows_the_placeholders_in_the_way_gone(cluster: Cluster) -> None:
    keys = with_placeholders(cluster)
    now = [100.0]
    cluster.drainer.clock = lambda: now[0]
    cluster.server.fail("DELETE", r"/namespaces/spotshift/pods/", 403, 403, 403)  # the first attempt fails
    drain = cluster.drainer.start("od-1", keys, dict.fromkeys(keys, "spot-1"))
    assert isinstance(drain, Drain) and drain.phase is Phase.FREEING
    assert {p.key for p in drain.to_evict} == set(keys), "the next plan counts them at their targets"
    assert cluster.drainer.advance(drain) is None and drain.phase is Phase.FREEING
    assert cluster.server.evictions == [], "the room is still held: nothing evicted"

    now[0] += FREE_AGAIN  # asked again: the deletes go through now
    assert cluster.drainer.advance(drain) is None
    assert cluster.server.evictions == [], "the watch has not shown them gone yet"
    seen(cluster, lambda: not IN_THE_WAY & set(cluster.state.pods))
    assert cluster.drainer.advance(drain) is None and drain.phase is not Phase.FREEING
    assert sorted(k for k, _ in cluster.server.evictions) == keys
    assert cluster.server.get_obj("pods", "spotshift/elsewhere") is not None, "not in the way: left alone"
    deletes = [path for method, path, _ in cluster.server.requests if method == "DELETE"]
    first_eviction = next(i for i, (m, path, _) in enumerate(cluster.server.requests) if path.endswith("/eviction"))
    assert all(i < first_eviction for i, (m, _, _) in enumerate(cluster.server.requests) if m == "DELETE"), deletes


def test_placeholders_that_never_go_end_the_drain_with_nothing_evicted(cluster: Cluster) -> None:
    keys = with_placeholders(cluster)
    now = [100.0]
    cluster.drainer.clock = cluster.drainer.evictor.clock = lambda: now[0]
    cluster.server.fail("DELETE", r"/namespaces/spotshift/pods/", *[403] * 30)
    drain = cluster.drainer.start("od-1", keys, dict.fromkeys(keys, "spot-1"))
    assert isinstance(drain, Drain) and drain.phase is Phase.FREEING
    now[0] += cluster.config.rescheduler.pod_eviction_timeout - 0.1
    assert cluster.drainer.advance(drain) is None
    now[0] += 0.1
    result = cluster.drainer.advance(drain)
    assert isinstance(result, DrainResult) and result.outcome == DrainOutcome.FAILED
    assert result.reason == DrainLabel.ROOM_NOT_FREED == "room-not-freed" and result.evicted == ()
    assert "3 placeholder pod(s) still hold or could take the spot room" in result.message, result.message
    assert cluster.server.evictions == []
    annotations = cluster.node_obj("od-1")["metadata"].get("annotations") or {}
    assert STATE_ANNOTATION not in annotations and BACKOFF_UNTIL_ANNOTATION in annotations
    assert (
        cluster.metrics.registry.get_sample_value(
            "spotshift_rescheduler_drains_failed_total", {"reason": "room-not-freed"}
        )
        == 1
    )


def test_with_nothing_in_the_way_the_drain_goes_straight_to_its_evictions(cluster: Cluster) -> None:
    cluster.server.put("namespaces", namespace("spotshift"))
    cluster.server.put("nodes", node("spot-2", spot=True, cpu="8"))
    cluster.server.put("pods", placeholder("elsewhere", "spot-2", holds_for="od-2"))
    keys = populate(cluster, budget=None)
    drain = cluster.drainer.start("od-1", keys, dict.fromkeys(keys, "spot-1"))
    assert isinstance(drain, Drain) and drain.phase is Phase.EVICTING
    assert [m for m, path, _ in cluster.server.requests if m == "DELETE"] == []


# --- many drains, one loop --------------------------------------------------------------------------------------


def world(on_demand: int) -> FakeApiServer:
    """``on_demand`` nodes with one pod each, room for all on spot-1; replacements Running, not Ready."""
    server = FakeApiServer()
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("spot-1", spot=True, cpu="64"))
    for i in range(on_demand):
        server.put("nodes", node(f"od-{i}", cpu="2"))
        server.put("pods", pod(f"w{i}-0", f"od-{i}", app=f"w{i}", owner=f"rs-{i}"))

    def on_evict(evicted: dict[str, Any]) -> None:
        new = pod(evicted["metadata"]["name"] + "-new", "spot-1", app=evicted["metadata"]["labels"]["app"], ready=False)
        new["metadata"]["ownerReferences"] = evicted["metadata"]["ownerReferences"]
        server.put("pods", new)

    server.on_evict = on_evict
    return server


def budgeted(nodes: str, *, per_cycle: int, delay: float = 0.0) -> Config:
    base = parse_config({"disruption": {"budgets": [{"nodes": nodes}]}})
    return replace(
        base,
        rescheduler=replace(
            base.rescheduler, leader_elect=False, max_nodes_per_cycle=per_cycle, node_drain_delay=delay
        ),
    )


class Loop:
    """A Rescheduler whose passes the test makes, on a clock the test moves."""

    def __init__(self, server: FakeApiServer, config: Config) -> None:
        self.server = server
        self.now = [0.0]
        self.r = Rescheduler(
            server, config, RunOptions(identity="me"), stop=threading.Event(), clock=lambda: self.now[0]
        )
        self.r.start_informers()
        assert self.r.state.wait_synced(5)

    def marked(self) -> set[str]:
        return {
            n["metadata"]["name"]
            for n in self.server.store["nodes"].values()
            if (n["metadata"].get("annotations") or {}).get(STATE_ANNOTATION) == "draining"
        }

    def settle(self) -> None:
        """Until the watch shows what the API server has: every pod (the replacements of every eviction so far) and
        every node's drain state."""
        pods = set(self.server.store["pods"])
        marks = {
            n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
            for n in self.server.store["nodes"].values()
        }

        def shown() -> bool:
            state = self.r.state
            return set(state.pods) == pods and all(
                name in state.nodes and state.nodes[name].annotations.get(STATE_ANNOTATION) == mark
                for name, mark in marks.items()
            )

        assert self.r.state.wait_until(shown, 5)

    def ready_all(self) -> None:
        make_ready_server(self.server)
        self.settle()
        assert self.r.state.wait_until(lambda: all(p.ready for p in self.r.state.pods.values()), 5)

    def close(self) -> None:
        self.r.stop_informers()
        self.server.close()


Loops = Callable[[FakeApiServer, Config], "Loop"]


@pytest.fixture
def loops() -> Iterator[Loops]:
    """Makes :class:`Loop` objects, each closed after the test."""
    made: list[Loop] = []

    def make(server: FakeApiServer, config: Config) -> Loop:
        made.append(Loop(server, config))
        return made[-1]

    yield make
    for loop in made:
        loop.close()


def make_ready_server(server: FakeApiServer) -> None:
    for obj in list(server.store["pods"].values()):
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in obj["status"]["conditions"]):
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            server.put("pods", obj)


def test_a_budget_of_half_the_nodes_keeps_that_many_drains_in_flight(loops: Loops) -> None:
    loop = loops(world(4), budgeted("50%", per_cycle=4))
    loop.r.step_cycle()
    assert set(loop.r.drains) == {"od-0", "od-1"} == loop.marked(), "two of four at once"
    loop.r.advance_drains()
    loop.settle()
    loop.r.advance_drains()
    assert len(loop.r.drains) == 2, "both wait for their replacements"
    loop.r.step_cycle()
    assert len(loop.r.drains) == 2, "the budget is full: nothing more starts"
    loop.ready_all()
    loop.r.advance_drains()
    assert [res.outcome for res in loop.r.results] == [DrainOutcome.SUCCEEDED] * 2 and loop.r.drains == {}
    loop.settle()
    loop.r.step_cycle()
    assert set(loop.r.drains) == {"od-2", "od-3"}


def test_max_nodes_per_cycle_caps_the_starts_of_one_cycle(loops: Loops) -> None:
    loop = loops(world(4), budgeted("4", per_cycle=1))
    loop.r.step_cycle()
    assert len(loop.r.drains) == 1
    loop.r.step_cycle()
    assert len(loop.r.drains) == 2


def test_a_finished_drain_keeps_its_place_for_the_node_drain_delay(loops: Loops) -> None:
    loop = loops(world(3), budgeted("1", per_cycle=1, delay=60.0))
    loop.r.step_cycle()
    loop.r.advance_drains()
    loop.ready_all()
    loop.r.advance_drains()
    assert loop.r.drains == {} and len(loop.r.results) == 1
    loop.settle()
    loop.r.step_cycle()
    assert loop.r.drains == {}, "the place is cooling"
    loop.now[0] += 61
    loop.r.step_cycle()
    assert len(loop.r.drains) == 1


def test_shutdown_rolls_back_every_drain_in_flight(loops: Loops) -> None:
    loop = loops(world(3), budgeted("3", per_cycle=3))
    loop.r.step_cycle()
    assert len(loop.marked()) == 3
    loop.r.interrupt_drains()
    assert loop.marked() == set() and loop.r.drains == {}
    assert sorted(res.reason for res in loop.r.results) == ["interrupted"] * 3


def test_each_eviction_that_goes_through_gives_the_refused_ones_the_timeout_again(cluster: Cluster) -> None:
    one_budget(cluster, 3)
    now = [0.0]
    cluster.drainer.clock = cluster.drainer.evictor.clock = lambda: now[0]
    made = not_ready_replacements(cluster)
    drain = cluster.drainer.start("od-1", [f"default/web-{i}" for i in range(3)])
    assert isinstance(drain, Drain)
    cluster.drainer.advance(drain)
    timeout = cluster.config.rescheduler.pod_eviction_timeout
    assert {t.deadline for t in drain.tries} == {timeout}

    now[0] = timeout - 0.5  # just before the two refused ones would time out, the budget allows one again
    make_ready(cluster, made)
    budget = cluster.server.get_obj("pdbs", "default/web")
    assert budget is not None
    budget["status"]["disruptionsAllowed"] = 1
    cluster.server.put("pdbs", budget)
    seen(cluster, lambda: next(iter(cluster.state.pdbs.values())).disruptions_allowed == 1)
    cluster.drainer.advance(drain)
    assert len(cluster.server.evictions) == 2 and len(drain.tries) == 1
    assert drain.tries[0].deadline == now[0] + timeout, "the last pod waits its turn, not the node's whole drain"
