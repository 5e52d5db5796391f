"""On the real control plane with Karpenter's NodePool CRD: the rescheduler leaves to Karpenter the on-demand node of a
NodePool that consolidates toward spot, and drains an on-demand node of no NodePool.

Karpenter itself does not run here (its own consolidation is measured with the real binary in ``bench/``): the CRD
(``tests/support/peers.py``), one NodePool allowing spot and on-demand with ``WhenEmptyOrUnderutilized``, and a
kubelet stand-in node labelled ``karpenter.sh/nodepool`` are what the rescheduler reads. ``spot-rescheduler plan``
says why the node stays; ``spot-rescheduler run``, as the ServiceAccount of ``deploy/base/rescheduler/rbac.yaml``,
drains the other node, never touches the NodePool's, counts it in its gauge, and is refused nothing by RBAC.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.peers import karpenter_crds
from tests.support.rescheduler_world import (
    ROOT,
    BudgetWatcher,
    NodeWatcher,
    Rescheduler,
    World,
    cleanup_rbac,
    command_env,
    pod_nodes,
    service_account_kubeconfig,
)

pytestmark = [pytest.mark.e2e, pytest.mark.peers]

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"


@contextmanager
def nodepool_crd(plane: ControlPlane) -> Iterator[None]:
    """Karpenter's NodePool CRD, served until the block ends (then deleted, if this made it)."""
    (path,) = [p for p in karpenter_crds() if p.name == "karpenter.sh_nodepools.yaml"]
    body = yaml.safe_load(path.read_text())
    made = True
    try:
        plane.api.post(CRDS, body)
    except ApiError as error:
        if error.status != 409:
            raise
        made = False

    def served() -> bool:
        try:
            plane.api.get(NODEPOOLS, limit=1)
        except ApiError:
            return False
        return True

    wait_for(served, timeout=60, what="the NodePool CRD to be served")
    try:
        yield
    finally:
        if made:
            plane.api.delete_if_exists(f"{CRDS}/{body['metadata']['name']}")


def nodepool(name: str) -> dict[str, Any]:
    """A NodePool Karpenter consolidates toward spot: spot and on-demand allowed, ``WhenEmptyOrUnderutilized``."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                }
            },
        },
    }


def place(world: World, app: str, node: str) -> None:
    """A one-replica Deployment whose pod runs on ``node``: the world's other on-demand nodes are cordoned while it
    is scheduled (the pod itself may go anywhere, as any pod the rescheduler moves)."""
    others = [n for n in world.nodes if n != node]
    for n in others:
        world.plane.api.patch(f"/api/v1/nodes/{n}", {"spec": {"unschedulable": True}})
    try:
        world.deployment(app, 1)
        assert set(pod_nodes(world.ready(app)).values()) == {node}
    finally:
        for n in others:
            world.plane.api.patch(f"/api/v1/nodes/{n}", {"spec": {"unschedulable": False}})


def plan_json(world: World, config: Path) -> dict[str, Any]:
    argv = ["plan", f"--kubeconfig={world.plane.kubeconfig}", f"--config={config}", "--output=json"]
    proc = subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", *argv],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    result: dict[str, Any] = orjson.loads(proc.stdout)
    return result


def test_the_node_of_a_consolidating_nodepool_is_left_to_karpenter_and_the_other_is_drained(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], tmp_path: Path
) -> None:
    plane = world.plane
    pool = f"e2e-{world.label}"
    with nodepool_crd(plane):
        plane.api.post(NODEPOOLS, nodepool(pool))
        try:
            labels = {world.od_key: "true", "e2e.spotshift.io/test": world.label, "karpenter.sh/nodepool": pool}
            od_karpenter = world.make_node("od-kp", labels=labels)["metadata"]["name"]
            world.nodes.append(od_karpenter)
            od_plain = world.on_demand()
            place(world, "kp", od_karpenter)
            place(world, "plain", od_plain)
            world.spot()
            config = world.config(lease_name="spotshift-rescheduler")

            planned = plan_json(world, config)
            assert planned["drained"] == [od_plain], planned
            assert planned["reasons"][od_karpenter]["kind"] == "karpenter-consolidates", planned["reasons"]
            assert pool in planned["reasons"][od_karpenter]["detail"]

            kp_pods = {p["metadata"]["uid"] for p in world.pods("kp")}
            nodes = NodeWatcher(plane, [od_karpenter])
            nodes.start()
            kubeconfig = service_account_kubeconfig(plane, world.ns, tmp_path, world.label)
            try:
                r = start(config, kubeconfig=kubeconfig)
                r.wait_logged("drained node", timeout=120)
                wait_for(
                    lambda: r.metric("spotshift_rescheduler_nodes_left_to_karpenter", '{reason="consolidates"}') == 1,
                    timeout=30,
                    what="the gauge to count the node left to Karpenter",
                )
                assert nodes.close() == {}, "the NodePool's node was never marked"
                assert {p["metadata"]["uid"] for p in world.pods("kp")} == kp_pods, "its pod was never evicted"
                assert set(pod_nodes(world.ready("plain")).values()) <= {
                    n for n in world.nodes if n not in (od_karpenter, od_plain)
                }
                assert r.metric("spotshift_rescheduler_drains_succeeded_total") == 1
                assert not r.refused_by_rbac(), "the shipped ClusterRole lets the rescheduler list and watch NodePools"
            finally:
                cleanup_rbac(plane, world.label)
        finally:
            plane.api.delete_if_exists(f"{NODEPOOLS}/{pool}")
