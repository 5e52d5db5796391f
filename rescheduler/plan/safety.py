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

The rules are the eviction subresource's own (``pkg/registry/core/pod/storage/eviction.go``, written once in
:mod:`shared.eviction`):

* a pod in phase ``Pending`` (or finished, or being deleted) is evicted without looking at any budget;
* a pod selected by no PodDisruptionBudget may always be evicted;
* a pod selected by more than one is refused (HTTP 500 "more than one PodDisruptionBudget");
* a pod that is not Ready is evicted without using its budget when the budget's ``unhealthyPodEvictionPolicy`` is
  ``AlwaysAllow``, or when it is ``IfHealthyBudget`` (or unset) and ``currentHealthy >= desiredHealthy > 0``;
* otherwise a budget with ``disruptionsAllowed`` at or below zero refuses (HTTP 429), and each accepted eviction
  uses one of the budget's ``disruptionsAllowed``.

A budget whose status the disruption controller has not yet computed for its current spec is judged by the
status computed from its pods (:mod:`shared.disruption`; the callers pass such budgets), so the plan and the
drain's re-check agree; the API server itself refuses its evictions with a 429 until the controller catches
up, which the drain retries like any other budget's.

The reason strings are constants, so the run loop's logs, Events and metric labels come from one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT
from shared.eviction import FREE, REFUSED, budget_use, ignores_budgets
from shared.model import PDB, Pod
from shared.pdbs import PdbIndex
from shared.placeholders import is_placeholder

__all__ = [
    "Refusal",
    "PdbIndex",  # re-exported: callers of pdb_refusals may pass one
    "REFUSE_MULTIPLE_PDBS",
    "REFUSE_PDB_BUDGET",
    "REFUSE_PDB_EXHAUSTED",
    "REFUSE_PDB_UNKNOWN_POLICY",
    "pdb_refusals",
    "unschedulable_pods",
]

REFUSE_MULTIPLE_PDBS = "pod is selected by more than one PodDisruptionBudget"
REFUSE_PDB_BUDGET = "PodDisruptionBudget allows fewer disruptions than the node's pods need"
REFUSE_PDB_EXHAUSTED = "PodDisruptionBudget allows no disruption now"
REFUSE_PDB_UNKNOWN_POLICY = "pod is not Ready under a PodDisruptionBudget whose unhealthyPodEvictionPolicy is unknown"


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
    rule: str = PDB_RATE_LIMIT,
) -> list[Refusal]:
    """Every refusal that keeps a drain of ``pods`` from starting now under ``rule``, in the pods' order.

    ``pdbs`` are the budgets with their live status (or a :class:`PdbIndex` of them), an absent or stale
    status already computed from the pods (:func:`shared.disruption.with_computed_status`).
    ``rule`` is ``rescheduler.pdb_rule``: ``rate-limit`` refuses a pod whose budget allows no disruption now,
    ``all-at-once`` also a pod whose budget's allowance the node's earlier pods used up. Evictions that use no
    budget (:mod:`shared.eviction`) are never refused and use up nothing.
    """
    if rule not in (PDB_RATE_LIMIT, PDB_ALL_AT_ONCE):
        raise ValueError(f"unknown PodDisruptionBudget rule {rule!r}")
    index = pdbs if isinstance(pdbs, PdbIndex) else PdbIndex(pdbs)
    used: dict[str, int] = {}
    out: list[Refusal] = []
    for pod in pods:
        if ignores_budgets(pod):
            continue
        matching = index.selecting(pod)
        if not matching:
            continue
        if len(matching) > 1:
            names = ", ".join(sorted(b.name for b in matching))
            out.append(Refusal(REFUSE_MULTIPLE_PDBS, pod.key, names))
            continue
        pdb = matching[0]
        use = budget_use(pod, pdb)
        if use is FREE:
            continue
        if use is REFUSED:
            policy = pdb.unhealthy_pod_eviction_policy
            out.append(Refusal(REFUSE_PDB_UNKNOWN_POLICY, pod.key, f"{pdb.key}: unhealthyPodEvictionPolicy {policy}"))
            continue
        if rule == PDB_RATE_LIMIT:
            if pdb.disruptions_allowed < 1:
                out.append(Refusal(REFUSE_PDB_EXHAUSTED, pod.key, f"{pdb.key} allows {_allowance(pdb)}"))
            continue
        used[pdb.key] = used.get(pdb.key, 0) + 1
        if used[pdb.key] > pdb.disruptions_allowed:
            out.append(
                Refusal(
                    REFUSE_PDB_BUDGET,
                    pod.key,
                    f"{pdb.key} allows {_allowance(pdb)}, this node needs {used[pdb.key]}",
                )
            )
    return out


def _allowance(pdb: PDB) -> str:
    """The budget's ``disruptionsAllowed`` for a refusal's detail, saying when it was computed from the pods."""
    allowed = max(pdb.disruptions_allowed, 0)
    return str(allowed) if pdb.status_current else f"{allowed} (computed from its pods: status not yet current)"


def unschedulable_pods(pods: Iterable[Pod], namespace: str | None = None) -> list[Pod]:
    """Pods waiting for a node the scheduler could not find: Pending, unbound, ``PodScheduled=False/Unschedulable``.

    While any exist the cluster is short of room; moving more pods would make it worse, so the run loop pauses.
    A pod with scheduling gates (``spec.schedulingGates``) does not count, whatever its conditions say: the
    scheduler does not try to place it until the gates are removed (``schedulinggates.PreEnqueue`` answers
    ``UnschedulableAndUnresolvable`` before any filter), so it waits for whoever holds the gates, not for room.
    spotshift's placeholder pods in ``namespace`` (spotshift's own) do not count either: they wait for a node
    on purpose, for the autoscaler to add one (:mod:`shared.placeholders`).
    """
    out = []
    for p in pods:
        if p.unschedulable and not p.gated and not p.node_name and not p.terminal and not p.terminating:
            if namespace is not None and is_placeholder(p, namespace):
                continue
            out.append(p)
    return out
