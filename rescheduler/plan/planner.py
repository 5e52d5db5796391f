"""Which on-demand nodes can be emptied onto spot right now, and where each pod goes: :func:`plan`.

Pure: a :class:`~shared.snapshot.ClusterSnapshot` and a :class:`~shared.config.Config` in, a
:class:`~rescheduler.plan.records.Plan` out. The snapshot is the simulation's scratch space (moves are applied
and undone through its own methods) and is left as it came in; nothing here talks to a cluster or reads a
clock (a caller that wants a time budget passes its clock). The rules (docs/architecture.md, "Rescheduler"):

* Candidates are the on-demand nodes (:mod:`shared.classes`); targets are spot nodes that are Ready,
  schedulable and not being reclaimed (:func:`shared.classes.reclaim_reason`), nor of a spot pool reclaimed
  within ``spot.stability_window`` (the snapshot's :attr:`~shared.snapshot.ClusterSnapshot.spot_outlook`); the
  steadier pools are tried first (:mod:`shared.spot_pools`, :mod:`rescheduler.plan.simulation`).
* A node is drained all or nothing: every pod must be movable (:func:`shared.movable.movability`) and every
  movable pod must fit a target given every move planned before it, checked with the scheduler's filters in
  kube-scheduler's order (:mod:`rescheduler.plan.placement`, :mod:`rescheduler.plan.topology`); otherwise a
  :class:`~rescheduler.plan.stay_reasons.StayReason` says why the node stays.
* PodDisruptionBudgets and per-workload spot ceilings are kept (:mod:`rescheduler.plan.budgets`): by default a
  budget is a rate limit (a node is blocked only by a budget allowing no disruption now), and the plan names
  the budgets that will pace each drain (:attr:`~rescheduler.plan.records.Plan.pacing`).
* Expendable pods (priority below ``movability.expendable_priority_cutoff``) neither block nor move, and on a
  spot target they take no room (:mod:`rescheduler.plan.simulation`).
* Pods waiting for a node are planned first (:mod:`rescheduler.plan.waiting`): the spot room they can use is
  theirs, and a node one of them could use stays (kind ``waiting-pod``); a pod that fits no node holds nothing.
  The summary's ``pending_unschedulable`` counts the unschedulable pods, ``waiting_pods`` (set when any wait) names
  the nodes each holds, and ``safe_to_act`` is false when one holds a node.

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
from dataclasses import replace

from rescheduler.plan.budgets import pacing
from rescheduler.plan.candidates import Candidates, PlanCache
from rescheduler.plan.gate import budget_cut, window_text
from rescheduler.plan.last_plan import inputs_of
from rescheduler.plan.pace import Clock, Pace
from rescheduler.plan.placement import Planner, Result, run
from rescheduler.plan.records import DisruptionBudget, Move, Plan, Summary, top_reasons
from rescheduler.plan.search import IMPROVE_MAX_CANDIDATES, SEARCH_TOTAL
from rescheduler.plan.search import improve as improve_plan
from rescheduler.plan.simulation import Simulation
from rescheduler.plan.stay_reasons import CONTROLS, HELD_BACK_TEXT, Kind, StayReason
from rescheduler.plan.strategies import LARGE_PORTFOLIO, NONE, PORTFOLIO, PUSHER, Strategy
from rescheduler.plan.waiting import Waiting, release, reserve
from rescheduler.plan.worth import StayOf, Worth, expected_stay, pool_stay, weigh
from shared.config import Config
from shared.model import Pod
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
    stay_of: StayOf | None = None,
) -> Plan:
    """Plan the drains for ``snapshot`` (left unchanged) under ``config`` (default: ``Config()``).

    Pods waiting for a node are planned first (:mod:`rescheduler.plan.waiting`): those that fit a spot target are
    placed there before any move, and the on-demand nodes they hold are not candidates. Then each strategy runs
    from the same start and the best plan is kept (most nodes drained, then fewest moves), then improved
    (:func:`rescheduler.plan.search.improve`, small clusters only). ``strategies`` defaults to
    :data:`PORTFOLIO`, or :data:`LARGE_PORTFOLIO` (pusher's included) for clusters with more than
    :data:`~rescheduler.plan.search.IMPROVE_MAX_CANDIDATES` drainable candidates.

    With ``time_budget`` (seconds, read on ``clock``, which is then required), strategies after the first
    are skipped once the budget would be exceeded, judging by the slowest pass so far (and, for a pass the cache has
    no record of to replay, by what it took when it last had none: :meth:`~rescheduler.plan.replay.Replays.alone`),
    and the improvement search starts no re-run or attempt the budget would not fit by the same judgement
    (:class:`~rescheduler.plan.pace.Pace`); pusher's order (:data:`PUSHER`, in both portfolios) always
    runs, so a plan made under a budget never drains fewer nodes than pusher's algorithm on the same snapshot.
    ``verify`` re-checks every move with :func:`shared.fit.fits` and refuses any it rejects;
    ``summary.verify_rejections`` counts them (a disagreement is a planner bug: tests require zero). ``cache``,
    kept by the caller from one call to the next (the run loop's cycles), spares re-deriving what depends only on
    pods that did not change, hands out its last plan again when nothing the plan is made from changed
    (:mod:`rescheduler.plan.last_plan`; not with a ``stay_of``) and replays the last plan's packing passes where the
    change did not touch them (:mod:`rescheduler.plan.replay`); the plan is the same with or without.
    ``switches`` are the rules of the cluster's kube-scheduler release (:mod:`shared.switches`; default: the
    current scheduler's). ``exclude`` maps on-demand nodes the caller will not drain now (backing off,
    marked, cordoned) to the reason: they are not candidates, so the PodDisruptionBudget allowances and spot
    room they would take go to the nodes that can be drained.
    ``now`` (Unix seconds) is the time the operator's ``disruption`` controls are judged at (pod and target
    ages, drain windows, budgets: :mod:`rescheduler.plan.gate`); without it they are not applied, except
    those that need no time (scope and Jobs, which are movability rules).
    ``passes``, when given, runs all the strategies' passes at once and returns their results in order
    (``spot-rescheduler plan`` hands :func:`rescheduler.parallel.packing.passes`, which forks); it is used on
    clusters with more than :data:`PARALLEL_MIN_CANDIDATES` drainable candidates and without a ``time_budget``
    (which judges passes one after another). The plan is the same. ``stay_of`` (default: ``worth.expected_stay``
    for every spot node) weighs each drain (:mod:`rescheduler.plan.worth`); a node not worth it stays.
    """
    if time_budget is not None and clock is None:
        raise ValueError("plan: a time_budget needs the clock to measure it by")
    config = config if config is not None else Config()
    search = _Search(strategies, verify, time_budget, clock, improve, cache, switches, now, passes, stay_of)
    if cache is None or stay_of is not None:
        return _planned(snapshot, config, search, exclude)
    return _last_or_planned(snapshot, config, search, cache, exclude)


def _last_or_planned(
    snapshot: ClusterSnapshot, config: Config, search: _Search, cache: PlanCache, exclude: Mapping[str, str] | None
) -> Plan:
    """The cache's last plan if nothing it was made from changed (:mod:`rescheduler.plan.last_plan`), else
    :func:`_planned`, kept as the last plan."""
    settings = (search.strategies, search.verify, search.time_budget, search.improve, search.switches)
    inputs = inputs_of(snapshot, config, settings, exclude, search.now)
    kept = cache.last.get(inputs)
    if isinstance(kept, Plan):
        return kept
    cache.last.forget()
    result = _planned(snapshot, config, search, exclude)
    cache.last.put(inputs, result)
    return result


def _planned(snapshot: ClusterSnapshot, config: Config, search: _Search, exclude: Mapping[str, str] | None) -> Plan:
    """:func:`plan`'s work, every time."""
    switches = search.switches
    waiting = reserve(snapshot, config, exclude=exclude, switches=switches, cache=search.cache.emptied)
    held: dict[str, str | StayReason] = {**(exclude or {}), **waiting.holds}
    try:
        result = search.worth_it(snapshot, config, held)
    finally:
        reserved = list(waiting.placed)
        release(snapshot, waiting)
    if reserved:
        result = _held_by_reservations(result, search.quick().run(snapshot, config, held), reserved)
    return _with_waiting(result, waiting)


class _Search:
    """One planning run's settings (:func:`plan`'s arguments), run on a snapshot with some nodes excluded."""

    def __init__(
        self,
        strategies: Iterable[Strategy] | None,
        verify: bool,
        time_budget: float | None,
        clock: Clock | None,
        improve: bool,
        cache: PlanCache | None,
        switches: Switches,
        now: float | None,
        passes: Passes | None,
        stay_of: StayOf | None,
    ) -> None:
        self.strategies = tuple(strategies) if strategies is not None else None
        self.verify, self.time_budget, self.clock, self.improve = verify, time_budget, clock, improve
        self.cache, self.switches, self.now, self.passes = cache or PlanCache(), switches, now, passes
        self.stay_of = stay_of

    def quick(self) -> _Search:
        """pusher's order alone, not improved, with the cache kept aside for it (the caller's stays that of the plans
        it asked for): enough to see which nodes the waiting pods' spot room holds."""
        aside = self.cache.aside()
        return _Search((PUSHER,), False, None, None, False, aside, self.switches, self.now, None, self.stay_of)

    def worth_it(self, snapshot: ClusterSnapshot, config: Config, held: dict[str, str | StayReason]) -> Plan:
        """:meth:`run`, again without the nodes it would drain that are not worth it (added to ``held``, kind
        ``not-worth-it``), until every node it drains is: the moves of a plan are each valid after the ones before
        them, so a node is taken out by planning anew, never by dropping its moves. Each round holds at least one
        more node back, so this ends. A node not worth it wherever its pods go is held before the first pass
        (:func:`_hold_not_worth`): with one stay for every spot node that is every node not worth it, and the plan is
        made once."""
        rejected: dict[str, Worth] = {}
        while True:
            result = self.run(snapshot, config, held)
            losing = {node: w for node, w in result.worth.items() if not w.worth}
            if not losing:
                return replace(result, worth={**rejected, **result.worth}) if rejected else result
            rejected.update(losing)
            held.update({node: StayReason(Kind.NOT_WORTH, NOT_WORTH_TEXT + w.text) for node, w in losing.items()})

    def run(self, snapshot: ClusterSnapshot, config: Config, exclude: Mapping[str, str | StayReason]) -> Plan:
        """The best plan of the portfolio, improved, with the controls applied (snapshot left as it came in)."""
        now = self.now
        pace = Pace(self.clock, self.time_budget)
        stay_of = self.stay_of or pool_stay(snapshot, config)
        cache = self.cache
        sim = Simulation(
            snapshot,
            config,
            verify=self.verify,
            topology_memo=cache.topology,
            switches=self.switches,
            now=now,
            preemptions=cache.preemptions,
        )
        try:
            cands = Candidates(sim, self.cache, exclude, now)
            not_worth = _hold_not_worth(sim, cands, stay_of)
            planner = Planner(sim, cands, search_steps=SEARCH_TOTAL)
            if not self.verify:
                planner.replays = self.cache.replays
                planner.replays.begin(sim, config, self.switches)
            strategies = self.strategies
            if strategies is None:
                large = planner.cands.open_count() > IMPROVE_MAX_CANDIDATES
                strategies = LARGE_PORTFOLIO if large else PORTFOLIO
            best, ran = self._portfolio(planner, strategies, pace)
            if self.improve and best is not None and pace.allows():
                best = improve_plan(planner, best, [s for s in strategies if s.retry] or [best.strategy], pace)
        finally:
            sim.restore()
        result = _plan_of(planner, best if best is not None else Result(NONE), ran, self.verify, now, stay_of)
        return replace(result, worth={**not_worth, **result.worth}) if not_worth else result

    def _portfolio(
        self, planner: Planner, strategies: Sequence[Strategy], pace: Pace
    ) -> tuple[Result | None, list[str]]:
        """Each strategy's pass from the same start (in parallel through ``passes`` when it pays), the best kept."""
        best: Result | None = None
        ran: list[str] = []
        left: Sequence[Strategy] = strategies
        if (
            self.passes is not None
            and self.time_budget is None
            and planner.cands.open_count() > PARALLEL_MIN_CANDIDATES
        ):
            for result in self.passes(planner, strategies):
                ran.append(result.strategy.name)
                if result.better_than(best):
                    best = result
            left = ()
        replays = planner.replays
        for strategy in left:
            # A pass with no record to replay costs what it cost when it last had none, however fast replays were.
            alone = replays.alone(strategy.name) if replays is not None else None
            if best is not None and strategy is not PUSHER and not pace.allows(alone or 0.0):
                continue  # pusher's order always runs: the budget never makes the plan worse than it
            before = pace.now()
            result = run(planner, strategy)
            took = pace.took(before)
            if replays is not None and alone is not None and self.clock is not None:
                replays.took[strategy.name] = took
            ran.append(strategy.name)
            if result.better_than(best):
                best = result
        return best, ran


def _held_by_reservations(reserved_plan: Plan, free_plan: Plan, reserved: Sequence[Pod]) -> Plan:
    """``reserved_plan`` with the nodes that only a plan without the waiting pods' spot room would drain, on moves
    to a node where a waiting pod is placed, said to be held by that pod."""
    on_node: dict[str, list[str]] = {}
    for p in reserved:
        on_node.setdefault(p.node_name, []).append(p.key)
    reasons = dict(reserved_plan.reasons)
    for node in free_plan.drained:
        why = reasons.get(node)
        if node in reserved_plan.drained or why is None or why.kind in CONTROLS:
            continue
        for m in free_plan.moves:
            pods = on_node.get(m.target) if m.source == node else None
            if pods:
                text = f"pending pod {pods[0]} is placed first on spot node {m.target}, whose room this drain takes"
                reasons[node] = StayReason(Kind.WAITING_POD, text, pod=pods[0])
                break
    return replace(reserved_plan, reasons=reasons)


WAITING_SHOWN = 50
"""How many waiting pods ``summary.waiting_pods`` names (in the scheduling queue's order)."""


def _with_waiting(result: Plan, waiting: Waiting) -> Plan:
    """The plan's summary and reasons with what the waiting pods hold (``summary.waiting_pods``: pod → the nodes it
    holds, set when pods wait; ``safe_to_act``: no node is held by one)."""
    if not waiting.pods:
        return result
    holds: dict[str, list[str]] = {p.key: [] for p in waiting.pods[:WAITING_SHOWN]}
    for node, why in result.reasons.items():
        if why.kind is Kind.WAITING_POD and why.pod is not None and why.pod in holds:
            holds[why.pod].append(node)
    held = any(why.kind is Kind.WAITING_POD for why in result.reasons.values())
    waiting_pods = {pod: tuple(nodes) for pod, nodes in holds.items()}
    summary = replace(
        result.summary, safe_to_act=not held, waiting_pods=waiting_pods, top_reasons=top_reasons(result.reasons)
    )
    return replace(result, summary=summary)


NOT_WORTH_TEXT = "not worth draining: "
"""The start of a not-worth-it node's reason, followed by :attr:`~rescheduler.plan.worth.Worth.text`."""


def _hold_not_worth(sim: Simulation, cands: Candidates, stay_of: StayOf) -> dict[str, Worth]:
    """The candidates not worth draining even if all their pods went to the spot target with the longest stay, each
    left alone (kind ``not-worth-it``) before any pass: no placement can make them worth it, so with one stay for
    every spot node no plan is made twice (:meth:`_Search.worth_it`)."""
    weights = sim.config.worth
    if not weights.enabled or not sim.targets:  # without targets, no spot node is why a node stays
        return {}
    longest = max(stay_of(t.name) for t in sim.targets)
    held: dict[str, Worth] = {}
    for w in cands.work:
        if w.blocker is None and w.movable:
            worth = weigh(w.info.node, w.movable, longest, weights, w.analysis.eviction_cost)
            if not worth.worth:
                w.left_alone = StayReason(Kind.NOT_WORTH, NOT_WORTH_TEXT + worth.text)
                held[w.name] = worth
    return held


def _worth_of(sim: Simulation, best: Result, stay_of: StayOf) -> dict[str, Worth]:
    """Each node ``best`` drains, weighed by its moves (:func:`rescheduler.plan.worth.weigh`)."""
    moved: dict[str, tuple[list[Pod], list[str]]] = {node: ([], []) for node in best.drained}
    for m in best.moves:
        pods, targets = moved[m.source]
        pods.append(m.pod)
        targets.append(m.target)
    weights, snapshot = sim.config.worth, sim.snapshot
    return {
        node: weigh(snapshot[node].node, pods, expected_stay(targets, stay_of, weights), weights)
        for node, (pods, targets) in moved.items()
    }


def _plan_of(planner: Planner, best: Result, ran: list[str], verify: bool, now: float | None, stay_of: StayOf) -> Plan:
    sim = planner.sim
    config = sim.config
    worth = _worth_of(sim, best, stay_of)
    budget: DisruptionBudget | None = None
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
        closed = window_text(allowed, config.disruption.time_zone) if allowed.closed else None
        budget = DisruptionBudget(allowed.limit, allowed.budget, allowed.in_progress, closed)
    reasons = {w.name: best.undrainable[w.name] for w in planner.cands.work if w.name in best.undrainable}
    snapshot = sim.snapshot
    summary = Summary(
        on_demand_nodes=len(sim.candidates),
        spot_targets=len(sim.targets),
        spot_not_targets=sum(sim.not_targets.values()),
        drained=len(best.drained),
        pods_moved=len(best.moves),
        undrainable=len(reasons),
        pending_unschedulable=sim.pending_unschedulable,
        strategy=best.strategy.name,
        strategies_tried=tuple(ran),
        freed_cpu_millicores=sum(snapshot[n].allocatable("cpu") for n in best.drained),
        freed_memory_bytes=sum(snapshot[n].allocatable("memory") for n in best.drained),
        top_reasons=top_reasons(reasons),
        disruption_budget=budget,
        spot_too_young=sim.too_young if now is not None and config.disruption.min_target_age > 0 else None,
        spot_unsettled=sim.unsettled if snapshot.spot_outlook else None,
        verify_rejections=sim.verify_rejections if verify else None,
    )
    moves = tuple(Move(m.pod.key, m.source, m.target) for m in best.moves)
    by_name = planner.cands.by_name
    paced = pacing([by_name[n] for n in best.drained], planner.cands.pdbs)
    return Plan(moves, tuple(best.drained), reasons, summary, paced, worth)
