"""The disruption ledger's rules (tests/support/disruption_ledger.py) on pod events fed by hand, and the
simulation's refill world (bench/churnlab/provisioner.py) that the real runs are compared with."""

from __future__ import annotations

from typing import Any

from bench.churnlab import replay
from bench.churnlab.books import Setup
from bench.churnlab.policies import Actor, config_of
from bench.churnlab.sim import play
from bench.churnlab.world import World
from tests.support.disruption_ledger import EVICTED_REASON, SETTLE, DisruptionLedger


class _Api:
    def __init__(self) -> None:
        self.budgets: list[dict[str, Any]] = []

    def list(self, path: str) -> list[dict[str, Any]]:
        return self.budgets

    def close(self) -> None:
        pass


class _Plane:
    def __init__(self) -> None:
        self.api = _Api()

    def new_api(self) -> Any:
        return self.api


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _pod(uid: str, owner: str, node: str = "", evicted: bool = False, app: str = "web") -> dict[str, Any]:
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": EVICTED_REASON}] if evicted else []
    return {
        "metadata": {
            "uid": uid,
            "name": f"pod-{uid}",
            "namespace": "ns",
            "labels": {"app": app},
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


def _ledger() -> tuple[DisruptionLedger, _Clock]:
    clock = _Clock()
    return DisruptionLedger(_Plane(), ["ns"], clock), clock  # type: ignore[arg-type]


def _budget(expected: int, healthy: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {
            "observedGeneration": 1,
            "expectedPods": expected,
            "desiredHealthy": max(0, expected - 1),
            "currentHealthy": healthy,
        },
    }


def test_a_budget_below_its_minimum_is_a_violation_unless_it_was_never_whole_or_a_reclaim_explains_it() -> None:
    ledger, clock = _ledger()
    api = ledger.pdb_api
    for expected, healthy in ((0, 0), (3, 0), (3, 1)):  # created before its pods, which start unready
        api.budgets = [_budget(expected, healthy)]  # type: ignore[attr-defined]
        ledger.sample_budgets()
    assert ledger.violations == []
    api.budgets = [_budget(3, 3)]  # type: ignore[attr-defined]
    ledger.sample_budgets()
    ledger._on_event("ADDED", _pod("a", "rs1", "spot-1"))
    ledger.node_ended("spot-1", 10.0)  # the cloud ends the node: the fall that follows is explained
    api.budgets = [_budget(3, 1)]  # type: ignore[attr-defined]
    ledger.sample_budgets()
    assert ledger.violations == []
    clock.t = 50.0
    for healthy in (3, 1, 1, 2, 1):  # whole again, then two falls: two violations
        api.budgets = [_budget(3, healthy)]  # type: ignore[attr-defined]
        ledger.sample_budgets()
    assert ledger.violations == [(50.0, "ns/web"), (50.0, "ns/web")]


def test_a_reclaim_explains_a_fall_that_the_budgets_status_shows_late() -> None:
    ledger, clock = _ledger()
    api = ledger.pdb_api
    api.budgets = [_budget(3, 3)]  # type: ignore[attr-defined]
    ledger.sample_budgets()
    ledger._on_event("ADDED", _pod("a", "rs1", "spot-1"))
    clock.t = 10.0
    ledger.node_ended("spot-1", 10.0)
    clock.t = 12.0
    ledger.sample_budgets()  # the pods are gone, the status not yet written: still whole
    clock.t = 14.0
    api.budgets = [_budget(3, 1)]  # type: ignore[attr-defined]
    ledger.sample_budgets()
    assert ledger.violations == []
    clock.t = 10.0 + SETTLE
    api.budgets = [_budget(3, 3)]  # type: ignore[attr-defined]
    ledger.sample_budgets()  # whole, long enough after the reclaim: explained no more
    api.budgets = [_budget(3, 1)]  # type: ignore[attr-defined]
    ledger.sample_budgets()
    assert ledger.violations == [(10.0 + SETTLE, "ns/web")]


def test_an_eviction_marks_the_owners_next_pod_as_moved_and_its_reclaim_counts() -> None:
    ledger, clock = _ledger()
    ledger.selectors["ns/web"] = {"app": "web"}
    ledger._on_event("ADDED", _pod("a", "rs1", "od-1"))
    ledger._on_event("ADDED", _pod("b", "rs1", "od-1"))
    clock.t = 100.0
    ledger._on_event("MODIFIED", _pod("a", "rs1", "od-1", evicted=True))
    ledger._on_event("DELETED", _pod("a", "rs1", "od-1", evicted=True))
    clock.t = 101.0
    ledger._on_event("ADDED", _pod("c", "rs1"))  # the replacement: moved
    ledger._on_event("ADDED", _pod("d", "rs1"))  # one to one: not moved
    clock.t = 130.0
    ledger._on_event("MODIFIED", _pod("c", "rs1", "spot-1"))
    ledger._on_event("MODIFIED", _pod("d", "rs1", "spot-1"))
    clock.t = 400.0
    ledger.node_ended("spot-1", 400.0)
    ledger._on_event("DELETED", _pod("c", "rs1", "spot-1"))
    ledger._on_event("DELETED", _pod("d", "rs1", "spot-1"))
    ledger._on_event("DELETED", _pod("b", "rs1", "od-1"))  # a plain delete: neither evicted nor reclaimed
    assert (ledger.evictions(), ledger.reclaimed(), ledger.moved_then_reclaimed()) == (1, 2, 1)
    assert ledger.unexplained_ends(before=1_000.0) == 1
    assert set(ledger.dirty) == {"ns/web"}
    # a, b bound at once; c and d pending from 101 to 130.
    assert abs(ledger.pending_pod_minutes(until=900.0) - 58.0 / 60.0) < 1e-9


def test_a_pod_never_bound_is_pending_until_the_end() -> None:
    ledger, clock = _ledger()
    clock.t = 60.0
    ledger._on_event("ADDED", _pod("a", "rs1"))
    assert ledger.pending_pod_minutes(until=180.0) == 2.0


def test_the_refill_world_starts_with_its_spot_groups_and_refills_them_after_the_cut() -> None:
    run = replay.SHORT
    world = World(
        seed=1,
        workloads=list(replay.WORKLOADS),
        trace=run.trace,
        setup=Setup(),
        config=config_of({}),
        spot_fraction=replay.SPOT_FRACTION,
        node_types=(replay.NODE_TYPE,),
        refill=replay.refill_of("refill"),
    )
    assert sorted(b.zone for b in world.nodes.values() if b.spot) == sorted(
        [z for z in ("zone-a", "zone-b", "zone-c") for _ in range(replay.REFILL)]
    )
    play(world, Actor(), run.back - 1.0)
    assert not any(b.spot for b in world.nodes.values())  # reclaimed, not refilled while the pool is cut
    # The pods wait for on-demand nodes: pending pods get no spot node in this world, even once spot is back.
    assert sorted(c.spot for c in world.provisioner.coming) == [False] * 12
    play(world, Actor(), run.back + replay.PROVISION_DELAY + 30.0)
    spot = [b for b in world.nodes.values() if b.spot]
    assert len(spot) == 3 * replay.REFILL
    assert all(b.born >= run.back for b in spot)
    assert len([b for b in world.nodes.values() if not b.spot]) == 12
