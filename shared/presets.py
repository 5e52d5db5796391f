"""Provider presets for spot nodes, and the control-plane selectors: the built-in node-class tables.

Data only, so that the configuration schema (:mod:`shared.config`, which validates preset names and checks
that an on-demand selector does not select a spot label) and the classifier (:mod:`shared.classes`, which
compiles them) both read the same tables without importing each other.

Provider presets, as each provider documents its nodes (the spot label; the taint it puts on spot nodes):

* ``karpenter``: ``karpenter.sh/capacity-type=spot``; no taint (taints come from the NodePool, if any).
* ``eks`` (managed node groups): ``eks.amazonaws.com/capacityType=SPOT``; no taint unless the node group
  asks for one.
* ``gke-spot``: ``cloud.google.com/gke-spot=true``; ``cloud.google.com/gke-spot=true:NoSchedule`` on
  Autopilot, and on Standard when the node pool is created with it (GKE recommends it).
* ``gke-preemptible``: ``cloud.google.com/gke-preemptible=true``;
  ``cloud.google.com/gke-preemptible=true:NoSchedule`` when configured (GKE recommends it).
* ``aks``: ``kubernetes.azure.com/scalesetpriority=spot``;
  ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule``, always added by AKS.
* ``spot-worker``: ``node-role.kubernetes.io/spot-worker`` with any value (pusher/k8s-spot-rescheduler's
  convention); no taint (that convention taints the on-demand nodes ``PreferNoSchedule`` instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from shared.model import NO_SCHEDULE, Taint
from shared.selectors import Selector

__all__ = ["Preset", "PRESETS", "PRESET_NAMES", "CONTROL_PLANE_SELECTORS"]


@dataclass(frozen=True, slots=True)
class Preset:
    """A provider's spot label and the taint it puts on spot nodes (``None``: the provider adds none)."""

    name: str
    selector: Selector
    taint: Taint | None
    provider: str


def _preset(name: str, selector: str, taint: Taint | None, provider: str) -> tuple[str, Preset]:
    return name, Preset(name, Selector.parse(selector), taint, provider)


PRESETS: Mapping[str, Preset] = MappingProxyType(
    dict(
        (
            _preset("karpenter", "karpenter.sh/capacity-type=spot", None, "Karpenter"),
            _preset("eks", "eks.amazonaws.com/capacityType=SPOT", None, "EKS managed node groups"),
            _preset(
                "gke-spot",
                "cloud.google.com/gke-spot=true",
                Taint("cloud.google.com/gke-spot", "true", NO_SCHEDULE),
                "GKE Spot VMs",
            ),
            _preset(
                "gke-preemptible",
                "cloud.google.com/gke-preemptible=true",
                Taint("cloud.google.com/gke-preemptible", "true", NO_SCHEDULE),
                "GKE preemptible VMs",
            ),
            _preset(
                "aks",
                "kubernetes.azure.com/scalesetpriority=spot",
                Taint("kubernetes.azure.com/scalesetpriority", "spot", NO_SCHEDULE),
                "AKS spot node pools",
            ),
            _preset("spot-worker", "node-role.kubernetes.io/spot-worker", None, "pusher/k8s-spot-rescheduler labels"),
        )
    )
)
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)

CONTROL_PLANE_SELECTORS: tuple[Selector, ...] = (
    Selector.parse("node-role.kubernetes.io/control-plane"),
    Selector.parse("node-role.kubernetes.io/master"),
)
