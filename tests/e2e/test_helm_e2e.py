"""The Helm chart on the real control plane: lint, template, install, test, upgrade, uninstall, with the image.

helm is the one ``tools/helm.sh`` builds; it talks to this session's control plane through the admin kubeconfig.
There is no container runtime here, so the test plays the kubelet's part for the pods that must run for Helm to
go on, exactly as :mod:`tests.support.image` runs the image (read-only root, the pod's user and group, a bound token
of the pod's ServiceAccount): the chart's hook Jobs (``spot-certs``) and ``helm test``'s pod are run from the
image with their rendered command as the API server holds it, and their pod is marked Succeeded or Failed by
its exit code, so the Job controller and Helm see them end. Deployment pods are marked Running by the kubelet
stand-in; spot-extender and spot-rescheduler run from the image with the command of the installed Deployment,
followed only by what these processes need on a shared machine:

- the listen address on a free loopback port, and the rescheduler's short demo intervals
  (:data:`demo.stack.DEMO_RESCHEDULER_FLAGS`);
- ``--ip=127.0.0.1`` for the certificate the pre-install hook issues, and the webhook's ``clientConfig`` pointed at
  that address while the server runs (no Service networking on loopback; the chart's own ``service`` is put back
  before the upgrade). Its ``caBundle`` is the one the post-install hook set.

With the GKE preset: the webhook mutates a workload's pods as the API server creates them, the rescheduler
empties the on-demand node they run on onto a GKE Spot node, every metric name of the dashboard and the
PrometheusRule is in the servers' own /metrics, ``helm upgrade`` with changed values rolls the three Deployments
(a new ReplicaSet each, the Secret kept), and ``helm uninstall`` leaves no object of the chart behind, the
webhook's registration and the Secret included.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from demo.stack import DEMO_RESCHEDULER_FLAGS, Process, free_port
from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.controlplane.process import component_env
from tests.support.gotools import ToolMissing, helm_binary
from tests.support.image import (
    Container,
    ImageUnavailable,
    Mount,
    OpenedImage,
    container_env,
    image_name,
    secret_files,
    with_last_flags,
)
from tools.gen_reference import metric_families

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/chart/spotshift"
PROVIDERS = ("gke", "eks", "aks", "karpenter", "custom")
RELEASE = "spotshift"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
GKE_SPOT = "cloud.google.com/gke-spot"
METRIC = re.compile(r"\bspotshift_[a-z0-9_]+\b")
DEPLOYMENTS = ("spotshift-webhook", "spotshift-rescheduler", "spotshift-scheduler")
# Kinds of every object the chart renders, to find what is left after uninstall: (list path, namespaced).
KINDS = {
    "ConfigMap": ("/api/v1/namespaces/{ns}/configmaps", True),
    "Secret": ("/api/v1/namespaces/{ns}/secrets", True),
    "Service": ("/api/v1/namespaces/{ns}/services", True),
    "ServiceAccount": ("/api/v1/namespaces/{ns}/serviceaccounts", True),
    "Pod": ("/api/v1/namespaces/{ns}/pods", True),
    "Deployment": ("/apis/apps/v1/namespaces/{ns}/deployments", True),
    "Job": ("/apis/batch/v1/namespaces/{ns}/jobs", True),
    "ReplicaSet": ("/apis/apps/v1/namespaces/{ns}/replicasets", True),
    "PodDisruptionBudget": ("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", True),
    "KubeSystemRoleBinding": ("/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", False),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1/clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", False),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1/priorityclasses", False),
}


# ---- helm -------------------------------------------------------------------------------------------------


def helm_argv(plane: ControlPlane, home: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    try:
        binary = helm_binary()
    except ToolMissing as e:
        pytest.fail(str(e), pytrace=False)
    env = {
        **component_env(),
        "KUBECONFIG": str(plane.kubeconfig),
        # helm's own files stay in the test's directory.
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return [binary, *args], env


def helm(plane: ControlPlane, home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv, env = helm_argv(plane, home, *args)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def image_values() -> list[str]:
    repository, _, tag = image_name().rpartition(":")
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]


def test_helm_lint_strict_is_clean_for_every_provider() -> None:
    for provider in PROVIDERS:
        done = subprocess.run(
            [helm_binary(), "lint", "--strict", str(CHART), "--set", f"provider={provider}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_helm_template_of_every_provider_is_accepted_by_the_api_server(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Every object of every preset (hooks and test included) passes the API server's validation: a server-side
    dry run of kubectl apply, which stores nothing. The ServiceAccounts are created first (in the test's own
    namespace), since admission looks up a pod's ServiceAccount even in a dry run."""
    for provider in PROVIDERS:
        rendered = helm(
            control_plane, tmp_path, "template", RELEASE, str(CHART), "--namespace", namespace,
            "--set", f"provider={provider}", "--set", "capacity.enabled=true", "--set", "spotCeilings.enabled=true",
            "--set", f"tests.probeNamespace={namespace}",
        ).stdout  # fmt: skip
        path = tmp_path / f"{provider}.yaml"
        path.write_text(rendered)
        for doc in yaml.safe_load_all(rendered):
            if doc and doc["kind"] == "ServiceAccount":
                try:
                    control_plane.api.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", doc)
                except ApiError as e:
                    assert e.status == 409, e
        applied = control_plane.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
        assert applied.returncode == 0, f"{provider}: {applied.stderr}"
        kinds = len([d for d in yaml.safe_load_all(rendered) if d])
        assert applied.stdout.count("(server dry run)") == kinds, applied.stdout


# ---- playing the kubelet for the pods Helm waits on ---------------------------------------------------------


class PodRunner:
    """Runs the chart's hook and test pods from the image once they are bound, and marks them done."""

    def __init__(self, plane: ControlPlane, image: OpenedImage, namespace: str, work: Path) -> None:
        self.plane, self.image, self.namespace, self.work = plane, image, namespace, work
        self.done: dict[str, tuple[str, subprocess.CompletedProcess[str]]] = {}
        self.extra: dict[str, tuple[str, ...]] = {}

    def poll(self) -> None:
        for pod in self.plane.pods(self.namespace, "app.kubernetes.io/name in (spotshift-certs,spotshift-test)"):
            meta, spec = pod["metadata"], pod["spec"]
            if meta["uid"] in self.done or not spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            owner = (meta.get("labels") or {}).get("batch.kubernetes.io/job-name", meta["name"])
            self.done[meta["uid"]] = (owner, self.run(pod, owner))

    def run(self, pod: dict[str, Any], owner: str) -> subprocess.CompletedProcess[str]:
        meta, spec = pod["metadata"], pod["spec"]
        (c,) = spec["containers"]
        account = spec["serviceAccountName"]
        files = self.plane.service_account_files(self.namespace, account)
        token = secret_files(self.work / "volumes" / meta["uid"], files, 0o644, None)
        argv = with_last_flags(c["command"], self.extra.get(owner, ()))
        security = spec["securityContext"]
        container = Container(
            argv=argv,
            env={
                **container_env(c, {}),
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.plane.apiserver_port),
                "HOSTNAME": meta["name"],
            },
            mounts=(Mount(token, SA_DIR),),
            user=security["runAsUser"],
            group=security["runAsGroup"],
        )
        done = self.image.run(container)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        terminated = {
            "exitCode": done.returncode,
            "reason": "Completed" if done.returncode == 0 else "Error",
            "startedAt": now,
            "finishedAt": now,
        }
        status = {
            "phase": "Succeeded" if done.returncode == 0 else "Failed",
            "conditions": [
                {"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
                for t in ("Ready", "ContainersReady")
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        self.plane.api.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{meta['name']}/status", {"status": status}, "strategic"
        )
        return done

    def outputs(self, prefix: str) -> list[str]:
        """What the pods of Jobs (or the pods) whose name starts with ``prefix`` printed."""
        return [d.stdout + d.stderr for owner, d in self.done.values() if owner.startswith(prefix)]

    def report(self) -> str:
        return "\n".join(f"{owner} -> {d.returncode}\n{d.stdout}{d.stderr}" for owner, d in self.done.values())


def helm_with_pods(plane: ControlPlane, home: Path, runner: PodRunner, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs helm while the runner plays the kubelet for the pods it waits on."""
    argv, env = helm_argv(plane, home, *args)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.3)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{out}\n{err}\npods run:\n{runner.report()}"
    return done


# ---- the installed servers, run from the image --------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> Iterator[OpenedImage]:
    if os.environ.get("SPOTSHIFT_SKIP_IMAGE") == "1":
        pytest.skip("SPOTSHIFT_SKIP_IMAGE=1: the image tests are skipped")
    try:
        opened = OpenedImage(image_name())
    except ImageUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield opened
    finally:
        opened.close()


class Installed:
    """spot-extender and spot-rescheduler started from the image as the installed Deployments say."""

    def __init__(self, plane: ControlPlane, image: OpenedImage, namespace: str, work: Path) -> None:
        self.plane, self.image, self.namespace, self.work = plane, image, namespace, work
        self.webhook_port, self.metrics_port = free_port(), free_port()
        self.processes: list[Process] = []
        secret = plane.api.get(f"/api/v1/namespaces/{namespace}/secrets/spotshift-tls")["data"]
        self.tls = {k: base64.b64decode(secret[k]) for k in ("tls.crt", "tls.key", "ca.crt")}
        self.ca_path = work / "ca.crt"
        self.ca_path.write_bytes(self.tls["ca.crt"])

    def deployment(self, name: str) -> dict[str, Any]:
        return dict(self.plane.api.get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{name}"))

    def volume(self, spec: dict[str, Any], name: str) -> Path:
        (source,) = [v for v in spec["volumes"] if v["name"] == name]
        directory = self.work / "volumes" / spec["serviceAccountName"] / name
        if "configMap" in source:
            path = f"/api/v1/namespaces/{self.namespace}/configmaps/{source['configMap']['name']}"
            data = {k: v.encode() for k, v in self.plane.api.get(path)["data"].items()}
            return secret_files(directory, data, 0o644, None)
        return secret_files(directory, self.tls, source["secret"]["defaultMode"], spec["securityContext"]["fsGroup"])

    def start(self, name: str, overrides: tuple[str, ...]) -> Process:
        spec = self.deployment(name)["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["image"] == image_name()
        mounts = [Mount(self.volume(spec, m["name"]), m["mountPath"]) for m in c["volumeMounts"] if m["name"] != "tmp"]
        files = self.plane.service_account_files(self.namespace, spec["serviceAccountName"])
        mounts.append(Mount(secret_files(self.work / "volumes" / name / "sa", files, 0o644, None), SA_DIR))
        security = spec["securityContext"]
        container = Container(
            argv=with_last_flags(c["command"], overrides),
            env={
                **container_env(c, {"spec.nodeName": "helm-e2e-host", "metadata.name": f"{name}-helm-e2e"}),
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.plane.apiserver_port),
                "HOSTNAME": f"{name}-helm-e2e",
            },
            mounts=tuple(mounts),
            user=security["runAsUser"],
            group=security["runAsGroup"],
            supplementary_groups=(security["fsGroup"],) if "fsGroup" in security else (),
        )
        process = Process(name, self.image.command(container), self.work / f"{name}.log").start()
        self.processes.append(process)
        return process

    def start_webhook(self) -> None:
        process = self.start("spotshift-webhook", (f"--bind=127.0.0.1:{self.webhook_port}",))
        session = requests.Session()
        session.trust_env = False

        def ready() -> bool:
            process.check()
            try:
                url = f"https://127.0.0.1:{self.webhook_port}/readyz"
                return session.get(url, verify=str(self.ca_path), timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(ready, timeout=90, what="spot-extender from the image to be ready")

    def start_rescheduler(self) -> None:
        self.start(
            "spotshift-rescheduler", (f"--listen-address=127.0.0.1:{self.metrics_port}", *DEMO_RESCHEDULER_FLAGS)
        )

    def metrics(self) -> str:
        session = requests.Session()
        session.trust_env = False
        webhook = session.get(f"https://127.0.0.1:{self.webhook_port}/metrics", verify=str(self.ca_path), timeout=5)
        rescheduler = session.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
        return webhook.text + rescheduler.text

    def extender_call(self, verb: str, pod: dict[str, Any], nodes: list[str]) -> Any:
        session = requests.Session()
        session.trust_env = False
        url = f"https://127.0.0.1:{self.webhook_port}/{verb}"
        answer = session.post(url, json={"Pod": pod, "NodeNames": nodes}, verify=str(self.ca_path), timeout=5)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(30)}" for p in self.processes)


def point_webhook(plane: ControlPlane, client_config: dict[str, Any]) -> None:
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/spotshift"
    current = plane.api.get(path)
    hook = current["webhooks"][0]
    ca = hook["clientConfig"].get("caBundle")
    assert ca, "the post-install hook set the caBundle"
    hook["clientConfig"] = {**client_config, "caBundle": ca}
    plane.api.put(path, current)


def scraped_names(text: str) -> set[str]:
    """Sample names in an exposition, and the names Prometheus gives each declared family's samples."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names |= {
            "counter": {f"{family}_total"},
            "histogram": {f"{family}_bucket", f"{family}_sum", f"{family}_count"},
        }.get(kind, {family})
    return names


def used_names() -> set[str]:
    dashboard = json.loads((CHART / "files/spotshift-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rule = yaml.safe_load((CHART / "files/prometheusrule.yaml").read_text())
    exprs += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    return {n for e in exprs for n in METRIC.findall(e)}


def workload(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            },
        },
    }


def leftovers(plane: ControlPlane, namespace: str, released: list[tuple[str, str]]) -> list[str]:
    """What is left of the release: anything in its namespace but what the API server and controllers make in every
    namespace, and any object of its manifest and hooks (``released``: kind, name) outside it."""
    left = []
    for kind, (template, namespaced) in KINDS.items():
        for obj in plane.api.list(template.format(ns=namespace)):
            name = obj["metadata"]["name"]
            if not namespaced:
                if (kind.removeprefix("KubeSystem"), name) in released:
                    left.append(f"{kind} {name}")
            elif (kind, name) not in (("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")):
                left.append(f"{kind} {namespace}/{name}")
    return left


def released_objects(plane: ControlPlane, home: Path, namespace: str) -> list[tuple[str, str]]:
    """(kind, name) of every object of the release: its manifest and its hooks, as Helm recorded them."""
    text = helm(plane, home, "get", "manifest", RELEASE, "-n", namespace).stdout
    text += "\n---\n" + helm(plane, home, "get", "hooks", RELEASE, "-n", namespace).stdout
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text) if d]


# ---- install, test, drain, upgrade, uninstall ---------------------------------------------------------------


@dataclass
class Release:
    """The chart's release under test: where it is installed, how helm runs, the values it was installed with."""

    plane: ControlPlane
    runner: PodRunner
    home: Path
    ns: str
    values: list[str]

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return helm_with_pods(self.plane, self.home, self.runner, *args)


def install(release: Release) -> None:
    """helm install: the pre-install hook creates the Secret and sets the caBundle; every Deployment is ready."""
    release.helm("install", RELEASE, str(CHART), "-n", release.ns, "--wait", "--timeout", "4m", *release.values)
    created = release.runner.outputs("spotshift-certs")
    assert any("created Secret" in o for o in created) and any("set caBundle on 1 webhook" in o for o in created), (
        created
    )
    for name in DEPLOYMENTS:
        release.plane.wait_for_deployment(release.ns, name, timeout=60)


def mutated_workload(plane: ControlPlane, make_node: Callable[..., dict[str, Any]], namespace: str) -> str:
    """A workload on an on-demand node of its own, its pods mutated as they are created; the node's name."""
    work: str = make_node("od-work")["metadata"]["name"]
    plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", workload("web", 3))
    pods = plane.wait_for_deployment(namespace, "web", timeout=60)
    assert {p["spec"]["nodeName"] for p in pods} == {work}
    for pod in pods:
        assert any(t.get("key") == GKE_SPOT for t in pod["spec"].get("tolerations", [])), pod["spec"]
        assert pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    return work


def emptied_onto_spot(
    plane: ControlPlane, make_node: Callable[..., dict[str, Any]], servers: Installed, namespace: str, work: str
) -> str:
    """Spot capacity arrives and the rescheduler empties the workload's node onto it; the spot node's name."""
    spot: str = make_node(
        "spot",
        labels={GKE_SPOT: "true"},
        taints=[{"key": GKE_SPOT, "value": "true", "effect": "NoSchedule"}],
        allocatable={"cpu": "8", "memory": "16Gi"},
    )["metadata"]["name"]
    servers.start_rescheduler()

    def emptied() -> bool:
        for p in servers.processes:
            p.check()
        web = [p for p in plane.pods(namespace, "app=web") if not p["metadata"].get("deletionTimestamp")]
        return len(web) == 3 and all(p["spec"].get("nodeName") == spot for p in web)

    wait_for(emptied, timeout=180, what="the rescheduler to empty od-work onto spot", check=plane.ensure_alive)
    plane.wait_for_deployment(namespace, "web", timeout=60)
    assert not list(plane.api.list("/api/v1/pods", fieldSelector=f"spec.nodeName={work}")), "od-work is empty"
    return spot


def dashboards_metrics_served(servers: Installed, namespace: str, nodes: list[str], cordoned: str) -> None:
    """The extender's verbs are called (one node being reclaimed), so every family of the servers has samples; the
    dashboards and alerts use only metrics they serve."""
    probe = {
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    filtered = servers.extender_call("filter", probe, [*nodes, cordoned])
    assert cordoned in (filtered.get("FailedNodes") or {}), filtered
    servers.extender_call("prioritize", probe, nodes)
    scraped = scraped_names(servers.metrics())
    missing = used_names() - scraped
    # A counter with labels has no sample until it first counts (prometheus-client serves nothing for it before):
    # such a family this scenario never exercises (failed or skipped drains, capacity mode) is missing here,
    # and only those; tests/unit/test_dashboards.py checks their names against the collectors.
    unobserved = {f.name + "_total" for f in metric_families() if f.kind == "counter" and f.labels} - scraped
    assert missing <= unobserved, (
        f"the dashboard or the alerts use metrics the running servers do not serve: {sorted(missing - unobserved)}"
    )
    assert len(missing) <= 3, f"not observed in this scenario: {sorted(missing)}"


def upgrade(release: Release, servers: Installed) -> None:
    """helm upgrade with changed values rolls every Deployment; the Secret and the caBundle are kept."""
    plane = release.plane
    point_webhook(plane, {"service": {"name": "spotshift", "namespace": release.ns, "path": "/mutate", "port": 443}})
    before = {name: servers.deployment(name)["metadata"]["generation"] for name in DEPLOYMENTS}
    secret_before = plane.api.get(f"/api/v1/namespaces/{release.ns}/secrets/spotshift-tls")["data"]
    changed = ["--set", "config.webhook.weight=90", "--set", "rescheduler.nodeDrainDelay=5m"]
    changed += ["--set", "scheduler.weight=3"]
    release.helm(
        "upgrade", RELEASE, str(CHART), "-n", release.ns, "--wait", "--timeout", "4m", *release.values, *changed
    )
    assert any("kept the existing Secret" in o for o in release.runner.outputs("spotshift-certs"))
    assert plane.api.get(f"/api/v1/namespaces/{release.ns}/secrets/spotshift-tls")["data"] == secret_before
    for name in DEPLOYMENTS:
        assert servers.deployment(name)["metadata"]["generation"] > before[name], name
        rolled = plane.wait_for_deployment(release.ns, name, timeout=90)
        revisions = {p["metadata"]["labels"]["pod-template-hash"] for p in rolled}
        sets = list(
            plane.api.list(
                f"/apis/apps/v1/namespaces/{release.ns}/replicasets", labelSelector=f"app.kubernetes.io/name={name}"
            )
        )
        assert len(sets) == 2 and len(revisions) == 1, (name, [s["metadata"]["name"] for s in sets])
    (rescheduler,) = servers.deployment("spotshift-rescheduler")["spec"]["template"]["spec"]["containers"]
    assert "--node-drain-delay=5m" in rescheduler["command"]
    assert plane.api.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/spotshift")["webhooks"][
        0
    ]["clientConfig"].get("caBundle"), "the upgrade keeps the caBundle"


def uninstall(release: Release) -> None:
    """helm uninstall: nothing of the chart is left, no webhook registration to slow pod creation."""
    plane = release.plane
    released = released_objects(plane, release.home, release.ns)
    assert ("MutatingWebhookConfiguration", "spotshift") in released and ("Job", "spotshift-certs-delete") in released
    release.helm("uninstall", RELEASE, "-n", release.ns, "--wait", "--timeout", "2m")
    assert any("deleted Secret" in o for o in release.runner.outputs("spotshift-certs"))

    def nothing_left() -> bool:
        left = leftovers(plane, release.ns, released)
        assert not left, f"left after uninstall: {left}"  # wait_for's message names them
        return True

    wait_for(nothing_left, timeout=60, what="the chart's objects to be gone")
    with pytest.raises(ApiError) as gone:
        plane.api.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/spotshift")
    assert gone.value.status == 404


def test_helm_install_test_upgrade_and_uninstall_with_the_image(
    control_plane: ControlPlane,
    image: OpenedImage,
    make_node: Callable[..., dict[str, Any]],
    namespace: str,
    tmp_path: Path,
) -> None:
    plane = control_plane
    release_ns = f"{namespace}-spotshift"
    plane.create_namespace(release_ns)
    runner = PodRunner(plane, image, release_ns, tmp_path)
    # The pre-install hook's certificate also names 127.0.0.1, the address the API server calls it on here.
    runner.extra["spotshift-certs-pre"] = ("--ip=127.0.0.1",)
    home = tmp_path / "helm"
    servers: Installed | None = None
    try:
        # On-demand nodes for spotshift's own pods (two: the webhook spreads over hosts).
        system = [make_node("od-sys", allocatable={"cpu": "8", "memory": "16Gi"})["metadata"]["name"] for _ in range(2)]
        values = ["--set", "provider=gke", "--set", f"tests.probeNamespace={namespace}", *image_values()]
        release = Release(plane, runner, home, release_ns, values)
        install(release)

        servers = Installed(plane, image, release_ns, tmp_path)
        servers.start_webhook()
        point_webhook(plane, {"url": f"https://127.0.0.1:{servers.webhook_port}/mutate"})

        # helm test: the probe pod, run from the image, finds its dry-run pod mutated.
        tested = release.helm("test", RELEASE, "-n", release_ns)
        assert re.search(r"Phase:\s+Succeeded", tested.stdout), tested.stdout
        assert any("probe: PASS" in o for o in runner.outputs("spotshift-test")), runner.report()

        for name in system:
            plane.api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
        work = mutated_workload(plane, make_node, namespace)
        # A pod that opted out (the webhook skips it), bound beside spotshift's own pods.
        opted_out = workload("x", 1)["spec"]["template"]
        opted_out["metadata"] = {"name": "opted-out", "annotations": {"spotshift.io/exclude": "true"}}
        opted_out["spec"]["nodeName"] = system[0]
        plane.api.post(f"/api/v1/namespaces/{namespace}/pods", opted_out)

        spot = emptied_onto_spot(plane, make_node, servers, namespace, work)
        for name in system:
            plane.api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": False}})
        cordoned = make_node("od-cordoned", unschedulable=True)["metadata"]["name"]
        dashboards_metrics_served(servers, namespace, [spot, work], cordoned)
        servers.stop()

        upgrade(release, servers)
        uninstall(release)
    finally:
        if servers is not None:
            servers.stop()
            print(servers.logs())
        print(runner.report())
        helm(plane, home, "uninstall", RELEASE, "-n", release_ns, "--no-hooks", "--ignore-not-found", check=False)
        plane.delete_namespace(release_ns)
