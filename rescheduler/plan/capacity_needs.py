"""Asking for spot capacity, the pure part: which on-demand nodes only lack spot room, what they need, how
much may be asked for at once, and how a request for a node ends.

A node is worth asking capacity for when the plan leaves it on-demand for lack of room alone: every pod on it
may move, its PodDisruptionBudgets and spot ceilings let it drain, and the reason it stays is
:data:`~rescheduler.plan.stay_reasons.Kind.NO_CAPACITY` (all spot targets together have too little free),
:data:`~rescheduler.plan.stay_reasons.Kind.NO_SPOT_NODES`, or :data:`~rescheduler.plan.stay_reasons.Kind.NO_FIT` whose
most frequent cause is room taken by others (:data:`ROOM_CAUSES`: resources, pod slots, anti-affinity,
spread). The planner checks movability, then budgets and ceilings, then room
(:func:`rescheduler.plan.placement.run`), so those kinds imply the earlier checks passed. A pod that fits no
spot node because of a taint, its node affinity or a volume stays where it is: a new spot node would not take
it either, and a placeholder cannot hold a host port (spotshift's namespace is restricted). Nor is capacity asked
for a node whose drain would not be worth its evictions (:mod:`rescheduler.plan.worth`).

The run loop's API part (:mod:`rescheduler.cluster.capacity_requests`) creates the placeholders
(:mod:`rescheduler.plan.placeholder_pods`), watches them and deletes them; :func:`judge` says when a request
is over and why, :func:`in_the_way` which placeholders a drain must see gone before its first eviction.
Nothing here reads a clock: ages are passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rescheduler.plan.stay_reasons import Kind, StayReason
from rescheduler.plan.worth import weigh
from shared.config import CapacityConfig, Config
from shared.fit_reasons import (
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    ERR_SPREAD,
    ERR_TOO_MANY_PODS,
    is_insufficient,
)
from shared.model import PDB, Pod
from shared.movable import Movability, movability
from shared.pdbs import PdbIndex
from shared.placeholders import NODE_ANNOTATION
from shared.quantity import resource_value
from shared.snapshot import ClusterSnapshot

__all__ = [
    "ROOM_CAUSES",
    "CapacityNeed",
    "Caps",
    "is_room_reason",
    "capacity_needs",
    "MovabilityMemo",
    "choose_needs",
    "judge",
    "in_the_way",
    "REQUESTED",
    "PROVISIONED",
    "DRAINED",
    "TIMED_OUT",
    "PREEMPTED",
    "ON_DEMAND",
    "DELETED",
    "ORPHANED",
    "OUTCOMES",
    "BACKS_OFF",
    "format_need",
]

ROOM_CAUSES = frozenset({ERR_TOO_MANY_PODS, ERR_EXISTING_ANTI_AFFINITY, ERR_ANTI_AFFINITY, ERR_SPREAD})
"""Causes of :data:`Kind.NO_FIT` that a new spot node resolves, besides ``Insufficient <resource>``."""

# What happens to a request (metric label values and Event messages).
REQUESTED = "requested"
"""Placeholders created for a node."""
PROVISIONED = "provisioned"
"""Every placeholder of the request Running on a spot node: the node can be planned onto that room."""
DRAINED = "drained"
"""The node's drain is starting: its placeholders are deleted so the evicted pods' replacements take the room."""
TIMED_OUT = "timed-out"
"""Spot capacity did not appear within ``capacity.timeout`` (or the node was not drained within it after)."""
PREEMPTED = "preempted"
"""A placeholder was preempted (or deleted) by someone else: a pod that needed the room took it."""
ON_DEMAND = "on-demand"
"""A placeholder was bound to a node that is not spot."""
DELETED = "deleted"
"""The node no longer needs the room (gone, changed, drainable or blocked for another reason), its placeholders
were in the way of another node's drain (:func:`in_the_way`: asked again once no drain is in flight), or
shutdown."""
ORPHANED = "orphaned"
"""A placeholder no live request of this process owns (left by a predecessor): deleted."""
OUTCOMES = (REQUESTED, PROVISIONED, DRAINED, TIMED_OUT, PREEMPTED, ON_DEMAND, DELETED, ORPHANED)
BACKS_OFF = frozenset({TIMED_OUT, ON_DEMAND})
"""Ends after which the node is backed off like a failed drain: asking again at once would fail again."""


@dataclass(frozen=True, slots=True)
class CapacityNeed:
    """An on-demand node that could be emptied if spot had room: its pods to move and what they request."""

    node: str
    pods: tuple[Pod, ...]
    cpu: int
    """Millicores, summed over ``pods`` (effective requests, overhead included)."""
    memory: int
    """Bytes, summed over ``pods``."""
    reason: StayReason

    @property
    def text(self) -> str:
        """``needs 3.5 CPU / 12 GiB on spot``."""
        return format_need(self.cpu, self.memory)


def format_need(cpu: int, memory: int) -> str:
    """``needs 3.5 CPU / 12 GiB on spot`` (CPU in cores, memory in GiB, at most one decimal)."""
    cores = f"{cpu / 1000:.1f}".removesuffix(".0")
    gib = f"{memory / 2**30:.1f}".removesuffix(".0")
    return f"needs {cores} CPU / {gib} GiB on spot"


def is_room_reason(reason: StayReason) -> bool:
    """Whether a node stays only for lack of spot room (see the module docstring)."""
    if reason.kind in (Kind.NO_CAPACITY, Kind.NO_SPOT_NODES):
        return True
    if reason.kind is Kind.NO_FIT and reason.cause is not None:
        return is_insufficient(reason.cause) or reason.cause in ROOM_CAUSES
    return False


class MovabilityMemo:
    """:func:`~shared.movable.movability` of each pod for :func:`capacity_needs`, kept from one cycle to the next
    while the pod is the same object (the watch-backed state hands each cycle the previous cycle's ``Pod``
    objects until an event replaces one), the configuration is equal and the PodDisruptionBudgets are the same
    by namespace, name and selector (all movability reads of them). Entries of pods not asked about in a cycle
    are dropped. The answers are those of ``movability`` itself."""

    def __init__(self) -> None:
        self._config: Config | None = None
        self._pdb_sig: tuple[object, ...] | None = None
        self._index: PdbIndex | None = None
        self._kept: dict[int, tuple[Pod, Movability]] = {}
        self._used: dict[int, tuple[Pod, Movability]] = {}

    def begin(self, config: Config, pdbs: Sequence[PDB]) -> None:
        sig = tuple((p.namespace, p.name, p.selector) for p in pdbs)
        if self._config is None or (config is not self._config and config != self._config) or sig != self._pdb_sig:
            self._config, self._pdb_sig, self._index = config, sig, PdbIndex(list(pdbs))
            self._kept, self._used = {}, {}
            return
        self._kept, self._used = self._used, {}

    def of(self, pod: Pod, pdbs: Sequence[PDB]) -> Movability:
        entry = self._kept.get(id(pod))
        if entry is None or entry[0] is not pod:
            assert self._config is not None and self._index is not None, "begin() first"
            entry = (pod, movability(pod, self._config, [pdbs[i] for i in self._index.indices(pod)]))
        self._used[id(pod)] = entry
        return entry[1]


def capacity_needs(
    snapshot: ClusterSnapshot,
    reasons: Mapping[str, StayReason],
    config: Config,
    memo: MovabilityMemo | None = None,
) -> list[CapacityNeed]:
    """The nodes of ``reasons`` (a plan's :attr:`~rescheduler.plan.records.Plan.undrainable`) that stay only
    for lack of spot room and would be worth draining once it has it (:mod:`rescheduler.plan.worth`, with
    ``worth.expected_stay``), smallest need first (so the caps of :func:`choose_needs` let the most nodes through),
    then by name. ``memo``: the run loop's, kept across its cycles (one is made otherwise)."""
    pdbs = list(snapshot.pdbs)
    memo = memo or MovabilityMemo()
    memo.begin(config, pdbs)
    out: list[CapacityNeed] = []
    for name, why in reasons.items():
        if not is_room_reason(why) or name not in snapshot.nodes:
            continue
        pods: list[Pod] = []
        for p in snapshot[name].pods:
            m = memo.of(p, pdbs)
            if m.blocks:  # the plan said otherwise: the snapshot changed under it; ask nothing
                pods = []
                break
            if m.moves:
                pods.append(p)
        if not pods or not weigh(snapshot[name].node, pods, config.worth.expected_stay, config.worth).worth:
            continue  # nothing to ask for, or a node not worth draining once spot has room
        cpu = sum(p.requests.get("cpu", 0) for p in pods)
        memory = sum(p.requests.get("memory", 0) for p in pods)
        out.append(CapacityNeed(name, tuple(pods), cpu, memory, why))
    out.sort(key=lambda n: (n.cpu, n.memory, len(n.pods), n.node))
    return out


@dataclass(frozen=True, slots=True)
class Caps:
    """What all placeholders together may hold at once (``capacity.max_pods``, ``max_cpu``, ``max_memory``)."""

    pods: int
    cpu: int
    memory: int

    @classmethod
    def of(cls, config: CapacityConfig) -> Caps:
        return cls(config.max_pods, resource_value("cpu", config.max_cpu), resource_value("memory", config.max_memory))


def choose_needs(
    needs: Iterable[CapacityNeed], caps: Caps, *, in_use: tuple[int, int, int], skip: Collection[str] = ()
) -> list[CapacityNeed]:
    """The needs to ask for now, in order: each whole (a node drains all or nothing, so half its room is
    useless), skipping a node in ``skip`` (already asked for) and any need that would take the placeholders
    past ``caps``, given ``in_use`` = (pods, millicores, bytes) held by the requests already out."""
    pods, cpu, memory = in_use
    out = []
    for need in needs:
        if need.node in skip:
            continue
        if pods + len(need.pods) > caps.pods or cpu + need.cpu > caps.cpu or memory + need.memory > caps.memory:
            continue
        pods += len(need.pods)
        cpu += need.cpu
        memory += need.memory
        out.append(need)
    return out


@dataclass(frozen=True, slots=True)
class Seen:
    """A placeholder as the watch shows it now."""

    name: str
    node_name: str
    """The node it is bound to (``""``: pending)."""
    node_class: str
    """Class of that node (``spot``, ``on-demand``, ``other``; ``""`` when pending or the node is unknown)."""
    running: bool
    terminating: bool


def judge(
    expected: Collection[str],
    seen_once: Collection[str],
    now: Mapping[str, Seen],
    *,
    provisioned: bool,
    waited: float,
    timeout: float,
    wanted: bool,
) -> tuple[str | None, str]:
    """Whether a request is over, as ``(outcome, why)``; ``(None, "")`` while it goes on, and
    ``(PROVISIONED, why)`` the first time all its placeholders run on spot (it goes on: the plan now counts
    their room as free, and the drain deletes them).

    ``expected`` are the placeholders created, ``seen_once`` those the watch has shown at least once (one not
    yet seen is not missing: the watch may lag the create), ``now`` those it shows now. ``waited`` is the time
    since the request was made, or since it was provisioned when ``provisioned``; ``wanted`` whether the node
    still needs the room (still a :class:`CapacityNeed`, or planned for a drain). Checked in this order: a
    placeholder on a non-spot node, one preempted (seen, now gone or terminating), the node no longer wanting
    the room, then the timeout.
    """
    for name in sorted(expected):
        s = now.get(name)
        if s is not None and s.node_name and s.node_class != "spot":
            return ON_DEMAND, f"placeholder {name} was bound to node {s.node_name}, which is not spot"
    for name in sorted(expected):
        s = now.get(name)
        if name in seen_once and (s is None or s.terminating):
            return PREEMPTED, f"placeholder {name} was preempted or deleted: a pod took its room"
    if not wanted:
        return DELETED, "the node no longer needs spot room"
    running = all((s := now.get(n)) is not None and s.running and s.node_class == "spot" for n in expected)
    if not provisioned and running:
        return PROVISIONED, f"{len(expected)} placeholder(s) Running on spot"
    if waited >= timeout:
        if provisioned:
            return TIMED_OUT, f"the node was not drained within {timeout:g}s of its spot capacity appearing"
        pending = sum(1 for n in expected if (s := now.get(n)) is None or not s.running)
        return TIMED_OUT, f"spot capacity did not appear within {timeout:g}s ({pending} placeholder(s) not Running)"
    return None, ""


def in_the_way(node: str, targets: Collection[str], placeholders: Iterable[Pod]) -> list[Pod]:
    """The placeholders among ``placeholders`` that could take the spot room a drain of ``node`` moves its pods
    to (``targets``: the spot nodes the plan moves them to). The drain evicts nothing until every one of them is
    gone, because kube-scheduler preempts a placeholder only for a pod that fits no node at all: an evicted pod's
    replacement that finds the room held and another node (an on-demand one) with room goes there instead.

    * the node's own placeholders: their room is the room the plan counts on;
    * every placeholder bound to a target: the plan counts a placeholder's room as free, like an expendable pod's;
    * every placeholder waiting for a node: the scheduler tries it again the moment room is freed, before the
      evicted pods' replacements exist, and it would take the room.

    A placeholder being deleted counts until it is gone: the scheduler counts its room until then too.
    """
    where = set(targets)
    return [
        p for p in placeholders if p.annotations.get(NODE_ANNOTATION) == node or not p.node_name or p.node_name in where
    ]
