"""The candidate orders of the packing passes (:func:`rescheduler.plan.budgets.dynamic_order`) and pusher's
first fit (:func:`rescheduler.plan.placement.first_fit`).

The fast paths must give what the general code gives. Under the default ``rate-limit`` rule no budget is ever
scarce, so the re-ranking heap is skipped: the order must be the heap's own. pusher's first fit passes over
targets short of CPU in C: it must pick the targets its full scan picks.
"""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.budgets import RateLimit, dynamic_order
from rescheduler.plan.candidates import Candidate, Candidates, PlanCache
from rescheduler.plan.placement import Planner
from rescheduler.plan.planner import PUSHER, plan
from rescheduler.plan.simulation import FullestFirst, Simulation, SortedFree
from shared.config import Config
from shared.model import Pod
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
    assert slow.summary.verify_rejections == 0
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


def _moved_simulation(seed: int) -> tuple[Simulation, list[tuple[object, object, int]]]:
    """A simulation of 300 nodes (about 150 targets: a few blocks of :class:`FullestFirst`) with a third of the
    candidates' pods moved to targets picked by the seed (capacity not checked: only the bookkeeping is under
    test)."""
    items = generate(seed, 300, 300 * 14, PDB_HEAVY)
    snap = load_bytes(orjson.dumps({"kind": "List", "items": items}))
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    pods = [p for w in Candidates(sim, cache).work for p in w.movable]
    rng = random.Random(seed)
    placed = []
    for pod in rng.sample(pods, len(pods) // 3):
        idx = rng.randrange(len(sim.targets))
        placed.append((pod, sim.apply(pod, idx), idx))
    return sim, placed


def _sorted_order(sim: Simulation) -> list[int]:
    return sorted(range(len(sim.targets)), key=sim.neg_requested.__getitem__)


@pytest.mark.parametrize("seed", [7, 8])
def test_fullest_first_is_the_sorted_order_after_any_moves_and_undos(seed: int) -> None:
    sim, placed = _moved_simulation(seed)
    try:
        assert sim.fullest_first().order == _sorted_order(sim)
        for k in range(len(placed) - 1, -1, -7):  # undo in steps, asking in between
            sim.undo_all(placed[k:])
            del placed[k:]
            assert sim.fullest_first().order == _sorted_order(sim)
        assert sim.fullest_first().order == _sorted_order(sim)
    finally:
        sim.undo_all(placed)
        sim.restore()


@pytest.mark.parametrize("seed", [7, 8])
def test_fullest_first_with_cpu_is_the_order_filtered_by_free_cpu_also_after_later_moves(seed: int) -> None:
    """The block bounds are taken with the order; pods placed afterwards only lower free CPU, and every
    target with enough free CPU must still be found, in order."""
    sim, placed = _moved_simulation(seed)
    try:
        order = sim.fullest_first()
        assert len(order.order) > 2 * FullestFirst.BLOCK  # several blocks
        pods = [p for info in sim.candidates for p in info.pods if p.requests.get("cpu", 0) > 0]
        rng = random.Random(seed)
        for step in range(40):
            for cpu in (1, 100, 250, 1000, 4000, 10**9):
                want = [i for i in order.order if sim.free_cpu[i] >= cpu]
                assert list(order.with_cpu(sim.free_cpu, cpu)) == want
            pod = pods[step]
            idx = rng.choice(order.order[: order.BLOCK * 2])
            placed.append((pod, sim.apply(pod, idx), idx))
    finally:
        sim.undo_all(placed)
        sim.restore()


@pytest.mark.parametrize("seed", [7, 8])
def test_free_lists_read_between_moves_are_sorted_by_the_free_amounts_now(seed: int) -> None:
    """A list re-sorts the targets changed since it was last read, one by one (a read after each move, or
    after two moves to one target) or whole (after many): always what sorting from scratch gives."""
    sim, placed = _moved_simulation(seed)
    try:
        pods = [p for info in sim.candidates for p in info.pods]
        sets = {sim.feasible(p).targets for p in pods if sim.feasible(p).targets}
        lists = [(sim.sorted_free(t, r), r) for t in sets for r in ("cpu", "memory")]
        assert max(len(sl.members) for sl, _ in lists) > 2 * SortedFree.RESORT  # one change: one by one

        def check() -> None:
            for sl, resource in lists:
                free = sim.free_mem if resource == "memory" else sim.free_cpu
                assert sl.entries == sorted((free[i], i) for i in sl.members)

        def move(pod: Pod, idx: int) -> None:
            placed.append((pod, sim.apply(pod, idx), idx))

        check()
        rng = random.Random(seed)
        spare = rng.sample(pods, 120)
        for pod in spare[:20]:
            move(pod, rng.randrange(len(sim.targets)))
            check()
        for a, b in zip(spare[20:40:2], spare[21:40:2], strict=True):  # twice to one target between reads
            idx = rng.randrange(len(sim.targets))
            move(a, idx)
            move(b, idx)
            check()
        for pod in spare[40:]:
            move(pod, rng.randrange(len(sim.targets)))
        check()  # many changed since the last read
        sim.undo_all(placed[-30:])
        del placed[-30:]
        check()
    finally:
        sim.undo_all(placed)
        sim.restore()
