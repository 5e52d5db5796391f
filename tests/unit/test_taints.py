"""shared.taints against kube-scheduler's own tables.

Transcribed (ids are the upstream case names):
* ``staging/src/k8s.io/api/core/v1/toleration_test.go`` TestTolerationToleratesTaint;
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/helpers_test.go`` TestFindMatchingUntoleratedTaint
  (the same table as ``pkg/apis/core/v1/helper`` TestTolerationsTolerateTaintsWithFilter);
* ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go`` TestTaintTolerationFilter and
  TestTaintTolerationScore (raw counts normalised with ``helper.DefaultNormalizeScore(100, reverse=true)``).
  TestTaintTolerationFilter runs once per release whose text it expects: at v1.33.13 ``node(s) had untolerated
  taint {dedicated: user1}``, at v1.34.4, v1.35.4, v1.36.3 and v1.37.2 ``node(s) had untolerated taint(s)``
  (``Switches.taint_reason_omits_taint``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit_reasons import ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT_NAMED, Reason
from shared.model import Node, Pod, Taint, Toleration
from shared.switches import for_version
from shared.taints import (
    DO_NOT_SCHEDULE_EFFECTS,
    check_taints,
    count_intolerable_prefer_no_schedule,
    find_matching_untolerated_taint,
    tolerates,
    tolerates_all,
)
from tests import builders
from tests.builders import taint
from tests.builders import toleration as tol
from tests.scoring import default_normalize_score

NS, PNS, NE = "NoSchedule", "PreferNoSchedule", "NoExecute"
ALL_EFFECTS = frozenset({NS, PNS, NE})


# --- builders: API JSON in, parsed views out ----------------------------------------------------------------


def node_json(name: str, taints: list[dict[str, str]]) -> dict[str, Any]:
    return builders.node_json(name, taints=taints)


def pod_json(name: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    return builders.pod_json(name, image="pause", tolerations=tolerations)


def node_with_taints(name: str, taints: list[dict[str, str]]) -> Node:
    """``nodeWithTaints(name, taints)`` of ``taint_toleration_test.go``."""
    return Node.from_api(node_json(name, taints))


def pod_with_tolerations(name: str, tolerations: list[dict[str, str]]) -> Pod:
    """``podWithTolerations(name, tolerations)`` of ``taint_toleration_test.go``."""
    return Pod.from_api(pod_json(name, tolerations))


def untolerated(key: str, value: str) -> tuple[str, str]:
    """The first untolerated taint a filter case expects; :func:`reported` words it as a release does."""
    return key, value


def reported(first: tuple[str, str], version: str) -> Reason:
    """TestTaintTolerationFilter's ``wantStatus`` at ``version``'s tag, as a :class:`Reason`."""
    if for_version(version).taint_reason_omits_taint:
        return Reason(ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT, True)
    key, value = first
    return Reason(ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT_NAMED.format(key=key, value=value), True)


# Releases whose TestTaintTolerationFilter was read at the tag: the text changed between the first two.
FILTER_RELEASES = ["v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"]


# --- toleration_test.go TestTolerationToleratesTaint --------------------------------------------------------

SLA = "node.kubernetes.io/sla"


@pytest.mark.parametrize(
    ("toleration", "taint_", "expected"),
    [
        pytest.param(
            tol("foo", "Exists", effect=NS),
            taint("foo"),
            True,
            id="toleration and taint have the same key and effect, and operator is Exists, and taint has no value, "
            "expect tolerated",
        ),
        pytest.param(
            tol("foo", "Exists", effect=NS),
            taint("foo", "bar"),
            True,
            id="toleration and taint have the same key and effect, and operator is Exists, and taint has some value, "
            "expect tolerated",
        ),
        pytest.param(
            tol("", "Exists", effect=NS),
            taint("foo", "bar"),
            True,
            id="toleration and taint have the same effect, toleration has empty key and operator is Exists, means "
            "match all taints, expect tolerated",
        ),
        pytest.param(
            tol("foo", "Equal", "bar", NS),
            taint("foo", "bar"),
            True,
            id="toleration and taint have the same key, effect and value, and operator is Equal, expect tolerated",
        ),
        pytest.param(
            tol("foo", "Equal", "value1", NS),
            taint("foo", "value2"),
            False,
            id="toleration and taint have the same key and effect, but different values, and operator is Equal, "
            "expect not tolerated",
        ),
        pytest.param(
            tol("foo", "Equal", "bar", NS),
            taint("foo", "bar", NE),
            False,
            id="toleration and taint have the same key and value, but different effects, and operator is Equal, "
            "expect not tolerated",
        ),
        pytest.param(
            tol(SLA, "Gt", "950", NS),
            taint(SLA, "800"),
            False,
            id="toleration with Gt operator - taint value less than toleration value, expect not tolerated",
        ),
        pytest.param(
            tol(SLA, "Gt", "750", NS),
            taint(SLA, "950"),
            True,
            id="toleration with Gt operator - taint value greater than toleration value, expect tolerated",
        ),
        pytest.param(
            tol(SLA, "Lt", "800", NS),
            taint(SLA, "950"),
            False,
            id="toleration with Lt operator - taint value greater than toleration value, expect not tolerated",
        ),
        pytest.param(
            tol(SLA, "Lt", "950", NS),
            taint(SLA, "800"),
            True,
            id="toleration with Lt operator - taint value less than toleration value, expect tolerated",
        ),
        pytest.param(
            tol(SLA, "Gt", "950", NS),
            taint(SLA, "950"),
            False,
            id="toleration with Gt operator and taint with equal numeric value, expect not tolerated",
        ),
        pytest.param(
            tol(SLA, "Gt", "950", NS),
            taint(SLA, "high"),
            False,
            id="toleration with Gt operator and taint with non-numeric value, expect not tolerated",
        ),
        pytest.param(
            tol("test-key", "Gt", "-100", NS),
            taint("test-key", "-200"),
            False,
            id="toleration with Gt operator and negative numeric values - taint value less than threshold, "
            "expect not tolerated",
        ),
        pytest.param(
            tol("test-key", "Gt", "9223372036854775806", NS),
            taint("test-key", "100"),
            False,
            id="toleration with Gt operator and large int64 values - taint value less than threshold, "
            "expect not tolerated",
        ),
        # Edge cases beyond upstream.
        pytest.param(tol("foo", None, "bar", NS), taint("foo", "bar"), True, id="empty operator means Equal"),
        pytest.param(tol("foo", None, "", NS), taint("foo", "bar"), False, id="empty operator compares values"),
        pytest.param(tol("", "Exists"), taint("anything", "x", NE), True, id="key-less Exists without effect"),
        pytest.param(tol("foo", "Exists"), taint("foo", "x", PNS), True, id="empty effect matches every effect"),
        pytest.param(tol("foo", "Exists", effect=NE), taint("bar", "", NE), False, id="different key"),
        pytest.param(tol("foo", "In", "bar"), taint("foo", "bar"), False, id="unknown operator tolerates nothing"),
        pytest.param(tol("k", "Gt", "-100", NS), taint("k", "-50"), True, id="Gt with negative values"),
        pytest.param(tol("k", "Gt", "0100", NS), taint("k", "200"), False, id="Gt value with leading zero"),
        pytest.param(tol("k", "Lt", "100", NS), taint("k", "+50"), False, id="Lt taint value with plus sign"),
        pytest.param(tol("k", "Lt", "100", NS), taint("k", "-0"), False, id="Lt taint value minus zero"),
        pytest.param(tol("k", "Gt", "-1", NS), taint("k", "0"), True, id="Gt zero is canonical"),
        pytest.param(tol("k", "Lt", "9223372036854775808", NS), taint("k", "1"), False, id="Lt bound beyond int64"),
        pytest.param(tol("k", "Gt", "1", NS), taint("k", ""), False, id="Gt with empty taint value"),
    ],
)
def test_toleration_tolerates_taint(toleration: dict[str, str], taint_: dict[str, str], expected: bool) -> None:
    assert tolerates(Toleration.from_api(toleration), Taint.from_api(taint_)) is expected


def test_toleration_with_empty_operator_built_directly_means_equal() -> None:
    assert tolerates(Toleration("foo", "", "bar", NS), Taint("foo", "bar", NS))
    assert not tolerates(Toleration("foo", "", "baz", NS), Taint("foo", "bar", NS))


# --- helpers_test.go TestFindMatchingUntoleratedTaint ------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "taints", "effects", "expect_tolerated"),
    [
        pytest.param([], [], ALL_EFFECTS, True, id="empty tolerations tolerate empty taints"),
        pytest.param(
            [tol("foo", "Exists", effect=NS)], [], ALL_EFFECTS, True, id="non-empty tolerations tolerate empty taints"
        ),
        pytest.param(
            [tol("foo", "Exists", effect=NS)],
            [taint("foo")],
            ALL_EFFECTS,
            True,
            id="tolerations match all taints, expect tolerated",
        ),
        pytest.param(
            [tol("foo", "Exists", effect=NS)],
            [taint("bar")],
            frozenset(),
            True,
            id="tolerations don't match taints, but no taints apply to the filter, expect tolerated",
        ),
        pytest.param(
            [tol("foo", "Exists", effect=NS)],
            [taint("bar")],
            None,
            False,
            id="no filterFunc indicated, means all taints apply to the filter, tolerations don't match taints, "
            "expect untolerated",
        ),
        pytest.param(
            [tol("foo", "Exists", effect=NE)],
            [taint("foo", effect=NE), taint("bar", effect=NS)],
            frozenset({NE}),
            True,
            id="tolerations match taints, expect tolerated",
        ),
    ],
)
def test_find_matching_untolerated_taint(
    tolerations: list[dict[str, str]],
    taints: list[dict[str, str]],
    effects: frozenset[str] | None,
    expect_tolerated: bool,
) -> None:
    parsed_taints = [Taint.from_api(t) for t in taints]
    parsed_tolerations = [Toleration.from_api(t) for t in tolerations]
    found = find_matching_untolerated_taint(parsed_taints, parsed_tolerations, effects)
    assert (found is None) is expect_tolerated
    assert tolerates_all(parsed_taints, parsed_tolerations, effects) is expect_tolerated


def test_find_matching_untolerated_taint_returns_the_first_in_node_order() -> None:
    taints = [Taint("a", "1", PNS), Taint("b", "2", NS), Taint("c", "3", NE)]
    assert find_matching_untolerated_taint(taints, []) == Taint("a", "1", PNS)
    assert find_matching_untolerated_taint(taints, [], DO_NOT_SCHEDULE_EFFECTS) == Taint("b", "2", NS)
    assert find_matching_untolerated_taint(taints, [Toleration("b", "Exists")], DO_NOT_SCHEDULE_EFFECTS) == Taint(
        "c", "3", NE
    )
    assert find_matching_untolerated_taint(iter(taints), [], frozenset({NE})) == Taint("c", "3", NE)


# --- taint_toleration_test.go TestTaintTolerationFilter ----------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "taints", "want"),
    [
        pytest.param(
            [],
            [taint("dedicated", "user1", NS)],
            untolerated("dedicated", "user1"),
            id="A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        ),
        pytest.param(
            [tol("dedicated", None, "user1", NS)],
            [taint("dedicated", "user1", NS)],
            None,
            id="A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        ),
        pytest.param(
            [tol("dedicated", "Equal", "user2", NS)],
            [taint("dedicated", "user1", NS)],
            untolerated("dedicated", "user1"),
            id="A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
        ),
        pytest.param(
            [tol("foo", "Exists", effect=NS)],
            [taint("foo", "bar", NS)],
            None,
            id="A pod can be scheduled onto the node, with a toleration uses operator Exists that tolerates the "
            "taints on the node",
        ),
        pytest.param(
            [tol("dedicated", "Equal", "user2", NS), tol("foo", "Exists", effect=NS)],
            [taint("dedicated", "user2", NS), taint("foo", "bar", NS)],
            None,
            id="A pod has multiple tolerations, node has multiple taints, all the taints are tolerated, pod can be "
            "scheduled onto the node",
        ),
        pytest.param(
            [tol("foo", "Equal", "bar", PNS)],
            [taint("foo", "bar", NS)],
            untolerated("foo", "bar"),
            id="A pod has a toleration that keys and values match the taint on the node, but (non-empty) effect "
            "doesn't match, can't be scheduled onto the node",
        ),
        pytest.param(
            [tol("foo", "Equal", "bar")],
            [taint("foo", "bar", NS)],
            None,
            id="The pod has a toleration that keys and values match the taint on the node, the effect of toleration "
            "is empty, and the effect of taint is NoSchedule. Pod can be scheduled onto the node",
        ),
        pytest.param(
            [tol("dedicated", "Equal", "user2", NS)],
            [taint("dedicated", "user1", PNS)],
            None,
            id="The pod has a toleration that key and value don't match the taint on the node, but the effect of "
            "taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
        ),
        pytest.param(
            [],
            [taint("dedicated", "user1", PNS)],
            None,
            id="The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can be "
            "scheduled onto the node",
        ),
        # Edge cases beyond upstream.
        pytest.param([], [], None, id="node without taints"),
        pytest.param(
            [tol("dedicated", "Exists", effect=NS)],
            [taint("dedicated", "user1", NE)],
            untolerated("dedicated", "user1"),
            id="NoExecute taint needs a NoExecute or effect-less toleration",
        ),
        pytest.param(
            [tol("", "Exists")],
            [taint("a", "1", NS), taint("b", "2", NE)],
            None,
            id="key-less Exists tolerates every taint",
        ),
        pytest.param(
            [tol("a", "Exists")],
            [taint("a", "1", NS), taint("spot", "", NS), taint("c", "3", NE)],
            untolerated("spot", ""),
            id="names the first untolerated taint, empty value printed empty",
        ),
        pytest.param(
            [tol("a", "Exists")],
            [taint("a", "1", NS), taint("b", "2", PNS), taint("c", "3", NE)],
            untolerated("c", "3"),
            id="skips PreferNoSchedule when naming the untolerated taint",
        ),
    ],
)
@pytest.mark.parametrize("version", FILTER_RELEASES)
def test_taint_toleration_filter(
    tolerations: list[dict[str, str]], taints: list[dict[str, str]], want: tuple[str, str] | None, version: str
) -> None:
    pod, node = pod_with_tolerations("pod1", tolerations), node_with_taints("nodeA", taints)
    got = check_taints(pod, node, switches=for_version(version))
    assert got == (None if want is None else reported(want, version))
    if got is not None:
        assert got.code == ERR_UNTOLERATED_TAINT
        assert got.unresolvable


@pytest.mark.parametrize(
    ("version", "message"),
    [
        pytest.param(
            "v1.33.13",
            "node(s) had untolerated taint {dedicated: user1}",
            id="TestTaintTolerationFilter@v1.33.13 (taint_toleration_test.go:285) names the taint",
        ),
        pytest.param(
            "v1.34.4",
            "node(s) had untolerated taint(s)",
            id="TestTaintTolerationFilter@v1.34.4 (taint_toleration_test.go:286) does not",
        ),
        pytest.param(
            "v1.37.2",
            "node(s) had untolerated taint(s)",
            id="TestTaintTolerationFilter@v1.37.2 (taint_toleration_test.go:343) does not",
        ),
        pytest.param(None, "node(s) had untolerated taint(s)", id="today's release by default"),
    ],
)
def test_untolerated_taint_message_is_kube_schedulers(version: str | None, message: str) -> None:
    """The first case of TestTaintTolerationFilter, "A pod having no tolerations can't be scheduled onto a node
    with nonempty taints", and the exact ``wantStatus`` text at each tag."""
    pod, node = pod_with_tolerations("p", []), node_with_taints("n", [taint("dedicated", "user1")])
    got = check_taints(pod, node) if version is None else check_taints(pod, node, switches=for_version(version))
    assert got is not None
    assert got.message == message
    assert str(got) == got.message


# --- taint_toleration_test.go TestTaintTolerationScore ----------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "nodes", "expected"),
    [
        pytest.param(
            [tol("foo", "Equal", "bar", PNS)],
            [[taint("foo", "bar", PNS)], [taint("foo", "blah", PNS)]],
            [100, 0],
            id="node with taints tolerated by the pod, gets a higher score than those node with intolerable taints",
        ),
        pytest.param(
            [tol("cpu-type", "Equal", "arm64", PNS), tol("disk-type", "Equal", "ssd", PNS)],
            [[], [taint("cpu-type", "arm64", PNS)], [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)]],
            [100, 100, 100],
            id="the nodes that all of their taints are tolerated by the pod, get the same score, no matter how many "
            "tolerable taints a node has",
        ),
        pytest.param(
            [tol("foo", "Equal", "bar", PNS)],
            [[], [taint("cpu-type", "arm64", PNS)], [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)]],
            [100, 50, 0],
            id="the more intolerable taints a node has, the lower score it gets.",
        ),
        pytest.param(
            [tol("cpu-type", "Equal", "arm64", NS), tol("disk-type", "Equal", "ssd", NS)],
            [[], [taint("cpu-type", "arm64", NS)], [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)]],
            [100, 100, 0],
            id="only taints and tolerations that have effect PreferNoSchedule are checked by taints-tolerations "
            "priority function",
        ),
        pytest.param(
            [],
            [[], [taint("cpu-type", "arm64", PNS)]],
            [100, 0],
            id="Default behaviour No taints and tolerations, lands on node with no taints",
        ),
    ],
)
def test_taint_toleration_score(
    tolerations: list[dict[str, str]], nodes: list[list[dict[str, str]]], expected: list[int]
) -> None:
    pod = pod_with_tolerations("pod1", tolerations)
    raw = [count_intolerable_prefer_no_schedule(pod, node_with_taints(f"node{i}", t)) for i, t in enumerate(nodes)]
    assert default_normalize_score(raw, reverse=True) == expected


def test_score_counts_only_untolerated_prefer_no_schedule() -> None:
    node = node_with_taints("n", [taint("a", "", PNS), taint("b", "", PNS), taint("c", "", NS)])
    assert count_intolerable_prefer_no_schedule(pod_with_tolerations("p", []), node) == 2
    assert count_intolerable_prefer_no_schedule(pod_with_tolerations("p", [tol("a", "Exists")]), node) == 1
    assert count_intolerable_prefer_no_schedule(pod_with_tolerations("p", [tol("", "Exists", effect=PNS)]), node) == 0


# --- purity: predicates read their inputs, never change them ----------------------------------------------


def test_taint_predicates_do_not_mutate_inputs() -> None:
    raw_node = node_json("n", [taint("a", "1", NS), taint("b", "2", PNS), taint("c", "3", NE)])
    raw_pod = pod_json("p", [tol("a", "Exists"), tol("c", "Equal", "3", NE)])
    node_before, pod_before = copy.deepcopy(raw_node), copy.deepcopy(raw_pod)
    node, pod = Node.from_api(raw_node), Pod.from_api(raw_pod)
    assert Node.from_api(raw_node) == node and Pod.from_api(raw_pod) == pod  # parsing is deterministic

    first = (check_taints(pod, node), count_intolerable_prefer_no_schedule(pod, node))
    second = (check_taints(pod, node), count_intolerable_prefer_no_schedule(pod, node))
    assert first == second == (None, 1)
    assert tolerates_all(node.taints, pod.tolerations, DO_NOT_SCHEDULE_EFFECTS)

    assert raw_node == node_before and raw_pod == pod_before
    assert node == Node.from_api(node_before) and pod == Pod.from_api(pod_before)
