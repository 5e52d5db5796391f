"""StorageClasses: how an unbound PersistentVolumeClaim gets its volume, and where that volume may be.

Only what kube-scheduler's VolumeBinding plugin reads of a class (Kubernetes 1.20,
``pkg/controller/volume/scheduling/scheduler_binder.go``):

* ``volumeBindingMode``: ``WaitForFirstConsumer`` claims are bound when their pod is scheduled, so they
  constrain the node; ``Immediate`` ones (the API server's default, ``pkg/apis/storage/v1/defaults.go``) are
  bound by the PersistentVolume controller first, and a pod waits until they are
  (``pkg/controller/volume/persistentvolume/util/util.go`` ``IsDelayBindingMode``).
* ``provisioner``: a class without one (``kubernetes.io/no-provisioner``, local volumes) cannot provision a
  volume for a claim; such a claim binds only to an existing volume.
* ``allowedTopologies``: the nodes a provisioned volume may serve
  (``pkg/apis/core/v1/helper/helpers.go`` ``MatchTopologySelectorTerms``): the terms are ORed, and an
  absent or empty list allows every node; within a term the ``key In values`` requirements are ANDed, and a
  term without requirements, or with a requirement without values (an invalid selector upstream), matches
  no node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.model import ParseError

__all__ = [
    "StorageClass",
    "WAIT_FOR_FIRST_CONSUMER",
    "IMMEDIATE",
    "NOT_SUPPORTED_PROVISIONER",
]

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
"""``pvutil.NotSupportedProvisioner``: the provisioner of classes whose volumes are created by hand."""

TopologyTerm = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True, slots=True)
class StorageClass:
    """A StorageClass as the volume check reads it. ``allowed_topologies`` empty allows every node."""

    name: str
    provisioner: str = ""
    binding_mode: str = IMMEDIATE
    allowed_topologies: tuple[TopologyTerm, ...] = ()

    @property
    def wait_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        """Whether the class can provision a volume (``checkVolumeProvisions``)."""
        return self.provisioner not in ("", NOT_SUPPORTED_PROVISIONER)

    def allows(self, node_labels: Mapping[str, str]) -> bool:
        """``MatchTopologySelectorTerms(allowedTopologies, node labels)``."""
        terms = self.allowed_topologies
        if not terms:
            return True
        for term in terms:
            if term and all(values and node_labels.get(key) in values for key, values in term):
                return True
        return False

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> StorageClass:
        meta = raw.get("metadata") or {}
        name = meta.get("name") or ""
        terms: list[TopologyTerm] = []
        for i, term in enumerate(raw.get("allowedTopologies") or ()):
            where = f"storageclass {name}: allowedTopologies[{i}]"
            if not isinstance(term, Mapping):
                raise ParseError(f"{where}: not an object")
            reqs: list[tuple[str, frozenset[str]]] = []
            for j, req in enumerate(term.get("matchLabelExpressions") or ()):
                if not isinstance(req, Mapping) or not isinstance(req.get("key"), str):
                    raise ParseError(f"{where}.matchLabelExpressions[{j}]: needs a key")
                values = req.get("values") or ()
                if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                    raise ParseError(f"{where}.matchLabelExpressions[{j}].values: not a list of strings")
                reqs.append((req["key"], frozenset(values)))
            terms.append(tuple(reqs))
        return cls(
            name=name,
            provisioner=str(raw.get("provisioner") or ""),
            binding_mode=str(raw.get("volumeBindingMode") or IMMEDIATE),
            allowed_topologies=tuple(terms),
        )
