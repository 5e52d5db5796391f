"""Fit checks per second for a realistic pod x node, with and without inter-pod anti-affinity.

    python3 bench/predicates.py [--nodes 200] [--pods-per-node 20] [--repeat 7]

"Realistic": a node as a managed node group reports it (15 labels, a spot taint, allocatable with
ephemeral-storage and pods, Ready), a Deployment pod as the API server returns it after the webhook
(two containers with requests, the default not-ready/unreachable tolerations plus the spot ones,
a nodeSelector, a preferred and a required node affinity, a container port). Each figure is the
median of ``--repeat`` timed rounds; a round checks one pod against every node of the cluster, as one
kube-scheduler cycle does, including the once-per-cycle cross-node aggregation. The machine is shared,
so medians.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import replace

from shared.fit import fits
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


def node_labels(i: int, spot: bool, hostname: str) -> dict[str, str]:
    """The labels an EKS managed node group puts on node ``i`` (shared with bench/extender_bench.py)."""
    zone = ZONES[i % 3]
    return {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": hostname,
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/instance-type": "m5.2xlarge",
        "node.kubernetes.io/instance-type": "m5.2xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": "eu-west-1",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "eks.amazonaws.com/nodegroup": "spot-a" if spot else "od-a",
        "eks.amazonaws.com/capacityType": "SPOT" if spot else "ON_DEMAND",
        "eks.amazonaws.com/nodegroup-image": "ami-0123456789abcdef0",
        "team": "platform",
    }


def node_json(i: int) -> dict:
    spot = i % 2 == 0
    zone = ZONES[i % 3]
    labels = node_labels(i, spot, f"ip-10-0-{i // 250}-{i % 250}")
    taints = [{"key": "spotshift.io/spot", "value": "true", "effect": "NoSchedule"}] if spot else []
    return {
        "metadata": {"name": f"node-{i}", "labels": labels, "uid": f"uid-node-{i}"},
        "spec": {"taints": taints, "providerID": f"aws:///{zone}/i-{i:017x}"},
        "status": {
            "allocatable": {"cpu": "7910m", "memory": "31792188Ki", "ephemeral-storage": "95551679124", "pods": "58"},
            "capacity": {"cpu": "8", "memory": "32475452Ki", "ephemeral-storage": "104845292Ki", "pods": "58"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "PIDPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def pod_json(name: str, app: str, node: str = "", anti_affinity: bool = False) -> dict:
    affinity: dict = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}
                        ]
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 80,
                    "preference": {
                        "matchExpressions": [
                            {"key": "eks.amazonaws.com/capacityType", "operator": "In", "values": ["SPOT"]}
                        ]
                    },
                }
            ],
        }
    }
    if anti_affinity:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b6d", "tier": "web"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{app}-5d8f7c9b6d", "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": affinity,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {"key": "spotshift.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"key": "eks.amazonaws.com/capacityType", "operator": "Equal", "value": "SPOT", "effect": "NoSchedule"},
            ],
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                },
                {"name": "proxy", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}},
            ],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def build(nodes: int, pods_per_node: int, anti_affinity: bool) -> tuple[ClusterSnapshot, Pod]:
    node_objs = [Node.from_api(node_json(i)) for i in range(nodes)]
    pods = []
    for i in range(nodes):
        for j in range(pods_per_node):
            app = f"app-{(i * pods_per_node + j) % 50}"
            pods.append(Pod.from_api(pod_json(f"p-{i}-{j}", app, f"node-{i}", anti_affinity and j % 5 == 0)))
    snap = ClusterSnapshot(node_objs, pods)
    # With anti-affinity the incoming pod is one more replica of app-7: nodes already running an
    # app-7 replica (or a pod whose own anti-affinity term matches app-7) must be rejected.
    incoming = Pod.from_api(pod_json("incoming", "app-7" if anti_affinity else "app-new", anti_affinity=anti_affinity))
    return snap, incoming


def measure(snap: ClusterSnapshot, pod: Pod, repeat: int) -> tuple[float, int]:
    infos = list(snap)
    fitting = sum(1 for ni in infos if not fits(pod, ni, snap))
    rates = []
    gc.disable()
    try:
        for _ in range(repeat):
            rounds = 0
            start = time.perf_counter()
            while True:
                # A fresh Pod object per round is a new scheduling cycle: the cross-node aggregates
                # (kube-scheduler's PreFilter) are recomputed once, then every node is checked.
                cycle_pod = replace(pod)
                for ni in infos:
                    fits(cycle_pod, ni, snap)
                rounds += 1
                elapsed = time.perf_counter() - start
                if elapsed >= 0.3:
                    break
            rates.append(rounds * len(infos) / elapsed)
    finally:
        gc.enable()
    return statistics.median(rates), fitting


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"cluster: {args.nodes} nodes x {args.pods_per_node} pods, half spot (tainted), {args.repeat} rounds, median")
    for label, anti in (("no inter-pod affinity", False), ("required anti-affinity (1 in 5 pods)", True)):
        snap, pod = build(args.nodes, args.pods_per_node, anti)
        rate, fitting = measure(snap, pod, args.repeat)
        print(f"  {label:40s} {rate:12,.0f} fit checks/s   ({fitting}/{len(snap)} nodes fit)")


if __name__ == "__main__":
    main()
