"""Resource fit and pod requests, against kube-scheduler's and component-helpers' own tables.

Transcribed (ids are the upstream case names):

* ``pkg/scheduler/framework/plugins/noderesources/fit_test.go``: ``TestEnoughRequests``,
  ``TestNotEnoughRequests``, ``TestStorageRequests`` and the sidecar case of ``TestRestartableInitContainers``;
* ``staging/src/k8s.io/component-helpers/resource/helpers_test.go``: ``TestPodRequestsAndLimits``,
  ``TestPodResourceRequests`` (the cases that do not read container status), ``TestPodLevelResourceRequests``
  and the request side of ``TestAggregateContainerRequestsAndLimits``.

Pods are built as API JSON and parsed with ``Pod.from_api``, so parsing is exercised too.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from shared.model import Node, ParseError, Pod, pod_requests
from shared.reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS, InsufficientResource
from shared.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    check_resources,
    is_extended_resource,
    is_scalar_resource,
    node_free,
    non_zero_requests,
    requests_anything,
)
from shared.snapshot import NodeInfo
from shared.switches import CURRENT, STRICTEST, Switches, for_version

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"
Mi = 2**20

# --- builders ---------------------------------------------------------------------------------------


def res(
    milli_cpu: int = 0, memory: int = 0, storage: int = 0, scalars: Mapping[str, int] | None = None
) -> dict[str, str]:
    """fit_test.go ``newResourcePod``'s per-container ``ResourceList``: cpu, memory, pods and
    ephemeral-storage always present (zeros included), plus the given scalar resources."""
    out = {"cpu": f"{milli_cpu}m", "memory": str(memory), "pods": "0", "ephemeral-storage": str(storage)}
    out.update({k: str(v) for k, v in (scalars or {}).items()})
    return out


_uid = 0


def pod(
    *containers: Mapping[str, str],
    init: Sequence[Mapping[str, str]] = (),
    sidecars: Sequence[int] = (),
    overhead: Mapping[str, str] | None = None,
    limits: Sequence[Mapping[str, str]] = (),
    node_name: str = "",
    phase: str = "Running",
    name: str = "",
) -> Pod:
    """A pod whose i-th container requests ``containers[i]``; ``init`` likewise for init containers,
    of which the indexes in ``sidecars`` are restartable (``restartPolicy: Always``)."""
    global _uid
    _uid += 1
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"requests": dict(r)} if r else {}} for i, r in enumerate(containers)
        ]
    }
    for i, lim in enumerate(limits):
        spec["containers"][i]["resources"]["limits"] = dict(lim)
    if init:
        spec["initContainers"] = [
            {"name": f"i{i}", "resources": {"requests": dict(r)}}
            | ({"restartPolicy": "Always"} if i in sidecars else {})
            for i, r in enumerate(init)
        ]
    if overhead:
        spec["overhead"] = dict(overhead)
    if node_name:
        spec["nodeName"] = node_name
    return Pod.from_api(
        {
            "metadata": {"name": name or f"p{_uid}", "namespace": "default", "uid": f"uid-{_uid}"},
            "spec": spec,
            "status": {"phase": phase},
        }
    )


def node(allocatable: Mapping[str, str], name: str = "n1") -> Node:
    return Node.from_api(
        {
            "metadata": {"name": name},
            "status": {"allocatable": dict(allocatable), "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def allocatable(milli_cpu: int, memory: int, pods: int, ext_a: int, storage: int, huge_a: int) -> dict[str, str]:
    """fit_test.go ``makeAllocatableResources``."""
    return {
        "cpu": f"{milli_cpu}m",
        "memory": str(memory),
        "pods": str(pods),
        EXT_A: str(ext_a),
        "ephemeral-storage": str(storage),
        HUGE_A: str(huge_a),
    }


def node_info(*existing: Pod, alloc: Mapping[str, str] | None = None) -> NodeInfo:
    return NodeInfo(node(alloc or allocatable(10, 20, 32, 5, 20, 5)), existing)


def as_tuples(got: Sequence[InsufficientResource]) -> list[tuple[str, int, int, int]]:
    return [(r.resource, r.requested, r.used, r.capacity) for r in got]


def assert_reasons(got: Sequence[InsufficientResource], want: list[tuple[str, int, int, int]]) -> None:
    assert as_tuples(got) == want
    for r in got:
        if r.resource == "pods":
            assert (r.code, r.message) == (ERR_TOO_MANY_PODS, ERR_TOO_MANY_PODS)
        else:
            assert (r.code, r.message) == (ERR_INSUFFICIENT, ERR_INSUFFICIENT.format(resource=r.resource))
        assert not r.unresolvable  # Unschedulable, not UnschedulableAndUnresolvable: preemption may help


# --- TestEnoughRequests ------------------------------------------------------------------------------

E = res  # short alias inside the table


def P(*containers: Mapping[str, str], init: Sequence[Mapping[str, str]] = (), **kw: Any) -> Pod:
    return pod(*containers, init=init, **kw)


def existing(r: Mapping[str, str]) -> Pod:
    return pod(r, node_name="n1")


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
        [(EXT_A, 10, 0, 5)],
        id="extended resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_A: 10})]),
        existing(E(0, 0, scalars={EXT_A: 0})),
        {},
        [(EXT_A, 10, 0, 5)],
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
        [(EXT_A, 6, 2, 5)],
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
        [(EXT_A, 6, 2, 5)],
        id="extended resource allocatable enforced for multiple init containers",
    ),
    pytest.param(
        P(E(1, 1, scalars={EXT_B: 1})),
        existing(E(0, 0)),
        {},
        [(EXT_B, 1, 0, 0)],
        id="extended resource allocatable enforced for unknown resource",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={EXT_B: 1})]),
        existing(E(0, 0)),
        {},
        [(EXT_B, 1, 0, 0)],
        id="extended resource allocatable enforced for unknown resource for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={K8S_IO_A: 10})),
        existing(E(0, 0)),
        {},
        [(K8S_IO_A, 10, 0, 0)],
        id="kubernetes.io resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={K8S_IO_B: 10})]),
        existing(E(0, 0)),
        {},
        [(K8S_IO_B, 10, 0, 0)],
        id="kubernetes.io resource capacity enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={HUGE_A: 10})),
        existing(E(0, 0, scalars={HUGE_A: 0})),
        {},
        [(HUGE_A, 10, 0, 5)],
        id="hugepages resource capacity enforced",
    ),
    pytest.param(
        P(E(), init=[E(1, 1, scalars={HUGE_A: 10})]),
        existing(E(0, 0, scalars={HUGE_A: 0})),
        {},
        [(HUGE_A, 10, 0, 5)],
        id="hugepages resource capacity enforced for init container",
    ),
    pytest.param(
        P(E(1, 1, scalars={HUGE_A: 3}), E(1, 1, scalars={HUGE_A: 3})),
        existing(E(0, 0, scalars={HUGE_A: 2})),
        {},
        [(HUGE_A, 6, 2, 5)],
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
        [(K8S_IO_A, 1, 0, 0)],
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
            [("ephemeral-storage", 25, 0, 20)],
            id="storage ephemeral local storage request exceeds allocatable",
        ),
        pytest.param(P(E(storage=5)), existing(E(2, 2, 10)), [], id="ephemeral local storage is sufficient"),
        pytest.param(P(E(storage=10)), existing(E(2, 2)), [], id="pod fits"),
    ],
)
def test_storage_requests(incoming: Pod, on_node: Pod, want: list[Any]) -> None:
    """TestStorageRequests."""
    assert_reasons(check_resources(incoming, node_info(on_node)), want)


def test_allow_pod_with_restartable_init_containers_if_sidecar_containers_is_enabled() -> None:
    """TestRestartableInitContainers: a sidecar without requests fits a node with room for one pod."""
    sidecar_pod = Pod.from_api(
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "containers": [{"name": "regular"}],
                "initContainers": [{"name": "restartable-init", "restartPolicy": "Always"}],
            },
        }
    )
    assert check_resources(sidecar_pod, node_info(alloc=allocatable(0, 0, 1, 0, 0, 0))) == ()


# --- PodRequests (component-helpers/resource/helpers_test.go) ------------------------------------


def C(
    requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None, sidecar: bool = False
) -> dict:
    c: dict[str, Any] = {"name": "c", "resources": {}}
    if requests:
        c["resources"]["requests"] = dict(requests)
    if limits:
        c["resources"]["limits"] = dict(limits)
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def spec(
    containers: Sequence[dict] = (),
    init: Sequence[dict] = (),
    overhead: Mapping[str, str] | None = None,
    pod_resources: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": list(containers)}
    if init:
        out["initContainers"] = list(init)
    if overhead:
        out["overhead"] = dict(overhead)
    if pod_resources is not None:
        out["resources"] = {k: dict(v) for k, v in pod_resources.items()}
    return out


def cpu(q: str) -> dict[str, str]:
    return {"cpu": q}


def cm(memory: str, cpu_q: str) -> dict[str, str]:
    return {"memory": memory, "cpu": cpu_q}


def get_pod(req: Mapping[str, str], lim: Mapping[str, str], overhead: Mapping[str, str]) -> dict[str, Any]:
    """helpers_test.go ``getPod``: one container and one init container with the same resources."""
    return spec([C(req, lim)], [C(req, lim)], overhead)


PODS_REQUESTS = [
    # TestPodRequestsAndLimits (default options: overhead included). Upstream reads an un-defaulted pod;
    # the API server would have copied the limit into the request, which is what is stored and read here.
    pytest.param(
        get_pod({}, {"cpu": "9"}, {}), {"cpu": 9000}, id="just-limit-no-overhead (API-defaulted: request = limit)"
    ),
    pytest.param(get_pod({}, {}, {"cpu": "5", "memory": "5"}), {"cpu": 5000, "memory": 5}, id="just-overhead"),
    pytest.param(
        get_pod({"cpu": "1", "memory": "10"}, {}, {"cpu": "5", "memory": "5"}),
        {"cpu": 6000, "memory": 15},
        id="req-and-overhead",
    ),
    pytest.param(
        get_pod({"cpu": "1", "memory": "10"}, {"cpu": "2", "memory": "12"}, {"cpu": "5", "memory": "5"}),
        {"cpu": 6000, "memory": 15},
        id="all-req-lim-and-overhead",
    ),
    pytest.param(
        get_pod({"cpu": "1", "memory": "10"}, {"cpu": "2"}, {"cpu": "5", "memory": "5"}),
        {"cpu": 6000, "memory": 15},
        id="req-some-lim-and-overhead",
    ),
    # TestPodResourceRequests (cases that do not read container status).
    pytest.param(spec([C(cpu("1"))], [C(cpu("4"))]), {"cpu": 4000}, id="nil options, larger init container"),
    pytest.param(spec([C(cpu("2")), C(cpu("3"))], [C(cpu("2"))]), {"cpu": 5000}, id="nil options, larger containers"),
    pytest.param(
        spec([C(cpu("2")), C(cpu("3"))], [C(cpu("2"), cpu("2"))], {"cpu": "1", "memory": "1Gi"}),
        {"cpu": 6000, "memory": 1024 * Mi},
        id="pod overhead included",
    ),
    pytest.param(
        spec([C(cpu("1"))], [C(cpu("1"), sidecar=True)]),
        {"cpu": 2000},
        id="restartable init container",
    ),
    pytest.param(
        spec(
            [C(cpu("1"))],
            [C(cpu("5")), C(cpu("1"), sidecar=True), C(cpu("2"), sidecar=True), C(cpu("3"), sidecar=True)],
        ),
        {"cpu": 7000},
        id="multiple restartable init containers",
    ),
    pytest.param(
        spec(
            [C(cpu("1"))],
            [
                C(cpu("5")),
                C(cpu("1"), sidecar=True),
                C(cpu("2"), sidecar=True),
                C(cpu("5")),
                C(cpu("3"), sidecar=True),
            ],
        ),
        {"cpu": 8000},
        id="multiple restartable and regular init containers",
    ),
    pytest.param(
        spec([C(cpu("100"))], [C(cpu("10"), sidecar=True), C(cpu("200"))]),
        {"cpu": 210000},
        id="restartable-init, init and regular",
    ),
    # TestAggregateContainerRequestsAndLimits (requests side).
    pytest.param(spec([C(cpu("9")), C(cpu("9"))]), {"cpu": 18000}, id="two containers with requests"),
    pytest.param(spec([C(cpu("9"))], [C(cpu("9"))]), {"cpu": 9000}, id="regular and init containers with requests"),
    pytest.param(
        spec([C(cpu("9"))], [C(cpu("8"), sidecar=True), C(cpu("6"))]),
        {"cpu": 17000},
        id="regular, init and sidecar containers with requests",
    ),
    # TestPodLevelResourceRequests (SkipPodLevelResources false: PodLevelResources is on by default).
    pytest.param(spec(), {}, id="nil"),
    pytest.param(
        spec(pod_resources={"requests": {"memory": "2Mi"}}),
        {"memory": 2 * Mi},
        id="pod level memory resource with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cpu("2m"))], pod_resources={"requests": {"memory": "2Mi"}}),
        {"memory": 2 * Mi, "cpu": 2},
        id="pod level memory and container level cpu resources with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C({"storage": "3Mi"})], pod_resources={"requests": {"storage": "2Mi"}}),
        {"storage": 3 * Mi},
        id="pod level unsupported resources set at both pod-level and container-level with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C({"memory": "3Mi"})], pod_resources={"requests": {"storage": "2Mi"}}),
        {"memory": 3 * Mi},
        id="pod level unsupported resources set at pod-level with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cm("3Mi", "2m"))]),
        {"memory": 3 * Mi, "cpu": 2},
        id="only container level resources set with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cm("3Mi", "2m"))], pod_resources={"requests": cm("6Mi", "8m")}),
        {"memory": 6 * Mi, "cpu": 8},
        id="both container-level and pod-level resources set with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cm("3Mi", "2m"))], [C(cm("5Mi", "4m"))]),
        {"memory": 5 * Mi, "cpu": 4},
        id="container-level resources and init container set with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cm("3Mi", "2m"))], [C(cm("5Mi", "4m"), sidecar=True)]),
        {"memory": 8 * Mi, "cpu": 6},
        id="container-level resources and sidecar container set with SkipPodLevelResources false",
    ),
    pytest.param(
        spec([C(cm("3Mi", "2m"))], [C(cm("5Mi", "4m"), sidecar=True), C(cm("6Mi", "8m"))]),
        {"memory": 11 * Mi, "cpu": 12},
        id="container-level resources, init and sidecar container set with SkipPodLevelResources false",
    ),
    pytest.param(
        spec(
            [C(cm("3Mi", "2m"))],
            [C(cm("5Mi", "4m"), sidecar=True), C(cm("6Mi", "8m"))],
            pod_resources={"requests": cm("15Mi", "18m")},
        ),
        {"memory": 15 * Mi, "cpu": 18},
        id="pod-level resources, container-level resources, init and sidecar container set"
        " with SkipPodLevelResources false",
    ),
    # Beyond upstream's tables.
    pytest.param(
        spec([C(cpu("0.5m")), C(cpu("0.5m"))]),
        {"cpu": 1},
        id="quantities are summed exactly before rounding (0.5m + 0.5m is 1m, not 2m)",
    ),
    pytest.param(
        spec([C({"memory": "0.5"}), C({"memory": "0.5"})], overhead={"memory": "0.5"}),
        {"memory": 2},
        id="fractional bytes round up once, after overhead",
    ),
    pytest.param(
        spec([C(cm("1Gi", "1"))], pod_resources={"limits": cm("4Gi", "2")}),
        {"memory": 1024 * Mi, "cpu": 1000},
        id="pod-level limits default pod requests to the containers' sum when they request",
    ),
    pytest.param(
        spec([C()], pod_resources={"limits": cm("4Gi", "2")}),
        {"memory": 4096 * Mi, "cpu": 2000},
        id="pod-level limits default pod requests to the limits when containers do not request",
    ),
    pytest.param(
        spec([C(cpu("1"), sidecar=False)], [C({"cpu": "2", "nvidia.com/gpu": "1"})]),
        {"cpu": 2000, "nvidia.com/gpu": 1},
        id="init-only extended resource is the pod's request",
    ),
    pytest.param(
        spec([C(cpu("0"))], [C(cpu("0"))]),
        {"cpu": 0},
        id="explicit zero stays present",
    ),
]


@pytest.mark.parametrize(("pod_spec", "want"), PODS_REQUESTS)
def test_pod_requests(pod_spec: dict[str, Any], want: dict[str, int]) -> None:
    before = copy.deepcopy(pod_spec)
    assert pod_requests(pod_spec) == want
    assert pod_spec == before
    # The same through Pod.from_api.
    parsed = Pod.from_api({"metadata": {"name": "p"}, "spec": pod_spec})
    assert dict(parsed.requests) == want


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [
        pytest.param(spec([C()]), (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST), id="no requests get defaults"),
        pytest.param(spec([C(cpu("0"))]), (0, DEFAULT_MEMORY_REQUEST), id="explicit zero cpu stays zero"),
        pytest.param(spec([C(cpu("250m")), C()]), (350, 2 * DEFAULT_MEMORY_REQUEST), id="defaults per container"),
        pytest.param(
            spec([C(cm("100Mi", "50m"))], [C()]),
            (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST),
            id="init container without requests counts its defaults in the max",
        ),
        pytest.param(
            spec([C(cm("1Gi", "1"))], overhead=cm("10Mi", "10m")),
            (1010, 1034 * Mi),
            id="overhead added",
        ),
        pytest.param(
            spec([C({"memory": "1Gi"})], [C(cpu("100m"), sidecar=True)]),
            (200, 1024 * Mi + DEFAULT_MEMORY_REQUEST),
            id="sidecar without memory adds the default to the running sum",
        ),
        pytest.param(
            spec([C(), C()], pod_resources={"requests": {"cpu": "1"}}),
            (1000, 2 * DEFAULT_MEMORY_REQUEST),
            id="pod-level cpu request taken as is, memory defaults per container",
        ),
    ],
)
def test_non_zero_requests(pod_spec: dict[str, Any], want: tuple[int, int]) -> None:
    """framework/types.go calculateResource: 100m / 200Mi for a container that requests nothing."""
    parsed = Pod.from_api({"metadata": {"name": "p"}, "spec": pod_spec})
    assert non_zero_requests(parsed) == want


def test_non_zero_requests_of_a_hand_built_pod() -> None:
    assert non_zero_requests(Pod("default", "p", requests={"cpu": 300})) == (300, DEFAULT_MEMORY_REQUEST)


# --- beyond upstream ---------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_on_a_node_do_not_consume(phase: str) -> None:
    done = pod(E(10, 20), node_name="n1", phase=phase)
    info = node_info(done, alloc=allocatable(10, 20, 1, 0, 0, 0))
    assert info.pods == []
    assert check_resources(pod(E(10, 20)), info) == ()
    assert node_free(info)["pods"] == 1


def test_running_pods_do_consume() -> None:
    info = node_info(pod(E(10, 20), node_name="n1", phase="Running"))
    assert_reasons(check_resources(pod(E(1, 1)), info), [("cpu", 1, 10, 10), ("memory", 1, 20, 20)])


def test_limit_without_request_counts_as_request() -> None:
    incoming = pod({}, limits=[{"cpu": "11m"}])
    assert incoming.requests["cpu"] == 11
    assert_reasons(check_resources(incoming, node_info()), [("cpu", 11, 0, 10)])


def test_request_wins_over_limit() -> None:
    incoming = pod({"cpu": "1m"}, limits=[{"cpu": "11m"}])
    assert check_resources(incoming, node_info()) == ()


def test_overcommitted_node_fails_any_positive_request_but_not_a_zero_one() -> None:
    info = node_info(existing(E(15, 25)))
    assert check_resources(pod(E(0, 0)), info) == ()
    assert_reasons(check_resources(pod(E(1, 0)), info), [("cpu", 1, 15, 10)])


# --- rules that changed between releases (shared/switches.py) -------------------------------------------
#
# kubernetes#116408 (v1.27) added the "skip checking resource request with quantity zero" case to
# TestEnoughRequests; kubernetes#111544 (taken as v1.26) the "... quantity zero via resource groups" one.
# Before each change the same inputs gave the reasons below (v1.20 fit.go fitsRequest compares
# ``allocatable < request + requested`` for cpu, memory and ephemeral-storage, and for every scalar the pod
# names, once the pod requests anything).

V1_20, V1_25, V1_26, V1_27 = (for_version(v) for v in ("v1.20.2", "v1.25.16", "1.26.15-eks-1", "v1.27.0+k3s1"))


@pytest.mark.parametrize(
    ("incoming", "on_node", "switches", "want"),
    [
        pytest.param(
            P(E(scalars={EXT_A: 1})),
            existing(E(20, 30, scalars={EXT_A: 1})),
            switches,
            want,
            id=f"skip checking resource request with quantity zero [{name}]",
        )
        for name, switches, want in (
            ("current", CURRENT, []),
            ("v1.27", V1_27, []),
            ("v1.26: cpu and memory checked at 0", V1_26, [("cpu", 0, 20, 10), ("memory", 0, 30, 20)]),
            ("v1.20", V1_20, [("cpu", 0, 20, 10), ("memory", 0, 30, 20)]),
            ("unknown version", STRICTEST, [("cpu", 0, 20, 10), ("memory", 0, 30, 20)]),
        )
    ]
    + [
        pytest.param(
            P(E(1, 1, scalars={EXT_A: 0})),
            existing(E(0, 0, scalars={EXT_A: 6})),
            switches,
            want,
            id=f"skip checking extended resource request with quantity zero via resource groups [{name}]",
        )
        for name, switches, want in (
            ("current", CURRENT, []),
            ("v1.26", V1_26, []),
            ("v1.25: zero scalar checked", V1_25, [(EXT_A, 0, 6, 5)]),
            ("v1.20", V1_20, [(EXT_A, 0, 6, 5)]),
            ("unknown version", STRICTEST, [(EXT_A, 0, 6, 5)]),
        )
    ],
)
def test_upstream_cases_on_each_side_of_the_change(
    incoming: Pod, on_node: Pod, switches: Switches, want: list[Any]
) -> None:
    assert_reasons(check_resources(incoming, node_info(on_node), switches=switches), want)


@pytest.mark.parametrize(
    ("switches", "want"),
    [
        pytest.param(CURRENT, [], id="v1.27+-fits"),
        pytest.param(V1_26, [("cpu", 0, 2000, 1000)], id="v1.26-insufficient-cpu"),
        pytest.param(V1_20, [("cpu", 0, 2000, 1000)], id="v1.20-insufficient-cpu"),
        pytest.param(STRICTEST, [("cpu", 0, 2000, 1000)], id="unknown-version-insufficient-cpu"),
    ],
)
def test_a_memory_only_pod_on_a_node_over_committed_on_cpu(switches: Switches, want: list[Any]) -> None:
    # A node with cpu: 1 holding a pod bound (by nodeName, past the scheduler) with cpu: 2.
    alloc = {"cpu": "1", "memory": "4Gi", "pods": "110"}
    info = NodeInfo(node(alloc), [pod({"cpu": "2"}, node_name="n1")])
    assert_reasons(check_resources(pod({"memory": "100Mi"}), info, switches=switches), want)


@pytest.mark.parametrize("switches", [CURRENT, V1_20, STRICTEST], ids=["current", "v1.20", "unknown-version"])
def test_a_pod_requesting_nothing_is_not_checked_on_any_release(switches: Switches) -> None:
    # fitsRequest's early return: no cpu, memory, ephemeral-storage and no scalar named.
    info = node_info(existing(E(15, 25, 30)))
    assert check_resources(pod(), info, switches=switches) == ()
    assert check_resources(pod(E(0, 0)), info, switches=switches) == ()
    assert not requests_anything(pod(E(0, 0)))


def test_a_zero_scalar_alone_gets_past_the_early_return_before_v1_27() -> None:
    info = node_info(existing(E(15, 25)))
    zero_gpu = pod(E(scalars={EXT_A: 0}))
    assert requests_anything(zero_gpu)
    assert check_resources(zero_gpu, info) == ()
    assert_reasons(check_resources(zero_gpu, info, switches=V1_26), [("cpu", 0, 15, 10), ("memory", 0, 25, 20)])


def test_older_rules_still_fail_what_current_rules_fail() -> None:
    info = node_info(existing(E(5, 19)))
    for switches in (CURRENT, V1_26, V1_20, STRICTEST):
        assert_reasons(
            check_resources(pod(E(6, 2)), info, switches=switches), [("cpu", 6, 5, 10), ("memory", 2, 19, 20)]
        )


def test_node_without_pods_allocatable_has_no_room() -> None:
    assert_reasons(check_resources(pod(E(1, 1)), node_info(alloc={"cpu": "1", "memory": "1Gi"})), [("pods", 1, 0, 0)])


def test_names_neither_native_nor_scalar_are_ignored() -> None:
    incoming = pod({"storage": "10Gi", "foo": "5", "pods": "3", "Example.com/x": "1"})
    assert check_resources(incoming, node_info()) == ()


def test_ignored_resources_apply_to_extended_resources_only() -> None:
    incoming = pod(E(1, 1, scalars={K8S_IO_A: 1}))
    got = check_resources(
        incoming, node_info(), ignored=frozenset({K8S_IO_A}), ignored_groups=frozenset({"kubernetes.io"})
    )
    assert_reasons(got, [(K8S_IO_A, 1, 0, 0)])


def test_all_failures_in_upstream_order() -> None:
    incoming = pod(E(11, 21, 21, scalars={EXT_B: 1, EXT_A: 6, HUGE_A: 6}))
    info = node_info(existing(E()), alloc=allocatable(10, 20, 1, 5, 20, 5))
    assert as_tuples(check_resources(incoming, info)) == [
        ("pods", 1, 1, 1),
        ("cpu", 11, 0, 10),
        ("memory", 21, 0, 20),
        ("ephemeral-storage", 21, 0, 20),
        (EXT_A, 6, 0, 5),
        (EXT_B, 1, 0, 0),
        (HUGE_A, 6, 0, 5),
    ]


def test_result_is_immutable() -> None:
    got = check_resources(pod(E(11, 1)), node_info())
    assert isinstance(got, tuple)
    assert isinstance(check_resources(pod(E(1, 1)), node_info()), tuple)


def test_check_resources_does_not_mutate_its_inputs() -> None:
    incoming = pod(E(11, 21, 25, scalars={EXT_A: 9}), init=[E(1, 1)], overhead={"cpu": "1m"})
    info = node_info(existing(E(3, 4, scalars={EXT_A: 1})), existing(E(1, 1)))
    pod_before = (copy.deepcopy(dict(incoming.requests)), incoming)
    info_before = (info.node, list(info.pods), dict(info.requested), list(info.host_ports), dict(info.node.allocatable))
    for _ in range(2):
        check_resources(incoming, info)
        check_resources(incoming, info, ignored=frozenset({EXT_A}), ignored_groups=frozenset({"example.com"}))
        node_free(info)
        non_zero_requests(incoming)
    assert (dict(incoming.requests), incoming) == pod_before
    assert (
        info.node,
        list(info.pods),
        dict(info.requested),
        list(info.host_ports),
        dict(info.node.allocatable),
    ) == info_before


def test_node_free() -> None:
    info = node_info(existing(E(3, 4, scalars={EXT_B: 2})), existing(E(1, 1)))
    assert node_free(info) == {
        "cpu": 6,
        "memory": 15,
        "pods": 30,
        EXT_A: 5,
        "ephemeral-storage": 20,
        HUGE_A: 5,
        EXT_B: -2,  # requested but not offered: the node is over-committed on it
    }


def test_bad_quantity_raises_parse_error_naming_pod_and_field() -> None:
    raw = {
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"cpu": "1.1.M"}}}]},
    }
    with pytest.raises(ParseError) as err:
        Pod.from_api(raw)
    msg = str(err.value)
    assert msg.startswith("pod shop/web-1: spec.containers[1].resources.requests.cpu: quantity '1.1.M'")


@pytest.mark.parametrize(
    ("where", "raw"),
    [
        pytest.param(
            "spec.initContainers[0].resources.limits.memory",
            {"initContainers": [{"name": "i", "resources": {"limits": {"memory": "1 Gi"}}}]},
            id="init-limit",
        ),
        pytest.param("spec.overhead.cpu", {"overhead": {"cpu": "x"}}, id="overhead"),
        pytest.param("spec.resources.requests.memory", {"resources": {"requests": {"memory": "1Q"}}}, id="pod-level"),
    ],
)
def test_bad_quantity_elsewhere_names_the_field(where: str, raw: dict[str, Any]) -> None:
    with pytest.raises(ParseError, match=re.escape(f"pod default/p: {where}: quantity")):
        Pod.from_api({"metadata": {"name": "p"}, "spec": {"containers": [], **raw}})


@pytest.mark.parametrize(
    ("name", "scalar", "extended"),
    [
        pytest.param(EXT_A, True, True, id="extended"),
        pytest.param("nvidia.com/gpu", True, True, id="gpu"),
        pytest.param(K8S_IO_A, True, False, id="kubernetes.io-prefixed-native"),
        pytest.param(K8S_IO_B, True, False, id="subdomain-kubernetes.io-prefixed-native"),
        pytest.param(HUGE_A, True, False, id="hugepages"),
        pytest.param("attachable-volumes-aws-ebs", True, False, id="attachable-volumes"),
        pytest.param("cpu", False, False, id="cpu"),
        pytest.param("memory", False, False, id="memory"),
        pytest.param("ephemeral-storage", False, False, id="ephemeral-storage"),
        pytest.param("pods", False, False, id="pods"),
        pytest.param("storage", False, False, id="storage"),
        pytest.param("foo", False, False, id="unprefixed"),
        pytest.param("requests.example.com/x", False, False, id="quota-prefixed"),
        pytest.param("Example.com/x", False, False, id="upper-case-domain"),
        pytest.param("example.com/", False, False, id="empty-name"),
        pytest.param("/x", False, False, id="empty-prefix"),
        pytest.param("a/b/c", False, False, id="two-slashes"),
        pytest.param("example.com/" + "x" * 64, False, False, id="name-too-long"),
        pytest.param("example.com/" + "x" * 63, True, True, id="name-63"),
    ],
)
def test_is_scalar_resource(name: str, scalar: bool, extended: bool) -> None:
    assert is_scalar_resource(name) is scalar
    assert is_extended_resource(name) is extended
