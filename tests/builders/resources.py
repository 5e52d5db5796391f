"""Builders for the resource-fit tests, shaped like upstream ``fit_test.go``'s ``newResourcePod`` and
``makeAllocatableResources``: pods and nodes as API JSON parsed with ``from_api`` (so parsing is exercised).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from shared.fit_reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS, InsufficientResource
from shared.model import Node, Pod
from shared.snapshot import NodeInfo
from tests import builders
from tests.builders import container

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"
Mi = 2**20


def res(
    milli_cpu: int = 0, memory: int = 0, storage: int = 0, scalars: Mapping[str, int] | None = None
) -> dict[str, str]:
    """fit_test.go ``newResourcePod``'s per-container ``ResourceList``: cpu, memory, pods and
    ephemeral-storage always present (zeros included), plus the given scalar resources."""
    out = {"cpu": f"{milli_cpu}m", "memory": str(memory), "pods": "0", "ephemeral-storage": str(storage)}
    out.update({k: str(v) for k, v in (scalars or {}).items()})
    return out


_uid = 0


_uids = itertools.count(1)


def pod(
    *containers: Mapping[str, str],
    init: Sequence[Mapping[str, str]] = (),
    sidecars: Sequence[int] = (),
    overhead: Mapping[str, str] | None = None,
    limits: Sequence[Mapping[str, str]] = (),
    node_name: str = "",
    phase: str = "Running",
    name: str = "",
    pod_level: Mapping[str, str] | None = None,
) -> Pod:
    """A pod whose i-th container requests ``containers[i]`` (and limits ``limits[i]``); ``init`` likewise for
    init containers, of which the indexes in ``sidecars`` are restartable (``restartPolicy: Always``).
    ``pod_level`` is the pod-level request (``spec.resources.requests``, fit_test.go ``newPodLevelResourcesPod``)."""
    uid = next(_uids)
    spec: dict[str, Any] = {}
    if overhead:
        spec["overhead"] = dict(overhead)
    if pod_level:
        spec["resources"] = {"requests": dict(pod_level)}
    return builders.pod(
        name or f"p{uid}",
        uid=f"uid-{uid}",
        node_name=node_name,
        phase=phase,
        containers=[
            container(f"c{i}", requests=r, limits=limits[i] if i < len(limits) else None)
            for i, r in enumerate(containers)
        ],
        init_containers=[
            container(f"i{i}", requests=r, restart_policy="Always" if i in sidecars else None)
            for i, r in enumerate(init)
        ]
        or None,
        spec=spec or None,
    )


def node(allocatable: Mapping[str, str], name: str = "n1") -> Node:
    return builders.node(name, allocatable=allocatable)


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


U = "unresolvable"
"""Ends an expected tuple whose shortage is upstream's ``Unresolvable: true`` (the pod asks more than the node's
whole allocatable, so no preemption helps); a tuple without it is a plain ``Unschedulable`` shortage."""


def as_tuples(got: Sequence[InsufficientResource]) -> list[tuple[Any, ...]]:
    return [(r.resource, r.requested, r.used, r.capacity, *((U,) if r.unresolvable else ())) for r in got]


def assert_reasons(got: Sequence[InsufficientResource], want: list[tuple[Any, ...]]) -> None:
    assert as_tuples(got) == want
    for r in got:
        if r.resource == "pods":
            assert (r.code, r.message) == (ERR_TOO_MANY_PODS, ERR_TOO_MANY_PODS)
        else:
            assert (r.code, r.message) == (ERR_INSUFFICIENT, ERR_INSUFFICIENT.format(resource=r.resource))


E = res  # short alias inside the tables


def P(*containers: Mapping[str, str], init: Sequence[Mapping[str, str]] = (), **kw: Any) -> Pod:
    return pod(*containers, init=init, **kw)


def existing(r: Mapping[str, str]) -> Pod:
    return pod(r, node_name="n1")
