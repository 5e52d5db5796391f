"""The rules modelled last, on the real control plane: the real kube-scheduler and API server decide on real
objects, and ``spot-rescheduler plan`` against the live cluster decides the same.

* scheduling gates (``spec.schedulingGates``): a gated pod is not a pod waiting for room;
* a budget's ``unhealthyPodEvictionPolicy``: the Eviction API lets a not-Ready pod go without the budget's
  ``disruptionsAllowed`` under ``AlwaysAllow``, or under the default policy while the budget is healthy;
* dynamic resource claims (``spec.resourceClaims``, DRA, ``resource.k8s.io/v1``): the pod keeps its node;
* in-place resize (the ``resize`` subresource): a pod on a node counts what its status says while the resize
  is pending or infeasible.

Every test keeps its pods on its own nodes (the ``World`` labels) and reads the plan's JSON for its own nodes;
the plan's ``pending_unschedulable`` counts the whole cluster, which the ``world`` fixture first waits to be
free of unschedulable pods.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from shared.model import Pod
from tests.support.controlplane import wait_for
from tests.support.controlplane.process import k8s_version
from tests.support.rescheduler_world import Rescheduler as RunProcess
from tests.support.rescheduler_world import World, command_env

pytestmark = [pytest.mark.e2e, pytest.mark.clear_workloads]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.example/app:1"
HOSTNAME = "kubernetes.io/hostname"
TEST_LABEL = "e2e.spotshift.io/test"
RESOURCE = "/apis/resource.k8s.io/v1"
NodeFactory = Callable[..., dict[str, Any]]


# --- helpers ---------------------------------------------------------------------------------------------------


def k8s_version_tuple() -> tuple[int, int]:
    major, minor = k8s_version().split(".")[:2]
    return int(major), int(minor)


def plan(world: World, config: Path) -> dict[str, Any]:
    """``spot-rescheduler plan -o json`` against the live cluster."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "plan",
            f"--kubeconfig={world.plane.kubeconfig}",
            f"--config={config}",
            "-o",
            "json",
        ],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    result: dict[str, Any] = orjson.loads(proc.stdout)
    return result


def run_once(world: World, config: Path, runs: list[RunProcess], name: str) -> RunProcess:
    """``spot-rescheduler run --once --dry-run``: one cycle, nothing touched; returns the finished process."""
    r = RunProcess(world.plane.kubeconfig, config, world.tmp / f"{name}.log", "--once", "--dry-run", name=name)
    runs.append(r)
    assert r.wait(90) == 0, r.tail()
    return r


def moves(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(pod's app, from, to) of each move: a Deployment's pod name less its two generated suffixes."""
    return [(m["pod"].split("/", 1)[1].rsplit("-", 2)[0], m["from"], m["to"]) for m in result["moves"]]


def containers(**requests: str) -> list[dict[str, Any]]:
    return [{"name": "app", "image": IMAGE, "resources": {"requests": dict(requests)}}]


def pod_path(world: World, name: str) -> str:
    return f"/api/v1/namespaces/{world.ns}/pods/{name}"


def bare_pod(world: World, name: str, *, node: str = "", **spec: Any) -> dict[str, Any]:
    """A pod without a controller; with ``node`` bound there at creation (as a DaemonSet's or a static pod)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": containers(cpu="100m"), **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return world.plane.api.post(f"/api/v1/namespaces/{world.ns}/pods", body)


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def scheduled(world: World, name: str) -> dict[str, Any] | None:
    """The pod's ``PodScheduled`` condition."""
    return condition(world.plane.api.get(pod_path(world, name)), "PodScheduled")


def delete_pod(world: World, name: str) -> None:
    world.plane.delete_pod(world.ns, name)


def binds_to(world: World, name: str, node: str) -> None:
    """Wait for kube-scheduler to bind ``name``; it must be to ``node``. The pod is deleted afterwards."""
    bound = wait_for(
        lambda: world.plane.api.get(pod_path(world, name))["spec"].get("nodeName"),
        timeout=60,
        what=f"kube-scheduler to bind {name}",
    )
    assert bound == node, f"{name} bound to {bound}, not {node}"
    delete_pod(world, name)


def refused(world: World, name: str, because: str) -> str:
    """Wait for kube-scheduler to report ``name`` unschedulable, because of ``because`` (a part of its message);
    returns the message. The pod is deleted afterwards."""

    def reported() -> str | None:
        c = scheduled(world, name)
        if c and c.get("reason") == "Unschedulable" and because in (c.get("message") or ""):
            return str(c["message"])
        return None

    message = wait_for(reported, timeout=60, what=f"kube-scheduler to refuse {name} ({because})")
    assert not world.plane.api.get(pod_path(world, name))["spec"].get("nodeName")
    delete_pod(world, name)
    return message


def running(world: World, name: str) -> dict[str, Any]:
    """Wait for the kubelet stand-in to mark ``name`` Running; returns the pod."""

    def ok() -> dict[str, Any] | None:
        pod = world.plane.api.get(pod_path(world, name))
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    return wait_for(ok, timeout=60, what=f"pod {name} to run")


# --- scheduling gates ------------------------------------------------------------------------------------------

GATE = "e2e.spotshift.io/quota"
STALE = "0/3 nodes are available: written by the test, not by kube-scheduler"


def test_a_gated_pod_is_not_a_pod_waiting_for_room(world: World, runs: list[RunProcess]) -> None:
    """A pod with ``spec.schedulingGates`` waits for whoever holds its gates, not for a node: the API server marks
    it ``PodScheduled=False/SchedulingGated`` at creation (``pkg/registry/core/pod/strategy.go``,
    ``applySchedulingGatedCondition``) and kube-scheduler never tries it (``pkg/scheduler/framework/plugins/
    schedulinggates/scheduling_gates.go``, ``PreEnqueue``), so it reports nothing about it. The plan does not count
    it as pending (``rescheduler/plan/safety.py``, ``unschedulable_pods``) even with a stale ``Unschedulable``
    condition, and acts; once the gates are removed the scheduler tries it and reports it ``Unschedulable``, and the
    plan counts it as waiting: it fits no node (more cpu than any has, even emptied), so it holds nothing and the
    run loop plans the same drain."""
    od = world.on_demand()
    world.deployment("web", 1)
    assert [p["spec"]["nodeName"] for p in world.ready("web")] == [od]
    spot = world.spot()

    # More cpu than any node has, kept to this test's nodes.
    ours, gates = {TEST_LABEL: world.label}, [{"name": GATE}]
    bare_pod(world, "gated", nodeSelector=ours, schedulingGates=gates, containers=containers(cpu="64"))
    gated = scheduled(world, "gated")
    assert gated and (gated["status"], gated["reason"]) == ("False", "SchedulingGated"), gated

    # kube-scheduler has seen the gated pod (its informer delivers pods in order) once it binds a later pod, and
    # has left it alone: not bound, still SchedulingGated, and no FailedScheduling event.
    bare_pod(world, "probe", nodeSelector={HOSTNAME: spot})
    binds_to(world, "probe", spot)
    pod = world.plane.api.get(pod_path(world, "gated"))
    assert not pod["spec"].get("nodeName") and condition(pod, "PodScheduled") == gated, pod["status"]
    events = world.plane.api.list(
        f"/api/v1/namespaces/{world.ns}/events", fieldSelector="involvedObject.name=gated,reason=FailedScheduling"
    )
    assert list(events) == []

    config = world.config()
    live = plan(world, config)
    assert (live["summary"]["pending_unschedulable"], live["summary"]["safe_to_act"]) == (0, True), live["summary"]
    assert live["drained"] == [od] and moves(live) == [("web", od, spot)], live

    # A stale Unschedulable condition (as left by an older scheduler, or written by hand) changes nothing: the
    # scheduler still leaves the pod alone, the plan still acts, and the run loop plans instead of pausing.
    stale = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": STALE}
    world.plane.api.patch(pod_path(world, "gated") + "/status", {"status": {"conditions": [stale]}}, "strategic")
    assert (scheduled(world, "gated") or {}).get("message") == STALE
    live = plan(world, config)
    assert (live["summary"]["pending_unschedulable"], live["summary"]["safe_to_act"]) == (0, True), live["summary"]
    assert live["drained"] == [od] and moves(live) == [("web", od, spot)], live
    r = run_once(world, config, runs, "gated")
    assert not r.logged("paused"), r.tail()
    assert r.logged("plan: 1 nodes can be emptied"), r.tail()

    # The gates removed, kube-scheduler tries the pod and reports it Unschedulable with its own message; now the
    # plan counts it as waiting, and as it fits no node even emptied, it holds nothing: the same drain is planned.
    world.plane.api.patch(pod_path(world, "gated"), {"spec": {"schedulingGates": None}}, "merge")

    def tried() -> str | None:
        c = scheduled(world, "gated") or {}
        return c["message"] if c.get("reason") == "Unschedulable" and c.get("message") != STALE else None

    message = wait_for(tried, timeout=60, what="kube-scheduler to report the ungated pod Unschedulable")
    assert "Insufficient cpu" in message, message
    live = plan(world, config)
    assert (live["summary"]["pending_unschedulable"], live["summary"]["safe_to_act"]) == (1, True), live["summary"]
    assert live["summary"]["waiting_pods"] == {f"{world.ns}/gated": []}, live["summary"]
    assert live["drained"] == [od], live
    r = run_once(world, config, runs, "ungated")
    assert r.logged("plan: 1 nodes can be emptied"), r.tail()
    delete_pod(world, "gated")


# --- a budget's unhealthyPodEvictionPolicy ---------------------------------------------------------------------


def evict(world: World, name: str) -> int:
    """A dry-run eviction (``POST .../pods/NAME/eviction?dryRun=All``, ``policy/v1``): the HTTP status."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": world.ns}}
    response = world.plane.api.request("POST", pod_path(world, name) + "/eviction", body=body, params={"dryRun": "All"})
    assert response.status_code in (201, 429), (response.status_code, response.text)
    return response.status_code


def make_not_ready(world: World, name: str) -> None:
    """What a kubelet writes when the pod's container fails its readiness probe: Ready and ContainersReady False,
    the container not ready. The pod stays Running (the stand-in leaves Running pods alone)."""
    pod = world.plane.api.get(pod_path(world, name))
    status = copy.deepcopy(pod["status"])
    for c in status["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c.update(status="False", reason="ContainersNotReady", message="containers with unready status: [app]")
    for cs in status["containerStatuses"]:
        cs["ready"] = False
    patch = {"status": {"conditions": status["conditions"], "containerStatuses": status["containerStatuses"]}}
    world.plane.api.patch(pod_path(world, name) + "/status", patch, "merge")


def budget_settles(world: World, name: str, **expected: int) -> dict[str, Any]:
    """Wait for the disruption controller to compute the budget's current spec, with these status values."""
    path = f"/apis/policy/v1/namespaces/{world.ns}/poddisruptionbudgets/{name}"

    def computed() -> dict[str, Any] | None:
        pdb = world.plane.api.get(path)
        status = pdb.get("status") or {}
        if status.get("observedGeneration") != pdb["metadata"]["generation"]:
            return None
        return pdb if all(status.get(k) == v for k, v in expected.items()) else None

    return wait_for(computed, timeout=60, what=f"PDB {name} to settle at {expected}")


def test_a_not_ready_pod_leaves_under_the_budgets_unhealthy_pod_eviction_policy(world: World) -> None:
    """A pod that is not Ready is evicted without taking one of its budget's ``disruptionsAllowed`` (even at 0) when
    the budget's ``unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or, unset or ``IfHealthyBudget``, while
    ``currentHealthy >= desiredHealthy > 0``; otherwise it needs a disruption like a Ready pod
    (``pkg/registry/core/pod/storage/eviction.go``, ``EvictionREST.Create``). The Eviction API answers each case on
    a real budget (dry runs), and the plan drains or keeps the on-demand node of that pod alike
    (``shared/eviction.py``, ``budget_use``)."""
    od = world.on_demand()
    world.deployment("app", 1)
    [sick] = [p["metadata"]["name"] for p in world.ready("app") if p["spec"]["nodeName"] == od]
    spot = world.spot()
    # Two more replicas, on the spot node: the on-demand node cordoned while they are placed.
    world.plane.api.patch(f"/api/v1/nodes/{od}", {"spec": {"unschedulable": True}})
    try:
        world.scale("app", 3)
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in world.ready("app")}
    finally:
        world.plane.api.patch(f"/api/v1/nodes/{od}", {"spec": {"unschedulable": False}})
    healthy = sorted(n for n in placed if n != sick)
    assert placed == {sick: od, **dict.fromkeys(healthy, spot)}, placed
    make_not_ready(world, sick)
    config = world.config()

    # minAvailable 3 of 2 Ready: the application is not healthy, no disruption allowed.
    world.pdb("app", "app", minAvailable=3, unhealthyPodEvictionPolicy="AlwaysAllow")
    unhealthy = {"currentHealthy": 2, "desiredHealthy": 3, "disruptionsAllowed": 0, "expectedPods": 3}
    budget_settles(world, "app", **unhealthy)
    assert (evict(world, sick), evict(world, healthy[0])) == (201, 429)
    live = plan(world, config)
    assert live["drained"] == [od] and moves(live) == [("app", od, spot)], live

    pdbs = f"/apis/policy/v1/namespaces/{world.ns}/poddisruptionbudgets/app"
    world.plane.api.patch(pdbs, {"spec": {"unhealthyPodEvictionPolicy": "IfHealthyBudget"}}, "merge")
    budget_settles(world, "app", **unhealthy)
    assert (evict(world, sick), evict(world, healthy[0])) == (429, 429)
    live = plan(world, config)
    assert live["drained"] == [] and live["moves"] == [], live
    assert live["reasons"][od]["kind"] == "pdb-budget", live["reasons"]
    assert f"pod {world.ns}/{sick}" in live["undrainable"][od], live["undrainable"]

    # minAvailable 2 of 2 Ready, the policy unset (IfHealthyBudget): the application is healthy, still no
    # disruption allowed; the not-Ready pod may go, a Ready one may not.
    world.plane.api.patch(pdbs, {"spec": {"unhealthyPodEvictionPolicy": None, "minAvailable": 2}}, "merge")
    pdb = budget_settles(world, "app", currentHealthy=2, desiredHealthy=2, disruptionsAllowed=0, expectedPods=3)
    assert "unhealthyPodEvictionPolicy" not in pdb["spec"], pdb["spec"]
    assert (evict(world, sick), evict(world, healthy[0])) == (201, 429)
    live = plan(world, config)
    assert live["drained"] == [od] and moves(live) == [("app", od, spot)], live


# --- dynamic resource claims (DRA) -----------------------------------------------------------------------------


def publish_one_gpu(world: World, node: str, driver: str, device_class: str, slice_name: str) -> None:
    """A DeviceClass of the driver's devices, one device of it published for ``node`` (what a driver's kubelet
    plugin publishes: one pool of one slice) and a ResourceClaimTemplate ``one-gpu`` asking for one of them."""
    plane = world.plane
    node_uid = world.node(node)["metadata"]["uid"]
    plane.api.post(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    plane.api.post(
        f"{RESOURCE}/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
                ],
            },
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    plane.api.post(
        f"{RESOURCE}/namespaces/{world.ns}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}
            },
        },
    )


def test_a_pod_with_dynamic_resource_claims_keeps_its_node(world: World) -> None:
    """kube-scheduler places a pod with ``spec.resourceClaims`` by the devices drivers publish in ResourceSlices,
    selected by DeviceClasses (``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``), and
    allocates the claim on that node's devices; the resourceclaim controller makes the claim from the pod's
    ResourceClaimTemplate (``pkg/controller/resourceclaim/controller.go``). A spot node whose driver published no
    device cannot take a copy of the pod, and the plan, which reads no ResourceSlice, keeps the pod's on-demand
    node with the DRA reason (``shared/movable.py``, ``resource_claims_rule``)."""
    plane = world.plane
    od = world.on_demand()
    driver = f"gpu-{world.label}.e2e.spotshift.io"
    device_class = f"gpu-{world.label}"
    slice_name = f"{od}-{world.label}"
    try:
        publish_one_gpu(world, od, driver, device_class, slice_name)
        claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        uses_gpu = [
            {"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]}}
        ]

        world.deployment("trainer", 1, resourceClaims=claims, containers=uses_gpu)
        [pod] = world.ready("trainer")
        assert pod["spec"]["nodeName"] == od
        [claim_status] = pod["status"]["resourceClaimStatuses"]
        claim = plane.api.get(f"{RESOURCE}/namespaces/{world.ns}/resourceclaims/{claim_status['resourceClaimName']}")
        allocation = claim["status"]["allocation"]
        [result] = allocation["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (driver, od, "gpu-0"), claim["status"]
        [term] = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [od]}], allocation
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]

        # A copy of the pod that may only go to the spot node: no device there, so kube-scheduler refuses it.
        spot = world.spot()
        bare_pod(world, "copy", nodeSelector={HOSTNAME: spot}, resourceClaims=claims, containers=uses_gpu)
        message = refused(world, "copy", "cannot allocate all claims")
        assert "1 cannot allocate all claims" in message, message

        live = plan(world, world.config())
        assert live["drained"] == [] and live["moves"] == [], live
        why = live["reasons"][od]
        assert why["kind"] == "pod-not-movable" and why["pod"] == f"{world.ns}/{pod['metadata']['name']}", why
        reason = "pod uses dynamic resource claims (DRA): its devices cannot be checked on a spot node"
        assert reason in live["undrainable"][od], live["undrainable"]
    finally:
        plane.api.delete_if_exists(f"{RESOURCE}/resourceslices/{slice_name}")
        plane.api.delete_if_exists(f"{RESOURCE}/deviceclasses/{device_class}")


# --- in-place resize -------------------------------------------------------------------------------------------

STATIC_CPU = 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'


def report_allocation(world: World, name: str, resources: dict[str, str]) -> None:
    """The resources a 1.37 kubelet reports for a running pod whose allocation is ``resources`` (requests equal to
    limits, a Guaranteed pod): per container ``allocatedResources`` and ``resources`` (``pkg/kubelet/kubelet_pods.go``,
    ``convertToAPIContainerStatuses``), and for the pod ``status.allocatedResources`` and ``status.resources``
    (``convertToAPIPodLevelResourcesStatus``; InPlacePodLevelResourcesVerticalScaling, on by default since 1.36).
    The API server takes a resize only for a pod whose running containers report ``resources``
    (``pkg/apis/core/validation/validation.go``, ``isPodResizeRequestSupported``)."""
    pod = world.plane.api.get(pod_path(world, name))
    statuses = copy.deepcopy(pod["status"]["containerStatuses"])
    for cs in statuses:
        cs["allocatedResources"] = dict(resources)
        cs["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    status = {
        "containerStatuses": statuses,
        "allocatedResources": dict(resources),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }
    world.plane.api.patch(pod_path(world, name) + "/status", {"status": status}, "merge")


def resize(world: World, name: str, **resources: str) -> Any:
    """``PATCH .../pods/NAME/resize``: the container's requests and limits (a Guaranteed pod stays Guaranteed)."""
    patch = {"spec": {"containers": [{"name": "app", "resources": {"requests": resources, "limits": resources}}]}}
    return world.plane.api.request(
        "PATCH", pod_path(world, name) + "/resize", body=patch, content_type="application/strategic-merge-patch+json"
    )


def test_a_resized_pod_counts_on_its_node_what_kube_scheduler_counts(world: World) -> None:
    """A pod on a node counts for kube-scheduler by ``PodRequests`` with ``UseStatusResources``
    (``pkg/scheduler/framework/types.go``, ``PodInfo.CalculateResource``; component-helpers
    ``resource/helpers.go``, ``AggregateContainerRequests``): the largest of its spec and what its status says is
    allocated and actuated, the spec left out when a ``PodResizePending`` condition says ``Infeasible``. A
    Guaranteed 1-cpu pod on the 4-cpu spot node is resized to 3 cpu; its kubelet (static CPU manager policy) cannot
    resize it (``pkg/kubelet/allocation/handlers.go``) and keeps 1 cpu allocated. Before the kubelet answers, the
    scheduler counts 3 cpu there and refuses a 3-cpu probe; once the resize is Infeasible it counts 1 and binds
    one. The plan moves the on-demand node's 3-cpu pod there exactly then (``shared/podrequests.py``,
    ``status_requests``)."""
    od = world.on_demand()
    world.deployment("mover", 1, containers=containers(cpu="3", memory="64Mi"))
    assert [p["spec"]["nodeName"] for p in world.ready("mover")] == [od]
    spot = world.spot()  # 4 cpu
    one_cpu = {"cpu": "1", "memory": "64Mi"}
    guaranteed = [{"name": "app", "image": IMAGE, "resources": {"requests": one_cpu, "limits": one_cpu}}]
    bare_pod(world, "resized", node=spot, containers=guaranteed)
    running(world, "resized")
    report_allocation(world, "resized", one_cpu)
    config = world.config()
    live = plan(world, config)
    assert live["drained"] == [od] and moves(live) == [("mover", od, spot)], live

    if k8s_version_tuple() >= (1, 37):
        # The API server refuses a resize beyond the node's allocatable (PodResizeValidator,
        # plugin/pkg/admission/podresize/admission.go): no kubelet sees it.
        refused_resize = resize(world, "resized", cpu="8")
        assert refused_resize.status_code == 403, refused_resize.text
        assert "node didn't have enough allocatable resources" in refused_resize.json()["message"]
    answer = resize(world, "resized", cpu="3")
    assert answer.status_code == 200, answer.text
    pod = answer.json()
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"
    assert pod["status"]["allocatedResources"] == one_cpu, pod["status"]

    # Before the kubelet answers, the spec counts: 3 of 4 cpu, 1 free.
    bare_pod(world, "probe", nodeSelector={HOSTNAME: spot}, containers=containers(cpu="3"))
    refused(world, "probe", "Insufficient cpu")
    live = plan(world, config)
    assert live["drained"] == [] and live["moves"] == [], live
    assert live["reasons"][od]["kind"] == "no-capacity", live["reasons"]
    assert "all spot nodes together have 1 CPU" in live["undrainable"][od], live["undrainable"]

    # The kubelet answers Infeasible and keeps the allocation: 1 cpu counts, 3 free.
    infeasible = {
        "type": "PodResizePending",
        "status": "True",
        "reason": "Infeasible",
        "message": STATIC_CPU,
        "observedGeneration": pod["metadata"]["generation"],
    }
    world.plane.api.patch(pod_path(world, "resized") + "/status", {"status": {"conditions": [infeasible]}}, "strategic")
    bare_pod(world, "probe-2", nodeSelector={HOSTNAME: spot}, containers=containers(cpu="3"))
    binds_to(world, "probe-2", spot)
    live = plan(world, config)
    assert live["drained"] == [od] and moves(live) == [("mover", od, spot)], live


def write_cpu_status(status: dict[str, Any], container: tuple[str, str], pod: tuple[str, str]) -> None:
    """Put cpu figures into a pod's status: ``container`` = (``allocatedResources``, ``resources.requests``) of its
    container, ``pod`` = (``status.allocatedResources``, ``status.resources.requests``); "" leaves a field out."""
    for (allocated, actuated), where in ((container, status["containerStatuses"][0]), (pod, status)):
        if allocated:
            where["allocatedResources"] = {"cpu": allocated}
        if actuated:
            where["resources"] = {"requests": {"cpu": actuated}}


NO = ("", "")
# What the status says; the spec's cpu; with 250m overhead?; the container's (allocated, actuated); the pod's
# (allocated, actuated); the cpu kube-scheduler counts.
STATUS_SHAPES: list[tuple[str, str, bool, tuple[str, str], tuple[str, str], int]] = [
    ("no resources in the status", "1", False, NO, NO, 1000),
    ("a container's allocatedResources alone", "1", False, ("3", ""), NO, 3000),
    ("a container's resources.requests alone", "1", False, ("", "3"), NO, 3000),
    ("a resize allocated, not yet actuated (pod-level status)", "3", False, ("3", "1"), ("3", "1"), 3000),
    ("the pod's allocatedResources alone: the containers count", "1", False, ("1", "1"), ("3", ""), 1000),
    ("a 1.37 kubelet's pod-level status with overhead: counted twice", "1", True, ("1", "1"), ("1250m", "1250m"), 1500),
]


def test_the_status_fields_kube_scheduler_reads_for_a_pod_on_a_node(world: World) -> None:
    """Which status fields kube-scheduler 1.37 reads for a pod already on a node (``pkg/scheduler/framework/
    types.go``, ``PodInfo.CalculateResource``; component-helpers ``resource/helpers.go``,
    ``AggregateContainerRequests``): per container ``allocatedResources`` and ``resources.requests``, each alone
    too; the pod's ``status.allocatedResources`` and ``status.resources.requests`` in their place when both are
    set (InPlacePodLevelResourcesVerticalScaling, on by default since 1.36); ``spec.overhead`` added on top, also
    to a pod-level status that holds it already (a 1.37 kubelet writes ``PodRequests`` of the pod there,
    ``pkg/kubelet/kubelet_pods.go``). For each shape, the cpu the library counts for the live pod
    (``shared/podrequests.py``, ``status_requests``, as ``Pod.node_requests``) is the cpu the live scheduler
    leaves free on a 4-cpu node to the millicore: a probe asking for exactly the rest binds, one asking 1m more
    is refused."""
    plane = world.plane
    node = world.spot()  # 4 cpu
    runtime_class = f"overhead-{world.label}"
    overhead = {"podFixed": {"cpu": "250m"}}
    plane.api.post(
        "/apis/node.k8s.io/v1/runtimeclasses",
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": runtime_class},
            "handler": "e2e",
            "overhead": overhead,
        },
    )
    try:
        for i, (shape, cpu, with_overhead, container, pod_level, counted) in enumerate(STATUS_SHAPES):
            name = f"shaped-{i}"
            spec: dict[str, Any] = {"containers": containers(cpu=cpu)}
            if with_overhead:
                spec["runtimeClassName"] = runtime_class
            bare_pod(world, name, node=node, **spec)
            pod = running(world, name)
            status = copy.deepcopy(pod["status"])
            write_cpu_status(status, container, pod_level)
            pod = plane.api.put(pod_path(world, name) + "/status", {**pod, "status": status})
            ours = Pod.from_api(pod).node_requests.get("cpu", 0)
            assert ours == counted, f"{shape}: the library counts {ours}m, not {counted}m"
            rest = 4000 - counted
            bare_pod(world, f"probe-{i}", nodeSelector={HOSTNAME: node}, containers=containers(cpu=f"{rest}m"))
            binds_to(world, f"probe-{i}", node)
            bare_pod(world, f"over-{i}", nodeSelector={HOSTNAME: node}, containers=containers(cpu=f"{rest + 1}m"))
            refused(world, f"over-{i}", "Insufficient cpu")
            delete_pod(world, name)
    finally:
        plane.api.delete_if_exists(f"/apis/node.k8s.io/v1/runtimeclasses/{runtime_class}")
