"""Which on-demand nodes can be emptied onto spot right now, and where each pod goes: :func:`plan`.

Pure: a :class:`~shared.snapshot.ClusterSnapshot` and a :class:`~shared.config.Config` in, a
:class:`~rescheduler.plan.records.Plan` out. The snapshot is the simulation's scratch space (moves are applied
and undone through its own methods) and is left as it came in; nothing here talks to a cluster or reads a
clock (a caller that wants a time budget passes its clock). The rules (docs/architecture.md, "Rescheduler"):

* Candidates are the on-demand nodes (:mod:`shared.classes`); targets are spot nodes that are Ready,
  schedulable and not being reclaimed (:func:`shared.classes.reclaim_reason`).
* A node is drained all or nothing: every pod must be movable (:func:`shared.movable.movability`) and every
  movable pod must fit a target given every move planned before it, checked with the scheduler's filters in
  kube-scheduler's order (:mod:`rescheduler.plan.placement`, :mod:`rescheduler.plan.topology`); otherwise a
  :class:`~rescheduler.plan.reasons.StayReason` says why the node stays.
* PodDisruptionBudgets and per-workload spot ceilings are kept (:mod:`rescheduler.plan.budgets`): by default a
  budget is a rate limit (a node is blocked only by a budget allowing no disruption now), and the plan names
  the budgets that will pace each drain (:attr:`~rescheduler.plan.records.Plan.pacing`).
* Expendable pods (priority below ``movability.expendable_priority_cutoff``) neither block nor move, and on a
  spot target they take no room (:mod:`rescheduler.plan.state`).
* Pending unschedulable pods do not stop planning; ``summary["pending_unschedulable"]`` counts them and
  ``summary["safe_to_act"]`` is false, so the run loop pauses.

The quantity maximised is the number of on-demand nodes emptied: a multi-dimensional bin packing with
all-or-nothing groups, coupled by budgets and ceilings. The planner runs a portfolio of greedy strategies
(:mod:`rescheduler.plan.strategies`), pusher's own order among them, each from the same start, keeps the plan
that drains the most nodes (then: fewest moves), so it never drains fewer nodes than pusher's algorithm (under
the run loop's time budget too: pusher's order is never skipped), and then improves it
(:mod:`rescheduler.plan.search`). How close that comes to the exact optimum, and how fast it is, is measured
by ``bench/plan_quality.py`` and ``bench/plan_scale.py`` (figures in bench/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rescheduler.plan.budgets import pacing
from rescheduler.plan.candidates import Candidates, PlanCache
from rescheduler.plan.controls import budget_cut, window_text
from rescheduler.plan.placement import Planner, Result, run
from rescheduler.plan.reasons import HELD_BACK_TEXT, Kind, StayReason
from rescheduler.plan.records import Move, Plan, top_reasons
from rescheduler.plan.search import IMPROVE_MAX_CANDIDATES, SEARCH_TOTAL
from rescheduler.plan.search import improve as improve_plan
from rescheduler.plan.state import Simulation
from rescheduler.plan.strategies import LARGE_PORTFOLIO, NONE, PORTFOLIO, PUSHER, Strategy
from shared.config import Config
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, Switches

__all__ = [
    "Move",
    "Plan",
    "Strategy",
    "StayReason",
    "Kind",
    "PUSHER",
    "PORTFOLIO",
    "LARGE_PORTFOLIO",
    "HELD_BACK",
    "plan",
    "PlanCache",
]

HELD_BACK = HELD_BACK_TEXT
"""The sentence of a node held back on purpose by the improvement search."""

PARALLEL_MIN_CANDIDATES = IMPROVE_MAX_CANDIDATES
"""Below this many drainable candidates the passes take milliseconds: ``passes`` is not used (the size at
which the large portfolio is chosen)."""

Passes = Callable[[Planner, Sequence[Strategy]], list[Result]]
"""Runs one pass of each strategy from the same start; the results in the strategies' order."""

Clock = Callable[[], float]
"""Seconds from an arbitrary start that never go back (``time.monotonic``)."""


def plan(
    snapshot: ClusterSnapshot,
    config: Config | None = None,
    *,
    strategies: Iterable[Strategy] | None = None,
    verify: bool = False,
    time_budget: float | None = None,
    clock: Clock | None = None,
    improve: bool = True,
    cache: PlanCache | None = None,
    switches: Switches = CURRENT,
    exclude: Mapping[str, str] | None = None,
    now: float | None = None,
    passes: Passes | None = None,
) -> Plan:
    """Plan the drains for ``snapshot`` (left unchanged) under ``config`` (default: ``Config()``).

    Runs each strategy from the same start and keeps the best plan (most nodes drained, then fewest
    moves), then tries to improve it (:func:`rescheduler.plan.search.improve`, small clusters only).
    ``strategies`` defaults to :data:`PORTFOLIO`, or :data:`LARGE_PORTFOLIO` (pusher's included) for clusters
    with more than :data:`~rescheduler.plan.search.IMPROVE_MAX_CANDIDATES` drainable candidates.

    With ``time_budget`` (seconds, read on ``clock``, which is then required), strategies after the first
    are skipped once the budget would be exceeded, judging by the slowest pass so far, and the improvement
    step is skipped once it is spent; pusher's order (:data:`PUSHER`, in both portfolios) always runs, so a
    plan made under a budget never drains fewer nodes than pusher's algorithm on the same snapshot.
    ``verify`` re-checks every move with :func:`shared.fit.fits` and refuses any it rejects;
    ``summary["verify_rejections"]`` counts them (a disagreement is a planner bug: tests require zero). ``cache``,
    kept by the caller from one call to the next (the run loop's cycles), spares re-deriving what depends only on
    pods that did not change; the plan is the same with or without.
    ``switches`` are the rules of the cluster's kube-scheduler release (:mod:`shared.switches`; default: the
    current scheduler's). ``exclude`` maps on-demand nodes the caller will not drain now (backing off,
    marked, cordoned) to the reason: they are not candidates, so the PodDisruptionBudget allowances and spot
    room they would take go to the nodes that can be drained.
    ``now`` (Unix seconds) is the time the operator's ``disruption`` controls are judged at (pod and target
    ages, drain windows, budgets: :mod:`rescheduler.plan.controls`); without it they are not applied, except
    those that need no time (scope and Jobs, which are movability rules).
    ``passes``, when given, runs all the strategies' passes at once and returns their results in order
    (``spot-rescheduler plan`` hands :func:`rescheduler.plan_workers.passes`, which forks); it is used on
    clusters with more than :data:`PARALLEL_MIN_CANDIDATES` drainable candidates and without a ``time_budget``
    (which judges passes one after another). The plan is the same.
    """
    if time_budget is not None and clock is None:
        raise ValueError("plan: a time_budget needs the clock to measure it by")
    config = config if config is not None else Config()
    cache = cache if cache is not None else PlanCache()
    started = clock() if clock is not None else 0.0
    sim = Simulation(snapshot, config, verify=verify, topology_memo=cache.topology, switches=switches, now=now)
    best: Result | None = None
    ran: list[str] = []
    try:
        planner = Planner(sim, Candidates(sim, cache, exclude, now), search_steps=SEARCH_TOTAL)
        if strategies is None:
            strategies = LARGE_PORTFOLIO if planner.cands.open_count() > IMPROVE_MAX_CANDIDATES else PORTFOLIO
        strategies = tuple(strategies)
        if passes is not None and time_budget is None and planner.cands.open_count() > PARALLEL_MIN_CANDIDATES:
            for result in passes(planner, strategies):
                ran.append(result.strategy.name)
                if result.better_than(best):
                    best = result
            strategies_left: tuple[Strategy, ...] = ()
        else:
            strategies_left = strategies
        slowest = 0.0
        for strategy in strategies_left:
            before = clock() if clock is not None else 0.0
            over = time_budget is not None and before - started + slowest > time_budget
            if best is not None and over and strategy is not PUSHER:
                continue  # pusher's order always runs: the budget never makes the plan worse than it
            result = run(planner, strategy)
            if clock is not None:
                slowest = max(slowest, clock() - before)
            ran.append(strategy.name)
            if result.better_than(best):
                best = result
        within_budget = time_budget is None or clock is None or clock() - started < time_budget
        if improve and best is not None and within_budget:
            best = improve_plan(planner, best, [s for s in strategies if s.retry] or [best.strategy])
    finally:
        sim.restore()
    if best is None:
        best = Result(NONE)
    return _plan_of(planner, best, ran, verify, now)


def _plan_of(planner: Planner, best: Result, ran: list[str], verify: bool, now: float | None = None) -> Plan:
    sim = planner.sim
    config = sim.config
    extra: dict[str, Any] = {}
    if now is not None and config.disruption.budgets:
        keep, cut, allowed = budget_cut(best.drained, [info.node for info in sim.candidates], config, now)
        if cut:
            best = Result(
                best.strategy,
                best.held,
                [m for m in best.moves if m.source not in cut],
                best.drained[:keep],
                {**best.undrainable, **cut},
            )
        extra["disruption_budget"] = {
            "limit": allowed.limit,
            "budget": allowed.budget,
            "draining": allowed.in_progress,
            "outside_window_until": window_text(allowed, config.disruption.time_zone) if allowed.closed else None,
        }
    if now is not None and config.disruption.min_target_age > 0:
        extra["spot_too_young"] = sim.too_young
    reasons = {w.name: best.undrainable[w.name] for w in planner.cands.work if w.name in best.undrainable}
    snapshot = sim.snapshot
    summary: dict[str, Any] = {
        "on_demand_nodes": len(sim.candidates),
        "spot_targets": len(sim.targets),
        "spot_not_targets": sum(sim.not_targets.values()),
        "drained": len(best.drained),
        "pods_moved": len(best.moves),
        "undrainable": len(reasons),
        "pending_unschedulable": sim.pending_unschedulable,
        "safe_to_act": sim.pending_unschedulable == 0,
        "strategy": best.strategy.name,
        "strategies_tried": ran,
        "freed_cpu_millicores": sum(snapshot[n].allocatable("cpu") for n in best.drained),
        "freed_memory_bytes": sum(snapshot[n].allocatable("memory") for n in best.drained),
        "top_reasons": top_reasons(reasons),
        **extra,
    }
    if verify:
        summary["verify_rejections"] = sim.verify_rejections
    moves = tuple(Move(m.pod.key, m.source, m.target) for m in best.moves)
    by_name = planner.cands.by_name
    paced = pacing([by_name[n] for n in best.drained], planner.cands.pdbs)
    return Plan(moves, tuple(best.drained), reasons, summary, paced)
