"""The churn simulation validated on the real control plane: bench/churnlab/replay.py's 30-minute trace played on
node stand-ins, with the real webhook, the real kube-scheduler calling the extender, the real controllers and
``spot-rescheduler run`` (capacity mode on), against the simulation of the same trace.

What runs here, besides the control plane of tests/support/controlplane:

* ``spot-extender`` (tests/support/extender_server.py) with the replay's configuration, serving the webhook
  (deploy/base/mutatingwebhook.yaml, narrowed to this test's namespace by a label) and the extender of
  deploy/scheduler/base/kube-scheduler-v1.yaml (the ``spotshift-scheduler`` profile, which the webhook sets on
  every pod);
* the cloud of tests/support/replay_cloud.py: the spot market of the trace and a provisioner that decides as the
  simulation's does;
* the Deployments and budgets of the replay, kept by kube-controller-manager; pods turn Ready
  ``READY_AFTER`` after they run (the kubelet stand-in's ``ready-after`` annotation);
* ``spot-rescheduler run`` with the replay's configuration, every duration divided by ``COMPRESSION``.

The trace's clock runs ``COMPRESSION`` times faster than the wall clock; the figures are read back in trace time:
on-demand node-minutes from each node's recorded lifetime, evictions from the rescheduler's log. Both must be
within ``TOLERANCE`` of the simulation's. The product's guarantees are checked besides: no budget below its
minimum while spotshift acts, every Deployment whole at the end, no workload pod pending.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.churnlab import replay
from extender.certs import main as spot_certs
from tests.support.controlplane import ControlPlane, wait_for
from tests.support.extender_server import ROOT, ExtenderProcess
from tests.support.provisioner import unschedulable
from tests.support.replay_cloud import TEST_LABEL, Cloud
from tests.support.rescheduler_world import PDBS, Rescheduler

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("capacity_priority_class")]

K = replay.COMPRESSION
SCOPE_LABEL = "e2e.spotshift.io/replay"


def seconds(trace_seconds: float) -> str:
    """A duration of the trace as the real processes take it (a Go-style duration)."""
    return f"{trace_seconds / K:g}s"


@pytest.fixture
def spotshift(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """spot-extender serving the webhook (for ``namespace``) and the extender (the ``spotshift-scheduler``
    profile of a restarted kube-scheduler); yields the path of the replay's configuration and spotshift's own
    namespace (its Lease and the placeholders; the webhook leaves the pods of that namespace alone)."""
    home = f"{namespace}-spotshift"
    control_plane.create_namespace(home)
    config = replay.overrides(K)
    config["namespace"] = home
    config["rescheduler"]["lease_name"] = f"replay-{namespace}"
    path = tmp_path / "spotshift.yaml"
    path.write_text(yaml.safe_dump(config))
    server = ExtenderProcess(tmp_path, control_plane.kubeconfig, config).start()
    hook_name = f"spotshift-replay-{uuid.uuid4().hex[:6]}"
    hook_path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{hook_name}"
    shipped = yaml.safe_load((ROOT / "deploy/base/mutatingwebhook.yaml").read_text())
    shipped["metadata"]["name"] = hook_name
    hook = shipped["webhooks"][0]
    hook["clientConfig"] = {"url": server.url + "/mutate"}  # no Service networking on loopback
    hook["namespaceSelector"]["matchExpressions"].append({"key": SCOPE_LABEL, "operator": "In", "values": ["on"]})
    scheduler = yaml.safe_load((ROOT / "deploy/scheduler/base/kube-scheduler-v1.yaml").read_text())
    (ext,) = scheduler["extenders"]
    ext["urlPrefix"] = server.url
    ext["tlsConfig"]["caFile"] = str(server.certs / "ca.crt")
    scheduler["profiles"].append({"schedulerName": "default-scheduler"})
    try:
        control_plane.api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", shipped)
        certs = ["--out", str(server.certs), "--ip", "127.0.0.1"]
        patched = spot_certs([*certs, "--patch-webhook", hook_name, "--kubeconfig", str(control_plane.kubeconfig)])
        assert patched == 0
        control_plane.api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SCOPE_LABEL: "on"}}})
        control_plane.restart_scheduler(scheduler)
        wait_for(lambda: mutated(control_plane, namespace), timeout=30, what="the API server to call the webhook")
        yield path, home
    finally:
        control_plane.delete_namespace(home)
        control_plane.api.delete_if_exists(hook_path)
        control_plane.restart_scheduler(None)
        server.stop()


def pod_body(name: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {TEST_LABEL: label},
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
        },
    }


def mutated(plane: ControlPlane, namespace: str) -> bool:
    pod = plane.api.post(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod_body("probe", "none"))
    return pod["spec"].get("schedulerName") == replay.SCHEDULER_NAME


def deployment(workload: Any, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload.name},
        "spec": {
            "replicas": workload.peak,
            "selector": {"matchLabels": {"app": workload.name}},
            "template": {
                "metadata": {
                    "labels": {"app": workload.name},
                    "annotations": {"e2e.spotshift.io/ready-after": f"{replay.READY_AFTER / K:g}"},
                },
                "spec": {
                    "nodeSelector": {TEST_LABEL: label},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1",
                            "resources": {
                                "requests": {"cpu": f"{workload.cpu_m}m", "memory": f"{workload.memory_mi}Mi"}
                            },
                        }
                    ],
                },
            },
        },
    }


class BudgetLog:
    """Every budget's status, polled; the trace times at which one was below its minimum."""

    def __init__(self, plane: ControlPlane, namespace: str, cloud: Cloud) -> None:
        self.api = plane.new_api()
        self.path = PDBS.format(ns=namespace)
        self.cloud = cloud
        self.below: list[tuple[float, str]] = []
        self.samples = 0

    def sample(self) -> None:
        for pdb in self.api.list(self.path):
            status = pdb.get("status") or {}
            if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                continue
            if status.get("currentHealthy", 0) < status.get("desiredHealthy", 0):
                self.below.append((self.cloud.now(), pdb["metadata"]["name"]))
        self.samples += 1


def evicted(r: Rescheduler) -> set[str]:
    """Pods the rescheduler evicted (an eviction of a pod already terminating is not one)."""
    return {
        line["pod"]
        for line in r.lines()
        if str(line.get("msg", "")).startswith("eviction of pod")
        and line.get("result") == "evicted"
        and "already terminating" not in line["msg"]
    }


def test_the_replayed_trace_matches_the_simulation(
    control_plane: ControlPlane,
    namespace: str,
    spotshift: tuple[Path, str],
    start: Callable[..., Rescheduler],
) -> None:
    simulated, _ = replay.simulate_replay()
    label = uuid.uuid4().hex[:8]
    api = control_plane.api
    config, home = spotshift
    r = start(
        config,
        f"--housekeeping-interval={seconds(replay.RESCHEDULER['housekeeping_interval'])}",
        f"--node-drain-delay={seconds(replay.RESCHEDULER['node_drain_delay'])}",
        f"--pod-eviction-timeout={seconds(replay.RESCHEDULER['pod_eviction_timeout'])}",
        f"--max-graceful-termination={seconds(replay.RESCHEDULER['max_graceful_termination'])}",
        f"--replacement-timeout={seconds(replay.RESCHEDULER['replacement_timeout'])}",
        f"--node-backoff={seconds(replay.RESCHEDULER['node_backoff'])}",
    )
    for w in replay.WORKLOADS:
        if w.pdb:
            assert w.pdb == "max-unavailable-1"
            body = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": w.name},
                "spec": {"selector": {"matchLabels": {"app": w.name}}, "maxUnavailable": 1},
            }
            api.post(PDBS.format(ns=namespace), body)
    cloud = Cloud(control_plane, [namespace, home], label, K)
    budgets = BudgetLog(control_plane, namespace, cloud)
    try:
        for w in replay.WORKLOADS:
            api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment(w, label))
        cloud.t0 = time.monotonic()
        cloud.start()
        # The trace's clock drives the run; the figures come from what was observed, not from this loop's pace.
        while cloud.now() < replay.LENGTH:
            if r.proc.poll() is not None:
                raise AssertionError(f"the rescheduler exited ({r.proc.returncode}):\n{r.tail()}")
            control_plane.ensure_alive()
            assert cloud.is_alive(), f"the cloud stopped: {cloud.errors[-3:]}"
            budgets.sample()
            time.sleep(0.2)
        cloud.stop.set()
        cloud.join(60)
        real_minutes = cloud.on_demand_node_minutes(replay.LENGTH)
        real_evictions = len(evicted(r))
        series = cloud.series(replay.LENGTH)
        print(
            f"replay: on-demand node-minutes real {real_minutes:.1f} / simulated "
            f"{simulated.on_demand_node_minutes:.1f}; evictions real {real_evictions} / simulated {simulated.evictions}"
        )
        print(f"on-demand nodes by minute, real:      {series}")
        print(f"on-demand nodes by minute, simulated: {replay.by_minute(simulated.on_demand_series)}")
        print("the cloud:", *cloud.events, sep="\n  ")
        print("API calls of the cloud that failed (retried on its next tick):", cloud.errors or "none")

        # What the product guarantees: no budget broken by a drain (the reclaim itself takes pods down with their
        # nodes; spotshift acts only once spot is back), no pod lost, nothing pending.
        assert budgets.samples > 100
        assert [(t, name) for t, name in budgets.below if t >= replay.BACK] == []
        assert simulated.pdb_violations == 0 and simulated.lost_pods == 0
        for w in replay.WORKLOADS:
            pods = control_plane.wait_for_deployment(namespace, w.name, timeout=120)
            assert len(pods) == w.peak, (w.name, len(pods))
        stuck = [p["metadata"]["name"] for p in api.list(f"/api/v1/namespaces/{namespace}/pods") if unschedulable(p)]
        assert stuck == []

        # The figures: within the tolerance of the simulation's, which are large enough for it to mean something.
        assert simulated.on_demand_node_minutes >= 60 and simulated.evictions >= 20, simulated
        assert (
            abs(real_minutes - simulated.on_demand_node_minutes) <= replay.TOLERANCE * simulated.on_demand_node_minutes
        )
        assert abs(real_evictions - simulated.evictions) <= replay.TOLERANCE * simulated.evictions
    finally:
        cloud.close()
        budgets.api.close()
