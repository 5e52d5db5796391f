"""Capacity mode as deployed: deploy/base/rescheduler ships the placeholders' PriorityClass and pod create/delete in
spotshift's namespace only, and the mode is on; deploy/components/no-capacity removes both and turns it off."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from shared.config import Config, parse_config
from tests.unit.test_deploy import DEPLOY, render, rule_allows, rules_of


def _without_capacity(tmp_path: Path) -> Path:
    overlay = tmp_path / "deploy/overlays/without-capacity"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../eks"],
                "components": ["../../components/no-capacity"],
            }
        )
    )
    return overlay


def _env(docs: dict) -> dict[str, str | None]:
    (container,) = docs[("Deployment", "spotshift-rescheduler")]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def _config(docs: dict) -> Config:
    (config_map,) = [
        d for (kind, name), d in docs.items() if kind == "ConfigMap" and name.startswith("spotshift-config")
    ]
    data = yaml.safe_load(config_map["data"]["config.yaml"])
    env = {k: v for k, v in _env(docs).items() if k.startswith("SPOTSHIFT_") and v is not None}
    return parse_config(data, env)


def _role_rules(docs: dict, kind: str, name: str) -> list[dict]:
    return list(docs[(kind, name)]["rules"])


def test_every_overlay_ships_the_priority_class_the_config_names_and_the_mode_is_on() -> None:
    for provider in ("eks", "gke", "aks", "karpenter", "custom"):
        docs = render(DEPLOY / "overlays" / provider)
        priority = docs[("PriorityClass", Config().capacity.priority_class_name)]
        # Above cluster-autoscaler's default expendable cutoff (-10), below every workload (0) and the usual
        # overprovisioning pause pods (-1); never preempts anything itself.
        assert -10 <= priority["value"] < -1
        assert Config().movability.expendable_priority_cutoff <= priority["value"]
        assert priority["preemptionPolicy"] == "Never" and priority["globalDefault"] is False
        assert priority["metadata"]["labels"]["app.kubernetes.io/part-of"] == "spotshift"
        assert "SPOTSHIFT_CAPACITY_ENABLED" not in _env(docs)
        assert _config(docs).capacity.enabled, provider


def test_placeholders_may_be_created_and_deleted_in_spotshifts_namespace_only() -> None:
    docs = render(DEPLOY / "overlays/eks")
    role = docs[("Role", "spotshift-rescheduler-placeholders")]
    assert role["metadata"]["namespace"] == "spotshift"
    binding = docs[("RoleBinding", "spotshift-rescheduler-placeholders")]
    assert binding["metadata"]["namespace"] == "spotshift"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "spotshift-rescheduler", "namespace": "spotshift"}
    ]
    rules = role["rules"]
    assert rule_allows(rules, "create", "", "pods", "") and rule_allows(rules, "delete", "", "pods", "")
    assert not rule_allows(rules, "update", "", "pods", "") and not rule_allows(rules, "patch", "", "pods", "")
    cluster_rules = _role_rules(docs, "ClusterRole", "spotshift-rescheduler")
    assert not rule_allows(cluster_rules, "create", "", "pods", "")
    assert not rule_allows(cluster_rules, "delete", "", "pods", "")
    # Watching pods cluster-wide (placeholders included) comes from the base already.
    assert rule_allows(rules_of(docs, "spotshift-rescheduler"), "watch", "", "pods", "")


def test_with_the_no_capacity_component_nothing_of_capacity_mode_is_deployed_and_the_mode_is_off(
    tmp_path: Path,
) -> None:
    docs = render(_without_capacity(tmp_path))
    assert not [k for k in docs if k[0] == "PriorityClass"]
    assert ("Role", "spotshift-rescheduler-placeholders") not in docs
    assert ("RoleBinding", "spotshift-rescheduler-placeholders") not in docs
    assert not [
        d
        for (kind, _), d in docs.items()
        if kind in ("Role", "ClusterRole") and rule_allows(d["rules"], "create", "", "pods", "")
    ]
    assert _env(docs)["SPOTSHIFT_CAPACITY_ENABLED"] == "false"
    assert not _config(docs).capacity.enabled
    # Everything else is the overlay's, unchanged.
    plain = render(DEPLOY / "overlays/eks")
    assert set(plain) - set(docs) == {
        ("PriorityClass", "spotshift-placeholder"),
        ("Role", "spotshift-rescheduler-placeholders"),
        ("RoleBinding", "spotshift-rescheduler-placeholders"),
    }
