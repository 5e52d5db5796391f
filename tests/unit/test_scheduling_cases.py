"""The differential test's generator (``tests/support/scheduling_cases.py``): the same seed gives the same cases,
and every rule and selector shape the test means to cover is drawn; kube-scheduler's messages are read whole."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from tests.support.scheduling_cases import CASE_LABEL, Case, fit_error_counts, generate


def _cases(seed: int, n: int = 500) -> list[Case]:
    rng = random.Random(seed)
    return [generate(rng, i, "t") for i in range(n)]


def test_a_seed_gives_the_same_cases() -> None:
    one, two = _cases(7, 50), _cases(7, 50)
    assert [json.dumps(c.__dict__, sort_keys=True) for c in one] == [
        json.dumps(c.__dict__, sort_keys=True) for c in two
    ]
    assert json.dumps(_cases(8, 1)[0].__dict__) != json.dumps(one[0].__dict__)


def _drawn(cases: list[Case]) -> Counter[str]:
    seen: Counter[str] = Counter()
    for case in cases:
        spec = case.probe["spec"]
        for c in spec.get("topologySpreadConstraints", []):
            selector = c.get("labelSelector")
            seen["spread-" + ("none" if selector is None else "empty" if selector == {} else next(iter(selector)))] += 1
            seen.update(k for k in ("minDomains", "matchLabelKeys", "nodeAffinityPolicy", "nodeTaintsPolicy") if k in c)
        affinity = spec.get("affinity", {})
        seen.update(list(affinity))
        for term in (
            affinity.get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        ):
            seen.update(e["operator"] for e in term["matchExpressions"])
        seen.update(k for k in ("tolerations", "initContainers", "resources", "volumes") if k in spec)
        seen["host-port"] += any("ports" in c for c in spec["containers"])
        seen.update(t["effect"] for n in case.nodes.values() for t in n["taints"])
        seen["cordoned"] += any(n["unschedulable"] for n in case.nodes.values())
        seen["existing-anti-affinity"] += any("affinity" in p["spec"] for p in case.existing)
    return seen


def test_every_rule_and_selector_shape_is_drawn() -> None:
    seen = _drawn(_cases(1))
    wanted = [
        "spread-none", "spread-empty", "spread-matchLabels", "spread-matchExpressions", "minDomains", "matchLabelKeys",
        "nodeAffinityPolicy", "nodeTaintsPolicy", "nodeAffinity", "podAffinity", "podAntiAffinity", "In", "NotIn",
        "Exists", "DoesNotExist", "Gt", "Lt", "tolerations", "initContainers", "resources", "volumes", "host-port",
        "NoSchedule", "NoExecute", "PreferNoSchedule", "cordoned", "existing-anti-affinity",
    ]  # fmt: skip
    assert all(seen[w] >= 5 for w in wanted), {w: seen[w] for w in wanted}


def test_a_probe_selects_only_its_own_cases_nodes() -> None:
    for case in _cases(3, 100):
        assert case.probe["spec"]["nodeSelector"][CASE_LABEL] == case.value
        assert all(n["labels"][CASE_LABEL] == case.value for n in case.nodes.values())
        assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] in case.nodes for p in case.existing)


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        pytest.param(
            "0/142 nodes are available: 101 node(s) didn't match Pod's node affinity/selector, 2 node(s) were "
            "unschedulable, 39 node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/142 nodes "
            "are available: 142 Preemption is not helpful for scheduling.",
            {"node(s) didn't match Pod's node affinity/selector": 101, "node(s) were unschedulable": 2,
             "node(s) had untolerated taint(s)": 39},
            id="1.34-with-the-dynamic-resources-post-filter-text",
        ),
        pytest.param(
            "0/5 nodes are available: 1 node(s) had untolerated taint {diff.spotshift.io/dedicated: b}, 4 Insufficient "
            "cpu. preemption: 0/5 nodes are available: 1 No preemption victims found for incoming pod, 4 Preemption "
            "is not helpful for scheduling.",
            {"node(s) had untolerated taint {diff.spotshift.io/dedicated: b}": 1, "Insufficient cpu": 4},
            id="a-reason-with-dots-and-braces",
        ),
        pytest.param("0/3 nodes are available: 3 Insufficient cpu.", {"Insufficient cpu": 3}, id="no-post-filter-text"),
    ],
)  # fmt: skip
def test_an_unschedulable_message_is_read_as_counts_per_reason(message: str, counts: dict[str, int]) -> None:
    assert fit_error_counts(message) == counts
