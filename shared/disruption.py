"""A PodDisruptionBudget's status computed from its pods, for budgets whose status is absent or stale.

The disruption controller of kube-controller-manager writes ``status.disruptionsAllowed`` (and
``currentHealthy``, ``desiredHealthy``, ``expectedPods``) and records the spec generation it computed them for
in ``status.observedGeneration``. Until it has done so for a new or edited budget, the status says nothing
about the current spec, so the planner and the drain's live re-check compute it themselves, from the same
pods, the way the controller will (Kubernetes 1.20, ``pkg/controller/disruption/disruption.go``):

1. The budget's pods are the pods of its namespace its selector matches (``getPodsForPdb``).
2. ``currentHealthy`` counts those not being deleted, not listed in ``status.disruptedPods`` and Ready
   (``countHealthyPods``: a pod whose eviction was accepted is not counted until it is gone).
3. ``desiredHealthy`` and ``expectedPods`` (``getExpectedPodCount``):

   * ``minAvailable`` as an integer: ``desiredHealthy`` is that integer, ``expectedPods`` the number of pods;
   * ``minAvailable`` as a percentage: that share of ``expectedPods``, rounded up;
   * ``maxUnavailable`` (integer, or a percentage of ``expectedPods`` rounded up): ``expectedPods`` minus it,
     at least 0.

   For the last two forms the controller takes ``expectedPods`` from the scale of the pods' controllers
   (``getExpectedScale``), and fails the sync when a pod has no controller; a failed sync sets
   ``disruptionsAllowed`` to 0 (``failSafe``).
4. ``disruptionsAllowed`` is ``currentHealthy - desiredHealthy``, and 0 when that is negative or
   ``expectedPods`` is 0 (``updatePdbStatus``).

What differs, and why: neither a snapshot nor the run loop's watched state holds the workload controllers
(Deployments, StatefulSets, ReplicaSets...), so ``expectedPods`` is the number of the budget's pods that are
not finished, which equals the controllers' scale whenever each controller has all its replicas; a pod
without a controller makes the forms that need a scale allow 0, as the controller's failed sync does.
Finished pods (``Succeeded``, ``Failed``) are left out everywhere: the run loop never sees them (it
watches non-terminal pods only) and a plan from a file must agree with it. ``status.disruptedPods`` entries
expire after two minutes in the controller; without a clock they are all honoured, which can only make
the computed allowance smaller. A percentage that cannot be read allows 0, as the controller's failed
sync does. A budget with neither field (the API server defaults ``minAvailable: 1``, so only a
hand-written file has one) expects no pods and allows 0.

Safety does not rest on this estimate: the eviction API refuses every eviction under a budget whose
status is stale (HTTP 429, ``pkg/registry/core/pod/storage/eviction.go``) until the controller catches up,
and the drain retries those refusals like any other budget's 429. The estimate lets the plan and the
drain's re-check judge such a budget by what it will allow rather than by numbers computed for another
spec, or by zeros nobody computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from shared.model import PDB, Pod
from shared.pdbs import PdbIndex

__all__ = ["computed_status", "with_computed_status"]


def _scaled(value: int | str, total: int) -> int | None:
    """An integer, or a percentage of ``total`` rounded up (``GetValueFromIntOrPercent(..., roundUp=true)``);
    ``None`` when it cannot be read."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%"):
        return None
    try:
        percent = int(text[:-1])
    except ValueError:
        return None
    return -(-percent * total // 100)


def computed_status(pdb: PDB, pods: Iterable[Pod]) -> PDB:
    """``pdb`` with the status the disruption controller would compute over ``pods`` (the budget selects
    among them; any others are ignored), by the rules of this module's docstring."""
    selected = [p for p in pods if not p.terminal and pdb.selects(p)]
    healthy = sum(1 for p in selected if p.ready and not p.terminating and p.name not in pdb.disrupted_pods)
    count = len(selected)
    managed = all(p.controller is not None for p in selected)
    desired: int | None
    if pdb.max_unavailable is not None:
        unavailable = _scaled(pdb.max_unavailable, count)
        desired = None if unavailable is None or not managed else max(count - unavailable, 0)
    elif pdb.min_available is not None:
        minimum = pdb.min_available
        desired = _scaled(minimum, count) if isinstance(minimum, int) or managed else None
    else:
        desired, count = 0, 0
    if desired is None:  # the controller's sync fails: failSafe
        return replace(pdb, disruptions_allowed=0, current_healthy=healthy, desired_healthy=0, expected_pods=count)
    allowed = healthy - desired if count > 0 else 0
    return replace(
        pdb,
        disruptions_allowed=max(allowed, 0),
        current_healthy=healthy,
        desired_healthy=desired,
        expected_pods=count,
    )


def with_computed_status(pdbs: Sequence[PDB], pods: Iterable[Pod]) -> list[PDB]:
    """``pdbs`` in order, each budget whose status is not current (:attr:`~shared.model.PDB.status_current`)
    replaced by :func:`computed_status` over ``pods``; current ones are the very objects given.

    One pass over ``pods``, and none at all while every status is current (the usual case).
    """
    stale = [i for i, b in enumerate(pdbs) if not b.status_current]
    if not stale:
        return list(pdbs)
    index = PdbIndex(pdbs[i] for i in stale)
    namespaces = {pdbs[i].namespace for i in stale}
    selected: list[list[Pod]] = [[] for _ in stale]
    for p in pods:
        if p.namespace in namespaces and not p.terminal:
            for j in index.indices(p):
                selected[j].append(p)
    out = list(pdbs)
    for j, i in enumerate(stale):
        out[i] = computed_status(pdbs[i], selected[j])
    return out
