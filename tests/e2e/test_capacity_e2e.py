"""Capacity mode on the real control plane: placeholder pods ask a node provisioner for spot room.

The provisioner is the stand-in of ``provisioner.py`` (what cluster-autoscaler or Karpenter would do: a Ready
spot node for pending pods that require spot, after a delay, or never). The placeholders carry the
PriorityClass shipped in deploy/base/rescheduler, so the real kube-scheduler preempts them for workload
pods. Each test ends with no placeholder left in the namespace, checked by label.

* (a) an on-demand node is emptied onto newly provisioned spot capacity;
* (b) spot never appears: the placeholders are gone after ``capacity.timeout``, the node untouched and backed off;
* (c) a workload pod preempts a placeholder: the request ends as ``preempted``;
* (d) a rescheduler killed mid-request leaves placeholders its successor deletes (and its own on a clean exit);
* (e) every spot node reclaimed, on-demand nodes added for the lost pods, spot back: every pod moves back to spot
  once, no move lands on on-demand, and the on-demand nodes of the outage are emptied.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.controlplane import wait_for
from tests.support.provisioner import PoolProvisioner, Provisioner
from tests.support.rescheduler_world import (
    BudgetWatcher,
    NodeWatcher,
    Rescheduler,
    World,
    cleanup_rbac,
    pod_nodes,
    service_account_kubeconfig,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("capacity_priority_class")]

PLACEHOLDER_LABEL = "spotshift.io/placeholder-for"
BACKOFF_ANNOTATION = "spotshift.io/drain-backoff-until"


def capacity_config(world: World, timeout: str = "60s", lease_name: str | None = None, **capacity: Any) -> Path:
    path = world.config(**({"lease_name": lease_name} if lease_name else {}))
    data = yaml.safe_load(path.read_text())
    data["capacity"] = {"timeout": timeout, **capacity}  # the mode on, as by default
    path.write_text(yaml.safe_dump(data))
    return path


def placeholders(world: World) -> list[dict[str, Any]]:
    return world.plane.pods(world.ns, PLACEHOLDER_LABEL)


def live_placeholders(world: World) -> list[dict[str, Any]]:
    return [p for p in placeholders(world) if not p["metadata"].get("deletionTimestamp")]


def none_left(world: World, timeout: float = 60) -> None:
    wait_for(lambda: not placeholders(world), timeout=timeout, what="no placeholder pod left (by label)")


def outcome(r: Rescheduler, name: str) -> float:
    return r.metric("spotshift_rescheduler_capacity_requests_total", f'{{outcome="{name}"}}') or 0.0


def capacity_events(world: World, reason: str) -> list[str]:
    return [e["message"] for e in world.events(reason)]


def web(world: World, replicas: int = 2, cpu: str = "500m") -> str:
    od = world.on_demand()
    world.deployment(
        "web",
        replicas,
        containers=[{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu}}}],
    )
    pods = world.ready("web")
    assert set(pod_nodes(pods).values()) == {od}, pod_nodes(pods)
    return od


@pytest.fixture
def provisioner(world: World) -> Iterator[Callable[..., Provisioner]]:
    made: list[Provisioner] = []

    def make(**kwargs: Any) -> Provisioner:
        p = Provisioner(world, **kwargs)
        p.start()
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_an_on_demand_node_is_emptied_onto_newly_provisioned_spot_capacity(
    world: World,
    budgets: BudgetWatcher,
    start: Callable[..., Rescheduler],
    provisioner: Callable[..., Provisioner],
    tmp_path: Path,
) -> None:
    od = web(world)
    cloud = provisioner(mode="auto", delay=2.0)
    # As deployed: the rescheduler's ServiceAccount with the base RBAC, capacity mode's Role included.
    kubeconfig = service_account_kubeconfig(world.plane, world.ns, tmp_path, world.label)
    try:
        # The shipped Role grants get/update on the shipped Lease name only (the placeholders' owner).
        r = start(capacity_config(world, lease_name="spotshift-rescheduler"), kubeconfig=kubeconfig)
        r.wait_logged("drained node", timeout=180)
        (spot,) = cloud.added
        moved = world.pods("web")
        assert len(moved) == 2 and {p["spec"]["nodeName"] for p in moved} == {spot}, pod_nodes(moved)
        assert len(cloud.seen) == 2, "one placeholder per pod of the node"
        assert outcome(r, "requested") == 1 and outcome(r, "provisioned") == 1 and outcome(r, "drained") == 1
        assert outcome(r, "timed-out") == 0 and outcome(r, "preempted") == 0
        assert r.metric("spotshift_rescheduler_drains_succeeded_total") == 1
        (requested,) = capacity_events(world, "SpotshiftCapacityRequested")
        assert "the node needs 1 CPU / 0 GiB on spot" in requested, requested
        assert capacity_events(world, "SpotshiftCapacityProvisioned")
        assert any(m.startswith("drained:") for m in capacity_events(world, "SpotshiftCapacityReleased"))
        assert od in world.nodes
        none_left(world)
        assert not r.refused_by_rbac(), "RBAC refused a verb the loop uses"
    finally:
        cleanup_rbac(world.plane, world.label)


def test_without_spot_capacity_the_placeholders_go_after_the_timeout_and_the_node_is_backed_off(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], provisioner: Callable[..., Provisioner]
) -> None:
    od = web(world)
    before = pod_nodes(world.pods("web"))
    cloud = provisioner(mode="never")
    watcher = NodeWatcher(world.plane, [od])
    watcher.start()
    try:
        r = start(capacity_config(world, timeout="6s"))
        wait_for(lambda: len(cloud.seen) == 2, timeout=60, what="two placeholders pending for spot")
        wait_for(lambda: outcome(r, "timed-out") == 1, timeout=60, what="the request to time out")
        none_left(world)
        node = world.node(od)
        assert BACKOFF_ANNOTATION in node["metadata"].get("annotations", {}), node["metadata"]
        assert world.events("SpotshiftNodeBackoff"), "the backoff is recorded on the node"
        (failed,) = capacity_events(world, "SpotshiftCapacityFailed")
        assert failed.startswith("timed-out: spot capacity did not appear within 6s"), failed
        assert r.logged("spot capacity for node")
        # Backed off: no new request in the cycles that follow (the backoff lasts 30m by default).
        cycles = len(r.logged("plan: "))
        wait_for(lambda: len(r.logged("plan: ")) >= cycles + 3, timeout=60, what="three more cycles")
        assert outcome(r, "requested") == 1 and not placeholders(world)
    finally:
        touched = watcher.close()
    assert touched == {}, f"the node was touched: {touched}"
    assert pod_nodes(world.pods("web")) == before, "the pods stayed where they were"
    assert cloud.added == []


def test_a_placeholder_is_preempted_by_a_workload_pod_that_needs_its_room(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], provisioner: Callable[..., Provisioner]
) -> None:
    web(world)
    cloud = provisioner(mode="manual")
    # A budget of no node at a time keeps the node from draining onto the placeholders' room before the workload
    # pod below needs that room; the request goes on meanwhile (a node the budget holds still wants its room).
    config = capacity_config(world)
    data = yaml.safe_load(config.read_text())
    data["disruption"] = {"budgets": [{"nodes": "0"}]}
    config.write_text(yaml.safe_dump(data))
    r = start(config)
    wait_for(lambda: len(cloud.pending()) == 2, timeout=60, what="two placeholders pending for spot")
    pods = f"/api/v1/namespaces/{world.ns}/pods"
    spot = cloud.provision()
    assert spot is not None
    wait_for(
        lambda: len([p for p in live_placeholders(world) if (p.get("status") or {}).get("phase") == "Running"]) == 2,
        timeout=60,
        what="both placeholders Running on the new spot node",
    )
    # The spot node has 200m left; this pod needs 600m: the scheduler preempts a placeholder for it.
    world.plane.api.post(
        pods,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hungry"},
            "spec": {
                "nodeSelector": {world.spot_key: "true"},
                "containers": [
                    {"name": "c", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "600m"}}}
                ],
            },
        },
    )
    wait_for(
        lambda: world.plane.api.get(f"{pods}/hungry")["spec"].get("nodeName") == spot,
        timeout=90,
        what="the workload pod to be scheduled onto the placeholders' room",
    )
    wait_for(lambda: outcome(r, "preempted") == 1, timeout=60, what="the request to end as preempted")
    (failed,) = capacity_events(world, "SpotshiftCapacityFailed")
    assert failed.startswith("preempted: placeholder"), failed
    none_left(world)
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    # Stopped while the budget still holds the node; a clean exit leaves no placeholder of any later request either.
    r.close()
    none_left(world)


def test_a_rescheduler_restarted_mid_request_leaves_no_orphan_placeholders(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], provisioner: Callable[..., Provisioner]
) -> None:
    web(world)
    cloud = provisioner(mode="never")
    config = capacity_config(world, timeout="10m")
    first = start(config, name="first")
    wait_for(lambda: len(live_placeholders(world)) == 2, timeout=60, what="the first rescheduler's placeholders")
    orphans = {p["metadata"]["name"] for p in live_placeholders(world)}
    first.signal(signal.SIGKILL)  # no chance to clean up
    assert first.wait(30) == -signal.SIGKILL
    assert {p["metadata"]["name"] for p in live_placeholders(world)} == orphans, "left behind by the crash"

    second = start(config, name="second")
    second.wait_logged("spot capacity for node", timeout=90)
    wait_for(
        lambda: not orphans & {p["metadata"]["name"] for p in placeholders(world)},
        timeout=60,
        what="the successor to delete its predecessor's placeholders",
    )
    assert outcome(second, "orphaned") == 1
    assert capacity_events(world, "SpotshiftCapacityReleased")
    # The successor asks again for itself; on a clean exit it deletes its own.
    wait_for(lambda: len(live_placeholders(world)) == 2, timeout=60, what="the successor's own placeholders")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0
    none_left(world)
    assert cloud.added == []


def _on(world: World, classes: dict[str, str], cls: str, apps: list[str]) -> dict[str, str]:
    """Pod name → node of the apps' pods, Running and Ready, when every one runs on a node of class ``cls``."""
    pods = [p for app in apps for p in world.pods(app)]
    ready = [
        p
        for p in pods
        if any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])
    ]
    return pod_nodes(pods) if ready == pods and all(classes.get(n) == cls for n in pod_nodes(pods).values()) else {}


def test_after_a_reclaim_every_pod_moves_back_to_spot_once_and_no_move_lands_on_on_demand(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    """The churn trial, compressed: 24 pods behind PodDisruptionBudgets on spot; every spot node reclaimed; a
    provisioner that adds nodes only for pending pods adds on-demand ones; spot comes back. The placeholders are
    all that makes it add spot room, and the drains onto that room race nothing: each pod is evicted once, its
    replacement runs on spot, no drain fails, and every on-demand node of the outage ends empty. spotshift's
    namespace is its own here, as deployed: the placeholders carry their pods' labels, which the workloads'
    budgets would otherwise select."""
    home = f"{world.ns}-spotshift"
    world.plane.create_namespace(home)
    cloud = PoolProvisioner(world, delay=2.0, node_cpu=900, headroom_cpu=600, namespaces=(world.ns, home))
    cloud.start()
    try:
        spots = [world.spot(allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"}) for _ in range(2)]
        classes = dict.fromkeys(spots, "spot")
        apps = [f"app{i}" for i in range(4)]
        app = {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "150m"}}}
        for name in apps:
            world.deployment(name, 6, annotations={"e2e.spotshift.io/ready-after": "3"}, containers=[app])
            world.pdb(name, name, maxUnavailable=1)
        wait_for(lambda: _on(world, classes, "spot", apps), timeout=120, what="24 pods Ready on spot")
        # Placeholders for one node's pods at a time: the next node's are asked for as soon as a drain starts, or,
        # since the budgets pace each drain (one pod of a Deployment at a time, Ready 3 s after it runs), while
        # it is in flight: they are what could take the room the drain freed.
        config = capacity_config(world, timeout="10m", max_pods=10)
        # The reclaim below makes the spot pool unsettled for ``spot.stability_window``, compressed like the trial.
        data = {**yaml.safe_load(config.read_text()), "namespace": home, "spot": {"stability_window": "20s"}}
        config.write_text(yaml.safe_dump(data))
        r = start(config)
        r.wait_logged("plan: ", timeout=60)

        # Every spot node reclaimed at once: their pods are lost and wait for a node; the pool has no spot.
        cloud.spot_available = False
        world.plane.delete_nodes(spots)
        wait_for(
            lambda: (r.metric("spotshift_rescheduler_spot_reclaims_total") or 0.0) >= 1,
            timeout=60,
            what="the reclaim recorded in the memory of spot reclaims",
        )
        wait_for(
            lambda: _on(world, {**classes, **cloud.added}, "on-demand", apps),
            timeout=180,
            what="the 24 pods Ready on the on-demand nodes the provisioner added",
        )
        outage = sorted(n for n, cls in cloud.added.items() if cls == "on-demand")
        assert len(outage) >= 3, cloud.added
        wait_for(lambda: world.plane.pods(home, PLACEHOLDER_LABEL), timeout=60, what="placeholders waiting for spot")

        # Spot is back. From here the rescheduler's moves must keep every budget.
        guard = BudgetWatcher(world.plane, world.ns)
        guard.start()
        cloud.spot_available = True
        try:
            moved = wait_for(
                lambda: _on(world, {**classes, **cloud.added}, "spot", apps),
                timeout=420,
                what="every pod back on spot, Ready",
            )
        finally:
            violations = guard.close()
        assert violations == [], violations[:5]
        failed = [line["msg"] for line in r.lines() if line.get("msg", "").startswith("drain of node")]
        assert failed == [], failed
        assert not r.metric("spotshift_rescheduler_drains_failed_total", '{reason="replaced-on-on-demand"}')
        evicted = Counter(line["pod"] for line in r.logged("eviction of pod") if line.get("result") == "evicted")
        assert sum(evicted.values()) == 24 and max(evicted.values()) == 1, evicted
        drained = r.logged("drained node")
        placed = {pod: node for line in drained for pod, node in line["replacements"].items()}
        assert len(placed) == 24 and all(cloud.added.get(n) == "spot" for n in placed.values()), placed
        assert set(moved.values()).isdisjoint(outage), "every on-demand node of the outage emptied"
        assert {line["node"] for line in drained} <= set(outage)
        print(f"outage nodes {len(outage)}, evictions {sum(evicted.values())}, nodes added {cloud.added}")
        r.close()
        wait_for(lambda: not world.plane.pods(home, PLACEHOLDER_LABEL), timeout=60, what="no placeholder left")
    finally:
        cloud.close()
        world.plane.delete_namespace(home)
