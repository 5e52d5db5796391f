"""The rescheduler's run loop against the real control plane: drains, refusals and dry-run.

The world of these tests (the rescheduler as a subprocess, nodes and workloads of the test's own) is
:mod:`tests.support.rescheduler_world`; SIGTERM, restart and leader election are in
``test_rescheduler_lifecycle_e2e.py``.

Every test that lets the rescheduler act watches the namespace's PodDisruptionBudgets in a thread for the
whole test and fails if any budget's ``currentHealthy`` falls below its ``desiredHealthy``; and every test
ends with each workload back at its desired Ready count.

The success test runs the rescheduler as a ServiceAccount bound to ``deploy/base/rescheduler/rbac.yaml``, so
it also proves that the shipped ClusterRole grants every verb the loop uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.rescheduler_world import (
    STATE_ANNOTATION,
    TAINT_KEY,
    TAINT_VALUE,
    BudgetWatcher,
    NodeWatcher,
    Rescheduler,
    World,
    cleanup_rbac,
    pod_nodes,
    service_account_kubeconfig,
)

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

# --- scenarios -------------------------------------------------------------------------------------------------


def test_a_drainable_on_demand_node_is_emptied_and_its_pods_run_on_spot(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], tmp_path: Path
) -> None:
    plane = world.plane
    od = world.on_demand()
    world.deployment("web", 1)
    world.deployment("api", 1)
    assert {n for n in pod_nodes(world.ready("web")).values()} == {od}
    assert {n for n in pod_nodes(world.ready("api")).values()} == {od}
    spot1 = world.spot()
    world.scale("web", 2)  # the new replica goes to the empty spot node (spread, spot preference)
    web = world.ready("web")
    assert sorted(pod_nodes(web).values()) == sorted([od, spot1]), pod_nodes(web)
    spot2 = world.spot()
    world.pdb("web", "web", minAvailable=1)
    world.wait_pdb("web", allowed=1)
    before = {p["metadata"]["uid"] for p in world.pods("web") + world.pods("api")}

    suffix = world.label
    kubeconfig = service_account_kubeconfig(plane, world.ns, tmp_path, suffix)
    try:
        # The shipped Role grants get/update on the shipped Lease name only (this namespace is the test's own).
        r = start(world.config(lease_name="spotshift-rescheduler"), kubeconfig=kubeconfig)
        r.wait_logged("drained node", timeout=120)

        moved = world.pods("web") + world.pods("api")
        assert all(p["spec"]["nodeName"] in (spot1, spot2) for p in moved), pod_nodes(moved)
        assert len({p["metadata"]["uid"] for p in moved} - before) == 2, "one new pod per evicted pod"
        assert world.ready("web") and world.ready("api")
        node = world.node(od)
        assert world.our_taints(od) == [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]
        assert node["metadata"]["annotations"][STATE_ANNOTATION] == "drained"
        # Nothing but the drained node was touched, and the Events tell the story.
        assert world.our_taints(spot1) == [] and world.our_taints(spot2) == []
        reasons = {e["reason"] for e in world.events()}
        assert {"SpotshiftDrainStarted", "SpotshiftEvicting", "SpotshiftDrainSucceeded"} <= reasons, reasons
        started = world.events("SpotshiftDrainStarted")[0]
        assert started["involvedObject"]["kind"] == "Node" and started["involvedObject"]["name"] == od
        assert r.metric("spotshift_rescheduler_drains_succeeded_total") == 1
        assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') == 2
        assert r.metric("spotshift_rescheduler_leader") == 1
        assert r.metric("spotshift_rescheduler_nodes", '{class="spot"}') == 2
        assert not [line for line in r.lines() if line.get("level") == "error"]
        assert not r.refused_by_rbac(), "RBAC refused a verb the loop uses"
    finally:
        cleanup_rbac(plane, suffix)


def test_a_node_whose_pdb_forbids_eviction_is_never_touched(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("db", 1)
    db = world.ready("db")
    world.pdb("db", "db", minAvailable=1)
    world.wait_pdb("db", allowed=0)
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)  # several housekeeping cycles

    assert nodes.close() == {}
    assert pod_nodes(world.pods("db")) == pod_nodes(db)
    assert {p["metadata"]["uid"] for p in world.pods("db")} == {p["metadata"]["uid"] for p in db}
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') in (None, 0.0)
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert len(world.ready("db")) == 1


def test_a_pod_pinned_to_on_demand_keeps_its_node(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("pinned", 1, nodeSelector={world.od_key: "true"})
    world.deployment("free", 1)
    pinned = world.ready("pinned")
    free = world.ready("free")
    assert pod_nodes(pinned)[pinned[0]["metadata"]["name"]] == od
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)

    assert nodes.close() == {}
    assert world.pods("pinned")[0]["metadata"]["uid"] == pinned[0]["metadata"]["uid"]
    assert world.pods("pinned")[0]["spec"]["nodeName"] == od
    assert world.pods("free")[0]["metadata"]["uid"] == free[0]["metadata"]["uid"], "all or nothing per node"
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert len(world.ready("pinned")) == 1 and len(world.ready("free")) == 1


def test_dry_run_evicts_nothing(world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]) -> None:
    od = world.on_demand()
    world.deployment("web", 2)
    web = world.ready("web")
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config(), "--dry-run")
    r.wait_logged("would evict", timeout=60)
    r.wait_logged("dry-run: would taint", timeout=30)
    time.sleep(3)

    assert nodes.close() == {}
    assert {p["metadata"]["uid"] for p in world.pods("web")} == {p["metadata"]["uid"] for p in web}
    assert world.events() == [], "dry-run writes no Events either"
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="dry-run"}') >= 2
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') in (None, 0.0)
    assert len(world.ready("web")) == 2
