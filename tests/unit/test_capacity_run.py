"""Capacity mode in the run loop, over the in-memory API server (tests/support/fake_api.py): placeholders created,
followed, deleted; nothing of it with the mode off or in dry-run. The real control plane runs the same paths in
tests/e2e/test_capacity_e2e.py."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import pytest

from rescheduler.cluster.capacity_requests import CapacityRequester
from rescheduler.cluster.events import EventRecorder
from rescheduler.cluster.watch_cache import NODES, PODS, ClusterState
from rescheduler.metrics import Metrics
from rescheduler.plan.planner import plan
from rescheduler.run import Rescheduler, RunOptions
from shared.config import CapacityConfig, Config
from shared.kube.api import Kube
from shared.placeholders import PLACEHOLDER_LABEL, REQUEST_LABEL
from tests.support.fake_api import FakeApiServer, namespace, node, pod
from tests.unit.test_run import fast

BACKOFF = "spotshift.io/drain-backoff-until"


def no_room() -> FakeApiServer:
    """One on-demand node with two movable pods, one spot node with no room for them."""
    server = FakeApiServer(eviction_version="v1beta1", pdb_version="v1beta1")
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("od-1", cpu="4"))
    server.put("nodes", node("spot-1", spot=True, cpu="100m"))
    for i in range(2):
        server.put("pods", pod(f"web-{i}", "od-1", app="web", owner="rs-web", cpu="500m"))
    return server


def leftover(name: str, request: str = "old") -> dict[str, Any]:
    p = pod(name, "", namespace="spotshift", owner=None, phase="Pending")
    p["metadata"]["labels"] = {PLACEHOLDER_LABEL: "od-1", REQUEST_LABEL: request}
    p["metadata"]["annotations"] = {"spotshift.io/placeholder-node": "od-1"}
    return p


def run_once(server: FakeApiServer, *flags: str, env: dict[str, str] | None = None) -> Rescheduler:
    from rescheduler.flags import config_from_args
    from tests.unit.test_run import args

    config = config_from_args(
        args("--max-graceful-termination=2s", "--replacement-timeout=5s", "--node-drain-delay=0s", *flags), env or {}
    )
    r = Rescheduler(server, config, RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    return r


def pod_writes(server: FakeApiServer) -> list[tuple[str, str]]:
    return [
        (method, path)
        for method, path, _ in server.requests
        if method in ("POST", "DELETE") and "/pods" in path and "/eviction" not in path
    ]


def sample(r: Rescheduler, outcome: str) -> float:
    return r.metrics.registry.get_sample_value("spotshift_rescheduler_capacity_requests_total", {"outcome": outcome})


def test_with_the_mode_off_no_placeholder_is_made_and_the_cycle_is_unchanged() -> None:
    server = no_room()
    r = run_once(server, env={"SPOTSHIFT_CAPACITY_ENABLED": "false"})
    assert pod_writes(server) == []
    assert r.results == [] and r.plans.last_decision is not None and r.plans.last_decision.drains == ()
    assert r.parts.capacity.requests == {}


def test_the_mode_is_on_by_default() -> None:
    assert fast().capacity.enabled
    server = no_room()
    r = run_once(server)
    assert [path for method, path in pod_writes(server) if method == "POST"] == [
        "/api/v1/namespaces/spotshift/pods"
    ] * 2
    assert list(r.parts.capacity.requests) == [] and sample(r, "requested") == 1, "asked, and deleted on exit"


def test_the_mode_asks_for_the_nodes_room_with_placeholders_owned_by_the_lease_and_deletes_them_on_exit() -> None:
    server = no_room()
    r = run_once(server, env={"SPOTSHIFT_CAPACITY_ENABLED": "true"})
    posts = [(path, body) for method, path, body in server.requests if method == "POST" and path.endswith("/pods")]
    assert [path for path, _ in posts] == ["/api/v1/namespaces/spotshift/pods"] * 2
    lease = server.get_obj("leases", "spotshift/spotshift-rescheduler")
    assert lease is not None
    for _, body in posts:
        meta = body["metadata"]
        assert meta["labels"][PLACEHOLDER_LABEL] == "od-1"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "name": "spotshift-rescheduler",
                "uid": lease["metadata"]["uid"],
                "controller": True,
            }
        ]
        assert body["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    assert sample(r, "requested") == 1
    # --once exits right after: the placeholders are deleted on the way out, the request ends as deleted.
    assert [m for m, _ in pod_writes(server)] == ["POST", "POST", "DELETE", "DELETE"]
    assert sample(r, "deleted") == 1
    assert not [k for k in server.store["pods"] if k.startswith("spotshift/")]
    reasons = [e["reason"] for e in server.store["events"].values()]
    assert "SpotshiftCapacityRequested" in reasons and "SpotshiftCapacityReleased" in reasons


def test_dry_run_creates_nothing_and_says_what_it_would_ask_for(caplog: Any) -> None:
    server = no_room()
    with caplog.at_level("INFO"):
        r = run_once(server, "--dry-run", env={"SPOTSHIFT_CAPACITY_ENABLED": "true"})
    assert pod_writes(server) == []
    assert [n.node for n in r.parts.capacity.needs] == ["od-1"]
    assert any("dry-run: would ask for spot capacity for node od-1: needs 1 CPU" in m for m in caplog.messages)


def test_placeholders_no_request_owns_are_deleted_with_the_mode_on_or_off() -> None:
    for env in ({"SPOTSHIFT_CAPACITY_ENABLED": "true"}, {}):
        server = no_room()
        server.put("pods", leftover("spotshift-placeholder-old"))
        r = run_once(server, env=env)
        assert ("DELETE", "/api/v1/namespaces/spotshift/pods/spotshift-placeholder-old") in pod_writes(server)
        assert sample(r, "orphaned") == 1
        assert server.get_obj("pods", "spotshift/spotshift-placeholder-old") is None


def test_a_placeholder_the_api_refuses_undoes_the_request_and_pauses_the_mode_not_the_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal (here 403: no PriorityClass, no Role) is the deployment's problem: said loudly, no request for
    ``node_backoff``, and the node is not backed off, so it still drains once spot has free room."""
    server = no_room()
    server.put("nodes", node("od-2", cpu="4"))
    server.put("pods", pod("api-0", "od-2", app="api", owner="rs-api", cpu="500m"))
    server.fail("POST", r"/namespaces/spotshift/pods$", 403)
    with caplog.at_level(logging.ERROR, logger="spotshift.rescheduler.cluster.capacity"):
        r = run_once(server, env={"SPOTSHIFT_CAPACITY_ENABLED": "true"})
    assert sample(r, "create-failed") == 1, "one refusal, then no other node is asked for"
    assert sample(r, "requested") is None
    for name in ("od-1", "od-2"):
        assert BACKOFF not in (server.get_obj("nodes", name)["metadata"].get("annotations") or {})
    assert not [k for k in server.store["pods"] if k.startswith("spotshift/")]
    assert r.parts.capacity.paused_until > r.parts.capacity.clock()
    assert any("capacity mode cannot create placeholder pods" in m for m in caplog.messages), caplog.messages


def closed_window_env() -> dict[str, str]:
    """A budget whose only window opens for one minute twelve hours from now, so it is closed now."""
    hour = time.gmtime(time.time() + 12 * 3600).tm_hour
    return {
        "SPOTSHIFT_CAPACITY_ENABLED": "true",
        "SPOTSHIFT_DISRUPTION_BUDGETS": f'[{{nodes: "1", schedule: "0 {hour} * * *", duration: 1m}}]',
    }


def test_outside_every_drain_window_no_room_is_asked_for() -> None:
    server = no_room()
    r = run_once(server, env=closed_window_env())
    assert r.plans.last_plan is not None and r.plans.last_plan.window_closed
    assert pod_writes(server) == []
    assert r.parts.capacity.requests == {} and sample(r, "requested") is None


def test_outside_every_drain_window_placeholders_no_request_owns_are_still_deleted() -> None:
    server = no_room()
    server.put("pods", leftover("spotshift-placeholder-old"))
    r = run_once(server, env=closed_window_env())
    assert sample(r, "orphaned") == 1
    assert ("DELETE", "/api/v1/namespaces/spotshift/pods/spotshift-placeholder-old") in pod_writes(server)
    assert [m for m, _ in pod_writes(server)] == ["DELETE"]


# ---- the requester on its own, with a clock ------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def requester(server: FakeApiServer, config: Config, clock: Clock) -> tuple[CapacityRequester, ClusterState, list]:
    state = ClusterState()
    backed_off: list[tuple[str, str]] = []
    kube = Kube(server)
    req = CapacityRequester(
        kube,
        state,
        config,
        EventRecorder(kube, host="test"),
        Metrics(),
        dry_run=False,
        back_off=lambda node, why: backed_off.append((node, why)),
        clock=clock,
    )
    return req, state, backed_off


def sync(server: FakeApiServer, state: ClusterState) -> None:
    state.replace(NODES, list(server.store["nodes"].values()))
    state.replace(PODS, list(server.store["pods"].values()))


def cycle(req: CapacityRequester, state: ClusterState) -> None:
    snapshot = state.snapshot()
    result = plan(snapshot, req.config)
    req.step(snapshot, result.reasons, result.drained)


ON = replace(Config(), capacity=CapacityConfig(enabled=True, timeout=60.0))


def test_spot_that_never_comes_times_the_request_out_and_backs_the_node_off() -> None:
    server, clock = no_room(), Clock()
    req, state, backed_off = requester(server, ON, clock)
    sync(server, state)
    cycle(req, state)
    assert len(req.requests["od-1"].names) == 2
    sync(server, state)
    clock.now = 59.0
    cycle(req, state)
    assert "od-1" in req.requests and backed_off == []
    clock.now = 61.0
    sync(server, state)
    cycle(req, state)
    assert req.requests == {}, "ended, and not asked for again in the same cycle"
    assert backed_off == [("od-1", "spot capacity timed-out")]
    assert not [k for k in server.store["pods"] if k.startswith("spotshift/")]


def test_placeholders_running_on_spot_make_the_node_drainable_and_a_new_need_waits_for_the_caps() -> None:
    server, clock = no_room(), Clock()
    small = replace(ON, capacity=replace(ON.capacity, max_pods=2))
    server.put("nodes", node("od-2", cpu="4"))
    server.put("pods", pod("api-0", "od-2", app="api", owner="rs-api", cpu="300m"))
    req, state, _ = requester(server, small, clock)
    sync(server, state)
    cycle(req, state)
    assert list(req.requests) == ["od-2"], "smallest need first; od-1's two pods would pass max_pods"
    # A provisioner adds a spot node and the placeholder runs there.
    server.put("nodes", node("spot-2", spot=True, cpu="1"))
    for key, p in list(server.store["pods"].items()):
        if key.startswith("spotshift/"):
            server.put("pods", {**p, "spec": {**p["spec"], "nodeName": "spot-2"}, "status": {"phase": "Running"}})
    sync(server, state)
    snapshot = state.snapshot()
    result = plan(snapshot, small)
    assert "od-2" in result.drained, "the placeholder's room counts as free"
    req.step(snapshot, result.reasons, result.drained)
    assert req.requests["od-2"].provisioned_at is not None
    assert req.release("od-2") and req.requests == {}
    assert not [k for k in server.store["pods"] if k.startswith("spotshift/")]


def test_give_room_ends_the_nodes_own_request_and_those_in_the_way_and_deletes_the_rest() -> None:
    server, clock = no_room(), Clock()
    server.put("nodes", node("od-2", cpu="4"))
    server.put("nodes", node("od-3", cpu="4"))
    server.put("pods", pod("api-0", "od-2", app="api", owner="rs-api", cpu="300m"))
    server.put("pods", pod("db-0", "od-3", app="db", owner="rs-db", cpu="200m"))
    req, state, backed_off = requester(server, ON, clock)
    sync(server, state)
    cycle(req, state)
    assert sorted(req.requests) == ["od-1", "od-2", "od-3"]
    server.put("pods", leftover("spotshift-placeholder-old"))  # no request of ours owns it
    sync(server, state)
    on_od2 = [p for p in state.pods.values() if p.name in req.requests["od-2"].names]
    old = state.pods["spotshift/spotshift-placeholder-old"]
    before = {k for k in server.store["pods"] if k.startswith("spotshift/")}

    req.give_room("od-1", [*on_od2, old])
    assert list(req.requests) == ["od-3"], "od-3's placeholders were not in the way"
    assert sample(req, "drained") == 1 and sample(req, "deleted") == 1 and backed_off == []
    left = {k for k in server.store["pods"] if k.startswith("spotshift/")}
    assert left == {f"spotshift/{n}" for n in req.requests["od-3"].names} and left < before
    released = [e["message"] for e in server.store["events"].values() if e["reason"] == "SpotshiftCapacityReleased"]
    assert any("its spot room goes to the drain of node od-1" in m for m in released), released
    # The watch still shows the deleted ones: they are not taken for a predecessor's orphans.
    deletes = len([m for m, _ in pod_writes(server) if m == "DELETE"])
    assert req.collect_orphans() == 0 and sample(req, "orphaned") is None
    assert len([m for m, _ in pod_writes(server) if m == "DELETE"]) == deletes
    sync(server, state)
    assert req.collect_orphans() == 0 and req._deleted == set(), "forgotten once the watch shows them gone"


def test_no_new_room_is_asked_for_on_hold() -> None:
    server, clock = no_room(), Clock()
    req, state, _ = requester(server, ON, clock)
    sync(server, state)
    snapshot = state.snapshot()
    result = plan(snapshot, req.config)
    req.step(snapshot, result.reasons, result.drained, hold=True)
    assert [n.node for n in req.needs] == ["od-1"] and req.requests == {}
    assert pod_writes(server) == []
    req.step(snapshot, result.reasons, result.drained)
    assert list(req.requests) == ["od-1"]


# ---- the run loop: a drain and the placeholders around it --------------------------------------------------------


def two_nodes_short_of_room() -> FakeApiServer:
    """od-1 and od-2 with one pod each; no spot room. Each evicted pod gets a replacement on spot-1 (Running, not
    yet Ready)."""
    server = no_room()
    for key in [k for k in server.store["pods"] if k.startswith("default/")]:
        del server.store["pods"][key]
    server.put("pods", pod("web-0", "od-1", app="web", owner="rs-web", cpu="500m"))
    server.put("nodes", node("od-2", cpu="4"))
    server.put("pods", pod("api-0", "od-2", app="api", owner="rs-api", cpu="500m"))

    def on_evict(evicted: dict[str, Any]) -> None:
        meta = evicted["metadata"]
        new = pod(meta["name"] + "-new", "spot-2", app=meta["labels"]["app"], ready=False, cpu="500m")
        new["metadata"]["ownerReferences"] = meta["ownerReferences"]
        server.put("pods", new)

    server.on_evict = on_evict
    return server


def test_a_drain_frees_its_room_of_every_placeholder_that_could_take_it_and_no_new_one_is_asked_for_meanwhile() -> None:
    from tests.unit.test_drain_steps import Loop

    server = two_nodes_short_of_room()
    config = replace(fast(), capacity=CapacityConfig(enabled=True, timeout=600.0))
    config = replace(config, rescheduler=replace(config.rescheduler, leader_elect=False))
    loop = Loop(server, config)
    try:
        r = loop.r
        r.step_cycle()
        assert sorted(r.parts.capacity.requests) == ["od-1", "od-2"]
        # A provisioner adds spot-2 for od-1's placeholder only; od-2's still waits for a node.
        server.put("nodes", node("spot-2", spot=True, cpu="600m"))
        (mine,) = r.parts.capacity.requests["od-1"].names
        waiting = r.parts.capacity.requests["od-2"].names
        obj = server.get_obj("pods", f"spotshift/{mine}")
        server.put("pods", {**obj, "spec": {**obj["spec"], "nodeName": "spot-2"}, "status": {"phase": "Running"}})
        loop.settle()
        loop.now[0] += 1
        r.step_cycle()
        assert list(r.drains) == ["od-1"], "planned onto the placeholder's room"
        assert server.evictions == []
        # od-1's own placeholder and od-2's waiting one were deleted before anything was evicted; od-2's
        # request ends (its room goes to the drain) and is not asked for again while the drain is in flight.
        for name in (mine, *waiting):
            assert server.get_obj("pods", f"spotshift/{name}") is None
        assert r.parts.capacity.requests == {}
        loop.settle()
        r.advance_drains()
        assert [k for k, _ in server.evictions] == ["default/web-0"]
        writes = [(m, path) for m, path, _ in server.requests if "/pods" in path and m in ("POST", "DELETE")]
        first_eviction = writes.index(("POST", "/api/v1/namespaces/default/pods/web-0/eviction"))
        deleted = {path.rsplit("/", 1)[1] for m, path in writes[:first_eviction] if m == "DELETE"}
        assert deleted == {mine, *waiting}
        loop.settle()
        loop.now[0] += 1
        r.step_cycle()
        assert r.parts.capacity.requests == {}, "on hold while od-1's drain is in flight"
        loop.ready_all()
        r.advance_drains()
        assert r.drains == {} and r.results[-1].outcome == "succeeded", r.results
        loop.now[0] += 1
        r.step_cycle()
        assert list(r.parts.capacity.requests) == ["od-2"], "asked for again once no drain is in flight"
    finally:
        r.shutdown()
        loop.close()
