"""shared.movable: which pods the rescheduler may move, and which keep their node from being drained: one rule
at a time, safe-to-evict, and how the rules fit together.

Transcribed from cluster-autoscaler (ids are the upstream case names):
``simulator/drainability/rules/safetoevict/rule_test.go`` TestDrainable. The local-storage and kube-system rules
are in ``test_movable_upstream.py``, pinning to on-demand in ``test_movable_pinned.py``.
One deliberate difference: cluster-autoscaler ignores a pod terminating for longer than its grace period;
spotshift blocks on every terminating pod (the node is not empty until the pod is gone, and the next
cycle sees it gone).
"""

from __future__ import annotations

import copy

import pytest

from shared.config import Config, parse_config
from shared.model import Pod
from shared.movable import (
    BLOCK_KUBE_SYSTEM_NO_PDB,
    BLOCK_LOCAL_STORAGE,
    BLOCK_NOT_REPLICATED,
    BLOCK_NOT_SAFE_TO_EVICT,
    BLOCK_OPTED_OUT,
    BLOCK_PINNED_ON_DEMAND,
    BLOCK_RESOURCE_CLAIMS,
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
)
from tests.builders import expr
from tests.builders.movable import (
    CT,
    DEFAULT,
    block,
    config,
    empty_dir,
    owner,
    pdb,
    pod,
    pod_json,
    required,
    skip,
)

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
        BLOCK_RESOURCE_CLAIMS,
        MOVE_SAFE_TO_EVICT,
    ]
    assert len(set(reasons)) == len(reasons)


# --- dynamic resource claims (pkg/scheduler/framework/plugins/dynamicresources) -------------------------------

GPU_TEMPLATE = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
SHARED_CLAIM = {"name": "shared", "resourceClaimName": "team-fpga"}


@pytest.mark.parametrize(
    ("p", "want"),
    [
        pytest.param(pod(resource_claims=[GPU_TEMPLATE]), block(BLOCK_RESOURCE_CLAIMS), id="claim-from-a-template"),
        pytest.param(pod(resource_claims=[SHARED_CLAIM]), block(BLOCK_RESOURCE_CLAIMS), id="claim-by-name"),
        pytest.param(
            pod(resource_claims=[GPU_TEMPLATE, SHARED_CLAIM]), block(BLOCK_RESOURCE_CLAIMS), id="several-claims"
        ),
        pytest.param(pod(resource_claims=[]), MOVE, id="empty-list-moves"),
        pytest.param(
            pod(resource_claims=[GPU_TEMPLATE], annotations={SAFE_TO_EVICT_KEY: "true"}),
            block(BLOCK_RESOURCE_CLAIMS),
            id="safe-to-evict-true-does-not-make-devices-checkable",
        ),
        pytest.param(
            pod(resource_claims=[GPU_TEMPLATE], owners=[owner("DaemonSet")]),
            skip(SKIP_DAEMONSET),
            id="daemonset-pod-with-a-claim-is-skipped",
        ),
        pytest.param(
            pod(resource_claims=[GPU_TEMPLATE], priority=-100),
            skip(SKIP_EXPENDABLE),
            id="expendable-pod-with-a-claim-neither-blocks-nor-moves",
        ),
    ],
)
def test_a_pod_with_dynamic_resource_claims_keeps_its_node(p: Pod, want: Movability) -> None:
    """The planner holds no ResourceSlices or DeviceClasses, so it cannot run the ``DynamicResources`` filter for
    a spot node; any ``spec.resourceClaims`` entry keeps the pod, and so its node, where it is."""
    assert movability(p, DEFAULT) == want


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
