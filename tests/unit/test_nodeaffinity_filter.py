"""Node affinity filtering: shared.nodeaffinity and the node-selector half of shared.selectors against
kube-scheduler's tables.

Transcribed (ids are the upstream case names):
* ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go`` TestNodeAffinity (current table plus
  the nil/empty ``[]NodeSelectorTerm`` and "no selector" cases of the older one); the ``addedAffinity`` cases
  are left out, since the plugin argument is not modelled;
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go``
  TestPodMatchesNodeSelectorAndAffinityTerms, TestNodeSelectorMatch, TestNodeSelectorRequirementsAsSelector;
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/helpers_test.go`` TestMatchNodeSelectorTerms.

Scoring (TestNodeAffinityPriority, TestPreferredSchedulingTermsScore) and the purity test are in
test_nodeaffinity_score.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.nodeaffinity import check_node_affinity, matches_node_selector_and_affinity
from shared.selectors import parse_node_selector, parse_node_selector_term
from tests.builders.nodeaffinity import (
    H1,
    L1,
    MISMATCH,
    NAME,
    expr,
    make_node,
    make_pod,
    required,
    term,
)

# --- one case book, shared by the plugin's and the helper's tables -------------------------------------------

FOO_BAR = {"foo": "bar"}
GPU = {"GPU": "NVIDIA-GRID-K1"}
FIELD_NODE_1 = [expr(NAME, "In", "node_1")]

# name -> (pod kwargs, node labels, node name, fits)
CASES: dict[str, tuple[dict[str, Any], dict[str, str] | None, str, bool]] = {
    "no selector": ({}, None, "node", True),
    "missing labels": ({"node_selector": {"foo": "bar"}}, None, "node", False),
    "same labels": ({"node_selector": {"foo": "bar"}}, FOO_BAR, "node", True),
    "node labels are superset": ({"node_selector": {"foo": "bar"}}, {"foo": "bar", "baz": "blah"}, "node", True),
    "node labels are subset": ({"node_selector": {"foo": "bar", "baz": "blah"}}, FOO_BAR, "node", False),
    "Pod with matchExpressions using In operator that matches the existing node": (
        {"req": required(term([expr("foo", "In", "bar", "value2")]))},
        FOO_BAR,
        "node",
        True,
    ),
    "Pod with matchExpressions using Gt operator that matches the existing node": (
        {"req": required(term([expr("kernel-version", "Gt", "0204")]))},
        {"kernel-version": "0206"},
        "node",
        True,
    ),
    "Pod with matchExpressions using NotIn operator that matches the existing node": (
        {"req": required(term([expr("mem-type", "NotIn", "DDR", "DDR2")]))},
        {"mem-type": "DDR3"},
        "node",
        True,
    ),
    "Pod with matchExpressions using Exists operator that matches the existing node": (
        {"req": required(term([expr("GPU", "Exists")]))},
        GPU,
        "node",
        True,
    ),
    "Pod with affinity that don't match node's labels won't schedule onto the node": (
        {"req": required(term([expr("foo", "In", "value1", "value2")]))},
        FOO_BAR,
        "node",
        False,
    ),
    "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node": (
        {"req": {"nodeSelectorTerms": None}},
        FOO_BAR,
        "node",
        False,
    ),
    "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the "
    "node": ({"req": required()}, FOO_BAR, "node", False),
    "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node": (
        {"req": required(term([]))},
        FOO_BAR,
        "node",
        False,
    ),
    "Pod with no Affinity will schedule onto a node": ({}, FOO_BAR, "node", True),
    "Pod with Affinity but nil NodeSelector will schedule onto a node": (
        {"node_affinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}},
        FOO_BAR,
        "node",
        True,
    ),
    "Pod with multiple matchExpressions ANDed that matches the existing node": (
        {"req": required(term([expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")]))},
        GPU,
        "node",
        True,
    ),
    "Pod with multiple matchExpressions ANDed that doesn't match the existing node": (
        {"req": required(term([expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")]))},
        GPU,
        "node",
        False,
    ),
    "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node": (
        {"req": required(term([expr("foo", "In", "bar", "value2")]), term([expr("diffkey", "In", "wrong", "value2")]))},
        FOO_BAR,
        "node",
        True,
    ),
    "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, "
    "will schedule onto the node": (
        {"node_selector": {"foo": "bar"}, "req": required(term([expr("foo", "Exists")]))},
        FOO_BAR,
        "node",
        True,
    ),
    "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are "
    "deprecating) is not satisfied, won't schedule onto the node": (
        {"node_selector": {"foo": "bar"}, "req": required(term([expr("foo", "Exists")]))},
        {"foo": "barrrrrr"},
        "node",
        False,
    ),
    "Pod with an invalid value in Affinity term won't be scheduled onto the node": (
        {"req": required(term([expr("foo", "NotIn", "invalid value: ___@#$%^")]))},
        FOO_BAR,
        "node",
        False,
    ),
    "Pod with matchFields using In operator that matches the existing node": (
        {"req": required(term(fields=FIELD_NODE_1))},
        None,
        "node_1",
        True,
    ),
    "Pod with matchFields using In operator that does not match the existing node": (
        {"req": required(term(fields=FIELD_NODE_1))},
        None,
        "node_2",
        False,
    ),
    "Pod with two terms: matchFields does not match, but matchExpressions matches": (
        {"req": required(term(fields=FIELD_NODE_1), term([expr("foo", "In", "bar")]))},
        FOO_BAR,
        "node_2",
        True,
    ),
    "Pod with one term: matchFields does not match, but matchExpressions matches": (
        {"req": required(term([expr("foo", "In", "bar")], FIELD_NODE_1))},
        FOO_BAR,
        "node_2",
        False,
    ),
    "Pod with one term: both matchFields and matchExpressions match": (
        {"req": required(term([expr("foo", "In", "bar")], FIELD_NODE_1))},
        FOO_BAR,
        "node_1",
        True,
    ),
    "Pod with two terms: both matchFields and matchExpressions do not match": (
        {"req": required(term(fields=FIELD_NODE_1), term([expr("foo", "In", "not-match-to-bar")]))},
        FOO_BAR,
        "node_2",
        False,
    ),
    "Pod with two terms of node.Name affinity": (
        {"req": required(term(fields=FIELD_NODE_1), term(fields=[expr(NAME, "In", "node_2")]))},
        None,
        "node_2",
        True,
    ),
    "Pod with two conflicting mach field requirements": (
        {"req": required(term(fields=[expr(NAME, "In", "node_1"), expr(NAME, "In", "node_2")]))},
        FOO_BAR,
        "node_2",
        False,
    ),
    "Matches node selector correctly even if PreFilter is not called": (
        {"node_selector": {"foo": "bar"}},
        {"foo": "bar", "baz": "blah"},
        "node",
        True,
    ),
    "Matches node affinity correctly even if PreFilter is not called": (
        {"req": required(term([expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")]))},
        GPU,
        "node",
        True,
    ),
}

# node_affinity_test.go TestNodeAffinity: everything above.
FILTER_CASES = list(CASES)
# nodeaffinity_test.go TestPodMatchesNodeSelectorAndAffinityTerms: the same cases minus the plugin-only ones.
HELPER_CASES = [
    n
    for n in CASES
    if n
    not in {
        "Pod with two terms of node.Name affinity",
        "Pod with two conflicting mach field requirements",
        "Matches node selector correctly even if PreFilter is not called",
        "Matches node affinity correctly even if PreFilter is not called",
    }
]


@pytest.mark.parametrize("name", FILTER_CASES, ids=FILTER_CASES)
def test_node_affinity_filter(name: str) -> None:
    pod_kwargs, labels, node_name, fits = CASES[name]
    got = check_node_affinity(make_pod(**pod_kwargs), make_node(node_name, labels))
    assert got == (None if fits else MISMATCH)
    if got is not None:
        assert got.message == "node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize("name", HELPER_CASES, ids=HELPER_CASES)
def test_pod_matches_node_selector_and_affinity_terms(name: str) -> None:
    pod_kwargs, labels, node_name, fits = CASES[name]
    assert matches_node_selector_and_affinity(make_pod(**pod_kwargs), make_node(node_name, labels)) is fits


# --- helpers_test.go TestMatchNodeSelectorTerms -------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "node_name", "labels", "want"),
    [
        pytest.param(
            required(term(L1)), "", {"label_1": "label_1_val"}, True, id="node label matches matchExpressions terms"
        ),
        pytest.param(required(term(fields=H1)), "host_1", None, True, id="node field matches matchFields terms"),
        pytest.param(
            required(term(fields=[expr(NAME, "In", "host_1", "host_2")])),
            "host_1",
            None,
            False,
            id="invalid node field requirement",
        ),
        pytest.param(
            required(term(fields=H1)), "not_host_1", {NAME: "host_1"}, False, id="fieldSelectorTerm with node labels"
        ),
        pytest.param(
            required(term([expr(NAME, "In", "host_1")])), "host_1", None, False, id="labelSelectorTerm with node fields"
        ),
        pytest.param(
            required(term(L1, H1)),
            "host_1",
            None,
            False,
            id="labelSelectorTerm and fieldSelectorTerm was set, but only node fields",
        ),
        pytest.param(
            required(term(L1, H1)),
            "host_1",
            {"label_1": "label_1_val"},
            True,
            id="labelSelectorTerm and fieldSelectorTerm was set, both node fields and labels (both matched)",
        ),
        pytest.param(
            required(term(L1, H1)),
            "host_1",
            {"label_1": "label_1_val-failed"},
            False,
            id="labelSelectorTerm and fieldSelectorTerm was set, both node fields and labels (one mismatched)",
        ),
        pytest.param(
            required(term(L1), term(fields=H1)),
            "host_1",
            {"label_1": "label_1_val-failed"},
            True,
            id="multi-selector was set, both node fields and labels (one mismatched)",
        ),
    ],
)
def test_match_node_selector_terms(
    selector: dict[str, Any], node_name: str, labels: dict[str, str] | None, want: bool
) -> None:
    parsed = parse_node_selector(selector)
    assert parsed is not None
    assert parsed.matches(node_name or "node", labels or {}) is want
    # The same selector as a pod's required affinity goes through the same code.
    assert check_node_affinity(make_pod(req=selector), make_node(node_name or "node", labels)) == (
        None if want else MISMATCH
    )


def test_nil_node_selector_is_no_constraint_for_a_pod() -> None:
    # helpers_test.go "nil terms" passes a nil node, which cannot occur here; a nil selector is "no affinity".
    assert parse_node_selector(None) is None
    assert check_node_affinity(make_pod(), make_node()) is None


# --- nodeaffinity_test.go TestNodeSelectorMatch -------------------------------------------------------------


def test_node_selector_match_invalid_field_selector_and_label_selector() -> None:
    selector = parse_node_selector(
        required(
            term(fields=[expr(NAME, "In", "host_1", "host_2")]),
            term(L1, H1),
            term([expr("invalid key", "In", "label_value")]),
        )
    )
    assert selector is not None
    assert len(selector.errors) == 2
    assert "nodeSelectorTerms[0].matchFields[0].values" in selector.errors[0]
    assert "must have one element" in selector.errors[0]
    assert "nodeSelectorTerms[2].matchExpressions[0]" in selector.errors[1]
    assert "name part must consist of alphanumeric characters" in selector.errors[1]
    assert [t.valid for t in selector.terms] == [False, True, False]
    # Upstream NewNodeSelector refuses the whole selector; the scheduler's pod path uses the lazy selector,
    # where the valid middle term still decides.
    assert selector.matches("host_1", {"label_1": "label_1_val"})
    assert not selector.matches("host_2", {"label_1": "label_1_val"})


@pytest.mark.parametrize(
    ("selector", "node_name", "labels", "want"),
    [
        pytest.param(required(term(L1, H1)), "host_1", None, False, id="node matches field selector, but not labels"),
        pytest.param(
            required(term(L1, H1)),
            "host_1",
            {"label_1": "label_1_val"},
            True,
            id="node matches field selector and label selector",
        ),
        pytest.param(required(term(L1), term(fields=H1)), "host_1", None, True, id="second term matches"),
    ],
)
def test_node_selector_match(
    selector: dict[str, Any], node_name: str, labels: dict[str, str] | None, want: bool
) -> None:
    parsed = parse_node_selector(selector)
    assert parsed is not None and parsed.errors == ()
    assert parsed.matches(node_name, labels or {}) is want


# --- nodeaffinity_test.go TestNodeSelectorRequirementsAsSelector -------------------------------------------


@pytest.mark.parametrize(
    ("exprs", "labels", "valid", "want"),
    [
        pytest.param(None, {"foo": "bar"}, True, False, id="nil requirements select nothing"),
        pytest.param([], {"foo": "bar"}, True, False, id="empty requirements select nothing"),
        pytest.param([expr("foo", "In", "bar", "baz")], {"foo": "baz"}, True, True, id="foo in (baz,bar)"),
        pytest.param([expr("foo", "Exists", "bar", "baz")], {"foo": "bar"}, False, False, id="Exists with values"),
        pytest.param([expr("foo", "Gt", "1")], {"foo": "2"}, True, True, id="foo>1"),
        pytest.param([expr("bar", "Lt", "7")], {"bar": "6"}, True, True, id="bar<7"),
    ],
)
def test_node_selector_requirements_as_selector(
    exprs: list[dict[str, Any]] | None, labels: dict[str, str], valid: bool, want: bool
) -> None:
    parsed, err = parse_node_selector_term(term(exprs))
    assert parsed.valid is valid and (err is None) is valid
    assert parsed.matches("node", labels) is want


# --- edge cases of the requirement grammar (labels.NewRequirement, Requirement.Matches) ---------------------


@pytest.mark.parametrize(
    ("requirement", "labels", "want"),
    [
        pytest.param(expr("k", "Gt", "5"), {"k": "1_0"}, False, id="Gt label with underscore is no integer in Go"),
        pytest.param(expr("k", "Gt", "5"), {"k": "+7"}, True, id="Gt label with plus sign parses in Go"),
        pytest.param(expr("k", "Lt", "5"), {"k": " 3"}, False, id="Lt label with space is no integer"),
        pytest.param(expr("k", "Lt", "5"), {"k": "-3"}, True, id="Lt negative label"),
        pytest.param(expr("k", "Gt", "5"), {"k": "9223372036854775808"}, False, id="Gt label beyond int64"),
        pytest.param(expr("k", "Gt", "5"), {"k": "٣٣"}, False, id="Gt label with non-ASCII digits"),
        pytest.param(expr("k", "Gt", "5"), {}, False, id="Gt missing label"),
        pytest.param(expr("k", "Gt", "-1"), {"k": "0"}, False, id="Gt bound -1 is no valid label value"),
        pytest.param(expr("k", "Gt", "9223372036854775808"), {"k": "1"}, False, id="Gt bound beyond int64"),
        pytest.param(expr("k", "Gt", "1", "2"), {"k": "5"}, False, id="Gt with two values"),
        pytest.param(expr("k", "Gt", "x"), {"k": "5"}, False, id="Gt with a non-integer"),
        pytest.param(expr("k", "NotIn", "a"), {}, True, id="NotIn matches a missing label"),
        pytest.param(expr("k", "DoesNotExist"), {}, True, id="DoesNotExist matches a missing label"),
        pytest.param(expr("k", "DoesNotExist"), {"k": ""}, False, id="DoesNotExist fails on an empty label"),
        pytest.param(expr("k", "In", ""), {"k": ""}, True, id="In empty value matches an empty label"),
        pytest.param(expr("k", "In", ""), {}, False, id="In empty value needs the label"),
        pytest.param(expr("k", "Exists"), {"k": ""}, True, id="Exists matches an empty label"),
        pytest.param(expr("k", "In"), {"k": "a"}, False, id="In without values"),
        pytest.param(expr("k", "Equals", "a"), {"k": "a"}, False, id="unknown operator"),
        pytest.param(expr("example.com/k", "In", "a"), {"example.com/k": "a"}, True, id="prefixed key"),
        pytest.param(expr("Example.com/k", "In", "a"), {"Example.com/k": "a"}, False, id="upper-case key prefix"),
        pytest.param(expr("a/b/c", "Exists"), {"a/b/c": "x"}, False, id="key with two slashes"),
        pytest.param(expr("k" * 64, "Exists"), {"k" * 64: "x"}, False, id="key name longer than 63"),
        pytest.param(expr("k", "In", "v" * 64), {"k": "v" * 64}, False, id="value longer than 63"),
        pytest.param(expr("k", "NotIn", "-a"), {"k": "b"}, False, id="NotIn with a value starting with a dash"),
    ],
)
def test_requirement_edge_cases(requirement: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    assert check_node_affinity(make_pod(req=required(term([requirement]))), make_node("n", labels)) == (
        None if want else MISMATCH
    )


def test_an_invalid_term_does_not_spoil_the_others() -> None:
    pod = make_pod(req=required(term([expr("foo", "Equals", "bar")]), term([expr("foo", "In", "bar")])))
    assert pod.required_affinity is not None and len(pod.required_affinity.errors) == 1
    assert check_node_affinity(pod, make_node("n", FOO_BAR)) is None


@pytest.mark.parametrize(
    ("fields", "node_name", "want"),
    [
        pytest.param([expr(NAME, "NotIn", "node-a")], "node-b", True, id="NotIn metadata.name on another node"),
        pytest.param([expr(NAME, "NotIn", "node-a")], "node-a", False, id="NotIn metadata.name on that node"),
        pytest.param([expr("metadata.uid", "In", "x")], "node-a", False, id="other field In reads empty"),
        pytest.param([expr("metadata.uid", "NotIn", "x")], "node-a", True, id="other field NotIn reads empty"),
        pytest.param([expr(NAME, "Exists")], "node-a", False, id="Exists is no field operator"),
        pytest.param([expr(NAME, "In")], "node-a", False, id="field In without values"),
    ],
)
def test_match_fields_edge_cases(fields: list[dict[str, Any]], node_name: str, want: bool) -> None:
    got = check_node_affinity(make_pod(req=required(term(fields=fields))), make_node(node_name))
    assert got == (None if want else MISMATCH)


def test_fields_are_skipped_for_a_nameless_node() -> None:
    # CheckNodeAffinity for PVs builds a node from labels only; extractNodeFields is then empty.
    selector = parse_node_selector(required(term(fields=H1)))
    assert selector is not None
    assert selector.matches("", {})
    assert not selector.matches("host_2", {})


@pytest.mark.parametrize(
    ("node_selector", "labels", "want"),
    [
        pytest.param({"k": ""}, {"k": ""}, True, id="nodeSelector empty value matches an empty label"),
        pytest.param({"k": ""}, {}, False, id="nodeSelector empty value needs the label"),
        pytest.param({}, {}, True, id="empty nodeSelector"),
    ],
)
def test_node_selector_edge_cases(node_selector: dict[str, str], labels: dict[str, str], want: bool) -> None:
    assert matches_node_selector_and_affinity(make_pod(node_selector=node_selector), make_node("n", labels)) is want
