"""Pod requests, against component-helpers' own tables.

Transcribed (ids are the upstream case names): ``staging/src/k8s.io/component-helpers/resource/helpers_test.go``
``TestPodRequestsAndLimits``, ``TestPodResourceRequests`` (the cases that do not read container status),
``TestPodLevelResourceRequests`` and the request side of ``TestAggregateContainerRequestsAndLimits``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from shared.model import Pod, pod_requests
from shared.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    non_zero_requests,
)
from tests.builders import container
from tests.builders.resources import Mi

# --- PodRequests (component-helpers/resource/helpers_test.go) ------------------------------------


def C(
    requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None, sidecar: bool = False
) -> dict:
    """A container named ``c`` with a ``resources`` object (empty when neither is given)."""
    return container("c", requests=requests or {}, limits=limits, restart_policy="Always" if sidecar else None)


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
