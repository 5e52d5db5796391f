"""In-place pod resize: what a pod already on a node counts for, from its status (shared.podrequests.status_requests).

Cases transcribed from ``staging/src/k8s.io/component-helpers/resource/helpers_test.go`` (ids are the upstream
case names): the ``UseStatusResources`` cases of ``TestPodResourceRequests`` (1.34: the resize status is read
from the ``PodResizePending`` condition, as ``IsPodResizeInfeasible`` does since 1.33), of
``TestAggregateContainerRequestsAndLimits`` and of ``TestPodRequestsAndLimitsVerticalScalingWrappers`` (1.37).
The scheduler counts a pod on its node with ``UseStatusResources`` (``pkg/scheduler/framework/types.go``
``calculateResource``) and places a pod by its spec (``noderesources.computePodResourceRequest``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import orjson
import pytest

from rescheduler.decode.pods import PodItem, PodReader
from rescheduler.plan.planner import plan
from rescheduler.plan.stay_reasons import Kind
from shared.config import Config
from shared.model import ParseError, Pod, pod_requests, status_requests
from shared.resources import check_resources
from shared.snapshot import ClusterSnapshot, NodeInfo
from tests import builders
from tests.builders import container
from tests.builders.resources import as_tuples

INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
DEFERRED = {"type": "PodResizePending", "status": "True", "reason": "Deferred"}


def cpu(q: str) -> dict[str, str]:
    return {"cpu": q}


def cs(name: str, *, alloc: Mapping[str, str] | None = None, requests: Mapping[str, str] | None = None) -> dict:
    """A container status; ``requests`` becomes ``resources.requests`` (``{}``: a ``resources`` object without
    requests)."""
    out: dict[str, Any] = {"name": name}
    if alloc is not None:
        out["allocatedResources"] = dict(alloc)
    if requests is not None:
        out["resources"] = {"requests": dict(requests)} if requests else {}
    return out


def status(
    containers: Sequence[dict] = (),
    init: Sequence[dict] = (),
    *,
    conditions: Sequence[dict] = (),
    pod_alloc: Mapping[str, str] | None = None,
    pod_requests_: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"phase": "Running"}
    if containers:
        out["containerStatuses"] = list(containers)
    if init:
        out["initContainerStatuses"] = list(init)
    if conditions:
        out["conditions"] = list(conditions)
    if pod_alloc is not None:
        out["allocatedResources"] = dict(pod_alloc)
    if pod_requests_ is not None:
        out["resources"] = {"requests": dict(pod_requests_)}
    return out


def spec(
    containers: Sequence[dict] = (), init: Sequence[dict] = (), pod_level: Mapping[str, str] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": list(containers)}
    if init:
        out["initContainers"] = list(init)
    if pod_level is not None:
        out["resources"] = {"requests": dict(pod_level)}
    return out


def c(name: str, requests: Mapping[str, str] | None = None, *, sidecar: bool = False) -> dict:
    return container(name, requests=requests or {}, restart_policy="Always" if sidecar else None)


CASES = [
    # TestPodResourceRequests (UseStatusResources: true)
    pytest.param(
        spec([c("container-1", cpu("4"))]),
        status([cs("container-1", requests=cpu("2"))], conditions=[INFEASIBLE]),
        {"cpu": 2000},
        id="resized, infeasible",
    ),
    pytest.param(
        spec([c("container-1", cpu("4"))]),
        status([cs("container-1", requests=cpu("2"))], [cs("restartable-init-1", alloc=cpu("2"))]),
        {"cpu": 4000},
        id="resized, no resize status",
    ),
    pytest.param(
        spec([c("container-1", cpu("4"))]),
        status([cs("container-1", requests=cpu("2"))], conditions=[DEFERRED]),
        {"cpu": 4000},
        id="resized, deferred counts the spec too",
    ),
    # TestAggregateContainerRequestsAndLimits (UseStatusResources: true)
    pytest.param(
        spec([c("container-1")]),
        status([cs("container-1", requests=cpu("2"))]),
        {"cpu": 2000},
        id="regularcontainers with empty requests, but status with non-empty requests",
    ),
    pytest.param(
        spec([], [c("container-1", sidecar=True)]),
        status([], [cs("container-1", requests=cpu("2"))]),
        {"cpu": 2000},
        id="always-restart init containers with empty requests, but status with non-empty requests",
    ),
    pytest.param(
        spec([c("c1", cpu("1")), c("c2", cpu("2"))]),
        status([cs("c1", alloc=cpu("2")), cs("c2", alloc=cpu("1"))]),
        {"cpu": 3000},
        id="aggregate container request resolves max of sums instead of sum of maxes",
    ),
    pytest.param(
        spec([c("c1", cpu("1"))]),
        status(pod_alloc=cpu("4"), pod_requests_=cpu("3")),
        {"cpu": 4000},
        id="aggregate container request resolves directly from pod status when PLR vertical scaling enabled",
    ),
    pytest.param(
        spec([c("c1", cpu("1"))]),
        status([cs("c1", alloc=cpu("6"), requests=cpu("5"))], pod_requests_=cpu("3")),
        {"cpu": 6000},
        id="falls back to container status aggregation when PLR vertical scaling enabled but podAllocatedResources "
        "is nil",
    ),
    pytest.param(
        spec([c("c1", cpu("1"))]),
        status([cs("c1", alloc=cpu("6"), requests=cpu("5"))], pod_alloc=cpu("6")),
        {"cpu": 6000},
        id="falls back to container status aggregation when PLR vertical scaling enabled but podResources is nil",
    ),
    # TestPodRequestsAndLimitsVerticalScalingWrappers
    pytest.param(
        spec([c("c1", cpu("1"))], pod_level=cpu("2")),
        status(pod_alloc=cpu("3"), pod_requests_=cpu("3.5")),
        {"cpu": 3500},
        id="pod level requests/limits with PLR vertical scaling enabled and status populated",
    ),
    pytest.param(
        spec([c("c1", cpu("1"))], pod_level=cpu("10")),
        status(pod_alloc=cpu("3"), pod_requests_=cpu("4"), conditions=[INFEASIBLE]),
        {"cpu": 4000},
        id="pod level requests/limits with PLR vertical scaling enabled and infeasible resize",
    ),
]


@pytest.mark.parametrize(("pod_spec", "pod_status", "want"), CASES)
def test_status_requests_follow_component_helpers(
    pod_spec: dict[str, Any], pod_status: dict[str, Any], want: dict[str, int]
) -> None:
    assert status_requests(pod_spec, pod_status) == want


def test_a_pod_being_placed_counts_its_spec() -> None:
    """``resized, infeasible, but don't use status``: the spec's requests are what a pod is placed by."""
    pod_spec = spec([c("container-1", cpu("4"))])
    assert pod_requests(pod_spec) == {"cpu": 4000}


# The rule that changed in 1.37 (kubernetes#140047): per container the largest (1.34-1.36, determineContainerReqs)
# against the largest of the aggregates (1.37). The larger of the two is counted.


def test_containers_resized_in_opposite_directions_count_as_1_34_to_1_36_count_them() -> None:
    # c1: spec 1, actuated 2; c2: spec 2, actuated 1. determineContainerReqs: max(1, 2) + max(2, 1) = 4; 1.37:
    # max(1 + 2, 2 + 1) = 3. The larger, 4, is what a 1.34-1.36 scheduler counts and more than a 1.37 one does.
    pod_spec = spec([c("c1", cpu("1")), c("c2", cpu("2"))])
    pod_status = status([cs("c1", requests=cpu("2")), cs("c2", requests=cpu("1"))])
    assert status_requests(pod_spec, pod_status) == {"cpu": 4000}


def test_an_allocation_without_resources_counts_from_1_37() -> None:
    # determineContainerReqs reads a status only when its resources is set; 1.37 reads allocatedResources alone.
    pod_spec = spec([c("c1", cpu("1"))])
    assert status_requests(pod_spec, status([cs("c1", alloc=cpu("2"))])) == {"cpu": 2000}


def test_an_init_container_that_is_not_a_sidecar_counts_its_status_from_1_37() -> None:
    pod_spec = spec([c("app", cpu("1"))], [c("setup", cpu("1"))])
    assert status_requests(pod_spec, status([], [cs("setup", alloc=cpu("3"))])) == {"cpu": 3000}


def test_a_status_without_resources_leaves_the_spec() -> None:
    plain = {"name": "c1", "ready": True, "restartCount": 0, "state": {"running": {}}}
    assert status_requests(spec([c("c1", cpu("1"))]), status([plain])) is None
    assert status_requests(spec([c("c1", cpu("1"))]), {"phase": "Running"}) is None


@pytest.mark.parametrize("conditions", [pytest.param([], id="no-resize"), pytest.param([INFEASIBLE], id="infeasible")])
def test_a_status_repeating_the_spec_counts_the_spec_however_its_quantities_are_spelled(
    conditions: list[dict[str, str]],
) -> None:
    # The usual case, no resize: the kubelet reports the spec's own requests. Written as the API server writes
    # them the status is recognised at once; spelled otherwise it goes through both rules, which must agree.
    pod_spec = spec([c("app", {"cpu": "1", "memory": "1Gi"}), c("c2")], [c("proxy", cpu("100m"), sidecar=True)])
    canonical = status(
        [cs("app", alloc={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "1", "memory": "1Gi"}), cs("c2", requests={})],
        [cs("proxy", alloc=cpu("100m"), requests=cpu("100m"))],
        conditions=conditions,
    )
    spelled = status(
        [cs("app", alloc={"cpu": "1000m", "memory": "1024Mi"}, requests={"cpu": "1000m", "memory": "1024Mi"})],
        [cs("proxy", alloc=cpu("0.1"), requests=cpu("0.1"))],
        conditions=conditions,
    )
    assert status_requests(pod_spec, canonical) is None
    assert status_requests(pod_spec, spelled) == pod_requests(pod_spec)
    for st in (canonical, spelled):
        raw = {"metadata": {"name": "p"}, "spec": {**pod_spec, "nodeName": "n1"}, "status": st}
        assert Pod.from_api(raw).status_requests is None


def test_overhead_is_added_once() -> None:
    pod_spec = {**spec([c("c1", cpu("1"))]), "overhead": cpu("250m")}
    assert status_requests(pod_spec, status([cs("c1", requests=cpu("2"))])) == {"cpu": 2250}


@pytest.mark.parametrize(
    ("pod_status", "message"),
    [
        pytest.param(
            status([cs("c1", alloc={"cpu": "two"})]),
            r"status\.containerStatuses\[0\]\.allocatedResources\.cpu: quantity 'two'",
            id="bad-allocated-quantity",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "c1", "resources": "big"}]},
            r"status\.containerStatuses\[0\]\.resources: expected an object",
            id="resources-not-an-object",
        ),
        pytest.param(
            {"containerStatuses": {"name": "c1"}}, r"status\.containerStatuses: expected a list", id="not-a-list"
        ),
        pytest.param(
            {"resources": {"requests": {"memory": "lots"}}},
            r"status\.resources\.requests\.memory: quantity 'lots'",
            id="bad-pod-level-quantity",
        ),
    ],
)
def test_bad_status_resources_name_the_field(pod_status: dict[str, Any], message: str) -> None:
    raw = {"metadata": {"name": "p", "namespace": "default"}, "spec": spec([c("c1", cpu("1"))]), "status": pod_status}
    with pytest.raises(ParseError, match=r"pod default/p: " + message):
        Pod.from_api(raw)


# --- the node's accounting -----------------------------------------------------------------------------------


def resized(name: str, node: str, *, spec_cpu: str, allocated: str) -> Pod:
    """A pod on ``node`` asking for ``spec_cpu`` whose kubelet still holds ``allocated`` (a resize down, pending)."""
    raw = builders.pod_json(name, node_name=node, requests=cpu(spec_cpu))
    raw["status"]["containerStatuses"] = [cs("c", alloc=cpu(allocated), requests=cpu(allocated))]
    return Pod.from_api(raw)


def test_the_pod_keeps_its_spec_requests_and_counts_its_allocation_on_its_node() -> None:
    p = resized("web", "n1", spec_cpu="1", allocated="2")
    assert (p.requests, p.status_requests, p.node_requests) == ({"cpu": 1000}, {"cpu": 2000}, {"cpu": 2000})
    same = Pod.from_api(builders.pod_json("web", node_name="n1", requests=cpu("1")))
    assert (same.status_requests, same.node_requests) == (None, {"cpu": 1000})


@pytest.mark.parametrize(("probe", "fits"), [("3", False), ("2", True)])
def test_a_node_whose_pod_holds_2_cpu_of_a_1_cpu_spec_is_full_for_a_3_cpu_pod(probe: str, fits: bool) -> None:
    node = builders.node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    info = NodeInfo(node, [resized("web", "n1", spec_cpu="1", allocated="2")])
    assert info.requested["cpu"] == 2000
    incoming = builders.pod("probe", requests=cpu(probe))
    assert as_tuples(check_resources(incoming, info)) == ([] if fits else [("cpu", 3000, 2000, 4000)])


def test_a_moved_pod_counts_its_spec_on_the_target_and_frees_its_allocation_at_the_source() -> None:
    nodes = [builders.node(n, allocatable={"cpu": "4", "pods": "110"}) for n in ("od-1", "spot-1")]
    snap = ClusterSnapshot(nodes, [resized("web", "od-1", spec_cpu="1", allocated="2")])
    original = snap["od-1"].pods[0]
    moved = snap.move_pod(original, "spot-1")
    assert (snap["od-1"].requested["cpu"], snap["spot-1"].requested["cpu"]) == (0, 1000)
    assert moved.status_requests is None
    snap.remove_pod(moved)
    snap.add_pod(original)
    assert (snap["od-1"].requested["cpu"], snap["spot-1"].requested["cpu"]) == (2000, 0)


@pytest.mark.parametrize(("allocated", "drains"), [("1", True), ("3", False)])
def test_the_planner_sees_a_spot_node_filled_by_a_pending_resize(allocated: str, drains: bool) -> None:
    # spot-1 has 4 CPU; its pod asks 1 but holds `allocated`. od-1's pod asks 2 CPU.
    config = Config()
    spot_labels = {"karpenter.sh/capacity-type": "spot", "kubernetes.io/hostname": "spot-1"}
    od_labels = {"karpenter.sh/capacity-type": "on-demand", "kubernetes.io/hostname": "od-1"}
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    nodes = [builders.node("od-1", labels=od_labels, allocatable=alloc)]
    nodes.append(builders.node("spot-1", labels=spot_labels, allocatable=alloc))
    owners = [builders.owner("ReplicaSet", "rs")]
    mover = Pod.from_api(builders.pod_json("web", node_name="od-1", requests=cpu("2"), owners=owners))
    snap = ClusterSnapshot(nodes, [resized("db", "spot-1", spec_cpu="1", allocated=allocated), mover])
    result = plan(snap, config, verify=True)
    assert result.drained == (("od-1",) if drains else ())
    if not drains:
        assert result.reasons["od-1"].kind in (Kind.NO_FIT, Kind.NO_CAPACITY)


# --- the snapshot fast path reads it alike ---------------------------------------------------------------------


def _decode(reader: PodReader, raw: dict[str, Any]) -> Pod:
    return reader.read(msgspec.json.decode(orjson.dumps(raw), type=PodItem))


def test_the_fast_path_reads_status_requests_as_the_model_does_pod_by_pod() -> None:
    # One template, statuses that differ pod by pod: the cache must not hand one pod's answer to another.
    base = builders.pod_json("web", node_name="n1", requests=cpu("1"), owners=[builders.owner("ReplicaSet", "rs")])
    raws = []
    for i, (st, conditions) in enumerate(
        [
            ([cs("c", alloc=cpu("2"), requests=cpu("2"))], []),
            ([cs("c", alloc=cpu("1"), requests=cpu("1"))], []),
            ([cs("c", alloc=cpu("3"))], []),
            ([cs("c", requests=cpu("500m"))], [INFEASIBLE]),
            ([cs("c", alloc=cpu("2"), requests=cpu("2"))], [INFEASIBLE]),
            ([{"name": "c", "ready": True}], []),
            ([cs("c", alloc=cpu("2"), requests=cpu("2"))], []),
        ]
    ):
        raw = orjson.loads(orjson.dumps(base))
        raw["metadata"]["name"] = f"web-{i}"
        raw["status"]["containerStatuses"] = st
        if conditions:
            raw["status"]["conditions"] = conditions
        raws.append(raw)
    pod_level = orjson.loads(orjson.dumps(base))
    pod_level["spec"]["resources"] = {"requests": cpu("2")}
    pod_level["status"].update(allocatedResources=cpu("3"), resources={"requests": cpu("3")})
    raws.append(pod_level)
    reader = PodReader()
    fast = [_decode(reader, r) for r in raws]
    assert fast == [Pod.from_api(r) for r in raws]
    assert [p.node_requests["cpu"] for p in fast] == [2000, 1000, 3000, 500, 2000, 1000, 2000, 3000]
