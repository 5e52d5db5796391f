"""The safety checks made before a node's first eviction: pure functions, each answering with its reasons.

Why before the first eviction and for the whole node: a drain that stops half-way leaves a node that is
neither useful nor removable, and its evicted pods were disrupted for nothing (pusher #54/#55). So the
node's evictions are checked against the PodDisruptionBudgets' live status first, by the configured rule
(``rescheduler.pdb_rule``):

* ``rate-limit`` (default): each budget of the node's pods must allow at least one disruption now; the drain
  then evicts what a budget allows and retries its 429s as replacements become Ready, as ``kubectl drain``
  does, so two pods of a budget with ``disruptionsAllowed: 1`` are evicted one after the other;
* ``all-at-once`` (cluster-autoscaler's rule): every eviction the node needs must be allowed now, counted
  together, so two pods of a budget with ``disruptionsAllowed: 1`` on one node skip the node.

The rules are the eviction subresource's own (``pkg/registry/core/pod/storage/eviction.go``):

* a pod selected by no PodDisruptionBudget may always be evicted;
* a pod selected by more than one is refused (HTTP 500 "more than one PodDisruptionBudget");
* a budget whose status the disruption controller has not computed for its current generation refuses
  (HTTP 429), as does one with ``disruptionsAllowed`` at or below zero;
* each accepted eviction uses one of the budget's ``disruptionsAllowed``.

The reason strings are constants, so the run loop's logs, Events and metric labels come from one place.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT
from shared.model import PDB, Pod
from shared.pdbs import PdbIndex
from shared.placeholders import is_placeholder

__all__ = [
    "Refusal",
    "PdbIndex",  # re-exported: callers of pdb_refusals may pass one
    "REFUSE_MULTIPLE_PDBS",
    "REFUSE_PDB_BUDGET",
    "REFUSE_PDB_EXHAUSTED",
    "REFUSE_PDB_NOT_COMPUTED",
    "pdb_refusals",
    "unschedulable_pods",
    "stale_pdbs",
]

REFUSE_MULTIPLE_PDBS = "pod is selected by more than one PodDisruptionBudget"
REFUSE_PDB_BUDGET = "PodDisruptionBudget allows fewer disruptions than the node's pods need"
REFUSE_PDB_EXHAUSTED = "PodDisruptionBudget allows no disruption now"
REFUSE_PDB_NOT_COMPUTED = "PodDisruptionBudget status is not yet computed for its current spec"


@dataclass(frozen=True, slots=True)
class Refusal:
    """An eviction the API server would refuse now: the rule's constant and the particulars."""

    reason: str
    pod: str
    detail: str

    def __str__(self) -> str:
        return f"{self.pod}: {self.reason} ({self.detail})"


def pdb_refusals(
    pods: Sequence[Pod],
    pdbs: Iterable[PDB] | PdbIndex,
    *,
    stale: Collection[str] = (),
    rule: str = PDB_RATE_LIMIT,
) -> list[Refusal]:
    """Every refusal that keeps a drain of ``pods`` from starting now under ``rule``, in the pods' order.

    ``pdbs`` are the budgets with their live status (or a :class:`PdbIndex` of them); ``stale`` holds the
    keys (``namespace/name``) of budgets whose ``status.observedGeneration`` lags ``metadata.generation``.
    ``rule`` is ``rescheduler.pdb_rule``: ``rate-limit`` refuses a pod whose budget allows no disruption now,
    ``all-at-once`` also a pod whose budget's allowance the node's earlier pods used up.
    """
    if rule not in (PDB_RATE_LIMIT, PDB_ALL_AT_ONCE):
        raise ValueError(f"unknown PodDisruptionBudget rule {rule!r}")
    index = pdbs if isinstance(pdbs, PdbIndex) else PdbIndex(pdbs)
    used: dict[str, int] = {}
    out: list[Refusal] = []
    for pod in pods:
        matching = index.selecting(pod)
        if not matching:
            continue
        if len(matching) > 1:
            names = ", ".join(sorted(b.name for b in matching))
            out.append(Refusal(REFUSE_MULTIPLE_PDBS, pod.key, names))
            continue
        pdb = matching[0]
        if pdb.key in stale:
            out.append(Refusal(REFUSE_PDB_NOT_COMPUTED, pod.key, pdb.key))
            continue
        if rule == PDB_RATE_LIMIT:
            if pdb.disruptions_allowed < 1:
                out.append(
                    Refusal(REFUSE_PDB_EXHAUSTED, pod.key, f"{pdb.key} allows {max(pdb.disruptions_allowed, 0)}")
                )
            continue
        used[pdb.key] = used.get(pdb.key, 0) + 1
        if used[pdb.key] > pdb.disruptions_allowed:
            out.append(
                Refusal(
                    REFUSE_PDB_BUDGET,
                    pod.key,
                    f"{pdb.key} allows {max(pdb.disruptions_allowed, 0)}, this node needs {used[pdb.key]}",
                )
            )
    return out


def unschedulable_pods(pods: Iterable[Pod], namespace: str | None = None) -> list[Pod]:
    """Pods waiting for a node the scheduler could not find: Pending, unbound, ``PodScheduled=False/Unschedulable``.

    While any exist the cluster is short of room; moving more pods would make it worse, so the run loop pauses.
    spotshift's placeholder pods in ``namespace`` (spotshift's own) do not count: they wait for a node on
    purpose, for the autoscaler to add one (:mod:`shared.placeholders`).
    """
    out = []
    for p in pods:
        if p.unschedulable and not p.node_name and not p.terminal and not p.terminating:
            if namespace is not None and is_placeholder(p, namespace):
                continue
            out.append(p)
    return out


def stale_pdbs(raw_items: Iterable[Mapping[str, object]]) -> set[str]:
    """Keys of budgets whose ``status.observedGeneration`` is behind ``metadata.generation``."""
    out = set()
    for raw in raw_items:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        assert isinstance(meta, Mapping) and isinstance(status, Mapping)
        generation = meta.get("generation") or 0
        observed = status.get("observedGeneration") or 0
        if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
            out.add(f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}")
    return out
