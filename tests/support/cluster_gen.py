"""Seeded generator of realistic clusters, written as ``kubectl get nodes,pods,pdb -A -o json`` output.

    python3 -m tests.support.cluster_gen --nodes 5000 --pods 150000 --seed 1 -o /tmp/cluster.json

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import orjson

from tests.support.cluster_objects import (
    CPU_REQUESTS,
    GPU_INSTANCE,
    INSTANCE_TYPES,
    ON_DEMAND_LABEL,
    SPOT_TAINT,
    ZONES,
    GenNode,
    Objects,
    milli,
    to_bytes,
)
from tests.support.cluster_workloads import Workloads

__all__ = [
    "Features",
    "FULL",
    "PACKING_ONLY",
    "MILP_PROFILE",
    "MILP_PACKING",
    "PDB_HEAVY",
    "DRAINABLE",
    "generate",
    "write_list",
    "ON_DEMAND_LABEL",
    "SPOT_TAINT",
]


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
    """Share of multi-replica Deployments with a PodDisruptionBudget."""
    pdb_tight: bool = False
    """Budgets are only ``maxUnavailable: 1`` or ``minAvailable: N-1`` (one disruption at a time), the usual
    production setting; otherwise a mix that includes percentages and budgets allowing none."""
    statefulset_pdb: float = 0.0
    """Share of multi-replica StatefulSets with a PodDisruptionBudget."""
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
PDB_HEAVY = replace(MILP_PROFILE, pdb=0.85, pdb_tight=True, statefulset_pdb=0.85)
"""MILP_PROFILE where most multi-replica workloads (well over 70%) have a budget allowing one disruption
at a time (``maxUnavailable: 1`` or ``minAvailable: N-1``), as production clusters usually do: nodes holding
several pods of one budget are the rule, so the PodDisruptionBudget rule decides what drains."""


PROFILES = {
    "FULL": FULL,
    "PACKING_ONLY": PACKING_ONLY,
    "DRAINABLE": DRAINABLE,
    "MILP_PROFILE": MILP_PROFILE,
    "MILP_PACKING": MILP_PACKING,
    "PDB_HEAVY": PDB_HEAVY,
}
"""The profiles by name (``--profile``)."""


class _Gen(Objects, Workloads):
    """The generation state: lean node bookkeeping plus the items produced so far (streamed out)."""

    def __init__(self, seed: int, nodes: int, pods: int, features: Features) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_nodes = nodes
        self.n_pods = pods
        self.f = features
        self.nodes: list[GenNode] = []
        self.by_class: dict[str, list[GenNode]] = {"on-demand": [], "spot": [], "control-plane": []}
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
        mean_cpu = sum(milli(v) * w for v, w in CPU_REQUESTS) / sum(w for _, w in CPU_REQUESTS) * 1.15
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

    def place(self, node: GenNode, cpu: int, mem: int, gpu: int = 0) -> None:
        node.used_cpu += cpu
        node.used_mem += mem
        node.used_pods += 1
        node.used_gpu += gpu

    def fits(self, node: GenNode, cpu: int, mem: int, gpu: int = 0) -> bool:
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
                self.place(node, milli(cpu), to_bytes(mem))
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
    ) -> GenNode | None:
        rng = self.rng
        pools: list[list[GenNode]] = []
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

    def namespace_items(self) -> Iterator[dict[str, Any]]:
        for ns in ["default", *self.namespaces]:
            yield {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"labels": {"kubernetes.io/metadata.name": ns}, "name": ns, "uid": self.next_uid()},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }


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
    ap.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="FULL",
        help="the features' profile (--packing-only is PACKING_ONLY)",
    )
    ap.add_argument("--pending", type=int, default=0, help="pending unschedulable pods to add")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args(argv)
    features = replace(PACKING_ONLY if args.packing_only else PROFILES[args.profile], pending=args.pending)
    items = iter_items(args.seed, args.nodes, args.pods, features)
    if args.output == "-":
        write_list(items, sys.stdout.buffer, args.indent)
    else:
        with Path(args.output).open("wb") as fh:
            write_list(items, fh, args.indent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
