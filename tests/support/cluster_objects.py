"""The API objects of a generated cluster, shaped as the API server returns them (for :mod:`tests.support.cluster_gen`).

Nodes with status conditions, capacity and allocatable in the spellings kubelets use; pods with owner
references, default tolerations, service-account volumes and conditions; PodDisruptionBudgets with the status
the disruption controller would compute. :class:`Objects` is a mixin of the generator: its methods read the
generator's random stream, so the order of calls decides the cluster.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

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


@dataclass(slots=True)
class GenNode:
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


def milli(q: str) -> int:
    if q.endswith("m"):
        return int(q[:-1])
    return round(float(q) * 1000)


_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def to_bytes(q: str) -> int:
    for suffix in ("Ki", "Mi", "Gi", "K", "M", "G"):
        if q.endswith(suffix):
            return int(float(q[: -len(suffix)]) * _MEM_UNITS[suffix])
    return int(q)


def _cond(kind: str, status: str, reason: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"lastProbeTime": None, "lastTransitionTime": TIMESTAMP, "status": status, "type": kind}
    if reason:
        c["reason"] = reason
    return c


def _pod_spec_defaults() -> dict[str, Any]:
    """The pod spec fields the API server defaults, as it writes them."""
    return {
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
    }


def _node_labels(name: str, zone: str, type_name: str) -> dict[str, str]:
    """The labels EKS gives every node of an instance type in a zone of eu-west-1."""
    return {
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


def _node_status(
    name: str, ip: str, allocatable: dict[str, str], capacity: dict[str, str], ready: bool
) -> dict[str, Any]:
    """A node's status as an EKS kubelet reports it."""
    return {
        "addresses": [{"address": ip, "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
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
    }


def _owner_reference(kind: str, name: str) -> dict[str, Any]:
    """The controller reference of a generated pod to its workload."""
    return {
        "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
        "blockOwnerDeletion": True,
        "controller": True,
        "kind": kind,
        "name": name,
        "uid": f"owner-{name}",
    }


def _pending_status() -> dict[str, Any]:
    """The status of a pod kube-scheduler found no node for."""
    return {
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


class Objects:
    """JSON builders for the generator (``rng``, ``f`` (the features) and ``next_uid``/``suffix`` come from it)."""

    rng: random.Random

    def node_json(self, i: int, zone: str, itype: tuple[Any, ...], cls: str) -> dict[str, Any]:
        rng = self.rng
        type_name, cpus, cpu_spellings, mem_spellings, max_pods = itype
        cpu = rng.choice(cpu_spellings)
        mem = rng.choice(mem_spellings)
        name = f"ip-10-{i // 65536}-{(i // 256) % 256}-{i % 256}.eu-west-1.compute.internal"
        labels = _node_labels(name, zone, type_name)
        taints: list[dict[str, str]] = []
        node = GenNode(name, cls, zone, milli(cpu), to_bytes(mem), int(max_pods))
        unschedulable, ready = self._node_class(node, itype, labels, taints)
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
        ip = f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "annotations": {
                    "alpha.kubernetes.io/provided-node-ip": ip,
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
            "status": _node_status(name, ip, allocatable, capacity, ready),
        }

    def _node_class(
        self, node: GenNode, itype: tuple[Any, ...], labels: dict[str, str], taints: list[dict[str, str]]
    ) -> tuple[bool, bool]:
        """Add the labels and taints of the node's class (and, for a spot node, perhaps a reclaim) to ``labels``
        and ``taints``; (unschedulable, ready)."""
        if node.cls == "control-plane":
            labels["node-role.kubernetes.io/control-plane"] = ""
            taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
            node.target_ok = False
        elif node.cls == "spot":
            labels[SPOT_LABEL[0]] = SPOT_LABEL[1]
            labels["karpenter.sh/nodepool"] = (
                "spot-tainted" if self.rng.random() < self.f.tainted_spot_pools else "spot"
            )
            if labels["karpenter.sh/nodepool"] == "spot-tainted":
                taints.append(dict(SPOT_TAINT))
                node.tainted = True
            if self.rng.random() < self.f.reclaimed:
                node.target_ok = False
                return self._reclaim(taints)
        else:
            labels[ON_DEMAND_LABEL[0]] = ON_DEMAND_LABEL[1]
            labels["karpenter.sh/nodepool"] = "on-demand"
            if itype is GPU_INSTANCE:
                node.gpu = 1
                labels["karpenter.sh/nodepool"] = "gpu"
                taints.append({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"})
        return False, True

    def _reclaim(self, taints: list[dict[str, str]]) -> tuple[bool, bool]:
        """One of the ways a spot node is being reclaimed, added to ``taints``; (unschedulable, ready)."""
        kind = self.rng.choice(("itn", "cordon", "notready", "autoscaler"))
        if kind == "itn":
            taints.append({"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"})
        elif kind == "cordon":
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            return True, True
        elif kind == "notready":
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
            return False, False
        else:
            taints.append({"key": "ToBeDeletedByClusterAutoscaler", "value": "1715677964", "effect": "NoSchedule"})
        return False, True

    # --- pods --------------------------------------------------------------------------------------

    def pod_json(
        self,
        *,
        ns: str,
        name: str,
        labels: dict[str, str],
        owner: tuple[str, str] | None,
        containers: list[dict[str, Any]],
        node: GenNode | None,
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
            meta["ownerReferences"] = [_owner_reference(*owner)]
        meta["resourceVersion"] = str(500000 + self.pods_made)
        meta["uid"] = self.next_uid()
        all_volumes = [*(volumes or ()), self._api_access_volume()]
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
        spec.update(_pod_spec_defaults())
        spec["tolerations"] = tolerations
        if spread:
            spec["topologySpreadConstraints"] = spread
        spec["volumes"] = all_volumes
        status = _pending_status() if phase == "Pending" else self._started_status(phase, containers)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    def _api_access_volume(self) -> dict[str, Any]:
        """The projected service-account token volume the API server adds to every pod."""
        return {
            "name": f"kube-api-access-{self.suffix()}",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                ],
            },
        }

    def _started_status(self, phase: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
        """The status of a pod a kubelet started: Running, or Succeeded/Failed with its containers terminated."""
        ok = "True" if phase == "Running" else "False"
        return {
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

    def pdb_json(self, ns: str, app: str, replicas: int, healthy: int) -> dict[str, Any]:
        rng = self.rng
        kind = rng.random()
        if self.f.pdb_tight:
            if kind < 0.5:
                spec: dict[str, Any] = {"maxUnavailable": 1}
            else:
                spec = {"minAvailable": replicas - 1}
            desired = replicas - 1
        elif kind < 0.5:
            spec = {"maxUnavailable": 1}
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
