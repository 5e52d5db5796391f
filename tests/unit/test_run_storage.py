"""The run loop watches StorageClasses, so an unbound claim's class constrains a move under ``run`` as it does
under ``plan`` (shared/volumes.py)."""

from __future__ import annotations

from typing import Any

from rescheduler.run import Rescheduler, RunOptions
from shared.fit_reasons import ERR_VOLUME_BIND_CONFLICT
from shared.storage import StorageClass
from tests.support.fake_api import FakeApiServer, namespace, node, pod
from tests.unit.test_run import fast

ZONE = "topology.kubernetes.io/zone"


def world(spot_zone: str) -> FakeApiServer:
    """A pod on an on-demand node in zone a whose claim waits for its first consumer, in a class that
    provisions in zone a only; one spot node in ``spot_zone``."""
    server = FakeApiServer()
    server.put("namespaces", namespace("default"))
    server.put("namespaces", namespace("spotshift"))
    server.put("nodes", node("od-1", cpu="2", labels={ZONE: "a"}))
    server.put("nodes", node("spot-1", spot=True, cpu="8", labels={ZONE: spot_zone}))
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": "d-0"}}]
    server.put("pods", pod("db-0", "od-1", app="db", owner="sts-db", volumes=volumes))
    server.put(
        "persistentvolumeclaims",
        {"metadata": {"name": "d-0", "namespace": "default"}, "spec": {"storageClassName": "zonal"}},
    )
    server.put(
        "storageclasses",
        {
            "metadata": {"name": "zonal"},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]}],
        },
    )
    return server


def run_once(server: FakeApiServer) -> tuple[Rescheduler, Any]:
    r = Rescheduler(server, fast(("--dry-run",)), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
        return r, r.state.snapshot()
    finally:
        server.close()


def test_a_claim_provisioned_only_where_no_spot_node_is_keeps_its_pod_under_run() -> None:
    r, snap = run_once(world(spot_zone="b"))
    assert snap.storage_classes == {
        "zonal": StorageClass("zonal", "ebs.csi.aws.com", "WaitForFirstConsumer", (((ZONE, frozenset({"a"})),),))
    }
    assert r.results == []
    assert r.plans.last_plan is not None and ERR_VOLUME_BIND_CONFLICT in r.plans.last_plan.undrainable["od-1"]


def test_the_same_claim_moves_where_its_class_provisions() -> None:
    r, _ = run_once(world(spot_zone="a"))
    assert [res.node for res in r.results] == ["od-1"]
