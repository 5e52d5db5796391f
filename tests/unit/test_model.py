"""The lean views (Node, Pod, PDB, Namespace) parsed from API JSON, and NodeInfo/ClusterSnapshot bookkeeping."""

from __future__ import annotations

import copy
from dataclasses import fields, replace
from typing import Any

import pytest

from shared.model import (
    PDB,
    HostPort,
    Namespace,
    Node,
    OwnerRef,
    ParseError,
    Pod,
    Taint,
    Toleration,
)
from shared.snapshot import ClusterSnapshot, NodeInfo
from tests import builders
from tests.builders import override

# --- builders ---------------------------------------------------------------------------------------


def node_json(name: str = "n1", **extra: Any) -> dict[str, Any]:
    """A ready node (4 cpu, 8Gi, 110 pods); ``section__field=value`` sets any other field."""
    return override(builders.node_json(name, allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"}), **extra)


def pod_json(name: str = "p", namespace: str | None = "default", **extra: Any) -> dict[str, Any]:
    """A running pod requesting 100m / 64Mi; ``section__field=value`` sets any other field."""
    raw = builders.pod_json(name, namespace=namespace, requests={"cpu": "100m", "memory": "64Mi"}, phase="Running")
    return override(raw, **extra)


def pdb_json(api_version: str, selector: Any, namespace: str = "default") -> dict[str, Any]:
    status = {"disruptionsAllowed": 2, "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3}
    return builders.pdb_json(
        namespace=namespace, selector=selector, min_available=1, api_version=api_version, status=status
    )


# --- Node --------------------------------------------------------------------------------------------


def test_node_labels_annotations_and_allocatable() -> None:
    n = Node.from_api(
        node_json(
            metadata__labels={"karpenter.sh/capacity-type": "spot"},
            metadata__annotations={"a": "b"},
            metadata__uid="u1",
            metadata__creationTimestamp="2024-01-01T00:00:00Z",
        )
    )
    assert n.name == "n1"
    assert n.labels == {"karpenter.sh/capacity-type": "spot"}
    assert n.annotations == {"a": "b"}
    assert dict(n.allocatable) == {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    assert (n.uid, n.creation_timestamp) == ("u1", "2024-01-01T00:00:00Z")


def test_node_without_labels_shares_the_empty_read_only_map() -> None:
    n = Node.from_api(node_json())
    assert n.labels == {}
    with pytest.raises(TypeError):
        n.labels["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw_taints", "want"),
    [
        pytest.param([], (), id="no taints"),
        pytest.param(
            [{"key": "spot", "value": "true", "effect": "NoSchedule"}],
            (Taint("spot", "true", "NoSchedule"),),
            id="key value effect",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}],
            (Taint("node.kubernetes.io/unreachable", "", "NoExecute"),),
            id="taint without value",
        ),
        pytest.param(
            [{"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "value": "1", "effect": "NoSchedule"}],
            (Taint("a", "", "PreferNoSchedule"), Taint("b", "1", "NoSchedule")),
            id="order kept",
        ),
    ],
)
def test_node_taints(raw_taints: list[dict[str, str]], want: tuple[Taint, ...]) -> None:
    assert Node.from_api(node_json(spec__taints=raw_taints)).taints == want


def test_taint_round_trips_to_api() -> None:
    assert Taint("spot", "true", "NoSchedule").to_api() == {"key": "spot", "value": "true", "effect": "NoSchedule"}
    assert Taint("spot", "", "NoSchedule").to_api() == {"key": "spot", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        pytest.param([{"type": "Ready", "status": "True"}], True, id="ready"),
        pytest.param([{"type": "Ready", "status": "False"}], False, id="not ready"),
        pytest.param([{"type": "Ready", "status": "Unknown"}], False, id="unknown"),
        pytest.param([{"type": "MemoryPressure", "status": "False"}], False, id="no ready condition"),
        pytest.param(
            [{"type": "MemoryPressure", "status": "True"}, {"type": "Ready", "status": "True"}],
            True,
            id="other conditions ignored",
        ),
    ],
)
def test_node_ready_condition(conditions: list[dict[str, str]], ready: bool) -> None:
    assert Node.from_api(node_json(status__conditions=conditions)).ready is ready


@pytest.mark.parametrize(
    ("spec", "want"),
    [({"unschedulable": True}, True), ({"unschedulable": False}, False), ({}, False)],
    ids=["cordoned", "explicitly schedulable", "absent"],
)
def test_node_unschedulable(spec: dict[str, bool], want: bool) -> None:
    raw = node_json()
    raw["spec"] = spec
    assert Node.from_api(raw).unschedulable is want


def test_node_allocatable_falls_back_to_capacity() -> None:
    """defaults.go SetDefaults_NodeStatus: a node without allocatable uses its capacity."""
    raw = node_json()
    raw["status"] = {"capacity": {"cpu": "2", "pods": "10"}}
    assert dict(Node.from_api(raw).allocatable) == {"cpu": 2000, "pods": 10}


def test_node_without_name_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"metadata\.name is missing"):
        Node.from_api({"metadata": {}})


def test_node_bad_allocatable_names_node_and_field() -> None:
    with pytest.raises(ParseError, match=r"node n1: status\.allocatable\.cpu: quantity 'four'"):
        Node.from_api(node_json(status__allocatable={"cpu": "four"}))


# --- Pod ---------------------------------------------------------------------------------------------


def test_pod_identity_labels_and_defaults() -> None:
    p = Pod.from_api(pod_json("web-1", "shop", metadata__labels={"app": "web"}, metadata__uid="u"))
    assert (p.namespace, p.name, p.key, p.uid) == ("shop", "web-1", "shop/web-1", "u")
    assert p.labels == {"app": "web"}
    assert p.node_name == ""
    assert p.scheduler_name == "default-scheduler"
    assert p.priority == 0
    assert p.phase == "Running"
    assert dict(p.requests) == {"cpu": 100, "memory": 64 * 2**20}


def test_pod_without_namespace_is_in_default_and_generate_name_is_used() -> None:
    raw = pod_json(namespace=None)
    raw["metadata"] = {"generateName": "web-"}
    p = Pod.from_api(raw)
    assert (p.namespace, p.name) == ("default", "web-")


def test_pod_without_spec_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="pod default/p: spec is missing"):
        Pod.from_api({"metadata": {"name": "p"}})


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
            Toleration("spot", "Equal", "true", "NoSchedule"),
            id="equal",
        ),
        pytest.param(
            {"key": "spot", "value": "true"}, Toleration("spot", "Equal", "true", ""), id="empty operator is Equal"
        ),
        pytest.param({"operator": "Exists"}, Toleration("", "Exists", "", ""), id="exists everything"),
        pytest.param(
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", 300),
            id="toleration seconds",
        ),
    ],
)
def test_pod_tolerations(raw: dict[str, Any], want: Toleration) -> None:
    p = Pod.from_api(pod_json(spec__tolerations=[raw]))
    assert p.tolerations == (want,)
    assert Toleration.from_api(want.to_api()) == want


@pytest.mark.parametrize(
    ("conditions", "unschedulable", "ready"),
    [
        pytest.param([], False, False, id="no conditions"),
        pytest.param(
            [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}], True, False, id="unschedulable"
        ),
        pytest.param(
            [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}],
            False,
            False,
            id="not scheduled for another reason",
        ),
        pytest.param(
            [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}], False, True, id="ready"
        ),
        pytest.param([{"type": "Ready", "status": "False"}], False, False, id="not ready"),
    ],
)
def test_pod_conditions(conditions: list[dict[str, str]], unschedulable: bool, ready: bool) -> None:
    p = Pod.from_api(pod_json(status__conditions=conditions))
    assert (p.unschedulable, p.ready) == (unschedulable, ready)


@pytest.mark.parametrize(
    ("raw", "gates"),
    [
        pytest.param(None, (), id="absent"),
        pytest.param([], (), id="empty"),
        pytest.param([{"name": "example.com/quota"}], ("example.com/quota",), id="one"),
        pytest.param([{"name": "b"}, {"name": "a"}], ("b", "a"), id="two-in-order"),
    ],
)
def test_pod_scheduling_gates(raw: Any, gates: tuple[str, ...]) -> None:
    p = Pod.from_api(pod_json(spec__schedulingGates=raw))
    assert (p.scheduling_gates, p.gated) == (gates, bool(gates))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param("quota", r"spec\.schedulingGates: expected a list", id="not-a-list"),
        pytest.param(["quota"], r"spec\.schedulingGates\[0\]\.name: expected a non-empty string", id="bare-string"),
        pytest.param([{"name": 3}], r"spec\.schedulingGates\[0\]\.name", id="name-not-a-string"),
        pytest.param([{"name": "a"}, {}], r"spec\.schedulingGates\[1\]\.name", id="name-missing"),
    ],
)
def test_bad_scheduling_gates_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ParseError, match=r"pod default/p: " + message):
        Pod.from_api(pod_json(spec__schedulingGates=raw))


@pytest.mark.parametrize(
    ("field", "raw", "message"),
    [
        pytest.param("containers", ["app"], r"spec\.containers\[0\]: expected an object", id="container-a-string"),
        pytest.param("initContainers", [3], r"spec\.initContainers\[0\]: expected an object", id="init-a-number"),
        pytest.param(
            "containers",
            [{"name": "a", "ports": ["80"]}],
            r"spec\.containers\[0\]\.ports\[0\]: expected an object",
            id="port-a-string",
        ),
        pytest.param(
            "containers",
            [{"name": "a", "ports": [{"hostPort": "80"}]}],
            r"spec\.containers\[0\]\.ports\[0\]\.hostPort: expected an integer",
            id="host-port-a-string",
        ),
        pytest.param(
            "initContainers",
            [{"name": "s", "restartPolicy": "Always", "ports": [7]}],
            r"spec\.initContainers\[0\]\.ports\[0\]: expected an object",
            id="sidecar-port-a-number",
        ),
    ],
)
def test_bad_containers_name_the_field(field: str, raw: Any, message: str) -> None:
    """A malformed container or port is a ParseError naming the pod and the field, never an AttributeError."""
    with pytest.raises(ParseError, match=r"pod default/p: " + message):
        Pod.from_api(pod_json(**{f"spec__{field}": raw}))


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        pytest.param(None, (), id="absent"),
        pytest.param([], (), id="empty"),
        pytest.param([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}], ("gpu",), id="from-a-template"),
        pytest.param(
            [{"name": "a", "resourceClaimName": "x"}, {"name": "b", "resourceClaimTemplateName": "y"}],
            ("a", "b"),
            id="two-in-order",
        ),
    ],
)
def test_pod_resource_claims(raw: Any, names: tuple[str, ...]) -> None:
    assert Pod.from_api(pod_json(spec__resourceClaims=raw)).resource_claims == names


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"name": "gpu"}, r"spec\.resourceClaims: expected a list", id="not-a-list"),
        pytest.param([{"resourceClaimName": "x"}], r"spec\.resourceClaims\[0\]\.name", id="name-missing"),
    ],
)
def test_bad_resource_claims_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ParseError, match=r"pod default/p: " + message):
        Pod.from_api(pod_json(spec__resourceClaims=raw))


def test_pod_owners_and_controller() -> None:
    owners = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "1"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "2", "controller": True},
    ]
    p = Pod.from_api(pod_json(metadata__ownerReferences=owners))
    assert p.owners == (
        OwnerRef("ConfigMap", "cm", "v1", "1", False),
        OwnerRef("ReplicaSet", "web-abc", "apps/v1", "2", True),
    )
    assert p.controller == OwnerRef("ReplicaSet", "web-abc", "apps/v1", "2", True)


def test_pod_without_controller() -> None:
    p = Pod.from_api(pod_json(metadata__ownerReferences=[{"kind": "Node", "name": "n1"}]))
    assert p.controller is None
    assert Pod.from_api(pod_json()).controller is None


@pytest.mark.parametrize(("priority", "want"), [(None, 0), (0, 0), (1000, 1000), (-10, -10), (2000001000, 2000001000)])
def test_pod_priority(priority: int | None, want: int) -> None:
    raw = pod_json() if priority is None else pod_json(spec__priority=priority)
    assert Pod.from_api(raw).priority == want


@pytest.mark.parametrize(
    ("phase", "terminal"),
    [("Pending", False), ("Running", False), ("Succeeded", True), ("Failed", True), ("Unknown", False)],
)
def test_pod_terminal_phases(phase: str, terminal: bool) -> None:
    assert Pod.from_api(pod_json(status__phase=phase)).terminal is terminal


def test_pod_terminating_and_node_name() -> None:
    p = Pod.from_api(
        pod_json(metadata__deletionTimestamp="2024-01-01T00:00:00Z", spec__nodeName="n1", spec__schedulerName="other")
    )
    assert p.terminating
    assert (p.node_name, p.scheduler_name) == ("n1", "other")
    assert not Pod.from_api(pod_json()).terminating


def test_pod_node_selector_and_host_ports() -> None:
    spec = {
        "nodeSelector": {"disk": "ssd"},
        "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}],
        "initContainers": [
            {
                "name": "side",
                "restartPolicy": "Always",
                "ports": [{"containerPort": 9, "hostPort": 9, "protocol": "UDP"}],
            },
            {"name": "once", "ports": [{"containerPort": 7, "hostPort": 7}]},
        ],
    }
    p = Pod.from_api({"metadata": {"name": "p"}, "spec": spec})
    assert p.node_selector == {"disk": "ssd"}
    # schedutil.GetHostPorts: containers and sidecars, not ordinary init containers.
    assert p.host_ports == (HostPort("0.0.0.0", "TCP", 8080), HostPort("0.0.0.0", "UDP", 9))


def test_pod_parsing_does_not_mutate_the_json() -> None:
    raw = pod_json(
        spec__initContainers=[{"name": "i", "resources": {"limits": {"cpu": "1"}}}],
        spec__overhead={"cpu": "10m"},
        metadata__labels={"app": "web"},
    )
    before = copy.deepcopy(raw)
    Pod.from_api(raw)
    assert raw == before


# --- PDB ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "selector", "selects_all", "selects_none"),
    [
        pytest.param("policy/v1", {}, True, False, id="v1 empty selector selects every pod of the namespace"),
        pytest.param("policy/v1beta1", {}, False, True, id="v1beta1 empty selector selects nothing"),
        pytest.param("policy/v1", None, False, True, id="v1 nil selector selects nothing"),
        pytest.param("policy/v1beta1", None, False, True, id="v1beta1 nil selector selects nothing"),
        pytest.param("policy/v1", {"matchLabels": {"app": "web"}}, False, False, id="v1 label selector"),
        pytest.param("policy/v1beta1", {"matchLabels": {"app": "web"}}, False, False, id="v1beta1 label selector"),
    ],
)
def test_pdb_selectors(api_version: str, selector: Any, selects_all: bool, selects_none: bool) -> None:
    pdb = PDB.from_api(pdb_json(api_version, selector))
    web = Pod.from_api(pod_json("w", metadata__labels={"app": "web"}))
    other = Pod.from_api(pod_json("o", metadata__labels={"app": "db"}))
    elsewhere = Pod.from_api(pod_json("e", "kube-system", metadata__labels={"app": "web"}))
    assert not pdb.selects(elsewhere)  # a PDB only ever covers its own namespace
    if selects_none:
        assert pdb.selector is None
        assert not pdb.selects(web) and not pdb.selects(other)
    elif selects_all:
        assert pdb.selects(web) and pdb.selects(other)
    else:
        assert pdb.selects(web) and not pdb.selects(other)


def test_pdb_fields() -> None:
    pdb = PDB.from_api(pdb_json("policy/v1", {}))
    assert (pdb.key, pdb.min_available, pdb.max_unavailable) == ("default/budget", 1, None)
    assert (pdb.disruptions_allowed, pdb.current_healthy, pdb.desired_healthy, pdb.expected_pods) == (2, 3, 1, 3)


def test_pdb_bad_selector_is_a_parse_error() -> None:
    bad = {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}
    with pytest.raises(ParseError, match="pdb default/budget"):
        PDB.from_api(pdb_json("policy/v1", bad))


# --- Namespace ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param(None, {"kubernetes.io/metadata.name": "shop"}, id="added when missing (objects before 1.21)"),
        pytest.param({"team": "a"}, {"team": "a", "kubernetes.io/metadata.name": "shop"}, id="added beside others"),
        pytest.param(
            {"kubernetes.io/metadata.name": "other"},
            {"kubernetes.io/metadata.name": "shop"},
            id="always the name, like SetDefaults_Namespace",
        ),
    ],
)
def test_namespace_metadata_name_label(labels: dict[str, str] | None, want: dict[str, str]) -> None:
    meta: dict[str, Any] = {"name": "shop"}
    if labels is not None:
        meta["labels"] = labels
    raw = {"metadata": meta}
    before = copy.deepcopy(raw)
    ns = Namespace.from_api(raw)
    assert (ns.name, dict(ns.labels)) == ("shop", want)
    assert raw == before


def test_snapshot_namespace_labels_for_an_unknown_namespace() -> None:
    snap = ClusterSnapshot(namespaces=[Namespace.from_api({"metadata": {"name": "a", "labels": {"x": "1"}}})])
    assert snap.namespace_labels("a") == {"x": "1", "kubernetes.io/metadata.name": "a"}
    assert snap.namespace_labels("b") == {"kubernetes.io/metadata.name": "b"}


# --- NodeInfo / ClusterSnapshot ------------------------------------------------------------------------

ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
PREFERRED_AFFINITY = {
    "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"},
            }
        ]
    }
}


def bound(name: str, node: str = "n1", **extra: Any) -> Pod:
    return Pod.from_api(pod_json(name, spec__nodeName=node, **extra))


def _requested(info: NodeInfo) -> dict[str, int]:
    return {k: v for k, v in info.requested.items() if v}


def _state(info: NodeInfo) -> tuple[Any, ...]:
    return (
        [p.key for p in info.pods],
        _requested(info),
        sorted((h.ip, h.protocol, h.port) for h in info.host_ports),
        [p.key for p in info.pods_with_affinity],
        [p.key for p in info.pods_with_required_anti_affinity],
    )


def test_node_info_add_remove_round_trip() -> None:
    base = [bound("a"), bound("b", spec__overhead={"cpu": "5m"})]
    info = NodeInfo(Node.from_api(node_json()), base)
    before = _state(info)
    assert before[1] == {"cpu": 205, "memory": 128 * 2**20}

    spec = pod_json("x")["spec"]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    spec["affinity"] = ANTI_AFFINITY
    x = Pod.from_api({"metadata": {"name": "x", "namespace": "default"}, "spec": {**spec, "nodeName": "n1"}})
    y = bound("y", spec__affinity=PREFERRED_AFFINITY)

    info.add_pod(x)
    info.add_pod(y)
    assert info.requested["cpu"] == 405
    assert info.requested["nvidia.com/gpu"] == 1
    assert info.host_ports == [HostPort("0.0.0.0", "TCP", 8080)]
    assert [p.key for p in info.pods_with_affinity] == ["default/x", "default/y"]
    assert [p.key for p in info.pods_with_required_anti_affinity] == ["default/x"]

    info.remove_pod(x)
    assert [p.key for p in info.pods_with_affinity] == ["default/y"]
    assert info.pods_with_required_anti_affinity == []
    assert info.host_ports == []
    info.remove_pod(y)
    # Every resource is back to its exact previous value (entries may stay at zero).
    assert _state(info) == before
    for name in set(info.requested) | {"cpu", "memory", "nvidia.com/gpu"}:
        assert info.requested.get(name, 0) == dict(before[1]).get(name, 0)


def test_node_info_remove_by_name_when_not_the_same_object() -> None:
    info = NodeInfo(Node.from_api(node_json()), [bound("a")])
    info.remove_pod(bound("a"))
    assert info.pods == [] and _requested(info) == {}


def test_node_info_remove_missing_pod_is_an_error() -> None:
    info = NodeInfo(Node.from_api(node_json()))
    with pytest.raises(KeyError, match="default/zz"):
        info.remove_pod(bound("zz"))


def test_node_info_skips_terminal_pods_and_counts_free() -> None:
    info = NodeInfo(Node.from_api(node_json()), [bound("a"), bound("done", status__phase="Succeeded")])
    assert [p.name for p in info.pods] == ["a"]
    assert info.free("pods") == 109
    assert info.free("cpu") == 3900
    assert info.allocatable("memory") == 8 * 2**30


def test_a_node_infos_stamp_is_new_whenever_its_pods_change_and_never_given_twice() -> None:
    info = NodeInfo(Node.from_api(node_json()), [bound("a")])
    seen = [info.stamp]
    b = bound("b")
    info.add_pod(b)
    seen.append(info.stamp)
    info.add_pod(bound("done", status__phase="Succeeded"))  # not added: the pods are the same
    assert info.stamp == seen[-1]
    info.remove_pod(b)  # the same pods as at first, all the same a stamp of its own
    seen.append(info.stamp)
    other = NodeInfo(Node.from_api(node_json()), [bound("a")])
    seen.append(other.stamp)
    assert len(set(seen)) == len(seen)


def test_cluster_snapshot_places_pods() -> None:
    snap = ClusterSnapshot(
        [Node.from_api(node_json("n1")), Node.from_api(node_json("n2"))],
        [bound("a", "n1"), bound("b", "gone"), Pod.from_api(pod_json("pending")), bound("c", "n2")],
    )
    assert [i.name for i in snap] == ["n1", "n2"] and len(snap) == 2
    assert [p.name for p in snap["n1"].pods] == ["a"]
    assert [p.name for p in snap.unknown_node_pods] == ["b"]
    assert [p.name for p in snap.pending] == ["pending"]


def test_cluster_snapshot_move_pod() -> None:
    a = bound("a", "n1", spec__affinity=ANTI_AFFINITY)
    snap = ClusterSnapshot([Node.from_api(node_json("n1")), Node.from_api(node_json("n2"))], [a, bound("b", "n2")])
    n1_before, n2_before = _state(snap["n1"]), _state(snap["n2"])
    version = snap.version

    moved = snap.move_pod(a, "n2")
    assert moved.node_name == "n2" and a.node_name == "n1"  # frozen: a new view, the old one untouched
    assert (moved.key, moved.requests) == (a.key, a.requests)
    assert snap.version > version
    assert snap["n1"].pods == [] and _requested(snap["n1"]) == {}
    assert [p.name for p in snap["n2"].pods] == ["b", "a"]
    assert snap["n2"].requested["cpu"] == 200
    assert [p.key for p in snap["n2"].pods_with_required_anti_affinity] == ["default/a"]

    back = snap.move_pod(moved, "n1")
    assert back.node_name == "n1"
    assert (_state(snap["n1"]), _state(snap["n2"])) == (n1_before, n2_before)


def test_cluster_snapshot_add_and_remove_pending_pod() -> None:
    snap = ClusterSnapshot([Node.from_api(node_json("n1"))])
    p = Pod.from_api(pod_json("new"))
    placed = snap.add_pod(p, "n1")
    assert placed.node_name == "n1" and p.node_name == ""
    assert snap["n1"].requested["cpu"] == 100
    snap.remove_pod(placed)
    assert _requested(snap["n1"]) == {}


def test_moved_pod_is_the_pod_with_only_its_node_changed() -> None:
    a = bound("a", "n1", spec__affinity=ANTI_AFFINITY)
    snap = ClusterSnapshot([Node.from_api(node_json("n1")), Node.from_api(node_json("n2"))], [a])
    moved = snap.move_pod(a, "n2")
    assert moved == replace(a, node_name="n2")
    assert all(getattr(moved, f.name) is getattr(a, f.name) for f in fields(Pod) if f.name != "node_name")


def test_node_info_removes_the_very_object_before_one_of_the_same_name() -> None:
    first, second = bound("a"), bound("a")
    info = NodeInfo(Node.from_api(node_json()), [first, bound("b"), second])
    info.remove_pod(second)
    assert [p is first for p in info.pods] == [True, False]


def _started(start: str | None, ready: str, at: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
    if start is not None:
        status["startTime"] = start
    if at is not None:
        status["conditions"][0]["lastTransitionTime"] = at
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}, "status": status}


@pytest.mark.parametrize(
    ("start", "ready", "at", "want"),
    [
        pytest.param("2026-03-01T10:00:00Z", "True", "2026-03-01T10:00:42Z", 42, id="ready-42s-after-start"),
        pytest.param("2026-03-01T10:00:00Z", "False", "2026-03-01T10:00:42Z", None, id="not-ready-tells-nothing"),
        pytest.param(None, "True", "2026-03-01T10:00:42Z", None, id="no-start-time"),
        pytest.param("2026-03-01T10:00:00Z", "True", None, None, id="no-transition-time"),
        pytest.param("2026-03-01T10:00:50Z", "True", "2026-03-01T10:00:42Z", None, id="ready-before-start-is-skew"),
        pytest.param("yesterday", "True", "2026-03-01T10:00:42Z", None, id="unreadable-start"),
    ],
)
def test_pod_start_up_is_read_from_start_time_to_ready(
    start: str | None, ready: str, at: str | None, want: int | None
) -> None:
    assert Pod.from_api(_started(start, ready, at)).start_up == want
