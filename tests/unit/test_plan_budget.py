"""The run loop's time budget never makes a plan worse than pusher's order on the same snapshot.

Seeded generated clusters with zonal PersistentVolumes (StatefulSets), PodDisruptionBudgets and the rest of
the generator's awkward parts. The budget is made to bite without depending on the machine: the run loop's
planner (:func:`rescheduler.run.default_planner`) is given a clock that advances one second per reading and
a half-second budget, so after the first packing strategy every other one is over budget. Both ``plan`` and
that planner must drain at least as many nodes as pusher's algorithm (:func:`tests.support.pusher.pusher_plan`),
and ``plan``'s result must pass the independent checker.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.planner import PUSHER, plan
from rescheduler.run import default_planner
from shared.config import Config
from shared.snapshot import ClusterSnapshot
from tests.support.cluster_gen import FULL, PDB_HEAVY, generate
from tests.support.plan_check import check_plan
from tests.support.pusher import pusher_plan

WITH_VOLUMES = replace(FULL, statefulset=0.25)
"""FULL with a quarter of workloads StatefulSets whose pods hold zonal PersistentVolumes."""
PDB_HEAVY_WITH_VOLUMES = replace(PDB_HEAVY, statefulset=0.25)

CASES = [
    pytest.param(seed, nodes, profile, id=f"{name}-{nodes}-nodes-seed-{seed}")
    for (seed, nodes), (name, profile) in itertools.product(
        [(11, 24), (12, 30), (13, 36), (14, 40)],
        [("volumes", WITH_VOLUMES), ("pdb-heavy-volumes", PDB_HEAVY_WITH_VOLUMES)],
    )
]


def stepping_clock(step: float = 1.0) -> Callable[[], float]:
    """A clock that advances ``step`` seconds at every reading: any budget below ``step`` bites at once."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def snapshot(items: list[dict[str, Any]]) -> ClusterSnapshot:
    return load_bytes(orjson.dumps({"kind": "List", "items": items}))


@pytest.mark.parametrize(("seed", "nodes", "profile"), CASES)
def test_plan_and_the_budgeted_run_loop_planner_free_at_least_what_pushers_order_frees(
    seed: int, nodes: int, profile: Any
) -> None:
    items = generate(seed, nodes, nodes * 14, profile)
    assert any(i["kind"] == "PersistentVolume" for i in items)
    config = Config()
    baseline = len(pusher_plan(snapshot(items), config).drained)
    full = plan(snapshot(items), config)
    check_plan(snapshot(items), full, config)
    assert len(full.drained) >= baseline
    budgeted = default_planner(0.5, clock=stepping_clock())(snapshot(items), config, {})
    assert len(budgeted.drains) >= baseline


def test_the_stepping_clock_makes_the_budget_bite() -> None:
    # Guards the test above against a budget that never bites: with it, only the first strategy and
    # pusher's order run.
    items = generate(13, 36, 36 * 14, WITH_VOLUMES)
    result = plan(snapshot(items), Config(), time_budget=0.5, clock=stepping_clock())
    assert result.summary.strategies_tried == (result.summary.strategies_tried[0], PUSHER.name)
    unbudgeted = plan(snapshot(items), Config())
    assert len(unbudgeted.summary.strategies_tried) > 2
