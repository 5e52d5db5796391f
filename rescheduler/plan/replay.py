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

:class:`Replays`, kept in the plan cache, compares the start of each plan's simulation with the last one's: nodes
holding the very same objects are alike, and a node whose objects changed is alike when it reads the same to every
filter (a pod replaced by its controller with the same spec on the same node; a waiting pod placed on the same
spot node again). When every node and setting is alike, each pass of the last plan is replayed step by step in
the pass's own order: a step over the same candidate, with the same analysis, takes its recorded moves (applied to
the simulation, without a search) or its recorded misfit; any other step is searched anew, and once one ends
otherwise than recorded (a node drained or not, moves to other targets or of pods that read otherwise) the steps
after it are all searched anew. The budgets and ceilings, the fail-fast capacity check and the candidates' order
are worked out as ever. When something is not alike, nothing is replayed and the passes are recorded afresh.
The plan is the plan made from scratch (``tests/unit/test_plan_incremental.py``).

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


def _alike_pods(old: Sequence[Pod], new: Sequence[Pod], names: Sequence[str]) -> bool:
    """The two lists hold pods that read alike, one for one, in any order."""
    if len(old) != len(new):
        return False
    left = [_view(p, names) for p in old]
    for p in new:
        view = _view(p, names)
        for i, seen in enumerate(left):
            if seen == view:
                del left[i]
                break
        else:
            return False
    return True


def _alike_node(old: Node, new: Node, target: bool) -> bool:
    """A target's node reads alike but for its annotations and times (they decide whether it is a target, and the
    targets are compared by name); another node by its labels and taints (its topology domains, and whether topology
    spread counts it)."""
    if old is new:
        return True
    if not target:
        return (old.labels, old.taints) == (new.labels, new.taints)
    return (old.labels, old.taints, old.unschedulable, old.ready, old.allocatable) == (
        new.labels,
        new.taints,
        new.unschedulable,
        new.ready,
        new.allocatable,
    )


class Replays:
    """The passes of the last plan, and the start they were made from (module docstring). Kept in the plan cache."""

    def __init__(self) -> None:
        self.passes: dict[tuple[str, frozenset[str]], tuple[list[Step], tuple[int, ...] | None]] = {}
        """(Pass name, the nodes it held back) -> its steps, and the contention the tiered rule read (``None``:
        another rule)."""
        self._used: set[tuple[str, frozenset[str]]] = set()
        """The passes recorded since the last :meth:`begin`: the others are dropped there."""
        self.alike = False
        """Whether the current simulation starts alike the one the passes were recorded on."""
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
        targets = frozenset(t.name for t in sim.targets)
        alike = self._settings is not None and self._settings == settings and nodes.keys() == self._nodes.keys()
        if alike:
            for name, (node, pods) in nodes.items():
                old_node, old_pods = self._nodes[name]
                if old_node is node and len(old_pods) == len(pods) and all(map(_is, old_pods, pods)):
                    continue
                target = name in targets
                names = _POD_FIELDS if target else _TOPOLOGY_FIELDS
                if not (_alike_node(old_node, node, target) and _alike_pods(old_pods, pods, names)):
                    alike = False
                    break
        self.alike = alike
        used, self._used = self._used, set()
        self.passes = {key: steps for key, steps in self.passes.items() if key in used} if alike else {}
        self._nodes, self._settings = nodes, settings

    def replay(self, name: str, held: frozenset[str], sim: Simulation, cands: Candidates, tiered: bool) -> PassReplay:
        """The replay of pass ``name`` holding ``held`` back (its recorded steps when the start is alike), recording
        the pass anew. ``tiered``: the pass reads the candidates' contention for groups of targets, which must then
        be alike too."""
        contention = tuple(cands.contention()) if tiered else None
        key = (name, held)
        recorded = self.passes.get(key) if self.alike else None
        steps: list[Step] = []
        self.passes[key] = (steps, contention)
        self._used.add(key)
        if recorded is None or recorded[1] != contention:
            return PassReplay(sim, [], steps)
        return PassReplay(sim, recorded[0], steps)


def _is(a: object, b: object) -> bool:
    return a is b


class PassReplay:
    """One pass's steps replayed or searched (:meth:`step`), and recorded."""

    __slots__ = ("sim", "recorded", "steps", "diverged")

    def __init__(self, sim: Simulation, recorded: list[Step], steps: list[Step]) -> None:
        self.sim, self.recorded, self.steps = sim, recorded, steps
        self.diverged = not recorded

    def _at(self, w: Candidate) -> Step | None:
        k = len(self.steps)
        if self.diverged or k >= len(self.recorded) or self.recorded[k].name != w.name:
            return None
        return self.recorded[k]

    def search(
        self, w: Candidate, place: Callable[[], tuple[list[Placed], StayReason | None]]
    ) -> tuple[list[Placed], StayReason | None]:
        """The step's search: the recorded moves applied, or misfit, when the step is the recorded one over the same
        analysis; else ``place()``, checked against the record."""
        rec = self._at(w)
        if rec is not None and rec.analysis is w.analysis:
            if rec.moves is None:
                self.steps.append(rec)
                return [], rec.why
            sim = self.sim
            moved = [(pod, sim.apply(pod, idx), idx) for pod, idx in rec.moves]
            self.steps.append(rec)
            return moved, None
        moved, why = place()
        moves = tuple((original, idx) for original, _, idx in moved) if why is None else None
        self._check(Step(w.name, w.analysis, moves, why), rec)
        return moved, why

    def skipped(self, w: Candidate) -> None:
        """A step that ended before a search (its node not drained): recorded, checked against the record."""
        self._check(Step(w.name, None, None), self._at(w))

    def _check(self, step: Step, rec: Step | None) -> None:
        """Record ``step``; the pass diverges unless it left the targets as the recorded step did."""
        self.steps.append(step)
        if self.diverged:
            return
        self.diverged = rec is None or not _alike_moves(rec.moves, step.moves)


def _alike_moves(old: Moves | None, new: Moves | None) -> bool:
    """Both steps drained their node, the same targets taking pods that read alike, or neither did."""
    if old is None or new is None:
        return old is new
    if len(old) != len(new):
        return False
    if all(a is b and i == j for (a, i), (b, j) in zip(old, new, strict=True)):
        return True
    left = [(idx, _view(p, _POD_FIELDS)) for p, idx in old]
    for p, idx in new:
        item = (idx, _view(p, _POD_FIELDS))
        if item not in left:
            return False
        left.remove(item)
    return True
