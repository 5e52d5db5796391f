"""The world of the rescheduler's end-to-end tests: nodes and workloads of one test, watchers that guard
budgets and nodes for the whole test, and the rescheduler run as a subprocess.

Each test runs ``python -m rescheduler.cli run`` as a subprocess (exactly what the Deployment runs) with short
intervals and a configuration whose node classes are the test's own labels, so it only ever sees the nodes of
that test as spot or on-demand (everything else is class "other": never a candidate, never a target).

The fixtures ``world``, ``budgets`` and ``start`` of tests/e2e/conftest.py hand these to the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.controlplane.cluster import free_ports

ROOT = Path(__file__).resolve().parents[2]
TAINT_KEY = "spotshift.io/draining"
TAINT_VALUE = "spotshift-rescheduler"
STATE_ANNOTATION = "spotshift.io/drain-state"
PDBS = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
NodeFactory = Callable[..., dict[str, Any]]


# --- the test's world ------------------------------------------------------------------------------------------


class World:
    """One test's labels, nodes and workloads; the rescheduler's config selects exactly these nodes."""

    def __init__(self, plane: ControlPlane, namespace: str, make_node: NodeFactory, tmp_path: Path) -> None:
        self.plane = plane
        self.ns = namespace
        self.make_node = make_node
        self.tmp = tmp_path
        self.label = uuid.uuid4().hex[:8]
        self.spot_key = f"e2e.spotshift.io/spot-{self.label}"
        self.od_key = f"e2e.spotshift.io/od-{self.label}"
        self.nodes: list[str] = []

    def on_demand(self, prefix: str = "od", **kwargs: Any) -> str:
        node = self.make_node(prefix, labels={self.od_key: "true", "e2e.spotshift.io/test": self.label}, **kwargs)
        self.nodes.append(node["metadata"]["name"])
        return node["metadata"]["name"]

    def spot(self, prefix: str = "spot", **kwargs: Any) -> str:
        node = self.make_node(prefix, labels={self.spot_key: "true", "e2e.spotshift.io/test": self.label}, **kwargs)
        self.nodes.append(node["metadata"]["name"])
        return node["metadata"]["name"]

    def config(self, *, disruption: dict[str, Any] | None = None, **rescheduler: Any) -> Path:
        data: dict[str, Any] = {
            "namespace": self.ns,
            "node_classes": {
                "presets": [],
                "spot_selectors": [f"{self.spot_key}=true"],
                "on_demand_selectors": [f"{self.od_key}=true"],
            },
            "rescheduler": {"lease_name": f"rescheduler-{self.label}", **rescheduler},
            # Capacity mode (on by default) off: these tests count the nodes and pods of the feature they test;
            # test_capacity_e2e.py turns it on, and the image and Helm tests run it as deployed.
            "capacity": {"enabled": False},
        }
        if disruption is not None:
            data["disruption"] = disruption
        path = self.tmp / f"config-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def deployment(
        self, name: str, replicas: int, *, annotations: dict[str, str] | None = None, **pod_spec: Any
    ) -> dict[str, Any]:
        """A Deployment kept on this test's nodes, preferring spot as spotshift's webhook would make it;
        ``annotations`` go on its pods (``e2e.spotshift.io/ready-after`` for the kubelet stand-in)."""
        spec: dict[str, Any] = {
            "nodeSelector": {"e2e.spotshift.io/test": self.label},
            "terminationGracePeriodSeconds": 5,
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [{"key": self.spot_key, "operator": "In", "values": ["true"]}]
                            },
                        }
                    ]
                }
            },
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        }
        spec.update(pod_spec)
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}}, "spec": spec},
            },
        }
        self.plane.api.post(f"/apis/apps/v1/namespaces/{self.ns}/deployments", body)
        return body

    def job(self, name: str, **pod_spec: Any) -> None:
        """A one-pod Job on this test's nodes (the job controller creates its pod); ``pod_spec`` adds fields."""
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "nodeSelector": {"e2e.spotshift.io/test": self.label},
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "work",
                    "image": "registry.example/batch:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            **pod_spec,
        }
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
        }
        self.plane.api.post(f"/apis/batch/v1/namespaces/{self.ns}/jobs", body)

    def ready(self, name: str, timeout: float = 90) -> list[dict[str, Any]]:
        return self.plane.wait_for_deployment(self.ns, name, timeout=timeout)

    def scale(self, name: str, replicas: int) -> None:
        self.plane.api.patch(
            f"/apis/apps/v1/namespaces/{self.ns}/deployments/{name}", {"spec": {"replicas": replicas}}, "merge"
        )

    def pods(self, app: str) -> list[dict[str, Any]]:
        return [p for p in self.plane.pods(self.ns, f"app={app}") if not p["metadata"].get("deletionTimestamp")]

    def pdb(self, name: str, app: str, **spec: Any) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
        }
        self.plane.api.post(PDBS.format(ns=self.ns), body)

    def wait_pdb(self, name: str, allowed: int) -> None:
        path = PDBS.format(ns=self.ns) + f"/{name}"

        def computed() -> bool:
            pdb = self.plane.api.get(path)
            status = pdb.get("status") or {}
            return (
                status.get("observedGeneration") == pdb["metadata"]["generation"]
                and status.get("disruptionsAllowed") == allowed
            )

        wait_for(computed, timeout=60, what=f"PDB {name} to allow {allowed} disruptions")

    def node(self, name: str) -> dict[str, Any]:
        return self.plane.api.get(f"/api/v1/nodes/{name}")

    def our_taints(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.node(name)["spec"].get("taints") or [] if t.get("key") == TAINT_KEY]

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The rescheduler's Events about this test's nodes (in ``default``) and pods (in its namespace)."""
        out = []
        for ns in ("default", self.ns):
            for e in self.plane.api.list(f"/api/v1/namespaces/{ns}/events"):
                if (e.get("source") or {}).get("component") != "spotshift-rescheduler":
                    continue
                if ns == "default" and e["involvedObject"].get("name") not in self.nodes:
                    continue
                if reason is None or e.get("reason") == reason:
                    out.append(e)
        return out


def unschedulable_names(plane: ControlPlane) -> list[str]:
    """``namespace/name`` of every pod of the cluster that kube-scheduler found no node for."""
    out = []
    for p in plane.api.list("/api/v1/pods", fieldSelector="status.phase=Pending"):
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
                out.append(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
    return out


# --- watchers ------------------------------------------------------------------------------------------------


class BudgetWatcher(threading.Thread):
    """Polls every budget of a namespace; records any moment ``currentHealthy < desiredHealthy``."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api = plane.new_api()
        self.path = PDBS.format(ns=namespace)
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for pdb in self.api.list(self.path):
                    status = pdb.get("status") or {}
                    if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                        continue
                    healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
                    if healthy < desired:
                        self.violations.append(f"{pdb['metadata']['name']}: currentHealthy {healthy} < {desired}")
                self.samples += 1
            except (ApiError, requests.RequestException):
                pass
            self.stop.wait(0.1)

    def close(self) -> list[str]:
        self.stop.set()
        self.join(5)
        self.api.close()
        assert self.samples > 0, "the budget watcher never read the budgets"
        return self.violations


class NodeWatcher(threading.Thread):
    """Polls nodes; records every taint and cordon it ever sees on them (was a node ever touched?)."""

    def __init__(self, plane: ControlPlane, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.api = plane.new_api()
        self.names = names
        self.stop = threading.Event()
        self.touched: dict[str, list[str]] = {n: [] for n in names}

    def run(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                try:
                    node = self.api.get(f"/api/v1/nodes/{name}")
                except (ApiError, requests.RequestException):
                    continue
                for t in node["spec"].get("taints") or []:
                    if t.get("key") == TAINT_KEY:
                        self.touched[name].append(f"taint {t}")
                if node["spec"].get("unschedulable"):
                    self.touched[name].append("cordoned")
            self.stop.wait(0.1)

    def close(self) -> dict[str, list[str]]:
        self.stop.set()
        self.join(5)
        self.api.close()
        return {k: v for k, v in self.touched.items() if v}


# --- the rescheduler process ---------------------------------------------------------------------------------


def command_env() -> dict[str, str]:
    """The environment of a spotshift command the tests run: no ``SPOTSHIFT_*`` variable (the commands refuse
    the test scripts' own, such as ``SPOTSHIFT_K8S_VERSION``) and no ``KUBECONFIG`` (the tests name theirs)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_") and k != "KUBECONFIG"}


class Rescheduler:
    """``python -m rescheduler.cli run`` as a subprocess; JSON log lines collected from stderr."""

    def __init__(self, kubeconfig: Path, config: Path, log_path: Path, *extra: str, name: str = "r") -> None:
        self.port = free_ports(1)[0]
        self.log_path = log_path
        self.name = name
        argv = [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "run",
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            f"--listen-address=127.0.0.1:{self.port}",
            "--housekeeping-interval=1s",
            "--node-drain-delay=0s",
            "--pod-eviction-timeout=20s",
            "--max-graceful-termination=10s",
            "--replacement-timeout=60s",
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=1s",
            "--log-format=json",
            *extra,
        ]
        env = command_env()
        env["POD_NAME"] = name
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(raw))
        return out

    def refused_by_rbac(self) -> list[dict[str, Any]]:
        """Log lines reporting an API answer of 403 (the kube client writes "HTTP 403"; the evictor and lease
        code say "forbidden"). Matching the bare digits would also match generated names such as od-2f403b."""
        return [
            line for line in self.lines() if "HTTP 403" in (text := json.dumps(line)) or "forbidden" in text.lower()
        ]

    def logged(self, text: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if text in line.get("msg", "")]

    def metric(self, name: str, labels: str = "") -> float | None:
        try:
            body = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        except requests.RequestException:
            return None
        for line in body.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_logged(self, text: str, timeout: float = 60) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"rescheduler {self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            hits = self.logged(text)
            return hits[0] if hits else None

        return wait_for(found, timeout=timeout, what=f"rescheduler {self.name} to log {text!r}")

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def read_lease(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return plane.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def service_account_kubeconfig(plane: ControlPlane, namespace: str, tmp_path: Path, suffix: str) -> Path:
    """Apply deploy/base/rescheduler's RBAC (into this namespace) and a kubeconfig with that account's token."""
    base = ROOT / "deploy/base/rescheduler"
    docs = [d for f in ("rbac.yaml", "capacity-rbac.yaml") for d in yaml.safe_load_all((base / f).read_text())]
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] = f"{meta['name']}-{suffix}"
        else:
            meta["namespace"] = namespace
        if "roleRef" in doc and doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    paths = {
        "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    }
    for doc in docs:
        plane.api.post(paths[doc["kind"]], doc)

    value = plane.service_account_token(namespace, "spotshift-rescheduler")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_path)}}],
        "users": [{"name": "rescheduler", "user": {"token": value}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "rescheduler"}}],
        "current-context": "e2e",
    }
    path = tmp_path / "rescheduler.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def cleanup_rbac(plane: ControlPlane, suffix: str) -> None:
    for kind in ("clusterroles", "clusterrolebindings"):
        plane.api.delete_if_exists(f"/apis/rbac.authorization.k8s.io/v1/{kind}/spotshift-rescheduler-{suffix}")


def pod_nodes(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Each pod's name and the node it is on ("" while it has none)."""
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


def bind_pod(world: World, pod: str, node: str) -> None:
    """Bind a pod of the world's namespace to a node, as kube-scheduler does."""
    world.plane.api.post(
        f"/api/v1/namespaces/{world.ns}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def clear_workloads(plane: ControlPlane, namespace: str) -> None:
    """Delete a namespace's Deployments, then its pods, and wait until both are gone.

    The workloads go before the nodes do: a Deployment whose pods are deleted with their node makes them again,
    Pending and unschedulable until the namespace is gone, and the next test would wait for that."""
    api = plane.api
    api.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments")
    wait_for(
        lambda: not list(api.list(f"/apis/apps/v1/namespaces/{namespace}/replicasets")),
        timeout=30,
        what=f"the ReplicaSets of namespace {namespace} to be gone",
    )
    api.delete(f"/api/v1/namespaces/{namespace}/pods", gracePeriodSeconds=0)
    wait_for(lambda: not plane.pods(namespace), timeout=30, what=f"the pods of namespace {namespace} to be gone")
