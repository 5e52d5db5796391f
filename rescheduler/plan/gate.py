"""The operator's controls (``disruption`` settings) applied to one plan: which candidates wait, and how many of
the nodes the plan empties may start draining now.

Pure, with the time passed in (``now``, Unix seconds): the rules themselves are :mod:`shared.controls` (ages,
ready replicas, budgets and windows) and :mod:`shared.movable` (scope, Jobs); here they become
:class:`~rescheduler.plan.stay_reasons.StayReason` records the CLI, the run loop's metrics and Events read.

* :func:`hold_candidates` runs once the pods' movability is known, on the candidates nothing else blocks: a pod
  to move that is too young, or whose workload has too few Ready replicas, makes its node wait. Held nodes are
  not candidates of this plan, so the spot room and PodDisruptionBudget allowances they would take go to others.
* :func:`budget_cut` runs on the finished plan: the nodes it empties are kept in plan order while the budget in
  force allows (a prefix of a plan is itself a valid plan: each move was checked against the moves before it);
  the rest stay with the budget (or the closed window) as the reason. Nodes already draining (spotshift's mark,
  not yet ``drained``) count against the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from rescheduler.plan.drain_marks import STATE_ANNOTATION, is_marked
from rescheduler.plan.stay_reasons import Kind, StayReason
from shared.config import Config
from shared.controls import Allowance, allowance, format_time, pod_too_young, ready_replicas, too_few_replicas
from shared.model import Node, Pod
from shared.movable import BLOCK_JOB, BLOCK_NAMESPACE_SCOPE, BLOCK_SELECTOR_SCOPE
from shared.snapshot import ClusterSnapshot


class _Held(Protocol):
    """What :func:`hold_candidates` reads and sets of a :class:`~rescheduler.plan.candidates.Candidate`."""

    held: StayReason | None

    @property
    def blocker(self) -> StayReason | None: ...

    @property
    def movable(self) -> tuple[Pod, ...]: ...


__all__ = ["RULE_KINDS", "hold_candidates", "draining", "budget_cut", "window_text", "reads_clock"]

RULE_KINDS: dict[str, Kind] = {
    BLOCK_NAMESPACE_SCOPE: Kind.OUT_OF_SCOPE,
    BLOCK_SELECTOR_SCOPE: Kind.OUT_OF_SCOPE,
    BLOCK_JOB: Kind.JOB_RUNNING,
}
"""Movability rules that are operator controls, and the kind of reason their BLOCK becomes."""


def reads_clock(config: Config) -> bool:
    """Whether a plan depends on the time it is made at, and not only on the cluster, the configuration and the
    exclusions: pod or target ages are judged (``min_pod_age``, ``min_target_age``), or a budget opens and closes
    on a schedule. Nothing else the planner reads is a clock."""
    d = config.disruption
    return d.min_pod_age > 0 or d.min_target_age > 0 or any(b.schedule is not None for b in d.budgets)


def hold_candidates(work: Iterable[_Held], snapshot: ClusterSnapshot, config: Config, now: float) -> None:
    """Set ``held`` on each candidate whose pods to move include one too young or of a workload with too few
    Ready replicas (the first such pod in the node's order). Nothing to do when neither control is set."""
    d = config.disruption
    if d.min_pod_age <= 0 and d.min_replicas <= 0:
        return
    counts = ready_replicas(p for info in snapshot for p in info.pods) if d.min_replicas > 0 else {}
    for w in work:
        if w.blocker is not None:
            continue
        for p in w.movable:
            if pod_too_young(p, d.min_pod_age, now):
                w.held = StayReason(
                    Kind.POD_TOO_YOUNG,
                    f"younger than disruption.min_pod_age ({d.min_pod_age:g}s); the node waits",
                    pod=p.key,
                )
                break
            have = too_few_replicas(p, counts, d.min_replicas)
            if have is not None:
                w.held = StayReason(
                    Kind.TOO_FEW_REPLICAS,
                    f"its workload has {have} Ready replica(s), fewer than disruption.min_replicas "
                    f"({d.min_replicas}); the node waits",
                    pod=p.key,
                )
                break


def draining(nodes: Iterable[Node], taint_key: str) -> int:
    """How many of ``nodes`` carry spotshift's mark and are not yet ``drained``: drains in progress."""
    return sum(1 for n in nodes if is_marked(n, taint_key) and n.annotations.get(STATE_ANNOTATION) != "drained")


def window_text(a: Allowance, time_zone: str) -> str:
    """``outside drain window until <time>`` for a closed window."""
    assert a.closed_until is not None
    return f"outside drain window until {format_time(a.closed_until, time_zone)}"


def budget_cut(
    drained: Sequence[str], on_demand: Sequence[Node], config: Config, now: float
) -> tuple[int, dict[str, StayReason], Allowance]:
    """How many of ``drained`` (in plan order) may start now, the reasons of the others, and the allowance.

    ``on_demand`` are every on-demand node of the snapshot: the base of a percentage, and the nodes whose
    marks say a drain is in progress."""
    d = config.disruption
    a = allowance(
        d,
        on_demand=len(on_demand),
        in_progress=draining(on_demand, config.rescheduler.drain_taint_key),
        now=now,
    )
    more = a.more
    if more is None or more >= len(drained):
        return len(drained), {}, a
    if a.closed:
        why = StayReason(Kind.OUTSIDE_DRAIN_WINDOW, window_text(a, d.time_zone))
    else:
        why = StayReason(
            Kind.DISRUPTION_BUDGET,
            f"disruption budget {a.budget} allows {a.limit} node(s) draining at once ({a.in_progress} draining now); "
            "a later cycle can take it",
        )
    return more, {n: why for n in drained[more:]}, a
