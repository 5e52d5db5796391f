"""Seeded generator of realistic clusters, written as ``kubectl get nodes,pods,pdb -A -o json`` output.

    python3 bench/cluster_gen.py --nodes 5000 --pods 150000 --seed 1 -o /tmp/cluster.json

Why it exists: the planner must be measured on clusters that look like the ones it will meet, not on
uniform toy inputs. So the objects are shaped like the API server returns them (status conditions,
default tolerations, service-account volumes, owner references, ``pod-template-hash`` labels) and the
cluster has the awkward parts real ones have:

* node pools of several sizes and zones; on-demand nodes, spot nodes with and without a spot taint,
  control-plane nodes, spot nodes being reclaimed (termination-handler taint), cordoned and NotReady;
  allocatable written in every quantity spelling kubelets use (``3920m``, ``15.89``, ``15155932Ki``,
  ``14.5Gi``, ``62.5G``);
* DaemonSet pods on every node (with the ``matchFields`` node affinity the DaemonSet controller sets);
* Deployments (ReplicaSet-owned pods) with PodDisruptionBudgets whose ``disruptionsAllowed`` follows
  from their spec, required hostname anti-affinity, zone topology spread, zone pod affinity, host
  ports, per-workload spot ceilings, disk-backed ``emptyDir`` (some annotated safe to evict);
* pods pinned to on-demand capacity by ``nodeSelector``, GPU pods on on-demand GPU nodes;
* StatefulSets with zonal PersistentVolumes, bare pods, kube-system pods with and without PDBs,
  expendable (priority -100) overprovisioning pods, finished Job pods, and optionally pending pods.

Pods are placed the way a scheduler that did not prefer spot would have left them: each replica
picks spot or on-demand at random among the nodes it may use, so on-demand nodes are partly filled
with pods that could run on spot, which is exactly what the rescheduler is for.

The output is streamed item by item (a 150,000-pod cluster never exists as one Python tree) with
kubectl's 4-space indentation by default; ``--indent 2`` is ``jq .`` style and ``--indent 0`` compact.
:func:`generate` returns the items for tests; :func:`write_list` writes any item iterable.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import orjson

__all__ = [
    "Features",
    "FULL",
    "PACKING_ONLY",
    "MILP_PROFILE",
    "DRAINABLE",
    "generate",
    "write_list",
    "ON_DEMAND_LABEL",
    "SPOT_TAINT",
]

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ON_DEMAND_LABEL = (CAPACITY_TYPE, "on-demand")
SPOT_LABEL = (CAPACITY_TYPE, "spot")
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CEILING_ANNOTATION = "spotshift.io/max-spot-percent"
MIN_ON_DEMAND_ANNOTATION = "spotshift.io/min-on-demand"
SAFE_TO_EVICT_LOCAL = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
TIMESTAMP = "2024-05-14T09:12:44Z"

# (instance type, cpus, allocatable cpu spellings, allocatable memory spellings, max pods)
INSTANCE_TYPES = (
    ("m5.large", 2, ("1930m", "1.93"), ("7548500Ki", "7.2Gi", "7371Mi"), "29"),
    ("m5.xlarge", 4, ("3920m", "3.92"), ("15155932Ki", "14.5Gi", "15.5G"), "58"),
    ("m5.2xlarge", 8, ("7910m", "7.91"), ("31792188Ki", "30310Mi", "32.5G"), "58"),
    ("m5.4xlarge", 16, ("15890m", "15.89"), ("63407956Ki", "60.5Gi", "64.9G"), "234"),
    ("m5.8xlarge", 32, ("31850m", "31.85"), ("127407956Ki", "121.5Gi", "130G"), "234"),
)
GPU_INSTANCE = ("g5.2xlarge", 8, ("7910m",), ("31792188Ki",), "58")

# Container requests as people write them: the same amount in several spellings.
CPU_REQUESTS = (
    ("10m", 3),
    ("25m", 4),
    ("50m", 8),
    ("0.05", 2),
    ("100m", 12),
    ("0.1", 4),
    ("150m", 4),
    ("200m", 6),
    ("250m", 10),
    ("0.25", 3),
    ("300m", 4),
    ("500m", 8),
    ("0.5", 4),
    ("750m", 2),
    ("1", 5),
    ("1.5", 2),
    ("2", 2),
    ("3", 1),
)
MEMORY_PER_CPU = ("64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "1.5G", "2Gi", "500M", "768Mi", "3Gi")


@dataclass(frozen=True, slots=True)
class Features:
    """Fractions of workloads (or nodes) with each awkward property; 0 turns a property off."""

    spot_fraction: float = 0.55
    """Share of worker nodes that are spot."""
    tainted_spot_pools: float = 0.4
    """Share of spot nodes with the ``spot=true:NoSchedule`` taint (only tolerating pods may go there)."""
    reclaimed: float = 0.05
    """Share of spot nodes being reclaimed, cordoned or NotReady (never targets)."""
    gpu_nodes: float = 0.01
    """Share of worker nodes that are on-demand GPU nodes."""
    tolerate_spot: float = 0.8
    anti_affinity: float = 0.15
    anti_affinity_other: float = 0.04
    """Share of Deployments that refuse to share a node with another Deployment's pods (one direction)."""
    spread: float = 0.08
    pod_affinity: float = 0.03
    pinned: float = 0.06
    """Share of Deployments pinned to on-demand; they live on a reserved third of the on-demand nodes."""
    local_storage: float = 0.03
    safe_to_evict_false: float = 0.005
    host_ports: float = 0.02
    pdb: float = 0.5
    ceiling: float = 0.05
    statefulset: float = 0.04
    bare: float = 0.005
    expendable: float = 0.02
    finished_jobs: float = 0.01
    pending: int = 0
    """Pending unschedulable pods to add (the rescheduler pauses while any exist)."""
    spot_bias: float = 0.5
    """Probability that a pod allowed on spot was scheduled onto spot."""
    fill: float = 0.62
    """Target average CPU fill of worker nodes."""


FULL = Features()
PACKING_ONLY = replace(FULL, spread=0.0, pod_affinity=0.0)
"""What the MILP comparison encodes exactly: no topology spread, no pod affinity (hostname
anti-affinity, host ports, taints, selectors, PVs, PDBs and ceilings are all kept)."""
DRAINABLE = replace(
    FULL, pinned=0.03, local_storage=0.01, safe_to_evict_false=0.0, bare=0.0, gpu_nodes=0.0, pdb=0.4, anti_affinity=0.2
)
"""Few pods that block their node, so most on-demand nodes are candidates and packing decides how many go."""
MILP_PROFILE = replace(DRAINABLE, spread=0.0, pod_affinity=0.0)
"""DRAINABLE without what the MILP does not encode (see bench/plan_quality.py)."""
MILP_PACKING = replace(MILP_PROFILE, pdb=0.05, ceiling=0.0, spot_bias=0.6, fill=0.7)
"""MILP_PROFILE with few PodDisruptionBudgets and fuller spot nodes: the outcome is decided by bin packing."""


@dataclass(slots=True)
class _Node:
    name: str
    cls: str  # "on-demand", "spot", "control-plane"
    zone: str
    cpu: int
    mem: int
    pods: int
    tainted: bool = False
    target_ok: bool = True
    gpu: int = 0
    used_cpu: int = 0
    used_mem: int = 0
    used_pods: int = 0
    used_gpu: int = 0
    apps: set[str] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)


def _milli(q: str) -> int:
    if q.endswith("m"):
        return int(q[:-1])
    return round(float(q) * 1000)


_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def _bytes(q: str) -> int:
    for suffix in ("Ki", "Mi", "Gi", "K", "M", "G"):
        if q.endswith(suffix):
            return int(float(q[: -len(suffix)]) * _MEM_UNITS[suffix])
    return int(q)


class _Gen:
    """The generation state: lean node bookkeeping plus the items produced so far (streamed out)."""

    def __init__(self, seed: int, nodes: int, pods: int, features: Features) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_nodes = nodes
        self.n_pods = pods
        self.f = features
        self.nodes: list[_Node] = []
        self.by_class: dict[str, list[_Node]] = {"on-demand": [], "spot": [], "control-plane": []}
        self.uid = 0
        self.pods_made = 0
        self.namespaces = ["kube-system", "monitoring", "logging", "ingress"]
        self.namespaces += [f"team-{n}" for n in ("shop", "payments", "search", "data", "ml", "web", "auth", "ads")]
        self.deployment_pods: dict[str, list[tuple[str, str]]] = {}  # app -> [(pod name, zone)]

    # --- helpers -----------------------------------------------------------------------------------

    def next_uid(self) -> str:
        self.uid += 1
        u = self.uid
        return f"{self.seed:08x}-{u >> 32:04x}-4{(u >> 16) & 0xFFF:03x}-8{u & 0xFFF:03x}-{u:012x}"

    def suffix(self, n: int = 5) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))

    def replica_count(self) -> int:
        """Mostly small workloads, a few big services; the mean (~8 per workload at scale) is what big
        clusters show. Capped by the cluster size so a small cluster is not one deployment."""
        r = self.rng.random()
        cap = max(2, self.n_pods // 40)
        if r < 0.45:
            n = self.rng.randint(1, 2)
        elif r < 0.85:
            n = self.rng.randint(3, 10)
        elif r < 0.97:
            n = self.rng.randint(10, 40)
        else:
            n = self.rng.randint(40, 150)
        return min(n, cap)

    def cpu_request(self) -> str:
        values, weights = zip(*CPU_REQUESTS, strict=True)
        return self.rng.choices(values, weights)[0]

    # --- nodes -------------------------------------------------------------------------------------

    def make_nodes(self, density: float) -> Iterator[dict[str, Any]]:
        rng, f = self.rng, self.f
        # Pick instance sizes so that the average node holds ~density workload pods at the target fill.
        mean_cpu = sum(_milli(v) * w for v, w in CPU_REQUESTS) / sum(w for _, w in CPU_REQUESTS) * 1.15
        want = density * mean_cpu / f.fill / 1000
        sizes = [t for t in INSTANCE_TYPES if t[1] <= max(2, want * 2.2)] or [INSTANCE_TYPES[0]]
        weights = [1.0 / (1.0 + abs(t[1] - want)) for t in sizes]
        control = 3 if self.n_nodes >= 30 else 0
        workers = self.n_nodes - control
        n_spot = round(workers * f.spot_fraction)
        n_gpu = round(workers * f.gpu_nodes) if f.gpu_nodes else 0
        for i in range(self.n_nodes):
            zone = ZONES[i % 3]
            if i < control:
                itype, cls = INSTANCE_TYPES[1], "control-plane"
            elif i < control + n_spot:
                itype, cls = rng.choices(sizes, weights)[0], "spot"
            elif i < control + n_spot + n_gpu:
                itype, cls = GPU_INSTANCE, "on-demand"
            else:
                itype, cls = rng.choices(sizes, weights)[0], "on-demand"
            yield self.node_json(i, zone, itype, cls)

    def node_json(self, i: int, zone: str, itype: tuple[Any, ...], cls: str) -> dict[str, Any]:
        rng, f = self.rng, self.f
        type_name, cpus, cpu_spellings, mem_spellings, max_pods = itype
        cpu = rng.choice(cpu_spellings)
        mem = rng.choice(mem_spellings)
        name = f"ip-10-{i // 65536}-{(i // 256) % 256}-{i % 256}.eu-west-1.compute.internal"
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/instance-type": type_name,
            "beta.kubernetes.io/os": "linux",
            "failure-domain.beta.kubernetes.io/region": "eu-west-1",
            "failure-domain.beta.kubernetes.io/zone": zone,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name.split(".")[0],
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": type_name,
            "topology.kubernetes.io/region": "eu-west-1",
            "topology.kubernetes.io/zone": zone,
        }
        taints: list[dict[str, str]] = []
        node = _Node(name, cls, zone, _milli(cpu), _bytes(mem), int(max_pods))
        unschedulable = False
        ready = True
        if cls == "control-plane":
            labels["node-role.kubernetes.io/control-plane"] = ""
            taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
            node.target_ok = False
        elif cls == "spot":
            labels[SPOT_LABEL[0]] = SPOT_LABEL[1]
            labels["karpenter.sh/nodepool"] = "spot-tainted" if rng.random() < f.tainted_spot_pools else "spot"
            if labels["karpenter.sh/nodepool"] == "spot-tainted":
                taints.append(dict(SPOT_TAINT))
                node.tainted = True
            if rng.random() < f.reclaimed:
                node.target_ok = False
                kind = rng.choice(("itn", "cordon", "notready", "autoscaler"))
                if kind == "itn":
                    taints.append({"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"})
                elif kind == "cordon":
                    unschedulable = True
                    taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
                elif kind == "notready":
                    ready = False
                    taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
                else:
                    taints.append(
                        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1715677964", "effect": "NoSchedule"}
                    )
        else:
            labels[ON_DEMAND_LABEL[0]] = ON_DEMAND_LABEL[1]
            labels["karpenter.sh/nodepool"] = "on-demand"
            if itype is GPU_INSTANCE:
                node.gpu = 1
                labels["karpenter.sh/nodepool"] = "gpu"
                taints.append({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"})
        self.nodes.append(node)
        self.by_class[cls].append(node)
        allocatable = {"cpu": cpu, "ephemeral-storage": "95551679124", "memory": mem, "pods": max_pods}
        capacity = {"cpu": str(cpus), "ephemeral-storage": "104845292Ki", "memory": mem, "pods": max_pods}
        if node.gpu:
            allocatable["nvidia.com/gpu"] = "1"
            capacity["nvidia.com/gpu"] = "1"
        spec: dict[str, Any] = {"providerID": f"aws:///{zone}/i-{self.seed:04x}{i:013x}"}
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "annotations": {
                    "alpha.kubernetes.io/provided-node-ip": f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
                "creationTimestamp": TIMESTAMP,
                "labels": labels,
                "name": name,
                "resourceVersion": str(1000 + i),
                "uid": self.next_uid(),
            },
            "spec": spec,
            "status": {
                "addresses": [
                    {"address": f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}", "type": "InternalIP"},
                    {"address": name, "type": "Hostname"},
                ],
                "allocatable": allocatable,
                "capacity": capacity,
                "conditions": [
                    _cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                    _cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                    _cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                    _cond("Ready", "True" if ready else "Unknown", "KubeletReady" if ready else "NodeStatusUnknown"),
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "containerRuntimeVersion": "containerd://1.7.11",
                    "kernelVersion": "5.10.215-203.850.amzn2.x86_64",
                    "kubeProxyVersion": "v1.29.3-eks-ae9a62a",
                    "kubeletVersion": "v1.29.3-eks-ae9a62a",
                    "operatingSystem": "linux",
                    "osImage": "Amazon Linux 2",
                },
            },
        }

    # --- pods --------------------------------------------------------------------------------------

    def pod_json(
        self,
        *,
        ns: str,
        name: str,
        labels: dict[str, str],
        owner: tuple[str, str] | None,
        containers: list[dict[str, Any]],
        node: _Node | None,
        tolerations: list[dict[str, Any]],
        annotations: dict[str, str] | None = None,
        affinity: dict[str, Any] | None = None,
        node_selector: dict[str, str] | None = None,
        volumes: list[dict[str, Any]] | None = None,
        spread: list[dict[str, Any]] | None = None,
        priority: int = 0,
        priority_class: str = "",
        phase: str = "Running",
        generate_name: str = "",
    ) -> dict[str, Any]:
        self.pods_made += 1
        meta: dict[str, Any] = {"creationTimestamp": TIMESTAMP}
        if generate_name:
            meta["generateName"] = generate_name
        meta["labels"] = labels
        meta["name"] = name
        meta["namespace"] = ns
        if annotations:
            meta["annotations"] = annotations
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": owner[0],
                    "name": owner[1],
                    "uid": f"owner-{owner[1]}",
                }
            ]
        meta["resourceVersion"] = str(500000 + self.pods_made)
        meta["uid"] = self.next_uid()
        all_volumes = list(volumes or ())
        all_volumes.append(
            {
                "name": f"kube-api-access-{self.suffix()}",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                    ],
                },
            }
        )
        spec: dict[str, Any] = {}
        if affinity:
            spec["affinity"] = affinity
        spec["containers"] = containers
        spec["dnsPolicy"] = "ClusterFirst"
        spec["enableServiceLinks"] = True
        if node is not None:
            spec["nodeName"] = node.name
        if node_selector:
            spec["nodeSelector"] = node_selector
        spec["preemptionPolicy"] = "PreemptLowerPriority"
        spec["priority"] = priority
        if priority_class:
            spec["priorityClassName"] = priority_class
        spec["restartPolicy"] = "Always"
        spec["schedulerName"] = "default-scheduler"
        spec["securityContext"] = {}
        spec["serviceAccount"] = "default"
        spec["serviceAccountName"] = "default"
        spec["terminationGracePeriodSeconds"] = 30
        spec["tolerations"] = tolerations
        if spread:
            spec["topologySpreadConstraints"] = spread
        spec["volumes"] = all_volumes
        if phase == "Pending":
            status: dict[str, Any] = {
                "conditions": [
                    {
                        "lastProbeTime": None,
                        "lastTransitionTime": TIMESTAMP,
                        "message": "0/3 nodes are available: 3 Insufficient cpu.",
                        "reason": "Unschedulable",
                        "status": "False",
                        "type": "PodScheduled",
                    }
                ],
                "phase": "Pending",
                "qosClass": "Burstable",
            }
        else:
            ok = "True" if phase == "Running" else "False"
            status = {
                "conditions": [
                    _cond("Initialized", "True"),
                    _cond("Ready", ok),
                    _cond("ContainersReady", ok),
                    _cond("PodScheduled", "True"),
                ],
                "containerStatuses": [
                    {
                        "containerID": f"containerd://{self.uid:064x}",
                        "image": c["image"],
                        "imageID": c["image"] + "@sha256:" + "ab" * 32,
                        "lastState": {},
                        "name": c["name"],
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "started": phase == "Running",
                        "state": {"running": {"startedAt": TIMESTAMP}}
                        if phase == "Running"
                        else {"terminated": {"exitCode": 0, "reason": "Completed"}},
                    }
                    for c in containers
                ],
                "hostIP": "10.0.0.1",
                "phase": phase,
                "podIP": f"10.1.{(self.pods_made // 256) % 256}.{self.pods_made % 256}",
                "qosClass": "Burstable",
                "startTime": TIMESTAMP,
            }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    def container(
        self, name: str, image: str, cpu: str, mem: str, ports: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        c: dict[str, Any] = {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "name": name,
        }
        if ports:
            c["ports"] = ports
        c["resources"] = {"limits": {"memory": mem}, "requests": {"cpu": cpu, "memory": mem}}
        c["terminationMessagePath"] = "/dev/termination-log"
        c["terminationMessagePolicy"] = "File"
        c["volumeMounts"] = [
            {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": True}
        ]
        return c

    def place(self, node: _Node, cpu: int, mem: int, gpu: int = 0) -> None:
        node.used_cpu += cpu
        node.used_mem += mem
        node.used_pods += 1
        node.used_gpu += gpu

    def fits(self, node: _Node, cpu: int, mem: int, gpu: int = 0) -> bool:
        return (
            node.used_cpu + cpu <= node.cpu
            and node.used_mem + mem <= node.mem
            and node.used_pods < node.pods
            and node.used_gpu + gpu <= node.gpu
        )

    def daemonsets(self) -> Iterator[dict[str, Any]]:
        specs = (
            ("kube-system", "kube-proxy", "100m", "64Mi"),
            ("kube-system", "aws-node", "25m", "48Mi"),
            ("monitoring", "node-exporter", "50m", "0.0625Gi"),
            ("logging", "fluent-bit", "0.1", "128Mi"),
        )
        for ns, ds, cpu, mem in specs:
            rev = self.suffix(10)
            for node in self.nodes:
                self.place(node, _milli(cpu), _bytes(mem))
                yield self.pod_json(
                    ns=ns,
                    name=f"{ds}-{self.suffix()}",
                    generate_name=f"{ds}-",
                    labels={
                        "app.kubernetes.io/name": ds,
                        "controller-revision-hash": rev,
                        "pod-template-generation": "3",
                    },
                    owner=("DaemonSet", ds),
                    containers=[self.container(ds, f"public.ecr.aws/eks/{ds}:v1.29.0", cpu, mem)],
                    node=node,
                    tolerations=[{"operator": "Exists"}],
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}
                                ]
                            }
                        }
                    },
                    priority=2000001000,
                    priority_class="system-node-critical",
                )

    def choose_node(
        self,
        *,
        cpu: int,
        mem: int,
        gpu: int,
        spot_ok: bool,
        tainted_ok: bool,
        on_demand_ok: bool,
        zone: str | None,
        app: str | None,
        port: int | None,
    ) -> _Node | None:
        rng = self.rng
        pools: list[list[_Node]] = []
        if not spot_ok and not gpu:
            od = self.by_class["on-demand"]
            reserved = od[: max(1, len(od) // 3)]
            pools = [reserved, od]
        elif spot_ok and rng.random() < self.f.spot_bias:
            pools = [self.by_class["spot"], self.by_class["on-demand"] if on_demand_ok else []]
        else:
            pools = [self.by_class["on-demand"] if on_demand_ok else [], self.by_class["spot"] if spot_ok else []]
        for pool in pools:
            if not pool:
                continue
            for _ in range(40):
                n = pool[rng.randrange(len(pool))]
                if n.cls == "spot" and n.tainted and not tainted_ok:
                    continue
                if zone is not None and n.zone != zone:
                    continue
                if app is not None and app in n.apps:
                    continue
                if port is not None and port in n.ports:
                    continue
                if bool(gpu) != bool(n.gpu):
                    continue  # GPU nodes are tainted for GPU pods only
                if self.fits(n, cpu, mem, gpu):
                    return n
        return None

    def workloads(self) -> Iterator[dict[str, Any]]:
        """Deployments, StatefulSets, bare pods and the rest, until the pod budget is used."""
        rng, f = self.rng, self.f
        yield from self.kube_system()
        k = 0
        while self.pods_made < self.n_pods - f.pending:
            k += 1
            ns = rng.choice(self.namespaces[4:])
            r = rng.random()
            if r < f.bare:
                yield from self.bare_pod(ns, k)
            elif r < f.bare + f.statefulset:
                yield from self.statefulset(ns, k)
            elif r < f.bare + f.statefulset + f.finished_jobs:
                yield from self.finished_job(ns, k)
            elif r < f.bare + f.statefulset + f.finished_jobs + f.expendable:
                yield from self.deployment("default", k, expendable=True)
            else:
                yield from self.deployment(ns, k)
        for i in range(f.pending):
            yield from self.deployment(rng.choice(self.namespaces[4:]), 100000 + i, pending=True)

    def kube_system(self) -> Iterator[dict[str, Any]]:
        # coredns has a PDB (movable); metrics-server has none (blocks its node); cluster-autoscaler is
        # pinned to on-demand capacity.
        yield from self.deployment("kube-system", 0, name="coredns", replicas=2, pdb=True, plain=True)
        yield from self.deployment("kube-system", 0, name="metrics-server", replicas=1, pdb=False, plain=True)
        yield from self.deployment("kube-system", 0, name="cluster-autoscaler", replicas=1, pdb=False, pinned=True)
        yield from self.deployment("kube-system", 0, name="ebs-csi-controller", replicas=2, pdb=True, plain=True)

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
        total_cpu = _milli(cpu) + (50 if sidecar else 0)
        total_mem = _bytes(mem) + (64 * 2**20 if sidecar else 0)
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

    def pdb_json(self, ns: str, app: str, replicas: int, healthy: int) -> dict[str, Any]:
        rng = self.rng
        kind = rng.random()
        if kind < 0.5:
            spec: dict[str, Any] = {"maxUnavailable": 1}
            desired = replicas - 1
        elif kind < 0.8:
            spec = {"minAvailable": "50%"}
            desired = (replicas + 1) // 2
        elif kind < 0.9:
            spec = {"maxUnavailable": "25%"}
            desired = replicas - max(1, replicas // 4)
        else:
            spec = {"minAvailable": replicas}  # allows no voluntary disruption at all
            desired = replicas
        spec["selector"] = {"matchLabels": {"app": app}}
        allowed = max(0, healthy - desired)
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "creationTimestamp": TIMESTAMP,
                "generation": 1,
                "name": app,
                "namespace": ns,
                "resourceVersion": str(900000 + self.uid),
                "uid": self.next_uid(),
            },
            "spec": spec,
            "status": {
                "conditions": [
                    {
                        "lastTransitionTime": TIMESTAMP,
                        "message": "",
                        "observedGeneration": 1,
                        "reason": "SufficientPods" if allowed else "InsufficientPods",
                        "status": "True" if allowed else "False",
                        "type": "DisruptionAllowed",
                    }
                ],
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "disruptionsAllowed": allowed,
                "expectedPods": replicas,
                "observedGeneration": 1,
            },
        }

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
        for r in range(replicas):
            node = self.choose_node(
                cpu=_milli(cpu),
                mem=_bytes(mem),
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
            self.place(node, _milli(cpu), _bytes(mem))
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

    def bare_pod(self, ns: str, k: int) -> Iterator[dict[str, Any]]:
        cpu = self.cpu_request()
        node = self.choose_node(
            cpu=_milli(cpu),
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
        self.place(node, _milli(cpu), 2**27)
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

    def namespace_items(self) -> Iterator[dict[str, Any]]:
        for ns in ["default", *self.namespaces]:
            yield {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"labels": {"kubernetes.io/metadata.name": ns}, "name": ns, "uid": self.next_uid()},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }


def _cond(kind: str, status: str, reason: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"lastProbeTime": None, "lastTransitionTime": TIMESTAMP, "status": status, "type": kind}
    if reason:
        c["reason"] = reason
    return c


def iter_items(seed: int, nodes: int, pods: int, features: Features = FULL) -> Iterator[dict[str, Any]]:
    """Every item of the cluster, in ``kubectl get nodes,pods,pdb`` order (nodes first), lazily."""
    gen = _Gen(seed, nodes, pods, features)
    density = max(1.0, (pods - 4 * nodes) / max(1, nodes))
    yield from gen.make_nodes(density)
    yield from gen.namespace_items()
    yield from gen.daemonsets()
    yield from gen.workloads()


def generate(seed: int, nodes: int, pods: int, features: Features = FULL) -> list[dict[str, Any]]:
    """The cluster's items as a list (for tests and small benchmarks)."""
    return list(iter_items(seed, nodes, pods, features))


def as_list(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Wrap items in a ``v1 List`` like kubectl prints."""
    return {"apiVersion": "v1", "items": list(items), "kind": "List", "metadata": {"resourceVersion": ""}}


def write_list(items: Iterable[dict[str, Any]], out: IO[bytes], indent: int = 4) -> int:
    """Stream ``items`` as a ``v1 List`` with ``indent`` spaces (kubectl: 4; 0: compact); returns the item count."""
    n = 0
    if indent == 0:
        out.write(b'{"apiVersion":"v1","items":[')
        for item in items:
            if n:
                out.write(b",")
            out.write(orjson.dumps(item))
            n += 1
        out.write(b'],"kind":"List","metadata":{"resourceVersion":""}}\n')
        return n
    pad = " " * indent
    out.write(f'{{\n{pad}"apiVersion": "v1",\n{pad}"items": ['.encode())
    inner = "\n" + pad * 2
    for item in items:
        if indent == 2:
            text = orjson.dumps(item, option=orjson.OPT_INDENT_2).decode()
        else:
            text = json.dumps(item, indent=indent, ensure_ascii=False)
        out.write(((",") if n else "").encode() + (inner + text.replace("\n", inner)).encode())
        n += 1
    out.write(
        f'\n{pad}],\n{pad}"kind": "List",\n{pad}"metadata": {{\n{pad * 2}"resourceVersion": ""\n{pad}}}\n}}\n'.encode()
    )
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=3000, help="total pods, DaemonSet pods included")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--indent", type=int, choices=(0, 2, 4), default=4)
    ap.add_argument("--packing-only", action="store_true", help="no topology spread or pod affinity")
    ap.add_argument("--pending", type=int, default=0, help="pending unschedulable pods to add")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    features = replace(PACKING_ONLY if args.packing_only else FULL, pending=args.pending)
    items = iter_items(args.seed, args.nodes, args.pods, features)
    if args.output == "-":
        write_list(items, sys.stdout.buffer, args.indent)
    else:
        with Path(args.output).open("wb") as fh:
            write_list(items, fh, args.indent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
