"""Which on-demand nodes can be emptied onto spot right now, and where each pod goes.

Pure: a :class:`~shared.snapshot.ClusterSnapshot` and a :class:`~shared.config.Config` in, a :class:`Plan`
out. The snapshot is used as the simulation's scratch space (moves are applied and undone through its
own methods) and is left as it came in; nothing here talks to a cluster.

Rules (DESIGN.md "Rescheduler" 2, 3, 5):

* Candidates are the on-demand nodes (:mod:`shared.classes`); targets are spot nodes that are Ready,
  schedulable and not being reclaimed (:func:`shared.classes.reclaim_reason`).
* A node is drained all or nothing: every pod must be movable (:func:`shared.movable.movability`; a
  BLOCK names the node's first blocking pod) and every movable pod must fit a target given every move
  planned before it; if one does not, the node's simulated moves are undone and the pod that did not fit,
  with the scheduler's reasons, is why the node stays.
* Every move is checked against the state after all earlier moves with the scheduler's filters, in
  kube-scheduler's order: node state, taints, node affinity, host ports, resources, volumes, topology
  spread, inter-pod affinity both directions. The node-local ones are the :mod:`shared` functions
  themselves; the two cluster-wide ones come from :class:`rescheduler.plan.topology.TopologyIndex`, an
  incremental equivalent of :mod:`shared.interpod`/:mod:`shared.spread` (their PreFilter rescans the
  cluster per pod per change: ~110 ms a check at 150,000 pods). ``verify=True`` re-checks every chosen
  move with the full :func:`shared.fit.fits` and refuses any it rejects, counting such disagreements
  (tests run that way and require none).
* PodDisruptionBudgets: the evictions planned per PDB, counted across nodes, never exceed its
  ``status.disruptionsAllowed``; a node whose pods would exceed a budget stays (before any eviction, so
  no drain stops half way). A pod selected by more than one PDB blocks (the Eviction API refuses it).
* Per-workload spot ceilings (``spot_ceiling`` annotations, workloads grouped by controller with a
  Deployment's ReplicaSets folded in, as the extender does) are kept: a node stays if moving its pods
  would put more than the allowed share of a workload on spot or leave fewer than its floor on on-demand.
* Expendable pods (priority below ``movability.expendable_priority_cutoff``) neither block nor move, and
  on a spot target they take no room: they are taken out of the targets for the simulation, since the
  scheduler preempts them for the pods that arrive.
* Pending unschedulable pods do not stop planning; ``summary["pending_unschedulable"]`` counts them and
  ``summary["safe_to_act"]`` is false, so the run loop pauses.

Packing. The quantity to maximise is the number of on-demand nodes emptied: a multi-dimensional bin
packing with all-or-nothing groups, coupled by PDB budgets and ceilings. What was measured against the
exact MILP optimum (``bench/plan_quality.py``, 24 generated instances of 30-60 nodes per profile), in the
order the mechanisms were added:

* pusher/k8s-spot-rescheduler's algorithm (nodes by least requested CPU, pods largest CPU first, first fit
  on spot nodes sorted fullest first): 95% of the optimum on average where PDB budgets decide, 81% where
  bin packing does;
* best fit (least free CPU that still fits, by bisection in a sorted free-CPU index per set of statically
  feasible targets), smallest node first (normalised CPU plus memory of its movable pods), pods largest
  first: ~95-97%. Its losses were of two kinds, fixed as follows;
* PDB budgets: a node taking the last disruption of two budgets costs two other nodes. Nodes are taken in
  the order of a greedy independent set, fewest conflicts first, re-ranked as budgets are used
  (:meth:`_Planner._dynamic_order`); then a local search holds back one drained node at a time and
  re-runs the strategies, keeping any plan that drains more (:func:`_improve`);
* scarce room: pods that may go to a small pool (spot nodes without the spot taint) compete with pods
  that could use any. Targets are tried least-wanted pool first ("tiered"), and nodes are weighted by
  how scarce the room their pods can use is ("scarcity"); a node whose pods do not fit is retried with
  memory-first best fit; and, on small clusters, each node that stays is tried once more: a bounded
  depth-first search for its pods in the room the plan leaves (:meth:`_Planner.extend`), else packing the
  drained nodes' pods and its own together, then replaying them node by node (:meth:`_Planner.repack`).

Together: 100% and 97.7% of the optimum on average on the two benchmark profiles (PDB-bound and
packing-bound), equal to it on 45 of 48 instances, never below pusher. The planner runs a portfolio of
these greedy strategies, *pusher's own order among them*, each from the same start, and keeps the plan
that drains the most nodes (then: fewest moves), so it never drains fewer nodes than the pusher
algorithm. Clusters with more than
``_IMPROVE_MAX_CANDIDATES`` drainable candidates run :data:`LARGE_PORTFOLIO` (three strategies, pusher's
included) and skip the local search: each pass costs ~0.3-0.5 s there, and the strategies differed little.

Speed, for 5,000 nodes and 150,000 pods: static predicates (taints, node affinity, volume zones, extended
resources) are evaluated once per (pod constraint signature, group of spot nodes with the same labels and
taints), ignoring per-node labels such as the hostname unless a pod refers to them; resources come from
per-feasible-set lists of free CPU and memory kept sorted as moves happen; a node whose movable pods need
more than all spot nodes have free fails without a search; a topology domain found closed to a pod (no
pod-affinity partner there, spread at the limit) is skipped for the rest of that pod's search; and the
cluster-wide filters are incremental (above). Between the run loop's cycles, a :class:`PlanCache` keeps
what was derived from each node's pods (movability, PDB matches, ceilings, workload counts, the topology
index's per-node parts) while the node holds the very same ``Pod`` objects, which the watch-backed state
keeps until an event replaces them: a cycle then re-derives only what changed (``bench/run_cycle.py``:
~0.7 s of CPU per cycle instead of ~1.7 s); the plans are the same with or without it.
"""

from __future__ import annotations

import bisect
import heapq
import operator
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rescheduler.plan.topology import TopologyIndex, TopologyMemo
from shared.classes import node_class, reclaim_reason
from shared.config import Config, SpotCeilingConfig
from shared.fit import fits
from shared.model import PDB, Pod
from shared.movable import is_expendable, movability
from shared.nodeaffinity import check_node_affinity
from shared.nodestate import check_ready, check_unschedulable
from shared.ports import check_host_ports
from shared.reasons import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_SPREAD,
    ERR_SPREAD_MISSING_LABEL,
    Reason,
)
from shared.resources import check_resources, is_scalar_resource
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.taints import check_taints
from shared.volumes import check_volumes

__all__ = [
    "Move",
    "Plan",
    "Strategy",
    "PUSHER",
    "PORTFOLIO",
    "LARGE_PORTFOLIO",
    "HELD_BACK",
    "plan",
    "PlanCache",
    "workload_key",
    "spot_ceiling",
]


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``pod`` (``namespace/name``) from ``source``; its replacement is expected on ``target``."""

    pod: str
    source: str
    target: str

    def to_json(self) -> dict[str, str]:
        return {"pod": self.pod, "from": self.source, "to": self.target}


@dataclass(frozen=True, slots=True)
class Plan:
    """Moves in the order they were planned (each valid after the ones before it), the nodes they empty,
    and for every other on-demand node one sentence saying why it stays."""

    moves: tuple[Move, ...]
    drained: tuple[str, ...]
    undrainable: Mapping[str, str]
    summary: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON: ``{"moves": [{"pod", "from", "to"}], "drained", "undrainable", "summary"}``."""
        return {
            "moves": [m.to_json() for m in self.moves],
            "drained": list(self.drained),
            "undrainable": dict(self.undrainable),
            "summary": dict(self.summary),
        }


@dataclass(frozen=True, slots=True)
class Strategy:
    """One greedy packing: the order of candidate nodes, the order of a node's pods, how a target is chosen.

    ``node_order``: ``requested-cpu`` (least requested CPU first, pusher's), ``size`` (normalised CPU plus
    memory of the pods to move), ``pods`` (fewest pods to move), ``scarcity`` (size weighted by how scarce
    the room its pods can use is), ``conflicts`` / ``conflicts-scarcity`` (fewest PDB-budget conflicts with
    other candidates first, re-ranked as budgets get used; ties by size / scarcity). ``pod_order``: ``cpu``
    (largest CPU request first, pusher's), ``memory`` or ``size`` (normalised CPU plus memory), ties by
    name. ``target``: ``first-fit`` (spot nodes by requested CPU, fullest first, pusher's), ``best-fit``
    (least free CPU that fits), ``best-fit-memory`` (least free memory that fits) or ``tiered`` (best fit
    in the least wanted group of spot nodes the pod may use first).
    """

    name: str
    node_order: str
    pod_order: str
    target: str
    retry: bool = True
    """When a node's pods do not all fit, try again with other placement rules (:data:`_RETRIES`)."""


PUSHER = Strategy("pusher", "requested-cpu", "cpu", "first-fit", retry=False)
_RETRIES = (("best-fit-memory", "memory"), ("best-fit", "cpu"))
PORTFOLIO: tuple[Strategy, ...] = (
    Strategy("best-fit", "conflicts", "size", "best-fit"),
    PUSHER,
    Strategy("best-fit-scarcity", "conflicts-scarcity", "size", "tiered"),
    Strategy("best-fit-least-contended", "conflicts", "size", "tiered"),
    Strategy("best-fit-by-size", "size", "size", "best-fit"),
    Strategy("best-fit-by-cpu", "requested-cpu", "cpu", "best-fit"),
    Strategy("best-fit-fewest-pods", "pods", "size", "best-fit"),
    Strategy("first-fit-by-size", "size", "size", "first-fit"),
)
LARGE_PORTFOLIO: tuple[Strategy, ...] = (PORTFOLIO[0], PUSHER, PORTFOLIO[3])
"""For clusters with more than ``_IMPROVE_MAX_CANDIDATES`` drainable candidates: each pass costs ~0.3-0.5 s
there (5,000 nodes), the other strategies drained within 3% of these, and the scarcity weighting costs a
pass of its own."""


_PLAIN = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


# --- workloads and ceilings ----------------------------------------------------------------------------


def workload_key(pod: Pod) -> str | None:
    """``namespace/Kind/name`` of the pod's controller; a Deployment's ReplicaSets fold into it (by the
    ``pod-template-hash`` label), so a rollout is one workload. Same grouping as the extender's."""
    ctrl = pod.controller
    if ctrl is None:
        return None
    kind, name = ctrl.kind, ctrl.name
    if kind == "ReplicaSet":
        h = pod.labels.get("pod-template-hash")
        if h and name.endswith("-" + h):
            kind, name = "Deployment", name[: -len(h) - 1]
    return f"{pod.namespace}/{kind}/{name}"


def _workload_counts(pods: Iterable[Pod]) -> dict[str, int]:
    """How many of ``pods`` each workload has (:func:`workload_key`, inlined: it runs over every pod)."""
    counts: dict[str, int] = {}
    for p in pods:
        owners = p.owners
        if not owners:
            continue
        for o in owners:
            if o.controller:
                break
        else:
            continue
        kind, name = o.kind, o.name
        if kind == "ReplicaSet":
            h = p.labels.get("pod-template-hash")
            if h and name.endswith("-" + h):
                kind, name = "Deployment", name[: -len(h) - 1]
        wk = f"{p.namespace}/{kind}/{name}"
        counts[wk] = counts.get(wk, 0) + 1
    return counts


def _annotation_int(annotations: Mapping[str, str], key: str, default: int, hi: int | None) -> int:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip().rstrip("%"))
    except ValueError:
        return default  # like the extender: a typo in an annotation falls back to the cluster default
    if value < 0 or (hi is not None and value > hi):
        return default
    return value


def spot_ceiling(pod: Pod, ceiling: SpotCeilingConfig) -> tuple[int, int]:
    """``(max percent of the workload on spot, min pods on on-demand)`` from the pod's annotations."""
    ann = pod.annotations
    return (
        _annotation_int(ann, ceiling.max_spot_percent_annotation, ceiling.default_max_spot_percent, 100),
        _annotation_int(ann, ceiling.min_on_demand_annotation, ceiling.default_min_on_demand, None),
    )


@dataclass(slots=True)
class _Share:
    spot: int = 0
    on_demand: int = 0
    total: int = 0


# --- per-run bookkeeping -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """A candidate node, analysed once: what must move, what blocks, what it needs."""

    info: NodeInfo
    movable: list[Pod]
    blocker: str | None
    pdbs: list[int | None]  # per movable pod: index of its PDB
    workloads: list[str | None]
    limits: list[tuple[int, int]]
    cpu: int = 0
    memory: int = 0
    size: float = 0.0
    conflicts: int = 0  # other candidates competing with this one for a scarce PDB budget
    cost: float = 0.0  # size weighted by the scarcity of the room its pods can use (see _scarcity)


# --- kept between plans --------------------------------------------------------------------------------

_Analysis = tuple[
    str | None, tuple[Pod, ...], tuple[int | None, ...], tuple[str | None, ...], tuple[tuple[int, int], ...], int, int
]
"""A candidate's :class:`_Work` without the per-plan parts: blocker, movable pods, their PDBs, workloads
and ceilings, summed CPU and memory."""


class _NodeMemo:
    """What a plan derived from one node's pods (``pods``: a copy of its list, post-preemption)."""

    __slots__ = ("pods", "epoch", "ready", "analysis", "workloads")

    def __init__(self, pods: tuple[Pod, ...]) -> None:
        self.pods = pods
        self.epoch = -1
        self.ready = False
        self.analysis: _Analysis | None = None
        self.workloads: dict[str, int] | None = None


def _same(kept: Sequence[Pod], now: Sequence[Pod]) -> bool:
    return len(kept) == len(now) and all(map(operator.is_, kept, now))


class PlanCache:
    """What :func:`plan` derives from each node's pods, kept from one call to the next: the run loop's cycles.

    The watch-backed state (:mod:`rescheduler.cluster.state`) hands every cycle the very ``Pod`` objects of the
    previous one until a watch event replaces one, so at 150,000 pods most of the per-pod work of a plan
    (movability, PodDisruptionBudget matches, ceilings, workloads, the topology index's postings) would
    be redone on the same objects. Per node, this keeps a copy of the pod list the values were derived
    from (strong references: an ``id`` is never reused while kept) and reuses them only while the node
    holds the same objects in the same order; what also depends on the configuration or the
    PodDisruptionBudgets (movability, PDB matches, ceilings) only while the configuration is equal and
    the PDBs are the same by namespace, name and selector, in the same order (a status update, such as a
    new ``disruptionsAllowed``, changes none of it). Nodes absent from a snapshot are forgotten. A plan
    made with a cache is the plan made without one. Not thread-safe: one planner at a time.
    """

    def __init__(self) -> None:
        self.topology = TopologyMemo()
        self.epoch = 0
        """Bumped when the configuration or the PDBs' selection changes: the analyses are then stale."""
        self._nodes: dict[str, _NodeMemo] = {}
        self._config: Config | None = None
        self._pdb_sig: tuple[tuple[str, str, Any], ...] | None = None
        self.pdb_index: tuple[dict[tuple[str, str, str], list[int]], dict[str, list[int]]] | None = None

    def begin(self, snapshot: ClusterSnapshot, config: Config, pdbs: Sequence[PDB]) -> dict[str, _NodeMemo]:
        """The memo of every node of ``snapshot`` (fresh where its pods changed), for one plan."""
        sig = tuple((p.namespace, p.name, p.selector) for p in pdbs)
        if self._config is None or (config is not self._config and config != self._config) or sig != self._pdb_sig:
            self.epoch += 1
            self._config = config
            self._pdb_sig = sig
            self.pdb_index = None
        kept = self._nodes
        fresh: dict[str, _NodeMemo] = {}
        for info in snapshot:
            pods = info.pods
            memo = kept.get(info.name)
            if memo is None or not _same(memo.pods, pods):
                memo = _NodeMemo(tuple(pods))
            fresh[info.name] = memo
        self._nodes = fresh
        return fresh


HELD_BACK = (
    "held back: draining it now would keep more nodes from draining (PDB budgets or spot room); "
    "a later cycle can take it"
)
_IMPROVE_MAX_CANDIDATES = 400
_IMPROVE_MAX_TRIALS = 40
_REPACK_MAX_MOVES = 8000
_SEARCH_STEPS = 1500
_SEARCH_TOTAL = 4000
_SEARCH_BRANCHES = 4
_SWAP_EXTENSIONS = 3
_SEARCH_SCAN = 24
_IMPROVE_NODE_VISITS = 6000


@dataclass(slots=True)
class _Result:
    strategy: Strategy
    held: frozenset[str] = frozenset()
    moves: list[tuple[Pod, str, str]] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    undrainable: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def better_than(self, other: _Result | None) -> bool:
        if other is None:
            return True
        return (len(self.drained), -len(self.moves)) > (len(other.drained), -len(other.moves))


class _SortedFree:
    """``(free amount, target index)`` of one set of statically feasible targets, kept sorted."""

    __slots__ = ("entries", "members")

    def __init__(self, members: Sequence[int], free: Sequence[int]) -> None:
        self.members = frozenset(members)
        self.entries = sorted((free[i], i) for i in members)

    def update(self, idx: int, old: int, new: int) -> None:
        e = self.entries
        j = bisect.bisect_left(e, (old, idx))
        del e[j]
        bisect.insort(e, (new, idx))


class _Skip:
    """Topology domains closed to one pod, learnt during one search for a target (state unchanged).

    The pod's affinity, anti-affinity and spread rejections depend on a node only through its values for
    the terms' topology keys (``shared.interpod``/``shared.spread`` PreFilter counts per domain), and are
    checked after the node-specific filters: once one node of a domain fails one of them, every other node
    of the domain fails too, by that check or an earlier one.
    """

    __slots__ = ("rules", "closed")

    def __init__(self, rules: list[tuple[str, Sequence[tuple[str | None, ...]]]]) -> None:
        self.rules = rules  # (reason code, per target index: its values for the rule's topology keys)
        self.closed: dict[str, set[tuple[str | None, ...]]] = {code: set() for code, _ in rules}

    def known(self, idx: int) -> str | None:
        for code, domains in self.rules:
            closed = self.closed[code]
            if closed and domains[idx] in closed:
                return code
        return None

    def learn(self, code: str, idx: int) -> None:
        for c, domains in self.rules:
            if c == code:
                self.closed[c].add(domains[idx])


class _Planner:
    """The simulation: set up once per :func:`plan` call, then one :meth:`run` per strategy."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: Config,
        *,
        verify: bool,
        cache: PlanCache | None = None,
        exclude: Mapping[str, str] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.exclude = exclude or {}
        self.cache = cache if cache is not None else PlanCache()
        self.config = config
        self.verify = verify
        self.verify_rejections = 0
        classes = config.node_classes
        cutoff = config.movability.expendable_priority_cutoff

        self.targets: list[NodeInfo] = []
        self.candidates: list[NodeInfo] = []
        self.class_of: dict[str, str] = {}
        self.not_targets: Counter[str] = Counter()
        for info in snapshot:
            node = info.node
            cls = node_class(node, classes)
            self.class_of[node.name] = cls
            if cls == "spot":
                if not node.ready:
                    self.not_targets["not ready"] += 1
                elif reclaim_reason(node, classes) is not None:
                    self.not_targets["being reclaimed or cordoned"] += 1
                else:
                    self.targets.append(info)
            elif cls == "on-demand":
                self.candidates.append(info)

        # Expendable pods on targets take no room: the scheduler preempts them. Out for the simulation
        # (and back in :meth:`restore`, also when anything below fails).
        self.preempted: list[Pod] = []
        for info in self.targets:
            for p in [p for p in info.pods if is_expendable(p, cutoff)]:
                snapshot.remove_pod(p)
                self.preempted.append(p)
        try:
            self._setup(snapshot, cutoff)
        except BaseException:
            self.restore()
            raise

    def _setup(self, snapshot: ClusterSnapshot, cutoff: int) -> None:
        self.topology = TopologyIndex(snapshot, self.cache.topology)
        self.free_cpu = [_free(info, "cpu") for info in self.targets]
        self.free_mem = [_free(info, "memory") for info in self.targets]
        self.free_pods = [_free(info, "pods") for info in self.targets]
        # Negated requested CPU per target: the sort key of pusher's "fullest first" order.
        self.neg_requested = [-info.requested.get("cpu", 0) for info in self.targets]
        # Totals of the positive free amounts, for the fail-fast capacity check.
        self.total_cpu = sum(f for f in self.free_cpu if f > 0)
        self.total_mem = sum(f for f in self.free_mem if f > 0)
        self.total_pods = sum(f for f in self.free_pods if f > 0)
        n = len(self.targets)
        alloc_cpu = sum(info.allocatable("cpu") for info in self.targets) or 1
        alloc_mem = sum(info.allocatable("memory") for info in self.targets) or 1
        self.ref_cpu = alloc_cpu / max(1, n)
        self.ref_mem = alloc_mem / max(1, n)

        self._setup_static()
        self._domains_of: dict[tuple[str, ...], list[tuple[str | None, ...]]] = {}
        self.pdbs: list[PDB] = list(snapshot.pdbs)
        self._memos = self.cache.begin(snapshot, self.config, self.pdbs)
        self._index_pdbs()
        self.work = [self._analyse(info) for info in self.candidates]
        for w in self.work:  # left alone by the caller: no PDB budget or spot room is spent on them
            if w.blocker is None and w.info.name in self.exclude:
                w.blocker = self.exclude[w.info.name]
        self.work_by_name = {w.info.name: w for w in self.work}
        self.search_left = _SEARCH_TOTAL
        self.shares = self._shares()
        self._count_conflicts()
        self.pending_unschedulable = sum(
            1 for p in snapshot.pending if p.unschedulable and not is_expendable(p, cutoff)
        )

    # --- setup ---------------------------------------------------------------------------------------

    def _setup_static(self) -> None:
        """Group targets by labels and taints, ignoring labels nearly unique per node (the hostname)."""
        n = len(self.targets)
        values: dict[str, set[str]] = {}
        for info in self.targets:
            for k, v in info.node.labels.items():
                values.setdefault(k, set()).add(v)
        limit = max(8, n // 4)
        self.volatile = frozenset(k for k, vs in values.items() if len(vs) > limit) | {"kubernetes.io/hostname"}
        groups: dict[Any, list[int]] = {}
        for i, info in enumerate(self.targets):
            node = info.node
            key = (
                frozenset((k, v) for k, v in node.labels.items() if k not in self.volatile),
                node.taints,
                frozenset((k, v) for k, v in node.allocatable.items() if k not in _PLAIN),
            )
            groups.setdefault(key, []).append(i)
        self.groups: list[list[int]] = list(groups.values())
        self._group_of = [0] * n
        for g, members in enumerate(self.groups):
            for i in members:
                self._group_of[i] = g
        self._group_demand: list[int] | None = None
        self._scarcity_done = False
        self._feasible: dict[Any, tuple[tuple[int, ...], Counter[str]]] = {}
        self._sorted: dict[tuple[tuple[int, ...], str], _SortedFree] = {}
        self._lists_of: list[list[_SortedFree]] = [[] for _ in range(n)]  # by free cpu
        self._mem_lists_of: list[list[_SortedFree]] = [[] for _ in range(n)]  # by free memory

    def _static_reason(self, pod: Pod, info: NodeInfo, extended: tuple[tuple[str, int], ...]) -> str | None:
        """The first failing filter that does not depend on what runs where (in ``fits`` order), as text.

        ``extended`` are the pod's requests other than cpu, memory and pods: a node whose allocatable is
        below one can never fit it, which spares scanning such nodes one by one (GPU pods).
        """
        node = info.node
        r = (
            check_ready(node)
            or check_unschedulable(pod, node)
            or check_taints(pod, node)
            or check_node_affinity(pod, node)
        )
        if r is not None:
            return r.message
        for name, want in extended:
            if want > info.allocatable(name):
                return f"Insufficient {name}"
        if pod.volumes:
            r = check_volumes(pod, node, self.snapshot)
            if r is not None:
                return r.message
        return None

    def _per_node(self, pod: Pod) -> bool:
        """Whether the pod's static constraints may tell apart nodes of one group (which share every
        label but the volatile ones, like the hostname): matchFields, a selector on a volatile label, or a
        bound volume whose PV's node affinity or zone label is about one."""
        volatile = self.volatile
        snap = self.snapshot
        for v in pod.volumes:
            if v.kind == "persistentVolumeClaim":
                claim = v.claim_name
            elif v.kind == "ephemeral":
                claim = f"{pod.name}-{v.name}"
            else:
                continue
            if not _ZONE_KEYS.isdisjoint(volatile):
                return True
            pvc = snap.pvcs.get(f"{pod.namespace}/{claim}")
            pv = snap.pvs.get(pvc.volume_name) if pvc is not None and pvc.volume_name else None
            if pv is not None and pv.node_affinity is not None:
                for term in pv.node_affinity.terms:
                    if term.fields or any(r.key in volatile for r in term.expressions):
                        return True
        for k in pod.node_selector:
            if k in volatile:
                return True
        req = pod.required_affinity
        if req is not None:
            for term in req.terms:
                if term.fields:
                    return True
                for r in term.expressions:
                    if r.key in volatile:
                        return True
        return False

    def feasible(self, pod: Pod) -> tuple[tuple[int, ...], Counter[str], tuple[int, ...] | None]:
        """Targets passing the static filters, the static reasons of the others (counted), and the groups
        the targets make up (``None`` when the pod was checked node by node)."""
        per_node = self._per_node(pod)
        extended = tuple(
            sorted((k, v) for k, v in pod.requests.items() if v > 0 and k not in _PLAIN and is_scalar_resource(k))
        )
        key: Any = (
            pod.tolerations,
            tuple(sorted(pod.node_selector.items())),
            pod.required_affinity,
            extended,
            (pod.namespace, pod.name, pod.volumes) if per_node or _has_claims(pod) else None,
        )
        hit = self._feasible.get(key)
        if hit is not None:
            return hit
        ok: list[int] = []
        why: Counter[str] = Counter()
        targets = self.targets
        groups: list[int] = []
        for g, members in enumerate(self.groups):
            if per_node:
                for i in members:
                    r = self._static_reason(pod, targets[i], extended)
                    if r is None:
                        ok.append(i)
                    else:
                        why[r] += 1
            else:
                r = self._static_reason(pod, targets[members[0]], extended)
                if r is None:
                    ok.extend(members)
                    groups.append(g)
                else:
                    why[r] += len(members)
        result = (tuple(sorted(ok)), why, None if per_node else tuple(groups))
        self._feasible[key] = result
        return result

    def _scarcity(self) -> None:
        """Each candidate's pods weighted by how scarce their room is: a pod's CPU and memory as shares of
        the free CPU and memory of the targets it may use. A node whose pods can only go to a small pool
        (spot nodes without the spot taint, say) costs more than an equally big node whose pods fit the
        large pool, so the greedy takes the latter first."""
        if self._scarcity_done:
            return
        totals: dict[tuple[int, ...], tuple[float, float]] = {}
        for w in self.work:
            cost = 0.0
            if w.blocker is None:
                for p in w.movable:
                    feasible = self.feasible(p)[0]
                    t = totals.get(feasible)
                    if t is None:
                        t = totals[feasible] = (
                            float(max(1, sum(max(0, self.free_cpu[i]) for i in feasible))),
                            float(max(1, sum(max(0, self.free_mem[i]) for i in feasible))),
                        )
                    cost += p.requests.get("cpu", 0) / t[0] + p.requests.get("memory", 0) / t[1]
            w.cost = cost
        self._scarcity_done = True

    def _contention(self) -> list[int]:
        """Per group of targets, how many movable pods could use it. A pod that may go to several groups
        is put in the least wanted one first (the tainted pool before the pool everyone can use), which
        keeps the scarce, widely usable room for the pods that have no other choice."""
        if self._group_demand is None:
            demand = [0] * len(self.groups)
            for w in self.work:
                if w.blocker is None:
                    for p in w.movable:
                        groups = self.feasible(p)[2]
                        if groups is not None:
                            for g in groups:
                                demand[g] += 1
            self._group_demand = demand
        return self._group_demand

    def sorted_free(self, members: tuple[int, ...], resource: str = "cpu") -> _SortedFree:
        sl = self._sorted.get((members, resource))
        if sl is None:
            memory = resource == "memory"
            sl = self._sorted[(members, resource)] = _SortedFree(members, self.free_mem if memory else self.free_cpu)
            lists = self._mem_lists_of if memory else self._lists_of
            for i in members:
                lists[i].append(sl)
        return sl

    def _index_pdbs(self) -> None:
        """PDBs by the label value a pod must have to be selected (a ``matchLabels`` entry), so a pod is
        matched against the few PDBs that can select it, not against every PDB of its namespace. Kept in
        the cache while the PDBs' selection is unchanged (it depends on nothing else)."""
        if self.cache.pdb_index is None:
            index: dict[tuple[str, str, str], list[int]] = {}
            general: dict[str, list[int]] = {}
            for i, pdb in enumerate(self.pdbs):
                sel = pdb.selector
                if sel is None:
                    continue  # selects no pod
                anchor = None
                for r in sel.requirements:
                    if r.operator == "In" and (anchor is None or len(r.values) < len(anchor.values)):
                        anchor = r
                if anchor is None:
                    general.setdefault(pdb.namespace, []).append(i)
                else:
                    for v in anchor.values:
                        index.setdefault((pdb.namespace, anchor.key, v), []).append(i)
            self.cache.pdb_index = (index, general)
        self._pdb_index, self._pdb_general = self.cache.pdb_index

    def _pdbs_selecting(self, pod: Pod) -> list[int]:
        ns = pod.namespace
        index = self._pdb_index
        found: list[int] = []
        for k, v in pod.labels.items():
            hit = index.get((ns, k, v))
            if hit:
                found.extend(hit)
        found.extend(self._pdb_general.get(ns, ()))
        pdbs = self.pdbs
        return sorted({i for i in found if pdbs[i].selects(pod)})

    def _analyse(self, info: NodeInfo) -> _Work:
        memo = self._memos[info.name]
        ready = info.node.ready
        a = memo.analysis
        if a is None or memo.epoch != self.cache.epoch or memo.ready != ready:
            a = memo.analysis = self._analyse_pods(memo.pods, ready)
            memo.epoch = self.cache.epoch
            memo.ready = ready
        blocker, movable, pdb_of, workloads, limits, cpu, memory = a
        work = _Work(info, list(movable), blocker, list(pdb_of), list(workloads), list(limits), cpu, memory)
        work.size = cpu / self.ref_cpu + memory / self.ref_mem
        return work

    def _analyse_pods(self, pods: Sequence[Pod], ready: bool) -> _Analysis:
        """A candidate's pods: what must move, what blocks (depends on the pods, the configuration and
        the PDBs' selection only: :class:`PlanCache` keeps it)."""
        movable: list[Pod] = []
        pdb_of: list[int | None] = []
        workloads: list[str | None] = []
        limits: list[tuple[int, int]] = []
        blocker: str | None = None
        if not ready:
            blocker = "node is not ready"
        config = self.config
        for p in pods:
            if blocker is not None:
                break
            matching = self._pdbs_selecting(p)
            # movability reads the PDBs only to know whether one selects the pod: these are all that do.
            m = movability(p, config, [self.pdbs[i] for i in matching])
            if m.blocks:
                blocker = f"pod {p.key}: {m.reason}"
                break
            if not m.moves:
                continue
            if len(matching) > 1:
                names = ", ".join(self.pdbs[i].key for i in matching)
                blocker = (
                    f"pod {p.key}: selected by more than one PodDisruptionBudget ({names}), which evictions refuse"
                )
                break
            movable.append(p)
            pdb_of.append(matching[0] if matching else None)
            workloads.append(workload_key(p))
            limits.append(spot_ceiling(p, config.spot_ceiling))
        cpu = memory = 0
        for p in movable:
            cpu += p.requests.get("cpu", 0)
            memory += p.requests.get("memory", 0)
        return (blocker, tuple(movable), tuple(pdb_of), tuple(workloads), tuple(limits), cpu, memory)

    def _count_conflicts(self) -> None:
        """For each candidate, how many others want a PDB budget it wants when there is not enough for all.

        Draining a node that eats a scarce budget can cost two other nodes; ordering such nodes late is the
        classic greedy for independent sets (fewest conflicts first).
        """
        users: dict[int, list[_Work]] = {}
        for w in self.work:
            if w.blocker is None:
                for i in set(i for i in w.pdbs if i is not None):
                    users.setdefault(i, []).append(w)
        for i, ws in users.items():
            need = sum(sum(1 for j in w.pdbs if j == i) for w in ws)
            if need > self.pdbs[i].disruptions_allowed:
                for w in ws:
                    w.conflicts += len(ws) - 1

    def _shares(self) -> dict[str, _Share]:
        """Current spot/on-demand split of every workload with a restrictive ceiling among the movable pods."""
        wanted = {
            wk
            for w in self.work
            for wk, (pct, floor) in zip(w.workloads, w.limits, strict=True)
            if wk is not None and (pct < 100 or floor > 0)
        }
        shares: dict[str, _Share] = {wk: _Share() for wk in wanted}
        if not wanted:
            return shares
        memos = self._memos
        class_of = self.class_of
        for info in self.snapshot:
            memo = memos[info.name]
            counts = memo.workloads
            if counts is None:
                counts = memo.workloads = _workload_counts(memo.pods)
            common = counts.keys() & wanted
            if not common:
                continue
            cls = class_of.get(info.name)
            for wk in common:
                n = counts[wk]
                share = shares[wk]
                share.total += n
                if cls == "spot":
                    share.spot += n
                elif cls == "on-demand":
                    share.on_demand += n
        for p in self.preempted:  # they still count as the workload's pods on spot
            wk = workload_key(p)
            share = shares.get(wk) if wk is not None else None
            if share is not None:
                share.total += 1
                share.spot += 1
        return shares

    # --- moves ------------------------------------------------------------------------------------------

    def _set_free(self, idx: int) -> None:
        info = self.targets[idx]
        new = _free(info, "cpu")
        old = self.free_cpu[idx]
        if new != old:
            for sl in self._lists_of[idx]:
                sl.update(idx, old, new)
            self.free_cpu[idx] = new
            self.total_cpu += max(0, new) - max(0, old)
            self.neg_requested[idx] = -info.requested.get("cpu", 0)
        new, old = _free(info, "memory"), self.free_mem[idx]
        if new != old:
            for sl in self._mem_lists_of[idx]:
                sl.update(idx, old, new)
            self.free_mem[idx] = new
            self.total_mem += max(0, new) - max(0, old)
        new, old = _free(info, "pods"), self.free_pods[idx]
        self.free_pods[idx] = new
        self.total_pods += max(0, new) - max(0, old)

    def apply(self, pod: Pod, idx: int) -> Pod:
        target = self.targets[idx]
        pid = self.topology.pid(pod)
        moved = self.snapshot.move_pod(pod, target.name)
        self.topology.move(pid, moved, target)
        self._set_free(idx)
        return moved

    def undo(self, original: Pod, moved: Pod, idx: int) -> None:
        snap = self.snapshot
        pid = self.topology.pid(moved)
        snap.remove_pod(moved)
        snap.add_pod(original)
        self.topology.move(pid, original, snap[original.node_name])
        self._set_free(idx)

    # --- fit ---------------------------------------------------------------------------------------------

    def dynamic_reason(self, pod: Pod, info: NodeInfo) -> Reason | None:
        """The filters that depend on what runs where, in ``shared.fit.fits`` order (static ones passed)."""
        if pod.host_ports:
            r = check_host_ports(pod, info)
            if r is not None:
                return r
        insufficient = check_resources(pod, info)
        if insufficient:
            return insufficient[0]
        pid = self.topology.pid(pod)
        if pod.topology_spread:
            r = self.topology.check_topology_spread(pod, pid, info)
            if r is not None:
                return r
        return self.topology.check_inter_pod_affinity(pod, pid, info)

    def _skip(self, pod: Pod) -> _Skip | None:
        """A :class:`_Skip` for the pod's topology terms (``None`` if it has none)."""
        rules: list[tuple[str, Sequence[tuple[str | None, ...]]]] = []
        if pod.pod_affinity:
            rules.append((ERR_AFFINITY, self._domains(tuple(t.topology_key for t in pod.pod_affinity))))
        if pod.pod_anti_affinity:
            rules.append((ERR_ANTI_AFFINITY, self._domains(tuple(t.topology_key for t in pod.pod_anti_affinity))))
        spread = tuple(c.topology_key for c in pod.topology_spread if c.when_unsatisfiable == "DoNotSchedule")
        if spread:
            domains = self._domains(spread)
            rules.append((ERR_SPREAD, domains))
            rules.append((ERR_SPREAD_MISSING_LABEL, domains))
        return _Skip(rules) if rules else None

    def _domains(self, keys: tuple[str, ...]) -> list[tuple[str | None, ...]]:
        """Per target, its labels' values for ``keys`` (targets keep their labels throughout a plan)."""
        domains = self._domains_of.get(keys)
        if domains is None:
            domains = self._domains_of[keys] = [tuple(t.node.labels.get(k) for k in keys) for t in self.targets]
        return domains

    def accept(self, pod: Pod, idx: int, why: Counter[str] | None, skip: _Skip | None = None) -> bool:
        """Whether ``pod`` may go to target ``idx`` now; a rejection is counted in ``why``.

        ``skip`` remembers topology domains already found closed to this pod during one search (a zone
        where its pod affinity has no partner, or whose spread is at the limit): the other nodes of such a
        domain fail the same way, and are not checked one by one.
        """
        info = self.targets[idx]
        if skip is not None:
            known = skip.known(idx)
            if known is not None:
                if why is not None:
                    why[known] += 1
                return False
        r = self.dynamic_reason(pod, info)
        if r is not None:
            if why is not None:
                why[r.message] += 1
            if skip is not None:
                skip.learn(r.code, idx)
            return False
        if self.verify:
            full = fits(pod, info, self.snapshot, first_only=True)
            if full:
                # The incremental checks and the library disagree: a planner bug. Never emit the move.
                self.verify_rejections += 1
                if why is not None:
                    why[full[0].message] += 1
                return False
        return True

    def best_fit(self, pod: Pod, feasible: tuple[int, ...], why: Counter[str], resource: str = "cpu") -> int | None:
        """The feasible target with the least free ``resource`` (cpu or memory) that takes the pod."""
        sl = self.sorted_free(feasible, resource)
        cpu = pod.requests.get("cpu", 0)
        mem = pod.requests.get("memory", 0)
        entries = sl.entries
        by_memory = resource == "memory"
        start = bisect.bisect_left(entries, (mem if by_memory else cpu, -1))
        if start:
            why["Insufficient memory" if by_memory else "Insufficient cpu"] += start
        other, need, lack = (
            (self.free_cpu, cpu, "Insufficient cpu") if by_memory else (self.free_mem, mem, "Insufficient memory")
        )
        free_pods = self.free_pods
        skip = self._skip(pod)
        for j in range(start, len(entries)):
            idx = entries[j][1]
            if free_pods[idx] < 1:
                why["Too many pods"] += 1
                continue
            if other[idx] < need:
                why[lack] += 1
                continue
            if skip is not None:  # what accept() checks first, without the call: most scanned nodes end here
                known = skip.known(idx)
                if known is not None:
                    why[known] += 1
                    continue
            if self.accept(pod, idx, why, skip):
                return idx
        return None

    def first_fit(self, pod: Pod, order: Sequence[int], feasible: tuple[int, ...], why: Counter[str]) -> int | None:
        members = self.sorted_free(feasible).members
        cpu = pod.requests.get("cpu", 0)
        mem = pod.requests.get("memory", 0)
        free_cpu, free_mem, free_pods = self.free_cpu, self.free_mem, self.free_pods
        skip = self._skip(pod)
        for idx in order:
            if idx not in members:
                continue
            if free_pods[idx] < 1:
                why["Too many pods"] += 1
                continue
            if free_cpu[idx] < cpu:
                why["Insufficient cpu"] += 1
                continue
            if free_mem[idx] < mem:
                why["Insufficient memory"] += 1
                continue
            if skip is not None:  # as in best_fit
                known = skip.known(idx)
                if known is not None:
                    why[known] += 1
                    continue
            if self.accept(pod, idx, why, skip):
                return idx
        return None

    # --- one strategy ----------------------------------------------------------------------------------

    def run(self, strategy: Strategy, held: frozenset[str] = frozenset()) -> _Result:
        """One greedy pass; ``held`` are candidates not drained on purpose (the improvement step)."""
        started = time.perf_counter()
        result = _Result(strategy, held=held)
        pdb_used = [0] * len(self.pdbs)
        shares = {k: _Share(v.spot, v.on_demand, v.total) for k, v in self.shares.items()}
        applied: list[tuple[Pod, Pod, int]] = []  # (original, moved, target idx) of committed nodes
        try:
            if strategy.node_order == "conflicts":
                order: Iterable[_Work] = self._dynamic_order(pdb_used, held, _size)
            elif strategy.node_order == "conflicts-scarcity":
                self._scarcity()
                order = self._dynamic_order(pdb_used, held, _cost)
            else:
                order = self._order(strategy)
            for w in order:
                name = w.info.name
                if w.blocker is not None:
                    result.undrainable[name] = w.blocker
                    continue
                if name in held:
                    result.undrainable[name] = HELD_BACK
                    continue
                why = self._budgets(w, pdb_used, shares)
                if why is None:
                    why = self._capacity(w)
                if why is None:
                    moved, why = self._place(w, strategy.target, strategy.pod_order)
                    if why is not None and strategy.retry:
                        # The usual rule left the room too fragmented for this node: other rules may not.
                        for target, pod_order in _RETRIES:
                            again, still = self._place(w, target, pod_order)
                            if still is None:
                                moved, why = again, None
                                break
                    if why is None:
                        applied.extend(moved)
                        for original, _, idx in moved:
                            result.moves.append((original, name, self.targets[idx].name))
                        self._commit(w, pdb_used, shares)
                        result.drained.append(name)
                        continue
                result.undrainable[name] = why
        finally:
            for original, moved_pod, idx in reversed(applied):
                self.undo(original, moved_pod, idx)
        result.seconds = time.perf_counter() - started
        return result

    def _dynamic_order(
        self, pdb_used: list[int], held: frozenset[str], tie: Callable[[_Work], float]
    ) -> Iterator[_Work]:
        """Candidates fewest-conflicts first, re-evaluated as budgets get used (greedy independent set).

        A candidate conflicts with another when both want a PDB whose remaining budget cannot serve all
        the candidates still wanting it. After each node (drained or not) the candidates sharing a PDB
        with it are re-ranked; ``pdb_used`` is the caller's running count, read at each step. Ties: the
        smaller node (normalised size) first, then the snapshot's order. Blocked nodes come last.
        """
        need: list[Counter[int]] = [Counter(i for i in w.pdbs if i is not None) for w in self.work]
        allowed = [p.disruptions_allowed for p in self.pdbs]
        # Candidates that can never be drained (a budget too small for them alone) or are held back do
        # not compete for budgets: they come last.
        open_ = [
            w.blocker is None and w.info.name not in held and all(n <= allowed[b] for b, n in need[k].items())
            for k, w in enumerate(self.work)
        ]
        users: dict[int, set[int]] = {}
        total: Counter[int] = Counter()
        for k in range(len(self.work)):
            if open_[k]:
                for b, n in need[k].items():
                    users.setdefault(b, set()).add(k)
                    total[b] += n

        def conflicts(k: int) -> int:
            c = 0
            for b in need[k]:
                if total[b] > allowed[b] - pdb_used[b]:
                    c += len(users[b]) - 1
            return c

        heap = [(conflicts(k), tie(w), k) for k, w in enumerate(self.work) if open_[k]]
        heapq.heapify(heap)
        done = [False] * len(self.work)
        while heap:
            c, _, k = heapq.heappop(heap)
            if done[k]:
                continue
            now = conflicts(k)
            if now != c:
                heapq.heappush(heap, (now, tie(self.work[k]), k))
                continue
            done[k] = True
            for b, n in need[k].items():
                users[b].discard(k)
                total[b] -= n
            yield self.work[k]
            touched = {m for b in need[k] for m in users[b]}
            for m in touched:
                heapq.heappush(heap, (conflicts(m), tie(self.work[m]), m))
        for k, w in enumerate(self.work):
            if not done[k]:
                yield w

    def _order(self, strategy: Strategy) -> list[_Work]:
        key: Callable[[_Work], Any]
        if strategy.node_order == "requested-cpu":
            key = lambda w: w.info.requested.get("cpu", 0)  # noqa: E731
        elif strategy.node_order == "pods":
            key = lambda w: (len(w.movable), w.size)  # noqa: E731
        elif strategy.node_order == "scarcity":
            self._scarcity()
            key = _cost
        else:
            key = lambda w: w.size  # noqa: E731
        return sorted(self.work, key=key)  # stable: ties keep the snapshot's node order

    def _budgets(self, w: _Work, pdb_used: list[int], shares: Mapping[str, _Share]) -> str | None:
        """PDB budgets and spot ceilings for all of the node's pods at once, before anything moves."""
        need: Counter[int] = Counter(i for i in w.pdbs if i is not None)
        for p, i in zip(w.movable, w.pdbs, strict=True):
            if i is None:
                continue
            pdb = self.pdbs[i]
            if pdb_used[i] + need[i] > pdb.disruptions_allowed:
                planned = f", {pdb_used[i]} already planned" if pdb_used[i] else ""
                return (
                    f"pod {p.key}: PodDisruptionBudget {pdb.key} allows {pdb.disruptions_allowed} disruption(s)"
                    f"{planned}, this node needs {need[i]}"
                )
        per_workload: Counter[str] = Counter(wk for wk in w.workloads if wk is not None and wk in shares)
        for p, wk, (pct, floor) in zip(w.movable, w.workloads, w.limits, strict=True):
            if wk is None or wk not in shares:
                continue
            share = shares[wk]
            k = per_workload[wk]
            if share.on_demand - k < floor:
                return f"pod {p.key}: workload {wk} must keep at least {floor} pod(s) on on-demand nodes"
            if pct < 100 and (share.spot + k) * 100 > pct * share.total:
                return (
                    f"pod {p.key}: workload {wk} may run at most {pct}% of its {share.total} pods on spot "
                    f"({share.spot} already do)"
                )
        return None

    def _commit(self, w: _Work, pdb_used: list[int], shares: Mapping[str, _Share]) -> None:
        for i in w.pdbs:
            if i is not None:
                pdb_used[i] += 1
        for wk in w.workloads:
            share = shares.get(wk) if wk is not None else None
            if share is not None:
                share.spot += 1
                share.on_demand -= 1

    def _capacity(self, w: _Work) -> str | None:
        """Fail fast: the node's pods need more than every target has free together."""
        if not w.movable:
            return None
        if not self.targets:
            return f"pod {w.movable[0].key}: {_fit_error(0, Counter())}"
        free_cpu, free_mem, free_pods = self.total_cpu, self.total_mem, self.total_pods
        if w.cpu > free_cpu or w.memory > free_mem or len(w.movable) > free_pods:
            return (
                f"its {len(w.movable)} pod(s) need {_cpu(w.cpu)} CPU and {_mem(w.memory)} memory, "
                f"all spot nodes together have {_cpu(free_cpu)} CPU, {_mem(free_mem)} and {free_pods} pod slot(s) free"
            )
        return None

    def _place(self, w: _Work, target: str, pod_order: str) -> tuple[list[tuple[Pod, Pod, int]], str | None]:
        """Place every movable pod of ``w`` (applied), or none (undone) and why the first misfit failed."""
        # Ties are broken by the pod's name, so a plan does not depend on the order pods are listed in.
        if pod_order == "cpu":
            pods = sorted(w.movable, key=lambda p: (-p.requests.get("cpu", 0), p.key))
        elif pod_order == "memory":
            pods = sorted(w.movable, key=lambda p: (-p.requests.get("memory", 0), p.key))
        else:
            rc, rm = self.ref_cpu, self.ref_mem
            pods = sorted(
                w.movable, key=lambda p: (-(p.requests.get("cpu", 0) / rc + p.requests.get("memory", 0) / rm), p.key)
            )
        order: list[int] = []
        if target == "first-fit":
            order = sorted(range(len(self.targets)), key=self.neg_requested.__getitem__)
        moved: list[tuple[Pod, Pod, int]] = []
        for pod in pods:
            why: Counter[str] = Counter()
            idx = self._choose(pod, target, order, why)
            if idx is None:
                for original, moved_pod, i in reversed(moved):
                    self.undo(original, moved_pod, i)
                why.update(self.feasible(pod)[1])
                return [], f"pod {pod.key}: {_fit_error(len(self.targets), why)}"
            moved.append((pod, self.apply(pod, idx), idx))
        return moved, None

    def _choose(self, pod: Pod, target: str, order: Sequence[int], why: Counter[str]) -> int | None:
        feasible, _, groups = self.feasible(pod)
        if target == "first-fit":
            return self.first_fit(pod, order, feasible, why)
        if target == "best-fit-memory":
            return self.best_fit(pod, feasible, why, "memory")
        if target == "tiered" and groups is not None and len(groups) > 1:
            for g in sorted(groups, key=self._contention().__getitem__):
                idx = self.best_fit(pod, tuple(self.groups[g]), why)
                if idx is not None:
                    return idx
            return None
        return self.best_fit(pod, feasible, why)

    def _search(self, movable: Sequence[Pod]) -> list[tuple[Pod, Pod, int]] | None:
        """Depth-first search for a placement of all of ``movable`` when the greedy rules found none.

        Greedy best fit can split room badly (550m and 300m on one node leave no gap for a third pod that
        fits exactly another way); a bounded search over each pod's few best candidates, largest pod first,
        finds such packings. Candidates that look alike (same free CPU, memory, pod slots and group) are
        tried once. Every step applies a real, checked move, so what it returns is as valid as greedy's.
        At most ``_SEARCH_STEPS`` moves are tried per search and ``_SEARCH_TOTAL`` per plan. The moves found
        are left applied; ``None`` leaves the state as it was.
        """
        rc, rm = self.ref_cpu, self.ref_mem
        pods = sorted(
            movable, key=lambda p: (-(p.requests.get("cpu", 0) / rc + p.requests.get("memory", 0) / rm), p.key)
        )
        moved: list[tuple[Pod, Pod, int]] = []
        budget = [min(_SEARCH_STEPS, self.search_left)]
        group_of = self._group_of

        def candidates(pod: Pod) -> list[int]:
            """The pod's best-fitting targets by free CPU, distinct in shape, at most ``_SEARCH_BRANCHES``
            (and at most ``_SEARCH_SCAN`` looked at, so a step costs the same on any cluster size)."""
            entries = self.sorted_free(self.feasible(pod)[0]).entries
            cpu, mem = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
            seen: set[tuple[int, int, int, int]] = set()
            out: list[int] = []
            skip = self._skip(pod)
            start = bisect.bisect_left(entries, (cpu, -1))
            for fc, idx in entries[start : start + _SEARCH_SCAN]:
                fm, fp = self.free_mem[idx], self.free_pods[idx]
                if fm < mem or fp < 1:
                    continue
                shape = (fc, fm, fp, group_of[idx])
                if shape in seen:
                    continue
                if self.accept(pod, idx, None, skip):
                    seen.add(shape)
                    out.append(idx)
                    if len(out) == _SEARCH_BRANCHES:
                        break
            return out

        def dfs(i: int) -> bool:
            if i == len(pods):
                return True
            pod = pods[i]
            for idx in candidates(pod):
                if budget[0] <= 0:
                    return False
                budget[0] -= 1
                moved.append((pod, self.apply(pod, idx), idx))
                if dfs(i + 1):
                    return True
                original, moved_pod, j = moved.pop()
                self.undo(original, moved_pod, j)
            return False

        start = budget[0]
        found = dfs(0)
        self.search_left -= start - budget[0]
        if found:
            return moved
        for original, moved_pod, j in reversed(moved):
            self.undo(original, moved_pod, j)
        return None

    def extend(self, best: _Result, extra: _Work) -> _Result | None:
        """``best`` as it is, plus ``extra`` placed by :meth:`_search` in the room ``best`` leaves."""
        nodes = [self.work_by_name[n] for n in best.drained]
        pdb_used = [0] * len(self.pdbs)
        shares = {k: _Share(v.spot, v.on_demand, v.total) for k, v in self.shares.items()}
        for w in nodes:
            self._commit(w, pdb_used, shares)
        if self._budgets(extra, pdb_used, shares) is not None or self._capacity(extra) is not None:
            return None
        index = {t.name: i for i, t in enumerate(self.targets)}
        applied: list[tuple[Pod, Pod, int]] = []
        try:
            for pod, _, target in best.moves:
                idx = index[target]
                applied.append((pod, self.apply(pod, idx), idx))
            if self._capacity(extra) is not None:
                return None
            found = self._search(extra.movable)
            if found is None:
                return None
            applied.extend(found)
            result = _Result(best.strategy, held=best.held)
            result.moves = list(best.moves) + [(p, extra.info.name, self.targets[i].name) for p, _, i in found]
            result.drained = [*best.drained, extra.info.name]
            result.undrainable = {k: v for k, v in best.undrainable.items() if k != extra.info.name}
            return result
        finally:
            for original, moved_pod, i in reversed(applied):
                self.undo(original, moved_pod, i)

    def repack(self, best: _Result, extra: _Work) -> _Result | None:
        """``best``'s drained nodes plus ``extra``, packed anew: all their pods together, largest first,
        least contended room first; then replayed node by node with every check, as plans are executed.

        Node-by-node greedy fixes each node's placements before it sees the next node's pods; packing the
        union at once often finds room the sequence fragmented. ``None`` if the union does not fit, a
        budget or ceiling forbids it, or the node-by-node replay finds a move invalid.
        """
        nodes = [self.work_by_name[n] for n in best.drained] + [extra]
        pdb_used = [0] * len(self.pdbs)
        shares = {k: _Share(v.spot, v.on_demand, v.total) for k, v in self.shares.items()}
        for w in nodes:
            if self._budgets(w, pdb_used, shares) is not None:
                return None
            self._commit(w, pdb_used, shares)
        rc, rm = self.ref_cpu, self.ref_mem

        def size(p: Pod) -> tuple[float, str]:
            return (-(p.requests.get("cpu", 0) / rc + p.requests.get("memory", 0) / rm), p.key)

        pods = sorted((p for w in nodes for p in w.movable), key=size)
        target_of: dict[int, int] = {}
        placed: list[tuple[Pod, Pod, int]] = []
        try:
            for p in pods:
                idx = self._choose(p, "tiered", (), Counter())
                if idx is None:
                    break
                target_of[id(p)] = idx
                placed.append((p, self.apply(p, idx), idx))
            else:
                pods = []
        finally:
            for original, moved, i in reversed(placed):
                self.undo(original, moved, i)
        if pods:  # greedy did not fit the union: search
            target_of.clear()
            found = self._search([p for w in nodes for p in w.movable])
            if found is None:
                return None
            for original, moved, i in reversed(found):
                target_of[id(original)] = i
                self.undo(original, moved, i)
        result = _Result(best.strategy, held=best.held)
        applied: list[tuple[Pod, Pod, int]] = []
        try:
            for w in nodes:
                for p in sorted(w.movable, key=size):
                    idx = target_of[id(p)]
                    if not self.accept(p, idx, None):
                        return None
                    applied.append((p, self.apply(p, idx), idx))
                    result.moves.append((p, w.info.name, self.targets[idx].name))
                result.drained.append(w.info.name)
        finally:
            for original, moved, i in reversed(applied):
                self.undo(original, moved, i)
        result.undrainable = {k: v for k, v in best.undrainable.items() if k != extra.info.name}
        return result

    def restore(self) -> None:
        for p in self.preempted:
            self.snapshot.add_pod(p)


_ZONE_KEYS = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)


def _has_claims(pod: Pod) -> bool:
    for v in pod.volumes:
        if v.kind in ("persistentVolumeClaim", "ephemeral"):
            return True
    return False


def _size(w: _Work) -> float:
    return w.size


def _cost(w: _Work) -> float:
    return w.cost


def _free(info: NodeInfo, resource: str) -> int:
    return info.free(resource)


def _fit_error(n: int, why: Counter[str]) -> str:
    """kube-scheduler's FitError wording: ``0/12 spot nodes are available: 8 Insufficient cpu, ...``."""
    if n == 0:
        return "there are no spot nodes that are ready, schedulable and not being reclaimed"
    parts = ", ".join(f"{count} {msg}" for msg, count in sorted(why.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{n} spot nodes are available: {parts}" if parts else f"0/{n} spot nodes are available"


def _cpu(milli: int) -> str:
    return f"{milli / 1000:.2f}".rstrip("0").rstrip(".") if milli % 1000 else str(milli // 1000)


def _mem(b: int) -> str:
    return f"{b / 2**30:.1f}Gi"


def _reason_kind(reason: str) -> str:
    """A reason without the pod name and counts, for "top reasons" (``pod a/b: X`` → ``X``)."""
    if reason.startswith("pod ") and ": " in reason:
        reason = reason.split(": ", 1)[1]
    if reason.startswith("0/") and ": " in reason:
        first = reason.split(": ", 1)[1].split(", ")[0]
        return "no spot node fits: " + first.split(" ", 1)[1] if " " in first else reason
    if reason.startswith("PodDisruptionBudget "):
        return "PodDisruptionBudget budget exhausted"
    if reason.startswith("workload ") and "spot" in reason:
        return "per-workload spot ceiling"
    if reason.startswith("its ") and "all spot nodes together" in reason:
        return "not enough free spot capacity"
    return reason


def _extend_any(planner: _Planner, result: _Result, attempts: int) -> _Result | None:
    """``result`` plus one more node placed by search (:meth:`_Planner.extend`), trying at most ``attempts``
    candidates that stay in it; ``None`` if none fits."""
    for w in planner.work:
        if attempts <= 0 or planner.search_left <= 0:
            return None
        name = w.info.name
        if w.blocker is None and name not in result.held and name in result.undrainable:
            attempts -= 1
            extended = planner.extend(result, w)
            if extended is not None:
                return extended
    return None


def _improve(planner: _Planner, best: _Result, strategies: Sequence[Strategy]) -> _Result:
    """Local search on the best plan, keeping any change that drains more nodes:

    1. hold back one drained node at a time and re-run the strategies (fixes greedy's typical mistake, a
       node that takes the last disruption of two PodDisruptionBudgets each needed by another node);
    2. for each node that stays, search a placement for its pods in the room the plan leaves
       (:meth:`_Planner.extend`), else pack it together with the drained nodes' pods (:meth:`_Planner.repack`).

    Bounded so plans stay reproducible and fast: only for clusters with at most
    ``_IMPROVE_MAX_CANDIDATES`` drainable candidates, at most ``_IMPROVE_MAX_TRIALS`` re-runs and
    attempts, and a step budget for the searches; budgets count work, not time, so a plan does not depend
    on how busy the machine is.
    """
    open_candidates = sum(1 for w in planner.work if w.blocker is None)
    if open_candidates > _IMPROVE_MAX_CANDIDATES:
        return best
    trials = 0
    visits = 0  # candidate nodes processed by the re-runs: the work budget, whatever the cluster size
    tried: set[str] = set()
    improved = True
    while improved and trials < _IMPROVE_MAX_TRIALS:
        improved = False
        for name in list(best.drained):
            if name in tried or trials >= _IMPROVE_MAX_TRIALS:
                continue
            tried.add(name)
            trials += 1
            for strategy in strategies:
                if visits + len(planner.work) > _IMPROVE_NODE_VISITS:
                    break
                visits += len(planner.work)
                result = planner.run(strategy, best.held | {name})
                if len(result.drained) == len(best.drained):
                    # As many nodes, drained differently: the room left may now take one more.
                    result = _extend_any(planner, result, _SWAP_EXTENSIONS) or result
                if result.better_than(best):
                    best = result
                    improved = True
                    break
            if improved:
                break
    attempts = 0
    replayed = 0  # moves re-applied by extend/repack: their work budget
    for w in planner.work:
        name = w.info.name
        if w.blocker is not None or name in best.held or name not in best.undrainable:
            continue
        cost = len(best.moves) + len(w.movable)
        if attempts >= _IMPROVE_MAX_TRIALS or replayed + 2 * cost > _REPACK_MAX_MOVES:
            break
        attempts += 1
        replayed += 2 * cost
        result = planner.extend(best, w) or planner.repack(best, w)
        if result is not None:
            best = result
    return best


def plan(
    snapshot: ClusterSnapshot,
    config: Config | None = None,
    *,
    strategies: Iterable[Strategy] | None = None,
    verify: bool = False,
    time_budget: float | None = None,
    improve: bool = True,
    cache: PlanCache | None = None,
    exclude: Mapping[str, str] | None = None,
) -> Plan:
    """Plan the drains for ``snapshot`` (left unchanged) under ``config`` (default: ``Config()``).

    Runs each strategy from the same start and keeps the best plan (most nodes drained, then fewest
    moves), then tries to improve it (:func:`_improve`, small clusters only). ``strategies`` defaults to
    :data:`PORTFOLIO`, or :data:`LARGE_PORTFOLIO` (pusher's included) for clusters with more than
    ``_IMPROVE_MAX_CANDIDATES`` drainable candidates, where each run costs more and the extra strategies
    were measured to change little. With ``time_budget`` (seconds), strategies after the first
    are skipped once the budget would be exceeded, judging by the slowest run so far, and the improvement
    step is skipped once it is spent. ``verify`` re-checks
    every move with :func:`shared.fit.fits` and refuses any it rejects; ``summary["verify_rejections"]`` counts
    them (a disagreement is a planner bug: tests require zero). ``cache``, kept by the caller from one call
    to the next (the run loop's cycles), spares re-deriving what depends only on pods that did not change
    (:class:`PlanCache`); the plan is the same with or without it. ``exclude`` maps on-demand nodes the
    caller will not drain now (backing off, marked, cordoned) to the reason: they are not candidates, so the
    PodDisruptionBudget allowances and spot room they would take go to the nodes that can be drained.
    """
    config = config if config is not None else Config()
    started = time.perf_counter()
    planner = _Planner(snapshot, config, verify=verify, cache=cache, exclude=exclude)
    best: _Result | None = None
    ran: list[str] = []
    slowest = 0.0
    try:
        if strategies is None:
            large = sum(1 for w in planner.work if w.blocker is None) > _IMPROVE_MAX_CANDIDATES
            strategies = LARGE_PORTFOLIO if large else PORTFOLIO
        strategies = tuple(strategies)
        for strategy in strategies:
            elapsed = time.perf_counter() - started
            if best is not None and time_budget is not None and elapsed + slowest > time_budget:
                break
            result = planner.run(strategy)
            slowest = max(slowest, result.seconds)
            ran.append(strategy.name)
            if result.better_than(best):
                best = result
        within_budget = time_budget is None or time.perf_counter() - started < time_budget
        if improve and best is not None and within_budget:
            best = _improve(planner, best, [s for s in strategies if s.retry] or [best.strategy])
    finally:
        planner.restore()
    if best is None:
        best = _Result(Strategy("none", "size", "size", "best-fit"))
    undrainable = {w.info.name: best.undrainable[w.info.name] for w in planner.work if w.info.name in best.undrainable}
    kinds = Counter(_reason_kind(r) for r in undrainable.values())
    summary: dict[str, Any] = {
        "on_demand_nodes": len(planner.candidates),
        "spot_targets": len(planner.targets),
        "spot_not_targets": sum(planner.not_targets.values()),
        "drained": len(best.drained),
        "pods_moved": len(best.moves),
        "undrainable": len(undrainable),
        "pending_unschedulable": planner.pending_unschedulable,
        "safe_to_act": planner.pending_unschedulable == 0,
        "strategy": best.strategy.name,
        "strategies_tried": ran,
        "freed_cpu_millicores": sum(snapshot[n].allocatable("cpu") for n in best.drained),
        "freed_memory_bytes": sum(snapshot[n].allocatable("memory") for n in best.drained),
        "top_reasons": [{"reason": r, "nodes": c} for r, c in kinds.most_common(5)],
    }
    if verify:
        summary["verify_rejections"] = planner.verify_rejections
    moves = tuple(Move(p.key, src, dst) for p, src, dst in best.moves)
    return Plan(moves, tuple(best.drained), undrainable, summary)
