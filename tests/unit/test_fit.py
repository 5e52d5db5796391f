"""shared.fit.fits: every predicate family reached through the one entry point, in scheduler order."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit import fits
from shared.fit_reasons import (
    ERR_ANTI_AFFINITY,
    ERR_INSUFFICIENT,
    ERR_NODE_AFFINITY,
    ERR_NODE_PORTS,
    ERR_NOT_READY,
    ERR_SPREAD,
    ERR_TOO_MANY_PODS,
    ERR_UNSCHEDULABLE,
    ERR_UNTOLERATED_TAINT,
    ERR_VOLUME_NODE_AFFINITY,
)
from shared.model import Pod
from shared.switches import CURRENT, STRICTEST, Switches, for_version
from tests.builders import Json, node_json, pod_json, snapshot


def node(name: str, *, cpu: str = "4", pods: str = "110", labels: dict[str, str] | None = None, **kw: Any) -> Json:
    """A ready node labelled with its hostname; ``kw`` are :func:`tests.builders.node_json` keywords."""
    labels = {"kubernetes.io/hostname": name, **(labels or {})}
    return node_json(name, labels=labels, allocatable={"cpu": cpu, "memory": "8Gi", "pods": pods}, **kw)


def pod(
    name: str,
    *,
    node_name: str = "",
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    ports: list[Json] | None = None,
    **spec: Any,
) -> Json:
    """A pod labelled ``app: <name>``; ``spec`` are further spec fields as the API spells them."""
    return pod_json(
        name, node_name=node_name, labels=labels or {"app": name}, requests={"cpu": cpu}, ports=ports, spec=spec
    )


def codes(reasons: list) -> list[str]:
    return [r.code for r in reasons]


def test_pod_that_fits_gets_no_reason() -> None:
    snap = snapshot([node("a")])
    assert fits(Pod.from_api(pod("p")), snap["a"], snap) == []


@pytest.mark.parametrize(
    ("node_spec", "pod_spec", "expected"),
    [
        pytest.param({"ready": False}, {}, [ERR_NOT_READY], id="not-ready-node-rejected"),
        pytest.param({"unschedulable": True}, {}, [ERR_UNSCHEDULABLE], id="cordoned-node-rejected"),
        pytest.param(
            {"taints": [{"key": "spot", "value": "true", "effect": "NoSchedule"}]},
            {},
            [ERR_UNTOLERATED_TAINT],
            id="untolerated-taint-rejected",
        ),
        pytest.param({}, {"nodeSelector": {"disk": "ssd"}}, [ERR_NODE_AFFINITY], id="node-selector-mismatch"),
        pytest.param({"cpu": "500m"}, {}, [ERR_INSUFFICIENT], id="insufficient-cpu"),
        pytest.param({"pods": "0"}, {}, [ERR_TOO_MANY_PODS], id="no-pod-slots-left"),
    ],
)
def test_each_family_reaches_the_entry_point(node_spec: dict, pod_spec: dict, expected: list[str]) -> None:
    cpu = node_spec.pop("cpu", "4")
    pods = node_spec.pop("pods", "110")
    snap = snapshot([node("a", cpu=cpu, pods=pods, **node_spec)])
    assert codes(fits(Pod.from_api(pod("p", **pod_spec)), snap["a"], snap)) == expected


def test_all_reasons_are_reported_in_scheduler_filter_order() -> None:
    snap = snapshot(
        [
            node(
                "a",
                cpu="500m",
                ready=False,
                unschedulable=True,
                taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}],
            )
        ]
    )
    reasons = fits(Pod.from_api(pod("p", nodeSelector={"disk": "ssd"})), snap["a"], snap)
    assert codes(reasons) == [
        ERR_NOT_READY,
        ERR_UNSCHEDULABLE,
        ERR_UNTOLERATED_TAINT,
        ERR_NODE_AFFINITY,
        ERR_INSUFFICIENT,
    ]
    assert [r.message for r in reasons][2:] == [
        "node(s) had untolerated taint(s)",
        ERR_NODE_AFFINITY,
        "Insufficient cpu",
    ]
    older = fits(Pod.from_api(pod("p", nodeSelector={"disk": "ssd"})), snap["a"], snap, switches=for_version("1.33"))
    assert codes(older) == codes(reasons)
    assert older[2].message == "node(s) had untolerated taint {spot: true}"


def test_first_only_stops_at_the_first_failing_predicate() -> None:
    snap = snapshot([node("a", cpu="500m", unschedulable=True)])
    assert codes(fits(Pod.from_api(pod("p")), snap["a"], snap, first_only=True)) == [ERR_UNSCHEDULABLE]


def test_readiness_check_can_be_left_to_the_caller() -> None:
    snap = snapshot([node("a", ready=False)])
    assert fits(Pod.from_api(pod("p")), snap["a"], snap, check_node_ready=False) == []


def test_host_port_in_use_rejected() -> None:
    ports = [{"containerPort": 80, "hostPort": 8080}]
    snap = snapshot([node("a")], [pod("web", node_name="a", ports=ports)])
    assert codes(fits(Pod.from_api(pod("p", ports=ports)), snap["a"], snap)) == [ERR_NODE_PORTS]


def test_anti_affinity_with_an_existing_replica_rejected_only_on_its_node() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    snap = snapshot([node("a"), node("b")], [pod("web-1", node_name="a", labels={"app": "web"})])
    incoming = Pod.from_api(pod("web-2", labels={"app": "web"}, affinity=anti))
    assert codes(fits(incoming, snap["a"], snap)) == [ERR_ANTI_AFFINITY]
    assert fits(incoming, snap["b"], snap) == []


def test_topology_spread_violation_rejected() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    snap = snapshot(
        [node("a"), node("b")],
        [pod("web-1", node_name="a", labels={"app": "web"}, cpu="100m")],
    )
    incoming = Pod.from_api(pod("web-2", labels={"app": "web"}, topologySpreadConstraints=spread))
    assert codes(fits(incoming, snap["a"], snap)) == [ERR_SPREAD]
    assert fits(incoming, snap["b"], snap) == []


def test_bound_volume_pins_the_pod_to_its_zone() -> None:
    from shared.model import PersistentVolume, PersistentVolumeClaim

    pv = PersistentVolume.from_api(
        {
            "metadata": {"name": "pv-1"},
            "spec": {
                "claimRef": {"namespace": "default", "name": "data"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                        ]
                    }
                },
            },
        }
    )
    pvc = PersistentVolumeClaim.from_api(
        {"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}
    )
    snap = snapshot([node("a", labels={"zone": "z1"}), node("b", labels={"zone": "z2"})], pvs=[pv], pvcs=[pvc])
    incoming = Pod.from_api(pod("db", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))
    assert fits(incoming, snap["a"], snap) == []
    assert codes(fits(incoming, snap["b"], snap)) == [ERR_VOLUME_NODE_AFFINITY]


# --- the cluster's release (shared/switches.py) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("switches", "on_a"),
    [
        pytest.param(for_version("v1.34.4"), [], id="v1.34.4 counts no pod for an empty selector (common.go:145)"),
        pytest.param(for_version("v1.35.4"), [], id="v1.35.4 counts no pod for an empty selector (common.go:146)"),
        pytest.param(for_version("v1.36.3"), [], id="v1.36.3 counts no pod for an empty selector (common.go:146)"),
        pytest.param(for_version("v1.37.2"), [], id="v1.37.2 counts no pod for an empty selector (common.go:146)"),
        pytest.param(CURRENT, [], id="today's rules are v1.37.2's"),
        pytest.param(STRICTEST, [ERR_SPREAD], id="an unknown release counts every pod of the namespace"),
        pytest.param(for_version("v1.38.0"), [ERR_SPREAD], id="a release not read counts every pod of the namespace"),
    ],
)
def test_an_empty_spread_selector_by_release(switches: Switches, on_a: list[str]) -> None:
    # Zone za's node holds app=x and app=y; zone zb's node has an untolerated taint; the pending pod spreads over
    # zones with maxSkew 1 and labelSelector {}. Counting both pods, node a fails the spread (2 + 1 - 0 > 1:
    # zone zb is a domain with 0 pods, taints being ignored); counting none, it fits. Node b fails the taint.
    snap = snapshot(
        [
            node("a", labels={"zone": "za"}),
            node("b", labels={"zone": "zb"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        ],
        [pod("x", node_name="a", labels={"app": "x"}), pod("y", node_name="a", labels={"app": "y"})],
    )
    constraint = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    pending = Pod.from_api(pod("p", cpu="100m", topologySpreadConstraints=[constraint]))
    assert codes(fits(pending, snap["a"], snap, switches=switches)) == on_a
    assert codes(fits(pending, snap["b"], snap, switches=switches)) == [ERR_UNTOLERATED_TAINT]


def test_fits_passes_the_switches_to_the_resource_check() -> None:
    # A node with cpu: 1 holding a pod bound with cpu: 2; the pod asks only for memory (kubernetes#116408).
    snap = snapshot([node("a", cpu="1")], [pod("big", node_name="a", cpu="2")])
    mem_only = Pod.from_api(
        pod("m", cpu="0") | {"spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "100Mi"}}}]}}
    )
    assert fits(mem_only, snap["a"], snap) == []
    assert fits(mem_only, snap["a"], snap, switches=for_version("v1.27.0")) == []
    got = fits(mem_only, snap["a"], snap, switches=for_version("v1.26.3"))
    assert codes(got) == [ERR_INSUFFICIENT] and got[0].message == "Insufficient cpu"
    assert codes(fits(mem_only, snap["a"], snap, switches=STRICTEST, first_only=True)) == [ERR_INSUFFICIENT]


def test_fits_passes_the_switches_to_the_spread_check() -> None:
    # kubernetes#106971: a pod excluded from node u by affinity; u's two matching pods count in zone A only
    # before v1.24 (kubernetes#107009).
    snap = snapshot(
        [node("u", labels={"zone": "A"}), node("w", labels={"zone": "A"}), node("v", labels={"zone": "B"})],
        [pod(f"s{i}", node_name="u", cpu="0", labels={"g": "1"}) for i in range(2)]
        + [pod("s3", node_name="v", cpu="0", labels={"g": "1"})],
    )
    constraint = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"g": "1"}},
    }
    not_u = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["u"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [not_u]}]}
        }
    }
    p = Pod.from_api(pod("p", cpu="0", labels={"g": "1"}, affinity=affinity, topologySpreadConstraints=[constraint]))
    assert fits(p, snap["w"], snap) == []
    assert codes(fits(p, snap["w"], snap, switches=for_version("v1.23.0"))) == [ERR_SPREAD]
    assert codes(fits(p, snap["v"], snap)) == [ERR_SPREAD]
    assert fits(p, snap["v"], snap, switches=for_version("v1.20.2")) == []


def test_fits_does_not_mutate_its_inputs() -> None:
    raw_nodes = [node("a", cpu="500m", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])]
    raw_pods = [pod("x", node_name="a", cpu="100m")]
    raw_incoming = pod("p", nodeSelector={"disk": "ssd"})
    before = copy.deepcopy((raw_nodes, raw_pods, raw_incoming))
    snap = snapshot(raw_nodes, raw_pods)
    requested_before = dict(snap["a"].requested)
    pods_before = list(snap["a"].pods)
    version_before = snap.version
    fits(Pod.from_api(raw_incoming), snap["a"], snap)
    assert (raw_nodes, raw_pods, raw_incoming) == before
    assert snap["a"].requested == requested_before
    assert snap["a"].pods == pods_before
    assert snap.version == version_before
