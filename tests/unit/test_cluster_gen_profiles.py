"""The generator's PodDisruptionBudget-heavy profile is what bench/plan_quality.py and bench/plan_scale.py
claim it is: most multi-replica workloads carry a budget allowing one disruption at a time."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.cluster_gen import PDB_HEAVY, generate


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pdb_heavy_profile_gives_most_multi_replica_workloads_a_one_at_a_time_budget(seed: int) -> None:
    items = generate(seed, 60, 1200, PDB_HEAVY)
    replicas: Counter[tuple[str, str]] = Counter()
    for it in items:
        if it["kind"] != "Pod":
            continue
        owners = it["metadata"].get("ownerReferences") or []
        if owners and owners[0]["kind"] in ("ReplicaSet", "StatefulSet"):
            replicas[(it["metadata"]["namespace"], it["metadata"]["labels"]["app"])] += 1
    budgets = {
        (it["metadata"]["namespace"], it["metadata"]["name"]): it for it in items if it["kind"] == "PodDisruptionBudget"
    }
    multi = [w for w, n in replicas.items() if n > 1]
    covered = [w for w in multi if w in budgets]
    assert len(multi) >= 20
    assert len(covered) / len(multi) >= 0.7
    for (_, name), b in budgets.items():
        spec, status = b["spec"], b["status"]
        expected = status["expectedPods"]
        assert spec.get("maxUnavailable") == 1 or spec.get("minAvailable") == expected - 1, name
        assert status["desiredHealthy"] == expected - 1
