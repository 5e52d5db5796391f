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
(a target: its labels, taints, cordon, readiness and allocatable; another node: its labels and taints), or nothing is
replayed: the passes are recorded afresh, as when a setting differs. Labels may differ where no filter or setting
reads their keys (:func:`_label_read`: the pods' node selectors, node affinity, inter-pod terms and spread
constraints, the volumes, the zone and region labels, the hostname, the configuration): every filter reads such a
node alike, and the tiered rule, which groups the targets by their labels, replays only over the same groups.
Otherwise a target whose pods differ is *dirty* (its room differs), and the pods that differ in what inter-pod
affinity and topology spread read (gone, come, relabelled) are *changed*.

Each pass is then worked out in its own order, each step against the recorded step over the same candidate. A step
with the same analysis takes its recorded moves (applied to the simulation, without a search) or its recorded
misfit, unless its search could read what differs: one of its pods has a term or constraint whose selector matches
a changed pod, or is selected by a changed pod's anti-affinity term, or a dirty target comes, by the strategy's
rule, before the target a recorded move chose (for moves the retry rules found: any dirty target the pods may use).
A recorded misfit stands unless a dirty target the pods may use took pods, or lost some and now has the room for
one of them where a recorded attempt would have looked at it first, or for the pod that did not fit, or turns that
pod away for another reason than it did (its count in the FitError). Any other step is searched, and where it ends
otherwise than recorded, the targets whose moves differ become dirty and the pods moved otherwise changed, for the
steps after it. Where the order differs from the
record's, a step also counts as dirty and changed the targets and pods of the moves it does not share with the
recorded step's start: those of the recorded steps before it not taken yet, and those made by the steps taken
ahead of their recorded place. Once more than :data:`DIFFER_MAX` targets are dirty or pods changed, the rest of
the pass is searched. The budgets and ceilings, the fail-fast capacity check and the candidates' order are
worked out as ever. The plan is the plan made from scratch (``tests/unit/test_plan_incremental.py``).

A pass of the improvement search (:mod:`rescheduler.plan.search`: some drained nodes held back on purpose) is
recorded and replayed as one with its own held-back nodes, or else replays the strategy's pass without them (a node
held back is a step that ends otherwise than recorded); the search's other steps are searched every time. Not
replayed: a plan that checks every move with :func:`shared.fit.fits` (``verify``: it counts the rejections), and
passes run in a forked process.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

from rescheduler.plan.stay_reasons import StayReason
from rescheduler.plan.strategies import Strategy, TargetRule
from shared.config import Config
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot
from shared.switches import Switches
from shared.volumes import (
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_TOPOLOGY_REGION,
    LABEL_TOPOLOGY_ZONE,
)

if TYPE_CHECKING:
    from rescheduler.plan.simulation import Placed, Simulation

__all__ = ["Replays", "PassReplay", "Step", "Attempt"]


class StepNode(Protocol):
    """What a step reads of its :class:`rescheduler.plan.candidates.Candidate`."""

    @property
    def name(self) -> str: ...

    @property
    def analysis(self) -> object:
        """Its :class:`~rescheduler.plan.candidates.Analysis`: compared by identity."""
        ...

    @property
    def movable(self) -> tuple[Pod, ...]: ...


class PassNodes(Protocol):
    """What a pass reads of the plan's :class:`rescheduler.plan.candidates.Candidates`."""

    def contention(self) -> list[int]: ...

    def least_wanted_first(self, groups: tuple[int, ...]) -> tuple[int, ...]: ...


_VOLUME_ZONE_LABELS = (
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
)

Moves = tuple[tuple[Pod, int], ...]
"""A step's moves: each pod (as found on the candidate) and the index of its target."""


class Attempt(NamedTuple):
    """One rule's attempt at placing a node's pods that failed (:func:`rescheduler.plan.placement.place`)."""

    rule: TargetRule
    placed: tuple[tuple[Pod, int, int, int], ...]
    """The pods placed before the one that failed, in order: each with its target's index and that target's free
    cpu and memory when it was chosen."""
    failed: Pod
    """The pod no target took."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a pass: the candidate, its analysis when it was searched, and how the search ended."""

    name: str
    analysis: object | None
    """The candidate's :class:`~rescheduler.plan.candidates.Analysis`; ``None`` when the step ended before a search
    (blocked, refused by a budget, no capacity)."""
    moves: Moves | None
    """The moves when the node was drained, ``None`` otherwise."""
    why: StayReason | None = None
    """The misfit that kept the node, when the search found no room for one of its pods."""
    own: bool = True
    """Whether the strategy's own rule found the moves (not one of :data:`~rescheduler.plan.strategies.RETRIES`)."""
    attempts: tuple[Attempt, ...] = ()
    """The rules' attempts that failed, the strategy's own first (all of them for a misfit)."""


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
    came, went = _split(old, new, names)
    return came + went


def _split(old: Sequence[Pod], new: Sequence[Pod], names: Sequence[str]) -> tuple[list[Pod], list[Pod]]:
    """The pods of ``new`` with no pod reading alike (by ``names``) in ``old``, and those of ``old`` with none in
    ``new``, one for one."""
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
    return extra, [p for _, p in left]


def _selects_any(pod: Pod, others: Sequence[Pod]) -> bool:
    """Whether one of the pod's inter-pod (anti-)affinity terms or spread constraints may select one of ``others``:
    its label selector matches their labels (whatever their namespaces; the keys of ``matchLabelKeys`` only narrow a
    spread constraint's selector). A term without a selector selects no pod."""
    selectors = [t.selector for t in (*pod.pod_affinity, *pod.pod_anti_affinity)]
    selectors += [c.selector for c in pod.topology_spread]
    return any(s is not None and s.matches(q.labels) for s in selectors for q in others)


def _selected(pod: Pod, others: Sequence[Pod]) -> bool:
    """Whether a required anti-affinity term of one of ``others`` may select the pod (its selector matches the pod's
    labels, whatever the namespaces): where such a pod runs, the pod may not go."""
    return any(t.selector is not None and t.selector.matches(pod.labels) for q in others for t in q.pod_anti_affinity)


def _same_statics(old: Node, new: Node) -> bool:
    """What the filters read of a target's node: its labels, taints, cordon, readiness and allocatable (its
    annotations and times decide whether it is a target, and the targets are compared by name). The allocatable is
    also what a pod's size is measured by (the targets' average), and so the order of a node's pods."""
    mine = (old.labels, old.taints, old.unschedulable, old.ready, old.allocatable)
    return mine == (new.labels, new.taints, new.unschedulable, new.ready, new.allocatable)


class _Start:
    """How a simulation's start differs from the last one's (:meth:`Replays.begin`)."""

    __slots__ = ("alike", "dirty", "grown", "changed", "labels")

    def __init__(self) -> None:
        self.alike = True
        """Whether anything may be replayed: only the pods of some nodes differ."""
        self.dirty: set[int] = set()
        """The targets whose pods differ (their room, ports and volumes)."""
        self.grown: dict[int, int] = {}
        """The dirty targets that only lost pods (none came or changed), and how many: their room only grew."""
        self.changed: list[Pod] = []
        """The pods, before and after, that inter-pod affinity or topology spread read otherwise (they are gone, have
        come, moved or changed labels)."""
        self.labels: set[str] = set()
        """The keys of the node labels that differ (:meth:`Replays.begin` checks that no filter reads them)."""

    def node(self, old: tuple[Node, tuple[Pod, ...]], new: tuple[Node, tuple[Pod, ...]], target: int | None) -> None:
        """Note how one node differs (``target``: its index among the targets, ``None`` when it is not one)."""
        (old_node, old_pods), (node, pods) = old, new
        if old_node is not node:
            statics = _same_statics if target is not None else _same_domains
            if not statics(old_node, node):
                keys = _relabelled(old_node, node, statics)
                if keys is None:
                    self.alike = False
                    return
                self.labels |= keys  # unread (Replays.begin): the node reads alike to every filter
        if target is not None:
            came, went = _split(old_pods, pods, _POD_FIELDS)
            if came or went:
                self.dirty.add(target)
                if not came:
                    self.grown[target] = len(went)
        self.changed.extend(_unmatched(old_pods, pods, _TOPOLOGY_FIELDS))


def _relabelled(old: Node, new: Node, statics: Callable[[Node, Node], bool]) -> set[str] | None:
    """The keys of the labels that differ, when the nodes read alike by ``statics`` but for their labels; else
    ``None``."""
    if not statics(replace(old, labels=new.labels), new):
        return None
    return {k for k in old.labels.keys() | new.labels.keys() if old.labels.get(k) != new.labels.get(k)}


def _label_read(
    keys: set[str], snapshot: ClusterSnapshot, config: Config, pods_read: Callable[[], Iterable[frozenset[str]]]
) -> bool:
    """Whether a filter or the settings may read one of the node label ``keys``: the hostname, the zone and region
    labels (VolumeZone), a key the volumes' node affinity, labels or StorageClasses' allowed topologies name, or the
    configuration spells out (node classes, pools), or the pods read (:func:`_keys_read`; ``pods_read``: per node,
    then the pods waiting or on unknown nodes)."""
    read = {"kubernetes.io/hostname", *_VOLUME_ZONE_LABELS}
    for pv in snapshot.pvs.values():
        if pv.node_affinity is not None:
            read.update(r.key for t in pv.node_affinity.terms for r in t.expressions)
        read.update(pv.labels)
    for sc in snapshot.storage_classes.values():
        read.update(k for term in sc.allowed_topologies for k, _ in term)
    spelled = repr(config)
    if any(k in read or k in spelled for k in keys):
        return True
    return any(not keys.isdisjoint(pod_keys) for pod_keys in pods_read())


def _keys_read(pods: Iterable[Pod]) -> frozenset[str]:
    """The node label keys the pods' node selectors, required or preferred node affinity, inter-pod terms (required
    or preferred) and spread constraints name."""
    read: set[str] = set()
    for pod in pods:
        if pod.node_selector:
            read.update(pod.node_selector)
        required = pod.required_affinity.terms if pod.required_affinity is not None else ()
        for term in (*required, *(t for _, t in pod.preferred_affinity)):
            read.update(r.key for r in term.expressions)
        for t in (*pod.pod_affinity, *pod.pod_anti_affinity):
            read.add(t.topology_key)
        for w in (*pod.preferred_pod_affinity, *pod.preferred_pod_anti_affinity):
            read.add(w.term.topology_key)
        read.update(c.topology_key for c in pod.topology_spread)
    return frozenset(read)


def _same_domains(old: Node, new: Node) -> bool:
    """What topology spread and inter-pod affinity read of a node that is not a target: its labels (its domains) and
    taints (whether spread counts it)."""
    return (old.labels, old.taints) == (new.labels, new.taints)


_Groups = tuple[tuple[int, ...], tuple[int, ...]]
"""The tiered rule's reading of the targets: the candidates' contention per group, and each target's group."""


class Replays:
    """The passes of the last plan, and the start they were made from (module docstring). Kept in the plan cache."""

    def __init__(self) -> None:
        self.passes: dict[tuple[str, frozenset[str]], tuple[list[Step], _Groups | None]] = {}
        """(Pass name, the nodes it held back) -> its steps, and the contention and the targets' groups the tiered
        rule read (``None``: another rule)."""
        self._used: set[tuple[str, frozenset[str]]] = set()
        """The passes recorded since the last :meth:`begin`: the others are dropped there."""
        self.start = _Start()
        """How the current simulation's start differs from the one the passes were recorded on."""
        self._nodes: dict[str, tuple[Node, tuple[Pod, ...]]] = {}
        self._waiting_keys: tuple[tuple[Pod, ...], frozenset[str]] = ((), frozenset())
        """The pods waiting or on unknown nodes when last read, and the node label keys they read."""
        self._stamps: dict[str, int] = {}
        """Node name -> the :attr:`~shared.snapshot.NodeInfo.stamp` of its pods at the last start."""
        self._settings: tuple[object, ...] | None = None
        self._keys: dict[str, tuple[int, frozenset[str]]] = {}
        """Node name -> the :attr:`~shared.snapshot.NodeInfo.stamp` of its pods when last read and the node label keys
        they read (:func:`_keys_read`): kept while the node has that stamp, whatever the starts between."""
        self.took: dict[str, float] = {}
        """Pass name -> how long its pass took, on the caller's clock, when it last had no record to replay."""

    def alone(self, name: str) -> float | None:
        """``None`` when the pass ``name`` (no node held back) has a record to replay on this start; else how long it
        took when it last had none (``0.0``: not known)."""
        key = (name, frozenset[str]())
        if key in self.passes and (self.start.alike or key in self._used):
            return None
        return self.took.get(name, 0.0)

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
        nodes, stamps = self._starting(snapshot)
        start = self.start = _Start()
        start.alike = self._settings is not None and self._settings == settings and nodes.keys() == self._nodes.keys()
        if start.alike:
            self._compare(nodes, {t.name: i for i, t in enumerate(sim.targets)})
        if (
            start.alike
            and start.labels
            and _label_read(start.labels, snapshot, config, lambda: self._read(snapshot, nodes, stamps))
        ):
            start.alike = False
        used, self._used = self._used, set()
        self.passes = {key: steps for key, steps in self.passes.items() if key in used} if start.alike else {}
        self._nodes, self._stamps, self._settings = nodes, stamps, settings

    def _starting(self, snapshot: ClusterSnapshot) -> tuple[dict[str, tuple[Node, tuple[Pod, ...]]], dict[str, int]]:
        """Each node and its pods as this start holds them, and their :attr:`~shared.snapshot.NodeInfo.stamp`: a node
        with the stamp of the last start keeps that start's tuple of pods (the same objects), so :meth:`_compare`
        and :meth:`_read` find it alike at once."""
        kept, kept_stamps = self._nodes, self._stamps
        nodes: dict[str, tuple[Node, tuple[Pod, ...]]] = {}
        stamps: dict[str, int] = {}
        for info in snapshot:
            name = info.name
            stamp = stamps[name] = info.stamp
            old = kept.get(name) if kept_stamps.get(name) == stamp else None
            if old is None:
                nodes[name] = (info.node, tuple(info.pods))
            else:
                nodes[name] = old if old[0] is info.node else (info.node, old[1])
        return nodes, stamps

    def _compare(self, nodes: dict[str, tuple[Node, tuple[Pod, ...]]], index: dict[str, int]) -> None:
        """Note how each node differs from the last start (``index``: the targets' positions)."""
        start = self.start
        for name, now in nodes.items():
            old = self._nodes[name]
            if old[0] is now[0] and (
                old[1] is now[1] or (len(old[1]) == len(now[1]) and all(map(_is, old[1], now[1])))
            ):
                continue
            start.node(old, now, index.get(name))
            if not start.alike:
                return

    def _read(
        self, snapshot: ClusterSnapshot, nodes: dict[str, tuple[Node, tuple[Pod, ...]]], stamps: dict[str, int]
    ) -> Iterator[frozenset[str]]:
        """:func:`_keys_read` of each node's pods (``nodes`` and their ``stamps``: this start's, :meth:`_starting`;
        kept while the node has the same stamp, without its pods, which a cluster's churn replaces), then of the pods
        waiting or on unknown nodes."""
        kept = self._keys
        if len(kept) > len(nodes):  # nodes gone since: forgotten
            kept = self._keys = {name: seen for name, seen in kept.items() if name in nodes}
        for name, (_, pods) in nodes.items():
            stamp = stamps[name]
            seen = kept.get(name)
            if seen is None or seen[0] != stamp:
                seen = kept[name] = (stamp, _keys_read(pods))
            yield seen[1]
        waiting = (*snapshot.pending, *snapshot.unknown_node_pods)
        seen_waiting = self._waiting_keys
        if len(seen_waiting[0]) != len(waiting) or not all(map(_is, seen_waiting[0], waiting)):
            seen_waiting = self._waiting_keys = (waiting, _keys_read(waiting))
        yield seen_waiting[1]

    def replay(self, strategy: Strategy, held: frozenset[str], sim: Simulation, cands: PassNodes) -> PassReplay:
        """The replay of ``strategy``'s pass holding ``held`` back, recording the pass anew. The record replayed is that
        pass's, else (nodes held back) the strategy's pass without them: one recorded on this start, or on the last
        one when this start is alike. The tiered rule reads the candidates' contention for groups of targets, which
        must then be alike too."""
        tiered = strategy.target is TargetRule.TIERED
        contention = (tuple(cands.contention()), tuple(sim.static.group_of)) if tiered else None
        key, plain = (strategy.name, held), (strategy.name, frozenset[str]())
        recorded = self.passes.get(key) if self.start.alike or key in self._used else None
        if recorded is None and held and (self.start.alike or plain in self._used):
            recorded = self.passes.get(plain)  # the pass without nodes held back: it differs at those nodes' steps
        steps: list[Step] = []
        self.passes[key] = (steps, contention)
        self._used.add(key)
        if recorded is None or recorded[1] != contention:
            return PassReplay(sim, cands, strategy, self.start, [], steps)
        return PassReplay(sim, cands, strategy, self.start, recorded[0], steps)


def _is(a: object, b: object) -> bool:
    return a is b


Search = Callable[[], tuple[list["Placed"], "StayReason | None", bool, tuple[Attempt, ...]]]
"""A step's search: the moves (applied) or the misfit, whether the strategy's own rule found them, and the attempts
that failed."""


DIFFER_MAX = 64
"""Past this many dirty targets or changed pods, the rest of a pass is searched without a look at the record."""


class _Order:
    """Where the steps taken so far stand against the recorded pass's order: the recorded steps passed over (not taken
    yet, though a later recorded one was) and those taken ahead of it, with the moves each made."""

    __slots__ = ("position", "frontier", "passed", "taken", "moves")

    def __init__(self, recorded: Sequence[Step]) -> None:
        self.position = {step.name: k for k, step in enumerate(recorded)}
        self.frontier = 0
        """Every recorded step before it is taken or passed over."""
        self.passed: set[int] = set()
        self.taken: list[int] = []
        """The recorded positions taken, sorted."""
        self.moves: dict[int, Moves] = {}
        """Recorded position -> the moves its step made in this pass."""

    def apart(self, k: int, recorded: Sequence[Step]) -> list[tuple[Pod, int]]:
        """The moves by which the targets now differ from the recorded pass's at its step ``k`` through the order alone:
        those of the recorded steps before it not taken yet, and those made by the steps taken that come after it."""
        out: list[tuple[Pod, int]] = []
        for i in self.passed:
            if i < k:
                out.extend(recorded[i].moves or ())
        for i in range(self.frontier, k):  # not reached yet: none of them is taken
            out.extend(recorded[i].moves or ())
        for i in self.taken[bisect_right(self.taken, k) :]:
            out.extend(self.moves.get(i, ()))
        return out

    def take(self, k: int, moves: Moves | None) -> None:
        """Step ``k`` of the record was taken, making ``moves``."""
        if k >= self.frontier:
            self.passed.update(i for i in range(self.frontier, k) if i not in self.moves and i not in self.passed)
            self.frontier = k + 1
        self.passed.discard(k)
        insort(self.taken, k)
        if moves:
            self.moves[k] = moves


class PassReplay:
    """One pass's steps replayed or searched (:meth:`search`), and recorded."""

    __slots__ = ("sim", "cands", "strategy", "recorded", "steps", "diverged", "dirty", "grown", "changed", "order")

    def __init__(
        self,
        sim: Simulation,
        cands: PassNodes,
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
        self.grown = dict(start.grown)
        """:attr:`_Start.grown`, less the targets that took other moves since."""
        self.changed = list(start.changed)
        """:attr:`_Start.changed`, and the pods such a step moved otherwise."""
        self.order = _Order(recorded)

    def _at(self, w: StepNode) -> int | None:
        """The position of ``w``'s step in the record, if the replay goes on and it has one."""
        return None if self.diverged else self.order.position.get(w.name)

    def search(self, w: StepNode, place: Search) -> tuple[list[Placed], StayReason | None]:
        """The step's search: the recorded moves applied, or misfit, when the record has a step over the same analysis
        and it reads nothing that differs; else ``place()``, checked against the record."""
        k = self._at(w)
        rec = self.recorded[k] if k is not None else None
        if k is not None and rec is not None and rec.analysis is w.analysis:
            moved = self._replayed(w, rec, self.order.apart(k, self.recorded))
            if moved is not None:
                self.steps.append(rec)
                self.order.take(k, rec.moves)
                return moved, rec.why
        moved, why, own, attempts = place()
        moves = tuple((original, idx) for original, _, idx in moved) if why is None else None
        self._check(Step(w.name, w.analysis, moves, why, own, attempts if why is not None else ()), k)
        return moved, why

    def _replayed(self, w: StepNode, rec: Step, apart: list[tuple[Pod, int]]) -> list[Placed] | None:
        """The recorded moves applied (none for a misfit), or ``None`` (nothing applied) when the step's search could
        read what differs: a pod placed selects some pod that differs or is selected by its anti-affinity, or a
        target whose room differs would be looked at before the one the record chose (any such target for a step
        whose pods the strategy's own rule did not place; for a misfit, :meth:`_still_misfit`). ``apart``: the moves
        that differ through the order alone."""
        sim, changed, dirty = self.sim, self.changed, self.dirty
        moved_apart: set[int] = set()
        if apart:
            changed = changed + [pod for pod, _ in apart]
            moved_apart = {idx for _, idx in apart}
            dirty = dirty | moved_apart
        if changed and any(_selects_any(p, changed) or _selected(p, changed) for p in w.movable):
            return None
        if rec.moves is None:
            read = [t for t in dirty if any(self._reads(pod, t) for pod in w.movable)]
            if read and not all(t not in moved_apart and self._still_misfit(w, rec, t) for t in read):
                return None
            return []
        whole = not rec.own or self.strategy.target is TargetRule.BEST_FIT_MEMORY
        if dirty and whole and any(self._reads(pod, t) for pod in w.movable for t in dirty):
            return None
        moved: list[Placed] = []
        keys = list(sim.neg_requested) if dirty and self.strategy.target is TargetRule.FIRST_FIT else None
        for pod, idx in rec.moves:
            if dirty and (idx in dirty or any(self._before(pod, t, idx, keys) for t in dirty if self._reads(pod, t))):
                sim.undo_all(moved)
                return None
            moved.append((pod, sim.apply(pod, idx), idx))
        return moved

    def _still_misfit(self, w: StepNode, rec: Step, t: int) -> bool:
        """Whether a recorded misfit stands although target ``t`` differs, because its room only grew since the
        record (it lost pods at the start and took no other move in this pass), and no attempt could have used it:

        * every attempt (the strategy's rule, then the retries) placed its pods on targets that do not differ, and
          by its rule looked at each of them before ``t`` or ``t`` lacks the pod's cpu, memory or a pod slot now: the
          attempt places them as recorded (by induction over its pods), and the pod that failed lacks room at ``t``
          too, so the attempt fails as recorded (each target that differs is
          looked at so, the targets the attempt chose among them);
        * the pod that failed under the strategy's rule is turned away at ``t`` for the reason it was then (its
          count in the FitError). Under least free CPU (best fit, tiered) a target short of the pod's CPU is counted
          as such before anything else, and under least free memory one short of its memory: with less room then,
          so it was. Under pusher's order the pod slots are counted first: a target without one now had none then;
          one short of CPU now was so then if it had a slot left then too."""
        went = self.grown.get(t)
        if went is None or not rec.attempts or rec.attempts[0].rule is not self.strategy.target:
            return False
        for attempt in rec.attempts:
            for pod, x, cpu, memory in attempt.placed:
                if self._roomy(pod, t) and self._ahead(attempt.rule, pod, t, x, cpu, memory):
                    return False
            if self._roomy(attempt.failed, t):
                return False
        sim = self.sim
        failed = rec.attempts[0].failed
        c, m = sim.floors(failed)
        rule = self.strategy.target
        if rule is TargetRule.FIRST_FIT:
            slots = sim.free_pods[t]
            return slots < 1 or (c is not None and sim.free_cpu[t] < c and slots - went >= 1)
        if rule is TargetRule.BEST_FIT_MEMORY:
            return m is not None and sim.free_mem[t] < m
        return c is not None and sim.free_cpu[t] < c

    def _roomy(self, pod: Pod, t: int) -> bool:
        """Whether target ``t`` has the pod's cpu and memory (:meth:`Simulation.floors`) and a pod slot free: the
        rules turn it away before any other check otherwise."""
        sim = self.sim
        c, m = sim.floors(pod)
        return sim.free_pods[t] >= 1 and (c is None or sim.free_cpu[t] >= c) and (m is None or sim.free_mem[t] >= m)

    def _ahead(self, rule: TargetRule, pod: Pod, t: int, x: int, cpu: int, memory: int) -> bool:
        """Whether ``rule`` looks at target ``t`` (as it is now) before ``x`` for ``pod``, ``x`` having ``cpu`` and
        ``memory`` free then."""
        sim = self.sim
        if sim.tiers and sim.tier_of[t] != sim.tier_of[x]:
            return bool(sim.tier_of[t] < sim.tier_of[x])
        if rule is TargetRule.FIRST_FIT:  # pusher's order: fixed for the attempt, and only ``t`` differs
            keys = sim.neg_requested
            return (keys[t], t) < (keys[x], x)
        if rule is TargetRule.BEST_FIT_MEMORY:
            return (sim.free_mem[t], t) < (memory, x)
        groups = sim.feasible(pod).groups
        if rule is TargetRule.TIERED and groups is not None and len(groups) > 1:
            order = self.cands.least_wanted_first(groups)
            group, mine = self._group(t), self._group(x)
            if group != mine:
                return group not in order or mine not in order or order.index(group) < order.index(mine)
        return (sim.free_cpu[t], t) < (cpu, x)

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

    def skipped(self, w: StepNode) -> None:
        """A step that ended before a search (its node not drained): recorded, checked against the record."""
        self._check(Step(w.name, None, None), self._at(w))

    def _check(self, step: Step, k: int | None) -> None:
        """Record ``step`` (``k``: its position in the record, ``None`` when the record has none). Where it moved
        otherwise than the recorded step (none: no move), the targets concerned become dirty and the pods changed."""
        self.steps.append(step)
        if self.diverged:
            return
        old: Moves = ()
        if k is not None:
            old = self.recorded[k].moves or ()
            self.order.take(k, step.moves)
        for pod, idx in _other_moves(old, step.moves or ()):
            self.dirty.add(idx)
            self.grown.pop(idx, None)
            self.changed.append(pod)
        if len(self.dirty) > DIFFER_MAX or len(self.changed) > DIFFER_MAX:
            self.diverged = True  # checking every step against that much costs more than searching it


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
