"""An independent replay of how a plan's drains meet the PodDisruptionBudgets: the checker's half of the rule.

Written from the Eviction API's behaviour, not from the planner's code: the budgets selecting a pod are found
with :meth:`shared.model.PDB.selects` over every budget (no index), and the drain is replayed as the run loop
performs it: nodes one after another in plan order, each node's pods evicted one at a time in plan order.

* ``rate-limit``: an eviction is accepted only while its budget allows a disruption (``disruptionsAllowed``
  ≥ 1, pod selected by one budget at most); each accepted eviction uses one; while a budget allows none the
  drain waits (HTTP 429, retried) for the replacement of a pod evicted earlier under that budget to become
  Ready, which gives the disruption back. A pod whose budget allows none and has no replacement coming would
  wait forever: the plan is invalid.
* ``all-at-once``: the evictions planned per budget, across the plan, never exceed ``disruptionsAllowed``.

Either way the budget's healthy pods never drop below ``desiredHealthy`` (the allowance never goes negative),
which is what a watcher on the real control plane checks at every poll.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rescheduler.plan.records import Plan
from shared.config import PDB_RATE_LIMIT
from shared.model import PDB, Pod

__all__ = ["pacing_problems"]


def pacing_problems(pdbs: Sequence[PDB], pods: dict[str, Pod], plan: Plan, rule: str) -> list[str]:
    """What is wrong with ``plan``'s evictions under ``rule``; ``pods`` maps each moved pod's key to the pod."""
    allowed = {b.key: b.disruptions_allowed for b in pdbs}
    waiting: dict[str, deque[str]] = {}  # budget -> replacements not yet Ready, oldest first
    problems: list[str] = []
    rank = {node: i for i, node in enumerate(plan.drained)}
    for m in sorted(plan.moves, key=lambda m: rank.get(m.source, len(rank))):  # stable: plan order per node
        pod = pods[m.pod]
        selecting = [b for b in pdbs if b.selects(pod)]
        if len(selecting) > 1:
            problems.append(f"{m.pod} is selected by {len(selecting)} PodDisruptionBudgets: evictions refuse it")
            continue
        if not selecting:
            continue
        key = selecting[0].key
        if rule == PDB_RATE_LIMIT:
            pending = waiting.setdefault(key, deque())
            while allowed[key] < 1 and pending:
                pending.popleft()  # an earlier replacement becomes Ready: the budget gives a disruption back
                allowed[key] += 1
            if allowed[key] < 1:
                problems.append(f"{m.pod}: PodDisruptionBudget {key} allows no disruption and none will come back")
                continue
            pending.append(m.pod)
        elif allowed[key] < 1:
            problems.append(f"{m.pod}: PodDisruptionBudget {key} over budget")
            continue
        allowed[key] -= 1
        assert allowed[key] >= 0  # healthy pods never below desiredHealthy
    return problems
