"""The candidate orders of the packing passes (:func:`rescheduler.plan.budgets.dynamic_order`) and pusher's
first fit (:func:`rescheduler.plan.placement.first_fit`).

The fast paths must give what the general code gives. Under the default ``rate-limit`` rule no budget is ever
scarce, so the re-ranking heap is skipped: the order must be the heap's own. pusher's first fit passes over
targets short of CPU in C: it must pick the targets its full scan picks.
"""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from rescheduler.plan.budgets import RateLimit, dynamic_order
from rescheduler.plan.candidates import Candidate, Candidates, PlanCache
from rescheduler.plan.placement import Planner
from rescheduler.plan.planner import PUSHER, plan
from rescheduler.plan.state import Simulation
from rescheduler.snapshot_io import load_bytes
from shared.config import Config
from tests.support.cluster_gen import PDB_HEAVY, generate


class _HeapRateLimit(RateLimit):
    """The rate-limit rule, taking the generic heap path."""

    competes = True


def _size(w: Candidate) -> float:
    return w.size


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_rate_limit_order_is_the_heaps_order(seed: int) -> None:
    items = generate(seed, 60, 60 * 14, PDB_HEAVY)
    snap = load_bytes(orjson.dumps({"kind": "List", "items": items}))
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    try:
        planner = Planner(sim, Candidates(sim, cache), search_steps=0)
        assert isinstance(planner.rule, RateLimit)
        held = frozenset(w.name for w in planner.cands.work[::7])
        fast = [w.name for w in dynamic_order(planner.cands.work, planner.rule, planner.ledger(), held, _size)]
        heap_rule = _HeapRateLimit(planner.rule.pdbs)
        slow = [w.name for w in dynamic_order(planner.cands.work, heap_rule, planner.ledger(), held, _size)]
    finally:
        sim.restore()
    assert fast == slow
    assert sorted(fast) == sorted(w.name for w in planner.cands.work)
    assert any(w.blocker is not None for w in planner.cands.work)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_first_fit_takes_the_same_targets_with_and_without_its_fast_scan(seed: int) -> None:
    """pusher's first fit passes over targets short of CPU without counting them, except under ``verify``
    (every accepted move re-checked), which scans target by target: both plans must be the same."""
    items = generate(seed, 60, 60 * 14, PDB_HEAVY)
    plans = []
    for verify in (False, True):
        snap = load_bytes(orjson.dumps({"kind": "List", "items": items}))
        plans.append(plan(snap, Config(), strategies=[PUSHER], improve=False, verify=verify))
    fast, slow = plans
    assert slow.summary["verify_rejections"] == 0
    assert fast.moves and fast.moves == slow.moves
    assert fast.drained == slow.drained and fast.reasons == slow.reasons


def test_static_answers_and_free_lists_are_the_same_for_the_same_object_or_an_equal_one() -> None:
    items = generate(6, 40, 40 * 14, PDB_HEAVY)
    snap = load_bytes(orjson.dumps({"kind": "List", "items": items}))
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    try:
        pods = [p for w in Candidates(sim, cache).work for p in w.movable]
        assert pods
        for pod in pods:
            answer = sim.feasible(pod)
            assert sim.feasible(pod) is answer
            assert sim.feasible(replace(pod)) == answer
            again = tuple(answer.targets)  # an equal tuple, another object when non-empty
            for resource in ("cpu", "memory"):
                sl = sim.sorted_free(answer.targets, resource)
                assert sim.sorted_free(answer.targets, resource) is sl
                assert sim.sorted_free(tuple(list(again)), resource) is sl
                assert sl.members == frozenset(answer.targets)
    finally:
        sim.restore()
