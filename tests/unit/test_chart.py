"""deploy/chart/spotshift renders what deploy/ renders with kustomize, field by field, for every provider preset.

The chart is the second way to install the same objects: for each ``provider`` its templates must give exactly
the objects of ``deploy/overlays/<provider>`` (with ``components/no-capacity`` and ``components/spot-ceilings`` as
``capacity.enabled=false`` and ``spotCeilings.enabled``, and ``deploy/dashboards`` as ``monitoring.*``), every field
equal. The differences allowed are listed in :func:`normalized` and :data:`ONLY_IN_KUSTOMIZE`, each with its
reason; the chart's hooks and test (the certificate Jobs, ``helm test``) have no kustomize counterpart and are
checked on their own. Rendering uses helm built by ``tools/helm.sh`` and kustomize built by ``tools/kustomize.sh``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.gotools import helm_binary, run_tool
from tests.support.kustomize import render_text

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/chart/spotshift"
DEPLOY = ROOT / "deploy"
PROVIDERS = ("gke", "eks", "aks", "karpenter", "custom")
NAMESPACE = "spotshift"
Key = tuple[str, str, str]  # kind, namespace, name

# kustomize manages the namespace's `default` ServiceAccount (no token automounted); Helm cannot: the
# controller-manager creates it in every namespace, and Helm refuses to adopt an object it did not create.
# README.md's Helm install turns the token off with one kubectl command instead.
ONLY_IN_KUSTOMIZE = {("ServiceAccount", NAMESPACE, "default")}
# kustomize's configMapGenerator and the chart both suffix a hash of the data to a ConfigMap's name (a changed
# configuration rolls the Deployments); the hash functions differ, so the suffix is compared by shape only.
HASHED = re.compile(r"^(spotshift-config|spotshift-scheduler-config)-[a-z0-9]{10}$")


def helm_template(*values: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    done = run_tool([helm_binary(), "template", "spotshift", str(CHART), "--namespace", namespace, *values])
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def kustomize(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(path)) if d]


def overlay_with(tmp_path: Path, provider: str, components: list[str]) -> Path:
    """A kustomization of the shipped overlay plus components, as deploy/README.md tells an operator to write."""
    here = tmp_path / provider
    here.mkdir(parents=True, exist_ok=True)
    rel = lambda p: os.path.relpath(p, here)  # noqa: E731
    (here / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [rel(DEPLOY / "overlays" / provider)],
                "components": [rel(DEPLOY / "components" / c) for c in components],
            }
        )
    )
    return here


def unhash(name: str) -> str:
    m = HASHED.match(name)
    return f"{m[1]}-<hash>" if m else name


def normalized(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with hashed ConfigMap names (and references to them) reduced to their shape, and the
    ConfigMaps' YAML/JSON files parsed, so comments and key order do not count but every value does."""
    text = json.dumps(doc)
    text = re.sub(r'"(spotshift-config|spotshift-scheduler-config)-[a-z0-9]{10}"', r'"\1-<hash>"', text)
    out: dict[str, Any] = json.loads(text)
    if out["kind"] == "ConfigMap":
        for key, value in out.get("data", {}).items():
            out["data"][key] = json.loads(value) if key.endswith(".json") else yaml.safe_load(value)
    return out


def is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


def keyed(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out = {}
    for d in docs:
        m = d["metadata"]
        key = (d["kind"], m.get("namespace", ""), unhash(m["name"]))
        assert key not in out, f"{key} rendered twice"
        out[key] = normalized(d)
    return out


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every path where ``a`` (chart) and ``b`` (kustomize) differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: only in kustomize: {b[k]!r}")
            elif k not in b:
                out.append(f"{path}.{k}: only in the chart: {a[k]!r}")
            else:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: chart {a!r} != kustomize {b!r}"]


def assert_same_objects(chart: list[dict[str, Any]], rendered: list[dict[str, Any]]) -> None:
    ours = keyed([d for d in chart if not is_hook(d)])
    theirs = {k: v for k, v in keyed(rendered).items() if k not in ONLY_IN_KUSTOMIZE}
    assert sorted(ours) == sorted(theirs), (
        f"only in the chart: {sorted(set(ours) - set(theirs))}; only in kustomize: {sorted(set(theirs) - set(ours))}"
    )
    problems = [f"{k}: {d}" for k in sorted(ours) for d in differences(ours[k], theirs[k])]
    assert not problems, "the chart and the overlay differ:\n" + "\n".join(problems)


VARIANTS = {
    "plain": ([], []),
    "no-capacity": (["--set", "capacity.enabled=false"], ["no-capacity"]),
    "spot-ceilings": (["--set", "spotCeilings.enabled=true"], ["spot-ceilings"]),
    "both": (
        ["--set", "capacity.enabled=false", "--set", "spotCeilings.enabled=true"],
        ["no-capacity", "spot-ceilings"],
    ),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_chart_renders_the_overlay_of_every_provider(provider: str, variant: str, tmp_path: Path) -> None:
    values, components = VARIANTS[variant]
    chart = helm_template("--set", f"provider={provider}", "--set", "namespace.create=true", *values)
    path = overlay_with(tmp_path, provider, components) if components else DEPLOY / "overlays" / provider
    assert_same_objects(chart, kustomize(path))


def test_the_chart_renders_the_dashboards_kustomization() -> None:
    chart = helm_template(
        "--set",
        "provider=gke",
        *("--set", "monitoring.prometheusRule=true,monitoring.podMonitors=true"),
        *("--set", "monitoring.dashboard=true"),
    )
    plain = {k for k in keyed(helm_template("--set", "provider=gke"))}
    monitoring = [
        d for d in chart if (d["kind"], d["metadata"].get("namespace", ""), unhash(d["metadata"]["name"])) not in plain
    ]
    assert_same_objects(monitoring, kustomize(DEPLOY / "dashboards"))


def test_the_comparison_sees_a_changed_field() -> None:
    """The comparison itself: one value changed in the chart's output is reported with its path."""
    chart = helm_template("--set", "provider=eks", "--set", "namespace.create=true")
    rendered = kustomize(DEPLOY / "overlays/eks")
    assert_same_objects(chart, rendered)
    changed = helm_template(
        "--set", "provider=eks", "--set", "namespace.create=true", "--set", "rescheduler.replicas=3"
    )
    with pytest.raises(
        AssertionError, match=r"Deployment.*spotshift-rescheduler.*\.spec\.replicas: chart 3 != kustomize 2"
    ):
        assert_same_objects(changed, rendered)
    other = helm_template("--set", "provider=gke", "--set", "namespace.create=true")
    with pytest.raises(AssertionError, match=r"node_classes"):
        assert_same_objects(other, rendered)


# ---- what has no kustomize counterpart ----------------------------------------------------------------------


def test_another_namespace_reaches_every_reference() -> None:
    docs = helm_template("--set", "provider=aks", "--set", "namespace.create=true", namespace="ops")
    text = yaml.safe_dump_all(docs)
    assert "spotshift.spotshift" not in text and "namespace: spotshift" not in text
    by_key = keyed(docs)
    (hook,) = by_key[("MutatingWebhookConfiguration", "", "spotshift")]["webhooks"]
    assert hook["clientConfig"]["service"]["namespace"] == "ops"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "ops"]
    config = by_key[("ConfigMap", "ops", "spotshift-config-<hash>")]["data"]["config.yaml"]
    assert config["namespace"] == "ops"
    scheduler = by_key[("ConfigMap", "ops", "spotshift-scheduler-config-<hash>")]["data"]["config.yaml"]
    assert scheduler["extenders"][0]["urlPrefix"] == "https://spotshift.ops.svc:443"
    assert scheduler["leaderElection"]["resourceNamespace"] == "ops"
    reader = ("RoleBinding", "kube-system", "spotshift-scheduler-extension-apiserver-authentication-reader")
    assert by_key[reader]["subjects"] == [{"kind": "ServiceAccount", "name": "spotshift-scheduler", "namespace": "ops"}]


def test_the_overlays_keep_the_authentication_reader_binding_in_kube_system() -> None:
    """It binds kube-system's Role extension-apiserver-authentication-reader: anywhere else it grants nothing."""
    docs = keyed(kustomize(DEPLOY / "overlays/gke"))
    assert ("RoleBinding", "kube-system", "spotshift-scheduler-extension-apiserver-authentication-reader") in docs


def test_a_changed_value_renames_the_configuration_so_the_pods_roll() -> None:
    def config_names(*values: str) -> set[str]:
        docs = helm_template("--set", "provider=gke", *values)
        deployments = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] != "spotshift-scheduler"]
        return {
            v["configMap"]["name"]
            for d in deployments
            for v in d["spec"]["template"]["spec"]["volumes"]
            if "configMap" in v
        }

    (before,) = config_names()
    (after,) = config_names("--set", "config.webhook.scheduler_name=spotshift-scheduler")
    assert before != after and HASHED.match(before) and HASHED.match(after)
    assert config_names() == {before}, "the same values give the same name"


def hooks(*values: str) -> dict[Key, dict[str, Any]]:
    return {k: v for k, v in keyed(helm_template("--set", "provider=eks", *values)).items() if is_hook(v)}


def test_spot_certs_hook_jobs_make_the_secret_patch_the_webhook_and_delete_the_secret() -> None:
    docs = hooks()
    jobs = {k[2]: v for k, v in docs.items() if k[0] == "Job"}
    assert sorted(jobs) == ["spotshift-certs-delete", "spotshift-certs-post", "spotshift-certs-pre"]
    expected = {
        "spotshift-certs-pre": ("pre-install,pre-upgrade", ["--days=365", "--apply-secret"]),
        "spotshift-certs-post": (
            "post-install,post-upgrade",
            ["--days=365", "--apply-secret", "--patch-webhook=spotshift"],
        ),
        "spotshift-certs-delete": ("post-delete", ["--delete-secret"]),
    }
    for name, job in jobs.items():
        when, flags = expected[name]
        assert job["metadata"]["annotations"]["helm.sh/hook"] == when
        (c,) = job["spec"]["template"]["spec"]["containers"]
        common = [
            "spot-certs",
            "--out=/tmp/certs",
            "--service=spotshift",
            "--namespace=spotshift",
            "--secret-name=spotshift-tls",
        ]
        assert c["command"] == common + flags
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    rules = {k: v["rules"] for k, v in docs.items() if k[0] in ("Role", "ClusterRole")}
    assert rules[("Role", "spotshift", "spotshift-certs-pre")] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["spotshift-tls"], "verbs": ["get"]},
    ]
    assert rules[("Role", "spotshift", "spotshift-certs-post")] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["spotshift-tls"], "verbs": ["get"]}
    ]
    assert rules[("ClusterRole", "", "spotshift-certs-post")] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["spotshift"],
            "verbs": ["get", "patch"],
        }
    ]
    assert rules[("Role", "spotshift", "spotshift-certs-delete")] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["spotshift-tls"], "verbs": ["delete"]}
    ]
    assert ("ClusterRole", "", "spotshift-certs-pre") not in rules
    assert ("ClusterRole", "", "spotshift-certs-delete") not in rules
    for doc in docs.values():
        assert doc["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"


def test_cert_manager_replaces_the_jobs_with_a_certificate_and_ca_injection() -> None:
    docs = keyed(helm_template("--set", "provider=eks", "--set", "certificates.source=cert-manager"))
    assert not [k for k, v in docs.items() if is_hook(v) and k[0] == "Job"]
    webhook = docs[("MutatingWebhookConfiguration", "", "spotshift")]
    assert webhook["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "spotshift/spotshift-serving"}
    cert = docs[("Certificate", "spotshift", "spotshift-serving")]["spec"]
    assert cert["secretName"] == "spotshift-tls" and cert["issuerRef"] == {
        "name": "spotshift-selfsigned",
        "kind": "Issuer",
    }
    assert "spotshift.spotshift.svc" in cert["dnsNames"]
    assert ("Issuer", "spotshift", "spotshift-selfsigned") in docs
    own = keyed(
        helm_template(
            "--set",
            "provider=eks",
            "--set",
            "certificates.source=cert-manager",
            "--set",
            "certificates.certManager.issuerRef.name=corp-ca,certificates.certManager.issuerRef.kind=ClusterIssuer",
        )
    )
    assert own[("Certificate", "spotshift", "spotshift-serving")]["spec"]["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }
    assert ("Issuer", "spotshift", "spotshift-selfsigned") not in own


def test_helm_test_probes_the_webhook_with_a_dry_run_pod_and_may_only_create_pods_there() -> None:
    docs = hooks("--set", "tests.probeNamespace=apps")
    tests = {k: v for k, v in docs.items() if v["metadata"]["annotations"]["helm.sh/hook"] == "test"}
    pod = tests[("Pod", "spotshift", "spotshift-test")]
    (c,) = pod["spec"]["containers"]
    assert c["command"] == ["python", "-m", "extender.probe", "--namespace=apps"]
    assert tests[("Role", "apps", "spotshift-test")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    ]
    assert tests[("RoleBinding", "apps", "spotshift-test")]["subjects"][0]["namespace"] == "spotshift"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ([], "/provider"),
        (["--set", "provider=gcp"], "/provider"),
        (["--set", "provider=gke", "--set", "rescheduler.replicas=two"], "/rescheduler/replicas"),
        (["--set", "provider=gke", "--set", "rescheduler.nodeDrainDelay=ten"], "/rescheduler/nodeDrainDelay"),
        (["--set", "provider=gke", "--set", "certificates.source=vault"], "/certificates/source"),
        (["--set", "provider=gke", "--set", "config.webhook.mode=always"], "/config/webhook/mode"),
        (["--set", "provider=gke", "--set", "nodeClasses.presets={gcp}"], "/nodeClasses/presets/0"),
        (["--set", "provider=gke", "--set", "shceduler.enabled=false"], "'shceduler'"),
    ],
)
def test_a_wrong_value_fails_with_a_message_naming_it(values: list[str], named: str) -> None:
    done = run_tool([helm_binary(), "template", "spotshift", str(CHART), *values])
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr and named in done.stderr, done.stderr


def test_the_chart_carries_the_project_version() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version
    (deployment,) = [
        d
        for d in helm_template("--set", "provider=gke")
        if d["metadata"]["name"] == "spotshift-webhook" and d["kind"] == "Deployment"
    ]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"ghcr.io/spotshift/spotshift:{version}"


def test_the_chart_copies_of_deploy_dashboards_and_the_install_page_values_table_are_current() -> None:
    from tools.gen_chart import INSTALL_PAGE, VALUES_BEGIN, stale_files, updated_install_page

    assert stale_files() == [], "run python3 tools/gen_chart.py"
    assert INSTALL_PAGE == ROOT / "docs" / "install.md"
    text = INSTALL_PAGE.read_text()
    assert VALUES_BEGIN in text
    assert updated_install_page(text) == text, (
        "docs/install.md's chart values table is stale: run python3 tools/gen_chart.py"
    )


def test_node_classes_and_config_values_reach_a_configuration_the_servers_accept() -> None:
    from shared.config import parse_config

    docs = keyed(
        helm_template(
            *("--set", "provider=karpenter", "--set", "config.rescheduler.pdb_rule=all-at-once"),
            *("--set", "nodeClasses.extra_reclaim_taints={example.com/going-away}"),
            *("--set", "config.webhook.scheduler_name=spotshift-scheduler"),
        )
    )
    data = docs[("ConfigMap", "spotshift", "spotshift-config-<hash>")]["data"]["config.yaml"]
    assert data["node_classes"] == {"presets": ["karpenter"], "extra_reclaim_taints": ["example.com/going-away"]}
    config = parse_config(data)
    assert config.rescheduler.pdb_rule == "all-at-once"
    assert config.webhook.scheduler_name == "spotshift-scheduler"
    custom = keyed(helm_template("--set", "provider=custom", "--set", "nodeClasses.spot_selectors={lifecycle=spot}"))
    classes = custom[("ConfigMap", "spotshift", "spotshift-config-<hash>")]["data"]["config.yaml"]["node_classes"]
    assert classes["spot_selectors"] == ["lifecycle=spot"] and classes["on_demand_selectors"] == [
        "node-role.kubernetes.io/worker"
    ]
    parse_config(custom[("ConfigMap", "spotshift", "spotshift-config-<hash>")]["data"]["config.yaml"])
