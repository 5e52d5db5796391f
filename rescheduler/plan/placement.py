"""Greedy placement: one pass of a :class:`~rescheduler.plan.strategies.Strategy` over the candidates.

Nodes are taken in the strategy's order; for each, budgets and ceilings are checked for all of its pods at
once (:class:`~rescheduler.plan.budgets.Ledger`), then a fail-fast capacity check, then every pod to move is
placed on a spot target by the strategy's rule, each move checked against the state after all earlier
moves with the scheduler's filters in kube-scheduler's order. All or nothing: if one pod finds no room the
node's moves are undone (after other placement rules were tried, :data:`~rescheduler.plan.strategies.RETRIES`)
and the pod that did not fit, with the scheduler's reasons counted like a FitError, is why the node stays.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from rescheduler.plan.budgets import Ledger, budget_rule, count_conflicts, dynamic_order, workload_shares
from rescheduler.plan.candidates import Candidate, Candidates
from rescheduler.plan.replay import Attempt, Replays
from rescheduler.plan.simulation import FullestFirst, Placed, Simulation, Skip
from rescheduler.plan.stay_reasons import HELD_BACK_REASON, NO_SPOT_NODES_TEXT, Kind, StayReason
from rescheduler.plan.strategies import RETRIES, NodeOrder, PodOrder, Strategy, TargetRule
from shared.fit_reasons import ERR_INSUFFICIENT_CPU, ERR_INSUFFICIENT_MEMORY, ERR_TOO_MANY_PODS
from shared.model import Pod

__all__ = ["Planner", "PlannedMove", "Result", "run", "place", "choose", "capacity", "fit_error"]


class PlannedMove(NamedTuple):
    pod: Pod
    source: str
    target: str


@dataclass(slots=True)
class Result:
    """One pass's plan: moves in order, nodes drained, and why each other candidate it reached stays."""

    strategy: Strategy
    held: frozenset[str] = frozenset()
    moves: list[PlannedMove] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    undrainable: dict[str, StayReason] = field(default_factory=dict)

    def better_than(self, other: Result | None) -> bool:
        """More nodes drained, then fewer moves."""
        if other is None:
            return True
        return (len(self.drained), -len(self.moves)) > (len(other.drained), -len(other.moves))


class Planner:
    """The parts of one plan every pass shares: the simulation, the candidates, the budget rule, the
    workloads' starting splits, and the step budget left for searches (:mod:`rescheduler.plan.search`)."""

    def __init__(self, sim: Simulation, cands: Candidates, *, search_steps: int) -> None:
        self.sim = sim
        self.cands = cands
        self.rule = budget_rule(cands.pdbs, sim.config.rescheduler.pdb_rule)
        self.search_left = search_steps
        self.replays: Replays | None = None
        """The plan cache's record of the last plan's passes, replayed where nothing they read changed."""
        self.shares = workload_shares(cands)
        count_conflicts(cands, self.rule)

    def ledger(self) -> Ledger:
        return Ledger(self.rule, self.shares)


def run(planner: Planner, strategy: Strategy, held: frozenset[str] = frozenset(), *, restore: bool = True) -> Result:
    """One greedy pass; ``held`` are candidates not drained on purpose (the improvement step).

    The simulation is left as it was found, unless ``restore`` is false: then the drained nodes' moves stay
    applied (for a forked process that exits after its last pass, :mod:`rescheduler.parallel.packing`)."""
    sim = planner.sim
    result = Result(strategy, held=held)
    ledger = planner.ledger()
    applied: list[Placed] = []  # of committed nodes
    replays = planner.replays if restore and not sim.verify else None
    steps = replays.replay(strategy, held, sim, planner.cands) if replays is not None else None
    try:
        for w in _node_order(planner, strategy.node_order, ledger, held):
            name = w.name
            why = w.blocker
            if why is None and name in held:
                why = HELD_BACK_REASON
            if why is None:
                why = ledger.refusal(w)
            if why is None:
                why = capacity(sim, w)
            if why is None:
                search = partial(_place_all, planner, w, strategy)
                moved, why = steps.search(w, search) if steps is not None else search()[:2]
                if why is None:
                    applied.extend(moved)
                    for original, _, idx in moved:
                        result.moves.append(PlannedMove(original, name, sim.targets[idx].name))
                    ledger.commit(w)
                    result.drained.append(name)
                    continue
            elif steps is not None:
                steps.skipped(w)
            result.undrainable[name] = why
    except BaseException:
        sim.undo_all(applied)
        raise
    if restore:
        sim.undo_all(applied)
    return result


def _place_all(
    planner: Planner, w: Candidate, strategy: Strategy
) -> tuple[list[Placed], StayReason | None, bool, tuple[Attempt, ...]]:
    """:func:`place` by the strategy's rule, then by the rules of :data:`RETRIES` while the node's pods do not fit;
    whether the strategy's own rule placed them, and the attempts that failed (:class:`Attempt`), in order."""
    tried: list[Attempt] = []
    moved, why = place(planner, w, strategy.target, strategy.pod_order, tried)
    if why is not None and strategy.retry:
        # The usual rule left the room too fragmented for this node: other rules may not.
        for target, pod_order in RETRIES:
            again, still = place(planner, w, target, pod_order, tried)
            if still is None:
                return again, None, False, tuple(tried)
    return moved, why, True, tuple(tried)


def _size(w: Candidate) -> float:
    return w.size


def _cost(w: Candidate) -> float:
    return w.cost


def _node_order(planner: Planner, order: NodeOrder, ledger: Ledger, held: frozenset[str]) -> Iterable[Candidate]:
    cands = planner.cands
    if order is NodeOrder.CONFLICTS:
        return dynamic_order(cands.work, planner.rule, ledger, held, _size)
    if order is NodeOrder.CONFLICTS_SCARCITY:
        cands.scarcity()
        return dynamic_order(cands.work, planner.rule, ledger, held, _cost)
    key: Callable[[Candidate], Any]
    if order is NodeOrder.REQUESTED_CPU:
        key = lambda w: w.info.requested.get("cpu", 0)  # noqa: E731
    elif order is NodeOrder.PODS:
        key = lambda w: (len(w.movable), w.size)  # noqa: E731
    elif order is NodeOrder.SCARCITY:
        cands.scarcity()
        key = _cost
    else:
        key = _size
    return sorted(cands.work, key=key)  # stable: ties keep the snapshot's node order


def capacity(sim: Simulation, w: Candidate) -> StayReason | None:
    """Fail fast: the node's pods need more than every target has free together."""
    movable = w.movable
    if not movable:
        return None
    if not sim.targets:
        return StayReason(Kind.NO_SPOT_NODES, NO_SPOT_NODES_TEXT, pod=movable[0].key)
    free_cpu, free_mem, free_pods = sim.total_cpu, sim.total_mem, sim.total_pods
    cpu, memory = w.analysis.cpu, w.analysis.memory
    if cpu > free_cpu or memory > free_mem or len(movable) > free_pods:
        return StayReason(
            Kind.NO_CAPACITY,
            f"its {len(movable)} pod(s) need {_cpu(cpu)} CPU and {_mem(memory)} memory, "
            f"all spot nodes together have {_cpu(free_cpu)} CPU, {_mem(free_mem)} and {free_pods} pod slot(s) free",
        )
    return None


def sorted_pods(sim: Simulation, pods: Iterable[Pod], order: PodOrder) -> list[Pod]:
    """Largest first by ``order``; ties by the pod's name, so a plan does not depend on the order pods are
    listed in."""
    if order is PodOrder.CPU:
        return sorted(pods, key=lambda p: (-p.requests.get("cpu", 0), p.key))
    if order is PodOrder.MEMORY:
        return sorted(pods, key=lambda p: (-p.requests.get("memory", 0), p.key))
    return sorted(pods, key=lambda p: (-sim.size(p), p.key))


def place(
    planner: Planner, w: Candidate, target: TargetRule, pod_order: PodOrder, tried: list[Attempt] | None = None
) -> tuple[list[Placed], StayReason | None]:
    """Place every movable pod of ``w`` (applied), or none (undone) and why the first misfit failed; a failed
    attempt is added to ``tried``."""
    sim = planner.sim
    pods = sorted_pods(sim, w.movable, pod_order)
    order = sim.fullest_first() if target is TargetRule.FIRST_FIT else None
    moved: list[Placed] = []
    room: list[tuple[int, int]] = []  # each target's free cpu and memory when it was chosen
    for pod in pods:
        why: Counter[str] = Counter()
        idx = choose(planner, pod, target, order, why)
        if idx is None:
            if tried is not None:
                placed = tuple((p, i, *r) for (p, _, i), r in zip(moved, room, strict=True))
                tried.append(Attempt(target, placed, pod))
            sim.undo_all(moved)
            why.update(sim.feasible(pod).why_not)
            return [], fit_error(pod, len(sim.targets), why)
        room.append((sim.free_cpu[idx], sim.free_mem[idx]))
        moved.append((pod, sim.apply(pod, idx), idx))
    return moved, None


def choose(planner: Planner, pod: Pod, target: TargetRule, order: FullestFirst | None, why: Counter[str]) -> int | None:
    """The target for ``pod`` by ``target`` rule, or ``None`` (rejections counted in ``why``); ``order`` is
    :meth:`Simulation.fullest_first` taken before the node's first pod, needed for ``FIRST_FIT`` only.

    With the targets in tiers of their spot pool's expected stay (:attr:`Simulation.tiers`), the rule is applied
    to each tier in turn, steadiest first: a pod goes to a less steady pool only when no steadier one takes it."""
    tiers = planner.sim.tiers
    if not tiers:
        return _choose(planner, pod, target, order, why, None)
    for tier in range(len(tiers)):
        idx = _choose(planner, pod, target, order, why, tier)
        if idx is not None:
            return idx
    return None


def _choose(
    planner: Planner, pod: Pod, target: TargetRule, order: FullestFirst | None, why: Counter[str], tier: int | None
) -> int | None:
    """:func:`choose` among the targets of one tier (``None``: all)."""
    sim = planner.sim

    def among(members: tuple[int, ...]) -> tuple[int, ...]:
        return members if tier is None else sim.within(members, tier)

    feasible = sim.feasible(pod)
    if target is TargetRule.FIRST_FIT:
        return first_fit(sim, pod, order if order is not None else sim.fullest_first(), among(feasible.targets), why)
    if target is TargetRule.BEST_FIT_MEMORY:
        return best_fit(sim, pod, among(feasible.targets), why, "memory")
    groups = feasible.groups
    if target is TargetRule.TIERED and groups is not None and len(groups) > 1:
        group_targets = sim.static.group_targets
        floors = sim.floors(pod)
        for g in planner.cands.least_wanted_first(groups):
            idx = best_fit(sim, pod, among(group_targets[g]), why, floors=floors)
            if idx is not None:
                return idx
        return None
    return best_fit(sim, pod, among(feasible.targets), why)


def best_fit(
    sim: Simulation,
    pod: Pod,
    feasible: tuple[int, ...],
    why: Counter[str],
    resource: str = "cpu",
    *,
    floors: tuple[int | None, int | None] | None = None,
) -> int | None:
    """The feasible target with the least free ``resource`` (cpu or memory) that takes the pod; ``floors``
    is :meth:`Simulation.floors` of the pod, when the caller has it."""
    sl = sim.sorted_free(feasible, resource)
    cpu, mem = floors if floors is not None else sim.floors(pod)
    entries = sl.entries
    by_memory = resource == "memory"
    floor = mem if by_memory else cpu
    start = 0 if floor is None else bisect.bisect_left(entries, (floor, -1))
    if start:
        why[ERR_INSUFFICIENT_MEMORY if by_memory else ERR_INSUFFICIENT_CPU] += start
    other, need, lack = (
        (sim.free_cpu, cpu, ERR_INSUFFICIENT_CPU) if by_memory else (sim.free_mem, mem, ERR_INSUFFICIENT_MEMORY)
    )
    free_pods = sim.free_pods
    skip: Skip | None = None
    skip_made = False  # made for the first target past the checks above: most calls reach none
    for j in range(start, len(entries)):
        idx = entries[j][1]
        if free_pods[idx] < 1:
            why[ERR_TOO_MANY_PODS] += 1
            continue
        if need is not None and other[idx] < need:
            why[lack] += 1
            continue
        if not skip_made:
            skip, skip_made = sim.skip(pod), True
        if skip is not None:  # what accept() checks first, without the call: most scanned nodes end here
            known = skip.known(idx)
            if known is not None:
                why[known] += 1
                continue
        if sim.accept(pod, idx, why, skip):
            return idx
    return None


def first_fit(
    sim: Simulation, pod: Pod, order: FullestFirst, feasible: tuple[int, ...], why: Counter[str]
) -> int | None:
    """The first target in ``order`` (pusher's: fullest first) that takes the pod."""
    members = sim.sorted_free(feasible).members
    cpu, mem = sim.floors(pod)
    free_cpu, free_mem, free_pods = sim.free_cpu, sim.free_mem, sim.free_pods
    if cpu is not None and not sim.verify:
        found = _first_fit_fast(sim, pod, order, members, cpu, mem)
        if found is not None:
            return found
        # None: the scan below finds none either, and counts every rejection for the FitError.
    skip = sim.skip(pod)
    for idx in order.order:
        if idx not in members:
            continue
        if free_pods[idx] < 1:
            why[ERR_TOO_MANY_PODS] += 1
            continue
        if cpu is not None and free_cpu[idx] < cpu:
            why[ERR_INSUFFICIENT_CPU] += 1
            continue
        if mem is not None and free_mem[idx] < mem:
            why[ERR_INSUFFICIENT_MEMORY] += 1
            continue
        if skip is not None:  # as in best_fit
            known = skip.known(idx)
            if known is not None:
                why[known] += 1
                continue
        if sim.accept(pod, idx, why, skip):
            return idx
    return None


def _first_fit_fast(
    sim: Simulation, pod: Pod, order: FullestFirst, members: frozenset[int], cpu: int, mem: int | None
) -> int | None:
    """:func:`first_fit`'s answer when it has one, without counting rejections: the targets with too little
    free CPU (most of them, fullest first) are passed over in C (:meth:`FullestFirst.with_cpu`), and the rest
    are checked as :func:`first_fit` checks them, in the same order, so :meth:`Simulation.accept` sees the same
    targets and learns the same closed domains."""
    free_mem, free_pods = sim.free_mem, sim.free_pods
    skip = sim.skip(pod)
    scratch: Counter[str] = Counter()
    for idx in order.with_cpu(sim.free_cpu, cpu):
        if idx not in members or free_pods[idx] < 1:
            continue
        if mem is not None and free_mem[idx] < mem:
            continue
        if skip is not None and skip.known(idx) is not None:
            continue
        if sim.accept(pod, idx, scratch, skip):
            return idx
    return None


def fit_error(pod: Pod, n: int, why: Counter[str]) -> StayReason:
    """kube-scheduler's FitError wording: ``0/12 spot nodes are available: 8 Insufficient cpu, ...``; the most
    frequent reason is the reason's ``cause``."""
    if n == 0:
        return StayReason(Kind.NO_SPOT_NODES, NO_SPOT_NODES_TEXT, pod=pod.key)
    ranked = sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked:
        return StayReason(Kind.NO_FIT, f"0/{n} spot nodes are available", pod=pod.key)
    parts = ", ".join(f"{count} {msg}" for msg, count in ranked)
    return StayReason(Kind.NO_FIT, f"0/{n} spot nodes are available: {parts}", pod=pod.key, cause=ranked[0][0])


def _cpu(milli: int) -> str:
    return f"{milli / 1000:.2f}".rstrip("0").rstrip(".") if milli % 1000 else str(milli // 1000)


def _mem(b: int) -> str:
    return f"{b / 2**30:.1f}Gi"
