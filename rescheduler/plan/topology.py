"""Inter-pod affinity and topology spread for a planner that moves thousands of pods: incremental, exact.

Why not just :func:`shared.fit.fits`: its InterPodAffinity and PodTopologySpread checks do what
kube-scheduler's PreFilter does, a scan of the whole cluster per pod, memoised per snapshot version.
That is right for the scheduler (one pod, many nodes) and for the extender, and wrong for a planner,
which asks about a different pod after every simulated move, so every check would rescan the cluster
(bench/README.md has the figures and the command that measures them).

:class:`TopologyIndex` answers the same two questions from indexes kept current move by move:

* a posting list per ``(namespace, label key, value)`` for the label keys that some selector in the
  cluster requires with ``In`` (``matchLabels`` are ``In``); a selector is evaluated on the pods of its
  smallest posting list only, and exactly (:func:`shared.interpod.term_matches`,
  ``LabelSelector.matches``) on those. Selectors without an ``In`` requirement fall back to every pod
  of the namespaces in scope;
* the required anti-affinity terms of every pod, indexed the same way by the label values a pod
  must have to match them, so "does any existing pod's anti-affinity reject this pod here" looks at
  the few terms that can match it;
* where each pod is (``loc``), the only thing a move changes.

The semantics are those of ``shared/interpod.py`` and ``shared/spread.py`` (which transcribe
kube-scheduler's ``filtering.go`` files) including their reasons, the order of checks, the pod never
counting against itself (same object or same non-empty uid), terminating pods not counting for spread,
``minDomains``, the node inclusion policies, and the cluster release's rules (:mod:`shared.switches`).
``tests/unit/test_topology.py`` checks the answers against the shared functions on random clusters before
and after random moves, and the planner can
cross-check every chosen move with the full :func:`shared.fit.fits` (``verify``).

Building the index reads every pod; a :class:`~rescheduler.plan.topology_memo.TopologyMemo` kept from one
build to the next re-reads only the nodes whose pods changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rescheduler.plan.topology_memo import NodePart, TopologyMemo, anchor_of
from shared.interpod import term_matches
from shared.model import NO_EXECUTE, NO_SCHEDULE, Pod, PodAffinityTerm, TopologySpreadConstraint
from shared.nodeaffinity import matches_node_selector_and_affinity
from shared.reasons import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    ERR_SPREAD,
    ERR_SPREAD_MISSING_LABEL,
    Reason,
    reason,
)
from shared.selectors import LabelSelector
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT, Switches
from shared.taints import find_matching_untolerated_taint

__all__ = ["TopologyIndex", "TopologyMemo"]

_AFFINITY = reason(ERR_AFFINITY, unresolvable=True)
_ANTI_AFFINITY = reason(ERR_ANTI_AFFINITY)
_EXISTING_ANTI_AFFINITY = reason(ERR_EXISTING_ANTI_AFFINITY)
_SPREAD = reason(ERR_SPREAD)
_MISSING_LABEL = reason(ERR_SPREAD_MISSING_LABEL, unresolvable=True)
_DO_NOT_SCHEDULE = "DoNotSchedule"
_HONOR = "Honor"
_DO_NOT_SCHEDULE_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
_MAX_INT32 = 2**31 - 1


class TopologyIndex:
    """Where every pod is, indexed for affinity and spread questions; see the module docstring.

    Pods are identified by a small integer ``pid`` (assigned here), since moving a pod replaces its
    frozen ``Pod`` object. The caller reports every move with :meth:`move`.
    """

    def __init__(self, snapshot: ClusterSnapshot, memo: TopologyMemo | None = None) -> None:
        """Index ``snapshot``. ``memo``, kept by the caller from one index to the next, spares re-reading
        the nodes whose pods did not change (:class:`TopologyMemo`); the index is the same without it."""
        self.snapshot = snapshot
        memo = memo if memo is not None else TopologyMemo()
        infos = list(snapshot)
        parts = memo.parts(infos)
        keys: set[str] = set()
        for part in parts:
            anchor_keys = part.anchor_keys()
            if anchor_keys:
                keys |= anchor_keys
        self.keys = frozenset(keys)
        self.pods: list[Pod] = []
        self.loc: list[NodeInfo] = []
        self._blocks: dict[str, tuple[int, NodePart]] = {}
        self.postings: dict[tuple[str, str, str], list[int]] = {}
        """(namespace, key, value) -> pids of the pods with that label value."""
        self.anti_terms: dict[tuple[str, str], list[tuple[int, PodAffinityTerm]]] = {}
        """(key, value) -> the required anti-affinity terms (with their pod's pid) that only pods with that
        label value can match."""
        self.anti_general: list[tuple[int, PodAffinityTerm]] = []
        """Required anti-affinity terms without an ``In`` requirement."""
        self._index_blocks(infos, parts, memo)
        self.pid_of: dict[int, int] = {}
        """id(Pod object as found in the snapshot, or as moved) -> pid, filled as pods are asked about."""
        self._by_namespace: dict[str, list[int]] | None = None
        self._eligible: dict[Any, Any] = {}
        self._ns_selector_cache: dict[LabelSelector, tuple[str, ...]] = {}
        memo.trim(len(self.postings), len(self.anti_terms))

    def _index_blocks(self, infos: list[NodeInfo], parts: list[NodePart], memo: TopologyMemo) -> None:
        """Fills ``pods``, ``loc`` and ``_blocks`` with every node's block of pods, and ``postings``,
        ``anti_terms`` and ``anti_general`` from those blocks."""
        key_tuple = tuple(sorted(self.keys))
        blocks = [part.block(key_tuple, memo) for part in parts]
        antis = [part.anti_entries(memo) for part in parts]  # numbers every key before the lists are sized
        # Pids: per node, a block in the order of its pods: the pods some selector could match (carrying
        # an indexed key), then its other pods with required anti-affinity. The other pods get one when
        # first asked about (:meth:`pid`), which most never are. Posting lists are in pid order; a posting
        # or anti-affinity entry is collected under the memo's number for its key, cheaper to look up.
        pods = self.pods
        loc = self.loc
        slots: list[list[int] | None] = [None] * len(memo.posting_keys)
        anti_slots: list[list[tuple[int, PodAffinityTerm]] | None] = [None] * len(memo.anti_keys)
        anti_general = self.anti_general
        for info, part, (block, offsets, slot_of, anti_offsets), anti in zip(infos, parts, blocks, antis, strict=True):
            if not block:
                continue
            base = len(pods)
            self._blocks[info.name] = (base, part)
            pods.extend(block)
            loc.extend([info] * len(block))
            for off, slot in zip(offsets, slot_of, strict=True):
                lst = slots[slot]
                if lst is None:
                    slots[slot] = [base + off]
                else:
                    lst.append(base + off)
            pod_of, anti_slot_of, terms, general_pod_of, general = anti
            for k, slot, term in zip(pod_of, anti_slot_of, terms, strict=True):
                entries = anti_slots[slot]
                if entries is None:
                    anti_slots[slot] = [(base + anti_offsets[k], term)]
                else:
                    entries.append((base + anti_offsets[k], term))
            for k, term in zip(general_pod_of, general, strict=True):
                anti_general.append((base + anti_offsets[k], term))
        posting_keys = memo.posting_keys
        self.postings.update({posting_keys[i]: lst for i, lst in enumerate(slots) if lst is not None})
        anti_keys = memo.anti_keys
        self.anti_terms.update({anti_keys[i]: lst for i, lst in enumerate(anti_slots) if lst is not None})

    # --- bookkeeping ------------------------------------------------------------------------------

    def move(self, pid: int, new_obj: Pod, to: NodeInfo) -> None:
        """Record that pod ``pid`` now runs on ``to`` as ``new_obj`` (labels and terms unchanged)."""
        self.loc[pid] = to
        self.pid_of[id(new_obj)] = pid

    def pid(self, pod: Pod) -> int:
        """The pod's id: from its node's block for a pod indexed up front, else assigned on first use (the
        pod must be in the snapshot, on the node it names)."""
        pid = self.pid_of.get(id(pod))
        if pid is not None:
            return pid
        hit = self._blocks.get(pod.node_name)
        if hit is not None:
            off = hit[1].offset(pod)
            if off is not None:
                pid = self.pid_of[id(pod)] = hit[0] + off
                return pid
        pid = len(self.pods)
        self.pods.append(pod)
        self.loc.append(self.snapshot[pod.node_name])
        self.pid_of[id(pod)] = pid
        if self._by_namespace is not None:
            self._by_namespace.setdefault(pod.namespace, []).append(pid)
        return pid

    def _namespaces(self) -> dict[str, list[int]]:
        """Every pod by namespace (for selectors without an ``In`` requirement), built on first need."""
        if self._by_namespace is None:
            for info in self.snapshot:
                for p in info.pods:
                    self.pid(p)
            by_ns: dict[str, list[int]] = {}
            for pid, p in enumerate(self.pods):
                by_ns.setdefault(p.namespace, []).append(pid)
            self._by_namespace = by_ns
        return self._by_namespace

    def _scope(self, namespaces: frozenset[str], ns_selector: LabelSelector | None) -> Iterable[str]:
        """The namespaces a term covers: its list, plus those whose labels its namespaceSelector matches."""
        if ns_selector is None:
            return namespaces
        hit = self._ns_selector_cache.get(ns_selector)
        if hit is None:
            labels_of = self.snapshot.namespace_labels
            present = set(self._namespaces()) | set(self.snapshot.namespaces)
            hit = tuple(sorted(n for n in present if n in namespaces or ns_selector.matches(labels_of(n))))
            self._ns_selector_cache[ns_selector] = hit
        return hit

    def _candidates(self, selector: LabelSelector, namespaces: Iterable[str]) -> Iterable[int]:
        """Pids that may match ``selector`` in ``namespaces`` (a superset; callers match exactly)."""
        anchor = anchor_of(selector)
        if anchor is None or anchor[0] not in self.keys:
            by_ns = self._namespaces()
            for ns in namespaces:
                yield from by_ns.get(ns, ())
            return
        key, values = anchor
        postings = self.postings
        for ns in namespaces:
            for v in values:
                lst = postings.get((ns, key, v))
                if lst:
                    yield from lst

    # --- InterPodAffinity --------------------------------------------------------------------------

    def check_inter_pod_affinity(self, pod: Pod, pid: int | None, node: NodeInfo) -> Reason | None:
        """``shared.interpod.check_inter_pod_affinity`` for ``pod`` (``pid``, or None if not placed) on ``node``."""
        labels = node.node.labels
        ns_labels = self.snapshot.namespace_labels
        uid = pod.uid
        pods = self.pods
        loc = self.loc

        if pod.pod_affinity:  # rarely taken: most pods have no required affinity
            r = self._check_affinity(pod, pid, labels)
            if r is not None:
                return r

        for t in pod.pod_anti_affinity:
            value = labels.get(t.topology_key)
            if value is None or t.selector is None:
                continue
            key = t.topology_key
            for cand in self._candidates(t.selector, self._scope(t.namespaces, t.namespace_selector)):
                if loc[cand].node.labels.get(key) != value or cand == pid:  # the domain first, as in _existing
                    continue
                ep = pods[cand]
                if uid and ep.uid == uid:
                    continue
                if term_matches(t, ep, ns_labels):
                    return _ANTI_AFFINITY

        # Existing pods' anti-affinity terms that match the pod.
        plabels = pod.labels
        anti_terms = self.anti_terms
        for k, v in plabels.items():
            entries = anti_terms.get((k, v))
            if entries:
                r = self._existing(entries, pod, pid, uid, labels, ns_labels)
                if r is not None:
                    return r
        if self.anti_general:
            return self._existing(self.anti_general, pod, pid, uid, labels, ns_labels)
        return None

    def _check_affinity(self, pod: Pod, pid: int | None, labels: Mapping[str, str]) -> Reason | None:
        """The pod's required affinity terms on a node with ``labels``: :data:`_AFFINITY` if the node lacks a
        term's topology key, or if pods matching every term are not in each term's domain of the node (unless
        no such pod exists and the pod matches its own terms: the first of a series); else ``None``."""
        ns_labels = self.snapshot.namespace_labels
        uid = pod.uid
        pods = self.pods
        loc = self.loc
        aff_terms = pod.pod_affinity
        for t in aff_terms:
            if t.topology_key not in labels:
                return _AFFINITY
        # affinityCounts: pods matching *all* terms, per (key, value of their node).
        found: dict[str, set[str]] = {}
        first = aff_terms[0]
        if first.selector is not None:
            for cand in self._candidates(first.selector, self._scope(first.namespaces, first.namespace_selector)):
                if cand == pid:
                    continue
                ep = pods[cand]
                if uid and ep.uid == uid:
                    continue
                if not _matches_all(aff_terms, ep, ns_labels):
                    continue
                ep_labels = loc[cand].node.labels
                for t in aff_terms:
                    v = ep_labels.get(t.topology_key)
                    if v is not None:
                        found.setdefault(t.topology_key, set()).add(v)
        pods_exist = True
        for t in aff_terms:
            values = found.get(t.topology_key)
            if values is None or labels[t.topology_key] not in values:
                pods_exist = False
        if not pods_exist:
            first_of_series = not found and _matches_all(aff_terms, pod, ns_labels)
            if not first_of_series:
                return _AFFINITY
        return None

    def _existing(
        self,
        entries: list[tuple[int, PodAffinityTerm]],
        pod: Pod,
        pid: int | None,
        uid: str,
        labels: Mapping[str, str],
        ns_labels: Any,
    ) -> Reason | None:
        pods = self.pods
        loc = self.loc
        for cand, t in entries:
            # The topology domain first: it rules out nearly every entry (the checks commute).
            key = t.topology_key
            value = labels.get(key)
            if value is None or loc[cand].node.labels.get(key) != value:
                continue
            if cand == pid:
                continue
            if uid and pods[cand].uid == uid:
                continue
            if term_matches(t, pod, ns_labels):
                return _EXISTING_ANTI_AFFINITY
        return None

    # --- PodTopologySpread -------------------------------------------------------------------------

    def check_topology_spread(
        self, pod: Pod, pid: int | None, node: NodeInfo, switches: Switches = CURRENT
    ) -> Reason | None:
        """``shared.spread.check_topology_spread`` for ``pod`` on ``node``, with the same ``switches``."""
        constraints = tuple(c for c in pod.topology_spread if c.when_unsatisfiable == _DO_NOT_SCHEDULE)
        if not constraints:
            return None
        rule = switches.spread_counts_only_eligible_nodes
        if rule is not False:
            r = self._check_spread(pod, pid, node, constraints, all_nodes=False)
            if r is not None or rule:
                return r
        return self._check_spread(pod, pid, node, constraints, all_nodes=True)

    def _check_spread(
        self,
        pod: Pod,
        pid: int | None,
        node: NodeInfo,
        constraints: tuple[TopologySpreadConstraint, ...],
        *,
        all_nodes: bool,
    ) -> Reason | None:
        """One counting rule: today's, or (``all_nodes``) the one before v1.24, which counts on every node of
        an eligible domain and knows neither node inclusion policies nor ``minDomains``."""
        labels = node.node.labels
        eligible, domains = self._eligible_nodes(pod, constraints, all_nodes)
        for i, c in enumerate(constraints):
            value = labels.get(c.topology_key)
            if value is None:
                return _MISSING_LABEL
            counts = self._spread_counts(pod, pid, c, i, eligible)
            min_domains = c.min_domains if c.min_domains is not None and not all_nodes else 1
            if len(domains[i]) < min_domains:
                global_min = 0
            elif domains[i]:
                global_min = min(counts.get(d, 0) for d in domains[i])
            else:
                global_min = _MAX_INT32
            self_match = 1 if c.selector is not None and c.selector.matches(pod.labels) else 0
            if counts.get(value, 0) > c.max_skew + global_min - self_match:
                return _SPREAD
        return None

    def _eligible_nodes(
        self, pod: Pod, constraints: tuple[TopologySpreadConstraint, ...], all_nodes: bool = False
    ) -> tuple[Mapping[int, tuple[str | None, ...]], tuple[frozenset[str], ...]]:
        """For the nodes that count (``id(NodeInfo)`` → per constraint its domain, ``None`` where a
        policy excludes it) and each constraint's eligible domains. Cached on what they depend on:
        the rule, the keys, the policies, and the pod's node selector, required affinity and tolerations."""
        if all_nodes:
            return self._eligible_nodes_before_v1_24(pod, constraints)
        honor_affinity = any(c.node_affinity_policy == _HONOR for c in constraints)
        honor_taints = any(c.node_taints_policy == _HONOR for c in constraints)
        cache_key = (
            False,
            tuple((c.topology_key, c.node_affinity_policy, c.node_taints_policy) for c in constraints),
            tuple(sorted(pod.node_selector.items())) if honor_affinity else (),
            pod.required_affinity if honor_affinity else None,
            pod.tolerations if honor_taints else (),
        )
        hit = self._eligible.get(cache_key)
        if hit is not None:
            return hit
        keys = tuple(c.topology_key for c in constraints)
        out: dict[int, tuple[str | None, ...]] = {}
        domains: list[set[str]] = [set() for _ in constraints]
        for info in self.snapshot:
            node = info.node
            nl = node.labels
            if not all(k in nl for k in keys):
                continue
            affinity_ok: bool | None = None
            taints_ok: bool | None = None
            values: list[str | None] = []
            for i, c in enumerate(constraints):
                ok = True
                if c.node_affinity_policy == _HONOR:
                    if affinity_ok is None:
                        affinity_ok = matches_node_selector_and_affinity(pod, node)
                    ok = affinity_ok
                if ok and c.node_taints_policy == _HONOR:
                    if taints_ok is None:
                        taints_ok = (
                            find_matching_untolerated_taint(node.taints, pod.tolerations, _DO_NOT_SCHEDULE_EFFECTS)
                            is None
                        )
                    ok = taints_ok
                if ok:
                    values.append(nl[c.topology_key])
                    domains[i].add(nl[c.topology_key])
                else:
                    values.append(None)
            out[id(info)] = tuple(values)
        result = (out, tuple(frozenset(d) for d in domains))
        self._eligible[cache_key] = result
        return result

    def _eligible_nodes_before_v1_24(
        self, pod: Pod, constraints: tuple[TopologySpreadConstraint, ...]
    ) -> tuple[Mapping[int, tuple[str | None, ...]], tuple[frozenset[str], ...]]:
        """``shared.spread``'s rule before kubernetes#107009: domains from the nodes passing the pod's node
        selector/affinity with every key; every node whose value (``""`` if it lacks the key) is such a
        domain counts. Policies did not exist: affinity always decides the domains, taints never."""
        keys = tuple(c.topology_key for c in constraints)
        cache_key = (True, keys, tuple(sorted(pod.node_selector.items())), pod.required_affinity)
        hit = self._eligible.get(cache_key)
        if hit is not None:
            return hit
        domains: list[set[str]] = [set() for _ in constraints]
        for info in self.snapshot:
            nl = info.node.labels
            if all(k in nl for k in keys) and matches_node_selector_and_affinity(pod, info.node):
                for i, k in enumerate(keys):
                    domains[i].add(nl[k])
        out: dict[int, tuple[str | None, ...]] = {}
        for info in self.snapshot:
            nl = info.node.labels
            values = tuple(v if (v := nl.get(k, "")) in domains[i] else None for i, k in enumerate(keys))
            if any(v is not None for v in values):
                out[id(info)] = values
        result = (out, tuple(frozenset(d) for d in domains))
        self._eligible[cache_key] = result
        return result

    def _spread_counts(
        self,
        pod: Pod,
        pid: int | None,
        c: TopologySpreadConstraint,
        i: int,
        eligible: Mapping[int, tuple[str | None, ...]],
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        selector = c.selector
        if selector is None:  # matches no pod; an empty selector matches every pod (kubernetes#141340)
            return counts
        ns = pod.namespace
        uid = pod.uid
        pods = self.pods
        loc = self.loc
        for cand in self._candidates(selector, (ns,)):
            if cand == pid:
                continue
            ep = pods[cand]
            if ep.deletion_timestamp is not None or ep.namespace != ns:
                continue
            if uid and ep.uid == uid:
                continue
            values = eligible.get(id(loc[cand]))
            if values is None:
                continue
            v = values[i]
            if v is not None and selector.matches(ep.labels):
                counts[v] = counts.get(v, 0) + 1
        return counts


def _matches_all(terms: tuple[PodAffinityTerm, ...], target: Pod, ns_labels: Any) -> bool:
    if not terms:
        return False
    for t in terms:
        if not term_matches(t, target, ns_labels):
            return False
    return True
