"""Pods waiting for a node are planned first (rescheduler.plan.waiting): what they hold, and what they do not."""

from __future__ import annotations

from typing import Any

from rescheduler.plan.stay_reasons import Kind
from rescheduler.plan.waiting import WAITING_LIMIT, release, reserve, waiting_pods
from shared.model import Pod
from tests.builders.planner import DEFAULT, cluster, node, planned, pod, snapshot_state


def waiting(
    name: str, *, cpu: str = "500m", priority: int = 0, created: str = "2026-01-01T00:00:00Z", **spec: Any
) -> Pod:
    """A pod kube-scheduler could not place (``PodScheduled=False/Unschedulable``), of a ReplicaSet."""
    return Pod.from_api(
        {
            "metadata": {
                "name": name,
                "namespace": "shop",
                "uid": f"uid-{name}",
                "creationTimestamp": created,
                "labels": {"app": name},
                "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}],
            },
            "spec": {
                "priority": priority,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
                **spec,
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
    )


def test_a_pod_with_an_impossible_node_selector_holds_nothing() -> None:
    typo = waiting("typo", nodeSelector={"example.com/pool": "does-not-exist"})
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1"), typo])
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert result.summary.waiting_pods == {"shop/typo": ()}
    assert result.summary.safe_to_act is True


def test_a_pod_that_fits_the_spot_room_a_drain_would_take_holds_that_drain() -> None:
    # spot-1 has room for 3 CPU: the waiting pod's 2, or od-1's pod's 2, not both.
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="3")],
        [pod("web-1", "od-1", cpu="2"), waiting("late", cpu="2")],
    )
    result = planned(snap)
    assert result.drained == ()
    why = result.reasons["od-1"]
    assert (why.kind, why.pod) == (Kind.WAITING_POD, "shop/late")
    assert "spot-1" in why.detail
    assert result.summary.waiting_pods == {"shop/late": ("od-1",)}
    assert result.summary.safe_to_act is False


def test_the_waiting_pod_takes_its_room_first_and_the_rest_still_drains() -> None:
    # Room for the waiting pod and for od-1's pod on spot-1; od-1 drains, the waiting pod holds nothing.
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="4")],
        [pod("web-1", "od-1", cpu="1"), waiting("late", cpu="2")],
    )
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert result.summary.waiting_pods == {"shop/late": ()}


def test_a_pod_that_could_use_the_emptied_node_holds_it_and_only_it() -> None:
    # The waiting pod needs 3 CPU: no node has that free (spot-1: 2), od-1 (4 CPU) would once emptied, od-2
    # (2 CPU) never.
    snap = cluster(
        [node("od-1"), node("od-2", cpu="2"), node("spot-1", spot=True, cpu="4")],
        [
            pod("web-1", "od-1", cpu="1500m"),
            pod("web-2", "od-2", cpu="1"),
            pod("cache", "spot-1", cpu="2"),
            waiting("big", cpu="3"),
        ],
    )
    result = planned(snap)
    assert result.drained == ("od-2",)
    why = result.reasons["od-1"]
    assert (why.kind, why.pod) == (Kind.WAITING_POD, "shop/big")
    assert "once it is emptied" in why.detail


def test_a_pod_that_fits_an_on_demand_node_now_holds_that_node() -> None:
    # Spot is full for it; od-1 has room: the scheduler places it there at its next try.
    snap = cluster(
        [node("od-1"), node("spot-1", spot=True, cpu="1")],
        [pod("web-1", "od-1", cpu="500m"), waiting("next", cpu="2")],
    )
    result = planned(snap)
    assert result.reasons["od-1"].kind is Kind.WAITING_POD
    assert "next try" in result.reasons["od-1"].detail


def test_gated_and_expendable_pods_hold_nothing() -> None:
    gated = waiting("gated", cpu="2", schedulingGates=[{"name": "example.com/quota"}])
    cheap = waiting("cheap", cpu="2", priority=-100)
    snap = cluster([node("od-1"), node("spot-1", spot=True, cpu="3")], [pod("web-1", "od-1", cpu="2"), gated, cheap])
    result = planned(snap)
    assert result.drained == ("od-1",)
    assert waiting_pods(snap, DEFAULT) == []  # type: ignore[index]


def test_waiting_pods_are_taken_by_priority_then_age() -> None:
    snap = cluster(
        [node("spot-1", spot=True)],
        [
            waiting("old-low", created="2026-01-01T00:00:00Z"),
            waiting("new-high", priority=100, created="2026-01-02T00:00:00Z"),
            waiting("new-low", created="2026-01-02T00:00:00Z"),
        ],
    )
    assert [p.name for p in waiting_pods(snap, DEFAULT)] == ["new-high", "old-low", "new-low"]  # type: ignore[index]


def test_the_higher_priority_pod_gets_the_room_the_other_then_holds_the_node() -> None:
    # spot-1 has 2 CPU free: "first" (priority 10) takes it; "second" fits nowhere now but od-1 emptied.
    snap = cluster(
        [node("od-1", cpu="3"), node("spot-1", spot=True, cpu="2")],
        [pod("web-1", "od-1", cpu="1"), waiting("second", cpu="2"), waiting("first", cpu="2", priority=10)],
    )
    result = planned(snap)
    assert result.reasons["od-1"].pod == "shop/second"
    assert result.summary.waiting_pods == {"shop/first": (), "shop/second": ("od-1",)}


def test_reserve_places_on_spot_and_release_restores_the_snapshot() -> None:
    snap = cluster([node("od-1"), node("spot-1", spot=True)], [pod("web-1", "od-1"), waiting("late")])
    before = snapshot_state(snap)
    w = reserve(snap, DEFAULT)
    assert [(p.key, p.node_name) for p in w.placed] == [("shop/late", "spot-1")]
    release(snap, w)
    assert snapshot_state(snap) == before


def test_waiting_pods_beyond_the_limit_are_counted_and_hold_nothing() -> None:
    # The first WAITING_LIMIT pods in the queue's order fit nowhere; the next one would fit the spot room od-1 needs.
    pods = [waiting(f"w-{i:03d}", priority=10, nodeSelector={"nowhere": "x"}) for i in range(WAITING_LIMIT)]
    late = waiting("late", cpu="2")
    snap = cluster([node("od-1"), node("spot-1", spot=True, cpu="3")], [pod("web-1", "od-1", cpu="2"), *pods, late])
    w = reserve(snap, DEFAULT)
    assert w.unjudged == 1 and w.placed == [] and w.holds == {}
    release(snap, w)
    assert planned(snap).drained == ("od-1",)
