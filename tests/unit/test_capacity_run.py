"""Capacity mode in the run loop, over the in-memory API server (tests/unit/fake_api.py): placeholders created,
followed, deleted; nothing of it with the mode off or in dry-run. The real control plane runs the same paths in
tests/e2e/test_capacity_e2e.py."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from rescheduler.cluster.capacity import CapacityRequester
from rescheduler.cluster.events import EventRecorder
from rescheduler.cluster.kube import Kube
from rescheduler.cluster.state import NODES, PODS, ClusterState
from rescheduler.metrics import Metrics
from rescheduler.plan.planner import plan
from rescheduler.run import Rescheduler, RunOptions
from shared.config import CapacityConfig, Config
from shared.placeholders import PLACEHOLDER_LABEL, REQUEST_LABEL
from tests.unit.fake_api import FakeApiServer, namespace, node, pod
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
    r = run_once(server)
    assert pod_writes(server) == []
    assert r.results == [] and r.last_decision is not None and r.last_decision.drains == ()
    assert r.capacity.requests == {}
    assert not fast().capacity.enabled


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
    assert [n.node for n in r.capacity.needs] == ["od-1"]
    assert any("dry-run: would ask for spot capacity for node od-1: needs 1 CPU" in m for m in caplog.messages)


def test_placeholders_no_request_owns_are_deleted_with_the_mode_on_or_off() -> None:
    for env in ({"SPOTSHIFT_CAPACITY_ENABLED": "true"}, {}):
        server = no_room()
        server.put("pods", leftover("spotshift-placeholder-old"))
        r = run_once(server, env=env)
        assert ("DELETE", "/api/v1/namespaces/spotshift/pods/spotshift-placeholder-old") in pod_writes(server)
        assert sample(r, "orphaned") == 1
        assert server.get_obj("pods", "spotshift/spotshift-placeholder-old") is None


def test_a_placeholder_the_api_refuses_undoes_the_request_and_backs_the_node_off() -> None:
    server = no_room()
    server.fail("POST", r"/namespaces/spotshift/pods$", 403)
    r = run_once(server, env={"SPOTSHIFT_CAPACITY_ENABLED": "true"})
    assert sample(r, "create-failed") == 1
    assert BACKOFF in server.get_obj("nodes", "od-1")["metadata"]["annotations"]
    assert not [k for k in server.store["pods"] if k.startswith("spotshift/")]


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
    assert r.last_plan is not None and r.last_plan.window_closed
    assert pod_writes(server) == []
    assert r.capacity.requests == {} and sample(r, "requested") is None


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
