"""Host ports: can the pod bind its ``hostPort``s on this node?

Upstream: ``pkg/scheduler/framework/plugins/nodeports/node_ports.go`` (``fitsPorts``) over
``pkg/scheduler/framework/types.go`` ``HostPortInfo.CheckConflict``:

* an empty protocol is ``TCP`` and an empty host IP is ``0.0.0.0`` (``sanitize``);
* a wanted ``0.0.0.0`` port conflicts with that protocol/port in use on *any* IP;
* a wanted specific IP conflicts with the same protocol/port in use on that IP or on ``0.0.0.0``;
* ports ``<= 0`` never conflict (they are not host ports).

Only the incoming pod's ports are checked against the node's; duplicates inside one pod are the API server's
business. The reason is plain ``Unschedulable`` (not unresolvable): evicting the pod that holds the port frees it.

The ports in use are every port of every pod still on the node (``NodeInfo.host_ports``, a list: two pods may
hold the same one), which is stricter than kube-scheduler on purpose. Its ``HostPortInfo``
(``k8s.io/kube-scheduler/framework/types.go`` at v0.34.4 to v0.37.2, the scheduler's v1.34.4 to v1.37.2) is a
set per IP, and ``NodeInfo.RemovePod`` (``pkg/scheduler/framework/types.go``, ``updateUsedPorts``) deletes a
leaving pod's entries even when another pod on the node holds the same port, which the scheduler then sees as
free. The kubelet does not: its admission (``pkg/kubelet/lifecycle/predicate.go``, line 159 at v1.37.2, 160 at
v1.34.4) rebuilds a ``NodeInfo`` from the pods on the node and runs ``nodeports.Fits``
(``pkg/scheduler/eventhandlers.go`` ``AdmissionCheck``), so a pod the scheduler sends there fails admission.
Following the scheduler would plan exactly those moves; docs/predicates.md ("Host ports shared by two pods") says
what keeping the stricter rule costs.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.fit_reasons import ERR_NODE_PORTS, Reason
from shared.model import HostPort, Pod
from shared.snapshot import NodeInfo

__all__ = ["DEFAULT_BIND_ALL_HOST_IP", "host_port_conflicts", "check_host_ports"]

DEFAULT_BIND_ALL_HOST_IP = "0.0.0.0"
_TCP = "TCP"
_PORTS_IN_USE = Reason(ERR_NODE_PORTS, ERR_NODE_PORTS, False)


def host_port_conflicts(ip: str, protocol: str, port: int, in_use: Iterable[HostPort]) -> bool:
    """``HostPortInfo.CheckConflict(ip, protocol, port)`` against the ports ``in_use`` on a node."""
    if port <= 0:
        return False
    ip = ip or DEFAULT_BIND_ALL_HOST_IP
    protocol = protocol or _TCP
    bind_all = ip == DEFAULT_BIND_ALL_HOST_IP
    for used in in_use:
        if used.port != port or (used.protocol or _TCP) != protocol:
            continue
        used_ip = used.ip or DEFAULT_BIND_ALL_HOST_IP
        if bind_all or used_ip in (ip, DEFAULT_BIND_ALL_HOST_IP):
            return True
    return False


def check_host_ports(pod: Pod, node_info: NodeInfo) -> Reason | None:
    """NodePorts ``Filter``: ``None`` if none of the pod's host ports is taken on the node."""
    wanted = pod.host_ports
    if not wanted:
        return None
    in_use = node_info.host_ports
    if not in_use:
        return None
    for hp in wanted:
        if host_port_conflicts(hp.ip, hp.protocol, hp.port, in_use):
            return _PORTS_IN_USE
    return None
