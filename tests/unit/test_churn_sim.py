"""Properties of the churn benchmark's simulated cluster (bench/churn.py): what any policy's day must respect.

Each runs a few simulated hours of a spiky trace (spot cuts every 40-90 minutes) so that reclaims, scale steps,
drains and the provisioner all act.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict

import pytest

from bench.churnlab import replay
from bench.churnlab.replay import simulate_replay
from bench.churnlab.scenario import SCALE_EVERY, replicas
from bench.churnlab.sim import Scenario, figures, simulate
from bench.churnlab.world import World

HOURS = 4 * 3_600.0
SCENARIO = Scenario("pdb-heavy", "spiky", 7)


def _owned(world: World) -> dict[str, int]:
    out: dict[str, int] = {}
    for book in world.pods.values():
        out[book.job or book.workload] = out.get(book.job or book.workload, 0) + 1
    return out


@pytest.mark.parametrize(
    "policy",
    ["none", "spotshift", "spotshift no-capacity", "pusher-like", "descheduler (chart)", "descheduler (spot-tuned)"],
)
def test_capacity_budgets_and_pods_hold_through_the_hours(policy: str) -> None:
    seen = {"ticks": 0, "pods": 0}

    def check(world: World) -> None:
        seen["ticks"] += 1
        # Pods conserved: every Deployment and StatefulSet has its replicas (running or pending) after each tick,
        # whatever was evicted, reclaimed or scaled; the API server holds exactly the pods the world books.
        owned = _owned(world)
        for w in world.workloads.values():
            if w.kind == "Deployment":
                assert owned.get(w.name, 0) == replicas(w, world.scaled_at), w.name
            elif w.kind == "StatefulSet":
                assert owned.get(w.name, 0) == w.peak, w.name
        stored = {k for k, o in world.server.store["pods"].items() if o["spec"].get("priority", 0) >= 0}
        assert stored == set(world.pods)
        seen["pods"] = max(seen["pods"], len(stored))

    world = simulate(SCENARIO, policy, until=HOURS, check=True, after_tick=check)
    assert seen["ticks"] > 100 and seen["pods"] > 300
    assert world.tally.capacity_breaches == 0  # node capacity never exceeded (checked every tick)
    assert world.tally.pdb_violations == 0  # no eviction let through against a budget judged from the pods
    assert world.tally.lost_pods == 0
    assert world.tally.reclaimed_pods > 0  # the trace did reclaim nodes with pods on them


def test_spotshift_moves_pods_back_and_the_default_scheduler_alone_does_not_evict() -> None:
    spotshift = simulate(SCENARIO, "spotshift", until=HOURS)
    none = simulate(SCENARIO, "none", until=HOURS)
    assert spotshift.tally.evictions > 0
    assert none.tally.evictions == 0
    assert spotshift.scaled_at % SCALE_EVERY == 0


def test_the_same_seed_gives_the_same_figures() -> None:
    level = logging.root.manager.disable
    runs = [simulate(SCENARIO, "spotshift", until=2 * 3_600.0) for _ in range(2)]
    assert logging.root.manager.disable == level  # the drains' logs are quiet only during a run
    a, b = (asdict(figures("spotshift", w.tally, SCENARIO.trace_of())) for w in runs)
    assert a == b
    other = simulate(Scenario("pdb-heavy", "spiky", 3), "spotshift", until=2 * 3_600.0)
    assert asdict(figures("spotshift", other.tally, SCENARIO.trace_of())) != a


def test_the_replay_scenario_is_the_same_every_run_and_large_enough_to_compare() -> None:
    # tests/e2e/test_churn_replay_e2e.py compares the real control plane's figures with these within 10%: they
    # must not vary from run to run, and must be large enough for 10% to be more than one node or one eviction.
    a, world = simulate_replay()
    b, _ = simulate_replay()
    assert a == b
    assert a.on_demand_node_minutes >= 60 and a.evictions >= 20
    assert a.pdb_violations == 0 and a.lost_pods == 0
    assert world.tally.capacity_breaches == 0 and world.tally.reclaimed_pods > 0


def test_a_node_that_joins_takes_its_pods_before_the_provisioner_looks_again() -> None:
    # The cut leaves 36 one-CPU pods pending; three fit an m.xlarge: 12 on-demand nodes, not 12 and then 12 more
    # for the same pods, still unbound when the provisioner's next scan came with the nodes' arrival.
    figures, _ = simulate_replay()
    pods = sum(w.peak for w in replay.WORKLOADS)
    assert max(n for _, n in figures.on_demand_series) == math.ceil(pods / 3)


def test_a_pod_gone_behind_the_controllers_back_counts_as_lost() -> None:
    world = simulate(SCENARIO, "none", until=600.0)
    assert world.tally.lost_pods == 0
    key = next(iter(world.pods))
    world.server.remove("pods", key)  # neither deleted by the world nor evicted: the controller never hears of it
    world.tick(10.0)
    assert world.tally.lost_pods == 1
    for _ in range(5):  # still gone: one pod, not one a tick
        world.tick(10.0)
    assert world.tally.lost_pods == 1
