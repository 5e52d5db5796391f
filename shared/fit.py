"""The one entry point: does this pod fit this node, and if not, every reason why.

Runs the filter predicates in kube-scheduler's default Filter order (``pkg/scheduler/apis/config/v1/
default_plugins.go``): NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit,
VolumeBinding/VolumeZone, PodTopologySpread, InterPodAffinity, plus a node-Ready check that kube-scheduler
gets from the ``node.kubernetes.io/not-ready`` taint. The scheduler stops at the first failing plugin;
:func:`fits` collects all of them unless ``first_only`` is set (the planner's hot path), so a person
reading "why can't this node be drained" sees the whole picture.

``switches`` (:mod:`shared.switches`) selects the rules of the cluster's kube-scheduler release where they
changed (NodeResourcesFit, PodTopologySpread) and the texts it reports (TaintToleration, VolumeBinding); the
default is the current scheduler's.

``NodeName`` is deliberately left out: every bound pod has ``spec.nodeName``, and the question asked here
is whether its replacement (which will not have it) would fit elsewhere.
"""

from __future__ import annotations

from shared.fit_reasons import Reason
from shared.interpod import check_inter_pod_affinity
from shared.model import Pod
from shared.nodeaffinity import check_node_affinity
from shared.nodestate import check_ready, check_unschedulable
from shared.ports import check_host_ports
from shared.resources import check_resources
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.spread import check_topology_spread
from shared.switches import CURRENT, Switches
from shared.taints import check_taints
from shared.volumes import check_volumes

__all__ = ["fits"]


def fits(
    pod: Pod,
    node_info: NodeInfo,
    snapshot: ClusterSnapshot,
    *,
    first_only: bool = False,
    check_node_ready: bool = True,
    switches: Switches = CURRENT,
) -> list[Reason]:
    """Every reason ``pod`` cannot run on ``node_info`` given ``snapshot``; an empty list means it fits.

    ``node_info`` must not already hold ``pod`` (remove it first when asking "could it move there").
    """
    node = node_info.node
    # Node-local checks are cheap; evaluating them all keeps the success path branch-free.
    reasons = [
        r
        for r in (
            check_ready(node) if check_node_ready else None,
            check_unschedulable(pod, node),
            check_taints(pod, node, switches=switches),
            check_node_affinity(pod, node),
            check_host_ports(pod, node_info) if pod.host_ports else None,
        )
        if r is not None
    ]
    if reasons and first_only:
        return reasons[:1]
    insufficient = check_resources(pod, node_info, switches=switches)
    if insufficient:
        if first_only:
            return [insufficient[0]]
        reasons.extend(insufficient)
    if pod.volumes:
        r = check_volumes(pod, node, snapshot, switches=switches)
        if r is not None:
            if first_only:
                return [r]
            reasons.append(r)
    if pod.topology_spread:
        r = check_topology_spread(pod, node_info, snapshot, switches=switches)
        if r is not None:
            if first_only:
                return [r]
            reasons.append(r)
    r = check_inter_pod_affinity(pod, node_info, snapshot)
    if r is not None:
        reasons.append(r)
    return reasons
