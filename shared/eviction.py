"""Which PodDisruptionBudget an eviction answers to, and whether it takes one of its disruptions: the eviction
subresource's own rules, as pure functions of a pod and its budget.

``pkg/registry/core/pod/storage/eviction.go`` (``EvictionREST.Create``) decides, in this order:

1. ``canIgnorePDB``: a pod in phase ``Pending``, ``Succeeded`` or ``Failed``, or being deleted, is deleted without
   looking at any budget, not even at how many select it (:func:`ignores_budgets`).
2. A pod selected by more than one budget is refused (HTTP 500); one selected by none is evicted.
3. A pod that is not Ready (``podutil.IsPodReady``: its ``Ready`` condition is ``True``; :attr:`Pod.ready`) is
   evicted without taking one of its budget's ``disruptionsAllowed``, even at 0, when

   * the budget's ``spec.unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or
   * it is unset or ``IfHealthyBudget`` and the guarded application is healthy: ``status.currentHealthy >=
     status.desiredHealthy`` and ``status.desiredHealthy > 0``.

   Otherwise it falls through to 4, like a Ready pod.
4. ``checkAndDecrement``: refused (HTTP 429) while the budget allows no disruption or its status is not yet
   computed for its spec, else evicted, taking one disruption.

:func:`budget_use` answers 3 and 4 for one pod and its one budget. Nothing in 1 to 4 changed between 1.20 and
1.37 but the policy field (1.26, on by default from 1.27, GA in 1.31): a budget without it is ``IfHealthyBudget``,
which is 3 as 1.20 already had it. So there is no version switch.

Decided on purpose, where the API server's own code is not the answer:

* A policy other than the two above is not one a 1.26 to 1.37 API server accepts (its validation refuses it); it
  can only come from a newer one. The field's documentation asks clients that make eviction decisions to
  disallow evicting unhealthy pods under a policy they do not know, so :data:`REFUSED`: the node stays.
* A budget whose status the disruption controller has not yet computed for its spec is judged by the status
  computed from its pods (:mod:`shared.disruption`), here as everywhere. The API server reads the stored status
  in 3 and refuses in 4 until the controller catches up; the drain retries those 429s.
"""

from __future__ import annotations

import enum

from shared.model import PDB, TERMINAL_PHASES, Pod

__all__ = [
    "ALWAYS_ALLOW",
    "IF_HEALTHY_BUDGET",
    "POLICIES",
    "BudgetUse",
    "USES",
    "FREE",
    "REFUSED",
    "ignores_budgets",
    "budget_use",
]

IF_HEALTHY_BUDGET = "IfHealthyBudget"  # policy/v1 IfHealthyBudget, the default when the field is unset
ALWAYS_ALLOW = "AlwaysAllow"  # policy/v1 AlwaysAllow
POLICIES = frozenset({IF_HEALTHY_BUDGET, ALWAYS_ALLOW})
"""The ``unhealthyPodEvictionPolicy`` values the API server accepts."""


class BudgetUse(enum.Enum):
    """What evicting one pod does with the one budget that selects it."""

    USES = "uses"
    """Checked against ``disruptionsAllowed`` and takes one: refused while it is below 1."""
    FREE = "free"
    """Allowed without taking a disruption, whatever ``disruptionsAllowed`` says (a not-Ready pod, rule 3)."""
    REFUSED = "refused"
    """A not-Ready pod under a policy this code does not know: not evicted."""


USES, FREE, REFUSED = BudgetUse.USES, BudgetUse.FREE, BudgetUse.REFUSED


def ignores_budgets(pod: Pod) -> bool:
    """``canIgnorePDB``: phase ``Pending``, ``Succeeded`` or ``Failed``, or being deleted. Its eviction is a plain
    delete; no budget is read, so neither a budget at 0 nor two budgets selecting it stop it."""
    return pod.phase == "Pending" or pod.phase in TERMINAL_PHASES or pod.terminating


def budget_use(pod: Pod, pdb: PDB) -> BudgetUse:
    """What evicting ``pod`` does with ``pdb``, the one budget that selects it (rules 3 and 4 of the module).

    The caller has already left out pods that :func:`ignores_budgets` and pods selected by several budgets.
    """
    if pod.ready:
        return USES
    policy = pdb.unhealthy_pod_eviction_policy
    if policy == ALWAYS_ALLOW:
        return FREE
    if policy and policy != IF_HEALTHY_BUDGET:
        return REFUSED
    if pdb.current_healthy >= pdb.desired_healthy and pdb.desired_healthy > 0:
        return FREE
    return USES
