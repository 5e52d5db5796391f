"""Write a generated cluster (:mod:`tests.support.cluster_gen`) into a real API server, at the size of a big one.

The generator's objects are shaped as ``kubectl get -o json`` prints a running cluster: nodes Ready with their
allocatable, pods bound and Running, budgets, volumes and claims with their status. Here each is created through
the API and then given that status through its ``status`` subresource, as a kubelet, the disruption controller or
the volume binder would have written it. Nothing keeps the status alive afterwards, so the control plane for this
runs without the kubelet stand-in and without the controllers that would rewrite it (:data:`CONTROLLERS`): the
workload controllers (the generator's owners are names, not objects), the disruption controller and the garbage
collector. Node heartbeats are not needed: kube-controller-manager never runs the node lifecycle controller here.

Before a create the server's fields go (``uid``, ``resourceVersion``, ``creationTimestamp``) and the pod's
service-account volume with them (its admission plugin adds one of its own), and the not-ready taint the
``TaintNodesByCondition`` admission plugin puts on a new node is replaced by the node's own taints.

Writes go through one urllib3 pool from ``threads`` threads (the API server is the bottleneck on two cores).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson
import urllib3

from .controlplane.cluster import ControlPlane

# The controllers that do not rewrite what is loaded: namespaces, service accounts (pods need their account)
# and the root CA ConfigMap (the service-account volume reads it).
CONTROLLERS = (
    "namespace-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
)

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink", "generation")
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
MERGE = "application/merge-patch+json"


class LoadError(Exception):
    """The API server refused an object the generator made."""


@dataclass
class Loaded:
    """What :func:`load` wrote: objects by kind, requests, and seconds."""

    objects: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    requests: int = 0
    seconds: float = 0.0


class _Client:
    def __init__(self, plane: ControlPlane, threads: int) -> None:
        self.server = plane.server
        self.headers = {
            "Authorization": f"Bearer {plane.tokens['admin']}",
            "Accept": "application/json",
        }
        self.pool = urllib3.PoolManager(
            num_pools=1, maxsize=threads, block=True, cert_reqs="CERT_REQUIRED", ca_certs=str(plane.ca_path)
        )
        self.lock = threading.Lock()
        self.requests = 0

    def call(self, method: str, path: str, body: Any, *, content_type: str = "application/json") -> None:
        """One write; 429 and 5xx (API priority and fairness on a busy server) are tried again with backoff, a
        409 on a create means the object exists already (``kube-system``, ``default``)."""
        for attempt in range(8):
            response = self.pool.request(
                method,
                self.server + path,
                body=orjson.dumps(body),
                headers={**self.headers, "Content-Type": content_type},
                timeout=urllib3.Timeout(connect=10, read=120),
                retries=False,
            )
            with self.lock:
                self.requests += 1
            if response.status in (429, 500, 503, 504) and attempt < 7:
                time.sleep(0.2 * 2**attempt)
                continue
            if 200 <= response.status < 300 or (response.status == 409 and method == "POST"):
                return
            raise LoadError(f"{method} {path}: HTTP {response.status}: {response.data[:400]!r}")


def _bare(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without status and without the fields the server sets."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_FIELDS}
    return out


def _pod_body(pod: dict[str, Any]) -> dict[str, Any]:
    body = _bare(pod)
    spec = dict(body["spec"])
    spec["volumes"] = [v for v in spec.get("volumes") or () if not v["name"].startswith("kube-api-access")]
    containers = []
    for c in spec.get("containers") or ():
        mounts = [m for m in c.get("volumeMounts") or () if m.get("mountPath") != SERVICE_ACCOUNT_MOUNT]
        containers.append({**c, "volumeMounts": mounts})
    spec["containers"] = containers
    spec.pop("serviceAccount", None)  # deprecated alias of serviceAccountName
    body["spec"] = spec
    return body


def _collection(obj: dict[str, Any]) -> str:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    group = obj["apiVersion"]
    prefix = "/api/v1" if group == "v1" else f"/apis/{group}"
    plural = {
        "Pod": "pods",
        "Node": "nodes",
        "Namespace": "namespaces",
        "PersistentVolume": "persistentvolumes",
        "PersistentVolumeClaim": "persistentvolumeclaims",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "StorageClass": "storageclasses",
        "PriorityClass": "priorityclasses",
        "ServiceAccount": "serviceaccounts",
    }[kind]
    return f"{prefix}/namespaces/{quote(namespace)}/{plural}" if namespace else f"{prefix}/{plural}"


def _create(client: _Client, obj: dict[str, Any], body: dict[str, Any] | None = None) -> None:
    path = _collection(obj)
    client.call("POST", path, body if body is not None else _bare(obj))
    name = quote(obj["metadata"]["name"])
    if obj["kind"] == "Node":
        # TaintNodesByCondition gave the new node the not-ready taint: the node's own taints replace it.
        client.call("PATCH", f"{path}/{name}", {"spec": {"taints": obj["spec"].get("taints")}}, content_type=MERGE)
    if obj.get("status") and obj["kind"] not in ("Namespace", "StorageClass", "PriorityClass", "ServiceAccount"):
        client.call("PATCH", f"{path}/{name}/status", {"status": obj["status"]}, content_type=MERGE)


def _priority_classes(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    values: dict[str, int] = {}
    for pod in pods:
        name = pod["spec"].get("priorityClassName")
        if name and not name.startswith("system-"):
            values[name] = int(pod["spec"].get("priority") or 0)
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        for name, value in sorted(values.items())
    ]


def _service_accounts(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    accounts = {
        (p["metadata"]["namespace"], p["spec"].get("serviceAccountName") or "default")
        for p in pods
        if (p["spec"].get("serviceAccountName") or "default") != "default"
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        for namespace, name in sorted(accounts)
    ]


def _wait_default_accounts(client: _Client, namespaces: Sequence[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for namespace in namespaces:
        path = f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/default"
        while True:
            response = client.pool.request("GET", client.server + path, headers=client.headers, retries=False)
            if response.status == 200:
                break
            if time.monotonic() > deadline:
                raise LoadError(f"no default ServiceAccount in {namespace} after {timeout:.0f}s")
            time.sleep(0.2)


def load(
    plane: ControlPlane,
    items: Iterable[dict[str, Any]],
    *,
    threads: int = 8,
    progress: Callable[[str], None] | None = None,
) -> Loaded:
    """Create every item of a generated cluster with its status; returns counts and the time taken."""
    began = time.monotonic()
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_kind[item["kind"]].append(item)
    pods = by_kind.get("Pod", [])
    stages = [
        ("Namespace", by_kind.get("Namespace", [])),
        ("PriorityClass", _priority_classes(pods)),
        ("StorageClass", by_kind.get("StorageClass", [])),
        ("PersistentVolume", by_kind.get("PersistentVolume", [])),
        ("PersistentVolumeClaim", by_kind.get("PersistentVolumeClaim", [])),
        ("Node", by_kind.get("Node", [])),
        ("PodDisruptionBudget", by_kind.get("PodDisruptionBudget", [])),
        ("ServiceAccount", _service_accounts(pods)),
        ("Pod", pods),
    ]
    client = _Client(plane, threads)
    loaded = Loaded()
    with ThreadPoolExecutor(threads) as pool:
        for kind, objects in stages:
            if kind == "ServiceAccount":
                _wait_default_accounts(client, sorted({p["metadata"]["namespace"] for p in pods}))
            t0 = time.monotonic()
            make = _pod_body if kind == "Pod" else _bare
            for _ in pool.map(lambda obj, make=make: _create(client, obj, make(obj)), objects):
                pass
            loaded.objects[kind] += len(objects)
            if progress is not None and objects:
                progress(f"{len(objects)} {kind} objects in {time.monotonic() - t0:.1f}s")
    loaded.requests = client.requests
    loaded.seconds = time.monotonic() - began
    client.pool.clear()
    return loaded
