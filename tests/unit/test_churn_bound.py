"""The churn benchmark's lower bound (bench/churnlab/sim.py ``lower_bound``): a bound on every policy's cost and
on-demand node-hours, integrated exactly over the pieces of the day where demand and spot limits are constant."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.churnlab.policies import POLICIES
from bench.churnlab.scenario import NODE_TYPES, PROFILES, TRACES, ZONES
from bench.churnlab.sim import Scenario, lower_bound, piece_cost, pieces, run, world_of

HOURS = 6 * 3_600.0


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(sorted(PROFILES)),
    trace=st.sampled_from(TRACES),
    seed=st.integers(1, 1_000),
    scale=st.sampled_from((0.2, 0.3)),
)
def test_the_bound_costs_at_most_every_policy_and_uses_at_most_its_on_demand_nodes(
    profile: str, trace: str, seed: int, scale: float
) -> None:
    scenario = Scenario(profile, trace, seed, scale)
    bound = lower_bound(scenario, until=HOURS)
    assert bound.cost > 0
    for policy in POLICIES:
        f = run(scenario, policy.name, until=HOURS)
        # A policy comes below the bound only by leaving pods waiting for a node (see lower_bound's docstring); a
        # pending pod-minute is worth at most the dearest pod's on-demand minute.
        assert f.cost >= bound.cost - f.pending_pod_minutes * _dearest_pod_per_minute(scenario), policy.name
        assert f.on_demand_node_hours >= bound.on_demand_node_hours - f.pending_pod_minutes / 60.0, policy.name


def _dearest_pod_per_minute(scenario: Scenario) -> float:
    nt = NODE_TYPES[0]
    share = max(max(w.cpu_m / nt.cpu_m, w.memory_mi / nt.memory_mi) for w in scenario.workloads())
    return nt.price * share / 0.94 / 60.0


def test_every_cronjob_run_and_trace_change_is_a_breakpoint() -> None:
    scenario = Scenario("batch", "spiky", 4)
    world = world_of(scenario, POLICIES[0], 0.3)
    cuts = pieces(world, scenario.trace_of(), 86_400.0)
    assert cuts[0] == 0.0 and cuts[-1] == 86_400.0 and cuts == sorted(set(cuts))
    for change in scenario.trace_of().changes:
        assert change.at in cuts
    for w in world.workloads.values():
        if w.kind == "CronJob":
            start = world.next_job[w.name]
            while start < 0:
                start += w.every
            assert start in cuts and start + w.runs_for in cuts, w.name


def test_the_cheapest_spot_pools_are_filled_first_and_the_rest_pays_on_demand() -> None:
    small = NODE_TYPES[0]
    cap = small.cpu_m * 0.94, small.memory_mi * 0.94
    limits = {(z, nt.name): 0 for z in ZONES for nt in NODE_TYPES}
    limits[(ZONES[0], small.name)] = 1
    limits[(ZONES[1], small.name)] = 1
    prices = dict.fromkeys(limits, 0.5)
    prices[(ZONES[1], small.name)] = 0.2
    # Two small nodes' worth of flexible CPU (memory at the same ratio), one pool at 0.2, one at 0.5: one node each.
    rate, od = piece_cost((0.0, 0.0), (2 * cap[0], 2 * cap[1]), limits, prices)
    assert rate == pytest.approx(small.price * (0.2 + 0.5))
    assert od == (0.0, 0.0)
    # Three nodes' worth: the third pays on-demand, and so does a pinned node's worth.
    rate, od = piece_cost((cap[0], cap[1]), (3 * cap[0], 3 * cap[1]), limits, prices)
    assert rate == pytest.approx(small.price * (0.2 + 0.5 + 1.0 + 1.0))
    assert od == pytest.approx((2 * cap[0], 2 * cap[1]))
    # Memory-heavy demand: the bound is the dearer resource's.
    rate, _ = piece_cost((0.0, 4 * cap[1]), (0.0, 0.0), limits, prices)
    assert rate == pytest.approx(4 * small.price)
