"""Required inter-pod affinity and anti-affinity, both directions, exactly like kube-scheduler.

Upstream: ``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`` (PreFilter + Filter) and
``scoring.go`` (PreScore + Score). PreFilter computes three maps of topology pair → number of pods, once
per pod; Filter then only looks the candidate node's labels up in them:

* ``existingAntiAffinityCounts``: existing pods whose *required anti-affinity* terms match the incoming
  pod, counted at (term.topologyKey, value of that key on the existing pod's node). A candidate node
  carrying any such pair fails with :data:`ERR_EXISTING_ANTI_AFFINITY`.
* ``antiAffinityCounts``: existing pods matching the incoming pod's anti-affinity terms (each term on its
  own). A node whose value for some term's key has a count fails with :data:`ERR_ANTI_AFFINITY`. A node
  without the key cannot violate that term.
* ``affinityCounts``: existing pods matching *all* of the incoming pod's affinity terms. Every term's key
  must be on the node (else :data:`ERR_AFFINITY`) and every term's pair must have a count, except for the
  first pod of a series: if no pod anywhere matched (the map is empty) and the pod matches its own terms,
  it may go anywhere that has the keys. ``ERR_AFFINITY`` is unresolvable (``UnschedulableAndUnresolvable``
  upstream), the anti-affinity reasons are not (evicting the offending pods would help).

Filter checks affinity, then the pod's anti-affinity, then the existing pods' anti-affinity, and reports
the first failure, like upstream.

Term matching (``framework.AffinityTerm.Matches``): the target pod's namespace is in ``term.namespaces``
or its labels match ``term.namespace_selector`` (an empty selector matches every namespace; ``None`` none),
and its labels match ``term.selector`` (``None``, a nil labelSelector, matches no pod). ``model.py`` already
defaulted ``namespaces`` to the owner's namespace when both fields are empty. Upstream merges the incoming
pod's namespaceSelector into a namespace list taken from the namespace lister; looking the target's
namespace labels up in the snapshot gives the same answer for every namespace the snapshot knows.

The pod being checked is never counted against itself (same object, or same non-empty ``uid``): kube-scheduler
never sees the pod it schedules among the bound pods, and the rescheduler asks where a bound pod could go.

PreFilter's work is memoised per (snapshot, ``snapshot.version``, pod) in :class:`~shared.memo.SnapshotMemo`,
so checking one pod against N nodes costs one cluster scan plus O(1) per node.

The rules are public functions (:func:`term_matches`, :func:`term_covers_namespace`, :func:`is_self`,
:func:`matches_all_terms`, :func:`add_affinity_domains`, :func:`affinity_verdict` and the reasons), so that the
planner's incremental index (``rescheduler/plan/topology.py``), which counts differently, applies the same
ones: a change of meaning is made here once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from shared.fit_reasons import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    Reason,
    reason,
)
from shared.memo import SnapshotMemo
from shared.model import Pod, PodAffinityTerm, WeightedPodAffinityTerm
from shared.snapshot import ClusterSnapshot, NodeInfo

__all__ = [
    "AFFINITY",
    "ANTI_AFFINITY",
    "EXISTING_ANTI_AFFINITY",
    "add_affinity_domains",
    "affinity_verdict",
    "check_inter_pod_affinity",
    "is_self",
    "lacks_topology_key",
    "matches_all_terms",
    "term_covers_namespace",
    "preferred_inter_pod_affinity_score",
    "term_matches",
    "DEFAULT_HARD_POD_AFFINITY_WEIGHT",
]

# config/v1 defaults.go SetDefaults_InterPodAffinityArgs: HardPodAffinityWeight = 1.
DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1

AFFINITY = reason(ERR_AFFINITY, unresolvable=True)
ANTI_AFFINITY = reason(ERR_ANTI_AFFINITY)
EXISTING_ANTI_AFFINITY = reason(ERR_EXISTING_ANTI_AFFINITY)

NamespaceLabels = Callable[[str], Mapping[str, str]]
Domains = tuple[tuple[str, frozenset[str]], ...]
"""Topology pairs with a positive count, grouped by key: ``((key, {values}), ...)``."""


def term_matches(term: PodAffinityTerm, target: Pod, namespace_labels: NamespaceLabels) -> bool:
    """``AffinityTerm.Matches``: namespace (list or selector) and label selector both match ``target``."""
    selector = term.selector
    if selector is None:
        return False
    namespace = target.namespace
    if namespace not in term.namespaces and not term_covers_namespace(term, namespace, namespace_labels):
        return False  # the list test first: it decides nearly every call without the function call
    return selector.matches(target.labels)


def term_covers_namespace(term: PodAffinityTerm, namespace: str, namespace_labels: NamespaceLabels) -> bool:
    """The namespace half of ``AffinityTerm.Matches``: ``namespace`` is in ``term.namespaces`` or its labels
    match ``term.namespace_selector`` (an empty selector matches every namespace; ``None`` none)."""
    if namespace in term.namespaces:
        return True
    ns_selector = term.namespace_selector
    return ns_selector is not None and ns_selector.matches(namespace_labels(namespace))


def is_self(existing: Pod, pod: Pod) -> bool:
    """Whether ``existing`` is the pod being checked (same object, or same non-empty ``uid``): it never
    counts against itself."""
    return existing is pod or (bool(pod.uid) and existing.uid == pod.uid)


def matches_all_terms(terms: tuple[PodAffinityTerm, ...], target: Pod, ns_labels: NamespaceLabels) -> bool:
    """``podMatchesAllAffinityTerms``: false for no terms."""
    if not terms:
        return False
    for term in terms:
        if not term_matches(term, target, ns_labels):
            return False
    return True


def add_affinity_domains(
    domains: dict[str, set[str]], terms: tuple[PodAffinityTerm, ...], node_labels: Mapping[str, str]
) -> None:
    """``affinityCounts`` for a pod matching all ``terms`` on a node with ``node_labels``: each term's
    topology pair is added to ``domains``; a key the node lacks adds nothing."""
    for term in terms:
        value = node_labels.get(term.topology_key)
        if value is not None:
            _add(domains, term.topology_key, value)


def lacks_topology_key(terms: tuple[PodAffinityTerm, ...], node_labels: Mapping[str, str]) -> bool:
    """Whether the node lacks some term's topology key: required affinity then fails on it."""
    for term in terms:
        if term.topology_key not in node_labels:
            return True
    return False


def affinity_verdict(
    pod: Pod, node_labels: Mapping[str, str], matched: Mapping[str, Collection[str]], ns_labels: NamespaceLabels
) -> Reason | None:
    """The Filter's rule for the pod's required affinity terms on a node with ``node_labels``, given
    ``matched`` (``affinityCounts``: per topology key, the values where pods other than ``pod`` matching
    *all* its terms run). :data:`AFFINITY` if the node lacks a term's key, or if some term's domain of the
    node holds no such pod, unless no pod matched anywhere and the pod matches its own terms (the first pod
    of a series); else ``None``."""
    terms = pod.pod_affinity
    if lacks_topology_key(terms, node_labels):
        return AFFINITY  # All topology labels must exist on the node.
    for term in terms:
        values = matched.get(term.topology_key)
        if values is None or node_labels[term.topology_key] not in values:
            break
    else:
        return None
    if not matched and matches_all_terms(terms, pod, ns_labels):
        return None
    return AFFINITY


def _add(domains: dict[str, set[str]], key: str, value: str) -> None:
    values = domains.get(key)
    if values is None:
        domains[key] = {value}
    else:
        values.add(value)


def _freeze(domains: dict[str, set[str]]) -> Domains:
    return tuple((k, frozenset(v)) for k, v in domains.items())


# --- Filter ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FilterState:
    """What upstream PreFilter computes for one pod. Counts are kept only as "positive or not"."""

    affinity: Mapping[str, frozenset[str]]
    anti_affinity: Domains
    existing_anti_affinity: Domains


_ANTI_PODS = object()
"""Memo key for the per-version list of (pod, node labels) of pods with required anti-affinity."""

_filter_memo: SnapshotMemo[Pod, _FilterState | None] = SnapshotMemo()
_shared_memo: SnapshotMemo[object, tuple[tuple[Pod, Mapping[str, str]], ...]] = SnapshotMemo(max_keys=4)


def _pods_with_required_anti_affinity(
    _: object, snapshot: ClusterSnapshot
) -> tuple[tuple[Pod, Mapping[str, str]], ...]:
    """``HavePodsWithRequiredAntiAffinityList``, flattened: shared by every pod at one snapshot version."""
    return tuple((p, info.node.labels) for info in snapshot for p in info.pods_with_required_anti_affinity)


def _build_filter_state(pod: Pod, snapshot: ClusterSnapshot) -> _FilterState | None:
    ns_labels = snapshot.namespace_labels
    # getExistingAntiAffinityCounts: existing pods' required anti-affinity terms that match the pod.
    existing: dict[str, set[str]] = {}
    for ep, node_labels in _shared_memo.lookup(snapshot, _ANTI_PODS, _pods_with_required_anti_affinity):
        if is_self(ep, pod):
            continue
        for term in ep.pod_anti_affinity:
            value = node_labels.get(term.topology_key)
            if value is not None and term_matches(term, pod, ns_labels):
                _add(existing, term.topology_key, value)

    # getIncomingAffinityAntiAffinityCounts: existing pods matching the pod's own terms.
    aff_terms = pod.pod_affinity
    anti_terms = pod.pod_anti_affinity
    affinity: dict[str, set[str]] = {}
    anti: dict[str, set[str]] = {}
    if aff_terms or anti_terms:
        for info in snapshot:
            node_labels = info.node.labels
            for ep in info.pods:
                if is_self(ep, pod):
                    continue
                if aff_terms and matches_all_terms(aff_terms, ep, ns_labels):
                    add_affinity_domains(affinity, aff_terms, node_labels)
                for term in anti_terms:
                    value = node_labels.get(term.topology_key)
                    if value is not None and term_matches(term, ep, ns_labels):
                        _add(anti, term.topology_key, value)

    if not existing and not aff_terms and not anti_terms:
        return None  # PreFilter's Skip: nothing can fail.
    return _FilterState(
        affinity={k: frozenset(v) for k, v in affinity.items()},
        anti_affinity=_freeze(anti),
        existing_anti_affinity=_freeze(existing),
    )


def check_inter_pod_affinity(pod: Pod, node_info: NodeInfo, snapshot: ClusterSnapshot) -> Reason | None:
    """InterPodAffinity Filter: ``None`` if ``pod`` may run on ``node_info`` given the pods in ``snapshot``.

    Returns :data:`ERR_AFFINITY` (unresolvable), :data:`ERR_ANTI_AFFINITY` or
    :data:`ERR_EXISTING_ANTI_AFFINITY`, checked in that order. ``node_info`` need not belong to
    ``snapshot``; only its node's labels are read. ``pod`` itself is never counted (see module docstring).
    """
    state = _filter_memo.lookup(snapshot, pod, _build_filter_state)
    if state is None:
        return None
    labels = node_info.node.labels

    if pod.pod_affinity:
        r = affinity_verdict(pod, labels, state.affinity, snapshot.namespace_labels)
        if r is not None:
            return r

    for key, values in state.anti_affinity:
        value = labels.get(key)
        if value is not None and value in values:
            return ANTI_AFFINITY

    for key, values in state.existing_anti_affinity:
        value = labels.get(key)
        if value is not None and value in values:
            return EXISTING_ANTI_AFFINITY
    return None


# --- Score -------------------------------------------------------------------------------------------

ScoreMap = Mapping[str, Mapping[str, int]]
"""topologyKey → topology value → summed weight (``scoring.go`` ``scoreMap``)."""

_score_memo: SnapshotMemo[Pod, dict[int, ScoreMap]] = SnapshotMemo()


def _process_terms(
    scores: dict[str, dict[str, int]],
    terms: Iterable[WeightedPodAffinityTerm],
    target: Pod,
    node_labels: Mapping[str, str],
    ns_labels: NamespaceLabels,
    multiplier: int,
) -> None:
    for wt in terms:
        _process_term(scores, wt.term, wt.weight * multiplier, target, node_labels, ns_labels)


def _process_term(
    scores: dict[str, dict[str, int]],
    term: PodAffinityTerm,
    weight: int,
    target: Pod,
    node_labels: Mapping[str, str],
    ns_labels: NamespaceLabels,
) -> None:
    value = node_labels.get(term.topology_key)
    if value is not None and term_matches(term, target, ns_labels):
        per_key = scores.setdefault(term.topology_key, {})
        per_key[value] = per_key.get(value, 0) + weight


def _build_score_map(pod: Pod, snapshot: ClusterSnapshot, hard_weight: int) -> ScoreMap:
    """``PreScore``/``processExistingPod`` over every bound pod (except ``pod`` itself)."""
    ns_labels = snapshot.namespace_labels
    has_preferred = bool(pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity)
    scores: dict[str, dict[str, int]] = {}
    for info in snapshot:
        node_labels = info.node.labels
        if not node_labels:
            continue
        for ep in info.pods if has_preferred else info.pods_with_affinity:
            if is_self(ep, pod):
                continue
            _process_terms(scores, pod.preferred_pod_affinity, ep, node_labels, ns_labels, 1)
            _process_terms(scores, pod.preferred_pod_anti_affinity, ep, node_labels, ns_labels, -1)
            if hard_weight > 0:
                for term in ep.pod_affinity:
                    _process_term(scores, term, hard_weight, pod, node_labels, ns_labels)
            _process_terms(scores, ep.preferred_pod_affinity, pod, node_labels, ns_labels, 1)
            _process_terms(scores, ep.preferred_pod_anti_affinity, pod, node_labels, ns_labels, -1)
    return scores


def preferred_inter_pod_affinity_score(
    pod: Pod,
    node_info: NodeInfo,
    snapshot: ClusterSnapshot,
    *,
    hard_pod_affinity_weight: int = DEFAULT_HARD_POD_AFFINITY_WEIGHT,
) -> int:
    """InterPodAffinity ``Score`` before ``NormalizeScore``: positive attracts, negative repels.

    The sum, over the topology keys on ``node_info``'s node, of: the pod's preferred affinity (+weight) and
    anti-affinity (-weight) terms matched by existing pods in that domain; existing pods' required affinity
    terms matched by the pod (+``hard_pod_affinity_weight``, 0 disables); existing pods' preferred affinity
    (+weight) and anti-affinity (-weight) terms matched by the pod. Normalising to 0-100 across the
    candidate nodes (``(s - min) * 100 / (max - min)``) is left to the caller, who knows the node list.
    """
    per_weight = _score_memo.lookup(snapshot, pod, _new_score_slot)
    scores = per_weight.get(hard_pod_affinity_weight)
    if scores is None:
        scores = per_weight[hard_pod_affinity_weight] = _build_score_map(pod, snapshot, hard_pod_affinity_weight)
    if not scores:
        return 0
    labels = node_info.node.labels
    total = 0
    for key, per_value in scores.items():
        value = labels.get(key)
        if value is not None:
            total += per_value.get(value, 0)
    return total


def _new_score_slot(_: Pod, __: ClusterSnapshot) -> dict[int, ScoreMap]:
    return {}
