"""The planner's simulation: the spot targets, what is free on them, and moves applied and undone.

Every move the planner considers is applied to the snapshot itself (:meth:`Simulation.apply`, through the
snapshot's own methods) and undone if the node it belongs to does not drain, so each check sees the state
after every earlier move. Alongside, the free CPU, memory and pod slots of every target are kept, sorted per
set of statically feasible targets when read (:class:`SortedFree`) for best fit by bisection, as is pusher's
fullest-first order (:class:`FullestFirst`) for first fit, and the cluster-wide filters (inter-pod affinity,
topology spread) are answered by the incremental :class:`~rescheduler.plan.topology.TopologyIndex`.
Expendable pods on spot targets are taken out for the simulation (the scheduler preempts them for the pods
that arrive) and put back by :meth:`Simulation.restore`, so the snapshot is left as it came in; spotshift's
placeholder pods (:mod:`shared.placeholders`) are treated alike whatever their priority.

With reclaims remembered (the snapshot's :attr:`~shared.snapshot.ClusterSnapshot.spot_outlook`,
:mod:`shared.spot_pools`), a spot node of an unsettled pool is not a target (counted in ``not_targets`` and
``unsettled``), and the targets are split into :attr:`Simulation.tiers` by their pool's expected stay, steadiest
first: the placement rules try each tier in turn (:func:`rescheduler.plan.placement.choose`). Without any
reclaim remembered there is one tier and nothing changes.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import compress, count, repeat
from operator import ge, is_

from rescheduler.plan.feasibility import Feasible, StaticFilter
from rescheduler.plan.safety import unschedulable_pods
from rescheduler.plan.topology import TopologyIndex
from rescheduler.plan.topology_memo import TopologyMemo
from shared.classes import node_class, reclaim_reason
from shared.config import Config
from shared.controls import target_too_young
from shared.fit import fits
from shared.fit_reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_SPREAD, ERR_SPREAD_MISSING_LABEL, Reason
from shared.model import Pod
from shared.movable import is_expendable
from shared.placeholders import is_placeholder
from shared.ports import check_host_ports
from shared.resources import check_resources, requests_anything
from shared.snapshot import ClusterSnapshot, NodeInfo, Saved
from shared.spot_pools import pool_of
from shared.switches import CURRENT, Switches

__all__ = ["Simulation", "SortedFree", "FullestFirst", "Skip", "Placed", "UNSETTLED_POOL", "stay_tiers"]

Placed = tuple[Pod, Pod, int]
"""A move applied to the simulation: the original pod, the pod as moved, the target's index."""

UNSETTLED_POOL = "spot pool reclaimed within spot.stability_window"
"""The ``not_targets`` count of spot nodes whose pool is unsettled."""


def stay_tiers(stays: Sequence[float]) -> tuple[frozenset[int], ...]:
    """The target indices grouped by expected stay (``stays[i]`` of target ``i``), the longest first; ``()`` when
    all are alike (one tier: nothing to prefer)."""
    by_stay: dict[float, list[int]] = {}
    for i, stay in enumerate(stays):
        by_stay.setdefault(stay, []).append(i)
    if len(by_stay) < 2:
        return ()
    return tuple(frozenset(by_stay[stay]) for stay in sorted(by_stay, reverse=True))


class SortedFree:
    """``(free amount, target index)`` of one set of statically feasible targets, sorted when read.

    A move changes the free amount of one target in every set it belongs to, and most sets are read far less
    often than their targets change (pusher's first fit reads only ``members``): a set notes which targets
    changed (:attr:`stale`, with the amount each is sorted under) and re-sorts them when :attr:`entries` is
    next read; a target moved to and back meanwhile costs nothing. The same keeps pusher's order, by negated
    requested CPU (:meth:`Simulation.fullest_first`).
    """

    __slots__ = ("_entries", "members", "stale", "_free", "_order")

    RESORT = 32
    """Sorted again whole when more than one in this many targets changed since the last read."""

    def __init__(self, members: Sequence[int], free: list[int]) -> None:
        self.members = frozenset(members)
        self._order = tuple(members)
        self._free = free  # the simulation's own list, read when the entries are brought up to date
        self._entries = self._sorted()
        self.stale: dict[int, int] = {}
        """Target index -> the free amount it is sorted under, for the targets changed since the last read."""

    def _sorted(self) -> list[tuple[int, int]]:
        return sorted(zip(map(self._free.__getitem__, self._order), self._order, strict=True))

    @property
    def entries(self) -> list[tuple[int, int]]:
        stale = self.stale
        if stale:
            e, free = self._entries, self._free
            if len(stale) * self.RESORT > len(e):
                e[:] = self._sorted()
            else:
                for idx, old in stale.items():
                    new = free[idx]
                    if new != old:
                        del e[bisect_left(e, (old, idx))]
                        insort(e, (new, idx))
            stale.clear()
        return self._entries


class FullestFirst:
    """pusher's target order for one node's pods: by requested CPU, most first, ties in target order
    (:meth:`Simulation.fullest_first`), fixed while that node's pods are placed.

    Most targets near the front are too full for a pod, so :meth:`with_cpu` passes over them a block at a
    time: ``bounds`` holds the most free CPU of each block of :data:`BLOCK` consecutive targets when the
    order was taken. While one node's pods are placed free CPU only falls (moves are applied; they are undone
    only after the last search), so a bound stays a bound and no block with room is passed over.
    """

    BLOCK = 64
    __slots__ = ("order", "bounds")

    def __init__(self, order: list[int], free_cpu: Sequence[int]) -> None:
        self.order = order
        b = self.BLOCK
        free = list(map(free_cpu.__getitem__, order))
        self.bounds = [max(free[i : i + b]) for i in range(0, len(free), b)]

    def with_cpu(self, free_cpu: Sequence[int], cpu: int) -> Iterator[int]:
        """The targets, in order, with at least ``cpu`` free (read as each is reached)."""
        order, b = self.order, self.BLOCK
        for k in compress(count(0, b), map(ge, self.bounds, repeat(cpu))):
            block = order[k : k + b]
            yield from compress(block, map(ge, map(free_cpu.__getitem__, block), repeat(cpu)))


class Skip:
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


class Preemptions:
    """Which expendable pods the last simulation took out of each target, and the stamp the target took then; kept in
    the plan cache.

    A node with the same stamp holds the very same pods, so under the same settings the same pods are chosen
    (:meth:`chosen`, without looking at its pods again), and taking them out leaves the very same pods in the same
    order: the node takes the stamp it took then rather than a new one
    (:meth:`~shared.snapshot.NodeInfo.take_stamp`), and the memos kept by stamp (the replays' start, the topology
    index's parts, the label keys pods read) know it unchanged from one plan to the next. The pods taken out are held
    (an ``id`` is never reused while kept); only the last simulation's targets are kept.
    """

    __slots__ = ("_last", "_now")

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, tuple[Pod, ...], int, Hashable]] = {}
        """Node name -> its stamp before, the pods taken out (in order), its stamp after, the settings they were
        chosen by."""
        self._now: dict[str, tuple[int, tuple[Pod, ...], int, Hashable]] = {}

    def chosen(self, info: NodeInfo, settings: Hashable, pick: Callable[[Pod], bool]) -> tuple[Pod, ...]:
        """The pods of ``info`` that ``pick`` chooses (``settings``: what it reads besides the pod), as chosen last
        time when the node has the same stamp and the settings are the same."""
        last = self._last.get(info.name)
        if last is not None and last[0] == info.stamp and last[3] == settings:
            out = last[1]
        else:
            out = tuple(p for p in info.pods if pick(p))
        if not out:
            self._now[info.name] = (info.stamp, out, info.stamp, settings)
        return out

    def take_out(self, snapshot: ClusterSnapshot, info: NodeInfo, pods: tuple[Pod, ...], settings: Hashable) -> None:
        """Take ``pods`` (:meth:`chosen`) out of ``info`` (a node of ``snapshot``)."""
        before = info.stamp
        for p in pods:
            snapshot.remove_pod(p)
        last = self._last.get(info.name)
        if last is not None and last[0] == before and len(last[1]) == len(pods) and all(map(is_, last[1], pods)):
            info.take_stamp(last[2])
        self._now[info.name] = (before, pods, info.stamp, settings)

    def done(self) -> None:
        """Keep what was chosen since the last call, and only that."""
        self._last, self._now = self._now, {}


class Simulation:
    """The targets and candidates of one plan and the state of the moves tried on them.

    ``verify`` re-checks every accepted move with the full :func:`shared.fit.fits` and refuses any it
    rejects, counting them in ``verify_rejections`` (a disagreement is a planner bug: tests require none).
    ``preemptions`` (the plan cache's) gives each target the stamp it took the last time the same expendable pods
    were taken out of it.
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: Config,
        *,
        verify: bool,
        topology_memo: TopologyMemo,
        switches: Switches = CURRENT,
        now: float | None = None,
        preemptions: Preemptions | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.switches = switches
        self.config = config
        self.verify = verify
        self.verify_rejections = 0
        cutoff = config.movability.expendable_priority_cutoff
        home = config.namespace

        self.targets: list[NodeInfo] = []
        self.candidates: list[NodeInfo] = []
        self.class_of: dict[str, str] = {}
        self.not_targets: Counter[str] = Counter()
        self.too_young = 0
        """Spot nodes that would be targets but are younger than ``disruption.min_target_age``."""
        self.unsettled = 0
        """Spot nodes that would be targets but whose pool is unsettled (also in ``not_targets``)."""
        self.tiers: tuple[frozenset[int], ...] = ()
        """Target indices by their pool's expected stay, steadiest first (``()``: all alike)."""
        self.tier_of: list[int] = []
        """Each target's tier (its index in :attr:`tiers`)."""
        self._within: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._sort_nodes(now)

        # Expendable pods on targets take no room: the scheduler preempts them. Out for the simulation
        # (and back in :meth:`restore`, also when anything below fails).
        self.preempted: list[Pod] = []
        self._saved: dict[NodeInfo, Saved] = {}
        """Each node the simulation changed, as it was before its first change (:meth:`restore` puts it back so)."""
        kept = preemptions if preemptions is not None else Preemptions()

        def pick(p: Pod) -> bool:
            return is_expendable(p, cutoff) or is_placeholder(p, home)

        for info in self.targets:
            out = kept.chosen(info, (cutoff, home), pick)
            if out:
                self._saved[info] = info.saved()
                kept.take_out(snapshot, info, out, (cutoff, home))
                self.preempted.extend(out)
        kept.done()
        try:
            self._setup(topology_memo)
        except BaseException:
            self.restore()
            raise
        self.pending_unschedulable = sum(
            1 for p in unschedulable_pods(snapshot.pending, home) if not is_expendable(p, cutoff)
        )

    def _sort_nodes(self, now: float | None) -> None:
        """Spot nodes into targets (or the reason they are not), on-demand nodes into candidates."""
        classes = self.config.node_classes
        min_target_age = self.config.disruption.min_target_age if now is not None else 0.0
        outlook = self.snapshot.spot_outlook
        stay_of = dict(outlook.stays)
        stays: list[float] = []
        for info in self.snapshot:
            node = info.node
            cls = node_class(node, classes)
            self.class_of[node.name] = cls
            if cls == "spot":
                pool = pool_of(node, classes) if outlook else None
                if not node.ready:
                    self.not_targets["not ready"] += 1
                elif reclaim_reason(node, classes) is not None:
                    self.not_targets["being reclaimed or cordoned"] += 1
                elif pool is not None and pool in outlook.unsettled:
                    self.not_targets[UNSETTLED_POOL] += 1
                    self.unsettled += 1
                elif min_target_age and target_too_young(node, min_target_age, now or 0.0):
                    self.too_young += 1
                else:
                    self.targets.append(info)
                    stays.append(stay_of.get(pool, outlook.default_stay) if pool is not None else 0.0)
            elif cls == "on-demand":
                self.candidates.append(info)
        self.tiers = stay_tiers(stays)
        self.tier_of = [0] * len(stays)
        for rank, tier in enumerate(self.tiers):
            for i in tier:
                self.tier_of[i] = rank

    def _setup(self, topology_memo: TopologyMemo) -> None:
        self.topology = TopologyIndex(self.snapshot, topology_memo)
        targets = self.targets
        self.free_cpu = [info.free("cpu") for info in targets]
        self.free_mem = [info.free("memory") for info in targets]
        self.free_pods = [info.free("pods") for info in targets]
        # Negated requested CPU per target: the sort key of pusher's "fullest first" order.
        self.neg_requested = [-info.requested.get("cpu", 0) for info in targets]
        # That order as (key, index) pairs, re-sorted when read like the free lists.
        self._by_requested = SortedFree(range(len(targets)), self.neg_requested)
        # Totals of the positive free amounts, for the fail-fast capacity check.
        self.total_cpu = sum(f for f in self.free_cpu if f > 0)
        self.total_mem = sum(f for f in self.free_mem if f > 0)
        self.total_pods = sum(f for f in self.free_pods if f > 0)
        n = len(targets)
        alloc_cpu = sum(info.allocatable("cpu") for info in targets) or 1
        alloc_mem = sum(info.allocatable("memory") for info in targets) or 1
        self.ref_cpu = alloc_cpu / max(1, n)
        self.ref_mem = alloc_mem / max(1, n)
        self.static = StaticFilter(self.snapshot, targets, switches=self.switches)
        self._sorted: dict[tuple[tuple[int, ...], str], SortedFree] = {}
        self._sorted_by_id: dict[tuple[int, str], tuple[tuple[int, ...], SortedFree]] = {}
        self._lists_of: list[list[SortedFree]] = [[] for _ in range(n)]  # by free cpu
        self._mem_lists_of: list[list[SortedFree]] = [[] for _ in range(n)]  # by free memory
        self._domains_of: dict[tuple[str, ...], list[tuple[str | None, ...]]] = {}

    def restore(self) -> None:
        """Put the expendable pods taken out of the targets back. Every node changed that holds the very same pods
        again (each move tried undone) takes back its order and stamp of before
        (:meth:`~shared.snapshot.ClusterSnapshot.put_back`), so the memos kept by stamp know it unchanged."""
        snapshot = self.snapshot
        for p in self.preempted:
            snapshot.add_pod(p)
        for info, saved in self._saved.items():
            pods, before = info.pods, saved[1]
            if len(pods) == len(before) and (
                all(map(is_, pods, before)) or {id(p) for p in pods} == {id(p) for p in before}
            ):
                snapshot.put_back(info, saved)
        self._saved = {}

    def feasible(self, pod: Pod) -> Feasible:
        return self.static.feasible(pod)

    def within(self, members: tuple[int, ...], tier: int) -> tuple[int, ...]:
        """The targets of ``members`` in :attr:`tiers` ``[tier]``, the same tuple for the same arguments (kept by
        the tuple's identity, as :meth:`sorted_free` keeps its lists)."""
        seen = self._within.get((id(members), tier))
        if seen is not None and seen[0] is members:
            return seen[1]
        chosen = self.tiers[tier]
        subset = tuple(i for i in members if i in chosen)
        self._within[(id(members), tier)] = (members, subset)
        return subset

    def size(self, pod: Pod) -> float:
        """The pod's CPU plus memory, each normalised by the average spot target's allocatable."""
        return pod.requests.get("cpu", 0) / self.ref_cpu + pod.requests.get("memory", 0) / self.ref_mem

    def sorted_free(self, members: tuple[int, ...], resource: str = "cpu") -> SortedFree:
        # First by the tuple's identity (the static filter hands out the same tuples again and again, and
        # hashing one of thousands of targets costs more than the rest of a lookup), then by value.
        seen = self._sorted_by_id.get((id(members), resource))
        if seen is not None and seen[0] is members:
            return seen[1]
        sl = self._sorted.get((members, resource))
        if sl is not None:
            self._sorted_by_id[(id(members), resource)] = (members, sl)
        else:
            memory = resource == "memory"
            sl = self._sorted[(members, resource)] = SortedFree(members, self.free_mem if memory else self.free_cpu)
            lists = self._mem_lists_of if memory else self._lists_of
            for i in members:
                lists[i].append(sl)
            self._sorted_by_id[(id(members), resource)] = (members, sl)  # kept: the id is not reused
        return sl

    def fullest_first(self) -> FullestFirst:
        """pusher's target order now: ``sorted(range(len(targets)), key=neg_requested.__getitem__)``, with
        only the targets moved to or from since the last call re-sorted."""
        return FullestFirst([idx for _, idx in self._by_requested.entries], self.free_cpu)

    # --- moves ------------------------------------------------------------------------------------------

    def _set_free(self, idx: int) -> None:
        info = self.targets[idx]
        # NodeInfo.free, inlined: this runs twice for every move tried.
        allocatable, requested = info.node.allocatable, info.requested
        new = allocatable.get("cpu", 0) - requested.get("cpu", 0)
        old = self.free_cpu[idx]
        if new != old:
            for sl in self._lists_of[idx]:
                sl.stale.setdefault(idx, old)
            self.free_cpu[idx] = new
            self.total_cpu += max(0, new) - max(0, old)
            self._by_requested.stale.setdefault(idx, self.neg_requested[idx])
            self.neg_requested[idx] = -requested.get("cpu", 0)
        new, old = allocatable.get("memory", 0) - requested.get("memory", 0), self.free_mem[idx]
        if new != old:
            for sl in self._mem_lists_of[idx]:
                sl.stale.setdefault(idx, old)
            self.free_mem[idx] = new
            self.total_mem += max(0, new) - max(0, old)
        new, old = allocatable.get("pods", 0) - len(info.pods), self.free_pods[idx]
        self.free_pods[idx] = new
        self.total_pods += max(0, new) - max(0, old)

    def apply(self, pod: Pod, idx: int) -> Pod:
        """Move ``pod`` to target ``idx``; returns the pod as moved (undo with both)."""
        target = self.targets[idx]
        saved = self._saved
        if target not in saved:
            saved[target] = target.saved()
        source = self.snapshot.nodes[pod.node_name]
        if source not in saved:
            saved[source] = source.saved()
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

    def undo_all(self, placed: Sequence[Placed]) -> None:
        """Undo ``placed`` (applied in order), last first."""
        for original, moved, idx in reversed(placed):
            self.undo(original, moved, idx)

    # --- fit ---------------------------------------------------------------------------------------------

    def dynamic_reason(self, pod: Pod, info: NodeInfo) -> Reason | None:
        """The filters that depend on what runs where, in ``shared.fit.fits`` order (static ones passed)."""
        if pod.host_ports:
            r = check_host_ports(pod, info)
            if r is not None:
                return r
        insufficient = check_resources(pod, info, switches=self.switches)
        if insufficient:
            return insufficient[0]
        pid = self.topology.pid(pod)
        if pod.topology_spread:
            r = self.topology.check_topology_spread(pod, pid, info, self.switches)
            if r is not None:
                return r
        return self.topology.check_inter_pod_affinity(pod, pid, info)

    def floors(self, pod: Pod) -> tuple[int | None, int | None]:
        """The least free cpu and memory a target must have for ``pod`` (``None``: not checked), for the fast
        paths ahead of :meth:`accept`. NodeResourcesFit checks only what the pod requests since v1.27
        (kubernetes#116408); before, a pod requesting anything needs the other resource not over-committed."""
        cpu, mem = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
        if cpu > 0 and mem > 0:
            return cpu, mem
        unrequested = None
        if not self.switches.resources_fit_ignores_unrequested_overcommit and requests_anything(pod):
            unrequested = 0
        return (cpu if cpu > 0 else unrequested), (mem if mem > 0 else unrequested)

    def skip(self, pod: Pod) -> Skip | None:
        """A :class:`Skip` for the pod's topology terms (``None`` if it has none)."""
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
        return Skip(rules) if rules else None

    def _domains(self, keys: tuple[str, ...]) -> list[tuple[str | None, ...]]:
        """Per target, its labels' values for ``keys`` (targets keep their labels throughout a plan)."""
        domains = self._domains_of.get(keys)
        if domains is None:
            domains = self._domains_of[keys] = [tuple(t.node.labels.get(k) for k in keys) for t in self.targets]
        return domains

    def accept(self, pod: Pod, idx: int, why: Counter[str] | None, skip: Skip | None = None) -> bool:
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
            full = fits(pod, info, self.snapshot, first_only=True, switches=self.switches)
            if full:
                # The incremental checks and the library disagree: a planner bug. Never emit the move.
                self.verify_rejections += 1
                if why is not None:
                    why[full[0].message] += 1
                return False
        return True
