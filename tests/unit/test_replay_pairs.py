"""The policy/world pairs the real replay runs (tests/support/real_replay.py) and bench/churn_real.py's choice."""

from __future__ import annotations

import pytest

from bench import churn_real
from tests.support.real_replay import POLICIES, WORLD_POLICIES, WORLDS, combinations


def test_every_policy_runs_in_some_world_and_every_world_has_its_policies() -> None:
    assert set(WORLD_POLICIES) == set(WORLDS)
    assert {p for valid in WORLD_POLICIES.values() for p in valid} == set(POLICIES)


def test_karpenter_policies_run_only_in_the_karpenter_world() -> None:
    pairs = combinations()
    assert [p for w, p in pairs if w == "karpenter"] == ["karpenter", "karpenter + spotshift"]
    assert not any(p.startswith("karpenter") for w, p in pairs if w != "karpenter")
    assert not any(p.startswith("descheduler") for w, p in pairs if w == "karpenter")
    assert len(pairs) == 12


def test_narrowed_pairs_keep_only_the_valid_ones() -> None:
    assert combinations(["spotshift", "karpenter"], ["pending", "karpenter"]) == [
        ("pending", "spotshift"),
        ("karpenter", "karpenter"),
    ]
    assert combinations(["karpenter"], ["refill"]) == []


def test_churn_real_refuses_a_choice_with_no_valid_pair() -> None:
    with pytest.raises(SystemExit) as exit_info:
        churn_real.main(["--no-build", "--policy", "karpenter", "--world", "pending"])
    assert exit_info.value.code == 2
