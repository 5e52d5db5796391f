"""One housekeeping cycle's decision, as pure functions: may a node drain now, what does the plan say, which
drains start.

Kept apart from the run loop so it can be measured and tested without an API server: ``bench/run_cycle.py``
times snapshot + plan + :func:`decide` over a large state, and the unit tests feed it hand-made snapshots.
Everything here reads the snapshot and returns values; the drainer then re-checks each chosen node against
the live API before touching it. The contract with the loop is typed:

* :func:`gate` is the one owner of "may a node drain now", computed once per cycle: the nodes left alone whatever
  a plan says (resting after a failed drain, already marked, cordoned, a pod that cannot be read: a
  :class:`~rescheduler.plan.labels.DrainLabel` each), and how many drains may start (the disruption budget in
  force less the drains in flight and those finished less than ``node_drain_delay`` ago; one node at a time
  when no budget is configured; at most ``max_nodes_per_cycle``). The nodes left alone are kept out of the plan,
  so they take no PodDisruptionBudget allowance or spot room another node needs.
* :func:`plan_nodes` runs the planner (:mod:`rescheduler.plan.planner`) and answers one :class:`PlannedCycle`:
  the whole :class:`~rescheduler.plan.records.Plan`, the nodes to empty in plan order with their moves, what was
  held back on purpose (an operator's control, or a pod waiting for the room) and the spot nodes not yet targets.
* :func:`decide` orders the planned nodes the way a person would check them: a node with nothing to move is
  skipped, then one whose PodDisruptionBudgets would not let its drain start now (by the configured
  ``rescheduler.pdb_rule``: :func:`rescheduler.plan.safety.pdb_refusals`), then one whose budgets the drains in
  flight, or those chosen before it, still need (:func:`budget_claims`): two drains paced by one budget would
  each wait on the other, and the later one's evictions could time out; it waits its turn. The node this process
  runs on goes last, so a drain never starts by evicting the rescheduler itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rescheduler.plan.drain_marks import backoff_until, is_marked
from rescheduler.plan.gate import draining
from rescheduler.plan.labels import DrainLabel
from rescheduler.plan.records import Plan
from rescheduler.plan.safety import pdb_refusals
from rescheduler.plan.stay_reasons import CONTROLS, StayReason
from shared.classes import classifier
from shared.config import Config
from shared.controls import allowance
from shared.eviction import USES, budget_use, ignores_budgets
from shared.model import Node, Pod
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, Switches

if TYPE_CHECKING:
    from rescheduler.plan.candidates import PlanCache

__all__ = [
    "NodeMoves",
    "PlannedCycle",
    "Gate",
    "gate",
    "exclusion",
    "excluded_nodes",
    "plan_nodes",
    "Decision",
    "decide",
    "budget_claims",
    "count_classes",
]


@dataclass(frozen=True, slots=True)
class NodeMoves:
    """A node the plan empties: the pods it moves (keys) and where each goes."""

    node: str
    pods: tuple[str, ...]
    targets: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlannedCycle:
    """What the planner tells the loop in one cycle."""

    plan: Plan
    """The whole plan: why each other node stays (capacity mode reads it), its typed summary."""
    drains: tuple[NodeMoves, ...]
    """The nodes to empty, in plan order, each with its moves."""
    held: Mapping[str, StayReason]
    """Nodes held back on purpose: an operator's control (``disruption``), or a pod waiting for the room."""
    young_targets: int = 0
    """Spot nodes not yet targets (``disruption.min_target_age``)."""


@dataclass(frozen=True, slots=True)
class Gate:
    """May a node drain now, for one cycle (see the module docstring)."""

    excluded: Mapping[str, DrainLabel]
    """On-demand nodes left alone this cycle whatever a plan says, with the reason."""
    starts: int
    """How many drains may start this cycle."""


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
) -> DrainLabel | None:
    """Why this cycle leaves ``node`` alone whatever a plan says (``None``: it may be drained)."""
    until = max(backoff_until(node) or 0.0, memory_backoff.get(node.name, 0.0))
    if until > now:
        return DrainLabel.BACKOFF
    if is_marked(node, taint_key):
        return DrainLabel.ALREADY_MARKED
    if node.unschedulable:
        return DrainLabel.CORDONED
    if node.name in broken_nodes:
        return DrainLabel.UNREADABLE_POD
    return None


def excluded_nodes(
    snapshot: ClusterSnapshot,
    config: Config,
    *,
    now: float,
    memory_backoff: Mapping[str, float] | None = None,
    broken_nodes: Collection[str] = (),
) -> dict[str, DrainLabel]:
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


def gate(
    snapshot: ClusterSnapshot,
    config: Config,
    *,
    now: float,
    memory_backoff: Mapping[str, float] | None = None,
    broken_nodes: Collection[str] = (),
    in_flight: int = 0,
    cooling: int = 0,
) -> Gate:
    """This cycle's :class:`Gate`. ``now`` is Unix time (backoffs are wall-clock annotations, budgets' windows
    are read in it); ``in_flight`` the drains this process is advancing, ``cooling`` those that finished less than
    ``node_drain_delay`` ago (each keeps its place in the budget that long)."""
    excluded = excluded_nodes(snapshot, config, now=now, memory_backoff=memory_backoff, broken_nodes=broken_nodes)
    c = classifier(config.node_classes)
    on_demand = [info.node for info in snapshot if c.node_class(info.node.labels) == "on-demand"]
    # The marks count the drains in flight of any replica (a predecessor's included) until they are put right.
    busy = max(in_flight, draining(on_demand, config.rescheduler.drain_taint_key)) + cooling
    d = config.disruption
    if d.budgets:
        a = allowance(d, on_demand=len(on_demand), in_progress=busy, now=now)
        more = a.more if a.more is not None else len(on_demand)
    else:
        more = 1 - busy
    starts = max(0, min(config.rescheduler.max_nodes_per_cycle, more))
    return Gate(excluded, starts)


def budget_claims(pods: Iterable[Pod], pdbs: PdbIndex) -> Counter[str]:
    """Budget key → how many of ``pods``' evictions will use it (:mod:`shared.eviction`)."""
    out: Counter[str] = Counter()
    for p in pods:
        if ignores_budgets(p):
            continue
        matching = pdbs.selecting(p)
        if len(matching) == 1 and budget_use(p, matching[0]) is USES:
            out[matching[0].key] += 1
    return out


def decide(
    snapshot: ClusterSnapshot,
    planned: PlannedCycle,
    config: Config,
    *,
    excluded: Mapping[str, DrainLabel] | None = None,
    own_node: str = "",
    claimed: Mapping[str, int] | None = None,
) -> Decision:
    """Filter and order the planned nodes. ``excluded`` (the :class:`Gate`'s, kept out of the plan) are reported as
    skipped first; what was held back on purpose (:attr:`PlannedCycle.held`) is passed on in
    :attr:`Decision.held`. ``claimed`` (:func:`budget_claims` of the pods the drains in flight have yet to evict)
    is what those drains will still take of each budget."""
    pdbs = PdbIndex(snapshot.pdbs)
    allowed = {b.key: b.disruptions_allowed for b in snapshot.pdbs}
    taken: Counter[str] = Counter(claimed or {})
    chosen: list[NodeMoves] = []
    last: list[NodeMoves] = []
    skipped: list[tuple[str, str]] = [(node, label.value) for node, label in (excluded or {}).items()]
    for nm in planned.drains:
        info = snapshot.nodes.get(nm.node)
        if info is None:
            continue
        if not nm.pods:
            skipped.append((nm.node, DrainLabel.NOTHING_TO_MOVE.value))
            continue
        wanted = set(nm.pods)
        pods = [p for p in info.pods if p.key in wanted]
        if pdb_refusals(pods, pdbs, rule=config.rescheduler.pdb_rule):
            skipped.append((nm.node, DrainLabel.PDB_PRECHECK.value))
            continue
        claims = budget_claims(pods, pdbs)
        if any(allowed[key] - taken[key] < 1 for key in claims):
            skipped.append((nm.node, DrainLabel.PDB_IN_USE.value))
            continue
        taken.update(claims)
        (last if nm.node == own_node else chosen).append(nm)
    skipped.extend((node, CONTROLS[why.kind]) for node, why in planned.held.items())
    classes = count_classes(snapshot, config)
    return Decision(tuple(chosen + last), tuple(skipped), classes, dict(planned.held), planned.young_targets)


@dataclass(frozen=True, slots=True)
class Decision:
    drains: tuple[NodeMoves, ...]
    """Nodes to try, in order; the run loop starts as many as its :class:`Gate` allows."""
    skipped: tuple[tuple[str, str], ...]
    """``(node, reason)`` for planned nodes left alone this cycle."""
    nodes_by_class: Mapping[str, int]
    held: Mapping[str, StayReason] = field(default_factory=dict)
    """Nodes held back on purpose this cycle (:attr:`PlannedCycle.held`), for metrics and Events."""
    young_targets: int = 0


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
) -> PlannedCycle:
    """:func:`rescheduler.plan.planner.plan` as the run loop needs it (module docstring). The planner leaves the
    snapshot as it found it. ``time_budget`` is read on ``clock`` (both or neither). ``cache`` is a
    :class:`rescheduler.plan.candidates.PlanCache` the caller keeps from one cycle to the next (see
    :func:`rescheduler.run.default_planner`); the result is the same without it, only slower. ``switches``: the
    cluster's kube-scheduler rules (:mod:`shared.switches`). ``exclude`` (the :class:`Gate`'s) are not
    candidates. ``now`` (Unix seconds) is when the operator's ``disruption`` controls are judged."""
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
    by_node: dict[str, list[tuple[str, str]]] = {}
    for m in result.moves:
        by_node.setdefault(m.source, []).append((m.pod, m.target))
    drains = []
    for node in result.drained:
        moves = by_node.get(node, [])
        drains.append(NodeMoves(node, tuple(k for k, _ in moves), dict(moves)))
    held = {node: why for node, why in result.reasons.items() if why.kind in CONTROLS}
    return PlannedCycle(result, tuple(drains), held, result.summary.spot_too_young or 0)
