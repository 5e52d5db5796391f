"""shared.movable, the rules transcribed from cluster-autoscaler (ids are the upstream case names):
* ``simulator/drainability/rules/localstorage/rule_test.go`` TestDrain;
* ``simulator/drainability/rules/system/rule_test.go`` TestDrainable.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.model import PDB, Pod
from shared.movable import (
    BLOCK_KUBE_SYSTEM_NO_PDB,
    BLOCK_LOCAL_STORAGE,
    BLOCK_TERMINATING,
    MOVE,
    MOVE_SAFE_TO_EVICT,
    SAFE_TO_EVICT_KEY,
    SAFE_TO_EVICT_LOCAL_VOLUMES_KEY,
    SKIP_DAEMONSET,
    SKIP_MIRROR,
    SKIP_TERMINAL,
    Movability,
    Outcome,
    movability,
)
from tests.builders.movable import (
    DEFAULT,
    block,
    config,
    empty_dir,
    owner,
    pdb,
    pod,
    skip,
)

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
