"""shared.ports against kube-scheduler's tables.

Transcribed (ids are the upstream case names):
* ``pkg/scheduler/framework/plugins/nodeports/node_ports_test.go`` TestNodePorts;
* ``pkg/scheduler/framework/types_test.go`` TestHostPortInfo_Check (and the sanitising cases of
  TestHostPortInfo_AddRemove, as pods with empty protocol / host IP).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit_reasons import ERR_NODE_PORTS, Reason
from shared.model import HostPort, Pod
from shared.ports import check_host_ports, host_port_conflicts
from shared.snapshot import NodeInfo
from tests import builders

CONFLICT = Reason(ERR_NODE_PORTS, ERR_NODE_PORTS, False)

# --- builders: "PROTO/IP/PORT" like upstream's newPod(host, hostPortInfos...) ---------------------------------


def container_ports(*infos: str) -> list[dict[str, Any]]:
    out = []
    for info in infos:
        protocol, ip, port = info.split("/")
        p: dict[str, Any] = {"containerPort": int(port), "hostPort": int(port)}
        if protocol:
            p["protocol"] = protocol
        if ip:
            p["hostIP"] = ip
        out.append(p)
    return out


def pod_json(name: str, *infos: str, node: str = "m1", phase: str = "Running") -> dict[str, Any]:
    return builders.pod_json(name, node_name=node, phase=phase, image="img", ports=container_ports(*infos))


def new_pod(*infos: str, name: str = "incoming", node: str = "") -> Pod:
    return Pod.from_api(pod_json(name, *infos, node=node))


def node_info(*existing: Pod) -> NodeInfo:
    return NodeInfo(builders.node("m1"), existing)


def existing_pod(*infos: str, name: str = "existing") -> Pod:
    return new_pod(*infos, name=name, node="m1")


# --- node_ports_test.go TestNodePorts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wanted", "in_use", "want"),
    [
        pytest.param((), (), None, id="skip filter"),
        pytest.param(("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/9090",), None, id="other port"),
        pytest.param(("UDP/127.0.0.1/8080",), ("UDP/127.0.0.1/8080",), CONFLICT, id="same udp port"),
        pytest.param(("TCP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), CONFLICT, id="same tcp port"),
        pytest.param(("TCP/127.0.0.1/8080",), ("TCP/127.0.0.2/8080",), None, id="different host ip"),
        pytest.param(("UDP/127.0.0.1/8080",), ("TCP/127.0.0.1/8080",), None, id="different protocol"),
        pytest.param(
            ("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
            ("UDP/127.0.0.1/8080",),
            CONFLICT,
            id="second udp port conflict",
        ),
        pytest.param(
            ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
            ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"),
            CONFLICT,
            id="first tcp port conflict",
        ),
        pytest.param(
            ("TCP/0.0.0.0/8001",), ("TCP/127.0.0.1/8001",), CONFLICT, id="first tcp port conflict due to 0.0.0.0 hostIP"
        ),
        pytest.param(
            ("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
            ("TCP/127.0.0.1/8001",),
            CONFLICT,
            id="TCP hostPort conflict due to 0.0.0.0 hostIP",
        ),
        pytest.param(
            ("TCP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), CONFLICT, id="second tcp port conflict to 0.0.0.0 hostIP"
        ),
        pytest.param(("UDP/127.0.0.1/8001",), ("TCP/0.0.0.0/8001",), None, id="second different protocol"),
        pytest.param(
            ("UDP/127.0.0.1/8001",),
            ("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"),
            CONFLICT,
            id="UDP hostPort conflict due to 0.0.0.0 hostIP",
        ),
        # Edge cases beyond upstream: HostPortInfo.sanitize through the API JSON.
        pytest.param(("//8080",), ("TCP/0.0.0.0/8080",), CONFLICT, id="empty protocol and IP mean TCP on 0.0.0.0"),
        pytest.param(("TCP/127.0.0.1/8080",), ("//8080",), CONFLICT, id="existing empty IP binds all addresses"),
        pytest.param(("/127.0.0.1/8080",), ("UDP/127.0.0.1/8080",), None, id="empty protocol is not UDP"),
        pytest.param(("SCTP/0.0.0.0/8080",), ("SCTP/10.0.0.1/8080",), CONFLICT, id="SCTP conflicts like TCP"),
        pytest.param(("TCP/10.0.0.1/8080",), ("TCP/10.0.0.2/8080", "TCP/10.0.0.3/8080"), None, id="two other IPs"),
    ],
)
def test_node_ports(wanted: tuple[str, ...], in_use: tuple[str, ...], want: Reason | None) -> None:
    info = node_info(existing_pod(*in_use)) if in_use else node_info()
    got = check_host_ports(new_pod(*wanted), info)
    assert got == want
    if got is not None:
        assert got.message == "node(s) didn't have free ports for the requested pod ports"
        assert not got.unresolvable  # preempting the holder frees the port


# --- types_test.go TestHostPortInfo_Check ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("added", "check", "expect"),
    [
        pytest.param([("TCP", "127.0.0.1", 80)], ("", "", 81), False, id="empty check should check 0.0.0.0 and TCP"),
        pytest.param(
            [("TCP", "127.0.0.1", 80)], ("", "", 80), True, id="empty check should check 0.0.0.0 and TCP (conflicted)"
        ),
        pytest.param([("TCP", "127.0.0.1", 80)], ("", "", 0), False, id="empty port check should pass"),
        pytest.param(
            [("TCP", "127.0.0.1", 80)], ("TCP", "0.0.0.0", 80), True, id="0.0.0.0 should check all registered IPs"
        ),
        pytest.param(
            [("UDP", "127.0.0.1", 80)],
            ("TCP", "0.0.0.0", 80),
            False,
            id="0.0.0.0 with different protocol should be allowed",
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 79), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)],
            ("TCP", "0.0.0.0", 80),
            False,
            id="0.0.0.0 with different port should be allowed",
        ),
        pytest.param(
            [("TCP", "0.0.0.0", 80)], ("TCP", "127.0.0.1", 80), True, id="normal ip should check all registered 0.0.0.0"
        ),
        pytest.param(
            [("TCP", "0.0.0.0", 79), ("UDP", "0.0.0.0", 80), ("TCP", "0.0.0.0", 81), ("TCP", "0.0.0.0", 82)],
            ("TCP", "127.0.0.1", 80),
            False,
            id="normal ip with different port/protocol should be allowed (0.0.0.0)",
        ),
        pytest.param(
            [("TCP", "127.0.0.1", 79), ("UDP", "127.0.0.1", 80), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)],
            ("TCP", "127.0.0.1", 80),
            False,
            id="normal ip with different port/protocol should be allowed",
        ),
        # Edge cases beyond upstream.
        pytest.param([("", "", 80)], ("TCP", "10.0.0.1", 80), True, id="unsanitised in-use entry binds all"),
        pytest.param([("TCP", "0.0.0.0", 80)], ("TCP", "0.0.0.0", -1), False, id="negative port never conflicts"),
    ],
)
def test_host_port_info_check(added: list[tuple[str, str, int]], check: tuple[str, str, int], expect: bool) -> None:
    in_use = [HostPort(ip, protocol, port) for protocol, ip, port in added]
    protocol, ip, port = check
    assert host_port_conflicts(ip, protocol, port, in_use) is expect


# --- pods on the node: what counts as "in use" ---------------------------------------------------------------


def test_terminal_pods_hold_no_ports() -> None:
    done = Pod.from_api(pod_json("done", "TCP/0.0.0.0/8080", phase="Succeeded"))
    assert check_host_ports(new_pod("TCP/0.0.0.0/8080"), node_info(done)) is None


@pytest.mark.parametrize(
    ("holder", "twin"),
    [
        pytest.param("TCP/0.0.0.0/8080", "TCP/0.0.0.0/8080", id="same protocol, IP and port"),
        pytest.param("//8080", "TCP/0.0.0.0/8080", id="empty protocol and IP are the same entry (sanitize)"),
    ],
)
def test_a_port_two_pods_hold_stays_taken_until_both_leave(holder: str, twin: str) -> None:
    """Stricter than kube-scheduler, on purpose (``shared/ports.py``): its ``HostPortInfo`` is a set, and at
    v1.34.4 to v1.37.2 ``NodeInfo.RemovePod`` frees the port when the first of the two leaves (upstream
    TestHostPortInfo_AddRemove/"normal remove case": one Remove per Add empties it). The kubelet's admission
    rebuilds its NodeInfo from the pods still on the node and would refuse a third pod, so the port stays taken
    here until the second pod leaves too."""
    first = existing_pod(holder)
    info = node_info(first, existing_pod(twin, name="twin"))
    incoming = new_pod("TCP/0.0.0.0/8080")
    assert check_host_ports(incoming, info) == CONFLICT
    info.remove_pod(first)
    assert check_host_ports(incoming, info) == CONFLICT  # the twin still holds it; kube-scheduler says free
    info.remove_pod(info.pods[0])
    assert check_host_ports(incoming, info) is None


def test_sidecar_init_container_ports_count() -> None:
    raw = pod_json("sidecar")
    raw["spec"]["initContainers"] = [
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "ports": container_ports("TCP//15001")},
        {"name": "init", "image": "busybox", "ports": container_ports("TCP//15002")},
    ]
    holder = Pod.from_api(raw)
    assert check_host_ports(new_pod("TCP//15001"), node_info(holder)) == CONFLICT
    assert check_host_ports(new_pod("TCP//15002"), node_info(holder)) is None  # plain init containers are gone


def test_container_port_without_host_port_is_not_a_host_port() -> None:
    raw = pod_json("no-host-port")
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    assert Pod.from_api(raw).host_ports == ()
    assert check_host_ports(Pod.from_api(raw), node_info(existing_pod("TCP/0.0.0.0/8080"))) is None


# --- purity ------------------------------------------------------------------------------------------------


def test_check_host_ports_does_not_mutate_inputs() -> None:
    raw_pod = pod_json("p", "TCP/0.0.0.0/8080", "UDP/10.0.0.1/53", node="")
    raw_holder = pod_json("h", "UDP/0.0.0.0/53")
    before = copy.deepcopy((raw_pod, raw_holder))
    pod = Pod.from_api(raw_pod)
    assert pod == Pod.from_api(raw_pod)
    info = node_info(Pod.from_api(raw_holder))
    ports_before, requested_before = list(info.host_ports), dict(info.requested)

    assert check_host_ports(pod, info) == CONFLICT
    assert check_host_ports(pod, info) == CONFLICT

    assert (raw_pod, raw_holder) == before
    assert info.host_ports == ports_before and info.requested == requested_before
    assert pod == Pod.from_api(before[0])
