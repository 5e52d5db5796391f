"""spotshift beside the real descheduler on the real control plane: the short replay (``replay.SHORT``: every spot
pool cut at minute 3, back at minute 6, 15 minutes) run by tests/support/real_replay.py, as bench/churn_real.py runs
the long one, and what its table claims checked on outcomes that do not depend on the machine's pace:

* in the *pending* world (nodes appear only for pending pods), spotshift brings pods back onto spot after spot
  returns (its placeholders ask for the spot nodes), while the descheduler as its Helm chart ships it leaves them on
  on-demand nodes (its policy has nothing that acts on a preferred affinity);
* in the *refill* world (spot groups refill their count), the descheduler tuned for spot (preferred node affinity,
  ``nodeFit``) moves the pods onto the refilled spot nodes, as the simulation's model of it does (on-demand
  node-minutes and evictions within ``replay.TOLERANCE``);
* no budget broken and no pod lost, whoever acts; every eviction the ledger saw went through the Eviction API and is
  one the policy's own log reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.churnlab import replay
from tests.support.controlplane import ControlPlane
from tests.support.real_replay import RunLog, run_replay

pytestmark = [pytest.mark.e2e, pytest.mark.peers]

RUN = replay.SHORT
PODS = sum(w.peak for w in replay.WORKLOADS)


def played(plane: ControlPlane, policy: str, world: str, work_dir: Path) -> replay.Outcome:
    outcome, log = run_replay(plane, policy, world, work_dir / f"{world}-{policy.replace(' ', '_')}", run=RUN)
    show(outcome, log)
    assert log.budget_samples > 100
    assert outcome.pdb_violations == 0, outcome
    assert outcome.lost_pods == 0, outcome
    if log.logged_evictions is not None:
        assert abs(outcome.evictions - log.logged_evictions) <= max(1, outcome.evictions // 20), (outcome, log)
    return outcome


def show(outcome: replay.Outcome, log: RunLog) -> None:
    print(f"{outcome.policy} / {outcome.world} in {log.seconds:.0f} s: {outcome}")
    print(f"evictions by the policy's log: {log.logged_evictions}; budget violations: {log.violations}")
    print("the cloud:", *log.events, sep="\n  ")
    print("the policy's log tail:", log.tail, sep="\n")


def test_in_the_pending_world_spotshift_brings_pods_back_to_spot_and_the_charts_descheduler_does_not(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    ours = played(control_plane, "spotshift", "pending", tmp_path)
    chart = played(control_plane, "descheduler (chart)", "pending", tmp_path)
    simulated = replay.simulate_outcome("spotshift", "pending", RUN)
    print(f"simulated spotshift: {simulated}")
    # After the cut every pod runs on on-demand nodes; once spot is back, only spotshift moves them.
    assert chart.on_demand_pods_at_end >= PODS * 0.9, chart
    assert ours.evictions >= PODS / 4, ours
    assert ours.on_demand_pods_at_end <= chart.on_demand_pods_at_end - PODS / 4, (ours, chart)
    assert simulated.on_demand_pods_at_end <= PODS - PODS / 4, simulated


def test_in_the_refill_world_the_tuned_descheduler_moves_pods_back_as_its_model_does(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    tuned = played(control_plane, "descheduler (spot-tuned)", "refill", tmp_path)
    simulated = replay.simulate_outcome("descheduler (spot-tuned)", "refill", RUN)
    print(f"simulated: {simulated}")
    assert tuned.reclaimed >= PODS * 0.9, tuned  # the pods ran on the spot groups when the cut came
    assert tuned.on_demand_pods_at_end <= PODS / 12, tuned
    assert tuned.moved_then_reclaimed == 0, tuned  # spot is not cut again after it returns
    assert simulated.evictions >= PODS / 2 and simulated.on_demand_node_minutes >= 60, simulated
    tolerance = replay.TOLERANCE
    # Evictions: at most the model's. Fewer happen when pods still pending at the return are bound to a refilled
    # spot node before their on-demand node joins: kube-scheduler's retry backoff runs on the wall clock, five
    # times slower than the trace, so that race is the machine's, not the rule's (every pod ends on spot either way).
    assert tuned.evictions <= simulated.evictions * (1 + tolerance), (tuned, simulated)
    minutes = simulated.on_demand_node_minutes
    assert abs(tuned.on_demand_node_minutes - minutes) <= tolerance * minutes, (tuned, simulated)
