"""rescheduler.plan.planner: every plan is valid, checked independently; packing never loses to pusher's.

:func:`check_plan` is the acceptance checker. It shares no code path with the planner: it rebuilds a fresh
``ClusterSnapshot`` from the same lean objects, takes expendable pods off the spot targets (the scheduler
preempts them), replays the moves in order calling :func:`shared.fit.fits` for each, and checks targets,
PodDisruptionBudgets, spot ceilings and what is left on every drained node.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.planner import PORTFOLIO, PUSHER, plan
from shared.snapshot import ClusterSnapshot
from tests.builders.planner import (
    snapshot_state,
)
from tests.support.cluster_gen import DRAINABLE, FULL, generate
from tests.support.plan_check import check_plan
from tests.support.pusher import pusher_plan

# --- generated clusters ------------------------------------------------------------------------------------

GENERATED = [
    pytest.param(seed, nodes, nodes * density, profile, id=f"{name}-{nodes}-nodes-{density}-a-node-seed-{seed}")
    for seed, nodes, density, profile, name in [
        (1, 20, 12, DRAINABLE, "drainable"),
        (2, 30, 15, DRAINABLE, "drainable"),
        (3, 40, 12, DRAINABLE, "drainable"),
        (4, 60, 10, DRAINABLE, "drainable"),
        (5, 80, 14, DRAINABLE, "drainable"),
        (6, 30, 20, FULL, "full"),
        (7, 50, 15, FULL, "full"),
        (8, 40, 18, replace(DRAINABLE, spread=0.25, pod_affinity=0.1, anti_affinity=0.3), "affinity-heavy"),
        (9, 40, 12, replace(DRAINABLE, ceiling=0.4, pdb=0.8), "ceilings-and-pdbs"),
        (10, 40, 12, replace(DRAINABLE, expendable=0.15, host_ports=0.1), "expendable-and-ports"),
        (11, 25, 10, replace(DRAINABLE, reclaimed=0.4, tainted_spot_pools=0.7), "reclaim-heavy"),
        (12, 100, 12, DRAINABLE, "drainable"),
    ]
]


def _generated(seed: int, nodes: int, pods: int, profile: Any) -> ClusterSnapshot:
    return load_bytes(orjson.dumps({"kind": "List", "items": generate(seed, nodes, pods, profile)}))


@pytest.mark.parametrize(("seed", "nodes", "pods", "profile"), GENERATED)
def test_generated_plan_is_valid_and_never_worse_than_pusher(seed: int, nodes: int, pods: int, profile: Any) -> None:
    snap = _generated(seed, nodes, pods, profile)
    before = snapshot_state(snap)
    result = plan(snap, verify=True)
    assert snapshot_state(snap) == before, "the planner left the snapshot changed"
    assert result.summary.verify_rejections == 0
    check_plan(snap, result)
    baseline = pusher_plan(snap)
    check_plan(snap, baseline)
    assert len(result.drained) >= len(baseline.drained)
    assert result.summary.drained == len(result.drained)
    assert result.summary.pods_moved == len(result.moves)


@pytest.mark.parametrize(("seed", "nodes", "pods", "profile"), GENERATED[:8])
def test_planner_pusher_strategy_is_exactly_the_plain_pusher_algorithm(
    seed: int, nodes: int, pods: int, profile: Any
) -> None:
    # The plain implementation checks every candidate with shared.fit.fits: agreement move for move
    # cross-checks the planner's indexes and incremental filters too.
    snap = _generated(seed, nodes, pods, profile)
    ours = plan(snap, strategies=(PUSHER,), improve=False, verify=True)
    assert ours.summary.verify_rejections == 0
    theirs = pusher_plan(snap)
    assert ours.drained == theirs.drained
    assert ours.moves == theirs.moves


def test_some_generated_clusters_drain_nodes() -> None:
    # Guards the tests above against passing on plans that never move anything.
    drained = sum(len(plan(_generated(s, n, p, prof)).drained) for s, n, p, prof in (g.values for g in GENERATED[:5]))
    assert drained >= 10


def test_each_strategy_alone_gives_a_valid_plan() -> None:
    snap = _generated(3, 40, 480, DRAINABLE)
    for strategy in PORTFOLIO:
        result = plan(snap, strategies=(strategy,), verify=True, improve=False)
        assert result.summary.verify_rejections == 0
        check_plan(snap, result)
