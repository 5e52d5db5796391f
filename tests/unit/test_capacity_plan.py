"""Capacity mode, the pure part: which nodes only lack spot room, what they need, the caps, how a request ends,
and the placeholder pod itself (checked with the scheduler's own predicates: it fits spot nodes only)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rescheduler.plan.capacity_needs import (
    DELETED,
    ON_DEMAND,
    PREEMPTED,
    PROVISIONED,
    TIMED_OUT,
    CapacityNeed,
    Caps,
    Seen,
    capacity_needs,
    choose_needs,
    format_need,
    in_the_way,
    judge,
)
from rescheduler.plan.placeholder_pods import node_label_value, placeholder_pod
from rescheduler.plan.planner import plan
from rescheduler.plan.safety import unschedulable_pods
from rescheduler.plan.stay_reasons import Kind, StayReason
from shared.config import CapacityConfig, Config
from shared.fit import fits
from shared.model import Pod
from shared.placeholders import NODE_ANNOTATION, PLACEHOLDER_LABEL, POD_ANNOTATION, REQUEST_LABEL, is_placeholder
from shared.snapshot import ClusterSnapshot
from tests.builders.planner import SPOT_TAINT, TOLERATE_SPOT, cluster, node, pod

HOME = Config().namespace
ON = replace(Config(), capacity=CapacityConfig(enabled=True))


def placeholder_on(name: str, on: str, *, cpu: str = "1", memory: str = "1Gi", ns: str = HOME) -> Pod:
    p = pod(name, on, ns=ns, cpu=cpu, memory=memory, owner=None, priority=-5)
    return replace(p, labels={**p.labels, PLACEHOLDER_LABEL: "od", REQUEST_LABEL: "r1"})


def needs(snap: ClusterSnapshot, config: Config = ON) -> list[CapacityNeed]:
    return capacity_needs(snap, plan(snap, config).reasons, config)


# ---- which nodes need room --------------------------------------------------------------------------------


def test_a_node_that_only_lacks_spot_room_needs_its_pods_requests() -> None:
    snap = cluster(
        [node("od", cpu="8"), node("spot", spot=True, cpu="1", taints=[SPOT_TAINT])],
        [
            pod("a", "od", cpu="1500m", memory="1Gi", tolerations=[TOLERATE_SPOT]),
            pod("b", "od", cpu="2", memory="512Mi", tolerations=[TOLERATE_SPOT]),
        ],
    )
    (need,) = needs(snap)
    assert need.node == "od"
    assert {p.key for p in need.pods} == {"shop/a", "shop/b"}
    assert (need.cpu, need.memory) == (3500, 1536 * 2**20)
    assert need.text == "needs 3.5 CPU / 1.5 GiB on spot"
    assert need.reason.kind in (Kind.NO_CAPACITY, Kind.NO_FIT)


def test_without_any_spot_node_every_movable_node_needs_room() -> None:
    snap = cluster([node("od")], [pod("a", "od")])
    (need,) = needs(snap)
    assert need.reason.kind is Kind.NO_SPOT_NODES


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([pod("bare", "od", owner=None)], id="a-pod-that-may-not-move"),
        pytest.param([pod("a", "od", cpu="100m")], id="a-pod-that-does-not-tolerate-the-spot-taint"),
    ],
)
def test_a_node_that_stays_for_another_reason_needs_nothing(pods: list[Pod]) -> None:
    snap = cluster([node("od"), node("spot", spot=True, taints=[SPOT_TAINT])], pods)
    assert plan(snap, ON).reasons["od"].kind in (Kind.NOT_MOVABLE, Kind.NO_FIT)
    assert needs(snap) == []


def test_a_drainable_node_needs_nothing() -> None:
    snap = cluster([node("od"), node("spot", spot=True)], [pod("a", "od")])
    assert plan(snap, ON).drained == ("od",)
    assert needs(snap) == []


def test_needs_come_smallest_first_so_the_caps_let_the_most_nodes_through() -> None:
    snap = cluster([node("od-big", cpu="8"), node("od-small")], [pod("a", "od-big", cpu="3"), pod("b", "od-small")])
    assert [n.node for n in needs(snap)] == ["od-small", "od-big"]


@pytest.mark.parametrize(
    ("cpu", "memory", "text"),
    [
        (3500, 12 * 2**30, "needs 3.5 CPU / 12 GiB on spot"),
        (250, 512 * 2**20, "needs 0.2 CPU / 0.5 GiB on spot"),
        (2000, 3 * 2**29, "needs 2 CPU / 1.5 GiB on spot"),
    ],
)
def test_a_need_reads_in_cores_and_gib(cpu: int, memory: int, text: str) -> None:
    assert format_need(cpu, memory) == text


# ---- placeholders are expendable to the planner -----------------------------------------------------------


def test_the_room_of_placeholders_running_on_spot_counts_as_free() -> None:
    spot = node("spot", spot=True, cpu="2", memory="4Gi")
    moving = pod("a", "od", cpu="1500m", memory="1Gi")
    held = cluster([node("od"), spot], [moving, placeholder_on("ph", "spot", cpu="1500m")])
    assert plan(held, ON).drained == ("od",)
    assert plan(held, Config()).drained == ("od",), "placeholders are recognised with the mode off too"
    # The same pod anywhere else is a workload pod: its room is taken.
    elsewhere = cluster([node("od"), spot], [moving, placeholder_on("ph", "spot", cpu="1500m", ns="shop")])
    assert plan(elsewhere, ON).drained == ()


def test_a_placeholder_waiting_for_a_node_does_not_pause_the_rescheduler() -> None:
    waiting = replace(placeholder_on("ph", ""), unschedulable=True)
    stuck = replace(pod("web", ""), unschedulable=True)
    assert unschedulable_pods([waiting, stuck], HOME) == [stuck]
    assert unschedulable_pods([waiting, stuck]) == [waiting, stuck]
    snap = cluster([node("od"), node("spot", spot=True)], [pod("a", "od"), waiting])
    assert plan(snap, ON).summary.pending_unschedulable == 0
    assert is_placeholder(waiting, HOME) and not is_placeholder(stuck, HOME)


# ---- caps ---------------------------------------------------------------------------------------------------


def _need(name: str, pods: int, cpu: int, memory: int = 2**30) -> CapacityNeed:
    return CapacityNeed(
        name, tuple(pod(f"{name}-{i}", name) for i in range(pods)), cpu, memory, StayReason(Kind.NO_CAPACITY, "")
    )


def test_choose_takes_whole_nodes_within_every_cap() -> None:
    items = [_need("a", 2, 1000), _need("b", 3, 1000), _need("c", 1, 500), _need("d", 1, 4000)]
    caps = Caps(pods=5, cpu=3000, memory=10 * 2**30)
    assert [n.node for n in choose_needs(items, caps, in_use=(0, 0, 0))] == ["a", "b"]
    assert [n.node for n in choose_needs(items, caps, in_use=(1, 0, 0), skip={"a"})] == ["b", "c"]
    assert [n.node for n in choose_needs(items, Caps(pods=10, cpu=10**6, memory=2 * 2**30), in_use=(0, 0, 0))] == [
        "a",
        "b",
    ]


def test_caps_come_from_the_configuration_as_quantities() -> None:
    assert Caps.of(CapacityConfig(max_pods=7, max_cpu="2500m", max_memory="1Gi")) == Caps(7, 2500, 2**30)


# ---- how a request ends ---------------------------------------------------------------------------------------


def seen(name: str, on: str = "", cls: str = "", *, running: bool = False, terminating: bool = False) -> Seen:
    return Seen(name, on, cls, running, terminating)


@pytest.mark.parametrize(
    ("seen_once", "now", "provisioned", "waited", "wanted", "outcome"),
    [
        pytest.param(set(), {}, False, 5.0, True, None, id="not-yet-seen-is-not-missing"),
        pytest.param({"a"}, {"a": seen("a")}, False, 5.0, True, None, id="pending-within-the-timeout"),
        pytest.param({"a"}, {"a": seen("a")}, False, 60.0, True, TIMED_OUT, id="pending-past-the-timeout"),
        pytest.param(set(), {}, False, 60.0, True, TIMED_OUT, id="never-seen-past-the-timeout"),
        pytest.param(
            {"a", "b"},
            {"a": seen("a", "s1", "spot", running=True), "b": seen("b", "s1", "spot", running=True)},
            False,
            5.0,
            True,
            PROVISIONED,
            id="all-running-on-spot",
        ),
        pytest.param(
            {"a", "b"},
            {"a": seen("a", "s1", "spot", running=True), "b": seen("b")},
            False,
            5.0,
            True,
            None,
            id="half-running-goes-on",
        ),
        pytest.param(
            {"a", "b"},
            {"a": seen("a", "s1", "spot", running=True), "b": seen("b", "s1", "spot", running=True)},
            True,
            5.0,
            True,
            None,
            id="provisioned-waits-for-the-drain",
        ),
        pytest.param(
            {"a", "b"},
            {"a": seen("a", "s1", "spot", running=True), "b": seen("b", "s1", "spot", running=True)},
            True,
            60.0,
            True,
            TIMED_OUT,
            id="provisioned-but-not-drained-in-time",
        ),
        pytest.param({"a"}, {"a": seen("a", "od-9", "on-demand")}, False, 5.0, True, ON_DEMAND, id="bound-on-demand"),
        pytest.param({"a"}, {"a": seen("a", "x", "other")}, False, 5.0, True, ON_DEMAND, id="bound-to-another-class"),
        pytest.param({"a", "b"}, {"b": seen("b")}, False, 5.0, True, PREEMPTED, id="seen-then-gone"),
        pytest.param(
            {"a"}, {"a": seen("a", "s1", "spot", terminating=True)}, True, 5.0, True, PREEMPTED, id="terminating"
        ),
        pytest.param({"a"}, {"a": seen("a")}, False, 5.0, False, DELETED, id="no-longer-wanted"),
    ],
)
def test_judge(
    seen_once: set[str], now: dict[str, Seen], provisioned: bool, waited: float, wanted: bool, outcome: str | None
) -> None:
    got, why = judge(
        {"a", "b"} if "b" in seen_once | set(now) else {"a"},
        seen_once,
        now,
        provisioned=provisioned,
        waited=waited,
        timeout=30.0,
        wanted=wanted,
    )
    assert got == outcome
    assert bool(why) == (outcome is not None)


# ---- the placeholder pod --------------------------------------------------------------------------------------


def _moving_pod() -> Pod:
    raw = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u1",
            "labels": {"app": "web", "spotshift.io/exclude": "false"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d8f", "controller": True, "uid": "rs"}],
        },
        "spec": {
            "nodeName": "od",
            "priority": 0,
            "schedulerName": "spotshift-scheduler",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "overhead": {"cpu": "100m", "memory": "64Mi"},
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi"}}}
            ],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]
                },
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "cache"}},
                            "namespaces": ["cache"],
                            "topologyKey": "zone",
                        }
                    ]
                },
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }
    return Pod.from_api(raw)


def test_the_placeholder_carries_the_pods_requests_and_constraints_and_requires_spot() -> None:
    moving = _moving_pod()
    before = _moving_pod()
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "l", "uid": "u", "controller": True}
    body = placeholder_pod(moving, "od", ON, "r1", lease)
    assert moving == before, "the pod is not changed"
    meta, spec = body["metadata"], body["spec"]
    assert meta["namespace"] == HOME and meta["generateName"] == "spotshift-placeholder-"
    assert meta["labels"] == {"app": "web", PLACEHOLDER_LABEL: "od", REQUEST_LABEL: "r1"}
    assert meta["annotations"] == {NODE_ANNOTATION: "od", POD_ANNOTATION: "shop/web-1"}
    assert meta["ownerReferences"] == [lease], "a controller reference: no ReplicaSet adopts it"
    assert spec["priorityClassName"] == "spotshift-placeholder" and "priority" not in spec
    assert spec["schedulerName"] == "spotshift-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 0
    (c,) = spec["containers"]
    assert c["image"] == "registry.k8s.io/pause:3.9"
    # max(init 2 CPU, containers 500m) + overhead 100m; memory max(64Mi, 1Gi) + 64Mi.
    assert c["resources"]["requests"] == {
        "cpu": "2100m",
        "memory": str(2**30 + 64 * 2**20),
        "ephemeral-storage": str(2**30),
    }
    assert {"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"} in spec["tolerations"]
    assert len(spec["tolerations"]) > 1, "the spot tolerations are added"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    spot_selectors = len(ON.node_classes.presets)
    assert len(terms) == 2 * spot_selectors, "each of the pod's terms ANDed with each spot selector"
    (anti,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["namespaces"] == sorted(["shop", HOME]), "the pod's own namespace made explicit"
    (aff,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert aff["namespaces"] == sorted(["cache", HOME])
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("zone", ["a", "b"])
def test_the_placeholder_fits_a_spot_node_and_never_an_on_demand_one(zone: str) -> None:
    """Checked with the scheduler's own filters (shared.fit) on the placeholder as the API would hold it."""
    moving = _moving_pod()
    raw = placeholder_pod(moving, "od", ON, "r1")
    raw["metadata"]["name"] = "spotshift-placeholder-x"
    held = Pod.from_api(raw)
    assert held.requests == moving.requests
    labels = {"zone": zone, "kubernetes.io/os": "linux"}
    spot = node_with("spot", {**labels, "cloud.google.com/gke-spot": "true"})
    on_demand = node_with("od-2", {**labels, "cloud.google.com/gke-spot": "false"})
    other_zone = node_with("spot-c", {**labels, "zone": "c", "cloud.google.com/gke-spot": "true"})
    partner = pod("cache-1", "spot", ns="cache", app="cache", cpu="100m", memory="64Mi")  # the pod affinity's
    snap = cluster([spot, on_demand, other_zone], [partner])
    assert fits(held, snap["spot"], snap) == []
    assert fits(held, snap["od-2"], snap) != []
    assert fits(held, snap["spot-c"], snap) != []


def node_with(name: str, labels: dict[str, str]) -> object:
    from shared.model import Node

    return Node.from_api(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def test_without_a_controller_to_own_it_a_placeholder_copies_none_of_the_pods_labels() -> None:
    """A ReplicaSet in spotshift's namespace selecting app=web would adopt an unowned pod labelled so."""
    body = placeholder_pod(_moving_pod(), "od", ON, "r1")
    assert body["metadata"]["labels"] == {PLACEHOLDER_LABEL: "od", REQUEST_LABEL: "r1"}
    assert "ownerReferences" not in body["metadata"]


def test_a_node_name_too_long_for_a_label_value_is_hashed() -> None:
    assert node_label_value("ip-10-0-0-1.ec2.internal") == "ip-10-0-0-1.ec2.internal"
    long = "n" * 100
    value = node_label_value(long)
    assert value.startswith("h-") and len(value) <= 63 and value == node_label_value(long)
    body = placeholder_pod(pod("a", long), long, ON, "r1")
    assert body["metadata"]["labels"][PLACEHOLDER_LABEL] == value
    assert body["metadata"]["annotations"][NODE_ANNOTATION] == long


# ---- what a drain waits for ---------------------------------------------------------------------------------------


def test_in_the_way_of_a_drain_are_its_own_placeholders_those_on_its_targets_and_those_waiting_for_a_node() -> None:
    def holding_for(p: Pod, node: str) -> Pod:
        return replace(p, annotations={**p.annotations, NODE_ANNOTATION: node})

    own_elsewhere = holding_for(placeholder_on("own", "spot-9"), "od-1")
    on_target = holding_for(placeholder_on("on-target", "spot-1"), "od-2")
    waiting = holding_for(placeholder_on("waiting", ""), "od-2")
    elsewhere = holding_for(placeholder_on("elsewhere", "spot-2"), "od-2")
    everything = [own_elsewhere, on_target, waiting, elsewhere]
    assert [p.name for p in in_the_way("od-1", ["spot-1"], everything)] == ["own", "on-target", "waiting"]
    assert [p.name for p in in_the_way("od-2", [], everything)] == ["on-target", "waiting", "elsewhere"]
    assert [p.name for p in in_the_way("od-3", ["spot-2"], everything)] == ["waiting", "elsewhere"]


def test_the_movability_memo_answers_as_movability_and_forgets_when_the_budgets_selection_changes() -> None:
    from rescheduler.plan.capacity_needs import MovabilityMemo
    from shared.movable import movability
    from tests.builders.movable import pdb as budget

    system = pod("dns", "od", ns="kube-system", app="dns")
    plain = pod("a", "od")
    selected = [budget("kube-system", {"app": "dns"})]
    status_only = [replace(selected[0], disruptions_allowed=3)]
    memo = MovabilityMemo()
    answers = []
    for config, pdbs in ((ON, selected), (ON, status_only), (ON, []), (ON, selected), (Config(), selected)):
        memo.begin(config, pdbs)
        for p in (system, plain, replace(plain, name="b")):
            assert memo.of(p, pdbs) == movability(p, config, pdbs), (p.key, pdbs)
        answers.append(memo.of(system, pdbs))
    # The kube-system pod moves only while a budget selects it: the memo saw the selection change both ways.
    assert answers[0].moves and answers[1].moves and not answers[2].moves and answers[3].moves
