"""A PodDisruptionBudget's status computed from its pods when it is absent or stale (shared/disruption.py), by
the rules of kube-controller-manager's disruption controller (Kubernetes 1.20,
pkg/controller/disruption/disruption.go: getExpectedPodCount, countHealthyPods, updatePdbStatus, failSafe)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.safety import REFUSE_PDB_EXHAUSTED, pdb_refusals
from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT
from shared.disruption import computed_status, with_computed_status
from shared.model import PDB, Pod
from tests import builders as b

Json = dict[str, Any]


def web(name: str, *, ready: bool = True, owner: str | None = "rs-web", deleting: bool = False, **kw: Any) -> Pod:
    raw = b.pod_json(
        name,
        node_name="n1",
        labels={"app": "web"},
        owners=[b.owner("ReplicaSet", owner)] if owner else None,
        conditions=[{"type": "Ready", "status": "True" if ready else "False"}],
        terminating=deleting,
        **kw,
    )
    return Pod.from_api(raw)


def budget_json(
    *,
    generation: int | None = 2,
    status: Json | None = None,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> Json:
    raw = b.pdb_json(
        "web",
        selector={"matchLabels": {"app": "web"}},
        min_available=min_available,
        max_unavailable=max_unavailable,
        status=status,
    )
    if generation is not None:
        raw["metadata"]["generation"] = generation
    return raw


def stale(**kw: Any) -> PDB:
    """A budget edited to generation 2 whose status the controller computed for generation 1 (allowing 5)."""
    status = {"observedGeneration": 1, "disruptionsAllowed": 5, "currentHealthy": 9, "desiredHealthy": 4}
    return PDB.from_api(budget_json(status=status, **kw))


def ready(n: int) -> list[Pod]:
    return [web(f"web-{i}") for i in range(n)]


# --- when the status is trusted ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "current"),
    [
        pytest.param(budget_json(status=None), False, id="status-absent"),
        pytest.param(budget_json(generation=None, status=None), False, id="status-absent-no-generation"),
        pytest.param(
            budget_json(status={"disruptionsAllowed": 0, "currentHealthy": 0}),
            False,
            id="served-but-never-computed-no-observed-generation",
        ),
        pytest.param(budget_json(status={"observedGeneration": 1, "disruptionsAllowed": 1}), False, id="stale"),
        pytest.param(budget_json(status={"observedGeneration": 2, "disruptionsAllowed": 1}), True, id="fresh"),
        pytest.param(budget_json(status={"observedGeneration": 3, "disruptionsAllowed": 1}), True, id="observed-ahead"),
        pytest.param(
            budget_json(generation=None, status={"disruptionsAllowed": 1}), True, id="hand-written-status-no-generation"
        ),
    ],
)
def test_status_current_means_computed_for_the_current_generation(raw: Json, current: bool) -> None:
    assert PDB.from_api(raw).status_current is current


def test_a_fresh_status_is_kept_as_the_very_object() -> None:
    fresh = PDB.from_api(budget_json(min_available=1, status={"observedGeneration": 2, "disruptionsAllowed": 0}))
    out = with_computed_status([fresh], ready(3))
    assert out[0] is fresh and out[0].disruptions_allowed == 0


# --- getExpectedPodCount / countHealthyPods / updatePdbStatus ---------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "pods", "expected"),
    [
        pytest.param({"min_available": 2}, ready(3), (1, 3, 2, 3), id="min-available-int"),
        pytest.param({"min_available": 3}, ready(3), (0, 3, 3, 3), id="min-available-int-all-needed"),
        pytest.param({"min_available": 5}, ready(3), (0, 3, 5, 3), id="min-available-int-above-pods-allows-0"),
        pytest.param({"min_available": 0}, ready(3), (3, 3, 0, 3), id="min-available-zero"),
        pytest.param({"min_available": 1}, [], (0, 0, 1, 0), id="no-pods-allows-0"),
        pytest.param({"min_available": 0}, [], (0, 0, 0, 0), id="no-pods-expected-0-allows-0"),
        pytest.param({"min_available": "50%"}, ready(3), (1, 3, 2, 3), id="min-available-percent-rounds-up"),
        pytest.param({"min_available": "50%"}, ready(4), (2, 4, 2, 4), id="min-available-percent-exact"),
        pytest.param({"min_available": "100%"}, ready(4), (0, 4, 4, 4), id="min-available-100-percent"),
        pytest.param({"max_unavailable": 1}, ready(3), (1, 3, 2, 3), id="max-unavailable-int"),
        pytest.param({"max_unavailable": 5}, ready(3), (3, 3, 0, 3), id="max-unavailable-above-pods-desired-0"),
        pytest.param({"max_unavailable": 0}, ready(3), (0, 3, 3, 3), id="max-unavailable-zero"),
        pytest.param({"max_unavailable": "25%"}, ready(3), (1, 3, 2, 3), id="max-unavailable-percent-rounds-up"),
        pytest.param({"max_unavailable": "50%"}, ready(4), (2, 4, 2, 4), id="max-unavailable-percent-exact"),
        pytest.param(
            {"max_unavailable": 1},
            [*ready(2), web("web-x", ready=False)],
            (0, 2, 2, 3),
            id="an-unready-pod-is-not-healthy",
        ),
        pytest.param(
            {"min_available": 1},
            [*ready(2), web("web-x", deleting=True)],
            (1, 2, 1, 3),
            id="a-deleting-pod-is-not-healthy-but-expected",
        ),
        pytest.param(
            {"min_available": 1},
            [*ready(2), web("web-x", phase="Succeeded")],
            (1, 2, 1, 2),
            id="a-finished-pod-is-left-out",
        ),
        pytest.param(
            {"max_unavailable": 1},
            [*ready(2), web("bare", owner=None)],
            (0, 3, 0, 3),
            id="max-unavailable-with-an-unmanaged-pod-fails-safe-to-0",
        ),
        pytest.param(
            {"min_available": "10%"},
            [*ready(2), web("bare", owner=None)],
            (0, 3, 0, 3),
            id="min-available-percent-with-an-unmanaged-pod-fails-safe-to-0",
        ),
        pytest.param(
            {"min_available": 1},
            [*ready(2), web("bare", owner=None)],
            (2, 3, 1, 3),
            id="min-available-int-counts-unmanaged-pods",
        ),
        pytest.param({"max_unavailable": "x%"}, ready(3), (0, 3, 0, 3), id="unreadable-percent-fails-safe-to-0"),
        pytest.param({"max_unavailable": "1"}, ready(3), (0, 3, 0, 3), id="string-without-percent-fails-safe-to-0"),
        pytest.param({}, ready(3), (0, 3, 0, 0), id="neither-field-allows-0"),
    ],
)
def test_disruption_go_get_expected_pod_count_and_count_healthy_pods(
    spec: dict[str, Any], pods: list[Pod], expected: tuple[int, int, int, int]
) -> None:
    out = computed_status(stale(**spec), pods)
    assert (out.disruptions_allowed, out.current_healthy, out.desired_healthy, out.expected_pods) == expected


def test_disrupted_pods_of_the_status_are_not_healthy() -> None:
    status = {"observedGeneration": 1, "disruptedPods": {"web-0": "2021-01-01T00:00:00Z"}}
    budget = PDB.from_api(budget_json(status=status, min_available=1))
    out = computed_status(budget, ready(3))
    assert (out.current_healthy, out.disruptions_allowed) == (2, 1)


def test_pods_of_other_namespaces_and_labels_are_not_the_budgets() -> None:
    others = [
        Pod.from_api(b.pod_json("o1", namespace="shop", labels={"app": "web"}, owners=[b.owner("ReplicaSet", "x")])),
        Pod.from_api(b.pod_json("o2", labels={"app": "api"}, owners=[b.owner("ReplicaSet", "y")])),
    ]
    out = computed_status(stale(min_available=1), [*ready(2), *others])
    assert (out.expected_pods, out.disruptions_allowed) == (2, 1)


def test_only_stale_budgets_are_computed_in_order_and_inputs_are_not_mutated() -> None:
    fresh_raw = b.pdb_json("api", selector={"matchLabels": {"app": "api"}}, min_available=1)
    fresh_raw["status"] = {"observedGeneration": 0, "disruptionsAllowed": 7}
    fresh = PDB.from_api(fresh_raw)
    old = stale(min_available=1)
    pods = ready(3)
    before = (list(pods), fresh, old)
    out = with_computed_status([fresh, old], pods)
    assert out[0] is fresh and out[0].disruptions_allowed == 7
    assert (out[1].name, out[1].disruptions_allowed, out[1].status_current) == ("web", 2, False)
    assert (list(pods), fresh, old) == before and old.disruptions_allowed == 5


# --- the planner and the safety checks see the computed status --------------------------------------------------


def test_plan_snapshot_computes_a_stale_budget_from_its_pods() -> None:
    items = [b.node_json("n1")]
    for i in range(3):
        items.append(
            b.pod_json(
                f"web-{i}",
                node_name="n1",
                labels={"app": "web"},
                owners=[b.owner("ReplicaSet", "rs-web")],
                conditions=[{"type": "Ready", "status": "True" if i else "False"}],
            )
        )
    items.append(budget_json(status={"observedGeneration": 1, "disruptionsAllowed": 0}, max_unavailable=1))
    snap = load_bytes(orjson.dumps(b.api_list(items)))
    (budget,) = snap.pdbs
    assert (budget.disruptions_allowed, budget.current_healthy, budget.desired_healthy) == (0, 2, 2)
    healthy = copy.deepcopy(items)
    healthy[1]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    (budget,) = load_bytes(orjson.dumps(b.api_list(healthy))).pdbs
    assert budget.disruptions_allowed == 1


@pytest.mark.parametrize("rule", [PDB_RATE_LIMIT, PDB_ALL_AT_ONCE])
def test_a_computed_allowance_of_zero_refuses_and_says_it_was_computed(rule: str) -> None:
    pods = [web("web-0"), web("web-1", ready=False)]
    (budget,) = with_computed_status([stale(min_available=1)], pods)
    refusals = pdb_refusals(pods[:1], [budget], rule=rule)
    assert len(refusals) == 1
    assert "computed from its pods" in refusals[0].detail
    if rule == PDB_RATE_LIMIT:
        assert refusals[0].reason == REFUSE_PDB_EXHAUSTED


@pytest.mark.parametrize("rule", [PDB_RATE_LIMIT, PDB_ALL_AT_ONCE])
def test_a_stale_budget_whose_pods_allow_a_disruption_does_not_refuse(rule: str) -> None:
    pods = ready(3)
    (budget,) = with_computed_status([stale(min_available=2)], pods)
    assert pdb_refusals(pods[:1], [budget], rule=rule) == []
