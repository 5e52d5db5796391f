"""Drains in parallel, and pending pods that hold only the drains they need, against the real control plane.

The run loop advances every drain in flight each cycle and starts new ones while ``disruption.budgets`` allows
(``rescheduler.max_nodes_per_cycle`` caps how many start per cycle); a drain waiting on a budget's 429, on its
replacements or on a Job (``disruption.jobs: wait``) does not stop the others. A pod Pending and
``PodScheduled=False/Unschedulable`` holds a drain only when it would fit the spot room that drain takes, or
could use the on-demand node being emptied; ``plan`` names it (``reasons[node]`` of kind ``waiting-pod``,
``summary["waiting_pods"]``) and the loop counts the nodes it holds in
``spotshift_rescheduler_nodes_held_back{control="waiting-pod"}``.

The world of these tests is :mod:`tests.support.rescheduler_world`. A node "in flight" carries spotshift's drain
mark (the taint, or the ``spotshift.io/drain-state`` annotation) and is not yet ``drained``. Pods annotated
``e2e.spotshift.io/ready-after`` turn Ready that many seconds after they run (the kubelet stand-in), so an
eviction that a PodDisruptionBudget paces waits for the replacement before it; on-demand nodes carry a
``NoSchedule`` taint only their own workload tolerates, so placement is decided, not likely. Every waiting is on
an observed state (``wait_for``), never on a sleep.
"""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.controlplane import ApiError, wait_for
from tests.support.rescheduler_world import (
    ROOT,
    STATE_ANNOTATION,
    TAINT_KEY,
    TAINT_VALUE,
    BudgetWatcher,
    NodeWatcher,
    Rescheduler,
    World,
    command_env,
    pod_nodes,
)

pytestmark = pytest.mark.e2e

OWNER_TAINT = "e2e.spotshift.io/owner"
"""A ``NoSchedule`` taint on an on-demand node that only the workload of the same value tolerates."""
WAITING_POD = '{control="waiting-pod"}'
HELD_BACK = "spotshift_rescheduler_nodes_held_back"
CYCLES = "spotshift_rescheduler_cycle_duration_seconds_count"
ABSENT_SCHEDULER = "spotshift-e2e-absent"


# --- helpers ---------------------------------------------------------------------------------------------------


def owner_taint(owner: str) -> dict[str, str]:
    return {"key": OWNER_TAINT, "value": owner, "effect": "NoSchedule"}


def tolerate(owner: str) -> list[dict[str, str]]:
    return [{"key": OWNER_TAINT, "operator": "Equal", "value": owner, "effect": "NoSchedule"}]


def app_container(cpu: str = "100m") -> list[dict[str, Any]]:
    return [
        {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
    ]


def state(node: dict[str, Any]) -> str | None:
    return (node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)


def marked(node: dict[str, Any]) -> bool:
    """spotshift's drain mark: its taint or its drain-state annotation."""
    taints = node["spec"].get("taints") or []
    return state(node) is not None or any(t.get("key") == TAINT_KEY and t.get("value") == TAINT_VALUE for t in taints)


def in_flight(node: dict[str, Any]) -> bool:
    """Marked and not yet ``drained``: a drain in progress, as ``disruption.budgets`` counts it."""
    return marked(node) and state(node) != "drained"


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def pods_on(world: World, node: str) -> list[dict[str, Any]]:
    """The test's pods bound to ``node``, not terminating and not finished (a Succeeded Job pod stays bound)."""
    pods = world.plane.api.list(f"/api/v1/namespaces/{world.ns}/pods", fieldSelector=f"spec.nodeName={node}")
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def drained(world: World, node: str) -> bool:
    """Annotated ``drained`` and empty of the test's pods."""
    return state(world.node(node)) == "drained" and not pods_on(world, node)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def cycles(r: Rescheduler, n: int) -> None:
    """Wait until the loop has run ``n`` more cycles than it had when called (the cycle duration's count)."""

    def count() -> float | None:
        if r.proc.poll() is not None:
            raise AssertionError(f"rescheduler {r.name} exited ({r.proc.returncode}):\n{r.tail()}")
        return r.metric(CYCLES)

    first = wait_for(count, timeout=60, what="the cycle count") or 0.0
    wait_for(lambda: (count() or 0.0) >= first + n, timeout=60, what=f"{n} more housekeeping cycles")


def said(r: Rescheduler, prefix: str) -> list[str]:
    """The rescheduler's log messages that start with ``prefix``."""
    return [line["msg"] for line in r.lines() if str(line.get("msg", "")).startswith(prefix)]


def plan_json(world: World, config: Any) -> dict[str, Any]:
    """``spot-rescheduler plan --output json`` against the live cluster, as an operator runs it."""
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "plan",
            f"--kubeconfig={world.plane.kubeconfig}",
            f"--config={config}",
            "--output=json",
        ],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def shown(plan: dict[str, Any]) -> str:
    """What a failed assertion on a plan prints: the reasons, the drained nodes and the summary."""
    return f"reasons {plan['reasons']}, drained {plan['drained']}, summary {plan['summary']}"


def unschedulable_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return c
    return None


def wait_unschedulable(world: World, name: str) -> dict[str, Any]:
    """Wait until the pod is Pending, unbound and ``PodScheduled=False/Unschedulable``; return it."""

    def pending() -> list[dict[str, Any]]:
        pod = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{name}")
        bound = pod["spec"].get("nodeName")
        return [pod] if not bound and unschedulable_condition(pod) and pod["status"].get("phase") == "Pending" else []

    return wait_for(pending, timeout=60, what=f"pod {name} to be Pending and Unschedulable")[0]


class MarkWatcher(threading.Thread):
    """Polls one phase's on-demand nodes every 0.1 s; records the most that were in flight at once."""

    def __init__(self, world: World) -> None:
        super().__init__(daemon=True)
        self.api = world.plane.new_api()
        self.selector = f"{world.od_key}=true"
        self.stop = threading.Event()
        self.most = 0
        self.seen: set[str] = set()
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                nodes = list(self.api.list("/api/v1/nodes", labelSelector=self.selector))
            except (ApiError, requests.RequestException):
                self.stop.wait(0.1)
                continue
            flying = {n["metadata"]["name"] for n in nodes if in_flight(n)}
            self.most = max(self.most, len(flying))
            self.seen |= flying
            self.samples += 1
            self.stop.wait(0.1)

    def close(self) -> int:
        self.stop.set()
        self.join(5)
        self.api.close()
        assert self.samples > 0, "the mark watcher never read the nodes"
        return self.most


# --- 1. a budget of half the nodes drains them in parallel ------------------------------------------------------

NODES = 8
READY_AFTER = "5"


@dataclass(frozen=True, slots=True)
class Phase:
    seconds: float
    most_in_flight: int


def drain_all(world: World, start: Callable[..., Rescheduler], prefix: str, budget: str, *flags: str) -> Phase:
    """Eight on-demand nodes, each with the two pods of its own Deployment (a budget of one disruption, pods
    Ready 5 s after they run), two spot nodes with room for all; the time from the rescheduler's start until
    every on-demand node is ``drained`` and empty, and the most nodes in flight at once meanwhile."""
    apps = [f"{prefix}-{i}" for i in range(NODES)]
    ods = {app: world.on_demand(taints=[owner_taint(app)]) for app in apps}
    for app in apps:
        world.deployment(app, 2, annotations={"e2e.spotshift.io/ready-after": READY_AFTER}, tolerations=tolerate(app))
    for app in apps:
        placed = world.ready(app)
        assert set(pod_nodes(placed).values()) == {ods[app]}, pod_nodes(placed)
        # Made once its pods are Ready: the budget watcher reads every budget of the test from its start.
        world.pdb(app, app, maxUnavailable=1)
    for app in apps:
        world.wait_pdb(app, allowed=1)
    spots = [world.spot() for _ in range(2)]

    config = world.config(disruption={"budgets": [{"nodes": budget}]})
    marks = MarkWatcher(world)
    marks.start()
    began = time.monotonic()
    r = start(config, *flags, name=prefix)
    finished: dict[str, float] = {}

    def all_drained() -> bool:
        if r.proc.poll() is not None:
            raise AssertionError(f"rescheduler {r.name} exited ({r.proc.returncode}):\n{r.tail()}")
        for od in ods.values():
            if od not in finished and drained(world, od):
                finished[od] = time.monotonic() - began
        return len(finished) == NODES

    try:
        wait_for(all_drained, timeout=600, what=f"all {NODES} on-demand nodes to be drained", interval=0.2)
    finally:
        most = marks.close()
    seconds = max(finished.values())
    r.close()

    for app in apps:
        pods = world.ready(app)
        assert len(pods) == 2 and all(ready(p) for p in pods), f"{app}: a pod was lost"
        assert set(pod_nodes(pods).values()) <= set(spots), pod_nodes(pods)
    assert marks.seen == set(ods.values()), "every node was seen in flight"
    assert {f"drained node {od}" for od in ods.values()} <= set(said(r, "drained node ")), r.tail()
    return Phase(seconds, most)


def test_a_budget_of_half_the_nodes_drains_them_in_parallel(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    serial = drain_all(world, start, "a", "1")
    # A fresh set of nodes and workloads, with labels of its own: the first phase's nodes are no class here.
    fresh = World(world.plane, world.ns, world.make_node, world.tmp)
    parallel = drain_all(fresh, start, "b", "50%", "--max-nodes-per-cycle=4")

    ratio = parallel.seconds / serial.seconds
    print(
        f"\nparallel-drains | {NODES} nodes | budget 1: {serial.seconds:.1f}s, at most {serial.most_in_flight} in "
        f"flight | budget 50% with 4 per cycle: {parallel.seconds:.1f}s, at most {parallel.most_in_flight} in "
        f"flight | ratio {ratio:.2f}"
    )
    assert serial.most_in_flight <= 1, f"budget 1: {serial.most_in_flight} nodes were draining at once"
    assert parallel.most_in_flight <= math.ceil(NODES * 0.5), f"budget 50%: {parallel.most_in_flight} at once"
    assert ratio <= 0.35, f"draining 4 at a time took {ratio:.2f} of the time one at a time took"


# --- 2. a pod that fits no node holds nothing -------------------------------------------------------------------


def test_a_pod_with_an_impossible_node_selector_holds_nothing(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("web", 2)
    web = world.ready("web")
    assert set(pod_nodes(web).values()) == {od}
    spot = world.spot()
    nowhere = f"e2e.spotshift.io/nowhere-{world.label}"
    world.deployment("nowhere", 1, nodeSelector={"e2e.spotshift.io/test": world.label, nowhere: "true"})
    (lost,) = wait_for(lambda: world.pods("nowhere"), timeout=60, what="the nowhere pod to be created")
    wait_unschedulable(world, lost["metadata"]["name"])
    config = world.config()

    r = start(config)
    wait_for(lambda: drained(world, od), timeout=120, what=f"{od} to be drained")

    moved = world.ready("web")
    assert set(pod_nodes(moved).values()) == {spot} and not uids(moved) & uids(web)
    still = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{lost['metadata']['name']}")
    assert not still["spec"].get("nodeName") and unschedulable_condition(still), "it was pending all along"
    assert r.metric(HELD_BACK, WAITING_POD) in (None, 0.0)
    assert said(r, f"drained node {od}")
    plan = plan_json(world, config)
    assert plan["summary"]["waiting_pods"][f"{world.ns}/{lost['metadata']['name']}"] == [], "counted, holds nothing"
    world.plane.api.delete(f"/apis/apps/v1/namespaces/{world.ns}/deployments/nowhere")


# --- 3. a pending pod that needs the spot room holds the drain --------------------------------------------------

SCHEDULER_MESSAGE = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
    "1 Preemption is not helpful for scheduling."
)


def held_by(
    world: World, start: Callable[..., Rescheduler], config: Path, od: str, key: str, web: list[dict[str, Any]]
) -> Rescheduler:
    """``plan`` says the waiting pod ``key`` holds ``od``; the run loop leaves ``od`` untouched over four cycles with
    the node counted as held by a waiting pod, and evicts nothing."""
    plan = plan_json(world, config)
    assert plan["reasons"].get(od, {}).get("kind") == "waiting-pod", shown(plan)
    assert plan["reasons"][od]["pod"] == key and plan["reasons"][od]["detail"], plan["reasons"][od]
    assert od not in plan["drained"]
    assert plan["summary"]["waiting_pods"] == {key: [od]}

    nodes = NodeWatcher(world.plane, [od])
    nodes.start()
    r = start(config)
    wait_for(lambda: r.metric(HELD_BACK, WAITING_POD) == 1, timeout=60, what="the node to be held by the pod")
    cycles(r, 4)
    assert nodes.close() == {}, "the node was marked while the pending pod could use its room"
    assert r.metric(HELD_BACK, WAITING_POD) == 1
    assert uids(world.pods("web")) == uids(web), "nothing was evicted"
    assert r.metric("spotshift_rescheduler_drains_started_total") in (None, 0.0)
    return r


def test_a_pending_pod_that_needs_the_spot_room_holds_the_drain(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    """One spot node of 1 cpu has room for the on-demand node's two 300m pods, or for the pending 600m pod that
    may only go to spot: not for both. kube-scheduler would bind that pod at once to the free room, so it is
    served by no scheduler and its ``Unschedulable`` condition is written by the test, as kube-scheduler writes
    it, through the pods/status subresource."""
    od = world.on_demand(allocatable={"cpu": "1"})
    world.deployment("web", 2, containers=app_container("300m"))
    web = world.ready("web")
    assert set(pod_nodes(web).values()) == {od}
    spot = world.spot(allocatable={"cpu": "1"})
    key = waiting_pod(world, "waiting", cpu="600m", nodeSelector={world.spot_key: "true"})
    config = world.config()

    r = held_by(world, start, config, od, key, web)

    world.plane.delete_pod(world.ns, "waiting")
    wait_for(lambda: drained(world, od), timeout=120, what=f"{od} to be drained once the pod is gone")
    moved = world.ready("web")
    assert set(pod_nodes(moved).values()) == {spot} and not uids(moved) & uids(web)
    wait_for(lambda: r.metric(HELD_BACK, WAITING_POD) == 0, timeout=30, what="the gauge to count no held node")


def waiting_pod(world: World, name: str, *, cpu: str, **spec: Any) -> str:
    """A bare pod no scheduler serves, kept Pending with ``PodScheduled=False/Unschedulable``; its key."""
    node_selector = {"e2e.spotshift.io/test": world.label, **spec.pop("nodeSelector", {})}
    world.plane.api.post(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "schedulerName": ABSENT_SCHEDULER,
                "nodeSelector": node_selector,
                "terminationGracePeriodSeconds": 0,
                "containers": app_container(cpu),
                **spec,
            },
        },
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": SCHEDULER_MESSAGE,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    world.plane.api.patch(
        f"/api/v1/namespaces/{world.ns}/pods/{name}/status", {"status": {"conditions": [condition]}}, "strategic"
    )
    wait_unschedulable(world, name)
    return f"{world.ns}/{name}"


# --- 4. a pending pod that could use the emptied node holds it --------------------------------------------------


def test_a_pending_pod_that_could_use_the_emptied_node_holds_it(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    """A 1.5-cpu pod, scheduled by kube-scheduler, fits neither the 1-cpu spot node nor the 2-cpu on-demand node
    while that node's two 300m pods are there; it would fit the on-demand node once they are moved to spot."""
    od = world.on_demand(allocatable={"cpu": "2"})
    world.deployment("web", 2, containers=app_container("300m"))
    web = world.ready("web")
    assert set(pod_nodes(web).values()) == {od}
    world.spot(allocatable={"cpu": "1"})
    world.plane.api.post(
        f"/api/v1/namespaces/{world.ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "big", "labels": {"app": "big"}},
            "spec": {
                "nodeSelector": {"e2e.spotshift.io/test": world.label},
                "terminationGracePeriodSeconds": 0,
                "containers": app_container("1500m"),
            },
        },
    )
    pending = wait_unschedulable(world, "big")
    assert "Insufficient cpu" in (unschedulable_condition(pending) or {}).get("message", "")
    key = f"{world.ns}/big"
    config = world.config()

    held_by(world, start, config, od, key, web)
    assert not world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/big")["spec"].get("nodeName")
    world.plane.delete_pod(world.ns, "big")


# --- 5. a drain waiting for a Job does not stop another ---------------------------------------------------------


def test_a_job_waited_for_does_not_stop_another_drain(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    """Node A runs a Job pod and a Deployment pod, node B a Deployment pod. B is no on-demand node (no class)
    until A's drain is waiting for its Job, so A is the drain that waits; then B is labelled on-demand."""
    a = world.on_demand(taints=[owner_taint("a")])
    world.deployment("web-a", 1, tolerations=tolerate("a"))
    world.job("report", tolerations=tolerate("a"))
    web_a = world.ready("web-a")
    (report,) = wait_for(lambda: [p for p in world.pods("report") if ready(p)], timeout=60, what="the Job's pod to run")
    b_node = world.make_node("od", labels={"e2e.spotshift.io/test": world.label}, taints=[owner_taint("b")])
    b = b_node["metadata"]["name"]
    world.nodes.append(b)
    world.deployment("web-b", 1, tolerations=tolerate("b"))
    web_b = world.ready("web-b")
    assert set(pod_nodes(web_a).values()) == {a} and report["spec"]["nodeName"] == a
    assert set(pod_nodes(web_b).values()) == {b}
    spot = world.spot()

    config = world.config(disruption={"jobs": "wait", "job_timeout": "10m", "budgets": [{"nodes": "2"}]})
    r = start(config, "--max-nodes-per-cycle=2")
    wait_for(lambda: state(world.node(a)) == "draining", timeout=60, what=f"{a} to be draining")
    wait_for(lambda: world.events("SpotshiftWaitingForJobs"), timeout=30, what="the drain to wait for the Job")

    world.plane.api.patch(f"/api/v1/nodes/{b}", {"metadata": {"labels": {world.od_key: "true"}}}, "merge")
    wait_for(lambda: drained(world, b), timeout=120, what=f"{b} to be drained while {a} waits for its Job")

    assert state(world.node(a)) == "draining" and world.our_taints(a), f"{a} is still waiting for its Job"
    running = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{report['metadata']['name']}")
    assert running["status"]["phase"] == "Running" and running["spec"]["nodeName"] == a
    assert uids(world.pods("web-a")) == uids(web_a), "nothing on A is evicted while its Job runs"
    moved_b = world.ready("web-b")
    assert set(pod_nodes(moved_b).values()) == {spot}
    wait_for(
        lambda: r.metric("spotshift_rescheduler_drains_in_flight") == 1, timeout=30, what="one drain in flight (A)"
    )

    world.plane.api.patch(
        f"/api/v1/namespaces/{world.ns}/pods/{report['metadata']['name']}/status",
        {"status": {"phase": "Succeeded"}},
        "merge",
    )
    wait_for(lambda: drained(world, a), timeout=120, what=f"{a} to be drained once its Job is done")
    moved_a = world.ready("web-a")
    assert set(pod_nodes(moved_a).values()) == {spot} and not uids(moved_a) & uids(web_a)
    finished = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{report['metadata']['name']}")
    assert finished["status"]["phase"] == "Succeeded" and not finished["metadata"].get("deletionTimestamp")
    wait_for(lambda: r.metric("spotshift_rescheduler_drains_in_flight") == 0, timeout=30, what="no drain in flight")
    assert said(r, f"drained node {a}") and said(r, f"drained node {b}")
