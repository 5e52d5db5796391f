"""Pod topology spread constraints with ``whenUnsatisfiable: DoNotSchedule``, exactly like kube-scheduler.

Upstream: ``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go`` (PreFilter + Filter) and
``common.go``. For each DoNotSchedule constraint, PreFilter counts the pods matching the constraint's
selector per topology domain, over the *eligible* nodes only:

* a node must carry the topology keys of **all** the pod's DoNotSchedule constraints, else it is not
  counted for any of them (``nodeLabelsMatchSpreadConstraints``);
* ``nodeAffinityPolicy: Honor`` (the default) skips nodes failing the pod's nodeSelector / required node
  affinity; ``nodeTaintsPolicy: Honor`` (default ``Ignore``) skips nodes with a NoSchedule/NoExecute taint
  the pod does not tolerate (``matchNodeInclusionPolicies``); both are per constraint;
* counted pods are in the incoming pod's namespace, not terminating (``deletionTimestamp`` set, see
  kubernetes#87621) and match the selector: a missing (nil) selector matches no pod, an *empty* one
  (``labelSelector: {}``) every pod of the namespace. From v1.27 (kubernetes#116607) ``countPodsMatchSelector``
  returned 0 for an empty selector, making such a constraint a no-op, until kubernetes#141340 restored the
  count (issue kubernetes#141339); counting is the stricter reading, so it is used for every version.

Before v1.24 (kubernetes#107009, :attr:`~shared.switches.Switches.spread_counts_only_eligible_nodes`) the
eligible nodes above only chose the domains; pods were then counted on *every* node whose value for the key
is an eligible domain (a node lacking the key reads as ``""``), including nodes the pod's nodeSelector or
affinity excludes and nodes missing another constraint's key. That scheduler had no node inclusion policies
and no ``minDomains``; both are ignored on that side.

Filter, per constraint in order: a candidate node lacking the key fails with
:data:`ERR_SPREAD_MISSING_LABEL` (unresolvable); otherwise
``count(candidate's domain) + selfMatch - globalMin > maxSkew`` fails with :data:`ERR_SPREAD`, where
``globalMin`` is the smallest count over eligible domains, or 0 when there are fewer eligible domains than
``minDomains`` (1 when unset). The candidate node itself need not be eligible: an unknown domain counts 0.

As in :mod:`shared.interpod`, the pod being checked is never counted, and PreFilter's work is memoised per
(snapshot, ``snapshot.version``, pod), one memo per counting rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.memo import SnapshotMemo
from shared.model import NO_EXECUTE, NO_SCHEDULE, Pod, TopologySpreadConstraint
from shared.nodeaffinity import matches_node_selector_and_affinity
from shared.reasons import ERR_SPREAD, ERR_SPREAD_MISSING_LABEL, Reason, reason
from shared.selectors import LabelSelector
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT, Switches
from shared.taints import find_matching_untolerated_taint

__all__ = ["check_topology_spread", "DO_NOT_SCHEDULE", "HONOR", "IGNORE"]

DO_NOT_SCHEDULE = "DoNotSchedule"
HONOR, IGNORE = "Honor", "Ignore"
# plugins/helper DoNotScheduleTaintsFilterFunc: the effects that keep a pod off a node.
_DO_NOT_SCHEDULE_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

_MAX_INT32 = 2**31 - 1
_SPREAD = reason(ERR_SPREAD)
_MISSING_LABEL = reason(ERR_SPREAD_MISSING_LABEL, unresolvable=True)


@dataclass(frozen=True, slots=True)
class _Constraint:
    """One DoNotSchedule constraint after PreFilter.

    A node in domain ``v`` fails when ``counts.get(v, 0) > threshold``, where
    ``threshold = maxSkew + globalMin - selfMatch`` (the upstream inequality, rearranged once).
    """

    topology_key: str
    counts: Mapping[str, int]
    threshold: int


_memo: SnapshotMemo[Pod, tuple[_Constraint, ...]] = SnapshotMemo()
_memo_all_nodes: SnapshotMemo[Pod, tuple[_Constraint, ...]] = SnapshotMemo()


def _count_matching(pods: list[Pod], selector: LabelSelector | None, pod: Pod) -> int:
    """``countPodsMatchSelector`` (minus the pod itself); a nil selector matches no pod, an empty one all."""
    if selector is None:
        return 0
    ns = pod.namespace
    uid = pod.uid
    n = 0
    for p in pods:
        if p.deletion_timestamp is not None or p.namespace != ns:
            continue
        if p is pod or (uid and p.uid == uid):
            continue
        if selector.matches(p.labels):
            n += 1
    return n


def _build(pod: Pod, snapshot: ClusterSnapshot) -> tuple[_Constraint, ...]:
    constraints = tuple(c for c in pod.topology_spread if c.when_unsatisfiable == DO_NOT_SCHEDULE)
    if not constraints:
        return ()
    keys = tuple(c.topology_key for c in constraints)
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for info in snapshot:
        node = info.node
        labels = node.labels
        if not all(k in labels for k in keys):
            continue
        affinity_ok: bool | None = None
        taints_ok: bool | None = None
        for i, c in enumerate(constraints):
            if c.node_affinity_policy == HONOR:
                if affinity_ok is None:
                    affinity_ok = matches_node_selector_and_affinity(pod, node)
                if not affinity_ok:
                    continue
            if c.node_taints_policy == HONOR:
                if taints_ok is None:
                    taints_ok = (
                        find_matching_untolerated_taint(node.taints, pod.tolerations, _DO_NOT_SCHEDULE_EFFECTS) is None
                    )
                if not taints_ok:
                    continue
            value = labels[c.topology_key]
            domain_counts = counts[i]
            domain_counts[value] = domain_counts.get(value, 0) + _count_matching(info.pods, c.selector, pod)

    return _thresholds(pod, constraints, counts, honor_min_domains=True)


def _build_counting_all_nodes(pod: Pod, snapshot: ClusterSnapshot) -> tuple[_Constraint, ...]:
    """PreFilter before v1.24 (kubernetes#107009): ``calPreFilterState`` of v1.20-v1.23.

    Domains come from the nodes that pass the pod's nodeSelector/required affinity and carry every key;
    ``processNode`` then adds each node's matching pods to its domain if that domain is eligible, without
    checking the node itself (``node.Labels[key]`` reads ``""`` for a missing key).
    """
    constraints = tuple(c for c in pod.topology_spread if c.when_unsatisfiable == DO_NOT_SCHEDULE)
    if not constraints:
        return ()
    keys = tuple(c.topology_key for c in constraints)
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for info in snapshot:
        labels = info.node.labels
        if all(k in labels for k in keys) and matches_node_selector_and_affinity(pod, info.node):
            for i, c in enumerate(constraints):
                counts[i].setdefault(labels[c.topology_key], 0)
    for info in snapshot:
        labels = info.node.labels
        for i, c in enumerate(constraints):
            domain_counts = counts[i]
            value = labels.get(c.topology_key, "")
            if value in domain_counts:
                domain_counts[value] += _count_matching(info.pods, c.selector, pod)
    return _thresholds(pod, constraints, counts, honor_min_domains=False)


def _thresholds(
    pod: Pod,
    constraints: tuple[TopologySpreadConstraint, ...],
    counts: list[dict[str, int]],
    *,
    honor_min_domains: bool,
) -> tuple[_Constraint, ...]:
    out = []
    for c, domain_counts in zip(constraints, counts, strict=True):
        min_domains = c.min_domains if c.min_domains is not None and honor_min_domains else 1
        if len(domain_counts) < min_domains:
            global_min = 0  # Fewer eligible domains than minDomains: the global minimum is treated as 0.
        elif domain_counts:
            global_min = min(domain_counts.values())
        else:
            global_min = _MAX_INT32  # upstream's MinMatchNum when no domain is eligible (minDomains <= 0)
        self_match = 1 if c.selector is not None and c.selector.matches(pod.labels) else 0
        out.append(_Constraint(c.topology_key, domain_counts, c.max_skew + global_min - self_match))
    return tuple(out)


def check_topology_spread(
    pod: Pod, node_info: NodeInfo, snapshot: ClusterSnapshot, *, switches: Switches = CURRENT
) -> Reason | None:
    """PodTopologySpread Filter for the pod's DoNotSchedule constraints; ``None`` if ``node_info`` passes.

    Returns :data:`ERR_SPREAD_MISSING_LABEL` (unresolvable) when the node lacks a constraint's topology key,
    :data:`ERR_SPREAD` when placing the pod there would exceed ``maxSkew``; the first failing constraint wins.
    ``switches.spread_counts_only_eligible_nodes`` picks how pods are counted (``None``: both ways must pass).
    """
    if not pod.topology_spread:
        return None
    rule = switches.spread_counts_only_eligible_nodes
    if rule is not False:
        r = _filter(_memo.lookup(snapshot, pod, _build), node_info)
        if r is not None or rule:
            return r
    return _filter(_memo_all_nodes.lookup(snapshot, pod, _build_counting_all_nodes), node_info)


def _filter(constraints: tuple[_Constraint, ...], node_info: NodeInfo) -> Reason | None:
    if not constraints:
        return None
    labels = node_info.node.labels
    for c in constraints:
        value = labels.get(c.topology_key)
        if value is None:
            return _MISSING_LABEL
        if c.counts.get(value, 0) > c.threshold:
            return _SPREAD
    return None
