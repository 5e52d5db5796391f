"""What each webhook mode adds to a pod: ``prefer`` (weighted spot terms and the spot tolerations),
``tolerate-only``, ``require`` (the spot expression ANDed into every required term), ``off``; and the
scheduler name it may set.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.admission import (
    PATCH_PREFERRED_AFFINITY,
    PATCH_REQUIRED_AFFINITY,
    PATCH_SCHEDULER_NAME,
    PATCH_TOLERATIONS,
    SKIP_ALREADY_PRESENT,
    SKIP_MODE_OFF,
    MutationPolicy,
    mutate_pod,
)
from tests.builders import expr
from tests.builders.admission import (
    AKS_TOLERATION,
    DEFAULT,
    KARPENTER_TERM,
    PREFERRED,
    REQUIRED,
    make_pod,
    mutated,
    node_affinity,
    policy,
    term,
)

# --- modes ------------------------------------------------------------------------------------------------


def test_prefer_mode_adds_one_weighted_term_per_spot_selector_and_the_spot_tolerations() -> None:
    pol = policy(node_classes={"presets": ["karpenter", "aks"]}, webhook={"weight": 70})
    out, m = mutated(make_pod(), pol)
    assert node_affinity(out)[PREFERRED] == [
        {"weight": 70, "preference": KARPENTER_TERM},
        {"weight": 70, "preference": term(expr("kubernetes.azure.com/scalesetpriority", "In", "spot"))},
    ]
    assert out["spec"]["tolerations"][1:] == [AKS_TOLERATION]
    assert m.kinds == (PATCH_PREFERRED_AFFINITY, PATCH_TOLERATIONS)
    assert REQUIRED not in node_affinity(out)


def test_default_configuration_covers_every_preset_with_explicit_tolerations() -> None:
    out, _ = mutated(make_pod(), DEFAULT)
    keys = [t["preference"]["matchExpressions"][0]["key"] for t in node_affinity(out)[PREFERRED]]
    assert keys == [
        "karpenter.sh/capacity-type",
        "eks.amazonaws.com/capacityType",
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
        "kubernetes.azure.com/scalesetpriority",
        "node-role.kubernetes.io/spot-worker",
    ]
    added = out["spec"]["tolerations"][1:]
    assert [t["key"] for t in added] == [
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
        "kubernetes.azure.com/scalesetpriority",
    ]
    assert all(t["key"] and t["effect"] and t["operator"] == "Equal" for t in added), "never a key-less Exists"


def test_tolerate_only_mode_adds_tolerations_and_no_affinity() -> None:
    out, m = mutated(make_pod(), policy(node_classes={"presets": ["aks"]}, webhook={"mode": "tolerate-only"}))
    assert "affinity" not in out["spec"]
    assert out["spec"]["tolerations"][-1] == AKS_TOLERATION
    assert m.kinds == (PATCH_TOLERATIONS,)


def test_require_mode_on_a_pod_without_required_affinity_adds_the_spot_terms() -> None:
    out, m = mutated(make_pod(), policy(node_classes={"presets": ["karpenter"]}, webhook={"mode": "require"}))
    assert node_affinity(out) == {REQUIRED: {"nodeSelectorTerms": [KARPENTER_TERM]}}
    assert m.kinds == (PATCH_REQUIRED_AFFINITY,)


def test_require_mode_ands_the_spot_expression_into_every_existing_term() -> None:
    zone_a = term(expr("topology.kubernetes.io/zone", "In", "eu-west-1a"))
    zone_b = term(expr("topology.kubernetes.io/zone", "In", "eu-west-1b"))
    pod = make_pod(required=[zone_a, zone_b])
    out, m = mutated(pod, policy(node_classes={"presets": ["karpenter"]}, webhook={"mode": "require"}))
    terms = node_affinity(out)[REQUIRED]["nodeSelectorTerms"]
    spot = expr("karpenter.sh/capacity-type", "In", "spot")
    assert terms == [
        term(expr("topology.kubernetes.io/zone", "In", "eu-west-1a"), spot),
        term(expr("topology.kubernetes.io/zone", "In", "eu-west-1b"), spot),
    ], "appending a term would OR it and widen the choice; each term is extended instead"
    assert all(op["path"].endswith("/matchExpressions/-") for op in m.ops)


def test_require_mode_with_several_spot_selectors_makes_each_term_its_spot_part() -> None:
    zone = term(expr("topology.kubernetes.io/zone", "In", "eu-west-1a"))
    pol = policy(webhook={"mode": "require"})
    out, m = mutated(make_pod(required=[zone]), pol)
    terms = node_affinity(out)[REQUIRED]["nodeSelectorTerms"]
    spot_terms = [t["matchExpressions"] for t in pol.spot_terms]
    assert len(spot_terms) == 6 and PREFERRED not in node_affinity(out)
    assert terms == [term(*zone["matchExpressions"], *spot) for spot in spot_terms], "T becomes T AND spot, exactly"
    assert terms[0] is not zone and m.kinds[0] == PATCH_REQUIRED_AFFINITY and not m.warnings


def _allowed(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    from shared.selectors import parse_node_selector

    required = node_affinity(pod).get(REQUIRED)
    return required is None or parse_node_selector(required).matches("node", labels)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "pol",
    [
        pytest.param(policy(webhook={"mode": "require"}), id="every-preset"),
        pytest.param(policy(node_classes={"presets": ["karpenter"]}, webhook={"mode": "require"}), id="one-preset"),
    ],
)
def test_require_mode_allows_exactly_the_spot_nodes_each_term_allowed(pol: MutationPolicy) -> None:
    zone_a = term(expr("topology.kubernetes.io/zone", "In", "a"))
    gpu = term(expr("gpu", "Exists"), expr("topology.kubernetes.io/zone", "NotIn", "c"))
    pod = make_pod(required=[zone_a, gpu])
    out, _ = mutated(pod, pol)
    from shared.classes import classifier

    is_spot = classifier(pol.classes).node_class
    nodes = [
        {"topology.kubernetes.io/zone": zone, **extra, **spot}
        for zone in ("a", "b", "c")
        for extra in ({}, {"gpu": "1"})
        for spot in (
            {},
            {"karpenter.sh/capacity-type": "spot"},
            {"karpenter.sh/capacity-type": "on-demand"},
            {"cloud.google.com/gke-spot": "true"},
            {"kubernetes.azure.com/scalesetpriority": "spot"},
        )
    ]
    for labels in nodes:
        assert _allowed(out, labels) == (_allowed(pod, labels) and is_spot(labels) == "spot"), labels
    again = mutate_pod(out, "shop", pol)
    assert again.skipped == SKIP_ALREADY_PRESENT and not again.warnings, "a second invocation adds nothing"


@pytest.mark.parametrize(
    "user_term",
    [
        pytest.param({}, id="empty-term-matches-nothing"),
        pytest.param({"matchExpressions": []}, id="term-with-no-expressions"),
        pytest.param(
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["on-demand-1"]}]},
            id="match-fields-names-its-node",
        ),
    ],
)
def test_require_mode_leaves_terms_that_cannot_hold_spot_alone_with_a_warning(user_term: dict[str, Any]) -> None:
    zone = term(expr("topology.kubernetes.io/zone", "In", "a"))
    pol = policy(node_classes={"presets": ["karpenter"]}, webhook={"mode": "require"})
    pod = make_pod(required=[user_term, zone])
    out, m = mutated(pod, pol)
    terms = node_affinity(out)[REQUIRED]["nodeSelectorTerms"]
    assert terms == [user_term, term(*zone["matchExpressions"], *KARPENTER_TERM["matchExpressions"])]
    assert m.warnings and "left 1 required node-affinity term(s) as they are" in m.warnings[0]
    again = mutate_pod(out, "shop", pol)
    assert not again.ops, "a second invocation adds nothing"


def test_off_mode_admits_unchanged() -> None:
    m = mutate_pod(make_pod(), "shop", policy(webhook={"mode": "off"}))
    assert m.ops == () and m.skipped == SKIP_MODE_OFF


# --- schedulerName ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        pytest.param("default-scheduler", "spotshift-scheduler", id="defaulted-name-is-replaced"),
        pytest.param(None, "spotshift-scheduler", id="missing-name-is-added"),
        pytest.param("team-scheduler", "team-scheduler", id="a-chosen-scheduler-is-kept"),
    ],
)
def test_scheduler_name_injection(scheduler: str | None, expected: str) -> None:
    pol = policy(webhook={"scheduler_name": "spotshift-scheduler"})
    out, m = mutated(make_pod(scheduler=scheduler), pol)
    assert out["spec"]["schedulerName"] == expected
    assert (PATCH_SCHEDULER_NAME in m.kinds) == (expected != scheduler)


def test_scheduler_name_is_not_set_on_skipped_pods() -> None:
    pol = policy(webhook={"scheduler_name": "spotshift-scheduler"})
    assert mutate_pod(make_pod(owner_kind="DaemonSet"), "shop", pol).ops == ()
