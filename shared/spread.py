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
  kubernetes#87621) and match the selector (``common.go`` ``countPodsMatchSelector``): a missing (nil)
  selector matches no pod, and an *empty* one (``labelSelector: {}``, with no ``matchLabelKeys`` value merged
  into it) counts no pod either: ``if selector.Empty() { return 0 }`` (line 152 at v1.29.6, 145 at v1.34.4,
  146 at v1.35.4, v1.36.3 and v1.37.2). Such a constraint still needs the node to carry its key and still
  takes part in which nodes count for the pod's other constraints, but never fails on skew: its counts are 0
  and the pod matches it itself. Outside the releases read, an empty selector counts every pod of the
  namespace, the stricter reading (:attr:`~shared.switches.Switches.spread_empty_selector_counts_no_pods`,
  :func:`counting_selector`).

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

Each rule is one public function: :func:`hard_constraints`, :func:`eligible_domains` (which nodes count, and in
which domain), :func:`counting_selector` and :func:`counts_toward` (which pods count), :func:`skew_threshold`,
:func:`filter_constraints` and :func:`under_rules` (the release's counting rule). :func:`check_topology_spread`
counts with them by scanning the snapshot; the planner's incremental index (``rescheduler/plan/topology.py``)
counts with them from its posting lists, so a change of meaning is made here once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from shared.fit_reasons import ERR_SPREAD, ERR_SPREAD_MISSING_LABEL, Reason, reason
from shared.interpod import is_self
from shared.memo import SnapshotMemo
from shared.model import NO_EXECUTE, NO_SCHEDULE, Pod, TopologySpreadConstraint
from shared.nodeaffinity import matches_node_selector_and_affinity
from shared.selectors import LabelSelector
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT, Switches
from shared.taints import find_matching_untolerated_taint

__all__ = [
    "check_topology_spread",
    "hard_constraints",
    "Domains",
    "eligible_domains",
    "domains_key",
    "counting_selector",
    "counts_toward",
    "skew_threshold",
    "Counted",
    "filter_constraints",
    "under_rules",
    "DO_NOT_SCHEDULE",
    "HONOR",
    "IGNORE",
]

DO_NOT_SCHEDULE = "DoNotSchedule"
HONOR, IGNORE = "Honor", "Ignore"
# plugins/helper DoNotScheduleTaintsFilterFunc: the effects that keep a pod off a node.
_DO_NOT_SCHEDULE_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

_MAX_INT32 = 2**31 - 1
_SPREAD = reason(ERR_SPREAD)
_MISSING_LABEL = reason(ERR_SPREAD_MISSING_LABEL, unresolvable=True)

Constraints = tuple[TopologySpreadConstraint, ...]


def hard_constraints(pod: Pod) -> Constraints:
    """The pod's ``whenUnsatisfiable: DoNotSchedule`` constraints, the only ones Filter checks."""
    return tuple(c for c in pod.topology_spread if c.when_unsatisfiable == DO_NOT_SCHEDULE)


# --- which nodes count ---------------------------------------------------------------------------


class Domains(NamedTuple):
    """Which nodes count for a pod's constraints, under one counting rule."""

    of_node: Mapping[int, tuple[str | None, ...]]
    """``id(NodeInfo)`` of every node that counts → per constraint the domain its pods count in (``None``
    where the node does not count for that constraint)."""
    eligible: tuple[frozenset[str], ...]
    """Per constraint, its eligible domains (those ``globalMin`` and ``minDomains`` look at)."""


def domains_key(pod: Pod, constraints: Constraints, *, all_nodes: bool) -> Hashable:
    """All that :func:`eligible_domains` reads besides the nodes: equal keys, equal domains on the same nodes."""
    if all_nodes:
        return (
            True,
            tuple(c.topology_key for c in constraints),
            tuple(sorted(pod.node_selector.items())),
            pod.required_affinity,
        )
    honor_affinity = any(c.node_affinity_policy == HONOR for c in constraints)
    honor_taints = any(c.node_taints_policy == HONOR for c in constraints)
    return (
        False,
        tuple((c.topology_key, c.node_affinity_policy, c.node_taints_policy) for c in constraints),
        tuple(sorted(pod.node_selector.items())) if honor_affinity else (),
        pod.required_affinity if honor_affinity else None,
        pod.tolerations if honor_taints else (),
    )


def eligible_domains(pod: Pod, constraints: Constraints, nodes: Iterable[NodeInfo], *, all_nodes: bool) -> Domains:
    """The nodes that count for ``constraints`` and the domains each counts in, under today's rule or
    (``all_nodes``) the one before v1.24; see the module docstring."""
    if all_nodes:
        return _eligible_domains_before_v1_24(pod, constraints, nodes)
    keys = tuple(c.topology_key for c in constraints)
    out: dict[int, tuple[str | None, ...]] = {}
    domains: list[set[str]] = [set() for _ in constraints]
    for info in nodes:
        node = info.node
        labels = node.labels
        if not all(k in labels for k in keys):
            continue  # nodeLabelsMatchSpreadConstraints
        affinity_ok: bool | None = None
        taints_ok: bool | None = None
        values: list[str | None] = []
        for i, c in enumerate(constraints):
            # matchNodeInclusionPolicies, per constraint
            ok = True
            if c.node_affinity_policy == HONOR:
                if affinity_ok is None:
                    affinity_ok = matches_node_selector_and_affinity(pod, node)
                ok = affinity_ok
            if ok and c.node_taints_policy == HONOR:
                if taints_ok is None:
                    taints_ok = (
                        find_matching_untolerated_taint(node.taints, pod.tolerations, _DO_NOT_SCHEDULE_EFFECTS) is None
                    )
                ok = taints_ok
            if ok:
                values.append(labels[c.topology_key])
                domains[i].add(labels[c.topology_key])
            else:
                values.append(None)
        out[id(info)] = tuple(values)
    return Domains(out, tuple(frozenset(d) for d in domains))


def _eligible_domains_before_v1_24(pod: Pod, constraints: Constraints, nodes: Iterable[NodeInfo]) -> Domains:
    """``calPreFilterState`` of v1.20-v1.23 (before kubernetes#107009).

    Domains come from the nodes that pass the pod's nodeSelector/required affinity and carry every key;
    ``processNode`` then counts each node's matching pods in its domain if that domain is eligible, without
    checking the node itself (``node.Labels[key]`` reads ``""`` for a missing key). Policies did not exist:
    affinity always decides the domains, taints never.
    """
    nodes = tuple(nodes)
    keys = tuple(c.topology_key for c in constraints)
    domains: list[set[str]] = [set() for _ in constraints]
    for info in nodes:
        labels = info.node.labels
        if all(k in labels for k in keys) and matches_node_selector_and_affinity(pod, info.node):
            for i, k in enumerate(keys):
                domains[i].add(labels[k])
    out: dict[int, tuple[str | None, ...]] = {}
    for info in nodes:
        labels = info.node.labels
        values = tuple(v if (v := labels.get(k, "")) in domains[i] else None for i, k in enumerate(keys))
        if any(v is not None for v in values):
            out[id(info)] = values
    return Domains(out, tuple(frozenset(d) for d in domains))


# --- which pods count, and the skew rule ---------------------------------------------------------


def counting_selector(c: TopologySpreadConstraint, switches: Switches) -> LabelSelector | None:
    """The selector PreFilter counts ``c``'s pods with: ``None`` (no pod) when ``c``'s selector is empty and
    the release's ``countPodsMatchSelector`` returns 0 for it (``switches.spread_empty_selector_counts_no_pods``),
    else ``c.selector``. ``selfMatch`` (:func:`skew_threshold`) reads ``c.selector`` itself, as upstream does."""
    selector = c.selector
    if selector is not None and selector.is_empty and switches.spread_empty_selector_counts_no_pods:
        return None
    return selector


def counts_toward(existing: Pod, pod: Pod, selector: LabelSelector | None) -> bool:
    """Whether ``existing`` counts for ``pod``'s constraint with ``selector`` (``countPodsMatchSelector``):
    in the pod's namespace, not terminating, not the pod itself (same object or same non-empty ``uid``), and
    matching the selector; a nil selector matches no pod, an empty one every pod (pass the constraint's
    :func:`counting_selector`, which is ``None`` where the release counts no pod for an empty one)."""
    if selector is None or existing.deletion_timestamp is not None or existing.namespace != pod.namespace:
        return False
    return not is_self(existing, pod) and selector.matches(existing.labels)


def skew_threshold(
    c: TopologySpreadConstraint, pod: Pod, counts: Mapping[str, int], eligible: Collection[str], *, all_nodes: bool
) -> int:
    """A node in domain ``v`` fails ``c`` when ``counts.get(v, 0)`` exceeds this: ``maxSkew + globalMin -
    selfMatch`` (the upstream inequality, rearranged), ``globalMin`` being the smallest count over the
    ``eligible`` domains, or 0 when there are fewer of them than ``minDomains`` (1 when unset, and under the
    rule before v1.24, ``all_nodes``, which had no ``minDomains``)."""
    min_domains = c.min_domains if c.min_domains is not None and not all_nodes else 1
    if len(eligible) < min_domains:
        global_min = 0  # Fewer eligible domains than minDomains: the global minimum is treated as 0.
    elif eligible:
        global_min = min(counts.get(d, 0) for d in eligible)
    else:
        global_min = _MAX_INT32  # upstream's MinMatchNum when no domain is eligible (minDomains <= 0)
    self_match = 1 if c.selector is not None and c.selector.matches(pod.labels) else 0
    return c.max_skew + global_min - self_match


class Counted(NamedTuple):
    """One constraint after PreFilter: the matching pods per domain, and :func:`skew_threshold`."""

    counts: Mapping[str, int]
    threshold: int


def filter_constraints(
    constraints: Constraints, node_labels: Mapping[str, str], counted: Callable[[int], Counted]
) -> Reason | None:
    """Filter, per constraint in order: :data:`ERR_SPREAD_MISSING_LABEL` (unresolvable) if the node lacks
    its key, :data:`ERR_SPREAD` if the node's domain holds more than the threshold; ``counted(i)`` is asked
    only for the constraints reached. The node need not count itself: an unknown domain counts 0."""
    for i, c in enumerate(constraints):
        value = node_labels.get(c.topology_key)
        if value is None:
            return _MISSING_LABEL
        state = counted(i)
        if state.counts.get(value, 0) > state.threshold:
            return _SPREAD
    return None


def under_rules(switches: Switches, check: Callable[[bool], Reason | None]) -> Reason | None:
    """``check(all_nodes)`` under the counting rule ``switches`` pick: today's (``all_nodes=False``), the one
    before v1.24 (``True``), or, when ``spread_counts_only_eligible_nodes`` is ``None``, both (the first failure)."""
    rule = switches.spread_counts_only_eligible_nodes
    if rule is not False:
        r = check(False)
        if r is not None or rule:
            return r
    return check(True)


# --- Filter over a snapshot ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PreFilter:
    constraints: Constraints
    counted: tuple[Counted, ...]


# One memo per (counting rule, empty selector rule): (all_nodes, spread_empty_selector_counts_no_pods).
_memos: dict[tuple[bool, bool], SnapshotMemo[Pod, _PreFilter]] = {
    (all_nodes, empty_none): SnapshotMemo() for all_nodes in (False, True) for empty_none in (False, True)
}


def _build(pod: Pod, snapshot: ClusterSnapshot, all_nodes: bool, switches: Switches) -> _PreFilter:
    constraints = hard_constraints(pod)
    if not constraints:
        return _PreFilter((), ())
    domains = eligible_domains(pod, constraints, snapshot, all_nodes=all_nodes)
    of_node = domains.of_node
    selectors = [counting_selector(c, switches) for c in constraints]
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for info in snapshot:
        values = of_node.get(id(info))
        if values is None:
            continue
        for i, selector in enumerate(selectors):
            value = values[i]
            if value is not None:
                n = sum(1 for p in info.pods if counts_toward(p, pod, selector))
                counts[i][value] = counts[i].get(value, 0) + n
    counted = tuple(
        Counted(n, skew_threshold(c, pod, n, eligible, all_nodes=all_nodes))
        for c, n, eligible in zip(constraints, counts, domains.eligible, strict=True)
    )
    return _PreFilter(constraints, counted)


def check_topology_spread(
    pod: Pod, node_info: NodeInfo, snapshot: ClusterSnapshot, *, switches: Switches = CURRENT
) -> Reason | None:
    """PodTopologySpread Filter for the pod's DoNotSchedule constraints; ``None`` if ``node_info`` passes.

    Returns :data:`ERR_SPREAD_MISSING_LABEL` (unresolvable) when the node lacks a constraint's topology key,
    :data:`ERR_SPREAD` when placing the pod there would exceed ``maxSkew``; the first failing constraint wins.
    ``switches.spread_counts_only_eligible_nodes`` picks how pods are counted (``None``: both ways must pass),
    ``switches.spread_empty_selector_counts_no_pods`` whether an empty selector counts any.
    """
    if not pod.topology_spread:
        return None
    labels = node_info.node.labels

    def check(all_nodes: bool) -> Reason | None:
        memo = _memos[all_nodes, switches.spread_empty_selector_counts_no_pods]
        state = memo.lookup(snapshot, pod, lambda p, snap: _build(p, snap, all_nodes, switches))
        return filter_constraints(state.constraints, labels, state.counted.__getitem__)

    return under_rules(switches, check)
