"""What the planner's tests share: hand-made nodes, pods and budgets, and :func:`planned`, which plans with
verification on and checks the plan with the independent checker of :mod:`tests.support.plan_check`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rescheduler.plan.planner import Plan, plan
from shared.config import PDB_ALL_AT_ONCE, Config
from shared.model import PDB, Node, Pod
from shared.snapshot import ClusterSnapshot
from tests.builders import ON_DEMAND, SPOT
from tests.support.plan_check import check_plan

DEFAULT = Config()


def snapshot_state(snap: ClusterSnapshot) -> dict[str, Any]:
    """What a plan must leave unchanged: each node's pods, requested resources and host ports."""
    return {
        info.name: (
            sorted(p.key for p in info.pods),
            {k: v for k, v in info.requested.items() if v},  # a key left at 0 after add+remove is no change
            sorted(info.host_ports, key=repr),
        )
        for info in snap
    }


SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}
TOLERATE_SPOT = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def node(
    name: str,
    *,
    spot: bool = False,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    zone: str = "a",
) -> Node:
    labels = {**(SPOT if spot else ON_DEMAND), "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}
    return Node.from_api(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def pod(
    name: str,
    on: str,
    *,
    ns: str = "shop",
    cpu: str = "500m",
    memory: str = "512Mi",
    app: str | None = None,
    owner: tuple[str, str] | None = ("ReplicaSet", "web-5d8f"),
    priority: int = 0,
    annotations: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    anti_affinity_to: str | None = None,
    host_port: int | None = None,
    spread: bool = False,
    ready: bool | None = None,
    phase: str = "Running",
    spec_extra: dict[str, Any] | None = None,
) -> Pod:
    """A pod bound to ``on``; ``ready=None`` writes no ``Ready`` condition (the pod then counts as not Ready),
    ``spec_extra`` adds spec fields as the API spells them."""
    labels = {"app": app or name}
    spec: dict[str, Any] = {
        "nodeName": on,
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if host_port:
        spec["containers"][0]["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if anti_affinity_to:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": anti_affinity_to}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    if spread:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": labels["app"]}},
            }
        ]
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    spec.update(spec_extra or {})
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return Pod.from_api({"metadata": meta, "spec": spec, "status": status})


def pdb(
    name: str,
    app: str,
    allowed: int,
    ns: str = "shop",
    *,
    policy: str | None = None,
    healthy: int | None = None,
    desired: int | None = None,
) -> PDB:
    """A budget over ``app`` allowing ``allowed`` disruptions; ``policy`` is ``spec.unhealthyPodEvictionPolicy``,
    ``healthy``/``desired`` set ``status.currentHealthy``/``desiredHealthy``."""
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1}
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    status: dict[str, Any] = {"disruptionsAllowed": allowed}
    if healthy is not None:
        status["currentHealthy"] = healthy
    if desired is not None:
        status["desiredHealthy"] = desired
    return PDB.from_api(
        {"apiVersion": "policy/v1", "metadata": {"name": name, "namespace": ns}, "spec": spec, "status": status}
    )


def daemonset_pod(name: str, on: str) -> Pod:
    return pod(name, on, ns="kube-system", cpu="100m", owner=("DaemonSet", "kube-proxy"))


def cluster(nodes: list[Node], pods: list[Pod], pdbs: list[PDB] | None = None, **kw: Any) -> ClusterSnapshot:
    return ClusterSnapshot(nodes, pods, pdbs=pdbs or [], **kw)


def planned(snap: ClusterSnapshot, config: Config = DEFAULT) -> Plan:
    before = snapshot_state(snap)
    result = plan(snap, config, verify=True)
    assert snapshot_state(snap) == before
    assert result.summary.verify_rejections == 0
    check_plan(snap, result, config)
    return result


ALL_AT_ONCE = replace(DEFAULT, rescheduler=replace(DEFAULT.rescheduler, pdb_rule=PDB_ALL_AT_ONCE))
