"""The extender on the real kube-scheduler, configured from deploy/scheduler/base/kube-scheduler-v1.yaml (the
KubeSchedulerConfiguration ``v1`` the overlays ship).

Only what cannot work on loopback is changed: ``urlPrefix`` points at the test server instead of the Service,
and ``tlsConfig.caFile`` at that server's CA file instead of the mounted Secret's. A ``default-scheduler``
profile is added next to the shipped ``spotshift-scheduler`` one, so other tests' pods keep being scheduled
while this module runs (the control plane turns leader election off, as it does for every config).

The test pods name ``spotshift-scheduler`` and carry no spot affinity (no webhook here), so where they land
is the extender's doing: without it, the default scoring would prefer the emptier on-demand node.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.fit_reasons import ERR_RECLAIMED
from tests.support.controlplane import ControlPlane, wait_for
from tests.support.extender_server import ROOT, ExtenderProcess

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

NodeFactory = Callable[..., dict[str, Any]]
NODE_LABEL = "e2e.spotshift.io/test"
SPOT = {"karpenter.sh/capacity-type": "spot"}
ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}
SCHEDULER = "spotshift-scheduler"


@pytest.fixture(scope="module")
def extender(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderProcess]:
    server = ExtenderProcess(tmp_path_factory.mktemp("extender"), control_plane.kubeconfig, {}).start()
    config = yaml.safe_load((ROOT / "deploy/scheduler/base/kube-scheduler-v1.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (ext,) = config["extenders"]
    assert (ext["nodeCacheCapable"], ext["ignorable"], ext["enableHTTPS"], ext["httpTimeout"]) == (
        True,
        True,
        True,
        "5s",
    )
    assert set(ext["tlsConfig"]) == {"caFile"}
    ext["urlPrefix"] = server.url
    ext["tlsConfig"]["caFile"] = str(server.certs / "ca.crt")
    config["profiles"].append({"schedulerName": "default-scheduler"})
    control_plane.restart_scheduler(config)
    try:
        yield server
    finally:
        server.stop()
        control_plane.restart_scheduler(None)


def pod_body(name: str, label: str, cpu: str = "250m", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "spread"}},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": {NODE_LABEL: label},
            "containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


def wait_known(server: ExtenderProcess, expected: dict[str, int]) -> None:
    """Wait until the extender's node cache has seen the test's nodes (their watch events)."""
    wait_for(lambda: server.scores(list(expected)) == expected, timeout=30, what=f"the node cache to score {expected}")


def schedule_one(plane: ControlPlane, namespace: str, body: dict[str, Any]) -> str:
    """Create a pod and wait for its binding (one at a time, so each decision sees the previous ones)."""
    name = body["metadata"]["name"]
    plane.api.post(f"/api/v1/namespaces/{namespace}/pods", body)
    pod = wait_for(
        lambda: (p := plane.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))["spec"].get("nodeName") and p,
        timeout=60,
        what=f"pod {name} to be scheduled",
        check=plane.ensure_alive,
    )
    return str(pod["spec"]["nodeName"])


def calls(server: ExtenderProcess, endpoint: str) -> float:
    """``spotshift_http_requests_total{code="200",endpoint=...}`` from the server's /metrics (0 before the first)."""
    wanted = f'spotshift_http_requests_total{{code="200",endpoint="{endpoint}"}} '
    lines = [line for line in server.metrics().splitlines() if line.startswith(wanted)]
    return float(lines[0].removeprefix(wanted)) if lines else 0.0


def test_pods_go_to_spot_while_it_has_room_then_to_on_demand(
    control_plane: ControlPlane, extender: ExtenderProcess, namespace: str, make_node: NodeFactory
) -> None:
    """With no webhook, the pods carry no spot preference or toleration: the default scoring alone would put
    them on the emptier on-demand node; the shipped v1 configuration's extender scores the spot node higher."""
    label = uuid.uuid4().hex[:8]
    spot = make_node("spot", labels={NODE_LABEL: label, **SPOT}, allocatable={"cpu": "1"})["metadata"]["name"]
    od = make_node("od", labels={NODE_LABEL: label, **ON_DEMAND}, allocatable={"cpu": "8"})["metadata"]["name"]
    wait_known(extender, {spot: 10, od: 0})
    before = {endpoint: calls(extender, endpoint) for endpoint in ("filter", "prioritize")}
    placed = [schedule_one(control_plane, namespace, pod_body(f"p{i}", label)) for i in range(6)]
    # 1 cpu of spot holds four 250m pods; the rest must go on-demand.
    assert placed == [spot] * 4 + [od] * 2
    # kube-scheduler filtered every pod through the extender, and asked it to score the four placed while both
    # nodes were feasible (pkg/scheduler/schedule_one.go: "When only one node after predicate, just use it", no
    # scoring). wait_known's own calls came before `before`.
    after = {endpoint: calls(extender, endpoint) for endpoint in ("filter", "prioritize")}
    assert after["filter"] - before["filter"] >= 6, (before, after)
    assert after["prioritize"] - before["prioritize"] >= 4, (before, after)


def test_nodes_being_reclaimed_are_never_chosen(
    control_plane: ControlPlane, extender: ExtenderProcess, namespace: str, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    # Reclaim signals the default scheduler does not act on by itself: a GKE maintenance label, and a
    # termination-handler taint the pods tolerate (a key-less Exists tolerates every taint).
    maintained = make_node(
        "maint", labels={NODE_LABEL: label, **SPOT, "cloud.google.com/active-node-maintenance": "ONGOING"}
    )["metadata"]["name"]
    interrupted = make_node(
        "itn",
        labels={NODE_LABEL: label, **SPOT},
        taints=[{"key": "aws-node-termination-handler/spot-itn", "value": "1715677964", "effect": "NoSchedule"}],
    )["metadata"]["name"]
    od = make_node("od", labels={NODE_LABEL: label, **ON_DEMAND}, allocatable={"cpu": "1"})["metadata"]["name"]
    # Being reclaimed, both spot nodes score 0 like the on-demand node; /filter shows the cache knows them.
    wait_known(extender, {maintained: 0, interrupted: 0, od: 0})
    pod = {"metadata": {"name": "probe", "namespace": "default"}, "spec": {"containers": []}}

    def filtered_out() -> set[str]:
        answer = extender.post("/filter", {"Pod": pod, "NodeNames": [maintained, interrupted, od]})
        return set(answer.get("FailedNodes") or {})

    wait_for(lambda: filtered_out() == {maintained, interrupted}, timeout=30, what="/filter to drop them")
    tolerate_all = [{"operator": "Exists"}]
    placed = [
        schedule_one(control_plane, namespace, pod_body(f"r{i}", label, tolerations=tolerate_all)) for i in range(4)
    ]
    assert placed == [od] * 4, "both spot nodes are being reclaimed"

    # The on-demand node is full now: the next pod stays Pending, and says why.
    control_plane.api.post(f"/api/v1/namespaces/{namespace}/pods", pod_body("pending", label, tolerations=tolerate_all))

    def unschedulable_message() -> str | None:
        pod = control_plane.api.get(f"/api/v1/namespaces/{namespace}/pods/pending")
        assert not pod["spec"].get("nodeName"), "a reclaimed node was chosen"
        for c in pod.get("status", {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                return str(c.get("message"))
        return None

    message = wait_for(unschedulable_message, timeout=60, what="the pod to be marked Unschedulable")
    assert f"2 {ERR_RECLAIMED}" in message, message
    assert 'spotshift_extender_filtered_nodes_total{reason="' in extender.metrics()


def test_with_the_extender_down_scheduling_continues(
    control_plane: ControlPlane, extender: ExtenderProcess, namespace: str, make_node: NodeFactory, tmp_path: Path
) -> None:
    label = uuid.uuid4().hex[:8]
    make_node("spot", labels={NODE_LABEL: label, **SPOT})
    make_node("od", labels={NODE_LABEL: label, **ON_DEMAND})
    extender.stop()
    try:
        started = time.monotonic()
        node = schedule_one(control_plane, namespace, pod_body("while-down", label))
        assert node, "ignorable: true lets the scheduler skip an unreachable extender"
        assert time.monotonic() - started < 30
    finally:
        extender.start()
