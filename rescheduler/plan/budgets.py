"""PodDisruptionBudgets and per-workload spot ceilings: what a plan may still take, node by node.

A :class:`Ledger` is the running account of one greedy pass: the evictions planned per budget and the
spot/on-demand split of every workload with a restrictive ceiling. :meth:`Ledger.refusal` answers, before
anything of a node moves, whether all of its pods may go at once; :meth:`Ledger.commit` books a drained node.

The budget rule is one object, chosen by ``rescheduler.pdb_rule`` (:func:`budget_rule`):

* :class:`RateLimit` (the default): a budget is a rate limit, as ``kubectl drain``, pusher, descheduler and
  Karpenter treat it. A node is blocked only when a budget selecting one of its pods allows no disruption now
  (``disruptionsAllowed < 1``); the drain evicts through the Eviction API, which answers 429 while the budget
  is used up, and goes on as replacements become Ready. Several pods of one budget on a node, and several
  planned nodes sharing one, are fine: the budget paces the drain (:func:`pacing`).
* :class:`BudgetRule` (``all-at-once``, cluster-autoscaler's scale-down rule): the evictions planned per
  budget, counted across the plan's nodes, never exceed its ``disruptionsAllowed``, so every eviction of the
  plan is allowed at once.

A pod selected by more than one budget blocks its node under both (the Eviction API refuses it;
:mod:`rescheduler.plan.candidates`). An eviction the Eviction API lets go without using its budget (a ``Pending``
pod, a not-Ready one under ``AlwaysAllow`` or a healthy budget: :mod:`shared.eviction`) counts against none:
each rule reads :attr:`~rescheduler.plan.candidates.Candidate.budgets`, the budgets the node's evictions use.

Nodes that compete for a scarce budget conflict: draining one that takes the last disruption of two budgets
can cost two other nodes. :func:`dynamic_order` takes nodes fewest conflicts first, re-ranked as budgets
are used (the classic greedy for independent sets).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rescheduler.plan.candidates import Candidate, Candidates
from rescheduler.plan.stay_reasons import Kind, StayReason
from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT
from shared.model import PDB
from shared.workloads import BREACH_FLOOR, ceiling_breach, workload_key

__all__ = [
    "Share",
    "BudgetRule",
    "RateLimit",
    "Pacing",
    "budget_rule",
    "pacing",
    "Ledger",
    "workload_shares",
    "count_conflicts",
    "dynamic_order",
]


@dataclass(slots=True)
class Share:
    """A workload's pods on spot, on on-demand nodes, and in all, as a plan changes them."""

    spot: int = 0
    on_demand: int = 0
    total: int = 0


class BudgetRule:
    """``all-at-once``: evictions planned per budget, counted across every node of the plan, stay within
    ``disruptionsAllowed``."""

    name = PDB_ALL_AT_ONCE
    competes = True
    """Whether :meth:`scarce` can ever be true, i.e. whether candidates can compete for budgets."""

    def __init__(self, pdbs: Sequence[PDB]) -> None:
        self.pdbs = pdbs
        self.allowed = [p.disruptions_allowed for p in pdbs]

    def refusal(self, w: Candidate, used: Sequence[int]) -> StayReason | None:
        """The first of the node's pods whose budget cannot take all the node's evictions now."""
        need: Counter[int] = Counter(i for i in w.budgets if i is not None)
        for p, i in zip(w.movable, w.budgets, strict=True):
            if i is None:
                continue
            pdb = self.pdbs[i]
            if used[i] + need[i] > pdb.disruptions_allowed:
                planned = f", {used[i]} already planned" if used[i] else ""
                return StayReason(
                    Kind.PDB_BUDGET,
                    f"PodDisruptionBudget {pdb.key} allows {pdb.disruptions_allowed} disruption(s)"
                    f"{planned}, this node needs {need[i]}",
                    pod=p.key,
                )
        return None

    def commit(self, w: Candidate, used: list[int]) -> None:
        for i in w.budgets:
            if i is not None:
                used[i] += 1

    def fits_alone(self, need: Counter[int]) -> bool:
        """Whether a node needing ``need`` evictions per budget could drain with no other node drained."""
        return all(n <= self.allowed[b] for b, n in need.items())

    def scarce(self, b: int, wanted: int, used: int) -> bool:
        """Whether budget ``b``, with ``used`` evictions planned, cannot serve ``wanted`` more."""
        return wanted > self.allowed[b] - used


class RateLimit(BudgetRule):
    """``rate-limit``: a budget blocks a node only while it allows no disruption now; otherwise it paces the
    drain and never runs out, so budgets never make nodes compete."""

    name = PDB_RATE_LIMIT
    competes = False

    def refusal(self, w: Candidate, used: Sequence[int]) -> StayReason | None:
        """The first of the node's pods whose budget allows no disruption now."""
        for p, i in zip(w.movable, w.budgets, strict=True):
            if i is not None and self.allowed[i] < 1:
                pdb = self.pdbs[i]
                return StayReason(
                    Kind.PDB_BUDGET,
                    f"PodDisruptionBudget {pdb.key} allows {max(pdb.disruptions_allowed, 0)} disruption(s) now",
                    pod=p.key,
                )
        return None

    def fits_alone(self, need: Counter[int]) -> bool:
        return all(self.allowed[b] >= 1 for b in need)

    def scarce(self, b: int, wanted: int, used: int) -> bool:
        return False


def budget_rule(pdbs: Sequence[PDB], name: str) -> BudgetRule:
    """The rule ``rescheduler.pdb_rule`` names, over ``pdbs``."""
    if name == PDB_RATE_LIMIT:
        return RateLimit(pdbs)
    if name == PDB_ALL_AT_ONCE:
        return BudgetRule(pdbs)
    raise ValueError(f"unknown PodDisruptionBudget rule {name!r}")


@dataclass(frozen=True, slots=True)
class Pacing:
    """A budget that paces one planned drain: ``pods`` of the node's pods are selected by ``pdb``, which
    allows only ``allowed`` disruptions now. The drain evicts at most what the budget allows at a time and
    retries the rest (HTTP 429) as replacements become Ready."""

    pdb: str
    pods: int
    allowed: int

    @property
    def note(self) -> str:
        return (
            f"PodDisruptionBudget {self.pdb} allows {self.allowed} disruption(s) at a time: "
            f"{self.pods} pod(s) here, evicted as replacements become Ready"
        )

    def to_json(self) -> dict[str, str | int]:
        return {"pdb": self.pdb, "pods": self.pods, "allowed": self.allowed}


def pacing(drained: Sequence[Candidate], pdbs: Sequence[PDB]) -> dict[str, tuple[Pacing, ...]]:
    """Per drained node, the budgets that allow fewer disruptions than the node has pods of theirs: its
    drain waits on them. Nodes drain one after another, each waiting for its replacements to be Ready, so a
    budget shared with an earlier node is whole again by then. Empty under ``all-at-once``, by its rule."""
    out: dict[str, tuple[Pacing, ...]] = {}
    for w in drained:
        need = Counter(i for i in w.budgets if i is not None)
        notes = tuple(
            Pacing(pdbs[i].key, need[i], max(pdbs[i].disruptions_allowed, 0))
            for i in sorted(need)
            if need[i] > pdbs[i].disruptions_allowed
        )
        if notes:
            out[w.name] = notes
    return out


def workload_shares(cands: Candidates) -> dict[str, Share]:
    """Current spot/on-demand split of every workload with a restrictive ceiling among the movable pods."""
    wanted = {
        wk
        for w in cands.work
        for wk, ceiling in zip(w.analysis.workloads, w.analysis.ceilings, strict=True)
        if wk is not None and ceiling.restrictive
    }
    shares: dict[str, Share] = {wk: Share() for wk in wanted}
    if not wanted:
        return shares
    sim = cands.sim
    class_of = sim.class_of
    for info in sim.snapshot:
        counts = cands.workload_counts(info)
        common = counts.keys() & wanted
        if not common:
            continue
        cls = class_of.get(info.name)
        for wk in common:
            n = counts[wk]
            share = shares[wk]
            share.total += n
            if cls == "spot":
                share.spot += n
            elif cls == "on-demand":
                share.on_demand += n
    for p in sim.preempted:  # they still count as the workload's pods on spot
        key = workload_key(p)
        preempted_share = shares.get(key) if key is not None else None
        if preempted_share is not None:
            preempted_share.total += 1
            preempted_share.spot += 1
    return shares


class Ledger:
    """What one pass has used so far: evictions per budget and the workloads' splits."""

    __slots__ = ("rule", "used", "shares")

    def __init__(self, rule: BudgetRule, shares: dict[str, Share]) -> None:
        self.rule = rule
        self.used = [0] * len(rule.pdbs)
        self.shares = {k: Share(v.spot, v.on_demand, v.total) for k, v in shares.items()}

    def refusal(self, w: Candidate) -> StayReason | None:
        """Budgets and ceilings for all of the node's pods at once, before anything moves."""
        why = self.rule.refusal(w, self.used)
        if why is not None:
            return why
        a = w.analysis
        shares = self.shares
        per_workload: Counter[str] = Counter(wk for wk in a.workloads if wk is not None and wk in shares)
        for p, wk, ceiling in zip(a.movable, a.workloads, a.ceilings, strict=True):
            if wk is None or wk not in shares:
                continue
            share = shares[wk]
            k = per_workload[wk]
            breach = ceiling_breach(ceiling, share.spot + k, share.on_demand - k, share.total)
            if breach == BREACH_FLOOR:
                return StayReason(
                    Kind.ON_DEMAND_FLOOR,
                    f"workload {wk} must keep at least {ceiling.min_on_demand} pod(s) on on-demand nodes",
                    pod=p.key,
                )
            if breach is not None:
                return StayReason(
                    Kind.SPOT_CEILING,
                    f"workload {wk} may run at most {ceiling.max_spot_percent}% of its {share.total} pods on spot "
                    f"({share.spot} already do)",
                    pod=p.key,
                )
        return None

    def commit(self, w: Candidate) -> None:
        self.rule.commit(w, self.used)
        for wk in w.analysis.workloads:
            share = self.shares.get(wk) if wk is not None else None
            if share is not None:
                share.spot += 1
                share.on_demand -= 1


def count_conflicts(cands: Candidates, rule: BudgetRule) -> None:
    """For each candidate, how many others want a budget it wants when there is not enough for all."""
    users: dict[int, list[Candidate]] = {}
    for w in cands.work:
        if w.blocker is None:
            for i in set(i for i in w.budgets if i is not None):
                users.setdefault(i, []).append(w)
    for i, ws in users.items():
        need = sum(sum(1 for j in w.budgets if j == i) for w in ws)
        if rule.scarce(i, need, 0):
            for w in ws:
                w.conflicts += len(ws) - 1


def dynamic_order(
    work: Sequence[Candidate], rule: BudgetRule, ledger: Ledger, held: frozenset[str], tie: Callable[[Candidate], float]
) -> Iterator[Candidate]:
    """Candidates fewest-conflicts first, re-evaluated as budgets get used (greedy independent set).

    A candidate conflicts with another when both want a budget whose remaining allowance cannot serve all
    the candidates still wanting it. After each node (drained or not) the candidates sharing a budget
    with it are re-ranked; ``ledger`` is the caller's running account, read at each step. Ties: ``tie``
    (smaller first), then the snapshot's order. Blocked nodes come last.
    """
    need: list[Counter[int]] = [Counter(i for i in w.budgets if i is not None) for w in work]
    # Candidates that can never be drained (a budget too small for them alone) or are held back do
    # not compete for budgets: they come last.
    open_ = [w.blocker is None and w.name not in held and rule.fits_alone(need[k]) for k, w in enumerate(work)]
    if not rule.competes:
        # No budget is ever scarce: every candidate has no conflicts and keeps them, so the order is the
        # tie order the heap below would give, without re-ranking anything.
        yield from (work[k] for _, k in sorted((tie(w), k) for k, w in enumerate(work) if open_[k]))
        yield from (w for k, w in enumerate(work) if not open_[k])
        return
    users: dict[int, set[int]] = {}
    total: Counter[int] = Counter()
    for k in range(len(work)):
        if open_[k]:
            for b, n in need[k].items():
                users.setdefault(b, set()).add(k)
                total[b] += n
    used = ledger.used

    def conflicts(k: int) -> int:
        c = 0
        for b in need[k]:
            if rule.scarce(b, total[b], used[b]):
                c += len(users[b]) - 1
        return c

    heap = [(conflicts(k), tie(w), k) for k, w in enumerate(work) if open_[k]]
    heapq.heapify(heap)
    done = [False] * len(work)
    while heap:
        c, _, k = heapq.heappop(heap)
        if done[k]:
            continue
        now = conflicts(k)
        if now != c:
            heapq.heappush(heap, (now, tie(work[k]), k))
            continue
        done[k] = True
        for b, n in need[k].items():
            users[b].discard(k)
            total[b] -= n
        yield work[k]
        touched = {m for b in need[k] for m in users[b]}
        for m in touched:
            heapq.heappush(heap, (conflicts(m), tie(work[m]), m))
    for k, w in enumerate(work):
        if not done[k]:
            yield w
