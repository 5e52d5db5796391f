"""The rescheduler's run loop on the real control plane: PodDisruptionBudgets pace a drain, other tools'
do-not-disrupt markers and volumes pinned to a zone keep their node.

* Three replicas of a Deployment on one on-demand node, with a budget allowing one disruption: the node is
  emptied onto spot one eviction at a time (the API server answers 429 while the budget is used and the
  evictor retries as the replacements become Ready; whether a 429 happens depends on how fast the
  replacement gets Ready, so the retry itself is asserted in ``tests/unit/test_drain.py``), and a watcher sees
  ``currentHealthy >= desiredHealthy`` at every poll (the ``budgets`` fixture of ``tests/e2e/conftest.py``).
* A pod annotated ``karpenter.sh/do-not-disrupt: "true"`` keeps its node.
* A StatefulSet pod whose PersistentVolume is pinned to a zone with no spot node keeps its node under ``run``
  (the loop watches PersistentVolumes and claims; the unit tests show the same pod moving without them).
* So does one whose unbound claim's StorageClass waits for the first consumer and provisions only in a zone with
  no spot node (the loop watches StorageClasses).

A budget allowing no disruption keeps its node untouched: ``test_a_node_whose_pdb_forbids_eviction_is_never_touched``
in ``test_rescheduler_e2e.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.controlplane import wait_for
from tests.support.rescheduler_world import BudgetWatcher, NodeWatcher, Rescheduler, World, bind_pod, pod_nodes

pytestmark = pytest.mark.e2e

ZONE = "topology.kubernetes.io/zone"


def test_three_pods_of_a_budget_allowing_one_disruption_are_moved_one_at_a_time(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("web", 3)
    web = world.ready("web")
    assert set(pod_nodes(web).values()) == {od}, pod_nodes(web)
    spot = world.spot()
    world.pdb("web", "web", maxUnavailable=1)
    world.wait_pdb("web", allowed=1)
    before = {p["metadata"]["uid"] for p in web}

    r = start(world.config())
    r.wait_logged("drained node", timeout=180)

    moved = world.pods("web")
    assert len(moved) == 3 and all(p["spec"]["nodeName"] == spot for p in moved), pod_nodes(moved)
    assert not {p["metadata"]["uid"] for p in moved} & before, "every pod was replaced"
    assert len(world.ready("web")) == 3
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') == 3
    assert r.metric("spotshift_rescheduler_drains_succeeded_total") == 1


def test_a_pod_annotated_karpenter_do_not_disrupt_keeps_its_node(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.plane.api.post(
        f"/apis/apps/v1/namespaces/{world.ns}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "keep"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "keep"}},
                "template": {
                    "metadata": {"labels": {"app": "keep"}, "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                    "spec": {
                        "nodeSelector": {"e2e.spotshift.io/test": world.label},
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "app",
                                "image": "registry.example/app:1",
                                "resources": {"requests": {"cpu": "100m"}},
                            }
                        ],
                    },
                },
            },
        },
    )
    keep = world.ready("keep")
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)  # several housekeeping cycles

    assert nodes.close() == {}
    assert {p["metadata"]["uid"] for p in world.pods("keep")} == {p["metadata"]["uid"] for p in keep}
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert all(line.get("drainable") == [] for line in r.logged("plan:"))


def _node(world: World, prefix: str, class_key: str, zone: str) -> str:
    """A node of the test's class ``class_key`` in ``zone``."""
    labels = {class_key: "true", "e2e.spotshift.io/test": world.label, ZONE: zone}
    name: str = world.make_node(prefix, labels=labels)["metadata"]["name"]
    world.nodes.append(name)
    return name


def _pinned_volume(world: World, claim: str, zone: str) -> None:
    """A PersistentVolume pinned to ``zone`` and its claim, bound to each other (no volume controller runs)."""
    pv = f"pv-{world.label}"
    world.plane.api.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {ZONE: zone}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "csi": {"driver": "e2e.spotshift.io", "volumeHandle": pv},
                "claimRef": {"namespace": world.ns, "name": claim},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]
                    }
                },
            },
        },
    )
    world.plane.api.post(
        f"/api/v1/namespaces/{world.ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
                "volumeName": pv,
            },
        },
    )


def _statefulset(world: World, name: str, claim: str | None) -> None:
    """One replica, scheduled by no scheduler (the test binds it), optionally with the claim mounted."""
    spec: dict[str, Any] = {
        "schedulerName": f"held-{world.label}",
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "db", "image": "registry.example/db:1", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if claim is not None:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    world.plane.api.post(
        f"/apis/apps/v1/namespaces/{world.ns}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        },
    )


def _db_keeps_its_node_under_run(world: World, start: Callable[..., Rescheduler], od: str, claim: str) -> None:
    """A one-replica StatefulSet ``db`` using ``claim``, running on ``od``: the run loop plans it over several
    housekeeping cycles and neither drains nor marks ``od``."""
    _statefulset(world, "db", claim)
    wait_for(lambda: world.pods("db"), timeout=60, what="the StatefulSet's pod")
    bind_pod(world, "db-0", od)
    wait_for(lambda: world.pods("db")[0].get("status", {}).get("phase") == "Running", timeout=60, what="db-0 to run")
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)  # several housekeeping cycles

    assert nodes.close() == {}
    assert [p["spec"]["nodeName"] for p in world.pods("db")] == [od]
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert all(line.get("drainable") == [] for line in r.logged("plan:"))


def test_a_statefulset_pod_whose_volume_is_pinned_to_a_zone_without_spot_keeps_its_node_under_run(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    od = _node(world, "od", world.od_key, "zone-a")
    _node(world, "spot", world.spot_key, "zone-b")
    claim = f"data-{world.label}"
    _pinned_volume(world, claim, "zone-a")
    _db_keeps_its_node_under_run(world, start, od, claim)


def test_a_pod_whose_claim_waits_for_a_class_provisioning_only_where_no_spot_is_keeps_its_node_under_run(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    # The claim is unbound (no volume controller runs) and its class waits for the first consumer, provisioning in
    # zone-a only: the pod could go to no spot node (zone-b). tests/unit/test_run_storage.py shows it moving where the
    # class provisions.
    od = _node(world, "od", world.od_key, "zone-a")
    _node(world, "spot", world.spot_key, "zone-b")
    storage_class = f"zonal-{world.label}"
    world.plane.api.post(
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": "e2e.spotshift.io/none",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["zone-a"]}]}],
        },
    )
    try:
        claim = f"data-{world.label}"
        world.plane.api.post(
            f"/api/v1/namespaces/{world.ns}/persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": storage_class,
                },
            },
        )
        _db_keeps_its_node_under_run(world, start, od, claim)
    finally:
        world.plane.api.delete_if_exists(f"/apis/storage.k8s.io/v1/storageclasses/{storage_class}")
