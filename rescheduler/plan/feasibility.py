"""Which spot targets a pod could ever use: the filters that do not depend on what runs where.

Taints, node affinity and selectors, readiness, ``spec.unschedulable``, extended resources and volumes (zones,
PV node affinity, StorageClass topologies) decide the same for every spot node with the same labels, taints
and extended resources. Targets are grouped by those (ignoring labels nearly unique per node, such as the
hostname, unless a pod refers to one), each group is checked once per pod constraint signature, and the
answer is kept for the whole plan: at 5,000 nodes most pods then cost a few dictionary look-ups, not a scan
of every spot node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from shared.fit_reasons import ERR_INSUFFICIENT
from shared.model import Pod
from shared.nodeaffinity import check_node_affinity
from shared.nodestate import check_ready, check_unschedulable
from shared.resources import is_scalar_resource
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT, Switches
from shared.taints import check_taints
from shared.volumes import check_volumes, unbound_claims

__all__ = ["Feasible", "StaticFilter", "PLAIN_RESOURCES"]

PLAIN_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})
_ZONE_KEYS = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)


@dataclass(frozen=True, slots=True)
class Feasible:
    """The answer for one pod: the targets passing the static filters (indices, ascending), the static
    reasons of the others (counted), and the groups the targets make up (``None`` when the pod was checked
    node by node)."""

    targets: tuple[int, ...]
    why_not: Counter[str]
    groups: tuple[int, ...] | None


def _has_claims(pod: Pod) -> bool:
    for v in pod.volumes:
        if v.kind in ("persistentVolumeClaim", "ephemeral"):
            return True
    return False


class StaticFilter:
    """The spot targets of one plan, grouped by what the static filters read, and the answers per pod; the
    reasons are worded as the cluster's release words them (``switches``)."""

    def __init__(self, snapshot: ClusterSnapshot, targets: Sequence[NodeInfo], *, switches: Switches = CURRENT) -> None:
        self.snapshot = snapshot
        self.targets = targets
        self.switches = switches
        n = len(targets)
        values: dict[str, set[str]] = {}
        for info in targets:
            for k, v in info.node.labels.items():
                values.setdefault(k, set()).add(v)
        limit = max(8, n // 4)
        self.volatile = frozenset(k for k, vs in values.items() if len(vs) > limit) | {"kubernetes.io/hostname"}
        groups: dict[Hashable, list[int]] = {}
        for i, info in enumerate(targets):
            node = info.node
            key = (
                frozenset((k, v) for k, v in node.labels.items() if k not in self.volatile),
                node.taints,
                frozenset((k, v) for k, v in node.allocatable.items() if k not in PLAIN_RESOURCES),
            )
            groups.setdefault(key, []).append(i)
        self.groups: list[list[int]] = list(groups.values())
        self.group_of = [0] * n
        for g, members in enumerate(self.groups):
            for i in members:
                self.group_of[i] = g
        self.group_targets = [tuple(members) for members in self.groups]
        """Each group's members as one tuple, handed out again and again (:meth:`Simulation.sorted_free`)."""
        self._answers: dict[Hashable, Feasible] = {}
        self._by_pod: dict[int, tuple[Pod, Feasible]] = {}

    def _static_reason(self, pod: Pod, info: NodeInfo, extended: tuple[tuple[str, int], ...]) -> str | None:
        """The first failing filter that does not depend on what runs where (in ``fits`` order), as text.

        ``extended`` are the pod's requests other than cpu, memory and pods: a node whose allocatable is
        below one can never fit it, which spares scanning such nodes one by one (GPU pods).
        """
        node = info.node
        r = (
            check_ready(node)
            or check_unschedulable(pod, node)
            or check_taints(pod, node, switches=self.switches)
            or check_node_affinity(pod, node)
        )
        if r is not None:
            return r.message
        for name, want in extended:
            if want > info.allocatable(name):
                return ERR_INSUFFICIENT.format(resource=name)
        if pod.volumes:
            r = check_volumes(pod, node, self.snapshot, switches=self.switches)
            if r is not None:
                return r.message
        return None

    def _per_node(self, pod: Pod) -> bool:
        """Whether the pod's static constraints may tell apart nodes of one group (which share every
        label but the volatile ones, like the hostname): matchFields, a selector on a volatile label, a
        bound volume whose PV's node affinity or zone label is about one, or an unbound claim placed on one
        node, with existing PVs it could bind to, or whose StorageClass's allowed topologies are about a
        volatile label."""
        volatile = self.volatile
        snap = self.snapshot
        for v in pod.volumes:
            if v.kind == "persistentVolumeClaim":
                claim = v.claim_name
            elif v.kind == "ephemeral":
                claim = f"{pod.name}-{v.name}"
            else:
                continue
            if not _ZONE_KEYS.isdisjoint(volatile):
                return True
            pvc = snap.pvcs.get(f"{pod.namespace}/{claim}")
            pv = snap.pvs.get(pvc.volume_name) if pvc is not None and pvc.volume_name else None
            if pv is not None and pv.node_affinity is not None:
                for term in pv.node_affinity.terms:
                    if term.fields or any(r.key in volatile for r in term.expressions):
                        return True
        for waiting in unbound_claims(pod, snap).waiting:
            if waiting.claim.selected_node or waiting.volumes:  # a node name, or PVs' (often per-node) affinity
                return True
            for topology in waiting.storage_class.allowed_topologies:
                if any(key in volatile for key, _ in topology):
                    return True
        for k in pod.node_selector:
            if k in volatile:
                return True
        req = pod.required_affinity
        if req is not None:
            for term in req.terms:
                if term.fields:
                    return True
                for r in term.expressions:
                    if r.key in volatile:
                        return True
        return False

    def feasible(self, pod: Pod) -> Feasible:
        """The targets passing the static filters for ``pod`` (kept per pod constraint signature, and per pod
        object: every pass asks again about the same pods)."""
        seen = self._by_pod.get(id(pod))
        if seen is not None and seen[0] is pod:
            return seen[1]
        answer = self._feasible(pod)
        self._by_pod[id(pod)] = (pod, answer)  # the pod is kept, so its id is not reused meanwhile
        return answer

    def _feasible(self, pod: Pod) -> Feasible:
        per_node = self._per_node(pod)
        extended = tuple(
            sorted(
                (k, v) for k, v in pod.requests.items() if v > 0 and k not in PLAIN_RESOURCES and is_scalar_resource(k)
            )
        )
        key = (
            pod.tolerations,
            tuple(sorted(pod.node_selector.items())),
            pod.required_affinity,
            extended,
            (pod.namespace, pod.name, pod.volumes) if per_node or _has_claims(pod) else None,
        )
        hit = self._answers.get(key)
        if hit is not None:
            return hit
        ok: list[int] = []
        why: Counter[str] = Counter()
        targets = self.targets
        groups: list[int] = []
        for g, members in enumerate(self.groups):
            if per_node:
                for i in members:
                    r = self._static_reason(pod, targets[i], extended)
                    if r is None:
                        ok.append(i)
                    else:
                        why[r] += 1
            else:
                r = self._static_reason(pod, targets[members[0]], extended)
                if r is None:
                    ok.extend(members)
                    groups.append(g)
                else:
                    why[r] += len(members)
        result = Feasible(tuple(sorted(ok)), why, None if per_node else tuple(groups))
        self._answers[key] = result
        return result
