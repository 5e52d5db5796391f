"""Improvement search on the best greedy plan: bounded, deterministic, and only ever keeping a better plan.

Greedy passes make two typical mistakes. A node that takes the last disruption of two PodDisruptionBudgets
can cost two other nodes; holding back one drained node at a time and re-running the strategies finds the
better choice. And greedy best fit can split room badly (550m and 300m free on one node leave no gap for a
pod that fits exactly another way); for each node that stays, a bounded depth-first search for its pods in
the room the plan leaves (:func:`extend`), else packing the drained nodes' pods and its own together and
replaying them node by node (:func:`repack`), finds such packings. Every step applies real, checked moves,
so what the search returns is as valid as greedy's.

Budgets count work, not time (re-runs, node visits, search steps, replayed moves), so a plan never depends
on how busy the machine is; and the search runs only on clusters with at most :data:`IMPROVE_MAX_CANDIDATES`
drainable candidates. Under the run loop's time budget it also stops where the budget would not fit one more step
(:mod:`rescheduler.plan.pace`): that plan depends on the clock, as the portfolio's under that budget does.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

from rescheduler.plan.candidates import Candidate
from rescheduler.plan.pace import Pace
from rescheduler.plan.placement import PlannedMove, Planner, Result, capacity, choose, run
from rescheduler.plan.simulation import Placed
from rescheduler.plan.strategies import Strategy, TargetRule
from shared.model import Pod

__all__ = ["IMPROVE_MAX_CANDIDATES", "SEARCH_TOTAL", "improve", "extend", "repack", "search"]

IMPROVE_MAX_CANDIDATES = 400
IMPROVE_MAX_TRIALS = 40
REPACK_MAX_MOVES = 8000
SEARCH_STEPS = 1500
"""Moves tried per search."""
SEARCH_TOTAL = 4000
"""Moves tried by all searches of one plan."""
SEARCH_BRANCHES = 4
SWAP_EXTENSIONS = 3
SEARCH_SCAN = 24
IMPROVE_NODE_VISITS = 6000


def search(planner: Planner, movable: Sequence[Pod]) -> list[Placed] | None:
    """Depth-first search for a placement of all of ``movable`` when the greedy rules found none.

    A bounded search over each pod's few best candidates, largest pod first. Candidates that look alike
    (same free CPU, memory, pod slots and group) are tried once. At most :data:`SEARCH_STEPS` moves are
    tried per search and :data:`SEARCH_TOTAL` per plan. A pod's candidates in steadier spot pools are tried
    first (:attr:`~rescheduler.plan.simulation.Simulation.tiers`). The moves found are left applied; ``None``
    leaves the state as it was.
    """
    sim = planner.sim
    pods = sorted(movable, key=lambda p: (-sim.size(p), p.key))
    moved: list[Placed] = []
    budget = [min(SEARCH_STEPS, planner.search_left)]
    group_of = sim.static.group_of

    def candidates(pod: Pod) -> list[int]:
        """The pod's best-fitting targets by free CPU, distinct in shape, at most :data:`SEARCH_BRANCHES`
        (and at most :data:`SEARCH_SCAN` looked at, so a step costs the same on any cluster size)."""
        entries = sim.sorted_free(sim.feasible(pod).targets).entries
        cpu, mem = sim.floors(pod)
        seen: set[tuple[int, int, int, int]] = set()
        out: list[int] = []
        skip = sim.skip(pod)
        start = 0 if cpu is None else bisect.bisect_left(entries, (cpu, -1))
        for fc, idx in entries[start : start + SEARCH_SCAN]:
            fm, fp = sim.free_mem[idx], sim.free_pods[idx]
            if (mem is not None and fm < mem) or fp < 1:
                continue
            shape = (fc, fm, fp, group_of[idx])
            if shape in seen:
                continue
            if sim.accept(pod, idx, None, skip):
                seen.add(shape)
                out.append(idx)
                if len(out) == SEARCH_BRANCHES:
                    break
        return sorted(out, key=sim.tier_of.__getitem__) if sim.tiers else out  # steadier spot pools first

    def dfs(i: int) -> bool:
        if i == len(pods):
            return True
        pod = pods[i]
        for idx in candidates(pod):
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            moved.append((pod, sim.apply(pod, idx), idx))
            if dfs(i + 1):
                return True
            original, moved_pod, j = moved.pop()
            sim.undo(original, moved_pod, j)
        return False

    start = budget[0]
    found = dfs(0)
    planner.search_left -= start - budget[0]
    if found:
        return moved
    sim.undo_all(moved)
    return None


def extend(planner: Planner, best: Result, extra: Candidate) -> Result | None:
    """``best`` as it is, plus ``extra`` placed by :func:`search` in the room ``best`` leaves."""
    sim = planner.sim
    ledger = planner.ledger()
    for name in best.drained:
        ledger.commit(planner.cands.by_name[name])
    if ledger.refusal(extra) is not None or capacity(sim, extra) is not None:
        return None
    index = {t.name: i for i, t in enumerate(sim.targets)}
    applied: list[Placed] = []
    try:
        for pod, _, target in best.moves:
            idx = index[target]
            applied.append((pod, sim.apply(pod, idx), idx))
        if capacity(sim, extra) is not None:
            return None
        found = search(planner, extra.movable)
        if found is None:
            return None
        applied.extend(found)
        result = Result(best.strategy, held=best.held)
        result.moves = list(best.moves) + [PlannedMove(p, extra.name, sim.targets[i].name) for p, _, i in found]
        result.drained = [*best.drained, extra.name]
        result.undrainable = {k: v for k, v in best.undrainable.items() if k != extra.name}
        return result
    finally:
        sim.undo_all(applied)


def repack(planner: Planner, best: Result, extra: Candidate) -> Result | None:
    """``best``'s drained nodes plus ``extra``, packed anew: all their pods together, largest first,
    least contended room first; then replayed node by node with every check, as plans are executed.

    Node-by-node greedy fixes each node's placements before it sees the next node's pods; packing the
    union at once often finds room the sequence fragmented. ``None`` if the union does not fit, a
    budget or ceiling forbids it, or the node-by-node replay finds a move invalid.
    """
    sim = planner.sim
    nodes = [planner.cands.by_name[n] for n in best.drained] + [extra]
    ledger = planner.ledger()
    for w in nodes:
        if ledger.refusal(w) is not None:
            return None
        ledger.commit(w)

    def size(p: Pod) -> tuple[float, str]:
        return (-sim.size(p), p.key)

    pods = sorted((p for w in nodes for p in w.movable), key=size)
    target_of: dict[int, int] = {}
    placed: list[Placed] = []
    try:
        for p in pods:
            idx = choose(planner, p, TargetRule.TIERED, None, Counter())
            if idx is None:
                break
            target_of[id(p)] = idx
            placed.append((p, sim.apply(p, idx), idx))
        else:
            pods = []
    finally:
        sim.undo_all(placed)
    if pods:  # greedy did not fit the union: search
        target_of.clear()
        found = search(planner, [p for w in nodes for p in w.movable])
        if found is None:
            return None
        for original, moved, i in reversed(found):
            target_of[id(original)] = i
            sim.undo(original, moved, i)
    result = Result(best.strategy, held=best.held)
    applied: list[Placed] = []
    try:
        for w in nodes:
            for p in sorted(w.movable, key=size):
                idx = target_of[id(p)]
                if not sim.accept(p, idx, None):
                    return None
                applied.append((p, sim.apply(p, idx), idx))
                result.moves.append(PlannedMove(p, w.name, sim.targets[idx].name))
            result.drained.append(w.name)
    finally:
        sim.undo_all(applied)
    result.undrainable = {k: v for k, v in best.undrainable.items() if k != extra.name}
    return result


def _extend_any(planner: Planner, result: Result, attempts: int) -> Result | None:
    """``result`` plus one more node placed by search (:func:`extend`), trying at most ``attempts``
    candidates that stay in it; ``None`` if none fits."""
    for w in planner.cands.work:
        if attempts <= 0 or planner.search_left <= 0:
            return None
        name = w.name
        if w.blocker is None and name not in result.held and name in result.undrainable:
            attempts -= 1
            extended = extend(planner, result, w)
            if extended is not None:
                return extended
    return None


def improve(planner: Planner, best: Result, strategies: Sequence[Strategy], pace: Pace | None = None) -> Result:
    """Local search on the best plan, keeping any change that drains more nodes:

    1. hold back one drained node at a time and re-run the strategies;
    2. for each node that stays, :func:`extend`, else :func:`repack`.

    At most :data:`IMPROVE_MAX_TRIALS` re-runs and attempts, :data:`IMPROVE_NODE_VISITS` candidate nodes
    processed by the re-runs, :data:`REPACK_MAX_MOVES` moves replayed, and the search step budget. Under a time
    budget (``pace``), a re-run or attempt starts only while the budget fits one more as slow as the slowest step
    of the plan so far (:class:`~rescheduler.plan.pace.Pace`).
    """
    work = planner.cands.work
    if planner.cands.open_count() > IMPROVE_MAX_CANDIDATES:
        return best
    pace = pace if pace is not None else Pace(None, None)
    trials = 0
    visits = 0  # candidate nodes processed by the re-runs: the work budget, whatever the cluster size
    tried: set[str] = set()
    improved = True
    while improved and trials < IMPROVE_MAX_TRIALS:
        improved = False
        for name in list(best.drained):
            if name in tried or trials >= IMPROVE_MAX_TRIALS:
                continue
            tried.add(name)
            trials += 1
            for strategy in strategies:
                if visits + len(work) > IMPROVE_NODE_VISITS or not pace.allows():
                    break
                visits += len(work)
                before = pace.now()
                result = run(planner, strategy, best.held | {name})
                if len(result.drained) == len(best.drained):
                    # As many nodes, drained differently: the room left may now take one more.
                    result = _extend_any(planner, result, SWAP_EXTENSIONS) or result
                pace.took(before)
                if result.better_than(best):
                    best = result
                    improved = True
                    break
            if improved:
                break
    attempts = 0
    replayed = 0  # moves re-applied by extend/repack: their work budget
    for w in work:
        name = w.name
        if w.blocker is not None or name in best.held or name not in best.undrainable:
            continue
        cost = len(best.moves) + len(w.movable)
        if attempts >= IMPROVE_MAX_TRIALS or replayed + 2 * cost > REPACK_MAX_MOVES or not pace.allows():
            break
        attempts += 1
        replayed += 2 * cost
        before = pace.now()
        grown = extend(planner, best, w) or repack(planner, best, w)
        pace.took(before)
        if grown is not None:
            best = grown
    return best
