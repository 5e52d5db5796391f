"""deploy/: the registration and scheduler settings the design requires, and every overlay renders.

Rendering uses kustomize built by ``tools/kustomize.sh`` (``tests/support/kustomize.py``); without it those cases
fail with that command.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.config import parse_config
from tests.support.kustomize import render_text

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("karpenter", "eks", "gke", "aks", "custom")
SCHEDULER_CONFIGS = {
    "kubescheduler.config.k8s.io/v1": DEPLOY / "scheduler/base/kube-scheduler-v1.yaml",
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders(overlay: str) -> None:
    out = render_text(DEPLOY / "overlays" / overlay)
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
    assert rbac["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]


# ---- the image and its version ---------------------------------------------------------------------------


def project_version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_image_tag_in_deploy_is_the_project_version() -> None:
    (image,) = load(DEPLOY / "base/kustomization.yaml")["images"]
    assert image == {"name": "spotshift", "newName": "ghcr.io/spotshift/spotshift", "newTag": project_version()}


def test_the_image_build_takes_its_version_from_pyproject() -> None:
    """One place for the version: build.sh reads pyproject.toml and passes it to the Dockerfile's label."""
    build = (DEPLOY / "image/build.sh").read_text()
    assert "pyproject.toml" in build and '--build-arg "VERSION=$version"' in build
    assert 'tag="ghcr.io/spotshift/spotshift:$version"' in build
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    assert project_version() not in dockerfile, "the Dockerfile must not carry its own copy of the version"


def test_the_dockerfile_runs_as_a_numeric_non_root_user_and_keeps_the_ca_out() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = dockerfile.split("\nFROM ")
    assert len(stages) == 3, "a builder and a runtime stage"
    runtime = stages[-1]
    assert "USER 65532:65532" in runtime
    assert "pip" not in runtime and "apt-get" not in runtime, "the runtime stage installs nothing"
    assert "--mount=type=secret,id=cacert,required=false" in dockerfile
    assert "COPY --from=build /opt/spotshift /opt/spotshift" in runtime
    for label in ("source", "version", "licenses"):
        assert f"org.opencontainers.image.{label}=" in runtime


# ---- rendered manifests: hardening a security review expects ---------------------------------------------


def render(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out = render_text(path)
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out)}


def rule_allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str, name: str) -> bool:
    """RBAC's rule match (upstream pkg/apis/rbac/v1/evaluation_helpers.go RuleAllows): verbs, groups,
    resources, and resourceNames (empty = every name)."""
    for r in rules:
        if not ({verb, "*"} & set(r.get("verbs", ()))):
            continue
        if not ({group, "*"} & set(r.get("apiGroups", ()))):
            continue
        if not ({resource, "*"} & set(r.get("resources", ()))):
            continue
        names = r.get("resourceNames") or []
        if names and name not in names:
            continue
        return True
    return False


def rules_of(docs: dict[tuple[str, str], dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """Every rule of the roles this overlay binds to ServiceAccount spotshift/<account> (own roles only)."""
    rules: list[dict[str, Any]] = []
    for (kind, _), binding in docs.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        role = docs.get((ref["kind"], ref["name"]))
        if role is not None:
            rules.extend(role["rules"])
    return rules


def pod_specs(docs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: d["spec"]["template"]["spec"] for (kind, name), d in docs.items() if kind == "Deployment"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_uses_the_versioned_image_with_limits_and_a_pull_policy(overlay: str) -> None:
    docs = render(DEPLOY / "overlays" / overlay)
    specs = pod_specs(docs)
    assert set(specs) == {"spotshift-webhook", "spotshift-rescheduler", "spotshift-scheduler"}
    for name, spec in specs.items():
        for c in spec["containers"]:
            if name != "spotshift-scheduler":
                assert c["image"] == f"ghcr.io/spotshift/spotshift:{project_version()}", name
            assert c["imagePullPolicy"] == "IfNotPresent", name
            for kind in ("requests", "limits"):
                assert set(c["resources"][kind]) >= {"cpu", "memory"}, (name, kind)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_meets_the_restricted_pod_security_profile(overlay: str) -> None:
    docs = render(DEPLOY / "overlays" / overlay)
    labels = docs[("Namespace", "spotshift")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, spec in pod_specs(docs).items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 65532, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}, name
            assert sc["readOnlyRootFilesystem"] is True, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_tls_secret_is_mounted_0440_for_the_pods_group(overlay: str) -> None:
    for name, spec in pod_specs(render(DEPLOY / "overlays" / overlay)).items():
        secrets = [v["secret"] for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "spotshift-tls"]
        for secret in secrets:
            assert secret["defaultMode"] == 0o440, name
            assert spec["securityContext"]["fsGroup"] == 65532, f"{name} could not read a 0440 file otherwise"
        if name != "spotshift-rescheduler":
            assert secrets, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_account_tokens_are_mounted_only_where_the_api_is_called(overlay: str) -> None:
    docs = render(DEPLOY / "overlays" / overlay)
    assert docs[("ServiceAccount", "default")]["automountServiceAccountToken"] is False
    for name, spec in pod_specs(docs).items():
        # All three watch the API; each says so explicitly, on the pod and on its own account.
        assert spec["automountServiceAccountToken"] is True, name
        assert spec["serviceAccountName"] == name
        assert docs[("ServiceAccount", name)]["automountServiceAccountToken"] is True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_network_policy_admits_each_component_on_its_own_port_only(overlay: str) -> None:
    docs = render(DEPLOY / "overlays" / overlay)
    policies = {name: d["spec"] for (kind, name), d in docs.items() if kind == "NetworkPolicy"}
    deny = policies.pop("spotshift-default-deny-ingress")
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    ports = {"spotshift-webhook": 8443, "spotshift-rescheduler": 9235, "spotshift-scheduler": 10259}
    assert set(policies) == set(ports)
    for name, spec in policies.items():
        assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": ports[name]}]}], name
    # The ports the policies open are the ports the containers serve.
    specs = pod_specs(docs)
    assert specs["spotshift-webhook"]["containers"][0]["ports"][0]["containerPort"] == 8443
    assert specs["spotshift-rescheduler"]["containers"][0]["ports"][0]["containerPort"] == 9235
    assert specs["spotshift-scheduler"]["containers"][0]["ports"][0]["containerPort"] == 10259


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_component_can_take_another_ones_lease(overlay: str) -> None:
    docs = render(DEPLOY / "overlays" / overlay)
    own = {"spotshift-scheduler": "spotshift-scheduler", "spotshift-rescheduler": "spotshift-rescheduler"}
    leases = ("kube-scheduler", "kube-controller-manager", "spotshift-scheduler", "spotshift-rescheduler")
    for account, lease in own.items():
        rules = rules_of(docs, account)
        for other in leases:
            for verb in ("get", "update", "patch", "delete"):
                allowed = rule_allows(rules, verb, "coordination.k8s.io", "leases", other)
                assert allowed == (other == lease and verb in ("get", "update")), (account, verb, other)
    for account in own:
        assert not any(
            b["roleRef"]["name"] == "system:kube-scheduler"
            for (kind, _), b in docs.items()
            if kind == "ClusterRoleBinding" and any(s["name"] == account for s in b["subjects"])
        ), "system:kube-scheduler grants every Lease named kube-scheduler, the default scheduler's among them"
    webhook = rules_of(docs, "spotshift-webhook")
    assert not rule_allows(webhook, "get", "coordination.k8s.io", "leases", "spotshift-rescheduler")


def test_the_scheduler_serves_without_profiling_on_one_address() -> None:
    (container,) = pod_specs(render(DEPLOY / "overlays/eks"))["spotshift-scheduler"]["containers"]
    assert "--profiling=false" in container["command"]
    (bind,) = [a for a in container["command"] if a.startswith("--bind-address=")]
    assert bind == "--bind-address=$(POD_IP)"
    assert container["env"] == [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def test_the_cluster_wide_pod_watch_comes_only_with_spot_ceilings(tmp_path: Path) -> None:
    docs = render(DEPLOY / "overlays/eks")
    (server,) = pod_specs(docs)["spotshift-webhook"]["containers"]
    assert "--no-pod-cache" in server["command"]
    assert not rule_allows(rules_of(docs, "spotshift-webhook"), "watch", "", "pods", "")
    assert rule_allows(rules_of(docs, "spotshift-webhook"), "watch", "", "nodes", "")

    # An overlay of the user's own, beside the shipped ones (kustomize wants relative paths).
    overlay = tmp_path / "deploy/overlays/with-ceilings"
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("with-ceilings"))
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../eks"],
                "components": ["../../components/spot-ceilings"],
            }
        )
    )
    with_ceilings = render(overlay)
    (server,) = pod_specs(with_ceilings)["spotshift-webhook"]["containers"]
    assert "--no-pod-cache" not in server["command"]
    assert server["command"][:6] == [
        "spot-extender",
        "--bind=0.0.0.0:8443",
        "--certfile=/etc/spotshift/tls/tls.crt",
        "--keyfile=/etc/spotshift/tls/tls.key",
        "--config=/etc/spotshift/config/config.yaml",
        "--workers=2",
    ]
    rules = rules_of(with_ceilings, "spotshift-webhook")
    assert rule_allows(rules, "list", "", "pods", "") and rule_allows(rules, "watch", "", "pods", "")
    assert not rule_allows(rules, "get", "", "secrets", "")


def test_nothing_imports_the_asyncio_kubernetes_client_the_image_leaves_out() -> None:
    """The Dockerfile deletes kubernetes/aio from the image to stay small; an import of it would fail there."""
    for package in ("shared", "extender", "rescheduler"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert "kubernetes.aio" not in text and "kubernetes import aio" not in text, path
    assert "site-packages/kubernetes/aio" in (ROOT / "Dockerfile").read_text()


def test_the_lease_names_granted_are_the_lease_names_used() -> None:
    from shared.config import Config

    def granted(path: Path) -> set[str]:
        (role,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Role"]
        return {n for r in role["rules"] if r["resources"] == ["leases"] for n in r.get("resourceNames", [])}

    assert granted(DEPLOY / "base/rescheduler/rbac.yaml") == {Config().rescheduler.lease_name}
    for path in SCHEDULER_CONFIGS.values():
        election = load(path)["leaderElection"]
        assert granted(DEPLOY / "scheduler/base/rbac.yaml") == {election["resourceName"]}
        assert election["resourceNamespace"] == "spotshift"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rescheduler_may_list_and_watch_every_kind_its_state_watches(overlay: str) -> None:
    from rescheduler.cluster.watch_cache import KINDS, PDBS, STORAGE_CLASSES

    groups = {PDBS.name: "policy", STORAGE_CLASSES.name: "storage.k8s.io"}
    rules = rules_of(render(DEPLOY / "overlays" / overlay), "spotshift-rescheduler")
    for kind in KINDS:
        for verb in ("list", "watch"):
            assert rule_allows(rules, verb, groups.get(kind.name, ""), kind.name, ""), (verb, kind.name)
    assert not rule_allows(rules, "get", "storage.k8s.io", "storageclasses", ""), "only the verbs it uses"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_rescheduler_may_list_and_watch_karpenters_nodepools_and_nothing_more_of_karpenter(overlay: str) -> None:
    from rescheduler.cluster.watch_cache import NODEPOOLS

    rules = rules_of(render(DEPLOY / "overlays" / overlay), "spotshift-rescheduler")
    for verb in ("list", "watch"):
        assert rule_allows(rules, verb, "karpenter.sh", NODEPOOLS.name, ""), verb
    for verb in ("get", "create", "update", "patch", "delete"):
        assert not rule_allows(rules, verb, "karpenter.sh", NODEPOOLS.name, ""), verb
    assert not rule_allows(rules, "list", "karpenter.sh", "nodeclaims", ""), "only the NodePools"
