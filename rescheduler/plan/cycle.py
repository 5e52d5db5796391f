"""One housekeeping cycle's decision, as a pure function: which planned nodes to drain now, and why not the others.

Kept apart from the run loop so it can be measured and tested without an API server: ``bench/run_cycle.py``
times snapshot + plan + :func:`decide` over a large state, and the unit tests feed it hand-made snapshots.
Everything here reads the snapshot and returns values; the drainer then re-checks the chosen node against
the live API before touching it.

The order of the checks is the order a person would ask: is the cluster short of room (pause everything),
is this node resting after a failed drain (backoff), is something already being done to it (our mark, a
cordon), can we read every pod on it, and would the PodDisruptionBudgets let its drain start now (by the
configured ``rescheduler.pdb_rule``: :func:`rescheduler.plan.safety.pdb_refusals`).
The node this process runs on goes last, so a drain never starts by evicting the rescheduler itself.

The per-node checks that do not depend on the plan (:func:`exclusion`) run twice: before planning
(:func:`excluded_nodes`, handed to the planner, so a node that will not be drained now does not take the
PodDisruptionBudget allowances and spot room another node needs), and again in :func:`decide` for any node
a plan made without them still names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rescheduler.plan.marks import backoff_until, is_marked
from rescheduler.plan.reasons import CONTROLS, StayReason
from rescheduler.plan.safety import pdb_refusals, unschedulable_pods
from shared.classes import classifier
from shared.config import Config
from shared.model import Node
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, Switches

if TYPE_CHECKING:
    from rescheduler.plan.candidates import PlanCache
    from rescheduler.plan.records import Plan

__all__ = [
    "NodeMoves",
    "Planned",
    "exclusion",
    "excluded_nodes",
    "plan_nodes",
    "Decision",
    "decide",
    "count_classes",
    "SKIP_BACKOFF",
    "SKIP_MARKED",
    "SKIP_CORDONED",
    "SKIP_UNREADABLE_POD",
    "SKIP_NOTHING_TO_MOVE",
    "SKIP_PDB_CACHED",
    "SKIP_LIMIT",
]

SKIP_BACKOFF = "backoff"
SKIP_MARKED = "already-marked"
SKIP_CORDONED = "cordoned"
SKIP_UNREADABLE_POD = "unreadable-pod"
SKIP_NOTHING_TO_MOVE = "nothing-to-move"
SKIP_PDB_CACHED = "pdb-precheck"
SKIP_LIMIT = "cycle-limit"


@dataclass(frozen=True, slots=True)
class NodeMoves:
    """A node the plan empties: the pods it moves (keys) and where each goes."""

    node: str
    pods: tuple[str, ...]
    targets: Mapping[str, str] = field(default_factory=dict)


class Planned(list[NodeMoves]):
    """:func:`plan_nodes`' answer: the nodes to empty, in plan order (a list, as before), and what the operator's
    ``disruption`` controls held back: ``held`` (node → the control's
    :class:`~rescheduler.plan.reasons.StayReason`) and ``young_targets`` (spot nodes not yet targets)."""

    held: dict[str, StayReason]
    young_targets: int

    def __init__(
        self, nodes: Iterable[NodeMoves] = (), held: Mapping[str, StayReason] | None = None, young_targets: int = 0
    ) -> None:
        super().__init__(nodes)
        self.held = dict(held or {})
        self.young_targets = young_targets


@dataclass(frozen=True, slots=True)
class Decision:
    paused: str
    """Why nothing is done this cycle (``""``: not paused)."""
    drains: tuple[NodeMoves, ...]
    """Nodes to try, in order; the run loop drains up to ``max_nodes_per_cycle`` of them."""
    skipped: tuple[tuple[str, str], ...]
    """``(node, reason)`` for planned nodes left alone this cycle."""
    unschedulable: int
    nodes_by_class: Mapping[str, int]
    held: Mapping[str, StayReason] = field(default_factory=dict)
    """Nodes an operator's control held back this cycle (:attr:`Planned.held`), for metrics and Events."""
    young_targets: int = 0


def count_classes(snapshot: ClusterSnapshot, config: Config) -> dict[str, int]:
    c = classifier(config.node_classes)
    out = {"spot": 0, "on-demand": 0, "other": 0}
    for info in snapshot:
        out[c.node_class(info.node.labels)] += 1
    return out


def exclusion(
    node: Node,
    taint_key: str,
    *,
    now: float,
    memory_backoff: Mapping[str, float],
    broken_nodes: Collection[str],
) -> str | None:
    """Why this cycle leaves ``node`` alone whatever a plan says (``None``: it may be drained)."""
    until = max(backoff_until(node) or 0.0, memory_backoff.get(node.name, 0.0))
    if until > now:
        return SKIP_BACKOFF
    if is_marked(node, taint_key):
        return SKIP_MARKED
    if node.unschedulable:
        return SKIP_CORDONED
    if node.name in broken_nodes:
        return SKIP_UNREADABLE_POD
    return None


def excluded_nodes(
    snapshot: ClusterSnapshot,
    config: Config,
    *,
    now: float,
    memory_backoff: Mapping[str, float] | None = None,
    broken_nodes: Collection[str] = (),
) -> dict[str, str]:
    """The on-demand nodes this cycle leaves alone, with the reason: to be kept out of the plan."""
    c = classifier(config.node_classes)
    taint_key = config.rescheduler.drain_taint_key
    out = {}
    for info in snapshot:
        node = info.node
        if c.node_class(node.labels) != "on-demand":
            continue
        why = exclusion(node, taint_key, now=now, memory_backoff=memory_backoff or {}, broken_nodes=broken_nodes)
        if why is not None:
            out[node.name] = why
    return out


def decide(
    snapshot: ClusterSnapshot,
    planned: Iterable[NodeMoves],
    config: Config,
    *,
    now: float,
    own_node: str = "",
    memory_backoff: Mapping[str, float] | None = None,
    broken_nodes: Collection[str] = (),
    unschedulable: int | None = None,
    excluded: Mapping[str, str] | None = None,
) -> Decision:
    """Filter and order the planned nodes. ``now`` is Unix time (backoffs are wall-clock annotations).
    ``excluded`` (:func:`excluded_nodes`, kept out of the plan) are reported as skipped first. What the
    operator's controls held back (a :class:`Planned`'s ``held``) is passed on in :attr:`Decision.held`."""
    held = dict(getattr(planned, "held", None) or {})
    young = int(getattr(planned, "young_targets", 0) or 0)
    classes = count_classes(snapshot, config)
    if unschedulable is None:
        unschedulable = len(unschedulable_pods(snapshot.pending, config.namespace))
    if unschedulable:
        return Decision(f"{unschedulable} pods are unschedulable", (), (), unschedulable, classes, held, young)
    taint_key = config.rescheduler.drain_taint_key
    memory_backoff = memory_backoff or {}
    pdbs = PdbIndex(snapshot.pdbs)
    chosen: list[NodeMoves] = []
    last: list[NodeMoves] = []
    skipped: list[tuple[str, str]] = list((excluded or {}).items())
    for nm in planned:
        info = snapshot.nodes.get(nm.node)
        if info is None:
            continue
        why = exclusion(info.node, taint_key, now=now, memory_backoff=memory_backoff, broken_nodes=broken_nodes)
        if why is not None:
            skipped.append((nm.node, why))
            continue
        if not nm.pods:
            skipped.append((nm.node, SKIP_NOTHING_TO_MOVE))
            continue
        wanted = set(nm.pods)
        pods = [p for p in info.pods if p.key in wanted]
        if pdb_refusals(pods, pdbs, rule=config.rescheduler.pdb_rule):
            skipped.append((nm.node, SKIP_PDB_CACHED))
            continue
        (last if nm.node == own_node else chosen).append(nm)
    skipped.extend((node, CONTROLS[why.kind]) for node, why in held.items())
    return Decision("", tuple(chosen + last), tuple(skipped), 0, classes, held, young)


def plan_nodes(
    snapshot: ClusterSnapshot,
    config: Config,
    *,
    time_budget: float | None = None,
    clock: Callable[[], float] | None = None,
    cache: PlanCache | None = None,
    switches: Switches = CURRENT,
    exclude: Mapping[str, str] | None = None,
    now: float | None = None,
    sink: Callable[[Plan], None] | None = None,
) -> Planned:
    """:func:`rescheduler.plan.planner.plan` as the run loop needs it: the nodes it empties, in plan order, each
    with its moves. The planner leaves the snapshot as it found it. ``time_budget`` is read on ``clock`` (both
    or neither). ``cache`` is a :class:`rescheduler.plan.candidates.PlanCache` the caller keeps from one cycle
    to the next (see :func:`rescheduler.run.default_planner`); the result is the same without it, only slower.
    ``switches``: the cluster's kube-scheduler rules (:mod:`shared.switches`). ``exclude``
    (:func:`excluded_nodes`) are not candidates. ``now`` (Unix seconds) is when the operator's ``disruption``
    controls are judged; what they hold back is in the answer's ``held``. ``sink``, if given, receives the whole
    :class:`~rescheduler.plan.records.Plan` (why each other node stays: capacity mode reads it)."""
    from rescheduler.plan.planner import plan  # the heavy import, kept off the CLI's other paths

    result = plan(
        snapshot,
        config,
        time_budget=time_budget,
        clock=clock,
        cache=cache,
        switches=switches,
        exclude=exclude,
        now=now,
    )
    if sink is not None:
        sink(result)
    by_node: dict[str, list[tuple[str, str]]] = {}
    for m in result.moves:
        by_node.setdefault(m.source, []).append((m.pod, m.target))
    out = []
    for node in result.drained:
        moves = by_node.get(node, [])
        out.append(NodeMoves(node, tuple(k for k, _ in moves), dict(moves)))
    held = {node: why for node, why in result.reasons.items() if why.kind in CONTROLS}
    return Planned(out, held, int(result.summary.get("spot_too_young", 0)))
