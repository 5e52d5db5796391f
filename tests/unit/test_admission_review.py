"""The AdmissionReview around the pure mutation: the response echoes the request and carries a base64 JSON
patch, a review that is not a pod review is refused with a sentence, and the memo answers exactly what the
function computes.
"""

from __future__ import annotations

import base64
import copy

import orjson
import pytest

from extender.admission import SKIP_EXCLUDED_NAMESPACE, MutationMemo, MutationPolicy, build_response, parse_review
from extender.errors import InvalidRequest
from tests.builders import expr
from tests.builders.admission import (
    AKS,
    AKS_TOLERATION,
    DEFAULT,
    KARPENTER,
    NOT_READY,
    make_pod,
    policy,
    review,
    term,
)

# --- the AdmissionReview ------------------------------------------------------------------------------------


def test_response_echoes_the_review_and_carries_a_base64_json_patch() -> None:
    rev = review(make_pod())
    answer, m = build_response(parse_review(orjson.dumps(rev)), KARPENTER)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    resp = answer["response"]
    assert resp["uid"] == rev["request"]["uid"]
    assert resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(resp["patch"])) == list(m.ops)


def test_skipped_pod_gets_allowed_without_patch() -> None:
    answer, m = build_response(parse_review(orjson.dumps(review(make_pod(), namespace="kube-system"))), KARPENTER)
    assert answer["response"] == {"uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816", "allowed": True}
    assert m.skipped == SKIP_EXCLUDED_NAMESPACE


def test_dry_run_gets_the_same_answer() -> None:
    real, _ = build_response(parse_review(orjson.dumps(review(make_pod()))), DEFAULT)
    dry, _ = build_response(parse_review(orjson.dumps(review(make_pod(), dry_run=True))), DEFAULT)
    assert dry == real


def test_build_response_does_not_modify_the_review() -> None:
    rev = review(make_pod(anti_affinity=True))
    before = copy.deepcopy(rev)
    build_response(rev, DEFAULT)  # type: ignore[arg-type]
    assert rev == before


def test_require_warning_reaches_the_response() -> None:
    rev = review(make_pod(required=[{}, term(expr("zone", "In", "a"))]))
    answer, _ = build_response(rev, policy(webhook={"mode": "require"}))  # type: ignore[arg-type]
    assert answer["response"]["warnings"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "not valid JSON", id="malformed-json"),
        pytest.param(b"[1, 2]", "request body: expected an object, got an array", id="not-an-object"),
        pytest.param(
            orjson.dumps({**review(make_pod()), "kind": "Pod"}), "kind must be AdmissionReview", id="wrong-kind"
        ),
        pytest.param(
            orjson.dumps({**review(make_pod()), "apiVersion": "admission.k8s.io/v2"}),
            "apiVersion",
            id="wrong-api-version",
        ),
        pytest.param(
            orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "no request",
            id="no-request",
        ),
        pytest.param(
            orjson.dumps({**review(make_pod()), "request": {**review(make_pod())["request"], "uid": ""}}),
            "uid",
            id="missing-uid",
        ),
        pytest.param(
            orjson.dumps(
                {
                    **review(make_pod()),
                    "request": {
                        **review(make_pod())["request"],
                        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                    },
                }
            ),
            "Pod",
            id="non-pod-kind",
        ),
        pytest.param(
            orjson.dumps(
                {**review(make_pod()), "request": {**review(make_pod())["request"], "object": {"kind": "Service"}}}
            ),
            "Pod",
            id="non-pod-object",
        ),
    ],
)
def test_parse_review_rejects_what_is_not_a_pod_review(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_review(body)


# --- the memo -------------------------------------------------------------------------------------------------


MEMO_PODS = [
    make_pod(),
    make_pod(tolerations=None),
    make_pod(anti_affinity=True),
    make_pod(owner_kind="DaemonSet"),
    make_pod(labels={"spotshift.io/exclude": "true"}),
    make_pod(node_selector={"karpenter.sh/capacity-type": "on-demand"}),
    make_pod(tolerations=[NOT_READY, AKS_TOLERATION]),
    make_pod(scheduler="team-scheduler"),
]


@pytest.mark.parametrize("pol", [DEFAULT, AKS, policy(webhook={"scheduler_name": "s", "mode": "require"})])
def test_memo_answers_exactly_what_the_function_computes(pol: MutationPolicy) -> None:
    memo = MutationMemo()
    for namespace in ("shop", "kube-system"):
        for _ in range(2):  # the second round is served from the memo
            for pod in MEMO_PODS:
                rev = review(pod, namespace=namespace)
                assert build_response(rev, pol, memo) == build_response(rev, pol)  # type: ignore[arg-type]
    assert memo.hits == 2 * len(MEMO_PODS)


def test_memo_key_ignores_the_pod_name_but_not_what_the_mutation_reads() -> None:
    a, b = make_pod(), make_pod()
    b["metadata"]["name"] = "web-6d4cf56db6-zz9xq"
    assert MutationMemo.key(a, "shop", "CREATE") == MutationMemo.key(b, "shop", "CREATE")
    assert MutationMemo.key(a, "shop", "CREATE") != MutationMemo.key(a, "other", "CREATE")
    assert MutationMemo.key(a, "shop", "CREATE") != MutationMemo.key(make_pod(labels={"x": "y"}), "shop", "CREATE")
