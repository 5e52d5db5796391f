"""The churn simulation validated on the real control plane: bench/churnlab/replay.py's 30-minute trace played on
node stand-ins, with the real webhook, the real kube-scheduler calling the extender, the real controllers and
``spot-rescheduler run`` (capacity mode on), against the simulation of the same trace.

What runs here, besides the control plane of tests/support/controlplane:

* ``spot-extender`` (tests/support/extender_server.py) with the replay's configuration, serving the webhook
  (deploy/base/mutatingwebhook.yaml, narrowed to this test's namespace by a label) and the extender of
  deploy/scheduler/base/kube-scheduler-v1.yaml (the ``spotshift-scheduler`` profile, which the webhook sets on
  every pod);
* the cloud of tests/support/replay_cloud.py: the spot market of the trace and a provisioner that decides as the
  simulation's does;
* the Deployments and budgets of the replay, kept by kube-controller-manager; pods turn Ready
  ``READY_AFTER`` after they run (the kubelet stand-in's ``ready-after`` annotation);
* ``spot-rescheduler run`` with the replay's configuration, every duration divided by ``COMPRESSION``.

The trace's clock runs ``COMPRESSION`` times faster than the wall clock; the figures are read back in trace time:
on-demand node-minutes from each node's recorded lifetime, evictions from the rescheduler's log. Both must be
within ``TOLERANCE`` of the simulation's. The product's guarantees are checked besides: no budget below its
minimum while spotshift acts, every Deployment whole at the end, no workload pod pending.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.churnlab import replay
from tests.support.controlplane import ControlPlane
from tests.support.provisioner import unschedulable
from tests.support.replay_cloud import Cloud
from tests.support.rescheduler_world import Rescheduler
from tests.support.spotshift_stack import (
    BudgetLog,
    evicted,
    replay_budgets,
    replay_deployment,
    rescheduler_flags,
    serving_spotshift,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("capacity_priority_class")]

K = replay.COMPRESSION


@pytest.fixture
def spotshift(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """spotshift serving the webhook and the extender (tests/support/spotshift_stack.py); yields the path of the
    replay's configuration and spotshift's own namespace."""
    with serving_spotshift(control_plane, namespace, tmp_path, K) as served:
        yield served


def test_the_replayed_trace_matches_the_simulation(
    control_plane: ControlPlane,
    namespace: str,
    spotshift: tuple[Path, str],
    start: Callable[..., Rescheduler],
) -> None:
    simulated, _ = replay.simulate_replay()
    label = uuid.uuid4().hex[:8]
    api = control_plane.api
    config, home = spotshift
    r = start(config, *rescheduler_flags(K))
    replay_budgets(control_plane, namespace)
    cloud = Cloud(control_plane, [namespace, home], label, K)
    budgets = BudgetLog(control_plane, namespace, cloud)
    try:
        for w in replay.WORKLOADS:
            api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", replay_deployment(w, label, K))
        cloud.t0 = time.monotonic()
        cloud.start()
        # The trace's clock drives the run; the figures come from what was observed, not from this loop's pace.
        while cloud.now() < replay.LENGTH:
            if r.proc.poll() is not None:
                raise AssertionError(f"the rescheduler exited ({r.proc.returncode}):\n{r.tail()}")
            control_plane.ensure_alive()
            assert cloud.is_alive(), f"the cloud stopped: {cloud.errors[-3:]}"
            budgets.sample()
            time.sleep(0.2)
        cloud.stop.set()
        cloud.join(60)
        real_minutes = cloud.on_demand_node_minutes(replay.LENGTH)
        real_evictions = len(evicted(r))
        series = cloud.series(replay.LENGTH)
        print(
            f"replay: on-demand node-minutes real {real_minutes:.1f} / simulated "
            f"{simulated.on_demand_node_minutes:.1f}; evictions real {real_evictions} / simulated {simulated.evictions}"
        )
        print(f"on-demand nodes by minute, real:      {series}")
        print(f"on-demand nodes by minute, simulated: {replay.by_minute(simulated.on_demand_series)}")
        print("the cloud:", *cloud.events, sep="\n  ")
        print("API calls of the cloud that failed (retried on its next tick):", cloud.errors or "none")

        # What the product guarantees: no budget broken by a drain (the reclaim itself takes pods down with their
        # nodes; spotshift acts only once spot is back), no pod lost, nothing pending.
        assert budgets.samples > 100
        assert [(t, name) for t, name in budgets.below if t >= replay.BACK] == []
        assert simulated.pdb_violations == 0 and simulated.lost_pods == 0
        for w in replay.WORKLOADS:
            pods = control_plane.wait_for_deployment(namespace, w.name, timeout=120)
            assert len(pods) == w.peak, (w.name, len(pods))
        stuck = [p["metadata"]["name"] for p in api.list(f"/api/v1/namespaces/{namespace}/pods") if unschedulable(p)]
        assert stuck == []

        # The figures: within the tolerance of the simulation's, which are large enough for it to mean something.
        assert simulated.on_demand_node_minutes >= 60 and simulated.evictions >= 20, simulated
        assert (
            abs(real_minutes - simulated.on_demand_node_minutes) <= replay.TOLERANCE * simulated.on_demand_node_minutes
        )
        assert abs(real_evictions - simulated.evictions) <= replay.TOLERANCE * simulated.evictions
    finally:
        cloud.close()
        budgets.api.close()
