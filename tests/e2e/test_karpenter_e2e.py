"""The real Karpenter (its KWOK cloud provider, tests/support/karpenter.py) on the real control plane, on a short
form of the replay's trace (bench/churnlab/replay.py): alone, and beside spotshift.

The trace: the replay's four Deployments (36 one-CPU pods, three budgets of ``maxUnavailable: 1``) on one NodePool
allowing spot and on-demand of the KWOK type of the replay's ``m.xlarge`` in three zones, consolidating
``WhenEmptyOrUnderutilized``; ``LENGTH`` trace seconds, spot cut at ``CUT`` (every spot node gets the reclaim notice
and ends ``NOTICE`` later; the NodePool allows on-demand only) and back at ``BACK``. The clock runs ``COMPRESSION``
times faster than the wall clock, as the replay's; Karpenter's own timers cannot be compressed (see
tests/support/karpenter.py), so the runs go on past ``LENGTH`` until Karpenter has no on-demand node left, and the
figures are counted over ``[0, LENGTH)``.

Beside Karpenter, spotshift runs with its defaults: the rescheduler leaves the nodes of a NodePool that
consolidates toward spot to Karpenter (``karpenter.defer_to_consolidation``), so it drains none of them.

What is asserted, on both runs: Karpenter provisions on-demand nodes during the outage and has none left once spot
is back and it has consolidated; no pod is lost (every Deployment whole, none pending); no budget below its
minimum once spot is back (the reclaim itself takes pods down with their nodes). What is measured and printed:
on-demand node-minutes, Karpenter's evictions (its ``Evicted`` events) and spotshift's, and the nodes that both
Karpenter (``karpenter.sh/disrupted``) and spotshift (``spotshift.io/draining``) marked.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from bench.churnlab import replay
from tests.support.controlplane import ControlPlane
from tests.support.karpenter import (
    DISRUPTED_TAINT,
    DRAIN_TAINT,
    NODECLASSES,
    NODEPOOLS,
    BudgetLog,
    Karpenter,
    KarpenterCloud,
    evictions_by,
    install_crds,
    node_class,
    node_pool,
    remove_pool,
)
from tests.support.provisioner import unschedulable
from tests.support.real_replay import budgets as replay_budgets
from tests.support.real_replay import deployment, evicted, rescheduler_flags
from tests.support.rescheduler_world import Rescheduler

pytestmark = [pytest.mark.e2e, pytest.mark.peers, pytest.mark.usefixtures("capacity_priority_class")]

K = replay.COMPRESSION
LENGTH = 900.0
"""Trace seconds counted."""
CUT = 120.0
BACK = 300.0
NOTICE = replay.NOTICE
SETTLE = 900.0
"""Wall seconds the run may go on past ``LENGTH`` for Karpenter to consolidate its last on-demand node."""


@dataclass
class Run:
    cloud: KarpenterCloud
    budgets: BudgetLog
    karpenter_evictions: list[float] = field(default_factory=list)
    """The trace times of Karpenter's evictions."""
    spotshift_evictions: int = 0
    settled_at: float = 0.0
    """The trace time at which Karpenter had no on-demand node left."""


@contextlib.contextmanager
def running_karpenter(plane: ControlPlane, tmp_path: Path) -> Iterator[Karpenter]:
    install_crds(plane)
    karpenter = Karpenter(plane, tmp_path / "karpenter.log")
    try:
        karpenter.start()
        yield karpenter
    finally:
        karpenter.stop()


@contextlib.contextmanager
def playing(
    plane: ControlPlane, namespace: str, karpenter: Karpenter, namespaces: list[str], r: Rescheduler | None
) -> Iterator[Run]:
    """The short trace on a NodePool of its own; yields the run (its cloud closed), then removes the Deployments,
    the NodePool and its nodes."""
    label = uuid.uuid4().hex[:8]
    pool = f"replay-{label}"
    plane.api.post(NODECLASSES, node_class(pool))
    plane.api.post(NODEPOOLS, node_pool(pool, pool, label, ["spot", "on-demand"]))
    replay_budgets(plane, namespace)
    cloud = KarpenterCloud(plane, namespaces, pool, label, K, cut=CUT, back=BACK, notice=NOTICE)
    run = Run(cloud, BudgetLog(plane, namespace, cloud))
    wall0 = time.time()
    try:
        for w in replay.WORKLOADS:
            plane.api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment(w, label, K))
        cloud.t0 = time.monotonic()
        cloud.start()
        deadline = time.monotonic() + LENGTH / K + SETTLE
        while cloud.now() < LENGTH or cloud.on_demand_count() > 0:
            assert time.monotonic() < deadline, f"on-demand nodes left: {[b.name for b in cloud.live()]}"
            karpenter.ensure_alive()
            plane.ensure_alive()
            if r is not None and r.proc.poll() is not None:
                raise AssertionError(f"the rescheduler exited ({r.proc.returncode}):\n{r.tail()}")
            assert cloud.is_alive(), f"the cloud stopped: {cloud.errors[-3:]}"
            run.budgets.sample()
            time.sleep(0.2)
        run.settled_at = cloud.now()
        cloud.close()
        for event in evictions_by(plane, namespace):
            stamp = str(event.get("eventTime") or event.get("firstTimestamp") or event["metadata"]["creationTimestamp"])
            run.karpenter_evictions.append((datetime.fromisoformat(stamp).timestamp() - wall0) * K)
        run.spotshift_evictions = len(evicted(r)) if r is not None else 0
        report(run)
        yield run
    finally:
        cloud.close()
        run.budgets.api.close()
        with contextlib.suppress(Exception):
            for w in replay.WORKLOADS:
                plane.api.delete_if_exists(f"/apis/apps/v1/namespaces/{namespace}/deployments/{w.name}")
        remove_pool(plane, pool, pool, label)


def report(run: Run) -> None:
    cloud = run.cloud
    during = sum(1 for t in run.karpenter_evictions if t < BACK)
    both = [m for m in cloud.marks.values() if DISRUPTED_TAINT in m and DRAIN_TAINT in m]
    spotshift_first = sum(1 for m in both if m[DRAIN_TAINT] < m[DISRUPTED_TAINT])
    print(
        f"on-demand node-minutes over [0, {LENGTH:.0f}s): {cloud.on_demand_node_minutes(LENGTH):.1f}; "
        f"Karpenter's evictions {len(run.karpenter_evictions)} ({during} before spot came back); "
        f"spotshift's evictions {run.spotshift_evictions}; no on-demand node left at t={run.settled_at:.0f}s "
        f"(on-demand node-minutes until then {cloud.on_demand_node_minutes(run.settled_at):.1f})"
    )
    print(f"on-demand nodes by minute: {cloud.series(run.settled_at)}")
    print(f"nodes the cloud reclaimed: {len(cloud.ended)}; nodes Karpenter created: {len(cloud.books)}")
    print(
        f"nodes marked by Karpenter: {sum(1 for m in cloud.marks.values() if DISRUPTED_TAINT in m)}, "
        f"by spotshift: {sum(1 for m in cloud.marks.values() if DRAIN_TAINT in m)}, by both: {len(both)} "
        f"(spotshift's mark first on {spotshift_first}, Karpenter's on {len(both) - spotshift_first})"
    )
    print("the cloud:", *cloud.events, sep="\n  ")
    print("API calls of the cloud that failed (retried on its next tick):", cloud.errors or "none")


def check_outcomes(plane: ControlPlane, namespace: str, run: Run) -> None:
    """What must hold on either run."""
    series = run.cloud.series(run.settled_at)
    assert max(series[int(CUT // 60) : int(BACK // 60) + 1]) > 0, series  # on-demand during the outage
    assert run.cloud.on_demand_count() == 0  # the loop ends on it: none left once spot is back
    assert len(run.cloud.ended) > 0  # the reclaim happened
    assert run.budgets.samples > 100
    assert [(t, name) for t, name in run.budgets.below if t >= BACK] == []
    for w in replay.WORKLOADS:
        pods = plane.wait_for_deployment(namespace, w.name, timeout=120)
        assert len(pods) == w.peak, (w.name, len(pods))
    stuck = [p["metadata"]["name"] for p in plane.api.list(f"/api/v1/namespaces/{namespace}/pods") if unschedulable(p)]
    assert stuck == []


def test_karpenter_alone_replaces_its_on_demand_nodes_by_spot_once_spot_is_back(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    with (
        running_karpenter(control_plane, tmp_path) as karpenter,
        playing(control_plane, namespace, karpenter, [namespace], None) as run,
    ):
        check_outcomes(control_plane, namespace, run)
        assert run.karpenter_evictions, "Karpenter's consolidation moved no pod"


def test_beside_karpenter_spotshift_leaves_the_consolidating_nodepool_to_it(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    spotshift: tuple[Path, str],
    start: Callable[..., Rescheduler],
) -> None:
    """spotshift with its defaults (``karpenter.defer_to_consolidation``) beside Karpenter: the webhook and the
    extender place the pods, Karpenter alone moves them back to spot; the rescheduler drains none of its nodes."""
    config, home = spotshift
    with running_karpenter(control_plane, tmp_path) as karpenter:
        r = start(config, *rescheduler_flags(K))
        with playing(control_plane, namespace, karpenter, [namespace, home], r) as run:
            check_outcomes(control_plane, namespace, run)
            assert run.spotshift_evictions == 0
            assert not any(DRAIN_TAINT in m for m in run.cloud.marks.values())
            assert run.karpenter_evictions, "Karpenter's consolidation moved no pod"
