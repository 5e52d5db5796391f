"""The pre-eviction checks: PodDisruptionBudget refusals by each rule (``rescheduler.pdb_rule``), unschedulable
pods."""

from __future__ import annotations

import pytest

from rescheduler.plan.safety import (
    REFUSE_MULTIPLE_PDBS,
    REFUSE_PDB_BUDGET,
    REFUSE_PDB_EXHAUSTED,
    REFUSE_PDB_UNKNOWN_POLICY,
    PdbIndex,
    pdb_refusals,
    unschedulable_pods,
)
from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT
from shared.model import PDB, Pod
from tests.support.fake_api import pdb, pod


def P(name: str, app: str = "web", **kw) -> Pod:
    return Pod.from_api(pod(name, "od-1", app=app, **kw))


def B(name: str, app: str, allowed: int, **kw) -> PDB:
    return PDB.from_api(pdb(name, app, allowed=allowed, **kw))


@pytest.mark.parametrize(
    ("pods", "budgets", "expected"),
    [
        pytest.param([P("a")], [], [], id="no-budget-always-allowed"),
        pytest.param([P("a")], [B("web", "web", 1)], [], id="one-pod-one-disruption-allowed"),
        pytest.param([P("a"), P("b")], [B("web", "web", 2)], [], id="two-pods-two-disruptions-allowed"),
        pytest.param(
            [P("a"), P("b")], [B("web", "web", 1)], [REFUSE_PDB_BUDGET], id="second-eviction-would-be-refused"
        ),
        pytest.param([P("a")], [B("web", "web", 0)], [REFUSE_PDB_BUDGET], id="budget-at-zero"),
        pytest.param([P("a")], [B("web", "web", -1)], [REFUSE_PDB_BUDGET], id="budget-negative"),
        pytest.param(
            [P("a")], [B("one", "web", 1), B("two", "web", 1)], [REFUSE_MULTIPLE_PDBS], id="two-budgets-select-the-pod"
        ),
        pytest.param([P("a", app="api")], [B("web", "web", 0)], [], id="budget-of-another-app"),
        pytest.param([P("a", namespace="other")], [B("web", "web", 0)], [], id="budget-of-another-namespace"),
        pytest.param(
            [P("a"), P("b", app="api")],
            [B("web", "web", 1), B("api", "api", 0)],
            [REFUSE_PDB_BUDGET],
            id="budgets-counted-separately",
        ),
    ],
)
def test_pdb_refusals_all_at_once(pods: list[Pod], budgets: list[PDB], expected: list[str]) -> None:
    assert [r.reason for r in pdb_refusals(pods, budgets, rule=PDB_ALL_AT_ONCE)] == expected


@pytest.mark.parametrize(
    ("pods", "budgets", "expected"),
    [
        pytest.param([P("a")], [], [], id="no-budget-always-allowed"),
        pytest.param([P("a")], [B("web", "web", 1)], [], id="one-pod-one-disruption-allowed"),
        pytest.param(
            [P("a"), P("b"), P("c")], [B("web", "web", 1)], [], id="three-pods-one-disruption-paced-not-refused"
        ),
        pytest.param([P("a")], [B("web", "web", 0)], [REFUSE_PDB_EXHAUSTED], id="budget-at-zero"),
        pytest.param([P("a")], [B("web", "web", -1)], [REFUSE_PDB_EXHAUSTED], id="budget-negative"),
        pytest.param(
            [P("a")], [B("one", "web", 1), B("two", "web", 1)], [REFUSE_MULTIPLE_PDBS], id="two-budgets-select-the-pod"
        ),
        pytest.param(
            [P("a"), P("b", app="api")],
            [B("web", "web", 1), B("api", "api", 0)],
            [REFUSE_PDB_EXHAUSTED],
            id="one-exhausted-budget-refuses",
        ),
    ],
)
def test_pdb_refusals_rate_limit(pods: list[Pod], budgets: list[PDB], expected: list[str]) -> None:
    assert [r.reason for r in pdb_refusals(pods, budgets, rule=PDB_RATE_LIMIT)] == expected


def policy_budget(policy: str | None, *, allowed: int, healthy: int, desired: int) -> PDB:
    raw = pdb("web", "web", allowed=allowed, healthy=healthy, desired=desired)
    if policy is not None:
        raw["spec"]["unhealthyPodEvictionPolicy"] = policy
    return PDB.from_api(raw)


@pytest.mark.parametrize("rule", [PDB_RATE_LIMIT, PDB_ALL_AT_ONCE])
@pytest.mark.parametrize(
    ("pods", "budget", "expected"),
    [
        pytest.param(
            [P("a", ready=False)],
            policy_budget("AlwaysAllow", allowed=0, healthy=0, desired=2),
            [],
            id="always-allow-not-ready-at-zero",
        ),
        pytest.param(
            [P("a", ready=False)], policy_budget(None, allowed=0, healthy=2, desired=2), [], id="unset-healthy-at-zero"
        ),
        pytest.param(
            [P("a", ready=False)],
            policy_budget("IfHealthyBudget", allowed=0, healthy=1, desired=2),
            ["exhausted"],
            id="if-healthy-budget-unhealthy-at-zero",
        ),
        pytest.param(
            [P("a", ready=True), P("b", ready=False), P("c", ready=False)],
            policy_budget("AlwaysAllow", allowed=1, healthy=1, desired=2),
            [],
            id="not-ready-pods-use-none-of-the-one-disruption",
        ),
        pytest.param(
            [P("a", ready=False)],
            policy_budget("NewerPolicy", allowed=3, healthy=5, desired=2),
            [REFUSE_PDB_UNKNOWN_POLICY],
            id="unknown-policy-not-ready-refused",
        ),
        pytest.param(
            [P("a", ready=True)], policy_budget("NewerPolicy", allowed=3, healthy=5, desired=2), [], id="unknown-ready"
        ),
        pytest.param(
            [P("a", phase="Pending")], policy_budget(None, allowed=0, healthy=0, desired=2), [], id="pending-ignores"
        ),
    ],
)
def test_evictions_the_eviction_api_lets_go_without_the_budget_are_not_refused(
    rule: str, pods: list[Pod], budget: PDB, expected: list[str]
) -> None:
    exhausted = REFUSE_PDB_EXHAUSTED if rule == PDB_RATE_LIMIT else REFUSE_PDB_BUDGET
    want = [exhausted if e == "exhausted" else e for e in expected]
    assert [r.reason for r in pdb_refusals(pods, [budget], rule=rule)] == want


def test_a_pending_pod_under_two_budgets_is_not_refused() -> None:
    # eviction.go canIgnorePDB runs before the budgets are even counted.
    budgets = [B("one", "web", 0), B("two", "web", 0)]
    assert pdb_refusals([P("a", phase="Pending")], budgets) == []
    assert [r.reason for r in pdb_refusals([P("a")], budgets)] == [REFUSE_MULTIPLE_PDBS]


def test_an_unknown_rule_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown PodDisruptionBudget rule"):
        pdb_refusals([P("a")], [], rule="sometimes")


def test_the_index_matches_expression_selectors_too() -> None:
    raw = pdb("web", "web", allowed=0)
    raw["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    index = PdbIndex([PDB.from_api(raw), B("api", "api", 1)])
    assert [b.name for b in index.selecting(P("a", app="web"))] == ["web"]
    assert sorted(b.name for b in index.selecting(P("b", app="api"))) == ["api", "web"]


def test_refusals_do_not_mutate_their_inputs() -> None:
    pods, budgets = [P("a"), P("b")], [B("web", "web", 1)]
    before = (list(pods), list(budgets))
    pdb_refusals(pods, budgets)
    assert (pods, budgets) == before


def test_unschedulable_means_pending_unbound_and_marked_by_the_scheduler() -> None:
    waiting = Pod.from_api(pod("waiting", phase="Pending"))
    new = Pod.from_api({**pod("new", phase="Pending"), "status": {"phase": "Pending"}})
    running = Pod.from_api(pod("running", "od-1"))
    assert [p.name for p in unschedulable_pods([waiting, new, running])] == ["waiting"]


# --- scheduling gates (pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go) -------------------

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
GATED = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}


def gated(name: str, conditions: list[dict[str, str]], gates: list[str]) -> Pod:
    raw = pod(name, phase="Pending", schedulingGates=[{"name": g} for g in gates])
    raw["status"]["conditions"] = conditions
    return Pod.from_api(raw)


@pytest.mark.parametrize(
    ("conditions", "gates", "counts"),
    [
        pytest.param([GATED], ["example.com/quota"], False, id="gated-as-the-api-server-marks-it"),
        pytest.param([UNSCHEDULABLE], ["example.com/quota"], False, id="gated-with-a-stale-unschedulable-condition"),
        pytest.param([UNSCHEDULABLE], ["a", "b"], False, id="two-gates"),
        pytest.param([UNSCHEDULABLE], [], True, id="gates-removed-and-the-scheduler-found-no-node"),
        pytest.param([GATED], [], False, id="gates-removed-not-yet-tried"),
    ],
)
def test_a_gated_pod_never_waits_for_room(conditions: list[dict[str, str]], gates: list[str], counts: bool) -> None:
    """``SchedulingGates.PreEnqueue`` keeps a gated pod out of the scheduling queue: whatever its conditions say,
    it waits for whoever holds the gates, not for a node."""
    p = gated("held", conditions, gates)
    assert p.gated is bool(gates)
    assert unschedulable_pods([p]) == ([p] if counts else [])
