"""The rescheduler's process life against the real control plane: SIGTERM mid-drain, a restart after a crash,
and two replicas electing one leader.

The world of these tests is :mod:`tests.support.rescheduler_world`. Every test that lets the rescheduler act
watches the namespace's PodDisruptionBudgets in a thread for the whole test and fails if any budget's
``currentHealthy`` falls below its ``desiredHealthy``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.support.controlplane import wait_for
from tests.support.rescheduler_world import (
    STATE_ANNOTATION,
    BudgetWatcher,
    Rescheduler,
    World,
    bind_pod,
    read_lease,
)

pytestmark = pytest.mark.e2e


def _held_world(world: World) -> tuple[str, str]:
    """An on-demand node with pods of a Deployment no scheduler serves: the test binds them by hand.

    The rescheduler's replacements then stay Pending until the test binds them, so a drain is reliably
    caught in the middle (tainted, pods evicted, waiting for replacements).
    """
    od = world.on_demand()
    spot = world.spot()
    world.deployment("held", 2, schedulerName=f"held-{world.label}", nodeSelector={})
    wait_for(lambda: len(world.pods("held")) == 2, timeout=60, what="the held pods to be created")
    for p in world.pods("held"):
        bind_pod(world, p["metadata"]["name"], od)
    world.ready("held")
    return od, spot


def _bind_pending(world: World, app: str, node: str) -> None:
    for p in world.pods(app):
        if not p["spec"].get("nodeName"):
            bind_pod(world, p["metadata"]["name"], node)


def _evictions_started(world: World, od: str) -> bool:
    on_od = [p for p in world.plane.pods(world.ns, "app=held") if p["spec"].get("nodeName") == od]
    return bool(world.our_taints(od)) and len(on_od) < 2


def test_sigterm_mid_drain_leaves_no_taint_and_no_lost_pod(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od, spot = _held_world(world)

    r = start(world.config())
    wait_for(lambda: _evictions_started(world, od), timeout=60, what="the drain to start evicting")
    r.signal(signal.SIGTERM)
    assert r.wait(30) == 0, r.tail()

    assert world.our_taints(od) == []
    assert STATE_ANNOTATION not in (world.node(od)["metadata"].get("annotations") or {})
    assert r.logged("interrupted")
    lease = read_lease(world.plane, world.ns, f"rescheduler-{world.label}")
    assert lease is not None and lease["spec"].get("holderIdentity", "") == "", "the lease is released on SIGTERM"
    assert len(world.pods("held")) == 2, "the ReplicaSet replaced every evicted pod"
    _bind_pending(world, "held", spot)
    assert len(world.ready("held")) == 2


def test_a_restart_after_a_crash_cleans_the_left_over_taint_and_resumes(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od, spot = _held_world(world)

    first = start(world.config(), name="first")
    wait_for(lambda: _evictions_started(world, od), timeout=60, what="the drain to start evicting")
    first.signal(signal.SIGKILL)  # no chance to clean up: the taint stays
    first.wait(10)
    assert world.our_taints(od) != []

    second = start(world.config(), name="second")
    # Once it holds the lease (the killed process's lease expires first), it removes what the first one left.
    second.wait_logged("removed the mark left on node", timeout=60)
    wait_for(lambda: world.events("SpotshiftTaintRemoved"), timeout=10, what="the TaintRemoved Event on the node")

    # Then it resumes: whatever is left on the node is drained again, and every replacement ends on spot.
    def settled() -> bool:
        _bind_pending(world, "held", spot)
        pods = world.pods("held")
        return len(pods) == 2 and all(p["spec"].get("nodeName") == spot for p in pods)

    wait_for(settled, timeout=120, what="every held pod to run on the spot node")
    assert len(world.ready("held")) == 2
    state = (world.node(od)["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    assert state in (None, "drained"), f"no drain left half done, got {state}"
    assert second.proc.poll() is None


def test_two_replicas_elect_one_leader_and_hand_over_on_shutdown(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    world.on_demand()
    world.spot()
    config = world.config()
    a = start(config, name="a")
    b = start(config, name="b")
    lease_name = f"rescheduler-{world.label}"

    def one_leader() -> tuple[Rescheduler, Rescheduler] | None:
        values = (a.metric("spotshift_rescheduler_leader"), b.metric("spotshift_rescheduler_leader"))
        if sorted(values, key=lambda v: v or 0) == [0.0, 1.0]:
            return (a, b) if values[0] == 1.0 else (b, a)
        return None

    leader, follower = wait_for(one_leader, timeout=60, what="exactly one leader")
    time.sleep(5)  # it stays that way over several renewals
    assert one_leader() == (leader, follower)
    lease = read_lease(world.plane, world.ns, lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith(leader.name + "_")
    assert leader.logged("plan:") and not follower.logged("plan:"), "only the leader plans and acts"

    leader.signal(signal.SIGTERM)
    assert leader.wait(30) == 0
    wait_for(lambda: follower.metric("spotshift_rescheduler_leader") == 1.0, timeout=15, what="the follower to lead")
    lease = read_lease(world.plane, world.ns, lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith(follower.name + "_")
    assert lease["spec"]["leaseTransitions"] >= 1
