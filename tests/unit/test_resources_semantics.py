"""Resource fit beyond upstream's tables: terminal pods, limits as requests, the rules that changed between
releases (``shared/switches.py``), failure order, purity, parse errors and resource-name classes.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from shared.model import ParseError, Pod
from shared.resources import (
    check_resources,
    is_extended_resource,
    is_scalar_resource,
    node_free,
    non_zero_requests,
    requests_anything,
)
from shared.snapshot import NodeInfo
from shared.switches import CURRENT, STRICTEST, Switches, for_version
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
    as_tuples,
    assert_reasons,
    existing,
    node,
    node_info,
    pod,
)

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
    assert_reasons(check_resources(incoming, node_info()), [("cpu", 11, 0, 10, U)])


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
    assert_reasons(got, [(K8S_IO_A, 1, 0, 0, U)])


def test_all_failures_in_upstream_order() -> None:
    incoming = pod(E(11, 21, 21, scalars={EXT_B: 1, EXT_A: 6, HUGE_A: 6}))
    info = node_info(existing(E()), alloc=allocatable(10, 20, 1, 5, 20, 5))
    assert as_tuples(check_resources(incoming, info)) == [
        ("pods", 1, 1, 1),
        ("cpu", 11, 0, 10, U),
        ("memory", 21, 0, 20, U),
        ("ephemeral-storage", 21, 0, 20, U),
        (EXT_A, 6, 0, 5, U),
        (EXT_B, 1, 0, 0, U),
        (HUGE_A, 6, 0, 5, U),
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
