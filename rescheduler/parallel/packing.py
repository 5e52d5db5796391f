"""The portfolio's packing passes on several cores: :func:`run_all`.

Each pass of :func:`rescheduler.plan.placement.run` starts from the same state and leaves it as it found it,
so the passes are independent. On a big cluster each one costs seconds (``bench/plan_scale.py``), and a
one-shot ``spot-rescheduler plan`` has the machine's other cores idle; so the process forks after the shared
work (parse, simulation, candidates) and each child runs some of the passes on its copy-on-write view of the
same objects, then sends back what it found as plain data: drained node names, each move as its pod's key and
the two nodes, and each kept node's reason. The parent rebuilds the results around its own pod objects, so
what follows (choosing the best result, the improvement search, the printed plan) cannot tell the two ways
apart: the plan is the same with any number of workers (``tests/unit/test_plan_parallel.py``).

Only where it is safe and worth it: a platform with ``fork``, more than one pass, more than one worker asked
for, and a cluster big enough (:data:`rescheduler.plan.planner.PARALLEL_MIN_CANDIDATES`; the pure planner
decides, and is handed :func:`passes` by the command). A child that fails (it could not be forked, it died,
its answer does not decode) costs nothing but time: the parent runs that child's passes itself. The
long-running ``run`` loop does not use this (it has watch threads, a time budget and a CPU limit of its own).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from functools import partial
from typing import Any

from rescheduler.parallel import forked
from rescheduler.parallel.forked import can_fork
from rescheduler.plan.placement import PlannedMove, Planner, Result, run
from rescheduler.plan.planner import Passes
from rescheduler.plan.strategies import LARGE_PORTFOLIO, Strategy
from shared.model import Pod

__all__ = ["run_all", "usable_cpus", "can_fork", "default_workers", "passes"]


def passes(workers: int) -> Passes | None:
    """What ``spot-rescheduler plan`` hands :func:`rescheduler.plan.planner.plan` to run its passes on
    ``workers`` processes; ``None`` (one after another, in this process) for 1 or where nothing forks."""
    if workers <= 1 or not can_fork():
        return None
    return partial(run_all, workers=workers)


_Packed = tuple[list[str], list[tuple[str, str, str]], dict[str, Any]]


def default_workers() -> int:
    """``spot-rescheduler plan``'s default: a process per strategy of the large portfolio when more than one
    CPU is usable, else 1. One per strategy rather than one per CPU because a pass that is a child's last
    need not undo its moves, which is a good part of a pass (``bench/plan_scale.py``)."""
    return len(LARGE_PORTFOLIO) if usable_cpus() > 1 and can_fork() else 1


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_all(planner: Planner, strategies: Sequence[Strategy], workers: int) -> list[Result]:
    """One pass of each strategy, in order, on up to ``workers`` forked processes.

    Strategy ``i`` runs in child ``i % workers``; this process waits for their answers, so no pass here has
    to undo its moves (a child's last pass need not either: the child ends with it). Passes whose child
    could not be forked or failed run here, one after another, after the others have answered.
    """
    strategies = list(strategies)
    workers = max(1, min(workers, len(strategies)))
    if workers == 1 or not can_fork():
        return [run(planner, s) for s in strategies]
    children: list[tuple[tuple[int, int], list[int]]] = []  # ((pid, read end), strategy indices)
    mine: list[int] = []
    for k in range(workers):
        share = list(range(k, len(strategies), workers))
        child = _fork(planner, [strategies[i] for i in share])
        if child is None:
            mine.extend(share)  # could not fork: run them here
        else:
            children.append((child, share))
    results: dict[int, Result] = {}
    pods = _movable_by_key(planner)
    for child, share in children:
        packed = _collect(child)
        for n, i in enumerate(share):
            if packed is None or n >= len(packed):
                results[i] = run(planner, strategies[i])  # the child failed: run its pass here
            else:
                results[i] = _unpack(strategies[i], packed[n], pods)
    for i in mine:
        results[i] = run(planner, strategies[i])
    return [results[i] for i in range(len(strategies))]


def _fork(planner: Planner, strategies: list[Strategy]) -> tuple[int, int] | None:
    """A child that runs ``strategies`` and answers with their packed results."""

    def work() -> bytes:
        last = len(strategies) - 1  # its moves need no undoing: the process ends with it
        packed = [_pack(run(planner, s, restore=i < last)) for i, s in enumerate(strategies)]
        return pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)

    return forked.fork(work)


def _collect(child: tuple[int, int]) -> list[_Packed] | None:
    """A child's answer, or ``None`` when it failed."""
    data = forked.read_back(child)
    if data is None:
        return None
    try:
        packed = pickle.loads(data)  # our own child's answer, over a pipe only this process holds
    except Exception:
        return None
    return packed if isinstance(packed, list) else None


def _pack(result: Result) -> _Packed:
    return (
        list(result.drained),
        [(m.pod.key, m.source, m.target) for m in result.moves],
        dict(result.undrainable),
    )


def _unpack(strategy: Strategy, packed: _Packed, pods: dict[str, Pod]) -> Result:
    drained, moves, undrainable = packed
    return Result(
        strategy,
        moves=[PlannedMove(pods[key], source, target) for key, source, target in moves],
        drained=drained,
        undrainable=undrainable,
    )


def _movable_by_key(planner: Planner) -> dict[str, Pod]:
    """Every pod a pass may move, by ``namespace/name``: the candidates' movable pods."""
    return {p.key: p for w in planner.cands.work for p in w.movable}
