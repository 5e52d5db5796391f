"""The policy/world pairs the real replay runs (tests/support/real_replay.py) and bench/churn_real.py's choice."""

from __future__ import annotations

import pytest

from bench import churn_real
from bench.churnlab import replay
from tests.support.karpenter import CONSOLIDATING, node_pool, when_empty
from tests.support.real_replay import POLICIES, WORLD_POLICIES, WORLDS, combinations


def test_every_policy_runs_in_some_world_and_every_world_has_its_policies() -> None:
    assert set(WORLD_POLICIES) == set(WORLDS)
    assert {p for valid in WORLD_POLICIES.values() for p in valid} == set(POLICIES)


def test_karpenter_policies_run_only_in_the_karpenter_world() -> None:
    pairs = combinations()
    assert [p for w, p in pairs if w == "karpenter"] == ["karpenter", "karpenter + spotshift"]
    assert not any(p.startswith("karpenter") for w, p in pairs if w != "karpenter")
    assert not any(p.startswith("descheduler") for w, p in pairs if w == "karpenter")
    assert [p for w, p in pairs if w == "karpenter-when-empty"] == ["none", "spotshift"]
    assert len(pairs) == 14


def test_every_world_the_real_replay_runs_with_a_modelled_policy_has_a_simulated_counterpart() -> None:
    # bench/churn_real.py prints real/simulated for these: the simulation must know the world.
    for world, policy in combinations():
        if policy in replay.SIMULATED:
            assert world in replay.SIMULATED_WORLDS, world


def test_the_karpenter_when_empty_world_is_the_pending_world_at_karpenters_pace() -> None:
    pending = replay.autoscaling_of("pending")
    karpenter = replay.autoscaling_of(replay.KARPENTER_WHEN_EMPTY)
    assert not karpenter.refill and replay.refill_of(replay.KARPENTER_WHEN_EMPTY) is None
    # Karpenter launches within its batching window; it removes an empty node after consolidateAfter (the
    # replay's removal delay) plus its own poll, validation and termination, on the wall clock.
    assert karpenter.provision_delay < pending.provision_delay
    assert karpenter.removal_delay - pending.removal_delay == pytest.approx(22.0 * replay.COMPRESSION)
    with pytest.raises(ValueError, match="unknown world 'elsewhere'"):
        replay.refill_of("elsewhere")


def test_the_when_empty_nodepool_removes_empty_nodes_and_replaces_no_drifted_one() -> None:
    pool = node_pool("p", "p", "label", ["spot", "on-demand"], when_empty("120s"))
    disruption = pool["spec"]["disruption"]
    assert disruption["consolidationPolicy"] == "WhenEmpty" and disruption["consolidateAfter"] == "120s"
    assert {"nodes": "0", "reasons": ["Drifted"]} in disruption["budgets"]
    # No budget without reasons: it would cap the empty nodes' removal too.
    assert all(b.get("reasons") for b in disruption["budgets"])
    assert node_pool("p", "p", "label", ["spot"])["spec"]["disruption"] == CONSOLIDATING


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
