"""An independent replay of how a plan's drains meet the PodDisruptionBudgets: the checker's half of the rule.

Written from the Eviction API's behaviour, not from the planner's code: the budgets selecting a pod are found
with :meth:`shared.model.PDB.selects` over every budget (no index), and the drain is replayed as the run loop
performs it: nodes one after another in plan order, each node's pods evicted one at a time in plan order.

* ``rate-limit``: an eviction is accepted only while its budget allows a disruption (``disruptionsAllowed``
  ≥ 1, pod selected by one budget at most); each accepted eviction uses one; while a budget allows none the
  drain waits (HTTP 429, retried) for the replacement of a pod evicted earlier under that budget to become
  Ready, which gives the disruption back. A pod whose budget allows none and has no replacement coming would
  wait forever: the plan is invalid.
* ``all-at-once``: the evictions planned per budget, across the plan, never exceed ``disruptionsAllowed``.

Either way the budget's healthy pods never drop below ``desiredHealthy`` (the allowance never goes negative),
which is what a watcher on the real control plane checks at every poll.

:func:`check_plan` is the whole independent checker the planner's tests and ``bench/plan_quality.py`` use:
every move re-checked with :func:`shared.fit.fits` on a fresh snapshot, what stays on drained nodes, the
budgets' pacing and the per-workload ceilings.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

from rescheduler.plan.records import Plan
from shared.classes import node_class, reclaim_reason
from shared.config import PDB_RATE_LIMIT, Config
from shared.eviction import FREE, REFUSED, budget_use, ignores_budgets
from shared.fit import fits
from shared.model import PDB, Pod
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, Switches

__all__ = ["pacing_problems", "check_plan"]


def pacing_problems(pdbs: Sequence[PDB], pods: dict[str, Pod], plan: Plan, rule: str) -> list[str]:
    """What is wrong with ``plan``'s evictions under ``rule``; ``pods`` maps each moved pod's key to the pod."""
    allowed = {b.key: b.disruptions_allowed for b in pdbs}
    waiting: dict[str, deque[str]] = {}  # budget -> replacements not yet Ready, oldest first
    problems: list[str] = []
    rank = {node: i for i, node in enumerate(plan.drained)}
    for m in sorted(plan.moves, key=lambda m: rank.get(m.source, len(rank))):  # stable: plan order per node
        pod = pods[m.pod]
        if ignores_budgets(pod):
            continue
        selecting = [b for b in pdbs if b.selects(pod)]
        if len(selecting) > 1:
            problems.append(f"{m.pod} is selected by {len(selecting)} PodDisruptionBudgets: evictions refuse it")
            continue
        if not selecting:
            continue
        use = budget_use(pod, selecting[0])
        if use is REFUSED:
            problems.append(f"{m.pod}: not Ready under {selecting[0].key}, whose policy is unknown")
            continue
        if use is FREE:
            continue
        key = selecting[0].key
        if rule == PDB_RATE_LIMIT:
            pending = waiting.setdefault(key, deque())
            while allowed[key] < 1 and pending:
                pending.popleft()  # an earlier replacement becomes Ready: the budget gives a disruption back
                allowed[key] += 1
            if allowed[key] < 1:
                problems.append(f"{m.pod}: PodDisruptionBudget {key} allows no disruption and none will come back")
                continue
            pending.append(m.pod)
        elif allowed[key] < 1:
            problems.append(f"{m.pod}: PodDisruptionBudget {key} over budget")
            continue
        allowed[key] -= 1
        assert allowed[key] >= 0  # healthy pods never below desiredHealthy
    return problems


def _fresh(snap: ClusterSnapshot) -> ClusterSnapshot:
    """A new snapshot from the same immutable objects: nothing the planner touched is reused."""
    nodes = [info.node for info in snap]
    pods = [p for info in snap for p in info.pods] + list(snap.pending)
    return ClusterSnapshot(
        nodes,
        pods,
        pdbs=snap.pdbs,
        namespaces=snap.namespaces.values(),
        pvs=snap.pvs.values(),
        pvcs=snap.pvcs.values(),
    )


def _stays(pod: Pod, cutoff: int, jobs_wait: bool = False) -> bool:
    """What may remain on a drained node: DaemonSet and mirror pods, expendable and finished pods, and with
    ``disruption.jobs: wait`` the pods of Jobs (the drain waits for them to finish in place)."""
    if jobs_wait and any(o.kind == "Job" and o.api_version.startswith("batch/") for o in pod.owners):
        return True
    ctrl = pod.controller
    if ctrl is not None and ctrl.kind in ("DaemonSet", "Node"):
        return True
    if "kubernetes.io/config.mirror" in pod.annotations:
        return True
    return pod.priority < cutoff or pod.phase in ("Succeeded", "Failed")


def _workload(pod: Pod) -> str | None:
    ctrl = pod.controller
    if ctrl is None:
        return None
    name = ctrl.name
    h = pod.labels.get("pod-template-hash")
    if ctrl.kind == "ReplicaSet" and h and name.endswith("-" + h):
        return f"{pod.namespace}/Deployment/{name[: -len(h) - 1]}"
    return f"{pod.namespace}/{ctrl.kind}/{name}"


def check_plan(snap: ClusterSnapshot, result: Plan, config: Config | None = None, switches: Switches = CURRENT) -> None:
    """Assert that ``result`` is a valid plan for ``snap`` under ``config`` (default ``Config()``): every move
    passes :func:`shared.fit.fits` after the moves before it, drained nodes keep only what may stay, budgets
    are met by the configured rule (:func:`pacing_problems`), ceilings and floors hold."""
    config = config if config is not None else Config()
    classes = config.node_classes
    cutoff = config.movability.expendable_priority_cutoff
    fresh = _fresh(snap)
    cls = {info.name: node_class(info.node, classes) for info in fresh}
    targets = {
        info.name
        for info in fresh
        if cls[info.name] == "spot" and info.node.ready and reclaim_reason(info.node, classes) is None
    }
    on_demand = {n for n, c in cls.items() if c == "on-demand"}
    # Every on-demand node is accounted for exactly once.
    assert set(result.drained) | set(result.undrainable) == on_demand
    assert not set(result.drained) & set(result.undrainable)
    assert all(isinstance(r, str) and r for r in result.undrainable.values())

    for t in targets:
        for p in [p for p in fresh[t].pods if p.priority < cutoff]:
            fresh.remove_pod(p)

    by_key = {p.key: p for info in fresh for p in info.pods}
    moved_keys: set[str] = set()
    drained = set(result.drained)
    for m in result.moves:
        assert m.source in drained, f"{m.pod} moves off {m.source}, which is not drained"
        assert m.target in targets, f"{m.pod} moves to {m.target}: not a ready spot node outside reclaim"
        assert m.pod not in moved_keys, f"{m.pod} moves twice"
        pod = by_key[m.pod]
        assert pod.node_name == m.source
        reasons = fits(pod, fresh[m.target], fresh, switches=switches)
        assert reasons == [], f"{m.pod} -> {m.target}: {[r.message for r in reasons]}"
        moved = fresh.move_pod(pod, m.target)
        by_key[m.pod] = moved
        moved_keys.add(m.pod)
    originals = {p.key: p for info in _fresh(snap) for p in info.pods}
    assert pacing_problems(list(fresh.pdbs), originals, result, config.rescheduler.pdb_rule) == []
    for name in result.drained:
        jobs_wait = config.disruption.jobs == "wait"
        left = [p.key for p in fresh[name].pods if not _stays(p, cutoff, jobs_wait)]
        assert left == [], f"drained node {name} still runs {left}"
    _check_ceilings(fresh, cls, config, moved_keys, by_key, snap)


def _check_ceilings(
    fresh: ClusterSnapshot,
    cls: dict[str, str],
    config: Config,
    moved_keys: set[str],
    by_key: dict[str, Pod],
    original: ClusterSnapshot,
) -> None:
    ceiling = config.spot_ceiling
    moved_workloads = {_workload(by_key[k]) for k in moved_keys} - {None}
    if not moved_workloads:
        return
    spot: Counter[str] = Counter()
    od: Counter[str] = Counter()
    total: Counter[str] = Counter()
    limits: dict[str, tuple[int, int]] = {}
    for info in original:  # expendable pods taken off the targets still count as on spot
        for p in info.pods:
            wk = _workload(p)
            if wk not in moved_workloads:
                continue
            now = fresh[by_key[p.key].node_name].name if p.key in by_key else info.name
            total[wk] += 1
            spot[wk] += cls[now] == "spot"
            od[wk] += cls[now] == "on-demand"
            pct = p.annotations.get(ceiling.max_spot_percent_annotation)
            floor = p.annotations.get(ceiling.min_on_demand_annotation)
            limits[wk] = (
                int(pct) if pct is not None else ceiling.default_max_spot_percent,
                int(floor) if floor is not None else ceiling.default_min_on_demand,
            )
    for wk in moved_workloads:
        pct, floor = limits[wk]
        assert spot[wk] * 100 <= pct * total[wk], f"{wk}: {spot[wk]}/{total[wk]} on spot, ceiling {pct}%"
        assert od[wk] >= floor, f"{wk}: {od[wk]} on on-demand, floor {floor}"
