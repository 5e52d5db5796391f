"""The webhook on the real kube-apiserver: registered from deploy/base/mutatingwebhook.yaml, caBundle set by
``spot-certs --patch-webhook``, called over TLS for pods the controllers create.

The shared control plane runs other tests' pods too, so the registration is narrowed to this module's
namespaces by one extra namespaceSelector expression on a label of ours; everything else is the shipped file.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.certs import main as spot_certs
from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.extender_server import ROOT, ExtenderProcess

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

NodeFactory = Callable[..., dict[str, Any]]
SCOPE_LABEL = "e2e.spotshift.io/webhook"
NODE_LABEL = "e2e.spotshift.io/test"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AKS_TAINT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
AKS_TOLERATION = {**AKS_TAINT, "operator": "Equal"}
SPOT_TERMS = [
    {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]},
    {"matchExpressions": [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "In", "values": ["spot"]}]},
]
CONFIG = {"node_classes": {"presets": ["karpenter", "aks"]}}


class Webhook:
    def __init__(self, plane: ControlPlane, server: ExtenderProcess, scope: str) -> None:
        self.plane, self.server, self.scope = plane, server, scope
        self.name = f"spotshift-e2e-{scope}"
        self.path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{self.name}"

    def register(self) -> None:
        shipped = yaml.safe_load((ROOT / "deploy/base/mutatingwebhook.yaml").read_text())
        shipped["metadata"]["name"] = self.name
        hook = shipped["webhooks"][0]
        hook["clientConfig"] = {"url": self.server.url + "/mutate"}  # no Service networking on loopback
        hook["namespaceSelector"]["matchExpressions"].append(
            {"key": SCOPE_LABEL, "operator": "In", "values": [self.scope]}
        )
        self.plane.api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", shipped)

    def unregister(self) -> None:
        self.plane.api.delete_if_exists(self.path)

    def namespace(self, name: str | None = None) -> str:
        name = name or f"e2e-hook-{uuid.uuid4().hex[:6]}"
        self.plane.create_namespace(name, labels={SCOPE_LABEL: self.scope})
        return name


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Webhook]:
    server = ExtenderProcess(tmp_path, control_plane.kubeconfig, CONFIG).start()
    hook = Webhook(control_plane, server, uuid.uuid4().hex[:8])
    hook.register()
    # spot-certs sets the caBundle on the live object, as an operator would after `kubectl apply -k`.
    assert (
        spot_certs(
            [
                "--out",
                str(server.certs),
                "--ip",
                "127.0.0.1",
                "--patch-webhook",
                hook.name,
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ]
        )
        == 0
    )
    try:
        yield hook
    finally:
        hook.unregister()
        server.stop()


def pod_body(name: str, node_label: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {NODE_LABEL: node_label},
            "containers": [
                {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "100m"}}}
            ],
            **spec,
        },
    }


def create_pod(plane: ControlPlane, namespace: str, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{namespace}/pods" + ("?dryRun=All" if dry_run else "")
    return plane.api.post(path, body)


def wait_until_called(plane: ControlPlane, namespace: str) -> None:
    """The API server picks up a new webhook configuration through an informer: wait until it calls it."""

    def mutated() -> bool:
        pod = create_pod(plane, namespace, pod_body("probe", "none"), dry_run=True)
        return PREFERRED in (pod["spec"].get("affinity") or {}).get("nodeAffinity", {})

    wait_for(mutated, timeout=30, what="the API server to call the new webhook")


def spot_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    prefs = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(PREFERRED) or []
    return [p["preference"] for p in prefs if p["preference"] in SPOT_TERMS]


def spot_tolerations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in pod["spec"].get("tolerations") or [] if t.get("key") == AKS_TAINT["key"]]


def test_ca_bundle_from_spot_certs_and_dry_run_is_answered_without_creating_a_pod(
    control_plane: ControlPlane, webhook: Webhook
) -> None:
    config = control_plane.api.get(webhook.path)
    assert base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == webhook.server.ca_pem
    hook = config["webhooks"][0]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["reinvocationPolicy"]) == ("Ignore", "None", "IfNeeded")
    namespace = webhook.namespace()
    try:
        wait_until_called(control_plane, namespace)
        dry = create_pod(control_plane, namespace, pod_body("dry", "none"), dry_run=True)
        assert spot_terms(dry) == SPOT_TERMS
        assert spot_tolerations(dry) == [AKS_TOLERATION]
        with pytest.raises(ApiError) as missing:
            control_plane.api.get(f"/api/v1/namespaces/{namespace}/pods/dry")
        assert missing.value.status == 404, "dryRun created nothing"
    finally:
        control_plane.delete_namespace(namespace)


def test_deployment_pods_carry_the_affinity_and_tolerations_exactly_once(
    control_plane: ControlPlane, webhook: Webhook, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    spot = make_node(
        "spot", labels={NODE_LABEL: label, "kubernetes.azure.com/scalesetpriority": "spot"}, taints=[AKS_TAINT]
    )
    make_node("od", labels={NODE_LABEL: label})
    namespace = webhook.namespace()
    try:
        wait_until_called(control_plane, namespace)
        user_toleration = {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}
        template = pod_body("web", label, tolerations=[user_toleration])
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        }
        control_plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)
        pods = control_plane.wait_for_deployment(namespace, "web", timeout=90)
        assert len(pods) == 3
        for pod in pods:
            assert spot_terms(pod) == SPOT_TERMS, "each spot term exactly once"
            assert [p["weight"] for p in pod["spec"]["affinity"]["nodeAffinity"][PREFERRED]] == [100, 100]
            assert spot_tolerations(pod) == [AKS_TOLERATION], "the spot toleration exactly once"
            assert user_toleration in pod["spec"]["tolerations"], "the user's toleration is kept"
            assert pod["spec"]["schedulerName"] == "default-scheduler"
        # Only the injected toleration lets a pod onto the tainted spot node; preferred affinity draws them there.
        assert spot["metadata"]["name"] in {p["spec"]["nodeName"] for p in pods}

        # A pod that already carries the preference and the toleration gets nothing added.
        carried = pod_body(
            "carried",
            label,
            tolerations=[AKS_TOLERATION],
            affinity={"nodeAffinity": {PREFERRED: [{"weight": 7, "preference": SPOT_TERMS[1]}]}},
        )
        created = create_pod(control_plane, namespace, carried)
        assert created["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [{"weight": 7, "preference": SPOT_TERMS[1]}]
        assert spot_tolerations(created) == [AKS_TOLERATION]
    finally:
        control_plane.delete_namespace(namespace)


def test_kube_system_and_daemonset_pods_are_left_alone(
    control_plane: ControlPlane, webhook: Webhook, make_node: NodeFactory
) -> None:
    label = uuid.uuid4().hex[:8]
    make_node("ds", labels={NODE_LABEL: label})
    namespace = webhook.namespace()
    # kube-system is labelled into this module's scope: the shipped namespaceSelector's own expression on
    # kubernetes.io/metadata.name (which the API server sets on every namespace) must keep it out.
    control_plane.api.patch("/api/v1/namespaces/kube-system", {"metadata": {"labels": {SCOPE_LABEL: webhook.scope}}})
    kube_system_pod = f"e2e-untouched-{label}"
    try:
        wait_until_called(control_plane, namespace)
        system = create_pod(control_plane, "kube-system", pod_body(kube_system_pod, label))
        assert not spot_terms(system) and not spot_tolerations(system)

        daemonset = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": pod_body("agent", label)["spec"]},
            },
        }
        control_plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset)
        ds_pods = wait_for(
            lambda: control_plane.pods(namespace, "app=agent"), timeout=60, what="the DaemonSet's pod to be created"
        )
        for pod in ds_pods:
            assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
            assert not spot_terms(pod) and not spot_tolerations(pod)
        metrics = webhook.server.metrics()
        # The API server never sent the kube-system pod (the server's own excluded_namespaces rule is the
        # second line of defence, for clusters whose selector was edited).
        assert 'spotshift_webhook_skips_total{reason="excluded-namespace"}' not in metrics
        assert 'spotshift_webhook_skips_total{reason="daemonset"}' in metrics
    finally:
        control_plane.api.patch("/api/v1/namespaces/kube-system", {"metadata": {"labels": {SCOPE_LABEL: None}}})
        control_plane.api.delete_if_exists(
            f"/api/v1/namespaces/kube-system/pods/{kube_system_pod}", gracePeriodSeconds=0
        )
        control_plane.delete_namespace(namespace)


def test_with_the_webhook_down_pods_are_still_created(control_plane: ControlPlane, webhook: Webhook) -> None:
    namespace = webhook.namespace()
    try:
        wait_until_called(control_plane, namespace)
        webhook.server.stop()
        started = time.monotonic()
        pod = create_pod(control_plane, namespace, pod_body("while-down", "none"))
        elapsed = time.monotonic() - started
        assert pod["metadata"]["name"] == "while-down"
        assert not spot_terms(pod) and not spot_tolerations(pod), "failurePolicy Ignore: created unchanged"
        assert elapsed < 10, f"creation took {elapsed:.1f}s"
    finally:
        control_plane.delete_namespace(namespace)
