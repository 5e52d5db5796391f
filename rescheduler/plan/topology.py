"""Inter-pod affinity and topology spread for a planner that moves thousands of pods: incremental, exact.

Why not just :func:`shared.fit.fits`: its InterPodAffinity and PodTopologySpread checks do what
kube-scheduler's PreFilter does, a scan of the whole cluster per pod, memoised per snapshot version.
That is right for the scheduler (one pod, many nodes) and for the extender, and wrong for a planner,
which asks about a different pod after every simulated move, so every check would rescan the cluster.

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

The meaning is not written here: which pods a term or a constraint selects, which nodes form a domain,
the first pod of an affinity series, the skew rule with ``minDomains``, the node inclusion policies, the
release's counting rule (:mod:`shared.switches`), the order of the spread checks and the reasons come from
:mod:`shared.interpod` and :mod:`shared.spread` (which transcribe kube-scheduler's ``filtering.go`` files:
:func:`~shared.interpod.term_matches`, :func:`~shared.interpod.affinity_verdict`,
:func:`~shared.spread.eligible_domains`, :func:`~shared.spread.counts_toward`,
:func:`~shared.spread.filter_constraints` and their neighbours). The index only decides which pods to look
at, and gathers the counts from them; its three inter-pod checks are taken in the Filter's order (affinity,
the pod's anti-affinity, the existing pods' anti-affinity), each with the shared rules.
``tests/unit/test_topology.py`` checks these counts against the shared functions' direct evaluation on
random clusters before and after random moves, and the planner can cross-check every chosen move with the
full :func:`shared.fit.fits` (``verify``).

Building the index reads every pod; a :class:`~rescheduler.plan.topology_memo.TopologyMemo` kept from one
build to the next re-reads only the nodes whose pods changed, and hands the next index the last one, which it
takes over: only those nodes are indexed again (their old entries retired), so an index after a one-pod change
costs about a pass over the nodes, not over the pods.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from rescheduler.plan.topology_memo import NodePart, TopologyMemo, anchor_of
from shared.fit_reasons import Reason
from shared.interpod import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    add_affinity_domains,
    affinity_verdict,
    is_self,
    lacks_topology_key,
    matches_all_terms,
    term_covers_namespace,
    term_matches,
)
from shared.model import Node, Pod, PodAffinityTerm, TopologySpreadConstraint
from shared.selectors import LabelSelector
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.spread import (
    Counted,
    Domains,
    counting_selector,
    counts_toward,
    domains_key,
    eligible_domains,
    filter_constraints,
    hard_constraints,
    skew_threshold,
    under_rules,
)
from shared.switches import CURRENT, Switches

__all__ = ["TopologyIndex", "TopologyMemo"]

_NO_POD = Pod(namespace="", name="")
"""What a retired pid's slot in :attr:`TopologyIndex.pods` holds (no list refers to it)."""
_NO_NODE = NodeInfo(Node(name=""))
"""Where a retired pid is (:attr:`TopologyIndex.loc`): nowhere, and it keeps no node of an old snapshot alive."""

_K = TypeVar("_K")
_E = TypeVar("_E")


def _merge(into: dict[_K, list[_E]], keys: list[_K], slots: list[list[_E] | None]) -> None:
    """Appends each numbered list of ``slots`` to ``into`` under its key ``keys[number]``."""
    for i, lst in enumerate(slots):
        if lst is not None:
            have = into.get(keys[i])
            if have is None:
                into[keys[i]] = lst
            else:
                have.extend(lst)


class TopologyIndex:
    """Where every pod is, indexed for affinity and spread questions; see the module docstring.

    Pods are identified by a small integer ``pid`` (assigned here), since moving a pod replaces its
    frozen ``Pod`` object. The caller reports every move with :meth:`move`.
    """

    pods: list[Pod]
    """By pid: the pod (as found in the snapshot)."""
    loc: list[NodeInfo]
    """By pid: the node the pod is on now (moves change it)."""
    dead: int
    """Pids no longer in use (their pods left since an earlier index; see :meth:`_take_over`)."""
    postings: dict[tuple[str, str, str], list[int]]
    """(namespace, key, value) -> pids of the pods with that label value, in pid order."""
    anti_terms: dict[tuple[str, str], list[tuple[int, PodAffinityTerm]]]
    """(key, value) -> the required anti-affinity terms (with their pod's pid) that only pods with that label value
    can match."""
    anti_general: list[tuple[int, PodAffinityTerm]]
    """Required anti-affinity terms without an ``In`` requirement."""
    _blocks: dict[str, tuple[int, NodePart]]
    """Node name -> the pid of its block's first pod and the part the block came from."""
    _lazy: dict[str, list[int]]
    """Node name -> the pids :meth:`pid` assigned to its pods outside its block."""

    def __init__(self, snapshot: ClusterSnapshot, memo: TopologyMemo | None = None) -> None:
        """Index ``snapshot``. ``memo``, kept by the caller from one index to the next, spares re-reading
        the nodes whose pods did not change (:class:`TopologyMemo`) and takes the last index over, re-indexing
        only those nodes (:meth:`_take_over`); the index answers the same without it."""
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
        self.pid_of: dict[int, int] = {}
        """id(Pod object as found in the snapshot, or as moved) -> pid, filled as pods are asked about."""
        self._by_namespace: dict[str, list[int]] | None = None
        self._eligible: dict[Hashable, Domains] = {}
        self._ns_selector_cache: dict[tuple[frozenset[str], LabelSelector], tuple[str, ...]] = {}
        self._counted: dict[tuple[int | None, int, int, int, int], tuple[Pod, LabelSelector, Domains, dict[str, int]]]
        self._counted = {}
        """Spread counts (:meth:`_spread_counts`) since the last move: a pod's search asks for the same counts at
        every target it looks at. Keyed by the pid, the ids of the pod, selector and domains (kept with the counts,
        so the ids stay theirs) and the constraint's position."""
        kept = memo.index
        memo.index = None
        if isinstance(kept, TopologyIndex) and kept.keys == self.keys and kept.dead * 4 <= len(kept.pods):
            self._take_over(kept, infos, parts, memo)
        else:
            self.pods, self.loc, self.dead = [], [], 0
            self._blocks, self._lazy = {}, {}
            self.postings, self.anti_terms, self.anti_general = {}, {}, []
            self._index_blocks(list(zip(infos, parts, strict=True)), memo)
        memo.index = self
        memo.trim(len(self.postings), len(self.anti_terms))

    def _take_over(self, kept: TopologyIndex, infos: list[NodeInfo], parts: list[NodePart], memo: TopologyMemo) -> None:
        """Become ``kept`` (the memo's last index, built with the same indexed keys) for this snapshot: a node
        whose part is the one its block came from keeps its block and the pids given to its other pods (all
        placed on it again, undoing any move a plan left); the blocks and pids of the other nodes are retired
        (their entries dropped from the lists, their slots emptied and counted in :attr:`dead`) and those
        nodes are indexed anew at the end. New pids are greater than every pid in use, so the lists stay in
        pid order. ``kept`` is emptied: one index at a time. An index with too many dead pids is built anew
        instead (:meth:`__init__`)."""
        self.pods, self.loc, self.dead = kept.pods, kept.loc, kept.dead
        self.postings, self.anti_terms, self.anti_general = kept.postings, kept.anti_terms, kept.anti_general
        old_blocks, old_lazy = kept._blocks, kept._lazy
        kept.pods, kept.loc, kept.postings, kept.anti_terms, kept.anti_general = [], [], {}, {}, []
        kept._blocks, kept._lazy = {}, {}
        pods, loc = self.pods, self.loc
        self._blocks, self._lazy = {}, {}
        fresh: list[tuple[NodeInfo, NodePart]] = []
        gone: list[int] = []
        key_tuple = tuple(sorted(self.keys))
        for info, part in zip(infos, parts, strict=True):
            name = info.name
            had = old_blocks.pop(name, None)
            lazy = old_lazy.pop(name, None)
            if had is None or had[1] is not part:
                fresh.append((info, part))
                if had is not None:
                    old_blocks[name] = had  # retired below
                if lazy:
                    gone.extend(lazy)
                continue
            base = had[0]
            n = len(part.block(key_tuple, memo).pods)
            if n:
                loc[base : base + n] = [info] * n
            self._blocks[name] = had
            if lazy:
                self._lazy[name] = lazy
                for pid in lazy:
                    loc[pid] = info
                    self.pid_of[id(pods[pid])] = pid
        for lazy in old_lazy.values():
            gone.extend(lazy)
        self._retire(list(old_blocks.values()), gone, key_tuple, memo)
        self._index_blocks(fresh, memo)

    def _retire(
        self, blocks: list[tuple[int, NodePart]], lazy: list[int], key_tuple: tuple[str, ...], memo: TopologyMemo
    ) -> None:
        """Drop ``blocks`` (first pid, part) and the ``lazy`` pids: their entries leave the posting and
        anti-affinity lists, their slots hold nothing (:data:`_NO_POD` on :data:`_NO_NODE`)."""
        pods, loc = self.pods, self.loc
        postings: dict[int, set[int]] = {}
        anti: dict[int, set[int]] = {}
        general: set[int] = set()
        for base, part in blocks:
            block = part.block(key_tuple, memo)
            for off, slot in zip(block.offsets, block.slots, strict=True):
                postings.setdefault(slot, set()).add(base + off)
            entries = part.anti_entries(memo)
            for k, slot in zip(entries.pod_of, entries.slots, strict=True):
                anti.setdefault(slot, set()).add(base + block.anti_offsets[k])
            general.update(base + block.anti_offsets[k] for k in entries.general_pod_of)
            n = len(block.pods)
            pods[base : base + n] = [_NO_POD] * n
            loc[base : base + n] = [_NO_NODE] * n
            self.dead += n
        for pid in lazy:
            pods[pid], loc[pid] = _NO_POD, _NO_NODE
        self.dead += len(lazy)
        for slot, pids in postings.items():
            key = memo.posting_keys[slot]
            left = [pid for pid in self.postings[key] if pid not in pids]
            if left:
                self.postings[key] = left
            else:
                del self.postings[key]
        for slot, pids in anti.items():
            anti_key = memo.anti_keys[slot]
            entries_left = [e for e in self.anti_terms[anti_key] if e[0] not in pids]
            if entries_left:
                self.anti_terms[anti_key] = entries_left
            else:
                del self.anti_terms[anti_key]
        if general:
            self.anti_general[:] = [e for e in self.anti_general if e[0] not in general]

    def _index_blocks(self, nodes: list[tuple[NodeInfo, NodePart]], memo: TopologyMemo) -> None:
        """Appends every node's block of pods to ``pods`` and ``loc`` (recorded in ``_blocks``), and their entries
        to ``postings``, ``anti_terms`` and ``anti_general``."""
        key_tuple = tuple(sorted(self.keys))
        blocks = [part.block(key_tuple, memo) for _, part in nodes]
        antis = [part.anti_entries(memo) for _, part in nodes]  # numbers every key before the lists are sized
        # Pids: per node, a block in the order of its pods: the pods some selector could match (carrying
        # an indexed key), then its other pods with required anti-affinity. The other pods get one when
        # first asked about (:meth:`pid`), which most never are. Posting lists are in pid order; a posting
        # or anti-affinity entry is collected under the memo's number for its key, cheaper to look up.
        pods = self.pods
        loc = self.loc
        slots: list[list[int] | None] = [None] * len(memo.posting_keys)
        anti_slots: list[list[tuple[int, PodAffinityTerm]] | None] = [None] * len(memo.anti_keys)
        anti_general = self.anti_general
        for (info, part), (block, offsets, slot_of, anti_offsets), anti in zip(nodes, blocks, antis, strict=True):
            base = len(pods)
            self._blocks[info.name] = (base, part)
            if not block:
                continue
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
        _merge(self.postings, memo.posting_keys, slots)
        _merge(self.anti_terms, memo.anti_keys, anti_slots)

    # --- bookkeeping ------------------------------------------------------------------------------

    def move(self, pid: int, new_obj: Pod, to: NodeInfo) -> None:
        """Record that pod ``pid`` now runs on ``to`` as ``new_obj`` (labels and terms unchanged)."""
        self.loc[pid] = to
        self.pid_of[id(new_obj)] = pid
        self._counted.clear()

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
        self._counted.clear()
        self.pods.append(pod)
        self.loc.append(self.snapshot[pod.node_name])
        self.pid_of[id(pod)] = pid
        self._lazy.setdefault(pod.node_name, []).append(pid)
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
                if p is not _NO_POD:
                    by_ns.setdefault(p.namespace, []).append(pid)
            self._by_namespace = by_ns
        return self._by_namespace

    def _scope(self, term: PodAffinityTerm) -> Iterable[str]:
        """The namespaces a term covers (:func:`shared.interpod.term_covers_namespace`): its list, plus, with a
        namespaceSelector, every namespace of the cluster it covers."""
        ns_selector = term.namespace_selector
        if ns_selector is None:
            return term.namespaces
        cache_key = (term.namespaces, ns_selector)
        hit = self._ns_selector_cache.get(cache_key)
        if hit is None:
            labels_of = self.snapshot.namespace_labels
            present = set(self._namespaces()) | set(self.snapshot.namespaces)
            hit = tuple(sorted(n for n in present if term_covers_namespace(term, n, labels_of)))
            self._ns_selector_cache[cache_key] = hit
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
        """``shared.interpod.check_inter_pod_affinity`` for ``pod`` (``pid``, or None if not placed) on
        ``node``: affinity, then the pod's anti-affinity, then the existing pods' anti-affinity, as upstream."""
        labels = node.node.labels
        ns_labels = self.snapshot.namespace_labels
        pods = self.pods
        loc = self.loc

        if pod.pod_affinity:  # rarely taken: most pods have no required affinity
            r = self._check_affinity(pod, pid, labels)
            if r is not None:
                return r

        # antiAffinityCounts: a pod matching one of the pod's terms in that term's domain of the node.
        for t in pod.pod_anti_affinity:
            value = labels.get(t.topology_key)
            if value is None or t.selector is None:
                continue
            key = t.topology_key
            for cand in self._candidates(t.selector, self._scope(t)):
                if loc[cand].node.labels.get(key) != value or cand == pid:  # the domain first, as in _existing
                    continue
                ep = pods[cand]
                if not is_self(ep, pod) and term_matches(t, ep, ns_labels):
                    return ANTI_AFFINITY

        # existingAntiAffinityCounts: existing pods' anti-affinity terms that match the pod.
        anti_terms = self.anti_terms
        for k, v in pod.labels.items():
            entries = anti_terms.get((k, v))
            if entries:
                r = self._existing(entries, pod, pid, labels)
                if r is not None:
                    return r
        if self.anti_general:
            return self._existing(self.anti_general, pod, pid, labels)
        return None

    def _check_affinity(self, pod: Pod, pid: int | None, labels: Mapping[str, str]) -> Reason | None:
        """:func:`shared.interpod.affinity_verdict` for the pod's required affinity terms on a node with
        ``labels``, with ``affinityCounts`` gathered from the pods the first term's selector may match."""
        aff_terms = pod.pod_affinity
        if lacks_topology_key(aff_terms, labels):
            return AFFINITY  # the verdict's first rule, before any pod is looked at
        ns_labels = self.snapshot.namespace_labels
        pods = self.pods
        loc = self.loc
        found: dict[str, set[str]] = {}
        first = aff_terms[0]
        if first.selector is not None:  # a nil selector matches no pod
            for cand in self._candidates(first.selector, self._scope(first)):
                if cand == pid:
                    continue
                ep = pods[cand]
                if not is_self(ep, pod) and matches_all_terms(aff_terms, ep, ns_labels):
                    add_affinity_domains(found, aff_terms, loc[cand].node.labels)
        return affinity_verdict(pod, labels, found, ns_labels)

    def _existing(
        self, entries: list[tuple[int, PodAffinityTerm]], pod: Pod, pid: int | None, labels: Mapping[str, str]
    ) -> Reason | None:
        pods = self.pods
        loc = self.loc
        ns_labels = self.snapshot.namespace_labels
        for cand, t in entries:
            # The topology domain first: it rules out nearly every entry (the checks commute).
            key = t.topology_key
            value = labels.get(key)
            if value is None or loc[cand].node.labels.get(key) != value or cand == pid:
                continue
            if not is_self(pods[cand], pod) and term_matches(t, pod, ns_labels):
                return EXISTING_ANTI_AFFINITY
        return None

    # --- PodTopologySpread -------------------------------------------------------------------------

    def check_topology_spread(
        self, pod: Pod, pid: int | None, node: NodeInfo, switches: Switches = CURRENT
    ) -> Reason | None:
        """``shared.spread.check_topology_spread`` for ``pod`` on ``node``, with the same ``switches``: the
        rules are :mod:`shared.spread`'s, the counts are gathered from the pods the selectors may match."""
        constraints = hard_constraints(pod)
        if not constraints:
            return None
        labels = node.node.labels

        def check(all_nodes: bool) -> Reason | None:
            domains = self._domains(pod, constraints, all_nodes)

            def counted(i: int) -> Counted:
                c = constraints[i]
                counts = self._spread_counts(pod, pid, counting_selector(c, switches), i, domains)
                return Counted(counts, skew_threshold(c, pod, counts, domains.eligible[i], all_nodes=all_nodes))

            return filter_constraints(constraints, labels, counted)

        return under_rules(switches, check)

    def _domains(self, pod: Pod, constraints: tuple[TopologySpreadConstraint, ...], all_nodes: bool) -> Domains:
        """:func:`shared.spread.eligible_domains` over the snapshot, cached on what it depends on
        (:func:`shared.spread.domains_key`); moves do not change nodes."""
        cache_key = domains_key(pod, constraints, all_nodes=all_nodes)
        hit = self._eligible.get(cache_key)
        if hit is None:
            hit = self._eligible[cache_key] = eligible_domains(pod, constraints, self.snapshot, all_nodes=all_nodes)
        return hit

    def _spread_counts(
        self, pod: Pod, pid: int | None, selector: LabelSelector | None, i: int, domains: Domains
    ) -> dict[str, int]:
        """Per domain, the pods that count for constraint ``i`` with its ``selector``
        (:func:`shared.spread.counting_selector`, :func:`shared.spread.counts_toward`)."""
        counts: dict[str, int] = {}
        if selector is None:  # matches no pod (counts_toward); an empty selector here matches every pod
            return counts
        key = (pid, id(pod), id(selector), id(domains), i)
        kept = self._counted.get(key)
        if kept is not None and kept[0] is pod and kept[1] is selector and kept[2] is domains:
            return kept[3]
        of_node = domains.of_node
        pods = self.pods
        loc = self.loc
        for cand in self._candidates(selector, (pod.namespace,)):
            if cand == pid:
                continue
            values = of_node.get(id(loc[cand]))
            if values is None:
                continue
            v = values[i]
            if v is not None and counts_toward(pods[cand], pod, selector):
                counts[v] = counts.get(v, 0) + 1
        self._counted[key] = (pod, selector, domains, counts)
        return counts
