"""The kube-scheduler rules the rescheduler takes from the cluster's release, on the real control plane.

Two rules changed between releases (``shared/switches.py``): from 1.27 (kubernetes#116408) a node
over-committed on cpu takes a pod that asks only for memory; from 1.24 (kubernetes#107009) topology spread
counts matching pods only on the nodes the pod can use. For each, the test builds the situation with real
objects and shows that:

* the real kube-scheduler of this release places a probe pod there (the current rule);
* ``spot-rescheduler plan`` against the live cluster reads ``/version`` and plans the same move;
* the same cluster saved as a snapshot is planned without the move under ``--kubernetes-version v1.20.2``:
  the older side of the switch, on the same objects;
* (memory case) ``spot-rescheduler run --once --dry-run`` logs the version and the same plan, and touches nothing;
* ``spot-extender`` says at start-up which release's rules the cluster schedules with.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.controlplane import ControlPlane, wait_for
from tests.support.controlplane.process import k8s_version
from tests.support.extender_server import ExtenderProcess
from tests.support.rescheduler_world import NodeWatcher, World, command_env
from tests.support.rescheduler_world import Rescheduler as RunProcess

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.example/app:1"
NodeFactory = Callable[..., dict[str, Any]]
MINOR = k8s_version().rsplit(".", 1)[0]


# --- helpers ---------------------------------------------------------------------------------------------------


def plan(*args: str) -> tuple[dict[str, Any], str]:
    """``spot-rescheduler plan ARGS -o json``: (the plan, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", "plan", *args, "-o", "json"],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return orjson.loads(proc.stdout), proc.stderr.decode()


def save_snapshot(plane: ControlPlane, path: Path) -> Path:
    """What ``kubectl get nodes,namespaces,pods -A -o json`` writes: a List whose items carry their kind."""
    items = []
    for kind, api_path in (("Node", "/api/v1/nodes"), ("Namespace", "/api/v1/namespaces"), ("Pod", "/api/v1/pods")):
        for obj in plane.api.list(api_path):
            items.append({"apiVersion": "v1", "kind": kind, **obj})
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def bare_pod(world: World, name: str, *, node: str = "", **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": IMAGE}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node  # bound without the scheduler, as a kubelet's static pod or a DaemonSet
    return world.plane.api.post(f"/api/v1/namespaces/{world.ns}/pods", body)


def requests(**amounts: str) -> list[dict[str, Any]]:
    return [{"name": "app", "image": IMAGE, "resources": {"requests": dict(amounts)}}]


def binds_to(world: World, name: str, node: str) -> None:
    """Wait for kube-scheduler to bind ``name``; it must be to ``node``. The pod is deleted afterwards."""
    path = f"/api/v1/namespaces/{world.ns}/pods/{name}"
    bound = wait_for(
        lambda: world.plane.api.get(path)["spec"].get("nodeName"), timeout=60, what=f"kube-scheduler to bind {name}"
    )
    assert bound == node, f"{name} bound to {bound}, not {node}"
    world.plane.delete_pod(world.ns, name)


def running(world: World, name: str) -> None:
    def ok() -> bool:
        pod = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{name}")
        return (pod.get("status") or {}).get("phase") == "Running"

    wait_for(ok, timeout=60, what=f"pod {name} to run")


def moves(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(m["pod"].split("/", 1)[1].rsplit("-", 2)[0], m["from"], m["to"]) for m in result["moves"]]


# --- kubernetes#116408: resources of a node over-committed on cpu ----------------------------------------------


def test_a_memory_only_pod_is_not_planned_onto_a_node_over_committed_on_cpu(
    world: World, runs: list[RunProcess], tmp_path: Path
) -> None:
    plane = world.plane
    od = world.on_demand()
    world.deployment("memonly", 1, containers=requests(memory="64Mi"))
    assert [p["spec"]["nodeName"] for p in world.ready("memonly")] == [od]
    spot = world.spot(allocatable={"cpu": "1"})
    bare_pod(world, "hog", node=spot, containers=requests(cpu="2"))  # spot: 2 cpu requested of 1
    running(world, "hog")

    # kube-scheduler of this release agrees: a memory-only pod that may only go to the spot node is placed.
    bare_pod(world, "probe", nodeSelector={"kubernetes.io/hostname": spot}, containers=requests(memory="64Mi"))
    binds_to(world, "probe", spot)

    config = world.config()
    live, said = plan(f"--kubeconfig={plane.kubeconfig}", f"--config={config}")
    shown = f"API server version v{k8s_version()}: planning with the kube-scheduler rules of Kubernetes {MINOR}"
    assert shown in said, said
    assert live["drained"] == [od] and moves(live) == [("memonly", od, spot)], live

    snapshot = save_snapshot(plane, tmp_path / "snapshot.json")
    today, _ = plan(f"--snapshot={snapshot}", f"--config={config}")
    assert today["drained"] == [od] and moves(today) == [("memonly", od, spot)], today
    old, _ = plan(f"--snapshot={snapshot}", f"--config={config}", "--kubernetes-version=v1.20.2")
    assert old["drained"] == [] and "Insufficient cpu" in old["undrainable"][od], old

    # The run loop learns the version the same way and plans the move; --dry-run touches nothing.
    watcher = NodeWatcher(plane, [od, spot])
    watcher.start()
    r = RunProcess(plane.kubeconfig, config, tmp_path / "run.log", "--once", "--dry-run", name="once")
    runs.append(r)
    assert r.wait(90) == 0, r.tail()
    assert watcher.close() == {}
    version = r.logged(f"API server version v{k8s_version()}")
    assert version and version[0]["level"] == "info", r.tail()
    assert r.logged("plan: 1 nodes can be emptied"), r.tail()
    assert [p["spec"]["nodeName"] for p in world.pods("memonly")] == [od]


# --- kubernetes#107009: topology spread over nodes the pod cannot use -------------------------------------------


def test_spread_counts_pods_on_nodes_the_pod_cannot_use(world: World, make_node: NodeFactory, tmp_path: Path) -> None:
    plane = world.plane
    zone = f"e2e.spotshift.io/zone-{world.label}"
    pool = f"e2e.spotshift.io/pool-{world.label}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    test_label = {"e2e.spotshift.io/test": world.label, pool: "yes"}
    od = make_node("od", labels={world.od_key: "true", zone: "zb", **test_label})["metadata"]["name"]
    world.nodes.append(od)
    # "ex": zone za, not in the pod's pool, neither spot nor on-demand; it runs two pods the constraint matches.
    ex = make_node("ex", labels={zone: "za"})["metadata"]["name"]
    for i in range(2):
        bare_pod(world, f"matching-{i}", node=ex, labels={"group": group})
        running(world, f"matching-{i}")

    constraint = {
        "maxSkew": 1,
        "topologyKey": zone,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"group": group}},
    }
    spread_spec = {"nodeSelector": {pool: "yes"}, "topologySpreadConstraints": [constraint]}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mover"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "mover"}},
            "template": {
                "metadata": {"labels": {"app": "mover", "group": group}},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": requests(cpu="100m"), **spread_spec},
            },
        },
    }
    plane.api.post(f"/apis/apps/v1/namespaces/{world.ns}/deployments", body)
    assert [p["spec"]["nodeName"] for p in world.ready("mover")] == [od]
    spot = make_node("spot", labels={world.spot_key: "true", zone: "za", **test_label})["metadata"]["name"]
    world.nodes.append(spot)

    # kube-scheduler of this release agrees: with od cordoned, a pod like mover goes to the spot node, because
    # zone za counts no pod of the nodes the pod may use (before 1.24, ex's two pods were counted there).
    plane.api.patch(f"/api/v1/nodes/{od}", {"spec": {"unschedulable": True}})
    try:
        bare_pod(world, "probe", labels={"group": group}, containers=requests(cpu="100m"), **spread_spec)
        binds_to(world, "probe", spot)
    finally:
        plane.api.patch(f"/api/v1/nodes/{od}", {"spec": {"unschedulable": False}})

    config = world.config()
    live, said = plan(f"--kubeconfig={plane.kubeconfig}", f"--config={config}")
    assert f"kube-scheduler rules of Kubernetes {MINOR} (current)" in said, said
    assert live["drained"] == [od] and moves(live) == [("mover", od, spot)], live

    snapshot = save_snapshot(plane, tmp_path / "snapshot.json")
    today, _ = plan(f"--snapshot={snapshot}", f"--config={config}")
    assert today["drained"] == [od] and moves(today) == [("mover", od, spot)], today
    old, _ = plan(f"--snapshot={snapshot}", f"--config={config}", "--kubernetes-version=v1.20.2")
    assert old["drained"] == [] and "topology spread" in old["undrainable"][od], old


# --- the extender --------------------------------------------------------------------------------------------------


def test_the_extender_says_which_release_the_cluster_schedules_with(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    extender = ExtenderProcess(tmp_path, control_plane.kubeconfig).start()
    try:
        log = extender.log_path.read_text(errors="replace")
        assert (
            f"spot-extender: API server version v{k8s_version()}: the cluster schedules with the kube-scheduler "
            f"rules of Kubernetes {MINOR} (current)" in log
        ), extender.log_tail()
    finally:
        extender.stop()
