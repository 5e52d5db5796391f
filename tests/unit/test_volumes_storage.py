"""Unbound claims and their StorageClasses (shared/storage.py, shared/volumes.py) against kube-scheduler 1.20's
VolumeBinding plugin: pkg/scheduler/framework/plugins/volumebinding/volume_binding_test.go TestVolumeBinding
(ids of transcribed cases are its case names) and pkg/controller/volume/scheduling/scheduler_binder.go
(GetPodVolumes, FindPodVolumes, findMatchingVolumes, checkVolumeProvisions)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from shared.fit_reasons import (
    ERR_UNBOUND_IMMEDIATE_CLAIMS,
    ERR_VOLUME_BIND_CONFLICT,
    ERR_VOLUME_NODE_AFFINITY,
    Reason,
)
from shared.model import Node, ParseError, PersistentVolume, PersistentVolumeClaim, Pod
from shared.snapshot import ClusterSnapshot
from shared.storage import StorageClass
from shared.volumes import check_volumes
from tests import builders
from tests.builders.planner import cluster, node, planned

IMMEDIATE = Reason(ERR_UNBOUND_IMMEDIATE_CLAIMS, ERR_UNBOUND_IMMEDIATE_CLAIMS, True)
BIND_CONFLICT = Reason(ERR_VOLUME_BIND_CONFLICT, ERR_VOLUME_BIND_CONFLICT, True)
NODE_CONFLICT = Reason(ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_NODE_AFFINITY, True)
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
Json = dict[str, Any]

# --- builders ------------------------------------------------------------------------------------------------


def sc_json(
    name: str,
    *,
    mode: str | None = "WaitForFirstConsumer",
    provisioner: str | None = "ebs.csi.aws.com",
    zones: list[str] | None = None,
    topologies: list[Json] | None = None,
) -> Json:
    """A StorageClass; ``zones`` is one allowed-topology term ``topology.kubernetes.io/zone In zones``."""
    raw: Json = {"kind": "StorageClass", "apiVersion": "storage.k8s.io/v1", "metadata": {"name": name}}
    if provisioner is not None:
        raw["provisioner"] = provisioner
    if mode is not None:
        raw["volumeBindingMode"] = mode
    if zones is not None:
        topologies = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    if topologies is not None:
        raw["allowedTopologies"] = topologies
    return raw


def pvc_json(name: str, sc: str | None, *, volume: str = "", annotations: dict[str, str] | None = None) -> Json:
    raw = builders.pvc_json(name, volume=volume)
    if sc is not None:
        raw["spec"]["storageClassName"] = sc
    if annotations:
        raw["metadata"]["annotations"] = annotations
    return raw


def pv_json(name: str, sc: str, *, host: str | None = None, claim: str | None = None) -> Json:
    raw = builders.pv_json(name, node_affinity={HOSTNAME: [host]} if host else None)
    raw["spec"]["storageClassName"] = sc
    if claim is not None:
        raw["spec"]["claimRef"] = {"namespace": "default", "name": claim}
    return raw


def pod_json(*claims: str, ephemeral: tuple[str, ...] = ()) -> Json:
    volumes: list[Json] = [
        {"name": f"vol-{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    volumes += [{"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in ephemeral]
    return builders.pod_json("pod-a", volumes=volumes)


def host(name: str, zone: str = "a") -> Json:
    return builders.node_json(name, labels={ZONE: zone, HOSTNAME: name})


def check(pod: Json, node: Json, *, pvcs: list[Json], scs: list[Json], pvs: list[Json] | None = None) -> Reason | None:
    parsed = Node.from_api(node)
    snapshot = ClusterSnapshot(
        [parsed],
        pvs=[PersistentVolume.from_api(p) for p in pvs or ()],
        pvcs=[PersistentVolumeClaim.from_api(c) for c in pvcs],
        storage_classes=[StorageClass.from_api(s) for s in scs],
    )
    return check_volumes(Pod.from_api(pod), parsed, snapshot)


CLASSES = [
    sc_json("immediate-sc", mode="Immediate"),
    sc_json("wait-sc", provisioner=None),
    sc_json("zonal-sc", zones=["a"]),
    sc_json("any-zone-sc"),
    sc_json("local-sc", provisioner="kubernetes.io/no-provisioner"),
]

# --- StorageClass ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topologies", "labels", "allowed"),
    [
        pytest.param(None, {}, True, id="no-allowed-topologies-allow-every-node"),
        pytest.param([], {}, True, id="an-empty-list-allows-every-node"),
        pytest.param([{"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]}], {ZONE: "a"}, True, id="in"),
        pytest.param([{"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]}], {ZONE: "b"}, False, id="not-in"),
        pytest.param([{"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]}], {}, False, id="label-missing"),
        pytest.param(
            [
                {"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}]},
                {"matchLabelExpressions": [{"key": ZONE, "values": ["b"]}]},
            ],
            {ZONE: "b"},
            True,
            id="terms-are-ored",
        ),
        pytest.param(
            [{"matchLabelExpressions": [{"key": ZONE, "values": ["a"]}, {"key": "disk", "values": ["ssd"]}]}],
            {ZONE: "a", "disk": "hdd"},
            False,
            id="requirements-of-a-term-are-anded",
        ),
        pytest.param([{"matchLabelExpressions": []}], {ZONE: "a"}, False, id="an-empty-term-matches-no-node"),
        pytest.param(
            [{"matchLabelExpressions": [{"key": ZONE, "values": []}]}], {ZONE: "a"}, False, id="no-values-match-none"
        ),
    ],
)
def test_match_topology_selector_terms(topologies: list[Json] | None, labels: dict[str, str], allowed: bool) -> None:
    assert StorageClass.from_api(sc_json("x", topologies=topologies)).allows(labels) is allowed


def test_a_class_without_binding_mode_is_immediate_and_no_provisioner_provisions_nothing() -> None:
    cls = StorageClass.from_api(sc_json("x", mode=None, provisioner="kubernetes.io/no-provisioner"))
    assert (cls.wait_for_first_consumer, cls.provisions) == (False, False)


@pytest.mark.parametrize(
    "topologies",
    [
        pytest.param(["zone-a"], id="term-not-an-object"),
        pytest.param([{"matchLabelExpressions": [{"values": ["a"]}]}], id="requirement-without-key"),
        pytest.param([{"matchLabelExpressions": [{"key": ZONE, "values": "a"}]}], id="values-not-a-list"),
    ],
)
def test_a_malformed_class_is_a_parse_error_naming_the_field(topologies: list[Any]) -> None:
    with pytest.raises(ParseError, match=r"storageclass x: allowedTopologies\[0\]"):
        StorageClass.from_api(sc_json("x", topologies=topologies))


# --- VolumeBinding -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "pvcs", "pvs", "node", "want"),
    [
        pytest.param(
            ("pvc-a",), [pvc_json("pvc-a", "immediate-sc")], [], host("n1"), IMMEDIATE, id="immediate claims not bound"
        ),
        pytest.param(("pvc-a",), [pvc_json("pvc-a", None)], [], host("n1"), IMMEDIATE, id="unbound-claim-no-class"),
        pytest.param(
            ("pvc-a",), [pvc_json("pvc-a", "gone-sc")], [], host("n1"), IMMEDIATE, id="unbound-claim-of-a-missing-class"
        ),
        pytest.param(
            ("pvc-a",), [pvc_json("pvc-a", "wait-sc")], [], host("n1"), BIND_CONFLICT, id="unbound claims no matches"
        ),
        pytest.param(
            ("pvc-a", "pvc-b"),
            [pvc_json("pvc-a", "wait-sc", volume="pv-a"), pvc_json("pvc-b", "wait-sc")],
            [pv_json("pv-a", "wait-sc", host="elsewhere", claim="pvc-a")],
            host("n1"),
            NODE_CONFLICT,
            id="bound and unbound unsatisfied",
        ),
        pytest.param(
            ("pvc-a",), [pvc_json("pvc-a", "zonal-sc")], [], host("n1", "a"), None, id="provisioned-in-an-allowed-zone"
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "zonal-sc")],
            [],
            host("n1", "b"),
            BIND_CONFLICT,
            id="not-provisioned-outside-the-allowed-zones",
        ),
        pytest.param(
            ("pvc-a",), [pvc_json("pvc-a", "any-zone-sc")], [], host("n1", "b"), None, id="provisioned-anywhere"
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "local-sc")],
            [pv_json("local-n1", "local-sc", host="n1")],
            host("n1"),
            None,
            id="an-available-local-pv-on-the-node",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "local-sc")],
            [pv_json("local-n1", "local-sc", host="n1")],
            host("n2"),
            BIND_CONFLICT,
            id="a-local-pv-on-another-node",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "local-sc")],
            [pv_json("local-n2", "local-sc", host="n2", claim="other")],
            host("n2"),
            BIND_CONFLICT,
            id="a-pv-claimed-by-another-claim-is-not-available",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "local-sc")],
            [pv_json("local-n2", "local-sc", host="n2", claim="pvc-a")],
            host("n2"),
            None,
            id="a-pv-pre-bound-to-the-claim-is-available",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "local-sc")],
            [pv_json("local-n2", "wait-sc", host="n2")],
            host("n2"),
            BIND_CONFLICT,
            id="a-pv-of-another-class-is-not-available",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "zonal-sc")],
            [pv_json("static", "zonal-sc", host="n1")],
            host("n1", "b"),
            None,
            id="an-existing-pv-wins-over-the-class-topology",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "any-zone-sc", annotations={"volume.kubernetes.io/selected-node": "n2"})],
            [],
            host("n1"),
            BIND_CONFLICT,
            id="a-claim-placed-on-another-node",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", "any-zone-sc", annotations={"volume.kubernetes.io/selected-node": "n1"})],
            [],
            host("n1"),
            None,
            id="a-claim-placed-on-this-node",
        ),
        pytest.param(
            ("pvc-a",),
            [pvc_json("pvc-a", None, annotations={"volume.beta.kubernetes.io/storage-class": "zonal-sc"})],
            [],
            host("n1", "b"),
            BIND_CONFLICT,
            id="the-beta-annotation-names-the-class",
        ),
        pytest.param(
            (),
            [pvc_json("pod-a-scratch", "zonal-sc")],
            [],
            host("n1", "b"),
            BIND_CONFLICT,
            id="a-generic-ephemeral-volume-claim",
        ),
        pytest.param(("pvc-a",), [], [], host("n1"), None, id="a-claim-the-snapshot-lacks-sets-no-constraint"),
    ],
)
def test_volume_binding_unbound_claims(
    claims: tuple[str, ...], pvcs: list[Json], pvs: list[Json], node: Json, want: Reason | None
) -> None:
    ephemeral = ("scratch",) if not claims else ()
    assert check(pod_json(*claims, ephemeral=ephemeral), node, pvcs=pvcs, pvs=pvs, scs=CLASSES) == want


def test_without_any_storage_class_an_unbound_claim_sets_no_constraint() -> None:
    # A snapshot listed without `storageclass` knows nothing of how unbound claims bind.
    assert check(pod_json("pvc-a"), host("n1"), pvcs=[pvc_json("pvc-a", "immediate-sc")], scs=[]) is None


def test_the_check_does_not_mutate_its_inputs() -> None:
    raw = (pod_json("pvc-a"), host("n1", "b"), [pvc_json("pvc-a", "zonal-sc")], copy.deepcopy(CLASSES))
    before = copy.deepcopy(raw)
    assert check(raw[0], raw[1], pvcs=raw[2], scs=raw[3]) == BIND_CONFLICT
    assert check(raw[0], raw[1], pvcs=raw[2], scs=raw[3]) == BIND_CONFLICT
    assert raw == before


# --- the plan, from a snapshot file --------------------------------------------------------------------------------


def _snapshot_with(claim_class: str, spot_zone: str) -> ClusterSnapshot:
    items = [
        sc_json("zonal-sc", zones=["a"]),
        builders.pvc_json("data", namespace="shop") | {"spec": {"storageClassName": claim_class}},
        builders.pod_json(
            "db-0",
            namespace="shop",
            node_name="od-1",
            owners=[builders.owner("StatefulSet", "db")],
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            requests={"cpu": "100m"},
        ),
    ]
    snap = load_bytes(orjson.dumps(builders.api_list(items)))
    return cluster(
        [node("od-1", zone="a"), node("spot-1", spot=True, zone=spot_zone)],
        list(snap.unknown_node_pods),  # od-1 is not in the file: its pod is bound to an unknown node there
        pvcs=snap.pvcs.values(),
        storage_classes=snap.storage_classes.values(),
    )


def test_plan_keeps_a_pod_whose_claim_can_only_be_provisioned_where_no_spot_node_is() -> None:
    assert planned(_snapshot_with("zonal-sc", "a")).drained == ("od-1",)
    stays = planned(_snapshot_with("zonal-sc", "b"))
    assert stays.drained == ()
    assert ERR_VOLUME_BIND_CONFLICT in stays.undrainable["od-1"]


def test_plan_sends_a_pod_to_the_one_spot_node_holding_an_available_local_volume() -> None:
    # Spot nodes alike but for their hostname: the static filters must check them one by one, not as a group.
    items = [
        sc_json("local-sc", provisioner="kubernetes.io/no-provisioner"),
        pv_json("local-spot-2", "local-sc", host="spot-2"),
        builders.pvc_json("data", namespace="shop") | {"spec": {"storageClassName": "local-sc"}},
    ]
    snap = load_bytes(orjson.dumps(builders.api_list(items)))
    db = builders.pod_json(
        "db-0",
        namespace="shop",
        node_name="od-1",
        owners=[builders.owner("StatefulSet", "db")],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        requests={"cpu": "100m"},
    )
    spots = [node(f"spot-{i}", spot=True) for i in (1, 2, 3)]
    result = planned(
        cluster(
            [node("od-1"), *spots],
            [Pod.from_api(db)],
            pvs=snap.pvs.values(),
            pvcs=snap.pvcs.values(),
            storage_classes=snap.storage_classes.values(),
        )
    )
    assert [(m.pod, m.target) for m in result.moves] == [("shop/db-0", "spot-2")]
