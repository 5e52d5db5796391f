"""Resource fit, against kube-scheduler's own tables.

Transcribed (ids are the upstream case names): ``pkg/scheduler/framework/plugins/noderesources/fit_test.go``
``TestEnoughRequests`` (its pod-level resources cases apart, in ``POD_LEVEL``), ``TestNotEnoughRequests``,
``TestStorageRequests`` and ``TestRestartableInitContainers``, with upstream's ``Unresolvable`` flag (``U``).
Pods are built as API JSON and parsed with ``Pod.from_api``, so parsing is exercised too.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.model import Pod
from shared.resources import check_resources, exceeds_allocatable
from tests.builders.resources import (
    EXT_A,
    EXT_B,
    HUGE_A,
    K8S_IO_A,
    K8S_IO_B,
    E,
    P,
    U,
    allocatable,
    assert_reasons,
    existing,
    node_info,
)

# --- TestEnoughRequests ------------------------------------------------------------------------------

ENOUGH_REQUESTS = [
    pytest.param(P(), existing(E(10, 20)), {}, [], id="no resources requested always fits"),
    pytest.param(
        P(E(1, 1)),
        existing(E(10, 20)),
        {},
        [("cpu", 1, 10, 10), ("memory", 1, 20, 20)],
        id="too many resources fails",
    ),
    pytest.param(
        P(E(1, 1), init=[E(3, 1)]),
        existing(E(8, 19)),
        {},
        [("cpu", 3, 8, 10)],
        id="too many resources fails due to init container cpu",
    ),
    pytest.param(
        P(E(1, 1), init=[E(3, 1), E(2, 1)]),
        existing(E(8, 19)),
        {},
        [("cpu", 3, 8, 10)],
        id="too many resources fails due to highest init container cpu",
    ),
    pytest.param(
        P(E(1, 1), init=[E(1, 3)]),
        existing(E(9, 19)),
        {},
        [("memory", 3, 19, 20)],
        id="too many resources fails due to init container memory",
    ),
    pytest.param(
        P(E(1, 1), init=[E(1, 3), E(1, 2)]),
        existing(E(9, 19)),
        {},
        [("memory", 3, 19, 20)],
        id="too many resources fails due to highest init container memory",
    ),
    pytest.param(
        P(E(1, 1), init=[E(1, 1)]),
        existing(E(9, 19)),
        {},
        [],
        id="init container fits because it's the max, not sum, of containers and init containers",
    ),
    pytest.param(
        P(E(1, 1), init=[E(1, 1), E(1, 1)]),
        existing(E(9, 19)),
        {},
        [],
        id="multiple init containers fit because it's the max, not sum, of containers and init containers",
    ),
    pytest.param(P(E(1, 1)), existing(E(5, 5)), {}, [], id="both resources fit"),
    pytest.param(P(E(2, 1)), existing(E(9, 5)), {}, [("cpu", 2, 9, 10)], id="one resource memory fits"),
    pytest.param(P(E(1, 2)), existing(E(5, 19)), {}, [("memory", 2, 19, 20)], id="one resource cpu fits"),
    pytest.param(P(E(5, 1)), existing(E(5, 19)), {}, [], id="equal edge case"),
    pytest.param(P(E(4, 1), init=[E(5, 1)]), existing(E(5, 19)), {}, [], id="equal edge case for init container"),
    pytest.param(P(E(scalars={EXT_A: 1})), existing(E()), {}, [], id="extended resource fits"),
    pytest.param(
        P(E(), init=[E(scalars={EXT_A: 1})]), existing(E()), {}, [], id="extended resource fits for init container"
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_A: 10})),
        existing(E(0, 0, scalars={EXT_A: 0})),
        {},
        [(EXT_A, 10, 0, 5, U)],
        id="extended resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_A: 10})]),
        existing(E(0, 0, scalars={EXT_A: 0})),
        {},
        [(EXT_A, 10, 0, 5, U)],
        id="extended resource capacity enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_A: 1})),
        existing(E(0, 0, scalars={EXT_A: 5})),
        {},
        [(EXT_A, 1, 5, 5)],
        id="extended resource allocatable enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_A: 1})]),
        existing(E(0, 0, scalars={EXT_A: 5})),
        {},
        [(EXT_A, 1, 5, 5)],
        id="extended resource allocatable enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_A: 3}), E(1, 1, scalars={EXT_A: 3})),
        existing(E(0, 0, scalars={EXT_A: 2})),
        {},
        [(EXT_A, 6, 2, 5, U)],
        id="extended resource allocatable enforced for multiple containers",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_A: 3}), E(1, 1, scalars={EXT_A: 3})]),
        existing(E(0, 0, scalars={EXT_A: 2})),
        {},
        [],
        id="extended resource allocatable admits multiple init containers",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_A: 6}), E(1, 1, scalars={EXT_A: 3})]),
        existing(E(0, 0, scalars={EXT_A: 2})),
        {},
        [(EXT_A, 6, 2, 5, U)],
        id="extended resource allocatable enforced for multiple init containers",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_B: 1})),
        existing(E(0, 0)),
        {},
        [(EXT_B, 1, 0, 0, U)],
        id="extended resource allocatable enforced for unknown resource",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_B: 1})]),
        existing(E(0, 0)),
        {},
        [(EXT_B, 1, 0, 0, U)],
        id="extended resource allocatable enforced for unknown resource for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={K8S_IO_A: 10})),
        existing(E(0, 0)),
        {},
        [(K8S_IO_A, 10, 0, 0, U)],
        id="kubernetes.io resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={K8S_IO_B: 10})]),
        existing(E(0, 0)),
        {},
        [(K8S_IO_B, 10, 0, 0, U)],
        id="kubernetes.io resource capacity enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={HUGE_A: 10})),
        existing(E(0, 0, scalars={HUGE_A: 0})),
        {},
        [(HUGE_A, 10, 0, 5, U)],
        id="hugepages resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={HUGE_A: 10})]),
        existing(E(0, 0, scalars={HUGE_A: 0})),
        {},
        [(HUGE_A, 10, 0, 5, U)],
        id="hugepages resource capacity enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={HUGE_A: 3}), E(1, 1, scalars={HUGE_A: 3})),
        existing(E(0, 0, scalars={HUGE_A: 2})),
        {},
        [(HUGE_A, 6, 2, 5, U)],
        id="hugepages resource allocatable enforced for multiple containers",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_B: 1})),
        existing(E(0, 0)),
        {"ignored": frozenset({EXT_B})},
        [],
        id="skip checking ignored extended resource",
    ),
    pytest.param(
        P(E(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        existing(E(5, 5)),
        {},
        [],
        id="resources + pod overhead fits",
    ),
    pytest.param(
        P(E(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        existing(E(5, 5)),
        {},
        [("memory", 16, 5, 20)],
        id="requests + overhead does not fit for memory",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_B: 1, K8S_IO_A: 1})),
        existing(E(0, 0)),
        {"ignored_groups": frozenset({"example.com"})},
        [(K8S_IO_A, 1, 0, 0, U)],
        id="skip checking ignored extended resource via resource groups",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_A: 0})),
        existing(E(0, 0, scalars={EXT_A: 6})),
        {},
        [],
        id="skip checking extended resource request with quantity zero via resource groups",
    ),
    pytest.param(
        P(E(scalars={EXT_A: 1})),
        existing(E(20, 30, scalars={EXT_A: 1})),
        {},
        [],
        id="skip checking resource request with quantity zero",
    ),
]


@pytest.mark.parametrize(("incoming", "on_node", "args", "want"), ENOUGH_REQUESTS)
def test_enough_requests(incoming: Pod, on_node: Pod, args: dict[str, Any], want: list[Any]) -> None:
    """TestEnoughRequests: node allocatable cpu 10m, memory 20, pods 32, example.com/aaa 5, storage 20, hugepages 5."""
    got = check_resources(incoming, node_info(on_node), **args)
    assert_reasons(got, want)


NOT_ENOUGH_PODS = allocatable(10, 20, 1, 0, 0, 0)


@pytest.mark.parametrize(
    ("incoming", "on_node"),
    [
        pytest.param(
            P(),
            existing(E(10, 20)),
            id="even without specified resources, predicate fails when there's no space for additional pod",
        ),
        pytest.param(
            P(E(1, 1)),
            existing(E(5, 5)),
            id="even if both resources fit, predicate fails when there's no space for additional pod",
        ),
        pytest.param(
            P(E(5, 1)),
            existing(E(5, 19)),
            id="even for equal edge case, predicate fails when there's no space for additional pod",
        ),
        pytest.param(
            P(E(5, 1), init=[E(5, 1)]),
            existing(E(5, 19)),
            id="even for equal edge case, predicate fails when there's no space for additional pod"
            " due to init container",
        ),
    ],
)
def test_not_enough_requests(incoming: Pod, on_node: Pod) -> None:
    """TestNotEnoughRequests: allocatable pods 1, one pod already there."""
    got = check_resources(incoming, node_info(on_node, alloc=NOT_ENOUGH_PODS))
    assert_reasons(got, [("pods", 1, 1, 1)])


@pytest.mark.parametrize(
    ("incoming", "on_node", "want"),
    [
        pytest.param(P(E(1, 1)), existing(E(2, 10)), [], id="empty storage requested, and pod fits"),
        pytest.param(
            P(E(storage=25)),
            existing(E(2, 2)),
            [("ephemeral-storage", 25, 0, 20, U)],
            id="storage ephemeral local storage request exceeds allocatable",
        ),
        pytest.param(P(E(storage=5)), existing(E(2, 2, 10)), [], id="ephemeral local storage is sufficient"),
        pytest.param(P(E(storage=10)), existing(E(2, 2)), [], id="pod fits"),
    ],
)
def test_storage_requests(incoming: Pod, on_node: Pod, want: list[Any]) -> None:
    """TestStorageRequests."""
    assert_reasons(check_resources(incoming, node_info(on_node)), want)


# --- TestEnoughRequests, with PodLevelResources ----------------------------------------------------------

POD_LEVEL = [
    pytest.param(
        P(E(1, 1), pod_level={"cpu": "1m", "memory": "2"}),
        existing(E(5, 5)),
        [],
        id="both pod-level and container-level resources fit",
    ),
    pytest.param(
        P(E(1, 1), pod_level={"cpu": "7m", "memory": "2"}),
        existing(E(5, 5)),
        [("cpu", 7, 5, 10)],
        id="pod-level cpu resource not fit",
    ),
    pytest.param(
        P(E(1, 1), pod_level={"cpu": "3m", "memory": "2"}),
        existing(E(5, 19)),
        [("memory", 2, 19, 20)],
        id="pod-level memory resource not fit",
    ),
    pytest.param(
        P(pod_level={"cpu": "3m", "memory": "2", HUGE_A: "5"}), None, [], id="pod-level hugepages resource fit"
    ),
    pytest.param(
        P(E(1, 1, scalars={HUGE_A: 3}), pod_level={"cpu": "3m", "memory": "2", HUGE_A: "5"}),
        None,
        [],
        id="both pod-level and container-level hugepages resource fit",
    ),
    pytest.param(
        P(pod_level={"cpu": "3m", "memory": "2", HUGE_A: "10"}),
        None,
        [(HUGE_A, 10, 0, 5, U)],
        id="pod-level hugepages resource not fit",
    ),
    pytest.param(
        P(E(1, 1), init=[E(1, 1)], pod_level={"cpu": "3m", "memory": "2"}),
        existing(E(5, 19)),
        [("memory", 2, 19, 20)],
        id="one pod-level cpu resource fits and all init and non-init containers resources fit",
    ),
]


@pytest.mark.parametrize(("incoming", "on_node", "want"), POD_LEVEL)
def test_pod_level_requests(incoming: Pod, on_node: Pod | None, want: list[Any]) -> None:
    """TestEnoughRequests' cases with ``podLevelResourcesEnabled`` (on by default since 1.34): the pod-level
    request replaces the containers' for cpu, memory and hugepages. ``None``: an empty node."""
    got = check_resources(incoming, node_info(on_node) if on_node else node_info())
    assert_reasons(got, want)


# --- TestRestartableInitContainers ---------------------------------------------------------------------------


def restartable(request: str | None = None, sidecar_request: str | None = None, *, sidecar: bool = True) -> Pod:
    """``newPodWithRestartableInitContainers(request, sidecarRequest)`` (cpu in millicores), or ``newPod()``."""
    regular: dict[str, Any] = {"name": "regular"}
    if request is not None:
        regular["resources"] = {"requests": {"cpu": request}}
    spec: dict[str, Any] = {"containers": [regular]}
    if sidecar:
        restartable_init: dict[str, Any] = {"name": "restartable-init", "restartPolicy": "Always"}
        if sidecar_request is not None:
            restartable_init["resources"] = {"requests": {"cpu": sidecar_request}}
        spec["initContainers"] = [restartable_init]
    return Pod.from_api({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


@pytest.mark.parametrize(
    ("incoming", "want"),
    [
        pytest.param(restartable(sidecar=False), [], id="allow pod without restartable init containers"),
        pytest.param(restartable(), [], id="allow pod with restartable init containers"),
        pytest.param(
            restartable("1m", "1m"),
            [],
            id="allow pod if the total requested resources do not exceed the node's allocatable resources",
        ),
        pytest.param(
            restartable("1m", "2m"),
            [("cpu", 3, 0, 2, U)],
            id="not allow pod if the total requested resources do exceed the node's allocatable resources",
        ),
    ],
)
def test_restartable_init_containers(incoming: Pod, want: list[Any]) -> None:
    """TestRestartableInitContainers: a sidecar's request adds to the containers'; the node has cpu 2m and room
    for one pod (``makeAllocatableResources(2, 0, 1, 0, 0, 0)``). The last case is UnschedulableAndUnresolvable:
    3m is more than the node's whole allocatable."""
    assert_reasons(check_resources(incoming, node_info(alloc=allocatable(2, 0, 1, 0, 0, 0))), want)


@pytest.mark.parametrize(("incoming", "on_node", "args", "want"), ENOUGH_REQUESTS)
def test_a_request_beyond_allocatable_is_told_by_the_node_alone(
    incoming: Pod, on_node: Pod, args: dict[str, Any], want: list[Any]
) -> None:
    """``exceeds_allocatable`` is true exactly when the fit check, with nothing ignored, finds a resource the node
    cannot offer at all (``unresolvable``): whatever runs there, the pod does not fit."""
    info = node_info(on_node)
    got = check_resources(incoming, info)
    assert exceeds_allocatable(incoming, info.node) == any(r.unresolvable for r in got)
