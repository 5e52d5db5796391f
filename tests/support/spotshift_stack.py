"""spotshift as the replay runs it on the real control plane, for the e2e tests that play the replay's trace
(tests/e2e/test_churn_replay_e2e.py, tests/e2e/test_karpenter_e2e.py):

* :func:`serving_spotshift`: ``spot-extender`` (tests/support/extender_server.py) with the replay's configuration,
  serving the webhook (deploy/base/mutatingwebhook.yaml, narrowed to one namespace by a label) and the extender of
  deploy/scheduler/base/kube-scheduler-v1.yaml (the ``spotshift-scheduler`` profile, which the webhook sets on
  every pod);
* :func:`rescheduler_flags`: ``spot-rescheduler run``'s flags with the replay's durations;
* :func:`replay_deployment`, :func:`replay_budgets`: the replay's workloads and their budgets, pods turning Ready
  ``READY_AFTER`` after they run (the kubelet stand-in's ``ready-after`` annotation);
* :class:`BudgetLog` and :func:`evicted`: what the tests read back.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import yaml

from bench.churnlab import replay
from extender.certs import main as spot_certs
from tests.support.controlplane import ControlPlane, wait_for
from tests.support.extender_server import ROOT, ExtenderProcess
from tests.support.replay_cloud import TEST_LABEL
from tests.support.rescheduler_world import PDBS, Rescheduler

SCOPE_LABEL = "e2e.spotshift.io/replay"


class Clock(Protocol):
    def now(self) -> float: ...


def seconds(trace_seconds: float, compression: float) -> str:
    """A duration of the trace as the real processes take it (a Go-style duration)."""
    return f"{trace_seconds / compression:g}s"


def rescheduler_flags(compression: float) -> list[str]:
    """``spot-rescheduler run``'s duration flags: the replay's, divided by ``compression``."""
    r = replay.RESCHEDULER
    return [
        f"--housekeeping-interval={seconds(r['housekeeping_interval'], compression)}",
        f"--node-drain-delay={seconds(r['node_drain_delay'], compression)}",
        f"--pod-eviction-timeout={seconds(r['pod_eviction_timeout'], compression)}",
        f"--max-graceful-termination={seconds(r['max_graceful_termination'], compression)}",
        f"--replacement-timeout={seconds(r['replacement_timeout'], compression)}",
        f"--node-backoff={seconds(r['node_backoff'], compression)}",
    ]


@contextlib.contextmanager
def serving_spotshift(
    plane: ControlPlane, namespace: str, tmp_path: Path, compression: float
) -> Iterator[tuple[Path, str]]:
    """spot-extender serving the webhook (for ``namespace``) and the extender (the ``spotshift-scheduler``
    profile of a restarted kube-scheduler); yields the path of the replay's configuration and spotshift's own
    namespace (its Lease and the placeholders; the webhook leaves the pods of that namespace alone)."""
    home = f"{namespace}-spotshift"
    plane.create_namespace(home)
    config = replay.overrides(compression)
    config["namespace"] = home
    config["rescheduler"]["lease_name"] = f"replay-{namespace}"
    path = tmp_path / "spotshift.yaml"
    path.write_text(yaml.safe_dump(config))
    server = ExtenderProcess(tmp_path, plane.kubeconfig, config).start()
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
        plane.api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", shipped)
        certs = ["--out", str(server.certs), "--ip", "127.0.0.1"]
        patched = spot_certs([*certs, "--patch-webhook", hook_name, "--kubeconfig", str(plane.kubeconfig)])
        assert patched == 0
        plane.api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SCOPE_LABEL: "on"}}})
        plane.restart_scheduler(scheduler)
        wait_for(lambda: mutated(plane, namespace), timeout=30, what="the API server to call the webhook")
        yield path, home
    finally:
        plane.delete_namespace(home)
        plane.api.delete_if_exists(hook_path)
        plane.restart_scheduler(None)
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


def replay_deployment(workload: Any, label: str, compression: float) -> dict[str, Any]:
    """A workload of the replay as a Deployment whose pods select the nodes labelled ``TEST_LABEL: label``."""
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
                    "annotations": {"e2e.spotshift.io/ready-after": f"{replay.READY_AFTER / compression:g}"},
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


def replay_budgets(plane: ControlPlane, namespace: str) -> None:
    """The replay's budgets (``maxUnavailable: 1``) for the workloads that have one."""
    for w in replay.WORKLOADS:
        if w.pdb:
            assert w.pdb == "max-unavailable-1"
            body = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": w.name},
                "spec": {"selector": {"matchLabels": {"app": w.name}}, "maxUnavailable": 1},
            }
            plane.api.post(PDBS.format(ns=namespace), body)


class BudgetLog:
    """Every budget's status, polled; the trace times (by ``clock``) at which one was below its minimum."""

    def __init__(self, plane: ControlPlane, namespace: str, clock: Clock) -> None:
        self.api = plane.new_api()
        self.path = PDBS.format(ns=namespace)
        self.clock = clock
        self.below: list[tuple[float, str]] = []
        self.samples = 0

    def sample(self) -> None:
        for pdb in self.api.list(self.path):
            status = pdb.get("status") or {}
            if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                continue
            if status.get("currentHealthy", 0) < status.get("desiredHealthy", 0):
                self.below.append((self.clock.now(), pdb["metadata"]["name"]))
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
