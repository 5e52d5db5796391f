"""shared.classes: spot / on-demand / other, reclaim signals, spot tolerations, selector strings.

Preset labels and taints as the providers document them (see the table in shared/classes.py); reclaim
taint keys from aws-node-termination-handler ``pkg/node/node.go``, Karpenter ``pkg/apis/v1/taints.go``
(and v1beta1's ``karpenter.sh/disruption=disrupting``), cluster-autoscaler ``ToBeDeletedByClusterAutoscaler``
and GKE's ``cloud.google.com/impending-node-termination``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from shared.classes import (
    PRESET_NAMES,
    PRESETS,
    RECLAIM_ASG_TERMINATION,
    RECLAIM_CLUSTER_AUTOSCALER,
    RECLAIM_CONFIGURED_TAINT,
    RECLAIM_CORDONED,
    RECLAIM_GCE_TERMINATION,
    RECLAIM_GKE_MAINTENANCE,
    RECLAIM_KARPENTER,
    RECLAIM_REBALANCE,
    RECLAIM_SCHEDULED_MAINTENANCE,
    RECLAIM_SPOT_INTERRUPTION,
    Selector,
    SelectorSyntaxError,
    classifier,
    is_control_plane,
    is_on_demand,
    is_spot,
    node_class,
    reclaim_reason,
    spot_node_selector_terms,
    spot_tolerations,
)
from shared.config import Config, NodeClasses, parse_config
from shared.model import Node, Taint, Toleration
from shared.selectors import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, parse_node_selector
from shared.taints import tolerations_tolerate_taint
from tests import builders
from tests.builders import taint

DEFAULT = Config().node_classes


# --- builders -------------------------------------------------------------------------------------


def node_json(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A ready node with 4 cpu and 110 pods allocatable; taints and cordon only when given."""
    return builders.node_json(
        name,
        labels=labels or {},
        taints=taints or None,
        unschedulable=True if unschedulable else None,
        allocatable={"cpu": "4", "pods": "110"},
    )


def node(name: str = "n1", labels: dict[str, str] | None = None, **kw: Any) -> Node:
    return Node.from_api(node_json(name, labels, **kw))


def classes(**yaml_node_classes: Any) -> NodeClasses:
    """NodeClasses through the real loader, so tests exercise validation too."""
    return parse_config({"node_classes": yaml_node_classes}).node_classes


# --- presets --------------------------------------------------------------------------------------

PRESET_NODES = [
    pytest.param("karpenter", {"karpenter.sh/capacity-type": "spot"}, id="karpenter-capacity-type-spot"),
    pytest.param("eks", {"eks.amazonaws.com/capacityType": "SPOT"}, id="eks-managed-node-group-capacity-type-SPOT"),
    pytest.param("gke-spot", {"cloud.google.com/gke-spot": "true"}, id="gke-spot-vm"),
    pytest.param("gke-preemptible", {"cloud.google.com/gke-preemptible": "true"}, id="gke-preemptible-vm"),
    pytest.param("aks", {"kubernetes.azure.com/scalesetpriority": "spot"}, id="aks-spot-scale-set"),
    pytest.param("spot-worker", {"node-role.kubernetes.io/spot-worker": ""}, id="spot-worker-role-label-any-value"),
    pytest.param("spot-worker", {"node-role.kubernetes.io/spot-worker": "true"}, id="spot-worker-role-label-true"),
]


@pytest.mark.parametrize(("preset", "labels"), PRESET_NODES)
def test_each_preset_marks_its_nodes_spot(preset: str, labels: dict[str, str]) -> None:
    n = node(labels={"kubernetes.io/os": "linux", **labels})
    assert is_spot(n, DEFAULT)
    assert not is_on_demand(n, DEFAULT)
    assert node_class(n, DEFAULT) == "spot"
    only_this = classes(presets=[preset])
    assert is_spot(n, only_this)


@pytest.mark.parametrize(("preset", "labels"), PRESET_NODES)
def test_a_disabled_preset_no_longer_marks_spot(preset: str, labels: dict[str, str]) -> None:
    others = [p for p in PRESET_NAMES if p != preset]
    n = node(labels=labels)
    assert not is_spot(n, classes(presets=others))
    assert node_class(n, classes(presets=others)) == "on-demand"


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({"karpenter.sh/capacity-type": "on-demand"}, id="karpenter-on-demand"),
        pytest.param({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, id="eks-on-demand"),
        pytest.param({"eks.amazonaws.com/capacityType": "spot"}, id="eks-value-is-case-sensitive"),
        pytest.param({"cloud.google.com/gke-spot": "false"}, id="gke-spot-false"),
        pytest.param({"cloud.google.com/gke-preemptible": "false"}, id="gke-preemptible-false"),
        pytest.param({"kubernetes.azure.com/scalesetpriority": "regular"}, id="aks-regular-priority"),
        pytest.param({"node-role.kubernetes.io/worker": "true"}, id="pusher-on-demand-worker-label"),
        pytest.param({}, id="no-labels-at-all"),
    ],
)
def test_non_spot_worker_nodes_are_on_demand_by_default(labels: dict[str, str]) -> None:
    n = node(labels=labels)
    assert not is_spot(n, DEFAULT)
    assert is_on_demand(n, DEFAULT)
    assert node_class(n, DEFAULT) == "on-demand"


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({"node-role.kubernetes.io/control-plane": ""}, id="control-plane-role"),
        pytest.param({"node-role.kubernetes.io/master": ""}, id="legacy-master-role"),
    ],
)
def test_control_plane_nodes_are_neither_spot_nor_on_demand(labels: dict[str, str]) -> None:
    n = node(labels=labels)
    assert is_control_plane(n, DEFAULT)
    assert not is_spot(n, DEFAULT)
    assert not is_on_demand(n, DEFAULT)
    assert node_class(n, DEFAULT) == "other"


def test_a_spot_control_plane_node_is_spot_since_spot_wins() -> None:
    n = node(labels={"node-role.kubernetes.io/control-plane": "", "karpenter.sh/capacity-type": "spot"})
    assert node_class(n, DEFAULT) == "spot"


def test_control_plane_stays_other_even_when_it_matches_an_on_demand_selector() -> None:
    nc = classes(on_demand_selectors=["pool=general"])
    n = node(labels={"node-role.kubernetes.io/control-plane": "", "pool": "general"})
    assert node_class(n, nc) == "other"


def test_custom_control_plane_selectors_replace_the_defaults() -> None:
    nc = classes(control_plane_selectors=["role=infra"])
    assert node_class(node(labels={"role": "infra"}), nc) == "other"
    assert node_class(node(labels={"node-role.kubernetes.io/master": ""}), nc) == "on-demand"


# --- custom selectors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "spot"),
    [
        pytest.param("lifecycle=spot", {"lifecycle": "spot"}, True, id="key-equals-value-matches"),
        pytest.param("lifecycle=spot", {"lifecycle": "Ec2Spot"}, False, id="key-equals-value-other-value"),
        pytest.param("lifecycle==Ec2Spot", {"lifecycle": "Ec2Spot"}, True, id="double-equals-matches"),
        pytest.param("spot", {"spot": ""}, True, id="bare-key-exists-with-empty-value"),
        pytest.param("spot", {"other": "x"}, False, id="bare-key-absent"),
        pytest.param("lifecycle in (spot, Ec2Spot)", {"lifecycle": "Ec2Spot"}, True, id="in-set-matches"),
        pytest.param("lifecycle in (spot,Ec2Spot)", {"lifecycle": "normal"}, False, id="in-set-other-value"),
        pytest.param("pool=batch,lifecycle=spot", {"pool": "batch", "lifecycle": "spot"}, True, id="and-of-two"),
        pytest.param("pool=batch,lifecycle=spot", {"pool": "batch"}, False, id="and-of-two-one-missing"),
        pytest.param("pool=batch,!dedicated", {"pool": "batch"}, True, id="and-with-not-exists"),
        pytest.param("pool=batch,!dedicated", {"pool": "batch", "dedicated": "x"}, False, id="not-exists-present"),
        pytest.param("tier notin (critical),cheap", {"cheap": ""}, True, id="notin-absent-key-matches"),
        pytest.param("tier!=critical,cheap", {"cheap": "", "tier": "critical"}, False, id="not-equals-rejects"),
    ],
)
def test_custom_spot_selectors(selector: str, labels: dict[str, str], spot: bool) -> None:
    nc = classes(presets=[], spot_selectors=[selector])
    assert is_spot(node(labels=labels), nc) is spot


def test_custom_selectors_add_to_the_presets() -> None:
    nc = classes(spot_selectors=["lifecycle=spot"])
    assert is_spot(node(labels={"lifecycle": "spot"}), nc)
    assert is_spot(node(labels={"karpenter.sh/capacity-type": "spot"}), nc)


def test_on_demand_selectors_narrow_the_on_demand_set() -> None:
    nc = classes(on_demand_selectors=["node-role.kubernetes.io/worker"])
    assert node_class(node(labels={"node-role.kubernetes.io/worker": "true"}), nc) == "on-demand"
    assert node_class(node(labels={"pool": "gpu"}), nc) == "other"
    # A node with both labels is spot: the classes never overlap.
    both = node(labels={"node-role.kubernetes.io/worker": "true", "karpenter.sh/capacity-type": "spot"})
    assert node_class(both, nc) == "spot"
    assert not is_on_demand(both, nc)


@pytest.mark.parametrize(
    ("text", "operator", "values"),
    [
        pytest.param("a.io/k=v", IN, {"v"}, id="equals"),
        pytest.param("a.io/k == v", IN, {"v"}, id="double-equals-with-spaces"),
        pytest.param("k!=v", NOT_IN, {"v"}, id="not-equals"),
        pytest.param("k=", IN, {""}, id="equals-empty-value"),
        pytest.param("k", EXISTS, set(), id="exists"),
        pytest.param("!k", DOES_NOT_EXIST, set(), id="does-not-exist"),
        pytest.param("k in (a, b)", IN, {"a", "b"}, id="in"),
        pytest.param("k notin (a)", NOT_IN, {"a"}, id="notin"),
    ],
)
def test_selector_parse(text: str, operator: str, values: set[str]) -> None:
    (req,) = Selector.parse(text).requirements
    assert req.operator == operator
    assert req.values == frozenset(values)
    assert str(Selector.parse(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("a,,b", id="empty-requirement"),
        pytest.param("k in (a", id="unbalanced-open"),
        pytest.param("k in a)", id="unbalanced-close"),
        pytest.param("k in ()", id="in-without-values"),
        pytest.param("bad key=v", id="space-in-key"),
        pytest.param("k=bad value", id="space-in-value"),
        pytest.param("-k=v", id="key-starts-with-dash"),
        pytest.param("Upper.Case/k=v", id="upper-case-prefix"),
        pytest.param("k=" + "v" * 64, id="value-longer-than-63"),
        pytest.param("k exists", id="unknown-operator-word"),
    ],
)
def test_selector_parse_errors(text: str) -> None:
    with pytest.raises(SelectorSyntaxError) as e:
        Selector.parse(text)
    assert str(e.value).startswith("must ")


# --- reclaim signals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taints", "why"),
    [
        pytest.param(
            [taint("aws-node-termination-handler/spot-itn", "1700000000")],
            RECLAIM_SPOT_INTERRUPTION,
            id="nth-spot-interruption",
        ),
        pytest.param(
            [taint("aws-node-termination-handler/rebalance-recommendation", "x", "PreferNoSchedule")],
            RECLAIM_REBALANCE,
            id="nth-rebalance-recommendation-any-effect",
        ),
        pytest.param(
            [taint("aws-node-termination-handler/asg-lifecycle-termination")],
            RECLAIM_ASG_TERMINATION,
            id="nth-asg-termination",
        ),
        pytest.param(
            [taint("aws-node-termination-handler/scheduled-maintenance")],
            RECLAIM_SCHEDULED_MAINTENANCE,
            id="nth-scheduled-maintenance",
        ),
        pytest.param(
            [taint("cloud.google.com/impending-node-termination")],
            RECLAIM_GCE_TERMINATION,
            id="gke-impending-termination",
        ),
        pytest.param(
            [taint("ToBeDeletedByClusterAutoscaler", "1700000000")],
            RECLAIM_CLUSTER_AUTOSCALER,
            id="cluster-autoscaler-deleting",
        ),
        pytest.param([taint("karpenter.sh/disrupted")], RECLAIM_KARPENTER, id="karpenter-v1-disrupted"),
        pytest.param(
            [taint("karpenter.sh/disruption", "disrupting")], RECLAIM_KARPENTER, id="karpenter-v1beta1-disrupting"
        ),
        pytest.param(
            [taint("dedicated", "batch"), taint("karpenter.sh/disrupted")],
            RECLAIM_KARPENTER,
            id="reclaim-taint-among-others",
        ),
    ],
)
def test_reclaim_taints(taints: list[dict[str, str]], why: str) -> None:
    n = node(labels={"karpenter.sh/capacity-type": "spot"}, taints=taints)
    assert reclaim_reason(n) == why


def test_taint_wins_over_cordon_because_it_names_the_component() -> None:
    n = node(taints=[taint("aws-node-termination-handler/spot-itn")], unschedulable=True)
    assert reclaim_reason(n) == RECLAIM_SPOT_INTERRUPTION


def test_cordoned_node_is_being_reclaimed() -> None:
    assert reclaim_reason(node(unschedulable=True)) == RECLAIM_CORDONED


def test_gke_active_maintenance_label() -> None:
    assert (
        reclaim_reason(node(labels={"cloud.google.com/active-node-maintenance": "ONGOING"})) == RECLAIM_GKE_MAINTENANCE
    )
    assert reclaim_reason(node(labels={"cloud.google.com/active-node-maintenance": "NONE"})) is None


@pytest.mark.parametrize(
    "taints",
    [
        pytest.param([], id="no-taints"),
        pytest.param([taint("cloud.google.com/gke-spot", "true")], id="provider-spot-taint-is-not-reclaim"),
        pytest.param(
            [taint("DeletionCandidateOfClusterAutoscaler", "1", "PreferNoSchedule")], id="ca-deletion-candidate-only"
        ),
        pytest.param([taint("node.kubernetes.io/not-ready", effect="NoExecute")], id="not-ready-is-not-reclaim"),
        pytest.param([taint("spotshift.io/draining", effect="PreferNoSchedule")], id="own-drain-taint"),
    ],
)
def test_healthy_nodes_are_not_reclaimed(taints: list[dict[str, str]]) -> None:
    assert reclaim_reason(node(taints=taints)) is None


def test_configured_extra_reclaim_taints() -> None:
    nc = classes(extra_reclaim_taints=["example.com/spot-termination"])
    n = node(taints=[taint("example.com/spot-termination")])
    assert reclaim_reason(n) is None
    assert reclaim_reason(n, nc) == f"{RECLAIM_CONFIGURED_TAINT} (example.com/spot-termination)"


# --- tolerations ----------------------------------------------------------------------------------


def test_default_spot_tolerations_are_the_presets_taints() -> None:
    assert spot_tolerations(DEFAULT) == (
        Toleration("cloud.google.com/gke-spot", "Equal", "true", "NoSchedule"),
        Toleration("cloud.google.com/gke-preemptible", "Equal", "true", "NoSchedule"),
        Toleration("kubernetes.azure.com/scalesetpriority", "Equal", "spot", "NoSchedule"),
    )


def test_default_spot_tolerations_are_explicit_never_keyless_exists() -> None:
    for t in spot_tolerations(DEFAULT):
        assert t.key and t.effect and t.operator == "Equal"
        # A key-less Exists would tolerate reclaim and not-ready taints too.
        assert not tolerations_tolerate_taint((t,), Taint("aws-node-termination-handler/spot-itn", "", "NoSchedule"))


@pytest.mark.parametrize("name", [p for p in PRESET_NAMES if PRESETS[p].taint is not None])
def test_default_tolerations_tolerate_each_preset_taint(name: str) -> None:
    taint_ = PRESETS[name].taint
    assert taint_ is not None
    assert tolerations_tolerate_taint(spot_tolerations(DEFAULT), taint_)


def test_tolerations_follow_the_enabled_presets() -> None:
    assert spot_tolerations(classes(presets=["karpenter", "eks"])) == ()
    assert spot_tolerations(classes(presets=["aks"])) == (
        Toleration("kubernetes.azure.com/scalesetpriority", "Equal", "spot", "NoSchedule"),
    )


def test_configured_tolerations_replace_the_defaults() -> None:
    nc = classes(spot_tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])
    assert spot_tolerations(nc) == (Toleration("spot", "Exists", "", "NoSchedule"),)
    assert spot_tolerations(classes(spot_tolerations=[])) == ()


# --- compiled classifier and purity ---------------------------------------------------------------


def test_classifier_is_compiled_once_per_configuration() -> None:
    nc = classes(spot_selectors=["lifecycle=spot"])
    assert classifier(nc) is classifier(nc)
    other = replace(nc, spot_selectors=())
    assert classifier(other) is not classifier(nc)
    assert not is_spot(node(labels={"lifecycle": "spot"}), other)


def test_classification_does_not_mutate_the_node_json() -> None:
    raw = node_json(labels={"karpenter.sh/capacity-type": "spot"}, taints=[taint("karpenter.sh/disrupted")])
    before = copy.deepcopy(raw)
    n = Node.from_api(raw)
    labels_before = dict(n.labels)
    is_spot(n, DEFAULT), is_on_demand(n, DEFAULT), node_class(n, DEFAULT), reclaim_reason(n, DEFAULT)
    assert raw == before
    assert dict(n.labels) == labels_before


# --- affinity terms for the webhook ---------------------------------------------------------------

TERM_NODES = [
    *(p.values[1] for p in PRESET_NODES),
    {"karpenter.sh/capacity-type": "on-demand"},
    {"node-role.kubernetes.io/control-plane": ""},
    {"lifecycle": "spot"},
    {"pool": "batch", "lifecycle": "spot"},
    {"pool": "batch"},
    {},
]


@pytest.mark.parametrize(
    "nc",
    [
        pytest.param(DEFAULT, id="default-presets"),
        pytest.param(
            classes(presets=["aks"], spot_selectors=["pool=batch,lifecycle=spot"]), id="preset-and-custom-and"
        ),
        pytest.param(
            classes(presets=[], spot_selectors=["lifecycle in (spot, Ec2Spot)", "!regular,pool"]), id="custom"
        ),
    ],
)
def test_spot_terms_as_required_affinity_match_exactly_the_spot_nodes(nc: NodeClasses) -> None:
    required = parse_node_selector({"nodeSelectorTerms": list(spot_node_selector_terms(nc))})
    assert required is not None and required.errors == ()
    for labels in TERM_NODES:
        assert required.matches("n", labels) is is_spot(node(labels=labels), nc), labels


def test_spot_terms_are_fresh_and_sorted() -> None:
    nc = classes(presets=[], spot_selectors=["lifecycle in (spot, Ec2Spot)"])
    first = spot_node_selector_terms(nc)
    assert first == ({"matchExpressions": [{"key": "lifecycle", "operator": "In", "values": ["Ec2Spot", "spot"]}]},)
    first[0]["matchExpressions"].clear()
    assert spot_node_selector_terms(nc)[0]["matchExpressions"]
