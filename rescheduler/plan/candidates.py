"""The candidate on-demand nodes of one plan, analysed once: what must move, what blocks, what each pod needs.

A candidate is drained all or nothing, so the first pod that may not move (:func:`shared.movable.movability`,
the node not Ready, the node carrying another tool's do-not-disrupt annotation
(:func:`shared.movable.node_do_not_disrupt`), a pod selected by more than one PodDisruptionBudget, which the
Eviction API refuses) is why it stays. For the others this records, per pod to move, its
PodDisruptionBudget, its workload and that workload's spot ceiling (:mod:`shared.workloads`), and the node's
summed requests; the budgets and ceilings are then enforced by :mod:`rescheduler.plan.budgets`.

Whether an eviction uses its budget is the Eviction API's rule (:mod:`shared.eviction`): a ``Pending`` pod's
never does (recorded with the pod), a not-Ready pod's depends on the budget's policy and current status, so it
is decided for each plan (:attr:`Candidate.budgets`), not kept between cycles.

Between the run loop's cycles, a :class:`PlanCache` keeps what was derived from each node's pods while the
node holds the very same ``Pod`` objects (the watch-backed state keeps them until an event replaces one),
so a cycle re-derives only what changed; it also keeps the last plan, handed out again while nothing it is made from
changed (:mod:`rescheduler.plan.last_plan`), and the last plan's packing passes, replayed where a change did not
touch them (:mod:`rescheduler.plan.replay`). A plan is the same with or without it.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from rescheduler.plan.gate import RULE_KINDS, hold_candidates
from rescheduler.plan.last_plan import LastPlan
from rescheduler.plan.replay import Replays
from rescheduler.plan.simulation import Preemptions, Simulation
from rescheduler.plan.stay_reasons import (
    NODE_DO_NOT_DISRUPT_TEXT,
    NODE_NOT_READY_TEXT,
    NODEPOOLS_UNREADABLE_TEXT,
    PDB_UNKNOWN_POLICY_TEXT,
    Kind,
    StayReason,
)
from rescheduler.plan.topology_memo import TopologyMemo
from rescheduler.plan.waiting import EmptiedCache
from rescheduler.plan.worth import eviction_cost
from shared.config import Config
from shared.eviction import FREE, REFUSED, budget_use, ignores_budgets
from shared.model import PDB, Pod
from shared.movable import movability, node_do_not_disrupt
from shared.nodepools import consolidation_toward_spot, node_pool_of
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.workloads import SpotCeiling, spot_ceiling, workload_counts, workload_key

__all__ = ["Analysis", "Candidate", "Candidates", "PlanCache", "left_to_karpenter"]


@dataclass(frozen=True, slots=True)
class Analysis:
    """What a candidate's pods say, independent of the rest of the plan (kept by :class:`PlanCache`)."""

    blocker: StayReason | None
    movable: tuple[Pod, ...]
    pdbs: tuple[int | None, ...]
    """Per movable pod: the position of its PodDisruptionBudget in the snapshot's list, if one selects it and its
    eviction reads budgets at all (a ``Pending`` pod's does not: :func:`shared.eviction.ignores_budgets`)."""
    workloads: tuple[str | None, ...]
    ceilings: tuple[SpotCeiling, ...]
    cpu: int
    memory: int
    unready: tuple[int, ...] = ()
    """Positions (in ``movable``) of the pods with a budget that are not Ready: whether their evictions use it
    depends on the budget's policy and current status (:func:`shared.eviction.budget_use`)."""
    eviction_cost: float = 0.0
    """What evicting every pod of ``movable`` costs (:func:`~rescheduler.plan.worth.eviction_cost`, summed in order)."""


@dataclass(slots=True)
class Candidate:
    """A candidate node in one plan: its :class:`Analysis` and what the orders rank it by."""

    info: NodeInfo
    analysis: Analysis
    size: float = 0.0
    """Normalised CPU plus memory of the pods to move."""
    conflicts: int = 0
    """Other candidates competing with this one for a scarce PodDisruptionBudget budget."""
    cost: float = 0.0
    """Size weighted by the scarcity of the room its pods can use (:meth:`Candidates.scarcity`)."""
    left_alone: StayReason | None = None
    """Set when the caller leaves the node alone this cycle (:data:`~rescheduler.plan.stay_reasons.Kind.LEFT_ALONE`)."""
    held: StayReason | None = None
    """Set when an operator's control makes the node wait (:func:`rescheduler.plan.gate.hold_candidates`)."""
    budgets: tuple[int | None, ...] = ()
    """Per movable pod: the budget its eviction uses in this plan (``analysis.pdbs`` but for not-Ready pods the
    Eviction API lets go without using theirs)."""
    refused: StayReason | None = None
    """Set when a not-Ready pod's budget has a policy the Eviction API rules here do not know."""

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def blocker(self) -> StayReason | None:
        return self.analysis.blocker or self.refused or self.left_alone or self.held

    @property
    def movable(self) -> tuple[Pod, ...]:
        return self.analysis.movable


def left_to_karpenter(info: NodeInfo, snapshot: ClusterSnapshot, config: Config) -> StayReason | None:
    """Why the node is left to Karpenter (``karpenter.defer_to_consolidation``), or ``None`` when it is the
    rescheduler's: a node of no NodePool, of a NodePool that does not exist (deleted), or of one that does not
    consolidate toward spot (:func:`shared.nodepools.consolidation_toward_spot`). A node of a NodePool while the
    NodePools cannot be read is not drained: whether Karpenter consolidates it is unknown."""
    if not config.karpenter.defer_to_consolidation:
        return None
    name = node_pool_of(info.node)
    if name is None:
        return None
    if snapshot.node_pools_problem is not None:
        detail = NODEPOOLS_UNREADABLE_TEXT.format(pool=name, problem=snapshot.node_pools_problem)
        return StayReason(Kind.KARPENTER_UNREADABLE, detail)
    pool = snapshot.node_pools.get(name)
    if pool is None:
        return None
    consolidates, why = consolidation_toward_spot(pool)
    return StayReason(Kind.KARPENTER_CONSOLIDATES, why) if consolidates else None


class _NodeMemo:
    """What a plan derived from one node's pods (``pods``: a copy of its list, post-preemption)."""

    __slots__ = ("pods", "stamp", "epoch", "ready", "analysis", "workloads")

    def __init__(self, pods: tuple[Pod, ...]) -> None:
        self.pods = pods
        self.stamp = 0
        """The :attr:`~shared.snapshot.NodeInfo.stamp` of the node's pods when last compared."""
        self.epoch = -1
        self.ready = False
        self.analysis: Analysis | None = None
        self.workloads: dict[str, int] | None = None


def _same(kept: Sequence[Pod], now: Sequence[Pod]) -> bool:
    return len(kept) == len(now) and all(map(operator.is_, kept, now))


class PlanCache:
    """What a plan derives from each node's pods, kept from one call to the next: the run loop's cycles.

    The watch-backed state (:mod:`rescheduler.cluster.watch_cache`) hands every cycle the very ``Pod`` objects of the
    previous one until a watch event replaces one, so at 150,000 pods most of the per-pod work of a plan
    (movability, PodDisruptionBudget matches, ceilings, workloads, the topology index's postings) would
    be redone on the same objects. Per node, this keeps a copy of the pod list the values were derived
    from (strong references: an ``id`` is never reused while kept) and reuses them only while the node
    holds the same objects in the same order (the same :attr:`~shared.snapshot.NodeInfo.stamp`, else compared
    one by one); what also depends on the configuration or the
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
        self._pdb_sig: tuple[Hashable, ...] | None = None
        self.pdb_index: PdbIndex | None = None
        self.emptied = EmptiedCache()
        """The on-demand nodes as they would be emptied, for the pods waiting for a node (:mod:`.waiting`)."""
        self.last: LastPlan[object] = LastPlan()
        """The last plan made with this cache, while nothing it is made from changed (:mod:`.last_plan`)."""
        self.replays = Replays()
        """The last plan's packing passes, replayed where nothing they read changed (:mod:`.replay`)."""
        self.preemptions = Preemptions()
        """The stamps the targets took when their expendable pods were taken out (:class:`.simulation.Preemptions`)."""
        self._aside: PlanCache | None = None

    def aside(self) -> PlanCache:
        """A second cache, kept as long as this one, for the plans made beside the caller's (the plan without the
        waiting pods' spot room, :func:`rescheduler.plan.planner.plan`), so neither spoils the other's memos."""
        if self._aside is None:
            self._aside = PlanCache()
        return self._aside

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
            if memo is None or (memo.stamp != info.stamp and not _same(memo.pods, pods)):
                memo = _NodeMemo(tuple(pods))
            memo.stamp = info.stamp
            fresh[info.name] = memo
        self._nodes = fresh
        return fresh


class Candidates:
    """Every candidate of one plan, analysed, with the PodDisruptionBudgets they draw on."""

    def __init__(
        self,
        sim: Simulation,
        cache: PlanCache,
        exclude: Mapping[str, str | StayReason] | None = None,
        now: float | None = None,
    ) -> None:
        self.sim = sim
        self.config = sim.config
        self.pdbs: list[PDB] = list(sim.snapshot.pdbs)
        self.memos = cache.begin(sim.snapshot, self.config, self.pdbs)
        # The index depends on the budgets' selection only: kept in the cache while that is unchanged.
        if cache.pdb_index is None:
            cache.pdb_index = PdbIndex(self.pdbs)
        self.pdb_index = cache.pdb_index
        self.epoch = cache.epoch
        self.work = [self._candidate(info) for info in sim.candidates]
        for w in self.work:  # left alone by the caller: no PDB budget or spot room is spent on them
            why = exclude.get(w.name) if exclude else None
            if why is not None:
                w.left_alone = why if isinstance(why, StayReason) else StayReason(Kind.LEFT_ALONE, why)
        if now is not None:
            hold_candidates(self.work, sim.snapshot, self.config, now)
        self.by_name = {w.name: w for w in self.work}
        self._group_demand: list[int] | None = None
        self._least_wanted: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._scarcity_done = False

    def open_count(self) -> int:
        """How many candidates nothing blocks."""
        return sum(1 for w in self.work if w.blocker is None)

    def _candidate(self, info: NodeInfo) -> Candidate:
        marker = node_do_not_disrupt(info.node, self.config)
        if marker is not None:  # read from the node each time: its annotations are not in the pods' memo
            why = StayReason(Kind.NODE_DO_NOT_DISRUPT, NODE_DO_NOT_DISRUPT_TEXT.format(key=marker))
            return Candidate(info, Analysis(why, (), (), (), (), 0, 0))
        karpenter = left_to_karpenter(info, self.sim.snapshot, self.config)
        if karpenter is not None:  # like the marker: the node's label and the NodePools are not in the memo
            return Candidate(info, Analysis(karpenter, (), (), (), (), 0, 0))
        memo = self.memos[info.name]
        ready = info.node.ready
        a = memo.analysis
        if a is None or memo.epoch != self.epoch or memo.ready != ready:
            a = memo.analysis = self._analyse(memo.pods, ready)
            memo.epoch = self.epoch
            memo.ready = ready
        budgets, refused = self._budgets(a)
        size = a.cpu / self.sim.ref_cpu + a.memory / self.sim.ref_mem
        return Candidate(info, a, size=size, budgets=budgets, refused=refused)

    def _budgets(self, a: Analysis) -> tuple[tuple[int | None, ...], StayReason | None]:
        """:attr:`Candidate.budgets` and :attr:`Candidate.refused` from the budgets' status in this plan."""
        if not a.unready:
            return a.pdbs, None
        budgets = list(a.pdbs)
        for k in a.unready:
            i = budgets[k]
            assert i is not None
            pdb = self.pdbs[i]
            use = budget_use(a.movable[k], pdb)
            if use is FREE:
                budgets[k] = None
            elif use is REFUSED:
                detail = PDB_UNKNOWN_POLICY_TEXT.format(pdb=pdb.key, policy=pdb.unhealthy_pod_eviction_policy)
                return a.pdbs, StayReason(Kind.PDB_UNKNOWN_POLICY, detail, pod=a.movable[k].key)
        return tuple(budgets), None

    def _analyse(self, pods: Sequence[Pod], ready: bool) -> Analysis:
        """A candidate's pods: what must move, what blocks (depends on the pods, the configuration and
        the PDBs' selection only: :class:`PlanCache` keeps it)."""
        movable: list[Pod] = []
        pdb_of: list[int | None] = []
        unready: list[int] = []
        workloads: list[str | None] = []
        ceilings: list[SpotCeiling] = []
        blocker: StayReason | None = None
        if not ready:
            blocker = StayReason(Kind.NODE_NOT_READY, NODE_NOT_READY_TEXT)
        config = self.config
        for p in pods:
            if blocker is not None:
                break
            matching = self.pdb_index.indices(p)
            # movability reads the PDBs only to know whether one selects the pod: these are all that do.
            m = movability(p, config, [self.pdbs[i] for i in matching])
            if m.blocks:
                kind = RULE_KINDS.get(m.reason, Kind.NOT_MOVABLE)
                blocker = StayReason(kind, m.reason, pod=p.key, cause=m.reason)
                break
            if not m.moves:
                continue
            if ignores_budgets(p):
                matching = []
            if len(matching) > 1:
                names = ", ".join(self.pdbs[i].key for i in matching)
                blocker = StayReason(
                    Kind.MULTIPLE_PDBS,
                    f"selected by more than one PodDisruptionBudget ({names}), which evictions refuse",
                    pod=p.key,
                )
                break
            if matching and not p.ready:
                unready.append(len(movable))
            movable.append(p)
            pdb_of.append(matching[0] if matching else None)
            workloads.append(workload_key(p))
            ceilings.append(spot_ceiling(p.annotations, config.spot_ceiling))
        cpu = memory = 0
        for p in movable:
            cpu += p.requests.get("cpu", 0)
            memory += p.requests.get("memory", 0)
        worth = config.worth
        cost = sum(eviction_cost(p, worth) for p in movable)
        return Analysis(
            blocker, tuple(movable), tuple(pdb_of), tuple(workloads), tuple(ceilings), cpu, memory, tuple(unready), cost
        )

    def workload_counts(self, info: NodeInfo) -> dict[str, int]:
        """Pods per workload on one node (kept in the node's memo)."""
        memo = self.memos[info.name]
        counts = memo.workloads
        if counts is None:
            counts = memo.workloads = workload_counts(memo.pods)
        return counts

    def scarcity(self) -> None:
        """Each candidate's pods weighted by how scarce their room is: a pod's CPU and memory as shares of
        the free CPU and memory of the targets it may use. A node whose pods can only go to a small pool
        (spot nodes without the spot taint, say) costs more than an equally big node whose pods fit the
        large pool, so the greedy takes the latter first."""
        if self._scarcity_done:
            return
        sim = self.sim
        totals: dict[tuple[int, ...], tuple[float, float]] = {}
        for w in self.work:
            cost = 0.0
            if w.blocker is None:
                for p in w.movable:
                    feasible = sim.feasible(p).targets
                    t = totals.get(feasible)
                    if t is None:
                        t = totals[feasible] = (
                            float(max(1, sum(max(0, sim.free_cpu[i]) for i in feasible))),
                            float(max(1, sum(max(0, sim.free_mem[i]) for i in feasible))),
                        )
                    cost += p.requests.get("cpu", 0) / t[0] + p.requests.get("memory", 0) / t[1]
            w.cost = cost
        self._scarcity_done = True

    def contention(self) -> list[int]:
        """Per group of targets, how many movable pods could use it. A pod that may go to several groups
        is put in the least wanted one first (the tainted pool before the pool everyone can use), which
        keeps the scarce, widely usable room for the pods that have no other choice."""
        if self._group_demand is None:
            demand = [0] * len(self.sim.static.groups)
            for w in self.work:
                if w.blocker is None:
                    for p in w.movable:
                        groups = self.sim.feasible(p).groups
                        if groups is not None:
                            for g in groups:
                                demand[g] += 1
            self._group_demand = demand
        return self._group_demand

    def least_wanted_first(self, groups: tuple[int, ...]) -> tuple[int, ...]:
        """``groups`` by :meth:`contention`, least wanted first (ties keep their order); kept per tuple of
        groups, as the contention does not change during a plan."""
        hit = self._least_wanted.get(groups)
        if hit is None:
            hit = self._least_wanted[groups] = tuple(sorted(groups, key=self.contention().__getitem__))
        return hit
