"""shared.eviction: the eviction subresource's budget rules, case for case with upstream's
``pkg/registry/core/pod/storage/eviction_test.go`` ``TestEvictionIgnorePDB`` (run there under each of
``AlwaysAllow``, unset and ``IfHealthyBudget``, as here)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.eviction import FREE, REFUSED, USES, BudgetUse, budget_use, ignores_budgets
from shared.model import PDB, ParseError, Pod
from tests import builders

POLICIES = ("AlwaysAllow", None, "IfHealthyBudget")


def budget(policy: str | None, *, allowed: int = 0, healthy: int = 0, desired: int = 0) -> PDB:
    status = {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired}
    raw = builders.pdb_json("foo", selector={"matchLabels": {"a": "true"}}, status=status)
    if policy is not None:
        raw["spec"]["unhealthyPodEvictionPolicy"] = policy
    return PDB.from_api(raw)


def running(*, ready: bool, phase: str = "Running", terminating: bool = False) -> Pod:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    raw = builders.pod_json(
        "t", labels={"a": "true"}, node_name="foo", phase=phase, conditions=conditions, terminating=terminating
    )
    return Pod.from_api(raw)


def expected(per_policy: dict[str | None, BudgetUse] | BudgetUse, policy: str | None) -> BudgetUse:
    return per_policy if isinstance(per_policy, BudgetUse) else per_policy[policy]


# (upstream case name, pod, budget status, what the eviction does with the budget per policy)
CASES: list[tuple[str, dict[str, Any], dict[str, int], Any]] = [
    (
        "matching pdbs with no disruptions allowed, pod running, pod healthy, unhealthy pod not ours",
        {"ready": True},
        {"allowed": 0, "healthy": 2, "desired": 2},
        USES,  # refused: 0 allowed
    ),
    (
        "matching pdbs with disruptions allowed, pod running, pod healthy, healthy pod ours, deletes pod by "
        "honoring the PDB",
        {"ready": True},
        {"allowed": 1, "healthy": 3, "desired": 3},
        USES,
    ),
    (
        "matching pdbs with no disruptions allowed, pod running, pod unhealthy, unhealthy pod ours",
        {"ready": False},
        {"allowed": 0, "healthy": 2, "desired": 2},
        FREE,  # every policy: the guarded application is healthy
    ),
    (
        "matching pdbs with no disruptions allowed, pod running, pod unhealthy, unhealthy pod ours, skips the PDB "
        "check and deletes",
        {"ready": False},
        {"allowed": 0},
        {"AlwaysAllow": FREE, None: USES, "IfHealthyBudget": USES},  # desiredHealthy 0 is not "healthy"
    ),
]


@pytest.mark.parametrize("policy", POLICIES, ids=["AlwaysAllow", "unset", "IfHealthyBudget"])
@pytest.mark.parametrize(("pod_kw", "status", "want"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_budget_use_follows_the_eviction_subresource(
    policy: str | None, pod_kw: dict[str, Any], status: dict[str, int], want: Any
) -> None:
    assert budget_use(running(**pod_kw), budget(policy, **status)) is expected(want, policy)


@pytest.mark.parametrize(
    ("healthy", "desired", "want"),
    [
        pytest.param(3, 2, FREE, id="more-healthy-than-desired"),
        pytest.param(2, 2, FREE, id="exactly-desired"),
        pytest.param(1, 2, USES, id="fewer-healthy-than-desired"),
        pytest.param(0, 0, USES, id="nothing-desired"),
    ],
)
def test_if_healthy_budget_frees_a_not_ready_pod_only_while_the_application_is_healthy(
    healthy: int, desired: int, want: BudgetUse
) -> None:
    """``currentHealthy >= desiredHealthy && desiredHealthy > 0`` (eviction.go, the default and IfHealthyBudget)."""
    for policy in (None, "IfHealthyBudget"):
        assert budget_use(running(ready=False), budget(policy, healthy=healthy, desired=desired)) is want


def test_always_allow_frees_a_not_ready_pod_however_unhealthy_the_budget() -> None:
    assert budget_use(running(ready=False), budget("AlwaysAllow", allowed=0, healthy=0, desired=5)) is FREE
    assert budget_use(running(ready=True), budget("AlwaysAllow", allowed=0, healthy=0, desired=5)) is USES


def test_an_unknown_policy_refuses_a_not_ready_pod_and_leaves_a_ready_one_to_the_budget() -> None:
    """policy/v1: clients making eviction decisions disallow evicting unhealthy pods under a policy they do not know."""
    assert budget_use(running(ready=False), budget("SometimesAllow", healthy=5, desired=1)) is REFUSED
    assert budget_use(running(ready=True), budget("SometimesAllow", allowed=1)) is USES


@pytest.mark.parametrize(
    ("pod_kw", "ignores"),
    [
        pytest.param({"ready": False, "phase": "Pending"}, True, id="pod pending"),
        pytest.param({"ready": False, "phase": "Succeeded"}, True, id="pod succeeded"),
        pytest.param({"ready": False, "phase": "Failed"}, True, id="pod failed"),
        pytest.param({"ready": True, "terminating": True}, True, id="pod terminating"),
        pytest.param({"ready": False}, False, id="pod running, not ready"),
        pytest.param({"ready": True}, False, id="pod running"),
    ],
)
def test_can_ignore_pdb(pod_kw: dict[str, Any], ignores: bool) -> None:
    """``canIgnorePDB``: Pending, Succeeded, Failed or being deleted."""
    assert ignores_budgets(running(**pod_kw)) is ignores


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(None, "", id="unset"),
        pytest.param("AlwaysAllow", "AlwaysAllow", id="always-allow"),
        pytest.param("IfHealthyBudget", "IfHealthyBudget", id="if-healthy-budget"),
        pytest.param("NewerPolicy", "NewerPolicy", id="unknown-kept-as-given"),
    ],
)
def test_the_policy_is_parsed_as_given(raw: str | None, want: str) -> None:
    assert budget(raw).unhealthy_pod_eviction_policy == want


def test_a_policy_that_is_not_a_string_names_the_field() -> None:
    raw = builders.pdb_json("foo", selector={"matchLabels": {"a": "true"}})
    raw["spec"]["unhealthyPodEvictionPolicy"] = ["AlwaysAllow"]
    with pytest.raises(ParseError, match=r"pdb default/foo: spec\.unhealthyPodEvictionPolicy: expected a string"):
        PDB.from_api(raw)


def test_the_rules_do_not_mutate_their_inputs() -> None:
    pod, pdb = running(ready=False), budget("AlwaysAllow")
    budget_use(pod, pdb)
    ignores_budgets(pod)
    assert (pod, pdb) == (running(ready=False), budget("AlwaysAllow"))
