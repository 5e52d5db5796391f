"""shared.volumes against kube-scheduler's tables.

Transcribed (ids are the upstream case names):
* ``pkg/scheduler/framework/plugins/volumezone/volume_zone_test.go`` TestSingleZone, TestMultiZone and the
  bound case of TestWithBinding;
* ``pkg/scheduler/framework/plugins/volumebinding/volume_binding_test.go`` TestVolumeBinding, the cases about
  bound claims (node affinity of the bound PV), and the text of its ``ErrReasonNodeConflict`` at each tag from
  v1.32.13 to v1.37.2.

Where upstream fails because an object is missing (claim, PV, storage class), the snapshot simply lacks it
and the library sets no constraint; those cases are kept, with that expectation, in their own test.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit_reasons import ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_ZONE, Reason
from shared.model import Node, PersistentVolume, PersistentVolumeClaim, Pod
from shared.snapshot import ClusterSnapshot
from shared.switches import for_version
from shared.volumes import check_volumes, label_zones_to_set
from tests import builders

ZONE_CONFLICT = Reason(ERR_VOLUME_ZONE, ERR_VOLUME_ZONE, True)
NODE_CONFLICT = Reason(ERR_VOLUME_NODE_AFFINITY, ERR_VOLUME_NODE_AFFINITY, True)

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"

# --- builders ------------------------------------------------------------------------------------------------


def pv_json(
    name: str, labels: dict[str, str] | None = None, affinity: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """``makePV(name).withNodeAffinity(map[key][]values)``: one term, ``key In values`` for each key."""
    return builders.pv_json(name, labels=labels, node_affinity=affinity)


def pvc_json(name: str, volume: str = "", namespace: str = "default") -> dict[str, Any]:
    return builders.pvc_json(name, namespace=namespace, volume=volume)


def pod_json(*claims: str, name: str = "pod_1", ephemeral: tuple[str, ...] = ()) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "kube-api-access", "projected": {"sources": []}}]
    volumes += [{"name": f"vol-{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    volumes += [{"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in ephemeral]
    return builders.pod_json(name, image="img", volumes=volumes)


def node_json(name: str = "host1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return builders.node_json(name, labels=labels or {})


def check(
    pod: dict[str, Any], node: dict[str, Any], pvs: list[dict[str, Any]], pvcs: list[dict[str, Any]]
) -> Reason | None:
    parsed_node = Node.from_api(node)
    snapshot = ClusterSnapshot(
        [parsed_node],
        pvs=[PersistentVolume.from_api(p) for p in pvs],
        pvcs=[PersistentVolumeClaim.from_api(c) for c in pvcs],
    )
    return check_volumes(Pod.from_api(pod), parsed_node, snapshot)


# --- volume_zone_test.go TestSingleZone ----------------------------------------------------------------------

SINGLE_ZONE_PVS = [
    pv_json("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv_json("Vol_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv_json("Vol_3", {BETA_REGION: "us-west1"}),
    pv_json("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv_json("Vol_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}),
    pv_json("Vol_Stable_3", {ZONE: "us-west1-a", REGION: "us-west1-a"}),
]
SINGLE_ZONE_PVCS = [
    pvc_json("PVC_1", "Vol_1"),
    pvc_json("PVC_2", "Vol_2"),
    pvc_json("PVC_3", "Vol_3"),
    pvc_json("PVC_4", "Vol_not_exist"),
    pvc_json("PVC_Stable_1", "Vol_Stable_1"),
    pvc_json("PVC_Stable_2", "Vol_Stable_2"),
    pvc_json("PVC_Stable_3", "Vol_Stable_3"),
]
USELESS = {"uselessLabel": "none"}


@pytest.mark.parametrize(
    ("claims", "labels", "want"),
    [
        pytest.param((), {BETA_ZONE: "us-west1-a"}, None, id="pod without volume"),
        pytest.param(("PVC_1",), None, None, id="node without labels"),
        pytest.param(("PVC_1",), {BETA_ZONE: "us-west1-a", **USELESS}, None, id="beta zone label matched"),
        pytest.param(("PVC_2",), {BETA_REGION: "us-west1", **USELESS}, None, id="beta region label matched"),
        pytest.param(
            ("PVC_2",), {BETA_REGION: "no_us-west1", **USELESS}, ZONE_CONFLICT, id="beta region label doesn't match"
        ),
        pytest.param(
            ("PVC_1",), {BETA_ZONE: "no_us-west1-a", **USELESS}, ZONE_CONFLICT, id="beta zone label doesn't match"
        ),
        pytest.param(("PVC_Stable_1",), {ZONE: "us-west1-a", **USELESS}, None, id="zone label matched"),
        pytest.param(("PVC_Stable_2",), {REGION: "us-west1", **USELESS}, None, id="region label matched"),
        pytest.param(
            ("PVC_Stable_2",), {REGION: "no_us-west1", **USELESS}, ZONE_CONFLICT, id="region label doesn't match"
        ),
        pytest.param(
            ("PVC_Stable_1",), {ZONE: "no_us-west1-a", **USELESS}, ZONE_CONFLICT, id="zone label doesn't match"
        ),
        pytest.param(
            ("PVC_Stable_3",), {ZONE: "us-west1-a"}, ZONE_CONFLICT, id="pv with zone and region, node with only zone"
        ),
        pytest.param(
            ("PVC_Stable_1",), {BETA_ZONE: "us-west1-a"}, ZONE_CONFLICT, id="pv with zone,node with beta zone"
        ),
        pytest.param(("PVC_1",), {ZONE: "us-west1-a"}, None, id="pv with beta label,node with ga label, matched"),
        pytest.param(
            ("PVC_1",), {ZONE: "us-west1-b"}, ZONE_CONFLICT, id="pv with beta label,node with ga label, don't match"
        ),
        # Edge cases beyond upstream.
        pytest.param(("PVC_4",), {ZONE: "us-west1-b"}, None, id="PV not in the snapshot sets no constraint"),
        pytest.param(("PVC_1", "PVC_Stable_2"), {ZONE: "us-west1-a", REGION: "us-west1"}, None, id="two volumes fit"),
        pytest.param(
            ("PVC_1", "PVC_Stable_2"), {ZONE: "us-west1-a", REGION: "eu-west1"}, ZONE_CONFLICT, id="second volume"
        ),
        pytest.param(("PVC_1",), {BETA_ZONE: "us-west1-a", ZONE: "us-west1-b"}, None, id="beta key wins over GA"),
    ],
)
def test_single_zone(claims: tuple[str, ...], labels: dict[str, str] | None, want: Reason | None) -> None:
    got = check(pod_json(*claims), node_json("host1", labels), SINGLE_ZONE_PVS, SINGLE_ZONE_PVCS)
    assert got == want
    if got is not None:
        assert got.message == "node(s) had no available volume zone"


# --- volume_zone_test.go TestMultiZone -----------------------------------------------------------------------

MULTI_ZONE_PVS = [
    pv_json("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv_json("Vol_2", {BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    pv_json("Vol_3", {BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv_json("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv_json("Vol_Stable_2", {ZONE: "us-west1-c__us-west1-a"}),
    pv_json("Vol_Malformed", {ZONE: "us-west1-c__"}),
    pv_json("Vol_Spaces", {ZONE: " us-west1-c __ us-west1-a "}),
]
MULTI_ZONE_PVCS = [
    pvc_json("PVC_1", "Vol_1"),
    pvc_json("PVC_2", "Vol_2"),
    pvc_json("PVC_3", "Vol_3"),
    pvc_json("PVC_4", "Vol_not_exist"),
    pvc_json("PVC_Stable_1", "Vol_Stable_1"),
    pvc_json("PVC_Stable_2", "Vol_Stable_2"),
    pvc_json("PVC_Malformed", "Vol_Malformed"),
    pvc_json("PVC_Spaces", "Vol_Spaces"),
]


@pytest.mark.parametrize(
    ("claim", "labels", "want"),
    [
        pytest.param("PVC_3", None, None, id="node without labels"),
        pytest.param("PVC_3", {BETA_ZONE: "us-west1-a", **USELESS}, None, id="beta zone label matched"),
        pytest.param("PVC_1", {BETA_ZONE: "us-west1-b", **USELESS}, ZONE_CONFLICT, id="beta zone label doesn't match"),
        pytest.param("PVC_Stable_2", {ZONE: "us-west1-a", **USELESS}, None, id="zone label matched"),
        pytest.param("PVC_Stable_1", {ZONE: "us-west1-b", **USELESS}, ZONE_CONFLICT, id="zone label doesn't match"),
        # Edge cases beyond upstream (volumehelpers.LabelZonesToSet).
        pytest.param("PVC_Stable_2", {ZONE: "us-west1-b"}, ZONE_CONFLICT, id="zone outside the set"),
        pytest.param("PVC_Malformed", {ZONE: "us-west1-b"}, None, id="malformed zone set is ignored"),
        pytest.param("PVC_Spaces", {ZONE: "us-west1-a"}, None, id="zone set members are trimmed"),
    ],
)
def test_multi_zone(claim: str, labels: dict[str, str] | None, want: Reason | None) -> None:
    assert check(pod_json(claim), node_json("host1", labels), MULTI_ZONE_PVS, MULTI_ZONE_PVCS) == want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("us-west1-a", frozenset({"us-west1-a"}), id="one zone"),
        pytest.param("a__b__a", frozenset({"a", "b"}), id="a set"),
        pytest.param("a____b", None, id="empty member"),
        pytest.param("", None, id="empty value"),
    ],
)
def test_label_zones_to_set(value: str, want: frozenset[str] | None) -> None:
    assert label_zones_to_set(value) == want


# --- volume_zone_test.go TestWithBinding, volume_binding_test.go TestVolumeBinding (bound claims) -----------

BINDING_NODE = node_json("host1", {BETA_ZONE: "us-west1-a", **USELESS})


def test_label_zone_failure_domain_matched() -> None:
    # volume_zone_test.go TestWithBinding "label zone failure domain matched"
    assert (
        check(
            pod_json("PVC_1"), BINDING_NODE, [pv_json("Vol_1", {BETA_ZONE: "us-west1-a"})], [pvc_json("PVC_1", "Vol_1")]
        )
        is None
    )


@pytest.mark.parametrize(
    ("claims", "node_labels", "pvcs", "pvs", "want"),
    [
        pytest.param((), None, [], [], None, id="pod has not pvcs"),
        pytest.param(("pvc-a",), None, [pvc_json("pvc-a", "pv-a")], [pv_json("pv-a")], None, id="all bound"),
        pytest.param(
            ("pvc-a", "pvc-b"),
            {HOSTNAME: "node-a"},
            [pvc_json("pvc-a", "pv-a"), pvc_json("pvc-b", "pv-b")],
            [pv_json("pv-a", affinity={HOSTNAME: ["node-a"]}), pv_json("pv-b", affinity={HOSTNAME: ["node-a"]})],
            None,
            id="all bound with local volumes",
        ),
        pytest.param(
            ("pvc-a", "pvc-b"),
            {"foo": "barbar"},
            [pvc_json("pvc-a", "pv-a"), pvc_json("pvc-b")],
            [pv_json("pv-a", affinity={"foo": ["bar"]})],
            NODE_CONFLICT,
            id="bound and unbound unsatisfied",
        ),
        # Edge cases beyond upstream.
        pytest.param(
            ("pvc-a",),
            {HOSTNAME: "node-b"},
            [pvc_json("pvc-a", "pv-a")],
            [pv_json("pv-a", affinity={HOSTNAME: ["node-a"]})],
            NODE_CONFLICT,
            id="local volume of another node",
        ),
        pytest.param(
            ("pvc-a",),
            {HOSTNAME: "node-b", ZONE: "z2"},
            [pvc_json("pvc-a", "pv-a")],
            [pv_json("pv-a", {ZONE: "z1"}, {HOSTNAME: ["node-a"]})],
            NODE_CONFLICT,
            id="node affinity is reported before the zone (VolumeBinding runs before VolumeZone)",
        ),
        pytest.param(
            ("pvc-a",),
            {HOSTNAME: "node-a"},
            [pvc_json("pvc-a", "pv-a", namespace="other")],
            [pv_json("pv-a", affinity={HOSTNAME: ["other-node"]})],
            None,
            id="claim of another namespace is not the pod's",
        ),
    ],
)
def test_volume_binding_bound_claims(
    claims: tuple[str, ...],
    node_labels: dict[str, str] | None,
    pvcs: list[dict[str, Any]],
    pvs: list[dict[str, Any]],
    want: Reason | None,
) -> None:
    got = check(pod_json(*claims, name="pod-a"), node_json("node-a", node_labels), pvs, pvcs)
    assert got == want
    if got is not None:
        assert got.message == "node(s) didn't match PersistentVolume's node affinity"


@pytest.mark.parametrize(
    ("version", "message"),
    [
        pytest.param(
            "v1.32.13",
            "node(s) had volume node affinity conflict",
            id="v1.32.13 TestVolumeBinding/bound and unbound unsatisfied (binder.go:68 ErrReasonNodeConflict)",
        ),
        *(
            pytest.param(
                v,
                "node(s) didn't match PersistentVolume's node affinity",
                id=f"{v} TestVolumeBinding/bound and unbound unsatisfied (binder.go:{line} ErrReasonNodeConflict)",
            )
            for v, line in [("v1.33.13", 67), ("v1.34.4", 67), ("v1.35.4", 66), ("v1.36.3", 66), ("v1.37.2", 66)]
        ),
    ],
)
def test_volume_node_affinity_conflict_is_worded_as_each_release_words_it(version: str, message: str) -> None:
    """``wantFilterStatus`` of the case names ``ErrReasonNodeConflict`` first; its text is the release's
    (``Switches.volume_reason_names_persistent_volume``), the code the same on every release."""
    node = Node.from_api(node_json("node-a", {"foo": "barbar"}))
    snapshot = ClusterSnapshot(
        [node],
        pvs=[PersistentVolume.from_api(pv_json("pv-a", affinity={"foo": ["bar"]}))],
        pvcs=[PersistentVolumeClaim.from_api(c) for c in (pvc_json("pvc-a", "pv-a"), pvc_json("pvc-b"))],
    )
    got = check_volumes(
        Pod.from_api(pod_json("pvc-a", "pvc-b", name="pod-a")), node, snapshot, switches=for_version(version)
    )
    assert got is not None
    assert (got.code, got.message, got.unresolvable) == (ERR_VOLUME_NODE_AFFINITY, message, True)


def test_pv_node_affinity_ignores_match_fields() -> None:
    # CheckNodeAffinity hands MatchNodeSelectorTerms a node built from the labels only: no metadata.name field.
    pv = pv_json("pv-a")
    pv["spec"]["nodeAffinity"] = {
        "required": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
        }
    }
    assert check(pod_json("pvc-a"), node_json("node-b"), [pv], [pvc_json("pvc-a", "pv-a")]) is None


def test_pv_node_affinity_with_no_terms_matches_no_node() -> None:
    pv = pv_json("pv-a")
    pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": []}}
    assert check(pod_json("pvc-a"), node_json("node-a"), [pv], [pvc_json("pvc-a", "pv-a")]) == NODE_CONFLICT


def test_generic_ephemeral_volume_claim_is_pod_name_dash_volume_name() -> None:
    pvs = [pv_json("pv-e", {ZONE: "z1"}, {HOSTNAME: ["node-a"]})]
    pvcs = [pvc_json("web-0-scratch", "pv-e")]
    pod = pod_json(name="web-0", ephemeral=("scratch",))
    assert check(pod, node_json("node-a", {HOSTNAME: "node-a", ZONE: "z9"}), pvs, pvcs) is None  # no zone check
    assert check(pod, node_json("node-b", {HOSTNAME: "node-b"}), pvs, pvcs) == NODE_CONFLICT


@pytest.mark.parametrize(
    ("claims", "pvcs", "pvs"),
    [
        # volume_binding_test.go: upstream "persistentvolumeclaim "pvc-a" not found".
        pytest.param(("pvc-a",), [], [], id="PVC does not exist"),
        pytest.param(
            ("pvc-a", "pvc-b"), [pvc_json("pvc-a", "pv-a")], [pv_json("pv-a")], id="Part of PVCs do not exist"
        ),
        # upstream "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)".
        pytest.param(("pvc-a",), [pvc_json("pvc-a", "pv-a")], [], id="pv not found"),
        # volume_zone_test.go TestWithBinding: unbound claims depend on storage classes the snapshot lacks.
        pytest.param(("PVC_EmptySC",), [pvc_json("PVC_EmptySC")], [], id="unbound volume empty storage class"),
        pytest.param(("PVC_NoSC",), [pvc_json("PVC_NoSC")], [], id="unbound volume no storage class"),
        pytest.param(
            ("PVC_ImmediateSC",), [pvc_json("PVC_ImmediateSC")], [], id="unbound volume immediate binding mode"
        ),
        pytest.param(("PVC_WaitSC",), [pvc_json("PVC_WaitSC")], [], id="unbound volume wait binding mode"),
    ],
)
def test_objects_missing_from_the_snapshot_set_no_constraint(
    claims: tuple[str, ...], pvcs: list[dict[str, Any]], pvs: list[dict[str, Any]]
) -> None:
    node = node_json("node-a", {BETA_ZONE: "us-west1-a", HOSTNAME: "node-a"})
    assert check(pod_json(*claims), node, pvs, pvcs) is None


# --- purity --------------------------------------------------------------------------------------------------


def test_check_volumes_does_not_mutate_inputs() -> None:
    raw_pod = pod_json("PVC_1", "PVC_Stable_3", ephemeral=("scratch",))
    raw_node = node_json("host1", {ZONE: "us-west1-a", REGION: "us-west1-a", HOSTNAME: "host1"})
    raw_pvs = [*SINGLE_ZONE_PVS, pv_json("pv-e", affinity={HOSTNAME: ["host1"]})]
    raw_pvcs = [*SINGLE_ZONE_PVCS, pvc_json("pod_1-scratch", "pv-e")]
    before = copy.deepcopy((raw_pod, raw_node, raw_pvs, raw_pvcs))

    pod, node = Pod.from_api(raw_pod), Node.from_api(raw_node)
    assert pod == Pod.from_api(raw_pod) and node == Node.from_api(raw_node)
    pvs = [PersistentVolume.from_api(p) for p in raw_pvs]
    pvcs = [PersistentVolumeClaim.from_api(c) for c in raw_pvcs]
    snapshot = ClusterSnapshot([node], pvs=pvs, pvcs=pvcs)
    version = snapshot.version

    assert check_volumes(pod, node, snapshot) is None
    assert check_volumes(pod, node, snapshot) is None
    assert (raw_pod, raw_node, raw_pvs, raw_pvcs) == before
    assert snapshot.version == version
    assert list(snapshot.pvs.values()) == [PersistentVolume.from_api(p) for p in before[2]]
    assert list(snapshot.pvcs.values()) == [PersistentVolumeClaim.from_api(c) for c in before[3]]
