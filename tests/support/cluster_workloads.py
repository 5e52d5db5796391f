"""The workloads of a generated cluster (for :mod:`tests.support.cluster_gen`): Deployments with their
ReplicaSets and PodDisruptionBudgets, StatefulSets with zonal PersistentVolumes, bare pods and finished Jobs.

:class:`Workloads` is a mixin of the generator: its methods read the generator's random stream and place
pods on its nodes, so the order of calls decides the cluster.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.cluster_objects import (
    CEILING_ANNOTATION,
    MEMORY_PER_CPU,
    MIN_ON_DEMAND_ANNOTATION,
    ON_DEMAND_LABEL,
    SAFE_TO_EVICT,
    SAFE_TO_EVICT_LOCAL,
    SPOT_TOLERATION,
    ZONES,
    milli,
    to_bytes,
)


@dataclass
class Traits:
    """What a generated Deployment has, drawn once for all its pods."""

    plain: bool
    pinned: bool
    gpu: int
    tolerate: bool
    anti: bool
    spread: bool
    pod_affinity_to: str | None
    local: bool
    safe_false: bool
    port: int | None
    ceiling: bool
    pdb: bool
    cpu: int = 0
    mem: int = 0


def _deployment_tolerations(traits: Traits) -> list[dict[str, Any]]:
    """The tolerations of a Deployment's pods: the API server's defaults, spot and GPU as drawn."""
    tolerations: list[dict[str, Any]] = [
        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
        {
            "effect": "NoExecute",
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "tolerationSeconds": 300,
        },
    ]
    if traits.tolerate:
        tolerations.append(dict(SPOT_TOLERATION))
    if traits.gpu:
        tolerations.append({"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"})
    return tolerations


def _own_anti_affinity(app: str, *, required: bool) -> dict[str, Any]:
    """Anti-affinity of an app's pods to each other: required per node, else preferred per zone."""
    if required:
        return {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": app}},
                    "topologyKey": "topology.kubernetes.io/zone",
                },
                "weight": 100,
            }
        ]
    }


def _zone_spread(app: str) -> list[dict[str, Any]]:
    """A hard spread of an app's pods over the zones."""
    return [
        {
            "labelSelector": {"matchLabels": {"app": app}},
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ]


def _zonal_pv(name: str, uid: str, claim: str, ns: str, zone: str, k: int) -> dict[str, Any]:
    """An EBS PersistentVolume of one zone, bound to ``claim``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "labels": {"topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "eu-west-1"},
            "name": name,
            "uid": uid,
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "20Gi"},
            "claimRef": {"kind": "PersistentVolumeClaim", "name": claim, "namespace": ns},
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{k:017x}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}
                            ]
                        }
                    ]
                }
            },
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "gp3",
        },
        "status": {"phase": "Bound"},
    }


def _bound_claim(name: str, ns: str, uid: str, volume: str) -> dict[str, Any]:
    """A PersistentVolumeClaim bound to ``volume``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "20Gi"}},
            "storageClassName": "gp3",
            "volumeName": volume,
        },
        "status": {"phase": "Bound"},
    }


class Workloads:
    """Workload generators (``rng``, ``f``, the node lists and the JSON builders come from the generator)."""

    rng: random.Random

    def deployment(
        self,
        ns: str,
        k: int,
        *,
        name: str | None = None,
        replicas: int | None = None,
        pdb: bool | None = None,
        pinned: bool | None = None,
        plain: bool = False,
        expendable: bool = False,
        pending: bool = False,
    ) -> Iterator[dict[str, Any]]:
        rng = self.rng
        app = name or f"{rng.choice(('api', 'web', 'worker', 'cache', 'cron', 'frontend', 'backend', 'svc'))}-{k}"
        if replicas is None:
            replicas = self.replica_count() if not pending else 1
            replicas = max(1, min(replicas, self.n_pods - self.pods_made))
        hash_ = self.suffix(10)
        rs = f"{app}-{hash_}"
        labels = {"app": app, "pod-template-hash": hash_}
        traits = self._traits(k, replicas, pinned=pinned, pdb=pdb, plain=plain, expendable=expendable)
        cpu = self.cpu_request()
        mem = rng.choice(MEMORY_PER_CPU)
        containers = self._deployment_containers(ns, app, k, cpu, mem, traits)
        traits.cpu = milli(cpu) + (50 if len(containers) > 1 else 0)
        traits.mem = to_bytes(mem) + (64 * 2**20 if len(containers) > 1 else 0)
        affinity, aff_zones = self._deployment_affinity(app, traits)
        volumes, annotations = self._deployment_annotations(traits)
        pod = {
            "generate_name": f"{rs}-",
            "owner": ("ReplicaSet", rs),
            "containers": containers,
            "tolerations": _deployment_tolerations(traits),
            "affinity": affinity or None,
            "node_selector": {ON_DEMAND_LABEL[0]: ON_DEMAND_LABEL[1]} if traits.pinned else None,
            "volumes": volumes,
            "spread": _zone_spread(app) if traits.spread else None,
            "priority": -100 if expendable else 0,
            "priority_class": "overprovisioning" if expendable else "",
        }
        placed: list[tuple[str, str]] = []
        for r in range(replicas):
            zone = ZONES[r % 3] if traits.spread else (rng.choice(aff_zones) if aff_zones else None)
            node = None if pending else self._place_replica(app, zone, traits)
            if node is not None:
                placed.append((app, node.zone))
            yield self.pod_json(
                ns=ns,
                name=f"{rs}-{self.suffix()}",
                labels=dict(labels),
                node=node,
                annotations=dict(annotations) if annotations else None,
                phase="Running" if node is not None else "Pending",
                **pod,
            )
        if placed:
            self.deployment_pods[app] = placed
        if traits.pdb:
            yield self.pdb_json(ns, app, replicas, len(placed))

    def _traits(
        self, k: int, replicas: int, *, pinned: bool | None, pdb: bool | None, plain: bool, expendable: bool
    ) -> Traits:
        """Draw what a Deployment has (a ``plain`` one has none of the optional features)."""
        rng, f = self.rng, self.f
        if pinned is None:
            pinned = not plain and rng.random() < f.pinned
        gpu = 0
        if not plain and not pinned and self.by_class["on-demand"] and rng.random() < f.gpu_nodes * 0.5:
            gpu = 1
        tolerate = not pinned and (plain or rng.random() < f.tolerate_spot)
        anti = not plain and replicas > 1 and rng.random() < f.anti_affinity
        spread = not plain and not anti and replicas > 2 and rng.random() < f.spread
        pod_affinity_to: str | None = None
        if not plain and rng.random() < f.pod_affinity and self.deployment_pods:
            pod_affinity_to = rng.choice(list(self.deployment_pods))
        local = not plain and rng.random() < f.local_storage
        safe_false = not plain and rng.random() < f.safe_to_evict_false
        port = 9000 + k % 500 if not plain and rng.random() < f.host_ports else None
        ceiling = not plain and not pinned and replicas >= 3 and rng.random() < f.ceiling
        if pdb is None:
            pdb = replicas > 1 and rng.random() < f.pdb
        return Traits(
            plain, pinned, gpu, tolerate, anti, spread, pod_affinity_to, local, safe_false, port, ceiling, pdb
        )

    def _deployment_containers(
        self, ns: str, app: str, k: int, cpu: str, mem: str, traits: Traits
    ) -> list[dict[str, Any]]:
        """The app's container (with its port, and its GPU) and, drawn, an envoy sidecar."""
        containers = [self.container(app, f"registry.example.com/{ns}/{app}:1.{k % 40}.0", cpu, mem, ports=None)]
        if traits.port is not None:
            containers[0]["ports"] = [{"containerPort": traits.port, "hostPort": traits.port, "protocol": "TCP"}]
        else:
            containers[0]["ports"] = [{"containerPort": 8080, "name": "http", "protocol": "TCP"}]
        if traits.gpu:
            containers[0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        if not traits.plain and self.rng.random() < 0.3:
            containers.append(self.container("envoy", "envoyproxy/envoy:v1.30.1", "50m", "64Mi"))
        return containers

    def _deployment_affinity(self, app: str, traits: Traits) -> tuple[dict[str, Any], list[str]]:
        """The pods' affinity (anti-affinity to each other, perhaps to another app, affinity to the app
        ``traits.pod_affinity_to``) and the zones of that app's pods."""
        affinity: dict[str, Any] = {"podAntiAffinity": _own_anti_affinity(app, required=traits.anti)}
        if not traits.plain and self.deployment_pods and self.rng.random() < self.f.anti_affinity_other:
            avoid = self.rng.choice(sorted(self.deployment_pods))
            terms = affinity["podAntiAffinity"].setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
            terms.append({"labelSelector": {"matchLabels": {"app": avoid}}, "topologyKey": "kubernetes.io/hostname"})
        if traits.pod_affinity_to is None:
            return affinity, []
        affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": traits.pod_affinity_to}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
        return affinity, sorted({z for _, z in self.deployment_pods[traits.pod_affinity_to]})

    def _deployment_annotations(self, traits: Traits) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """The pods' volumes (a local scratch volume) and annotations (eviction and on-demand share settings)."""
        volumes = None
        annotations: dict[str, str] = {}
        if traits.local:
            volumes = [{"emptyDir": {}, "name": "scratch"}]
            if self.rng.random() < 0.5:
                annotations[SAFE_TO_EVICT_LOCAL] = "scratch"
        if traits.safe_false:
            annotations[SAFE_TO_EVICT] = "false"
        if traits.ceiling:
            if self.rng.random() < 0.7:
                annotations[CEILING_ANNOTATION] = str(self.rng.choice((50, 60, 70, 80)))
            else:
                annotations[MIN_ON_DEMAND_ANNOTATION] = str(self.rng.choice((1, 2)))
        return volumes, annotations

    def _place_replica(self, app: str, zone: str | None, traits: Traits) -> Any:
        """A node for one replica (taken from the free room), or None when none has room."""
        node = self.choose_node(
            cpu=traits.cpu,
            mem=traits.mem,
            gpu=traits.gpu,
            spot_ok=not traits.pinned and not traits.gpu,
            tainted_ok=traits.tolerate,
            on_demand_ok=True,
            zone=zone,
            app=app if traits.anti else None,
            port=traits.port,
        )
        if node is not None:
            self.place(node, traits.cpu, traits.mem, traits.gpu)
            if traits.anti:
                node.apps.add(app)
            if traits.port is not None:
                node.ports.add(traits.port)
        return node

    def statefulset(self, ns: str, k: int) -> Iterator[dict[str, Any]]:
        rng = self.rng
        app = f"db-{k}"
        replicas = rng.choice((1, 2, 3))
        cpu = self.cpu_request()
        mem = rng.choice(MEMORY_PER_CPU)
        tolerate = rng.random() < 0.5
        tolerations = [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
        if tolerate:
            tolerations.append(dict(SPOT_TOLERATION))
        placed = 0
        for r in range(replicas):
            node = self.choose_node(
                cpu=milli(cpu),
                mem=to_bytes(mem),
                gpu=0,
                spot_ok=True,
                tainted_ok=tolerate,
                on_demand_ok=True,
                zone=None,
                app=None,
                port=None,
            )
            if node is None:
                continue
            self.place(node, milli(cpu), to_bytes(mem))
            claim = f"data-{app}-{r}"
            pv = f"pvc-{self.next_uid()}"
            yield _zonal_pv(pv, self.next_uid(), claim, ns, node.zone, k)
            yield _bound_claim(claim, ns, self.next_uid(), pv)
            yield self.pod_json(
                ns=ns,
                name=f"{app}-{r}",
                generate_name=f"{app}-",
                labels={"app": app, "statefulset.kubernetes.io/pod-name": f"{app}-{r}"},
                owner=("StatefulSet", app),
                containers=[self.container("db", "postgres:16.2", cpu, mem)],
                node=node,
                tolerations=tolerations,
                volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            )
            placed += 1
        # Drawn only when the profile asks for StatefulSet budgets, so other profiles keep their clusters.
        if self.f.statefulset_pdb and replicas > 1 and rng.random() < self.f.statefulset_pdb:
            yield self.pdb_json(ns, app, replicas, placed)

    def bare_pod(self, ns: str, k: int) -> Iterator[dict[str, Any]]:
        cpu = self.cpu_request()
        node = self.choose_node(
            cpu=milli(cpu),
            mem=2**27,
            gpu=0,
            spot_ok=True,
            tainted_ok=False,
            on_demand_ok=True,
            zone=None,
            app=None,
            port=None,
        )
        if node is None:
            return
        self.place(node, milli(cpu), 2**27)
        yield self.pod_json(
            ns=ns,
            name=f"debug-{k}",
            labels={"run": f"debug-{k}"},
            owner=None,
            containers=[self.container("debug", "busybox:1.36", cpu, "128Mi")],
            node=node,
            tolerations=[],
        )

    def finished_job(self, ns: str, k: int) -> Iterator[dict[str, Any]]:
        node = self.rng.choice(self.nodes)
        yield self.pod_json(
            ns=ns,
            name=f"report-{k}-{self.suffix()}",
            labels={"job-name": f"report-{k}"},
            owner=("Job", f"report-{k}"),
            containers=[self.container("report", "python:3.12", "1", "1Gi")],
            node=node,
            tolerations=[],
            phase="Succeeded",
        )
