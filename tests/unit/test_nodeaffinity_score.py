"""Node affinity scoring and purity: shared.nodeaffinity against kube-scheduler's tables.

Transcribed (ids are the upstream case names):
* ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go`` TestNodeAffinityPriority (normalised
  with ``helper.DefaultNormalizeScore(100, reverse=false)``);
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go``
  TestPreferredSchedulingTermsScore;
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/helpers_test.go`` TestMatchNodeSelectorTermsStateless
  (the purity test).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.model import Node, Pod
from shared.nodeaffinity import check_node_affinity, matches_node_selector_and_affinity, preferred_affinity_score
from shared.selectors import parse_node_selector
from tests.builders.nodeaffinity import (
    H1,
    L1,
    NAME,
    expr,
    make_node,
    make_pod,
    node_json,
    pod_json,
    required,
    term,
)
from tests.scoring import default_normalize_score

# --- nodeaffinity_test.go TestPreferredSchedulingTermsScore -----------------------------------------------


def test_preferred_scheduling_terms_score_invalid_field_selector_and_label_selector() -> None:
    pod = make_pod(
        preferred=[
            (1, term(fields=[expr(NAME, "In", "host_1", "host_2")])),
            (1, term(L1, H1)),
            (1, term([expr("invalid key", "In", "label_value")])),
        ]
    )
    assert [t.valid for _, t in pod.preferred_affinity] == [False, True, False]
    # Upstream fails the scoring step; here the broken terms never match and the valid one still counts.
    assert preferred_affinity_score(pod, make_node("host_1", {"label_1": "label_1_val"})) == 1


@pytest.mark.parametrize(
    ("preferred", "want"),
    [
        pytest.param(
            [(0, term(fields=[expr(NAME, "In", "host_1", "host_2")]))],
            0,
            id="invalid field selector but no weight, error not reported",
        ),
        pytest.param(
            [
                (5, term(fields=H1)),
                (7, term([expr("unknown_label", "In", "unknown_label_val")])),
                (11, term(L1)),
            ],
            16,
            id="first and third term match",
        ),
        pytest.param([(9, term())], 0, id="empty preference adds nothing"),
        pytest.param([(0, term(L1))], 0, id="zero weight adds nothing"),
    ],
)
def test_preferred_scheduling_terms_score(preferred: list[tuple[int, dict[str, Any]]], want: int) -> None:
    pod = make_pod(preferred=preferred)
    assert preferred_affinity_score(pod, make_node("host_1", {"label_1": "label_1_val"})) == want


# --- node_affinity_test.go TestNodeAffinityPriority -------------------------------------------------------


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = [(2, term([expr("foo", "In", "bar")]))]
AFFINITY2 = [
    (2, term([expr("foo", "In", "bar")])),
    (4, term([expr("key", "In", "value")])),
    (5, term([expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")])),
]


@pytest.mark.parametrize(
    ("preferred", "nodes", "expected"),
    [
        pytest.param(
            None,
            [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
            [0, 0, 0],
            id="all nodes are same priority as NodeAffinity is nil",
        ),
        pytest.param(None, [("node1", LABEL1)], [0], id="Skip is returned in PreScore when NodeAffinity is nil"),
        pytest.param(
            AFFINITY1,
            [("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)],
            [0, 0, 0],
            id="no node matches preferred scheduling requirements in NodeAffinity of pod so all nodes' priority is "
            "zero",
        ),
        pytest.param(
            AFFINITY1,
            [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
            [100, 0, 0],
            id="only node1 matches the preferred scheduling requirements of pod",
        ),
        pytest.param(
            AFFINITY2,
            [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
            [18, 100, 36],
            id="all nodes matches the preferred scheduling requirements of pod but with different priorities ",
        ),
        pytest.param(
            AFFINITY2,
            [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
            [18, 100, 36],
            id="calculate the priorities correctly even if PreScore is not called",
        ),
    ],
)
def test_node_affinity_priority(
    preferred: list[tuple[int, dict[str, Any]]] | None, nodes: list[tuple[str, dict[str, str]]], expected: list[int]
) -> None:
    pod = make_pod(preferred=preferred)
    raw = [preferred_affinity_score(pod, make_node(name, labels)) for name, labels in nodes]
    assert default_normalize_score(raw) == expected


def test_pre_score_returns_error_when_an_incoming_pod_has_a_broken_affinity() -> None:
    # Upstream: PreScore returns an error status. Here the broken term is recorded invalid and scores nothing.
    pod = make_pod(preferred=[(2, term([expr("invalid key", "In", "bar")]))])
    assert [t.valid for _, t in pod.preferred_affinity] == [False]
    assert preferred_affinity_score(pod, make_node("node1", LABEL1)) == 0


# --- purity: helpers_test.go TestMatchNodeSelectorTermsStateless and the pod path -----------------------------

IN_12 = expr("label_1", "In", "label_1_val", "label_2_val")
IN_21 = expr("label_1", "In", "label_2_val", "label_1_val")
F_12 = expr(NAME, "In", "host_1", "host_2")
F_21 = expr(NAME, "In", "host_2", "host_1")


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param(required(term([IN_12])), id="nodeLabels: preordered matchExpressions and nil matchFields"),
        pytest.param(required(term([IN_21])), id="nodeLabels: unordered matchExpressions and nil matchFields"),
        pytest.param(required(term(fields=[F_12])), id="nodeFields: nil matchExpressions and preordered matchFields"),
        pytest.param(required(term(fields=[F_21])), id="nodeFields: nil matchExpressions and unordered matchFields"),
        pytest.param(
            required(term([IN_12], [F_12])),
            id="nodeLabels and nodeFields: ordered matchExpressions and ordered matchFields",
        ),
        pytest.param(
            required(term([IN_12], [F_21])),
            id="nodeLabels and nodeFields: ordered matchExpressions and unordered matchFields",
        ),
        pytest.param(
            required(term([IN_21], [F_12])),
            id="nodeLabels and nodeFields: unordered matchExpressions and ordered matchFields",
        ),
        pytest.param(
            required(term([IN_21], [F_21])),
            id="nodeLabels and nodeFields: unordered matchExpressions and unordered matchFields",
        ),
    ],
)
def test_match_node_selector_terms_stateless(selector: dict[str, Any]) -> None:
    want = copy.deepcopy(selector)
    raw_pod = pod_json(
        node_selector={"x": "y"}, node_affinity={"requiredDuringSchedulingIgnoredDuringExecution": selector}
    )
    raw_node = node_json("host_1", {"label_1": "label_1_val", "x": "y"})
    pod_before, node_before = copy.deepcopy(raw_pod), copy.deepcopy(raw_node)

    parsed = parse_node_selector(selector)
    assert parsed == parse_node_selector(selector)  # parse the same dict twice: equal results
    pod, node = Pod.from_api(raw_pod), Node.from_api(raw_node)
    assert pod == Pod.from_api(raw_pod) and node == Node.from_api(raw_node)

    results = {
        (parsed is not None and parsed.matches("host_1", node.labels)),
        check_node_affinity(pod, node) is None,
        matches_node_selector_and_affinity(pod, node),
    }
    assert len(results) == 1  # every path agrees
    assert selector == want
    assert raw_pod == pod_before and raw_node == node_before
    assert pod == Pod.from_api(pod_before) and node == Node.from_api(node_before)
