"""A packing pass of the last plan replayed where the change since did not touch it: its CPU follows the change.

A greedy pass (:func:`rescheduler.plan.placement.run`) takes the candidates one by one, and each step's search reads
the spot targets as the steps before it left them. Its answer (the moves of the node's pods, or the misfit that
keeps the node) depends on nothing else than:

* the candidate's own pods to move (its :class:`~rescheduler.plan.candidates.Analysis`, the same object while the
  node holds the same ``Pod`` objects, :class:`~rescheduler.plan.candidates.PlanCache`);
* what the filters read of every target (the node, its pods' requests, ports, volumes, labels and terms) and of the
  other nodes' pods for inter-pod affinity and topology spread (their namespaces, labels and terms, where they run);
* the moves of the steps before it;
* the settings: the configuration, the kube-scheduler rules, the namespaces, volumes, claims and StorageClasses,
  the targets and their tiers, and the pods' contention for groups of targets (the tiered rule reads it).

:class:`Replays`, kept in the plan cache, compares the start of each plan's simulation with the last one's. Nodes
holding the very same objects are alike; a node whose objects changed is looked at closer. Its node must read alike
(a target: its labels, taints, cordon, readiness and allocatable; another node: its labels and taints), and no pod
that differs may carry anti-affinity terms (every placement reads those), or nothing is replayed: the passes are
recorded afresh, as when a setting differs. Otherwise a target whose pods differ is *dirty* (its room differs), and
the pods that differ in what inter-pod affinity and topology spread read (gone, come, relabelled) are *changed*.

Each pass of the last plan is then replayed step by step in the pass's own order. A step over the same candidate,
with the same analysis, takes its recorded moves (applied to the simulation, without a search) or its recorded
misfit, unless its search could read what differs: one of its pods has a term or constraint whose selector matches
a changed pod, or a dirty target comes, by the strategy's rule, before the target a recorded move chose (for a
misfit, or moves the retry rules found: any dirty target the pods may use). Any other step is searched, and where
it ends otherwise than recorded, the targets whose moves differ become dirty and the pods moved otherwise changed,
for the steps after it. A step over another candidate than recorded (the order changed), or moves of pods with
anti-affinity terms that differ, end the replay: the rest of the pass is searched. The budgets and ceilings, the
fail-fast capacity check and the candidates' order are worked out as ever. The plan is the plan made from scratch
(``tests/unit/test_plan_incremental.py``).

A pass of the improvement search (:mod:`rescheduler.plan.search`: some drained nodes held back on purpose) is
recorded and replayed as one with its own held-back nodes; the search's other steps are searched every time. Not
replayed: a plan that checks every move with :func:`shared.fit.fits` (``verify``: it counts the rejections), and
passes run in a forked process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from rescheduler.plan.stay_reasons import StayReason
from rescheduler.plan.strategies import Strategy, TargetRule
from shared.config import Config
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.switches import Switches

if TYPE_CHECKING:
    from rescheduler.plan.candidates import Analysis, Candidate, Candidates
    from rescheduler.plan.simulation import Placed, Simulation

__all__ = ["Replays", "PassReplay", "Step"]

Moves = tuple[tuple[Pod, int], ...]
"""A step's moves: each pod (as found on the candidate) and the index of its target."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a pass: the candidate, its analysis when it was searched, and how the search ended."""

    name: str
    analysis: Analysis | None
    """``None`` when the step ended before a search (blocked, refused by a budget, no capacity)."""
    moves: Moves | None
    """The moves when the node was drained, ``None`` otherwise."""
    why: StayReason | None = None
    """The misfit that kept the node, when the search found no room for one of its pods."""
    own: bool = True
    """Whether the strategy's own rule found the moves (not one of :data:`~rescheduler.plan.strategies.RETRIES`)."""


_UNREAD = frozenset({"name", "uid", "creation_timestamp"})
"""The pod fields no filter reads: a pod that differs from another only in these reads alike."""
_POD_FIELDS = tuple(f.name for f in fields(Pod) if f.name not in _UNREAD)
_TOPOLOGY_FIELDS = (
    "namespace",
    "node_name",
    "phase",
    "labels",
    "deletion_timestamp",
    "pod_affinity",
    "pod_anti_affinity",
    "topology_spread",
    "volumes",
)
"""What the inter-pod affinity, topology spread and volume filters read of a pod on a node that is not a target."""


def _view(pod: Pod, names: Sequence[str]) -> tuple[object, ...]:
    return tuple(getattr(pod, f) for f in names)


def _unmatched(old: Sequence[Pod], new: Sequence[Pod], names: Sequence[str]) -> list[Pod]:
    """The pods of either list with no pod reading alike (by ``names``) in the other, one for one."""
    left = [(_view(p, names), p) for p in old]
    extra: list[Pod] = []
    for p in new:
        view = _view(p, names)
        for i, (seen, _) in enumerate(left):
            if seen == view:
                del left[i]
                break
        else:
            extra.append(p)
    return extra + [p for _, p in left]


def _selects_any(pod: Pod, others: Sequence[Pod]) -> bool:
    """Whether one of the pod's inter-pod (anti-)affinity terms or spread constraints may select one of ``others``:
    its label selector matches their labels (whatever their namespaces; the keys of ``matchLabelKeys`` only narrow a
    spread constraint's selector). A term without a selector selects no pod."""
    selectors = [t.selector for t in (*pod.pod_affinity, *pod.pod_anti_affinity)]
    selectors += [c.selector for c in pod.topology_spread]
    return any(s is not None and s.matches(q.labels) for s in selectors for q in others)


def _same_statics(old: Node, new: Node) -> bool:
    """What the filters read of a target's node: its labels, taints, cordon, readiness and allocatable (its
    annotations and times decide whether it is a target, and the targets are compared by name). The allocatable is
    also what a pod's size is measured by (the targets' average), and so the order of a node's pods."""
    mine = (old.labels, old.taints, old.unschedulable, old.ready, old.allocatable)
    return mine == (new.labels, new.taints, new.unschedulable, new.ready, new.allocatable)


class _Start:
    """How a simulation's start differs from the last one's (:meth:`Replays.begin`)."""

    __slots__ = ("alike", "dirty", "changed")

    def __init__(self) -> None:
        self.alike = True
        """Whether anything may be replayed: only the pods of some nodes differ, none with anti-affinity terms."""
        self.dirty: set[int] = set()
        """The targets whose pods differ (their room, ports and volumes)."""
        self.changed: list[Pod] = []
        """The pods, before and after, that inter-pod affinity or topology spread read otherwise (they are gone, have
        come, moved or changed labels)."""

    def node(self, old: tuple[Node, tuple[Pod, ...]], new: tuple[Node, tuple[Pod, ...]], target: int | None) -> None:
        """Note how one node differs (``target``: its index among the targets, ``None`` when it is not one)."""
        (old_node, old_pods), (node, pods) = old, new
        if old_node is not node:
            statics = _same_statics if target is not None else _same_domains
            if not statics(old_node, node):
                self.alike = False
                return
        if target is not None and _unmatched(old_pods, pods, _POD_FIELDS):
            self.dirty.add(target)
        changed = _unmatched(old_pods, pods, _TOPOLOGY_FIELDS)
        if any(p.pod_anti_affinity for p in changed):
            self.alike = False  # the existing pods' anti-affinity reads them for every pod placed
        self.changed.extend(changed)


def _same_domains(old: Node, new: Node) -> bool:
    """What topology spread and inter-pod affinity read of a node that is not a target: its labels (its domains) and
    taints (whether spread counts it)."""
    return (old.labels, old.taints) == (new.labels, new.taints)


class Replays:
    """The passes of the last plan, and the start they were made from (module docstring). Kept in the plan cache."""

    def __init__(self) -> None:
        self.passes: dict[tuple[str, frozenset[str]], tuple[list[Step], tuple[int, ...] | None]] = {}
        """(Pass name, the nodes it held back) -> its steps, and the contention the tiered rule read (``None``:
        another rule)."""
        self._used: set[tuple[str, frozenset[str]]] = set()
        """The passes recorded since the last :meth:`begin`: the others are dropped there."""
        self.start = _Start()
        """How the current simulation's start differs from the one the passes were recorded on."""
        self._nodes: dict[str, tuple[Node, tuple[Pod, ...]]] = {}
        self._settings: tuple[object, ...] | None = None

    def begin(self, sim: Simulation, config: Config, switches: Switches) -> None:
        """Compare the simulation's start (after its set-up) with the last one's, and keep it."""
        snapshot: ClusterSnapshot = sim.snapshot
        settings = (
            config,
            switches,
            tuple(t.name for t in sim.targets),
            sim.tiers,
            snapshot.namespaces,
            snapshot.pvs,
            snapshot.pvcs,
            snapshot.storage_classes,
        )
        nodes = {info.name: (info.node, tuple(info.pods)) for info in snapshot}
        index = {t.name: i for i, t in enumerate(sim.targets)}
        start = self.start = _Start()
        start.alike = self._settings is not None and self._settings == settings and nodes.keys() == self._nodes.keys()
        if start.alike:
            for name, now in nodes.items():
                old = self._nodes[name]
                if old[0] is now[0] and len(old[1]) == len(now[1]) and all(map(_is, old[1], now[1])):
                    continue
                start.node(old, now, index.get(name))
                if not start.alike:
                    break
        used, self._used = self._used, set()
        self.passes = {key: steps for key, steps in self.passes.items() if key in used} if start.alike else {}
        self._nodes, self._settings = nodes, settings

    def replay(self, strategy: Strategy, held: frozenset[str], sim: Simulation, cands: Candidates) -> PassReplay:
        """The replay of ``strategy``'s pass holding ``held`` back (its recorded steps when the start is alike),
        recording the pass anew. The tiered rule reads the candidates' contention for groups of targets, which must
        then be alike too."""
        tiered = strategy.target is TargetRule.TIERED
        contention = tuple(cands.contention()) if tiered else None
        key = (strategy.name, held)
        recorded = self.passes.get(key) if self.start.alike else None
        steps: list[Step] = []
        self.passes[key] = (steps, contention)
        self._used.add(key)
        if recorded is None or recorded[1] != contention:
            return PassReplay(sim, cands, strategy, self.start, [], steps)
        return PassReplay(sim, cands, strategy, self.start, recorded[0], steps)


def _is(a: object, b: object) -> bool:
    return a is b


Search = Callable[[], tuple[list["Placed"], "StayReason | None", bool]]
"""A step's search: the moves (applied) or the misfit, and whether the strategy's own rule found them."""


class PassReplay:
    """One pass's steps replayed or searched (:meth:`search`), and recorded."""

    __slots__ = ("sim", "cands", "strategy", "recorded", "steps", "diverged", "dirty", "changed")

    def __init__(
        self,
        sim: Simulation,
        cands: Candidates,
        strategy: Strategy,
        start: _Start,
        recorded: list[Step],
        steps: list[Step],
    ) -> None:
        self.sim, self.cands, self.strategy = sim, cands, strategy
        self.recorded, self.steps = recorded, steps
        self.diverged = not recorded
        self.dirty = set(start.dirty)
        """The targets whose state differs from the recorded pass's at this step: :attr:`_Start.dirty`, and those
        that took other moves in a step that ended otherwise than recorded."""
        self.changed = list(start.changed)
        """:attr:`_Start.changed`, and the pods such a step moved otherwise."""

    def _at(self, w: Candidate) -> Step | None:
        k = len(self.steps)
        if self.diverged or k >= len(self.recorded) or self.recorded[k].name != w.name:
            return None
        return self.recorded[k]

    def search(self, w: Candidate, place: Search) -> tuple[list[Placed], StayReason | None]:
        """The step's search: the recorded moves applied, or misfit, when the step is the recorded one over the same
        analysis and reads nothing that differs; else ``place()``, checked against the record."""
        rec = self._at(w)
        if rec is not None and rec.analysis is w.analysis:
            moved = self._replayed(w, rec)
            if moved is not None:
                self.steps.append(rec)
                return moved, rec.why
        moved, why, own = place()
        moves = tuple((original, idx) for original, _, idx in moved) if why is None else None
        self._check(Step(w.name, w.analysis, moves, why, own), rec)
        return moved, why

    def _replayed(self, w: Candidate, rec: Step) -> list[Placed] | None:
        """The recorded moves applied (none for a misfit), or ``None`` (nothing applied) when the step's search could
        read what differs: a pod placed selects some pod that differs, or a target whose room differs
        would be looked at before the one the record chose (the whole search for a misfit, or a step whose pods
        the strategy's own rule did not place)."""
        sim, changed, dirty = self.sim, self.changed, self.dirty
        if changed and any(_selects_any(p, changed) for p in w.movable):
            return None
        whole = rec.moves is None or not rec.own or self.strategy.target is TargetRule.BEST_FIT_MEMORY
        if dirty and whole and any(self._reads(pod, t) for pod in w.movable for t in dirty):
            return None
        if rec.moves is None:
            return []
        moved: list[Placed] = []
        keys = list(sim.neg_requested) if dirty and self.strategy.target is TargetRule.FIRST_FIT else None
        for pod, idx in rec.moves:
            if dirty and (idx in dirty or any(self._before(pod, t, idx, keys) for t in dirty if self._reads(pod, t))):
                sim.undo_all(moved)
                return None
            moved.append((pod, sim.apply(pod, idx), idx))
        return moved

    def _reads(self, pod: Pod, t: int) -> bool:
        """Whether a search for ``pod`` may look at target ``t``: one it passes the static filters of, or one of their
        groups for the tiered rule."""
        feasible = self.sim.feasible(pod)
        if t in self.sim.sorted_free(feasible.targets).members:
            return True
        groups = feasible.groups
        return self.strategy.target is TargetRule.TIERED and groups is not None and self._group(t) in groups

    def _group(self, t: int) -> int:
        return self.sim.static.group_of[t]

    def _before(self, pod: Pod, t: int, chosen: int, keys: list[int] | None) -> bool:
        """Whether the strategy's rule looks at target ``t`` before ``chosen`` for ``pod`` now (``keys``: pusher's
        order's keys when the step began)."""
        sim = self.sim
        if sim.tiers:
            tier, mine = sim.tier_of[t], sim.tier_of[chosen]
            if tier != mine:
                return tier < mine
        if keys is not None:  # first fit: pusher's order, fixed for the step
            return (keys[t], t) < (keys[chosen], chosen)
        groups = sim.feasible(pod).groups
        if self.strategy.target is TargetRule.TIERED and groups is not None and len(groups) > 1:
            order = self.cands.least_wanted_first(groups)
            group, mine = self._group(t), self._group(chosen)
            if group != mine:
                return group not in order or order.index(group) < order.index(mine)
        floor = sim.floors(pod)[0]
        free = sim.free_cpu
        return (floor is None or free[t] >= floor) and (free[t], t) < (free[chosen], chosen)

    def skipped(self, w: Candidate) -> None:
        """A step that ended before a search (its node not drained): recorded, checked against the record."""
        self._check(Step(w.name, None, None), self._at(w))

    def _check(self, step: Step, rec: Step | None) -> None:
        """Record ``step``. Where it moved otherwise than the recorded step, the targets concerned become dirty and the
        pods changed; the pass diverges (nothing after it is replayed) when the step is not the recorded one, or such
        a pod has anti-affinity terms (every placement reads them)."""
        self.steps.append(step)
        if self.diverged:
            return
        if rec is None:
            self.diverged = True
            return
        for pod, idx in _other_moves(rec.moves or (), step.moves or ()):
            if pod.pod_anti_affinity:
                self.diverged = True
                return
            self.dirty.add(idx)
            self.changed.append(pod)


def _other_moves(old: Moves, new: Moves) -> list[tuple[Pod, int]]:
    """The moves of either with no move of the other to the same target of a pod that reads alike, one for one."""
    if len(old) == len(new) and all(a is b and i == j for (a, i), (b, j) in zip(old, new, strict=True)):
        return []
    left = [((idx, _view(p, _POD_FIELDS)), (p, idx)) for p, idx in old]
    extra: list[tuple[Pod, int]] = []
    for p, idx in new:
        item = (idx, _view(p, _POD_FIELDS))
        for i, (seen, _) in enumerate(left):
            if seen == item:
                del left[i]
                break
        else:
            extra.append((p, idx))
    return extra + [move for _, move in left]
