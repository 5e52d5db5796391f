"""Bound persistent volumes: the node must satisfy the PV's node affinity and sit in the PV's zone/region.

Upstream, in kube-scheduler's Filter order:

1. VolumeBinding (``pkg/scheduler/framework/plugins/volumebinding/binder.go`` ``checkBoundClaims``): every
   bound claim's PV must pass ``component-helpers/storage/volume`` ``CheckNodeAffinity(pv, node.Labels)``.
   That check builds a node from the labels alone, so a PV term's ``matchFields`` is not evaluated. Claims of
   ``persistentVolumeClaim`` volumes and of generic ``ephemeral`` volumes (claim ``<pod>-<volume>``,
   ``ephemeral.VolumeClaimName``) count.
2. VolumeZone (``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``): for ``persistentVolumeClaim``
   volumes only, every zone/region label of the bound PV (``failure-domain.beta.kubernetes.io/zone|region``,
   ``topology.kubernetes.io/zone|region``) must be matched by the node's label of the same key, or, for a beta
   key the node lacks, by its GA twin. The PV value may be a ``__``-separated set of zones
   (``volumehelpers.LabelZonesToSet``; a value with an empty member is ignored). A node with none of the four
   labels accepts every volume (single-zone clusters often leave them off).

The snapshot is what the rescheduler/extender watch. A claim or PV it does not hold, or an unbound claim
(``WaitForFirstConsumer``), sets no constraint here: upstream would look it up or bind it, we cannot, and
refusing every node for a pod whose volume we never loaded would be worse than trusting the scheduler.
Both reasons are ``UnschedulableAndUnresolvable``.
"""

from __future__ import annotations

from functools import lru_cache

from shared.model import Node, PersistentVolume, Pod, Volume
from shared.reasons import ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_ZONE, Reason
from shared.snapshot import ClusterSnapshot

__all__ = [
    "LABEL_TOPOLOGY_ZONE",
    "LABEL_TOPOLOGY_REGION",
    "LABEL_FAILURE_DOMAIN_BETA_ZONE",
    "LABEL_FAILURE_DOMAIN_BETA_REGION",
    "label_zones_to_set",
    "check_volumes",
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
_ZONE_CONFLICT = Reason(ERR_VOLUME_ZONE, ERR_VOLUME_ZONE, True)


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


def check_volumes(pod: Pod, node: Node, snapshot: ClusterSnapshot) -> Reason | None:
    """VolumeBinding (bound PVs' node affinity) then VolumeZone; ``None`` if the node suits every known PV.

    Pods whose volumes are all configMaps, secrets, projected tokens and the like return at once.
    """
    volumes = pod.volumes
    if not volumes or not snapshot.pvcs:
        return None
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
            return _NODE_CONFLICT
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
