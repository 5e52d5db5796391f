"""deploy/components/capacity: the placeholders' PriorityClass, pod create/delete in spotshift's namespace only,
and capacity mode turned on for the rescheduler; nothing of it without the component."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from shared.config import Config, parse_config
from tests.unit.test_deploy import DEPLOY, render, rule_allows, rules_of


def _with_capacity(tmp_path: Path) -> Path:
    overlay = tmp_path / "deploy/overlays/with-capacity"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["../eks"],
                "components": ["../../components/capacity"],
            }
        )
    )
    return overlay


def _role_rules(docs: dict, kind: str, name: str) -> list[dict]:
    return list(docs[(kind, name)]["rules"])


def test_the_capacity_component_ships_the_priority_class_the_config_names_and_turns_the_mode_on(
    tmp_path: Path,
) -> None:
    docs = render(_with_capacity(tmp_path))
    priority = docs[("PriorityClass", Config().capacity.priority_class_name)]
    # Above cluster-autoscaler's default expendable cutoff (-10), below every workload (0) and the usual
    # overprovisioning pause pods (-1); never preempts anything itself.
    assert -10 <= priority["value"] < -1
    assert Config().movability.expendable_priority_cutoff <= priority["value"]
    assert priority["preemptionPolicy"] == "Never" and priority["globalDefault"] is False
    (container,) = docs[("Deployment", "spotshift-rescheduler")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SPOTSHIFT_CAPACITY_ENABLED"] == "true"
    (config_map,) = [
        d for (kind, name), d in docs.items() if kind == "ConfigMap" and name.startswith("spotshift-config")
    ]
    data = yaml.safe_load(config_map["data"]["config.yaml"])
    assert parse_config(data, {"SPOTSHIFT_CAPACITY_ENABLED": "true"}).capacity.enabled


def test_placeholders_may_be_created_and_deleted_in_spotshifts_namespace_only(tmp_path: Path) -> None:
    docs = render(_with_capacity(tmp_path))
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


def test_without_the_component_nothing_of_capacity_mode_is_deployed() -> None:
    docs = render(DEPLOY / "overlays/eks")
    assert not [k for k in docs if k[0] == "PriorityClass"]
    rules = rules_of(docs, "spotshift-rescheduler")
    assert not rule_allows(rules, "create", "", "pods", "")
    (container,) = docs[("Deployment", "spotshift-rescheduler")]["spec"]["template"]["spec"]["containers"]
    assert "SPOTSHIFT_CAPACITY_ENABLED" not in {e["name"] for e in container["env"]}
    assert not Config().capacity.enabled
