"""shared.movable: which pods the rescheduler may move, and which keep their node from being drained.

Transcribed from cluster-autoscaler (ids are the upstream case names):
* ``simulator/drainability/rules/localstorage/rule_test.go`` TestDrain;
* ``simulator/drainability/rules/system/rule_test.go`` TestDrainable;
* ``simulator/drainability/rules/safetoevict/rule_test.go`` TestDrainable.
One deliberate difference: cluster-autoscaler ignores a pod terminating for longer than its grace period;
spotshift blocks on every terminating pod (the node is not empty until the pod is gone, and the next
cycle sees it gone).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.config import Config, NodeClasses, parse_config
from shared.model import PDB, Pod
from shared.movable import (
    BLOCK_KUBE_SYSTEM_NO_PDB,
    BLOCK_LOCAL_STORAGE,
    BLOCK_NOT_REPLICATED,
    BLOCK_NOT_SAFE_TO_EVICT,
    BLOCK_OPTED_OUT,
    BLOCK_PINNED_ON_DEMAND,
    BLOCK_TERMINATING,
    MOVE,
    MOVE_SAFE_TO_EVICT,
    RULES,
    SAFE_TO_EVICT_KEY,
    SAFE_TO_EVICT_LOCAL_VOLUMES_KEY,
    SKIP_DAEMONSET,
    SKIP_EXPENDABLE,
    SKIP_MIRROR,
    SKIP_TERMINAL,
    Movability,
    Outcome,
    is_daemonset_pod,
    is_mirror_pod,
    movability,
    pinned_to_on_demand,
)

DEFAULT = Config()
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "u1", "controller": True}

# --- builders -------------------------------------------------------------------------------------


def pod_json(
    name: str = "bar",
    namespace: str = "default",
    *,
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    deleting: bool = False,
    priority: int | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    meta["ownerReferences"] = [RS] if owners is None else owners
    if annotations:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2020-12-18T17:00:00Z"
    spec: dict[str, Any] = {
        "nodeName": "node",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if volumes:
        spec["volumes"] = volumes
    if priority is not None:
        spec["priority"] = priority
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pod(name: str = "bar", namespace: str = "default", **kw: Any) -> Pod:
    return Pod.from_api(pod_json(name, namespace, **kw))


def owner(kind: str, name: str = "x", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": controller}


def empty_dir(name: str, medium: str = "") -> dict[str, Any]:
    return {"name": name, "emptyDir": {"medium": medium} if medium else {}}


def pdb(namespace: str, match_labels: dict[str, str] | None) -> PDB:
    spec: dict[str, Any] = {"minAvailable": 1}
    if match_labels is not None:
        spec["selector"] = {"matchLabels": match_labels}
    return PDB.from_api({"apiVersion": "policy/v1", "metadata": {"name": "pdb", "namespace": namespace}, "spec": spec})


def config(**movability_yaml: Any) -> Config:
    return parse_config({"movability": movability_yaml})


def classes(**node_classes_yaml: Any) -> NodeClasses:
    return parse_config({"node_classes": node_classes_yaml}).node_classes


def required(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node_terms: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields:
        node_terms.append({"matchFields": fields})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def skip(reason: str) -> Movability:
    return Movability(Outcome.SKIP, reason)


def block(reason: str) -> Movability:
    return Movability(Outcome.BLOCK, reason)


# --- one rule at a time ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "want"),
    [
        pytest.param(pod(), MOVE, id="replicaset-pod-moves"),
        pytest.param(pod(owners=[owner("StatefulSet")]), MOVE, id="statefulset-pod-moves"),
        pytest.param(pod(owners=[owner("Job", controller=True)]), MOVE, id="job-pod-moves"),
        pytest.param(pod(owners=[owner("DaemonSet")]), skip(SKIP_DAEMONSET), id="daemonset-pod-is-skipped"),
        pytest.param(
            pod(owners=[], annotations={"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"}),
            skip(SKIP_DAEMONSET),
            id="ca-daemonset-pod-annotation-is-skipped",
        ),
        pytest.param(
            pod(owners=[owner("DaemonSet", controller=False)]),
            block(BLOCK_NOT_REPLICATED),
            id="daemonset-owner-that-is-not-the-controller-is-a-bare-pod",
        ),
        pytest.param(
            pod(owners=[], annotations={"kubernetes.io/config.mirror": "abc"}),
            skip(SKIP_MIRROR),
            id="mirror-pod-is-skipped",
        ),
        pytest.param(
            pod(owners=[], annotations={"kubernetes.io/config.source": "file"}),
            skip(SKIP_MIRROR),
            id="static-pod-config-source-file-is-skipped",
        ),
        pytest.param(
            pod(owners=[{"apiVersion": "v1", "kind": "Node", "name": "node", "controller": True}]),
            skip(SKIP_MIRROR),
            id="pod-controlled-by-its-node-is-skipped",
        ),
        pytest.param(pod(phase="Succeeded"), skip(SKIP_TERMINAL), id="succeeded-pod-does-not-block"),
        pytest.param(pod(owners=[], phase="Failed"), skip(SKIP_TERMINAL), id="failed-bare-pod-does-not-block"),
        pytest.param(pod(deleting=True), block(BLOCK_TERMINATING), id="terminating-pod-blocks"),
        pytest.param(
            pod(owners=[owner("DaemonSet")], deleting=True),
            skip(SKIP_DAEMONSET),
            id="terminating-daemonset-pod-is-skipped",
        ),
        pytest.param(pod(owners=[]), block(BLOCK_NOT_REPLICATED), id="bare-pod-blocks"),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "false"}),
            block(BLOCK_NOT_SAFE_TO_EVICT),
            id="safe-to-evict-false-blocks",
        ),
        pytest.param(
            pod(annotations={"karpenter.sh/do-not-disrupt": "true"}),
            block('pod is annotated karpenter.sh/do-not-disrupt: "true"'),
            id="karpenter-do-not-disrupt-blocks",
        ),
        pytest.param(
            pod(annotations={"karpenter.sh/do-not-evict": "true"}),
            block('pod is annotated karpenter.sh/do-not-evict: "true"'),
            id="karpenter-do-not-evict-blocks",
        ),
        pytest.param(
            pod(annotations={"karpenter.sh/do-not-disrupt": "false"}), MOVE, id="karpenter-do-not-disrupt-false-moves"
        ),
        pytest.param(
            pod(annotations={"karpenter.sh/do-not-disrupt": "true", SAFE_TO_EVICT_KEY: "true"}),
            block('pod is annotated karpenter.sh/do-not-disrupt: "true"'),
            id="do-not-disrupt-wins-over-safe-to-evict-true",
        ),
        pytest.param(
            pod(owners=[owner("DaemonSet")], annotations={"karpenter.sh/do-not-disrupt": "true"}),
            skip(SKIP_DAEMONSET),
            id="do-not-disrupt-daemonset-pod-is-still-skipped",
        ),
        pytest.param(pod(labels={"spotshift.io/exclude": "true"}), block(BLOCK_OPTED_OUT), id="opt-out-label-blocks"),
        pytest.param(
            pod(annotations={"spotshift.io/exclude": "true"}), block(BLOCK_OPTED_OUT), id="opt-out-annotation-blocks"
        ),
        pytest.param(pod(annotations={"spotshift.io/exclude": "false"}), MOVE, id="opt-out-false-moves"),
        pytest.param(pod(annotations={"spotshift.io/exclude": ""}), MOVE, id="opt-out-empty-value-moves"),
        pytest.param(
            pod(volumes=[{"name": "h", "hostPath": {"path": "/var/log"}}]),
            block(BLOCK_LOCAL_STORAGE),
            id="hostpath-blocks",
        ),
        pytest.param(pod(volumes=[empty_dir("tmp", "Memory")]), MOVE, id="memory-backed-emptydir-moves"),
        pytest.param(
            pod(volumes=[empty_dir("huge", "HugePages")]), block(BLOCK_LOCAL_STORAGE), id="hugepages-emptydir-blocks"
        ),
        pytest.param(
            pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
            MOVE,
            id="pvc-is-not-local-storage",
        ),
        pytest.param(
            pod(volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]), MOVE, id="configmap-is-not-local-storage"
        ),
        pytest.param(
            pod(node_selector={"karpenter.sh/capacity-type": "on-demand"}),
            block(BLOCK_PINNED_ON_DEMAND),
            id="pod-pinned-to-on-demand-blocks",
        ),
    ],
)
def test_movability_rules(p: Pod, want: Movability) -> None:
    assert movability(p, DEFAULT, ()) == want


@pytest.mark.parametrize(
    ("priority", "want"),
    [
        pytest.param(-11, skip(SKIP_EXPENDABLE), id="priority-below-cutoff-is-expendable"),
        pytest.param(-10, MOVE, id="priority-at-cutoff-is-not-expendable"),
        pytest.param(0, MOVE, id="default-priority-moves"),
        pytest.param(None, MOVE, id="no-priority-counts-as-zero"),
    ],
)
def test_expendable_pods_neither_block_nor_move(priority: int | None, want: Movability) -> None:
    assert movability(pod(priority=priority), DEFAULT) == want


def test_expendable_bare_pod_with_local_storage_does_not_block() -> None:
    p = pod(owners=[], priority=-100, volumes=[empty_dir("scratch")])
    assert movability(p, DEFAULT) == skip(SKIP_EXPENDABLE)


def test_expendable_cutoff_is_configurable() -> None:
    assert movability(pod(priority=5), config(expendable_priority_cutoff=10)) == skip(SKIP_EXPENDABLE)


def test_bare_pods_move_when_delete_non_replicated_pods() -> None:
    assert movability(pod(owners=[]), config(delete_non_replicated_pods=True)) == MOVE


def test_local_storage_moves_when_allowed() -> None:
    p = pod(volumes=[{"name": "h", "hostPath": {"path": "/data"}}, empty_dir("scratch")])
    assert movability(p, config(allow_local_storage=True)) == MOVE


def test_opt_out_key_is_configurable() -> None:
    cfg = config(opt_out_key="example.com/stay")
    assert movability(pod(annotations={"example.com/stay": "true"}), cfg) == block(BLOCK_OPTED_OUT)
    assert movability(pod(annotations={"spotshift.io/exclude": "true"}), cfg) == MOVE


# --- safe-to-evict --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "want"),
    [
        pytest.param(pod(namespace="ns"), MOVE, id="regular pod"),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "true"}),
            Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT),
            id="safe to evict pod",
        ),
        pytest.param(
            pod(owners=[], annotations={SAFE_TO_EVICT_KEY: "true"}),
            Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT),
            id="safe-to-evict-true-overrides-bare-pod",
        ),
        pytest.param(
            pod("dns", "kube-system", annotations={SAFE_TO_EVICT_KEY: "true"}),
            Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT),
            id="safe-to-evict-true-overrides-kube-system-without-pdb",
        ),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "true"}, volumes=[{"name": "h", "hostPath": {"path": "/x"}}]),
            Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT),
            id="safe-to-evict-true-overrides-local-storage",
        ),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "true", "spotshift.io/exclude": "true"}),
            block(BLOCK_OPTED_OUT),
            id="opt-out-beats-safe-to-evict-true",
        ),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "true"}, node_selector={"cloud.google.com/gke-spot": "false"}),
            block(BLOCK_PINNED_ON_DEMAND),
            id="safe-to-evict-true-does-not-unpin-an-on-demand-pod",
        ),
        pytest.param(
            pod(annotations={SAFE_TO_EVICT_KEY: "true"}, deleting=True),
            block(BLOCK_TERMINATING),
            id="safe-to-evict-true-terminating-pod-still-blocks",
        ),
        pytest.param(pod(annotations={SAFE_TO_EVICT_KEY: "True"}), MOVE, id="safe-to-evict-value-is-case-sensitive"),
    ],
)
def test_safe_to_evict(p: Pod, want: Movability) -> None:
    assert movability(p, DEFAULT) == want


# --- local storage (cluster-autoscaler localstorage/rule_test.go) ---------------------------------

SCRATCH = [empty_dir("scratch")]
SCRATCH_123 = [empty_dir("scratch-1"), empty_dir("scratch-2"), empty_dir("scratch-3")]


def _local(annotation: str | None, volumes: list[dict[str, Any]], **kw: Any) -> Pod:
    ann = {SAFE_TO_EVICT_LOCAL_VOLUMES_KEY: annotation} if annotation is not None else None
    return pod(annotations=ann, volumes=volumes, **kw)


@pytest.mark.parametrize(
    ("p", "want"),
    [
        pytest.param(_local(None, SCRATCH), block(BLOCK_LOCAL_STORAGE), id="pod with EmptyDir"),
        pytest.param(
            _local("scratch", SCRATCH), MOVE, id="pod with EmptyDir and SafeToEvictLocalVolumesKey annotation"
        ),
        pytest.param(
            _local("", SCRATCH),
            block(BLOCK_LOCAL_STORAGE),
            id="pod with EmptyDir and empty value for SafeToEvictLocalVolumesKey annotation",
        ),
        pytest.param(
            _local("scratch-2", [empty_dir("scratch-1")]),
            block(BLOCK_LOCAL_STORAGE),
            id="pod with EmptyDir and non-matching value for SafeToEvictLocalVolumesKey annotation",
        ),
        pytest.param(
            _local("scratch-1,scratch-2,scratch-3", SCRATCH_123),
            MOVE,
            id="pod with EmptyDir and SafeToEvictLocalVolumesKey annotation with matching values",
        ),
        pytest.param(
            _local("scratch-1,scratch-2,scratch-5", SCRATCH_123),
            block(BLOCK_LOCAL_STORAGE),
            id="pod with EmptyDir and SafeToEvictLocalVolumesKey annotation with non-matching values",
        ),
        pytest.param(
            _local("scratch-1,scratch-2", SCRATCH_123),
            block(BLOCK_LOCAL_STORAGE),
            id="pod with EmptyDir and SafeToEvictLocalVolumesKey annotation with some matching values",
        ),
        pytest.param(
            _local(",", SCRATCH_123),
            block(BLOCK_LOCAL_STORAGE),
            id="pod with EmptyDir and SafeToEvictLocalVolumesKey annotation empty values",
        ),
        pytest.param(_local(None, SCRATCH, owners=[], phase="Failed"), skip(SKIP_TERMINAL), id="EmptyDir failed pod"),
        pytest.param(
            _local(None, SCRATCH, owners=[], phase="Succeeded"), skip(SKIP_TERMINAL), id="EmptyDir terminal pod"
        ),
        pytest.param(_local(None, SCRATCH, owners=[], phase="Failed"), skip(SKIP_TERMINAL), id="EmptyDir evicted pod"),
        pytest.param(
            pod(owners=[], annotations={SAFE_TO_EVICT_KEY: "true"}),
            Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT),
            id="EmptyDir pod with PodSafeToEvict annotation",
        ),
        pytest.param(
            _local(None, SCRATCH, deleting=True),
            block(BLOCK_TERMINATING),
            id="EmptyDir long terminating pod with 0 grace period (spotshift blocks)",
        ),
        # Beyond upstream.
        pytest.param(
            _local("scratch-1, scratch-2, scratch-3", SCRATCH_123),
            block(BLOCK_LOCAL_STORAGE),
            id="volume-list-is-split-without-trimming-spaces-like-upstream",
        ),
        pytest.param(
            _local("h", [{"name": "h", "hostPath": {"path": "/x"}}]), MOVE, id="listed-hostpath-volume-does-not-block"
        ),
        pytest.param(
            _local("scratch", [*SCRATCH, empty_dir("shm", "Memory")]),
            MOVE,
            id="memory-emptydir-need-not-be-listed",
        ),
    ],
)
def test_local_storage(p: Pod, want: Movability) -> None:
    assert movability(p, DEFAULT) == want


# --- kube-system without a PDB (cluster-autoscaler system/rule_test.go) ---------------------------

KUBE_SYSTEM_POD = pod("bar", "kube-system", labels={"k8s-app": "bar"})
DEFAULT_NS_POD = pod("bar", "default")


@pytest.mark.parametrize(
    ("p", "pdbs", "want"),
    [
        pytest.param(DEFAULT_NS_POD, [pdb("default", None)], MOVE, id="empty PDB with RC-managed pod"),
        pytest.param(
            KUBE_SYSTEM_POD,
            [pdb("kube-system", {"k8s-app": "bar"})],
            MOVE,
            id="kube-system PDB with matching kube-system pod",
        ),
        pytest.param(
            KUBE_SYSTEM_POD,
            [pdb("kube-system", {"k8s-app": "foo"})],
            block(BLOCK_KUBE_SYSTEM_NO_PDB),
            id="kube-system PDB with non-matching kube-system pod",
        ),
        pytest.param(
            DEFAULT_NS_POD,
            [pdb("kube-system", {"k8s-app": "bar"})],
            MOVE,
            id="kube-system PDB with default namespace pod",
        ),
        pytest.param(
            KUBE_SYSTEM_POD,
            [pdb("default", {"k8s-app": "bar"})],
            block(BLOCK_KUBE_SYSTEM_NO_PDB),
            id="default namespace PDB with matching labels kube-system pod",
        ),
        # Beyond upstream.
        pytest.param(KUBE_SYSTEM_POD, [], block(BLOCK_KUBE_SYSTEM_NO_PDB), id="kube-system-pod-without-any-pdb-blocks"),
        pytest.param(
            pod("kube-proxy", "kube-system", owners=[owner("DaemonSet")]),
            [],
            skip(SKIP_DAEMONSET),
            id="kube-system-daemonset-is-skipped",
        ),
        pytest.param(
            pod("etcd", "kube-system", owners=[], annotations={"kubernetes.io/config.mirror": "x"}),
            [],
            skip(SKIP_MIRROR),
            id="kube-system-mirror-pod-is-skipped",
        ),
    ],
)
def test_kube_system_pods_need_a_pdb(p: Pod, pdbs: list[PDB], want: Movability) -> None:
    assert movability(p, DEFAULT, pdbs) == want


def test_kube_system_rule_can_be_turned_off() -> None:
    assert movability(KUBE_SYSTEM_POD, config(kube_system_without_pdb_blocks=False), []) == MOVE


def test_v1beta1_empty_selector_pdb_selects_nothing() -> None:
    legacy = PDB.from_api(
        {
            "apiVersion": "policy/v1beta1",
            "metadata": {"name": "all", "namespace": "kube-system"},
            "spec": {"selector": {}},
        }
    )
    assert movability(KUBE_SYSTEM_POD, DEFAULT, [legacy]) == block(BLOCK_KUBE_SYSTEM_NO_PDB)
    v1 = PDB.from_api(
        {"apiVersion": "policy/v1", "metadata": {"name": "all", "namespace": "kube-system"}, "spec": {"selector": {}}}
    )
    assert movability(KUBE_SYSTEM_POD, DEFAULT, [v1]) == MOVE


# --- pinned to on-demand --------------------------------------------------------------------------

CT = "karpenter.sh/capacity-type"


@pytest.mark.parametrize(
    ("spec", "pinned"),
    [
        # nodeSelector
        pytest.param({}, False, id="no-constraints"),
        pytest.param({"node_selector": {CT: "on-demand"}}, True, id="node-selector-karpenter-on-demand"),
        pytest.param({"node_selector": {CT: "spot"}}, False, id="node-selector-karpenter-spot"),
        pytest.param(
            {"node_selector": {"eks.amazonaws.com/capacityType": "ON_DEMAND"}}, True, id="node-selector-eks-on-demand"
        ),
        pytest.param(
            {"node_selector": {"cloud.google.com/gke-spot": "false"}}, True, id="node-selector-gke-spot-false"
        ),
        pytest.param(
            {"node_selector": {"kubernetes.azure.com/scalesetpriority": "regular"}},
            True,
            id="node-selector-aks-regular",
        ),
        pytest.param(
            {"node_selector": {"topology.kubernetes.io/zone": "a"}}, False, id="node-selector-unrelated-label"
        ),
        pytest.param(
            {"node_selector": {CT: "on-demand", "topology.kubernetes.io/zone": "a"}},
            True,
            id="node-selector-on-demand-and-zone",
        ),
        # required affinity
        pytest.param({"affinity": required([expr(CT, "NotIn", "spot")])}, True, id="required-affinity-notin-spot"),
        pytest.param({"affinity": required([expr(CT, "In", "on-demand")])}, True, id="required-affinity-in-on-demand"),
        pytest.param(
            {"affinity": required([expr(CT, "In", "spot", "on-demand")])},
            False,
            id="required-affinity-in-spot-or-on-demand",
        ),
        pytest.param({"affinity": required([expr(CT, "Exists")])}, False, id="required-affinity-capacity-type-exists"),
        pytest.param(
            {"affinity": required([expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            True,
            id="required-affinity-gke-spot-does-not-exist",
        ),
        pytest.param(
            {"affinity": required([expr("node-role.kubernetes.io/spot-worker", "DoesNotExist")])},
            True,
            id="required-affinity-spot-worker-does-not-exist",
        ),
        pytest.param(
            {"affinity": required([expr("node-role.kubernetes.io/spot-worker", "In", "false")])},
            False,
            id="spot-worker-any-value-is-spot-so-in-false-is-not-pinned",
        ),
        pytest.param(
            {"affinity": required([expr("kubernetes.azure.com/scalesetpriority", "NotIn", "spot")])},
            True,
            id="required-affinity-aks-notin-spot",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "on-demand")], [expr("topology.kubernetes.io/zone", "In", "a")])},
            False,
            id="one-of-two-terms-reaches-spot",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "on-demand")], [expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            True,
            id="every-term-pinned",
        ),
        pytest.param(
            {
                "node_selector": {CT: "on-demand"},
                "affinity": required([expr("topology.kubernetes.io/zone", "In", "a")]),
            },
            True,
            id="node-selector-pins-whatever-the-affinity-says",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "spot"), expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            False,
            id="term-asking-for-karpenter-spot-without-gke-label-is-not-pinned",
        ),
        pytest.param(
            {"affinity": required([expr("example.com/gen", "Gt", "3")])}, False, id="gt-on-an-unrelated-label"
        ),
        pytest.param(
            {"affinity": required(fields=[{"key": "metadata.name", "operator": "In", "values": ["od-1"]}])},
            False,
            id="match-fields-by-node-name-is-left-to-the-planner",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "Bogus", "x")])}, True, id="only-a-malformed-term-matches-no-node"
        ),
        pytest.param(
            {"affinity": required([expr(CT, "Bogus", "x")], [expr("topology.kubernetes.io/zone", "In", "a")])},
            False,
            id="malformed-term-beside-a-good-one",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 100, "preference": {"matchExpressions": [expr(CT, "In", "on-demand")]}}
                        ]
                    }
                }
            },
            False,
            id="preferred-affinity-does-not-pin",
        ),
    ],
)
def test_pinned_to_on_demand_with_default_presets(spec: dict[str, Any], pinned: bool) -> None:
    p = pod(**spec)
    assert pinned_to_on_demand(p, DEFAULT.node_classes) is pinned
    assert movability(p, DEFAULT).blocks is pinned


@pytest.mark.parametrize(
    ("node_classes", "spec", "pinned"),
    [
        pytest.param(
            {"on_demand_selectors": ["node-role.kubernetes.io/worker"]},
            {"node_selector": {"node-role.kubernetes.io/worker": "true"}},
            True,
            id="requires-a-label-only-on-demand-nodes-have",
        ),
        pytest.param(
            {},
            {"node_selector": {"node-role.kubernetes.io/worker": "true"}},
            False,
            id="same-label-without-on-demand-selectors-is-unknown",
        ),
        pytest.param(
            {"on_demand_selectors": ["pool in (general, system)"]},
            {"affinity": required([expr("pool", "In", "system")])},
            True,
            id="in-subset-of-on-demand-selector-values",
        ),
        pytest.param(
            {"on_demand_selectors": ["pool in (general, system)"]},
            {"affinity": required([expr("pool", "In", "system", "batch")])},
            False,
            id="in-wider-than-on-demand-selector-values",
        ),
        pytest.param(
            {"spot_selectors": ["lifecycle=spot"]},
            {"node_selector": {"lifecycle": "normal"}},
            True,
            id="custom-spot-key-other-value",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["pool=batch,lifecycle=spot"]},
            {"node_selector": {"pool": "web"}},
            False,
            id="keys-of-multi-requirement-spot-selectors-are-not-spot-class",
        ),
        pytest.param(
            {"presets": ["aks"]},
            {"node_selector": {CT: "on-demand"}},
            False,
            id="disabled-preset-key-is-not-spot-class",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["example.com/tier in (1, 2)"]},
            {"affinity": required([expr("example.com/tier", "Gt", "5")])},
            True,
            id="gt-above-every-spot-value",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["example.com/tier in (1, 7)"]},
            {"affinity": required([expr("example.com/tier", "Gt", "5")])},
            False,
            id="gt-below-some-spot-value",
        ),
    ],
)
def test_pinned_to_on_demand_with_custom_classes(
    node_classes: dict[str, Any], spec: dict[str, Any], pinned: bool
) -> None:
    assert pinned_to_on_demand(pod(**spec), classes(**node_classes)) is pinned


# --- structure ------------------------------------------------------------------------------------


def test_every_rule_is_silent_for_a_plain_replicated_pod() -> None:
    p = pod()
    for rule in RULES:
        assert rule(p, DEFAULT, ()) is None, rule.__name__


def test_reason_constants_are_distinct() -> None:
    reasons = [
        SKIP_MIRROR,
        SKIP_DAEMONSET,
        SKIP_TERMINAL,
        SKIP_EXPENDABLE,
        BLOCK_TERMINATING,
        BLOCK_OPTED_OUT,
        BLOCK_NOT_SAFE_TO_EVICT,
        BLOCK_PINNED_ON_DEMAND,
        BLOCK_NOT_REPLICATED,
        BLOCK_KUBE_SYSTEM_NO_PDB,
        BLOCK_LOCAL_STORAGE,
        MOVE_SAFE_TO_EVICT,
    ]
    assert len(set(reasons)) == len(reasons)


def test_first_rule_wins_daemonset_with_local_storage_is_skipped() -> None:
    p = pod(owners=[owner("DaemonSet")], volumes=[{"name": "h", "hostPath": {"path": "/var/log"}}])
    assert movability(p, DEFAULT) == skip(SKIP_DAEMONSET)


def test_movability_result_reads_well() -> None:
    assert MOVE.moves and not MOVE.blocks and str(MOVE) == "move"
    b = block(BLOCK_NOT_REPLICATED)
    assert b.blocks and not b.moves and str(b) == f"block: {BLOCK_NOT_REPLICATED}"


def test_webhook_helpers_agree_with_the_rules() -> None:
    assert is_daemonset_pod(pod(owners=[owner("DaemonSet")]))
    assert not is_daemonset_pod(pod())
    assert is_mirror_pod(pod(annotations={"kubernetes.io/config.mirror": "x"}))
    assert not is_mirror_pod(pod(annotations={"kubernetes.io/config.source": "api"}))


def test_movability_does_not_mutate_its_inputs() -> None:
    raw = pod_json(
        "dns",
        "kube-system",
        labels={"k8s-app": "dns"},
        annotations={SAFE_TO_EVICT_LOCAL_VOLUMES_KEY: "scratch"},
        volumes=[empty_dir("scratch")],
        node_selector={CT: "on-demand"},
        affinity=required([expr(CT, "NotIn", "spot")]),
    )
    before = copy.deepcopy(raw)
    p = Pod.from_api(raw)
    pdbs = [pdb("kube-system", {"k8s-app": "dns"})]
    first = movability(p, DEFAULT, pdbs)
    assert movability(p, DEFAULT, pdbs) == first == block(BLOCK_PINNED_ON_DEMAND)
    assert raw == before
    assert dict(p.node_selector) == {CT: "on-demand"}
    assert len(pdbs) == 1


def test_do_not_disrupt_pod_annotations_are_configurable() -> None:
    config = parse_config({"movability": {"do_not_disrupt_pod_annotations": ["example.com/keep"]}})
    kept = pod(annotations={"example.com/keep": "true"})
    karpenter = pod(annotations={"karpenter.sh/do-not-disrupt": "true"})
    assert movability(kept, config) == block('pod is annotated example.com/keep: "true"')
    assert movability(karpenter, config) == MOVE  # no longer listed


def test_do_not_disrupt_markers_on_nodes_are_found_by_the_configured_list() -> None:
    from shared.model import Node
    from shared.movable import node_do_not_disrupt

    def n(annotations: dict[str, str]) -> Node:
        return Node.from_api({"metadata": {"name": "od-1", "annotations": annotations}})

    default = Config()
    assert node_do_not_disrupt(n({}), default) is None
    ca = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
    assert node_do_not_disrupt(n({ca: "true"}), default) == ca
    assert node_do_not_disrupt(n({"karpenter.sh/do-not-disrupt": "true"}), default) == "karpenter.sh/do-not-disrupt"
    assert node_do_not_disrupt(n({ca: "false"}), default) is None
    only_karpenter = parse_config({"movability": {"do_not_disrupt_node_annotations": ["karpenter.sh/do-not-disrupt"]}})
    assert node_do_not_disrupt(n({ca: "true"}), only_karpenter) is None
