"""The real Karpenter (its KWOK cloud provider, tests/support/karpenter.py) on the real control plane, on the short
replay (bench/churnlab/replay.py ``SHORT``) run by tests/support/real_replay.py in its ``karpenter`` world: alone
(policy ``karpenter``), and beside spotshift (policy ``karpenter + spotshift``).

The trace: the replay's four Deployments (36 one-CPU pods, three budgets of ``maxUnavailable: 1``) on one NodePool
allowing spot and on-demand of the KWOK type of the replay's ``m.xlarge`` in three zones, consolidating
``WhenEmptyOrUnderutilized``; spot cut at ``SHORT.cut`` (every spot node gets the reclaim notice and ends
``replay.NOTICE`` later; the NodePool allows on-demand only) and back at ``SHORT.back``. The clock runs
``replay.COMPRESSION`` times faster than the wall clock; Karpenter's own timers cannot be compressed, so the run of
Karpenter alone goes on past the trace's end until it has no on-demand node left; the figures are counted
over the trace.

Beside Karpenter, spotshift runs with its defaults: the rescheduler leaves the nodes of a NodePool that
consolidates toward spot to Karpenter (``karpenter.defer_to_consolidation``), so it drains none of them.

What is asserted, on both runs: Karpenter provisions on-demand nodes during the outage and moves pods (evictions)
afterwards; alone, the run goes on until it has no on-demand node left; the cloud reclaimed spot nodes; no pod lost and
no budget violation (the disruption ledger of tests/support/disruption_ledger.py: a budget below its minimum with
no reclaim to explain it). What is printed: the run's figures, the nodes Karpenter (``karpenter.sh/disrupted``) and
spotshift (``spotshift.io/draining``) marked, and the cloud's events.

A third test checks the simulation's provisioner model against the real Karpenter as an autoscaler only (the
``karpenter-when-empty`` world, on the 30-minute trace so that emptied nodes are removed within it): spotshift's
rescheduler drains the on-demand nodes, Karpenter launches spot nodes for its placeholders and removes the emptied
nodes after the replay's removal delay; the on-demand node-minutes and evictions agree with the simulation of the
same world within ``replay.TOLERANCE``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.churnlab import replay
from tests.support.controlplane import ControlPlane
from tests.support.karpenter import DISRUPTED_TAINT, DRAIN_TAINT
from tests.support.real_replay import RunLog, run_replay

pytestmark = [pytest.mark.e2e, pytest.mark.peers]

RUN = replay.SHORT


def play(plane: ControlPlane, policy: str, tmp_path: Path, *, settle: bool) -> tuple[replay.Outcome, RunLog]:
    outcome, log = run_replay(plane, policy, "karpenter", tmp_path / "run", run=RUN, settle=settle)
    report(outcome, log)
    return outcome, log


def report(outcome: replay.Outcome, log: RunLog) -> None:
    both = [m for m in log.marks.values() if DISRUPTED_TAINT in m and DRAIN_TAINT in m]
    spotshift_first = sum(1 for m in both if m[DRAIN_TAINT] < m[DISRUPTED_TAINT])
    print(
        f"{outcome.policy}: on-demand node-minutes over [0, {RUN.length:.0f}s) {outcome.on_demand_node_minutes:.1f}; "
        f"no on-demand node left at t={outcome.on_demand_gone_at or 0.0:.0f}s (on-demand node-minutes until then "
        f"{outcome.on_demand_node_minutes_until_gone or 0.0:.1f}); evictions {outcome.evictions} (spotshift's by "
        f"its log: {'-' if log.logged_evictions is None else log.logged_evictions}); reclaimed {outcome.reclaimed}, "
        f"moved then reclaimed {outcome.moved_then_reclaimed}; pending pod-minutes "
        f"{outcome.pending_pod_minutes:.1f}; budget violations {outcome.pdb_violations}; lost {outcome.lost_pods}"
    )
    print(f"on-demand nodes by minute: {outcome.on_demand_series}")
    print(
        f"nodes the cloud reclaimed: {log.ended}; nodes marked by Karpenter: "
        f"{sum(1 for m in log.marks.values() if DISRUPTED_TAINT in m)}, by spotshift: "
        f"{sum(1 for m in log.marks.values() if DRAIN_TAINT in m)}, by both: {len(both)} (spotshift's mark first on "
        f"{spotshift_first}, Karpenter's on {len(both) - spotshift_first}); {log.seconds:.0f} s"
    )
    print("the cloud:", *log.events, sep="\n  ")
    print("API calls of the cloud that failed (retried on its next tick):", log.errors or "none")


def check_outcomes(outcome: replay.Outcome, log: RunLog) -> None:
    """What must hold on either run."""
    series = outcome.on_demand_series
    assert max(series[int(RUN.cut // 60) : int(RUN.back // 60) + 1]) > 0, series  # on-demand during the outage
    assert log.ended > 0 and outcome.reclaimed > 0  # the reclaim happened
    assert log.budget_samples > 100
    assert outcome.pdb_violations == 0, log.violations
    assert outcome.lost_pods == 0
    assert outcome.evictions > 0, "Karpenter's consolidation moved no pod"


def test_karpenter_alone_replaces_its_on_demand_nodes_by_spot_once_spot_is_back(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    outcome, log = play(control_plane, "karpenter", tmp_path, settle=True)
    check_outcomes(outcome, log)
    # The run ends once no on-demand node is left (it fails otherwise): when, and after the trace's return.
    assert outcome.on_demand_gone_at is not None and outcome.on_demand_gone_at > RUN.back
    assert log.logged_evictions is None  # no spotshift process ran
    assert not any(DRAIN_TAINT in m for m in log.marks.values())


def test_beside_karpenter_spotshift_leaves_the_consolidating_nodepool_to_it(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """spotshift with its defaults (``karpenter.defer_to_consolidation``) beside Karpenter: the webhook and the
    extender place the pods, Karpenter alone moves them back to spot; the rescheduler drains none of its nodes. The
    run ends with the trace (Karpenter's last consolidations, on its own clock, are the first test's)."""
    outcome, log = play(control_plane, "karpenter + spotshift", tmp_path, settle=False)
    check_outcomes(outcome, log)
    assert log.logged_evictions == 0
    assert not any(DRAIN_TAINT in m for m in log.marks.values())
    assert any(DISRUPTED_TAINT in m for m in log.marks.values())  # Karpenter's consolidation marked its nodes


def test_karpenter_as_the_autoscaler_provisions_and_removes_nodes_as_the_provisioner_model_does(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    run, world = replay.LONG, replay.KARPENTER_WHEN_EMPTY
    outcome, log = run_replay(control_plane, "spotshift", world, tmp_path / "run", run=run)
    simulated = replay.simulate_outcome("spotshift", world, run)
    print(f"real: {outcome}\nsimulated: {simulated}")
    print("the cloud:", *log.events, sep="\n  ")
    assert outcome.pdb_violations == 0, log.violations
    assert outcome.lost_pods == 0
    assert outcome.evictions == log.logged_evictions  # every eviction is the rescheduler's
    peak = max(simulated.on_demand_series)
    # Karpenter removed emptied on-demand nodes within the trace, as the model does.
    assert min(outcome.on_demand_series[int(run.back // 60) :]) <= peak / 2, outcome.on_demand_series
    assert min(simulated.on_demand_series[int(run.back // 60) :]) <= peak / 2, simulated.on_demand_series
    tolerance = replay.TOLERANCE
    minutes = simulated.on_demand_node_minutes
    assert abs(outcome.on_demand_node_minutes - minutes) <= tolerance * minutes, (outcome, simulated)
    assert abs(outcome.evictions - simulated.evictions) <= tolerance * simulated.evictions, (outcome, simulated)
