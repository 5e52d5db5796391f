"""pusher/k8s-spot-rescheduler's packing, written plainly over :func:`shared.fit.fits`: the yardstick.

pusher decides per on-demand node, least requested CPU first: it sorts the node's pods by CPU request, largest
first, and puts each on the first spot node that fits, spot nodes sorted by requested CPU, fullest first; if one
pod finds no room the node is skipped (all or nothing). pusher evicts one pod at a time through the Eviction API
and retries while a PodDisruptionBudget answers 429, so a budget blocks a pod only when it allows no disruption now
(``rescheduler.pdb_rule: rate-limit``, the default); under ``all-at-once`` the evictions planned per budget are
counted against it, as the planner then does. This module does exactly that, with the same policy as the planner
(movability, PDB budgets, spot ceilings, expendable pods taking no room, targets only Ready, schedulable spot nodes
not being reclaimed, pods waiting for a node planned first by :mod:`rescheduler.plan.waiting`), so that a
comparison measures packing and nothing else. Workload identity, ceilings, which budgets select a pod and whether
its eviction uses one (:mod:`shared.eviction`) come from :mod:`shared`, as the planner's do; the packing and the
budget arithmetic are written here again, plainly.

It is deliberately naive: every candidate is checked with the full :func:`shared.fit.fits`, no index, no
incremental state. That makes it slow on big clusters and an independent cross-check of the planner: the
planner's own ``pusher`` strategy must produce the same plan (``tests/unit/test_planner.py``). It lives with
the tests and benchmarks (``bench/plan_quality.py``), not in the product.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from rescheduler.plan.records import Move, Plan, Summary
from rescheduler.plan.stay_reasons import (
    NODE_DO_NOT_DISRUPT_TEXT,
    NODE_NOT_READY_TEXT,
    PDB_UNKNOWN_POLICY_TEXT,
    Kind,
    StayReason,
)
from rescheduler.plan.waiting import release, reserve
from shared.classes import node_class, reclaim_reason
from shared.config import PDB_RATE_LIMIT, Config
from shared.eviction import FREE, REFUSED, budget_use, ignores_budgets
from shared.fit import fits
from shared.model import PDB, Pod
from shared.movable import is_expendable, movability, node_do_not_disrupt
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.workloads import ceiling_breach, spot_ceiling, workload_key

__all__ = ["pusher_plan", "movable_pods", "spot_targets"]


def pusher_plan(snapshot: ClusterSnapshot, config: Config | None = None, *, plan_waiting: bool = True) -> Plan:
    """The pusher algorithm's plan for ``snapshot`` (left unchanged). Its summary holds only the counts.

    ``plan_waiting=False``: pending pods are not looked at, as k8s-spot-rescheduler itself does (the churn
    benchmark's pusher-like policy); by default they hold nodes as the planner's do, so that plans compare packing.
    """
    config = config or Config()
    if not plan_waiting:
        return _packed(snapshot, config, {})
    waiting = reserve(snapshot, config)
    try:
        result = _packed(snapshot, config, waiting.holds)
    finally:
        release(snapshot, waiting)
    return Plan(result.moves, result.drained, {**result.reasons, **waiting.holds}, result.summary)


def _packed(snapshot: ClusterSnapshot, config: Config, held: Mapping[str, StayReason]) -> Plan:
    classes = config.node_classes
    cutoff = config.movability.expendable_priority_cutoff
    targets, candidates = spot_targets(snapshot, config)
    candidates = [c for c in candidates if c.name not in held]
    spot_names = {i.name for i in snapshot if node_class(i.node, classes) == "spot"}
    od_names = {i.name for i in candidates}
    preempted = [p for t in targets for p in t.pods if is_expendable(p, cutoff)]
    for p in preempted:
        snapshot.remove_pod(p)

    # Workload shares, counted on the whole cluster (expendable pods on spot still count as on spot).
    shares: dict[str, list[int]] = {}
    for info in snapshot:
        for p in info.pods:
            _count(shares, p, info.name in spot_names, info.name in od_names)
    for p in preempted:
        _count(shares, p, True, False)

    pdbs = list(snapshot.pdbs)
    index = PdbIndex(pdbs)
    pdb_used = [0] * len(pdbs)
    moves: list[Move] = []
    drained: list[str] = []
    undrainable: dict[str, StayReason] = {}
    committed: list[tuple[Pod, Pod]] = []
    try:
        for info in sorted(candidates, key=lambda n: n.requested.get("cpu", 0)):
            why, movable, pdb_of = movable_pods(info, config, index)
            if why is None:
                why = _budgets(movable, pdb_of, pdbs, pdb_used, shares, config)
            if why is None:
                order = sorted(targets, key=lambda t: -t.requested.get("cpu", 0))
                placed: list[tuple[Pod, Pod]] = []
                for pod in sorted(movable, key=lambda p: (-p.requests.get("cpu", 0), p.key)):
                    target = next((t for t in order if not fits(pod, t, snapshot, first_only=True)), None)
                    if target is None:
                        why = StayReason(Kind.NO_FIT, "fits no spot node", pod=pod.key)
                        break
                    placed.append((pod, snapshot.move_pod(pod, target.name)))
                if why is not None:
                    _undo(snapshot, placed)
                else:
                    committed.extend(placed)
                    moves.extend(Move(p.key, info.name, m.node_name) for p, m in placed)
                    drained.append(info.name)
                    for i in pdb_of:
                        if i is not None:
                            pdb_used[i] += 1
                    for p in movable:
                        wk = workload_key(p)
                        if wk is not None:
                            shares[wk][0] += 1
                            shares[wk][1] -= 1
                    continue
            undrainable[info.name] = why
    finally:
        _undo(snapshot, committed)
        for p in preempted:
            snapshot.add_pod(p)
    summary = Summary(drained=len(drained), pods_moved=len(moves), undrainable=len(undrainable))
    return Plan(tuple(moves), tuple(drained), undrainable, summary)


def spot_targets(snapshot: ClusterSnapshot, config: Config) -> tuple[list[NodeInfo], list[NodeInfo]]:
    """``(targets, candidates)``: Ready spot nodes not being reclaimed, and the on-demand nodes."""
    classes = config.node_classes
    targets: list[NodeInfo] = []
    candidates: list[NodeInfo] = []
    for info in snapshot:
        cls = node_class(info.node, classes)
        if cls == "spot" and info.node.ready and reclaim_reason(info.node, classes) is None:
            targets.append(info)
        elif cls == "on-demand":
            candidates.append(info)
    return targets, candidates


def _count(shares: dict[str, list[int]], pod: Pod, on_spot: bool, on_demand: bool) -> None:
    wk = workload_key(pod)
    if wk is None:
        return
    s = shares.setdefault(wk, [0, 0, 0])  # spot, on-demand, total
    s[0] += on_spot
    s[1] += on_demand
    s[2] += 1


def movable_pods(
    info: NodeInfo, config: Config, pdbs: Sequence[PDB] | PdbIndex
) -> tuple[StayReason | None, list[Pod], list[int | None]]:
    """``(why the node cannot be drained or None, pods to move, index of the PDB each one's eviction uses or None)``."""
    index = pdbs if isinstance(pdbs, PdbIndex) else PdbIndex(pdbs)
    if not info.node.ready:
        return StayReason(Kind.NODE_NOT_READY, NODE_NOT_READY_TEXT), [], []
    marker = node_do_not_disrupt(info.node, config)
    if marker is not None:
        return StayReason(Kind.NODE_DO_NOT_DISRUPT, NODE_DO_NOT_DISRUPT_TEXT.format(key=marker)), [], []
    movable: list[Pod] = []
    pdb_of: list[int | None] = []
    for p in info.pods:
        matching = index.indices(p)
        m = movability(p, config, [index.pdbs[i] for i in matching])
        if m.blocks:
            return StayReason(Kind.NOT_MOVABLE, m.reason, pod=p.key, cause=m.reason), [], []
        if not m.moves:
            continue
        if ignores_budgets(p):  # a Pending pod: its eviction reads no budget
            matching = []
        if len(matching) > 1:
            return StayReason(Kind.MULTIPLE_PDBS, "selected by more than one PodDisruptionBudget", pod=p.key), [], []
        budget = matching[0] if matching else None
        if budget is not None:
            use = budget_use(p, index.pdbs[budget])
            if use is REFUSED:
                pdb = index.pdbs[budget]
                text = PDB_UNKNOWN_POLICY_TEXT.format(pdb=pdb.key, policy=pdb.unhealthy_pod_eviction_policy)
                return StayReason(Kind.PDB_UNKNOWN_POLICY, text, pod=p.key), [], []
            if use is FREE:
                budget = None
        movable.append(p)
        pdb_of.append(budget)
    return None, movable, pdb_of


def _budgets(
    movable: list[Pod],
    pdb_of: list[int | None],
    pdbs: list[PDB],
    pdb_used: list[int],
    shares: dict[str, list[int]],
    config: Config,
) -> StayReason | None:
    need = Counter(i for i in pdb_of if i is not None)
    rate_limit = config.rescheduler.pdb_rule == PDB_RATE_LIMIT
    for i, n in need.items():
        if pdbs[i].disruptions_allowed < 1 if rate_limit else pdb_used[i] + n > pdbs[i].disruptions_allowed:
            return StayReason(Kind.PDB_BUDGET, f"PodDisruptionBudget {pdbs[i].key} exhausted")
    per_workload = Counter(workload_key(p) for p in movable)
    for p in movable:
        wk = workload_key(p)
        if wk is None:
            continue
        ceiling = spot_ceiling(p.annotations, config.spot_ceiling)
        spot, od, total = shares[wk]
        k = per_workload[wk]
        if ceiling_breach(ceiling, spot + k, od - k, total) is not None:
            return StayReason(Kind.SPOT_CEILING, f"workload {wk}: spot ceiling")
    return None


def _undo(snapshot: ClusterSnapshot, placed: list[tuple[Pod, Pod]]) -> None:
    for original, moved in reversed(placed):
        snapshot.remove_pod(moved)
        snapshot.add_pod(original)
