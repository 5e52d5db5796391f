"""Persistent volumes: the node must suit the pod's bound volumes, and the volumes its unbound claims will get.

Upstream, in kube-scheduler's order (Kubernetes 1.20):

1. VolumeBinding's PreFilter (``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``, with
   ``GetPodVolumes`` of ``pkg/controller/volume/scheduling/scheduler_binder.go``): a claim without a volume
   whose StorageClass does not wait for its first consumer (``volumeBindingMode: Immediate``, no class, or a
   class that does not exist) must be bound by the PersistentVolume controller first, so no node fits:
   "pod has unbound immediate PersistentVolumeClaims".
2. VolumeBinding's Filter (``FindPodVolumes``):

   a. every bound claim's PV must pass ``component-helpers/storage/volume`` ``CheckNodeAffinity(pv,
      node.Labels)`` (``checkBoundClaims``). That check builds a node from the labels alone, so a PV term's
      ``matchFields`` is not evaluated;
   b. every claim waiting for its first consumer must be satisfiable on the node: one the scheduler already
      placed (annotation ``volume.kubernetes.io/selected-node``) only on that node; any other by an existing
      PV of its class, not bound to another claim, whose node affinity the node matches
      (``findMatchingVolumes``), or else by a volume to provision, only where the class can provision (a
      ``provisioner`` other than ``kubernetes.io/no-provisioner``) and its ``allowedTopologies`` match the
      node's labels (``checkVolumeProvisions``). Otherwise "node(s) didn't find available persistent volumes
      to bind".

   Claims of ``persistentVolumeClaim`` volumes and of generic ``ephemeral`` volumes (claim
   ``<pod>-<volume>``, ``ephemeral.VolumeClaimName``) count.
3. VolumeZone (``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``): for ``persistentVolumeClaim``
   volumes only, every zone/region label of the bound PV (``failure-domain.beta.kubernetes.io/zone|region``,
   ``topology.kubernetes.io/zone|region``) must be matched by the node's label of the same key, or, for a beta
   key the node lacks, by its GA twin. The PV value may be a ``__``-separated set of zones
   (``volumehelpers.LabelZonesToSet``; a value with an empty member is ignored). A node with none of the four
   labels accepts every volume (single-zone clusters often leave them off).

The snapshot is what the rescheduler watches (PVs, PVCs, StorageClasses). A claim or PV it does not hold sets
no constraint: upstream would look it up, we cannot, and refusing every node for a pod whose volume we never
loaded would be worse than trusting the scheduler. For the same reason an unbound claim sets no constraint
when the snapshot holds no StorageClass at all (a snapshot file listed without ``storageclass``). Matching an
existing PV compares its class, claim and node affinity only: the lean views hold no capacity, access modes,
volume mode, phase or claim selector, so a PV that is too small still counts (the optimistic side: the
scheduler, which compares them all, has the last word). Every reason is ``UnschedulableAndUnresolvable``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from shared.fit_reasons import (
    ERR_UNBOUND_IMMEDIATE_CLAIMS,
    ERR_VOLUME_BIND_CONFLICT,
    ERR_VOLUME_NODE_AFFINITY,
    ERR_VOLUME_NODE_AFFINITY_CONFLICT,
    ERR_VOLUME_ZONE,
    Reason,
)
from shared.memo import SnapshotMemo
from shared.model import Node, PersistentVolume, PersistentVolumeClaim, Pod, Volume
from shared.snapshot import ClusterSnapshot
from shared.storage import StorageClass
from shared.switches import CURRENT, Switches

__all__ = [
    "LABEL_TOPOLOGY_ZONE",
    "LABEL_TOPOLOGY_REGION",
    "LABEL_FAILURE_DOMAIN_BETA_ZONE",
    "LABEL_FAILURE_DOMAIN_BETA_REGION",
    "label_zones_to_set",
    "check_volumes",
    "UnboundClaims",
    "WaitingClaim",
    "unbound_claims",
]

LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
LABEL_TOPOLOGY_REGION = "topology.kubernetes.io/region"
LABEL_FAILURE_DOMAIN_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_FAILURE_DOMAIN_BETA_REGION = "failure-domain.beta.kubernetes.io/region"

# volume_zone.go topologyLabels, in upstream order, and translateToGALabel.
_TOPOLOGY_LABELS = (
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
)
_GA_LABEL = {
    LABEL_FAILURE_DOMAIN_BETA_ZONE: LABEL_TOPOLOGY_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION: LABEL_TOPOLOGY_REGION,
}
_MULTI_ZONE_DELIMITER = "__"  # cloud-provider/volume LabelMultiZoneDelimiter

_PVC, _EPHEMERAL = "persistentVolumeClaim", "ephemeral"
_NODE_CONFLICT = Reason(ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_NODE_AFFINITY, True)
_NODE_CONFLICT_BEFORE_V1_33 = Reason(ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_NODE_AFFINITY_CONFLICT, True)
_ZONE_CONFLICT = Reason(ERR_VOLUME_ZONE, ERR_VOLUME_ZONE, True)
_UNBOUND_IMMEDIATE = Reason(ERR_UNBOUND_IMMEDIATE_CLAIMS, ERR_UNBOUND_IMMEDIATE_CLAIMS, True)
_BIND_CONFLICT = Reason(ERR_VOLUME_BIND_CONFLICT, ERR_VOLUME_BIND_CONFLICT, True)


@lru_cache(maxsize=4096)
def label_zones_to_set(value: str) -> frozenset[str] | None:
    """``volumehelpers.LabelZonesToSet``: split on ``__``, trim; ``None`` if any member is empty."""
    zones = []
    for part in value.split(_MULTI_ZONE_DELIMITER):
        zone = part.strip()
        if not zone:
            return None
        zones.append(zone)
    return frozenset(zones)


def _claim_name(pod: Pod, vol: Volume) -> str:
    if vol.kind == _PVC:
        return vol.claim_name
    if vol.kind == _EPHEMERAL:
        return f"{pod.name}-{vol.name}"
    return ""


def _bound_pv(pod: Pod, claim: str, snapshot: ClusterSnapshot) -> PersistentVolume | None:
    if not claim:
        return None
    pvc = snapshot.pvcs.get(f"{pod.namespace}/{claim}")
    if pvc is None or not pvc.volume_name:
        return None
    return snapshot.pvs.get(pvc.volume_name)


class WaitingClaim(NamedTuple):
    """An unbound claim waiting for its first consumer, its class, and the existing PVs it could bind to."""

    claim: PersistentVolumeClaim
    storage_class: StorageClass
    volumes: tuple[PersistentVolume, ...]


class UnboundClaims(NamedTuple):
    """A pod's claims without a volume (``GetPodVolumes``): whether one of them does not wait for its first
    consumer (``unboundClaimsImmediate``), and those that do (``claimsToBind``)."""

    immediate: bool
    waiting: tuple[WaitingClaim, ...]


_NONE_UNBOUND = UnboundClaims(False, ())
_UNBOUND_MEMO: SnapshotMemo[Pod, UnboundClaims] = SnapshotMemo()


def unbound_claims(pod: Pod, snapshot: ClusterSnapshot) -> UnboundClaims:
    """The pod's unbound claims by how they bind; neither kind when the snapshot holds no StorageClass
    (nothing is known of how unbound claims bind). A claim the snapshot does not hold is left out.
    Computed once per pod and snapshot version (PreFilter's share of the work)."""
    if not snapshot.storage_classes or not pod.volumes:
        return _NONE_UNBOUND
    return _UNBOUND_MEMO.lookup(snapshot, pod, _unbound_claims)


def _unbound_claims(pod: Pod, snapshot: ClusterSnapshot) -> UnboundClaims:
    classes = snapshot.storage_classes
    waiting: list[WaitingClaim] = []
    for vol in pod.volumes:
        claim = _claim_name(pod, vol)
        if not claim:
            continue
        pvc = snapshot.pvcs.get(f"{pod.namespace}/{claim}")
        if pvc is None or pvc.volume_name:
            continue
        cls = classes.get(pvc.storage_class) if pvc.storage_class else None
        if cls is None or not cls.wait_for_first_consumer:
            return UnboundClaims(True, ())
        key = pvc.key
        volumes = tuple(
            pv
            for pv in snapshot.pvs.values()
            if pv.storage_class == pvc.storage_class and (not pv.claim or pv.claim == key)
        )
        waiting.append(WaitingClaim(pvc, cls, volumes))
    return UnboundClaims(False, tuple(waiting)) if waiting else _NONE_UNBOUND


def _satisfiable(w: WaitingClaim, node: Node) -> bool:
    """Whether the node can satisfy a claim waiting for its first consumer (``FindPodVolumes``' unbound part):
    a claim already placed only on its node; otherwise an existing PV of its class whose node affinity the
    node matches (``findMatchingVolumes``), or a volume the class provisions there (``checkVolumeProvisions``)."""
    cls = w.storage_class
    labels = node.labels
    if w.claim.selected_node:
        return w.claim.selected_node == node.name and cls.provisions and cls.allows(labels)
    for pv in w.volumes:
        if pv.node_affinity is None or pv.node_affinity.matches("", labels):
            return True
    return cls.provisions and cls.allows(labels)


def _zone_conflict(pv: PersistentVolume, node: Node) -> bool:
    pv_labels = pv.labels
    node_labels = node.labels
    for key in _TOPOLOGY_LABELS:
        value = pv_labels.get(key)
        if value is None:
            continue
        zones = label_zones_to_set(value)
        if zones is None:  # upstream logs and ignores a malformed label
            continue
        actual = node_labels.get(key)
        if actual is None:
            actual = node_labels.get(_GA_LABEL.get(key, key))
        if actual is None or actual not in zones:
            return True
    return False


def check_volumes(pod: Pod, node: Node, snapshot: ClusterSnapshot, *, switches: Switches = CURRENT) -> Reason | None:
    """VolumeBinding (unbound immediate claims, bound PVs' node affinity, claims waiting for their first
    consumer) then VolumeZone; ``None`` if the node suits every known volume and claim. A bound PV's node
    affinity conflict is worded as the cluster's release words it (``switches.volume_reason_names_persistent_volume``).

    Pods whose volumes are all configMaps, secrets, projected tokens and the like return at once.
    """
    volumes = pod.volumes
    if not volumes or not snapshot.pvcs:
        return None
    unbound = unbound_claims(pod, snapshot)
    if unbound.immediate:
        return _UNBOUND_IMMEDIATE
    node_labels = node.labels
    any_pvc = False
    for vol in volumes:
        kind = vol.kind
        if kind == _PVC:
            any_pvc = True
        elif kind != _EPHEMERAL:
            continue
        pv = _bound_pv(pod, _claim_name(pod, vol), snapshot)
        if pv is not None and pv.node_affinity is not None and not pv.node_affinity.matches("", node_labels):
            return _NODE_CONFLICT if switches.volume_reason_names_persistent_volume else _NODE_CONFLICT_BEFORE_V1_33
    for waiting in unbound.waiting:
        if not _satisfiable(waiting, node):
            return _BIND_CONFLICT
    if not any_pvc:
        return None
    for key in _TOPOLOGY_LABELS:
        if key in node_labels:
            break
    else:
        return None  # a node with no zone/region label accepts every volume
    for vol in volumes:
        if vol.kind == _PVC:
            pv = _bound_pv(pod, vol.claim_name, snapshot)
            if pv is not None and _zone_conflict(pv, node):
                return _ZONE_CONFLICT
    return None
