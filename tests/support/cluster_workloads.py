"""The workloads of a generated cluster (for :mod:`tests.support.cluster_gen`): Deployments with their
ReplicaSets and PodDisruptionBudgets, StatefulSets with zonal PersistentVolumes, bare pods and finished Jobs.

:class:`Workloads` is a mixin of the generator: its methods read the generator's random stream and place
pods on its nodes, so the order of calls decides the cluster.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
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
        rng, f = self.rng, self.f
        app = name or f"{rng.choice(('api', 'web', 'worker', 'cache', 'cron', 'frontend', 'backend', 'svc'))}-{k}"
        if replicas is None:
            replicas = self.replica_count() if not pending else 1
            replicas = max(1, min(replicas, self.n_pods - self.pods_made))
        hash_ = self.suffix(10)
        rs = f"{app}-{hash_}"
        labels = {"app": app, "pod-template-hash": hash_}
        if pinned is None:
            pinned = not plain and rng.random() < f.pinned
        gpu = 0
        if not plain and not pinned and self.by_class["on-demand"] and rng.random() < f.gpu_nodes * 0.5:
            gpu = 1
        tolerate = not pinned and (plain or rng.random() < f.tolerate_spot)
        anti = not plain and replicas > 1 and rng.random() < f.anti_affinity
        spread = not plain and not anti and replicas > 2 and rng.random() < f.spread
        pod_aff_to: str | None = None
        if not plain and rng.random() < f.pod_affinity and self.deployment_pods:
            pod_aff_to = rng.choice(list(self.deployment_pods))
        local = not plain and rng.random() < f.local_storage
        safe_false = not plain and rng.random() < f.safe_to_evict_false
        port = 9000 + k % 500 if not plain and rng.random() < f.host_ports else None
        ceiling = not plain and not pinned and replicas >= 3 and rng.random() < f.ceiling
        if pdb is None:
            pdb = replicas > 1 and rng.random() < f.pdb
        cpu = self.cpu_request()
        mem = rng.choice(MEMORY_PER_CPU)
        containers = [self.container(app, f"registry.example.com/{ns}/{app}:1.{k % 40}.0", cpu, mem, ports=None)]
        if port is not None:
            containers[0]["ports"] = [{"containerPort": port, "hostPort": port, "protocol": "TCP"}]
        else:
            containers[0]["ports"] = [{"containerPort": 8080, "name": "http", "protocol": "TCP"}]
        if gpu:
            containers[0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        sidecar = not plain and rng.random() < 0.3
        if sidecar:
            containers.append(self.container("envoy", "envoyproxy/envoy:v1.30.1", "50m", "64Mi"))
        total_cpu = milli(cpu) + (50 if sidecar else 0)
        total_mem = to_bytes(mem) + (64 * 2**20 if sidecar else 0)
        tolerations = [
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ]
        if tolerate:
            tolerations.append(dict(SPOT_TOLERATION))
        if gpu:
            tolerations.append({"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"})
        affinity: dict[str, Any] = {}
        if anti:
            affinity["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        else:
            affinity["podAntiAffinity"] = {
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
        if not plain and self.deployment_pods and rng.random() < f.anti_affinity_other:
            avoid = rng.choice(sorted(self.deployment_pods))
            terms = affinity.setdefault("podAntiAffinity", {}).setdefault(
                "requiredDuringSchedulingIgnoredDuringExecution", []
            )
            terms.append({"labelSelector": {"matchLabels": {"app": avoid}}, "topologyKey": "kubernetes.io/hostname"})
        aff_zones: list[str] = []
        if pod_aff_to is not None:
            affinity["podAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": pod_aff_to}},
                        "topologyKey": "topology.kubernetes.io/zone",
                    }
                ]
            }
            aff_zones = sorted({z for _, z in self.deployment_pods[pod_aff_to]})
            labels = {**labels}
        spread_spec = None
        if spread:
            spread_spec = [
                {
                    "labelSelector": {"matchLabels": {"app": app}},
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                }
            ]
        node_selector = {ON_DEMAND_LABEL[0]: ON_DEMAND_LABEL[1]} if pinned else None
        volumes = None
        annotations: dict[str, str] = {}
        if local:
            volumes = [{"emptyDir": {}, "name": "scratch"}]
            if rng.random() < 0.5:
                annotations[SAFE_TO_EVICT_LOCAL] = "scratch"
        if safe_false:
            annotations[SAFE_TO_EVICT] = "false"
        if ceiling:
            if rng.random() < 0.7:
                annotations[CEILING_ANNOTATION] = str(rng.choice((50, 60, 70, 80)))
            else:
                annotations[MIN_ON_DEMAND_ANNOTATION] = str(rng.choice((1, 2)))
        priority = -100 if expendable else 0
        placed: list[tuple[str, str]] = []
        for r in range(replicas):
            zone = ZONES[r % 3] if spread else (rng.choice(aff_zones) if aff_zones else None)
            node = None
            if not pending:
                node = self.choose_node(
                    cpu=total_cpu,
                    mem=total_mem,
                    gpu=gpu,
                    spot_ok=not pinned and not gpu,
                    tainted_ok=tolerate,
                    on_demand_ok=True,
                    zone=zone,
                    app=app if anti else None,
                    port=port,
                )
            phase = "Running" if node is not None else "Pending"
            if node is not None:
                self.place(node, total_cpu, total_mem, gpu)
                if anti:
                    node.apps.add(app)
                if port is not None:
                    node.ports.add(port)
                placed.append((app, node.zone))
            pod_name = f"{rs}-{self.suffix()}"
            yield self.pod_json(
                ns=ns,
                name=pod_name,
                generate_name=f"{rs}-",
                labels=dict(labels),
                owner=("ReplicaSet", rs),
                containers=containers,
                node=node,
                tolerations=tolerations,
                annotations=dict(annotations) if annotations else None,
                affinity=affinity or None,
                node_selector=node_selector,
                volumes=volumes,
                spread=spread_spec,
                priority=priority,
                priority_class="overprovisioning" if expendable else "",
                phase=phase,
            )
        if placed:
            self.deployment_pods[app] = placed
        if pdb:
            yield self.pdb_json(ns, app, replicas, len(placed))

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
            yield {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "labels": {"topology.kubernetes.io/zone": node.zone, "topology.kubernetes.io/region": "eu-west-1"},
                    "name": pv,
                    "uid": self.next_uid(),
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
                                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [node.zone]}
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
            yield {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": ns, "uid": self.next_uid()},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "20Gi"}},
                    "storageClassName": "gp3",
                    "volumeName": pv,
                },
                "status": {"phase": "Bound"},
            }
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
