"""Hostile and malformed input: envelopes refused with a short sentence, a forged review that cannot poison the
memo, wrongly typed pod fields refused naming the field, pods over the limits admitted unchanged with a warning,
and no quadratic work on huge selectors.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from extender.admission import (
    SKIP_PINNED_ON_DEMAND,
    MutationMemo,
    build_response,
    mutate_pod,
    parse_review,
)
from extender.errors import InvalidRequest
from tests.builders import Json, expr, override
from tests.builders.admission import AKS_TOLERATION, DEFAULT, NOT_READY, make_pod, review, term

# --- hostile and malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            orjson.dumps({"kind": "AdmissionReview", "apiVersion": []}), "apiVersion", id="api-version-a-list"
        ),
        pytest.param(b'{"kind":' + b'{"k":' * 1000 + b"1" + b"}" * 1001, "kind", id="kind-nested-1000-deep"),
        pytest.param(b'{"kind":' + b'{"k":' * 1100 + b"1" + b"}" * 1101, "not valid JSON", id="nested-past-1024"),
        pytest.param(
            orjson.dumps({**review(make_pod()), "request": {**review(make_pod())["request"], "operation": ""}}),
            "operation",
            id="empty-operation",
        ),
        pytest.param(
            orjson.dumps(
                {
                    **review(make_pod()),
                    "request": {k: v for k, v in review(make_pod())["request"].items() if k != "operation"},
                }
            ),
            "operation",
            id="missing-operation",
        ),
        pytest.param(
            orjson.dumps({**review(make_pod()), "request": {**review(make_pod())["request"], "namespace": ["x"]}}),
            "namespace",
            id="namespace-not-a-string",
        ),
    ],
)
def test_parse_review_rejects_hostile_envelopes_with_a_sentence(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as caught:
        parse_review(body)
    assert len(caught.value.message) < 300


def test_a_review_without_spec_never_poisons_the_memo() -> None:
    """A review with no operation once skipped validation, and its patch (``add /spec``) was remembered for
    every later pod that read alike: now it is refused before anything is computed or remembered."""
    memo = MutationMemo()
    forged = review({"metadata": {"labels": {"app": "web"}}})
    del forged["request"]["operation"]
    with pytest.raises(InvalidRequest):
        parse_review(orjson.dumps(forged))
    real = make_pod(tolerations=None, scheduler=None)
    answer, _ = build_response(review(real), DEFAULT, memo)  # type: ignore[arg-type]
    ops = orjson.loads(base64.b64decode(answer["response"]["patch"]))
    assert all(op["path"] != "/spec" for op in ops)
    assert MutationMemo.key(real, "shop", "CREATE") != MutationMemo.key({"metadata": {}}, "shop", "CREATE")


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        pytest.param(override(make_pod(), spec__affinity="x"), "request.object.spec.affinity:", id="affinity-a-string"),
        pytest.param(
            override(make_pod(), spec__affinity={"nodeAffinity": []}),
            "request.object.spec.affinity.nodeAffinity:",
            id="node-affinity-a-list",
        ),
        pytest.param(
            override(make_pod(), spec__tolerations={"key": "x"}),
            "request.object.spec.tolerations:",
            id="tolerations-an-object",
        ),
        pytest.param(
            override(make_pod(), spec__tolerations=[{"tolerationSeconds": "5"}]),
            "request.object.spec.tolerations[0].tolerationSeconds:",
            id="seconds-a-string",
        ),
        pytest.param(
            override(make_pod(), spec__tolerations=[{"tolerationSeconds": 2**63}]),
            "request.object.spec.tolerations[0].tolerationSeconds:",
            id="seconds-past-int64",
        ),
        pytest.param(
            override(make_pod(), spec__nodeSelector={"a": ["b"]}),
            "request.object.spec.nodeSelector[*]:",
            id="node-selector-value-a-list",
        ),
        pytest.param(
            override(make_pod(), spec__schedulerName=7),
            "request.object.spec.schedulerName:",
            id="scheduler-name-a-number",
        ),
        pytest.param(
            make_pod(required=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": "a"}]}]),
            "request.object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].values:",
            id="values-a-string",
        ),
        pytest.param(
            make_pod(required=["x"]),
            "request.object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0]:",
            id="term-a-string",
        ),
        pytest.param(
            override(make_pod(), metadata__labels={"a": 1}),
            "request.object.metadata.labels[*]:",
            id="label-value-a-number",
        ),
        pytest.param({**make_pod(), "metadata": [1]}, "request.object.metadata:", id="metadata-a-list"),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "DELETE"])
def test_a_wrongly_typed_pod_field_is_refused_at_the_door_naming_it(pod: Json, field: str, operation: str) -> None:
    """Whatever the operation: a DELETE's object is checked too (the webhook reads its metadata for the namespace
    when the request names none)."""
    body = review(pod)
    body["request"]["operation"] = operation
    with pytest.raises(InvalidRequest) as caught:
        parse_review(orjson.dumps(body))
    assert caught.value.message.startswith(field), caught.value.message
    assert "expected" in caught.value.message


@pytest.mark.parametrize(
    ("pod", "what"),
    [
        pytest.param(make_pod(required=[term(expr("zone", "In", "a"))] * 101), "terms", id="terms"),
        pytest.param(make_pod(node_selector={f"k{i}": "v" for i in range(1001)}), "requirements", id="selector-keys"),
        pytest.param(
            make_pod(required=[term(*[expr(f"k{i}", "Exists") for i in range(1001)])]),
            "requirements",
            id="expressions",
        ),
        pytest.param(
            make_pod(required=[term(expr("zone", "In", *[f"z{i}" for i in range(10001)]))]), "values", id="values"
        ),
        pytest.param(make_pod(tolerations=[NOT_READY, *[AKS_TOLERATION] * 1001]), "tolerations", id="tolerations"),
    ],
)
def test_a_pod_over_the_limits_is_admitted_unchanged_with_a_warning(pod: dict[str, Any], what: str) -> None:
    m = mutate_pod(pod, "shop", DEFAULT)
    assert m.ops == () and m.skipped == "over-limits"
    assert m.warnings and what in m.warnings[0] and "over the limit" in m.warnings[0]


def test_the_pinned_check_reduces_the_node_selector_once_not_once_per_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quadratic case: thousands of nodeSelector keys ANDed into thousands of terms. The check now
    reduces the nodeSelector once and each term once: the number of reductions is terms + 1."""
    import shared.movable as movable

    sizes: list[int] = []
    original = movable._Pinning.__init__

    def counting(self: Any, conj: Any, classes: Any) -> None:
        sizes.append(len(conj))
        original(self, conj, classes)

    monkeypatch.setattr(movable._Pinning, "__init__", counting)
    on_demand = term(expr("karpenter.sh/capacity-type", "In", "on-demand"))
    pod = make_pod(node_selector={f"k{i}": "v" for i in range(400)}, required=[on_demand] * 100)
    assert mutate_pod(pod, "shop", DEFAULT).skipped == SKIP_PINNED_ON_DEMAND
    assert sorted(sizes) == [1] * 100 + [400]
