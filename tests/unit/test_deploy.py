"""deploy/: the registration and scheduler settings the design requires, and every overlay renders.

Rendering needs ``kubectl`` (its built-in kustomize); without it those cases skip, the file checks still run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("karpenter", "eks", "gke", "aks", "custom")
SCHEDULER_CONFIGS = {
    "kubescheduler.config.k8s.io/v1": DEPLOY / "scheduler/base/kube-scheduler-v1.yaml",
    "kubescheduler.config.k8s.io/v1beta3": DEPLOY / "scheduler/v1beta3/kube-scheduler-v1beta3.yaml",
    "kubescheduler.config.k8s.io/v1beta1": DEPLOY / "scheduler/v1beta1/kube-scheduler-v1beta1.yaml",
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_webhook_registration() -> None:
    config = load(DEPLOY / "base/mutatingwebhook.yaml")
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert 1 <= hook["timeoutSeconds"] <= 3
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["clientConfig"]["service"] == {
        "name": "spotshift",
        "namespace": "spotshift",
        "path": "/mutate",
        "port": 443,
    }
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "spotshift"]} in hook[
        "namespaceSelector"
    ]["matchExpressions"]


@pytest.mark.parametrize("api_version", list(SCHEDULER_CONFIGS))
def test_scheduler_configurations(api_version: str) -> None:
    config = load(SCHEDULER_CONFIGS[api_version])
    assert config["apiVersion"] == api_version
    assert config["profiles"] == [{"schedulerName": "spotshift-scheduler"}]
    (ext,) = config["extenders"]
    assert ext["ignorable"] is True
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == []
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["enableHTTPS"] is True and "enableHttps" not in ext, "v1beta1+ field names are case-sensitive"
    assert ext["httpTimeout"] == "5s"
    assert ext["urlPrefix"] == "https://spotshift.spotshift.svc:443"
    assert ext["tlsConfig"]["caFile"]
    assert isinstance(ext["weight"], int) and ext["weight"] > 0


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_config_is_valid(overlay: str) -> None:
    config = parse_config(load(DEPLOY / "overlays" / overlay / "config.yaml"))
    assert config.namespace == "spotshift"
    assert config.webhook.mode == "prefer"


def test_base_config_is_valid() -> None:
    parse_config(load(DEPLOY / "base/config.yaml"))


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders(overlay: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)], capture_output=True, text=True, check=True
    ).stdout
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out)}
    webhook = docs[("Deployment", "spotshift-webhook")]
    spec = webhook["spec"]["template"]["spec"]
    assert webhook["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["topologySpreadConstraints"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    config_map = next(v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v)
    parse_config(yaml.safe_load(docs[("ConfigMap", config_map)]["data"]["config.yaml"]))
    assert ("PodDisruptionBudget", "spotshift-webhook") in docs
    assert ("Service", "spotshift") in docs
    assert ("MutatingWebhookConfiguration", "spotshift") in docs
    assert ("Deployment", "spotshift-scheduler") in docs
    rbac = docs[("ClusterRole", "spotshift-webhook")]
    assert rbac["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]}]
