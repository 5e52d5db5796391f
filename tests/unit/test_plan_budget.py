"""The run loop's time budget never makes a plan worse than pusher's order on the same snapshot.

Seeded generated clusters with zonal PersistentVolumes (StatefulSets), PodDisruptionBudgets and the rest of
the generator's awkward parts. The budget is made to bite without depending on the machine: the run loop's
planner (:func:`rescheduler.run.default_planner`) is given a clock that advances one second per reading and
a half-second budget, so after the first packing strategy every other one is over budget. Both ``plan`` and
that planner must drain at least as many nodes as pusher's algorithm (:func:`tests.support.pusher.pusher_plan`),
and ``plan``'s result must pass the independent checker. The improvement search keeps the budget too: a clock
that advances only while it re-runs a pass shows it starts no re-run the budget would not fit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.pace import Pace
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


class WorkClock:
    """A clock that stands still except while the improvement search re-runs a pass: each re-run takes ``step``
    seconds. The portfolio's passes take no time, so only the improvement meets the budget."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reruns = 0.0, step, 0

    def __call__(self) -> float:
        return self.now

    def counting(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def rerun(*args: Any, **kwargs: Any) -> Any:
            self.reruns += 1
            self.now += self.step
            return real(*args, **kwargs)

        return rerun


def test_the_improvement_search_starts_no_rerun_the_budget_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import rescheduler.plan.search as search

    items = generate(3, 20, 20 * 14, FULL)  # four nodes drained: seven strategies re-run for each
    free = WorkClock(0.3)
    monkeypatch.setattr(search, "run", free.counting(search.run))
    unbudgeted = plan(snapshot(items), Config())
    assert free.reruns > 3  # without a budget the search re-runs more than the budget below lets it
    monkeypatch.undo()
    budgeted = WorkClock(0.3)
    monkeypatch.setattr(search, "run", budgeted.counting(search.run))
    result = plan(snapshot(items), Config(), time_budget=1.0, clock=budgeted)
    # 0.0, 0.3 and 0.6 s spent leave room for one more 0.3 s re-run; 0.9 s does not.
    assert budgeted.reruns == 3
    assert len(result.drained) >= len(pusher_plan(snapshot(items), Config()).drained)
    assert len(unbudgeted.drained) >= len(result.drained)


def test_a_pace_judges_the_next_step_by_the_slowest_so_far() -> None:
    now = [10.0]
    pace = Pace(lambda: now[0], 1.0)
    assert pace.allows()
    before = pace.now()
    now[0] += 0.4
    assert pace.took(before) == pytest.approx(0.4)
    assert pace.allows()  # 0.4 spent + 0.4 for a step like the slowest: fits
    assert not pace.allows(estimate=0.7)  # a step known to take longer: does not
    now[0] += 0.3
    assert not pace.allows()  # 0.7 + 0.4 > 1.0
    assert Pace(lambda: now[0], 1.0).allows(estimate=1.0)  # a step that fills the budget exactly still fits


def test_a_pace_without_a_budget_allows_every_step_and_a_budget_needs_a_clock() -> None:
    assert Pace(None, None).allows(estimate=1e9)
    with pytest.raises(ValueError, match="clock"):
        Pace(None, 1.0)
