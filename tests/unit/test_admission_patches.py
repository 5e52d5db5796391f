"""The webhook's JSON patches: RFC 6901 escaping, appending without replacing, parents created only where
missing, and nothing added when the mutation is already there (a webhook may be invoked again).

Each patch is applied with the strict applier of :mod:`tests.builders.admission` and the result checked
as a pod.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.admission import PATCH_PREFERRED_AFFINITY, SKIP_ALREADY_PRESENT, MutationPolicy, mutate_pod
from extender.patches import Patch, escape, pointer
from tests.builders import expr
from tests.builders.admission import (
    AKS,
    AKS_TOLERATION,
    DEFAULT,
    KARPENTER,
    NOT_READY,
    PREFERRED,
    REQUIRED,
    apply_patch,
    make_pod,
    mutated,
    node_affinity,
    policy,
    term,
    unescape,
)

# --- RFC 6901 escaping, the Patch builder ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        pytest.param("plain", "plain", id="plain-token-unchanged"),
        pytest.param("a/b", "a~1b", id="slash-becomes-tilde-one"),
        pytest.param("a~b", "a~0b", id="tilde-becomes-tilde-zero"),
        pytest.param("~1", "~01", id="tilde-escaped-before-slash-so-no-double-decoding"),
        pytest.param("node-role.kubernetes.io/spot-worker", "node-role.kubernetes.io~1spot-worker", id="label-key"),
        pytest.param(3, "3", id="array-index"),
    ],
)
def test_rfc6901_escaping(token: str | int, escaped: str) -> None:
    assert escape(token) == escaped
    assert unescape(escaped) == str(token)


def test_pointer_joins_escaped_tokens() -> None:
    assert pointer(["metadata", "annotations", "spotshift.io/a~b"]) == "/metadata/annotations/spotshift.io~1a~0b"
    assert pointer([]) == ""


def test_patch_creates_a_map_entry_whose_key_has_slashes_and_tildes() -> None:
    doc = {"metadata": {"annotations": {"x": "1"}}}
    p = Patch(doc)
    assert p.set_missing(("metadata", "annotations", "example.com/a~b"), "v")
    assert p.ops == [{"op": "add", "path": "/metadata/annotations/example.com~1a~0b", "value": "v"}]
    assert apply_patch(doc, p.ops)["metadata"]["annotations"] == {"x": "1", "example.com/a~b": "v"}
    assert not p.set_missing(("metadata", "annotations", "x"), "other"), "an existing value is never replaced"


def test_patch_appends_below_a_parent_it_created_itself() -> None:
    doc: dict[str, Any] = {"spec": {}}
    p = Patch(doc)
    p.append(("spec", "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms"), {"a": 1})
    p.append(("spec", "affinity", "nodeAffinity", PREFERRED), {"b": 2})
    p.append(("spec", "affinity", "nodeAffinity", PREFERRED), {"c": 3})
    assert [op["path"] for op in p.ops] == [
        "/spec/affinity",
        f"/spec/affinity/nodeAffinity/{PREFERRED}",
        f"/spec/affinity/nodeAffinity/{PREFERRED}/-",
    ]
    out = apply_patch(doc, p.ops)
    assert out["spec"]["affinity"]["nodeAffinity"] == {
        REQUIRED: {"nodeSelectorTerms": [{"a": 1}]},
        PREFERRED: [{"b": 2}, {"c": 3}],
    }
    assert doc == {"spec": {}}, "the document is not modified"


# --- append, never replace; create missing parents -------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "expected_paths"),
    [
        pytest.param(
            make_pod(tolerations=None),
            ["/spec/affinity", "/spec/tolerations"],
            id="bare-pod-gets-whole-subtrees",
        ),
        pytest.param(
            make_pod(anti_affinity=True),
            ["/spec/affinity/nodeAffinity", "/spec/tolerations/-"],
            id="affinity-without-nodeAffinity-gets-nodeAffinity-only",
        ),
        pytest.param(
            make_pod(required=[term(expr("zone", "In", "a"))]),
            [f"/spec/affinity/nodeAffinity/{PREFERRED}", "/spec/tolerations/-"],
            id="nodeAffinity-without-preferred-gets-the-preferred-array",
        ),
        pytest.param(
            make_pod(preferred=[(5, term(expr("disk", "In", "ssd")))]),
            [f"/spec/affinity/nodeAffinity/{PREFERRED}/-", "/spec/tolerations/-"],
            id="existing-preferred-array-gets-appends",
        ),
    ],
)
def test_parents_are_created_only_where_missing(pod: dict[str, Any], expected_paths: list[str]) -> None:
    m = mutate_pod(pod, "shop", AKS)
    assert [op["path"] for op in m.ops] == expected_paths
    apply_patch(pod, list(m.ops))  # the strict applier raises on a missing parent


def test_everything_the_user_wrote_is_kept_in_place() -> None:
    ssd = term(expr("disk", "In", "ssd"))
    user_tol = {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}
    pod = make_pod(anti_affinity=True, preferred=[(5, ssd)], tolerations=[NOT_READY, user_tol])
    before = copy.deepcopy(pod)
    out, m = mutated(pod, AKS)
    assert pod == before, "mutate_pod does not modify its input"
    assert all(op["op"] == "add" for op in m.ops)
    assert out["spec"]["affinity"]["podAntiAffinity"] == before["spec"]["affinity"]["podAntiAffinity"]
    assert node_affinity(out)[PREFERRED][0] == {"weight": 5, "preference": ssd}
    assert out["spec"]["tolerations"][: len(before["spec"]["tolerations"])] == before["spec"]["tolerations"]
    assert out["spec"]["tolerations"][-1] == AKS_TOLERATION


# --- idempotence ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pol",
    [
        pytest.param(DEFAULT, id="prefer-all-presets"),
        pytest.param(policy(node_classes={"presets": ["karpenter"]}, webhook={"mode": "require"}), id="require"),
        pytest.param(policy(webhook={"mode": "tolerate-only"}), id="tolerate-only"),
        pytest.param(policy(webhook={"scheduler_name": "spotshift-scheduler"}), id="prefer-with-scheduler-name"),
    ],
)
@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod(), id="plain-pod"),
        pytest.param(make_pod(tolerations=None), id="pod-without-tolerations"),
        pytest.param(make_pod(anti_affinity=True), id="pod-with-anti-affinity"),
        pytest.param(make_pod(required=[term(expr("zone", "In", "a"))]), id="pod-with-required-affinity"),
    ],
)
def test_reinvocation_adds_nothing(pod: dict[str, Any], pol: MutationPolicy) -> None:
    once, first = mutated(pod, pol)
    assert first.ops
    again = mutate_pod(once, "shop", pol)
    assert again.ops == ()
    assert again.skipped == SKIP_ALREADY_PRESENT


@pytest.mark.parametrize(
    "existing",
    [
        pytest.param(dict(AKS_TOLERATION), id="the-same-toleration"),
        pytest.param(
            {
                "value": "spot",
                "effect": "NoSchedule",
                "operator": "Equal",
                "key": "kubernetes.azure.com/scalesetpriority",
            },
            id="same-toleration-other-key-order",
        ),
        pytest.param({"key": "kubernetes.azure.com/scalesetpriority", "operator": "Exists"}, id="exists-on-the-key"),
        pytest.param({"operator": "Exists"}, id="key-less-exists-tolerates-everything"),
        pytest.param(
            {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"},
            id="empty-operator-means-equal",
        ),
    ],
)
def test_a_toleration_already_covered_is_not_added_again(existing: dict[str, Any]) -> None:
    m = mutate_pod(
        make_pod(tolerations=[NOT_READY, existing]),
        "shop",
        policy(node_classes={"presets": ["aks"]}, webhook={"mode": "tolerate-only"}),
    )
    assert m.ops == () and m.skipped == SKIP_ALREADY_PRESENT


@pytest.mark.parametrize(
    "existing",
    [
        pytest.param(
            {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "other"}, id="other-value"
        ),
        pytest.param(
            {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Exists", "effect": "PreferNoSchedule"},
            id="other-effect",
        ),
    ],
)
def test_a_toleration_that_does_not_cover_ours_is_kept_and_ours_appended(existing: dict[str, Any]) -> None:
    pod = make_pod(tolerations=[NOT_READY, existing])
    out, _ = mutated(pod, policy(node_classes={"presets": ["aks"]}, webhook={"mode": "tolerate-only"}))
    assert out["spec"]["tolerations"][-2:] == [existing, AKS_TOLERATION]


def test_a_user_preference_for_spot_written_differently_counts_as_carrying_the_preference() -> None:
    same_set = term(expr("karpenter.sh/capacity-type", "In", "spot"))
    pod = make_pod(preferred=[(3, same_set)])
    m = mutate_pod(pod, "shop", KARPENTER)
    assert PATCH_PREFERRED_AFFINITY not in m.kinds
