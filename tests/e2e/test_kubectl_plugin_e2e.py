"""``kubectl spotshift plan`` through the real kubectl against the real API server.

kubectl finds ``kubectl-spotshift`` on ``PATH`` (the console script ``pip install -e .`` made next to the
Python interpreter) and passes its environment on; the plugin reads ``KUBECONFIG`` and ``--context`` as kubectl
does. The test's configuration names its own node labels, so other tests' nodes are class "other" and stay out
of the plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.support.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

NodeFactory = Callable[..., dict[str, Any]]


def plugin_dir() -> Path:
    script = Path(sys.executable).parent / "kubectl-spotshift"
    if not script.exists():
        pytest.fail(f"{script} is missing: `pip install -e .` installs the kubectl-spotshift script", pytrace=False)
    return script.parent


def kubectl(plane: ControlPlane, *args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_") and not k.lower().endswith("_proxy")}
    env["KUBECONFIG"] = str(kubeconfig)
    env["PATH"] = f"{plugin_dir()}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(plane.binaries.kubectl), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def two_context_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    """The control plane as context ``e2e``, and a current context ``elsewhere`` that points at nothing."""
    config = json.loads(plane.kubeconfig.read_text())
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "elsewhere", "context": {"cluster": "nowhere", "user": "admin"}})
    config["current-context"] = "elsewhere"
    path.write_text(json.dumps(config))
    return path


def web_deployment(label: str) -> dict[str, Any]:
    """Two web pods on the nodes labelled ``e2e.spotshift.io/test=<label>``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"e2e.spotshift.io/test": label},
                    "containers": [
                        {"name": "c", "image": "registry.example/web:1", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                },
            },
        },
    }


def classes_config(path: Path, spot_key: str, od_key: str) -> Path:
    """A configuration whose spot and on-demand nodes are the ones carrying these labels, and no others."""
    path.write_text(
        yaml.safe_dump(
            {
                "node_classes": {
                    "presets": [],
                    "spot_selectors": [f"{spot_key}=true"],
                    "on_demand_selectors": [f"{od_key}=true"],
                }
            }
        )
    )
    return path


def plans_of_the_chosen_context(control_plane: ControlPlane, config: Path, od: str, tmp_path: Path) -> None:
    """--context picks another context of the same kubeconfig; the current one points at nothing."""
    kubeconfig = two_context_kubeconfig(control_plane, tmp_path / "two.kubeconfig")
    chosen = kubectl(
        control_plane,
        "spotshift",
        "plan",
        "--context",
        "e2e",
        f"--config={config}",
        "-o",
        "json",
        kubeconfig=kubeconfig,
    )
    assert chosen.returncode == 0, chosen.stderr
    assert orjson.loads(chosen.stdout)["drained"] == [od]
    current = kubectl(control_plane, "spotshift", "plan", f"--config={config}", kubeconfig=kubeconfig)
    assert current.returncode == 2
    assert current.stderr.startswith("kubectl spotshift: error: ") and len(current.stderr.splitlines()) == 1, (
        current.stderr
    )


def test_kubectl_spotshift_plan_previews_the_plan_of_the_current_context(
    control_plane: ControlPlane, namespace: str, make_node: NodeFactory, tmp_path: Path
) -> None:
    label = uuid.uuid4().hex[:8]
    spot_key, od_key = f"e2e.spotshift.io/spot-{label}", f"e2e.spotshift.io/od-{label}"
    od = make_node("od", labels={od_key: "true", "e2e.spotshift.io/test": label})["metadata"]["name"]
    control_plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", web_deployment(label))
    pods = control_plane.wait_for_deployment(namespace, "web", timeout=90)
    assert {p["spec"]["nodeName"] for p in pods} == {od}
    spot = make_node("spot", labels={spot_key: "true", "e2e.spotshift.io/test": label})["metadata"]["name"]
    config = classes_config(tmp_path / "config.yaml", spot_key, od_key)

    # KUBECONFIG names the control plane as its current context.
    done = kubectl(
        control_plane, "spotshift", "plan", f"--config={config}", "-o", "json", kubeconfig=control_plane.kubeconfig
    )
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["drained"] == [od]
    assert sorted(m["pod"] for m in doc["moves"]) == sorted(f"{namespace}/{p['metadata']['name']}" for p in pods)
    assert {m["to"] for m in doc["moves"]} == {spot}

    table = kubectl(control_plane, "spotshift", "plan", f"--config={config}", kubeconfig=control_plane.kubeconfig)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("1 of 1 on-demand nodes can be drained onto 1 spot nodes")

    plans_of_the_chosen_context(control_plane, config, od, tmp_path)

    # The page, too: the same plan drawn, the drained node marked.
    page = tmp_path / "plan.html"
    html = kubectl(
        control_plane,
        "spotshift",
        "plan",
        f"--config={config}",
        "-o",
        "html",
        str(page),
        kubeconfig=control_plane.kubeconfig,
    )
    assert html.returncode == 0, html.stderr
    assert od in page.read_text() and spot in page.read_text()

    # Nothing was changed: the pods are where they were.
    after = control_plane.wait_for_deployment(namespace, "web", timeout=30)
    assert {p["metadata"]["uid"] for p in after} == {p["metadata"]["uid"] for p in pods}
