"""The candidate orders of the packing passes (:func:`rescheduler.plan.budgets.dynamic_order`).

Under the default ``rate-limit`` rule no budget is ever scarce, so the re-ranking heap is skipped; the order it
gives must be the heap's own.
"""

from __future__ import annotations

import orjson
import pytest

from rescheduler.plan.budgets import RateLimit, dynamic_order
from rescheduler.plan.candidates import Candidate, Candidates, PlanCache
from rescheduler.plan.placement import Planner
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
