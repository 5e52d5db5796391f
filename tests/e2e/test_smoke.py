"""Smoke tests proving the e2e tier is real: real processes, real scheduling, PDBs, evictions and webhooks."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.controlplane import ApiError, ControlPlane, issue_cert, make_ca, wait_for
from tests.support.controlplane.process import k8s_version

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

NodeFactory = Callable[..., dict[str, Any]]


def deployment(name: str, replicas: int, node_label: str, **pod_spec: Any) -> dict[str, Any]:
    """A Deployment pinned (nodeSelector) to the nodes of one test, so tests never share nodes."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"e2e.spotshift.io/test": node_label},
                    "terminationGracePeriodSeconds": 30,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                    **pod_spec,
                },
            },
        },
    }


def create_deployment(plane: ControlPlane, namespace: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", body)
    return plane.wait_for_deployment(namespace, body["metadata"]["name"], timeout=90)


def test_every_component_is_a_live_process_with_a_healthy_endpoint(control_plane: ControlPlane) -> None:
    health = control_plane.health()
    assert health == {
        "etcd": True,
        "kube-apiserver": True,
        "kube-controller-manager": True,
        "kube-scheduler": True,
        "kubelet-stand-in": True,
    }
    for name, component in control_plane.components.items():
        assert component.alive(), f"{name} is not running"
    version = control_plane.api.get("/version")
    assert version["gitVersion"] == f"v{k8s_version()}"
    assert "policy/v1" in {g["groupVersion"] for g in control_plane.api.get("/apis/policy")["versions"]}
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        binary = getattr(control_plane.binaries, name.replace("-", "_"))
        said = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30).stdout
        assert said.strip() == f"Kubernetes v{k8s_version()}", said
    kubectl = control_plane.kubectl("get", "--raw", "/readyz")
    assert kubectl.stdout.strip() == "ok"


def test_kubeconfig_and_the_kubernetes_client_reach_the_api_server(control_plane: ControlPlane) -> None:
    from kubernetes import client, config

    with control_plane.api_client() as api_client:
        names = {ns.metadata.name for ns in client.CoreV1Api(api_client).list_namespace().items}
    assert {"default", "kube-system"} <= names
    with config.new_client_from_config(config_file=str(control_plane.kubeconfig)) as api_client:
        assert client.VersionApi(api_client).get_code().git_version == f"v{k8s_version()}"


def test_deployment_is_scheduled_onto_the_nodes_and_runs_ready(
    control_plane: ControlPlane, namespace: str, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    nodes = [
        make_node(labels={"e2e.spotshift.io/test": label}, allocatable={"cpu": "2", "memory": "4Gi", "pods": "10"})
        for _ in range(2)
    ]
    node_names = {n["metadata"]["name"] for n in nodes}
    for node in nodes:
        assert node["status"]["allocatable"] == {"cpu": "2", "memory": "4Gi", "pods": "10"}
        assert not [t for t in node["spec"].get("taints") or [] if t["key"] == "node.kubernetes.io/not-ready"]

    pods = create_deployment(control_plane, namespace, deployment("web", 3, label))

    assert len(pods) == 3
    for pod in pods:
        status = pod["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        assert pod["spec"]["nodeName"] in node_names
        assert status["phase"] == "Running"
        assert conditions == {"Initialized": "True", "Ready": "True", "ContainersReady": "True", "PodScheduled": "True"}
        assert status["podIP"] and status["startTime"] and status["hostIP"]
        assert [c["ready"] for c in status["containerStatuses"]] == [True]
        # Created by the real controllers: Deployment -> ReplicaSet -> Pod, with the ServiceAccount token mounted.
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert pod["spec"]["serviceAccountName"] == "default"
    # The scheduler spreads replicas of one ReplicaSet over both nodes.
    assert {p["spec"]["nodeName"] for p in pods} == node_names


def _pdb(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": selector}, **spec},
    }


def _eviction(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }


def _wait_pdb(plane: ControlPlane, namespace: str, name: str, healthy: int, allowed: int) -> None:
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"

    def computed() -> bool:
        pdb = plane.api.get(path)
        status = pdb.get("status", {})
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy") == healthy
            and status.get("disruptionsAllowed") == allowed
        )

    wait_for(computed, timeout=60, what=f"PDB {name} status from the disruption controller")


def test_eviction_is_refused_with_429_by_a_blocking_pdb_and_accepted_with_201_otherwise(
    control_plane: ControlPlane, namespace: str, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    make_node(labels={"e2e.spotshift.io/test": label})
    blocked = create_deployment(control_plane, namespace, deployment("blocked", 2, label))
    allowed = create_deployment(control_plane, namespace, deployment("allowed", 2, label))
    pdbs = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    control_plane.api.post(pdbs, _pdb("blocked", {"app": "blocked"}, minAvailable=2))
    control_plane.api.post(pdbs, _pdb("allowed", {"app": "allowed"}, maxUnavailable=1))
    _wait_pdb(control_plane, namespace, "blocked", healthy=2, allowed=0)
    _wait_pdb(control_plane, namespace, "allowed", healthy=2, allowed=1)

    victim = blocked[0]["metadata"]["name"]
    response = control_plane.api.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods/{victim}/eviction", body=_eviction(namespace, victim)
    )
    assert response.status_code == 429, response.text
    assert response.json()["reason"] == "TooManyRequests"
    assert "disruption budget" in response.json()["message"]

    victim = allowed[0]["metadata"]["name"]
    victim_uid = allowed[0]["metadata"]["uid"]
    response = control_plane.api.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods/{victim}/eviction", body=_eviction(namespace, victim)
    )
    assert response.status_code == 201, response.text

    # The stand-in finishes the graceful deletion, and the ReplicaSet replaces the pod.
    def gone() -> bool:
        try:
            pod = control_plane.api.get(f"/api/v1/namespaces/{namespace}/pods/{victim}")
        except ApiError as error:
            return error.status == 404
        return pod["metadata"]["uid"] != victim_uid

    wait_for(gone, timeout=30, what=f"evicted pod {victim} to be deleted")
    replacements = control_plane.wait_for_deployment(namespace, "allowed")
    assert victim not in {p["metadata"]["name"] for p in replacements}


def test_a_pod_annotated_ready_after_runs_not_ready_first_and_its_budget_counts_it_healthy_only_then(
    control_plane: ControlPlane, namespace: str, make_node: NodeFactory
) -> None:
    """The kubelet stand-in's ``e2e.spotshift.io/ready-after``: Running with Ready=False, then Ready that many
    seconds later, and the disruption controller and the Deployment controller follow the Ready condition."""
    label = uuid.uuid4().hex[:8]
    make_node(labels={"e2e.spotshift.io/test": label})
    body = deployment("slow", 2, label)
    body["spec"]["template"]["metadata"]["annotations"] = {"e2e.spotshift.io/ready-after": "4"}
    control_plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", body)
    pdbs = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    control_plane.api.post(pdbs, _pdb("slow", {"app": "slow"}, maxUnavailable=1))

    def running_not_ready() -> list[dict[str, Any]]:
        pods = control_plane.pods(namespace, "app=slow")
        if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
            return pods
        return []

    pods = wait_for(running_not_ready, timeout=60, what="both pods to run")
    for pod in pods:
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions == {
            "Initialized": "True",
            "Ready": "False",
            "ContainersReady": "False",
            "PodScheduled": "True",
        }
        assert [(c["ready"], c["started"]) for c in pod["status"]["containerStatuses"]] == [(False, True)]
    _wait_pdb(control_plane, namespace, "slow", healthy=0, allowed=0)

    ready = control_plane.wait_for_deployment(namespace, "slow", timeout=60)
    assert {p["metadata"]["uid"] for p in ready} == {p["metadata"]["uid"] for p in pods}, "the same pods turned Ready"
    for pod in ready:
        status = pod["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Ready"]["status"] == "True" and conditions["ContainersReady"]["status"] == "True"
        assert [c["ready"] for c in status["containerStatuses"]] == [True]
        # Whole seconds on both sides: Ready at least 4 s after the pod was marked Running.
        assert _seconds(conditions["Ready"]["lastTransitionTime"]) - _seconds(status["startTime"]) >= 4
    _wait_pdb(control_plane, namespace, "slow", healthy=2, allowed=1)


def _seconds(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp).timestamp()


class _WebhookServer:
    """A tiny HTTPS admission webhook: records each AdmissionReview and answers with a JSON patch."""

    def __init__(self, directory: Path) -> None:
        self.ca = make_ca("webhook-test-ca")
        cert_path, key_path = issue_cert(self.ca, "webhook", hosts=("127.0.0.1",)).write(directory, "webhook")
        self.reviews: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.reviews.append({"path": self.path, "review": review})
                patch = [{"op": "add", "path": "/metadata/labels/e2e.spotshift.io~1mutated", "value": "yes"}]
                answer = {
                    "apiVersion": review["apiVersion"],
                    "kind": review["kind"],
                    "response": {
                        "uid": review["request"]["uid"],
                        "allowed": True,
                        "patchType": "JSONPatch",
                        "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                    },
                }
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _WebhookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def webhook_server(tmp_path: Path) -> Iterator[_WebhookServer]:
    with _WebhookServer(tmp_path) as server:
        yield server


def test_mutating_webhook_is_called_with_an_admission_review_over_tls_and_its_patch_applies(
    control_plane: ControlPlane, webhook_server: _WebhookServer
) -> None:
    namespace = f"e2e-webhook-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(namespace)
    name = f"e2e-mutate-{uuid.uuid4().hex[:6]}"
    configs = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    control_plane.api.post(
        configs,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "mutate.e2e.spotshift.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{webhook_server.port}/mutate",
                        "caBundle": base64.b64encode(webhook_server.ca.cert_pem).decode(),
                    },
                    "rules": [
                        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
                    ],
                    # The API server labels every namespace with its name (1.21+).
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        },
    )
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def pod(pod_name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "labels": {"app": "webhook-test"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
        }

    try:
        # The API server picks the new configuration up asynchronously: probe with dry-run creates.
        wait_for(
            lambda: control_plane.api.post(pods, pod("probe"), dryRun="All")["metadata"]["labels"].get(
                "e2e.spotshift.io/mutated"
            ),
            timeout=30,
            what="the webhook configuration to take effect",
        )
        webhook_server.reviews.clear()
        created = control_plane.api.post(pods, pod("mutated"))
        stored = control_plane.api.get(f"{pods}/mutated")
    finally:
        control_plane.api.delete_if_exists(f"{configs}/{name}")
        control_plane.delete_namespace(namespace)

    assert created["metadata"]["labels"] == {"app": "webhook-test", "e2e.spotshift.io/mutated": "yes"}
    assert stored["metadata"]["labels"]["e2e.spotshift.io/mutated"] == "yes"
    assert len(webhook_server.reviews) == 1
    call = webhook_server.reviews[0]
    review = call["review"]
    # The API server appends its timeout as a query: a webhook server must route on the path alone.
    assert call["path"] == "/mutate?timeout=5s"
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    request = review["request"]
    assert request["operation"] == "CREATE"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["namespace"] == namespace
    assert request["object"]["metadata"]["name"] == "mutated"
    assert request["dryRun"] is False
    assert request["userInfo"]["username"] == "admin"


def test_scheduler_restarts_with_a_config_given_by_the_test(
    control_plane: ControlPlane, namespace: str, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    make_node(labels={"e2e.spotshift.io/test": label})
    config = control_plane.scheduler_config(
        profiles=[{"schedulerName": "default-scheduler"}, {"schedulerName": "e2e-second-scheduler"}]
    )
    try:
        path = control_plane.restart_scheduler(config)
        assert json.loads(path.read_text())["apiVersion"] == "kubescheduler.config.k8s.io/v1"
        pods = create_deployment(
            control_plane, namespace, deployment("second", 1, label, schedulerName="e2e-second-scheduler")
        )
        assert pods[0]["spec"]["schedulerName"] == "e2e-second-scheduler"
        assert pods[0]["status"]["phase"] == "Running"
    finally:
        control_plane.restart_scheduler()
    assert control_plane.health()["kube-scheduler"]
