"""The drains in flight, as one queue the run loop starts, advances and interrupts (after Karpenter's orchestration
queue).

:class:`DrainQueue` owns every drain in flight, by node: it starts the drains a cycle decided on while its gate
allows, advances each one step at every pass of the loop, interrupts them all on a lost lease or a shutdown, and
says what they hold: the budgets their pods still claim (:meth:`DrainQueue.claims`), how many places in the
disruption budget they and the drains that ended within ``node_drain_delay`` take (:meth:`DrainQueue.cooling`),
and where their pods go, projected onto the next plan's snapshot (:func:`project_drains`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from rescheduler.cluster.drain import Drain, Drainer, DrainOutcome, DrainResult, replacements_by_owner
from rescheduler.cluster.watch_cache import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.cycle import Decision, budget_claims
from shared.kube.api import ApiError
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot

__all__ = ["DrainQueue", "project_drains"]

log = logging.getLogger("spotshift.rescheduler")


class DrainQueue:
    """The drains in flight of ``drainer`` (see the module docstring), which the queue shares the cluster state,
    the metrics, ``should_abort`` (shutdown or lost leadership) and the clock with; an ended drain keeps its place
    for ``node_drain_delay`` seconds."""

    def __init__(self, drainer: Drainer, *, node_drain_delay: float) -> None:
        self.drainer = drainer
        self.state: ClusterState = drainer.state
        self.metrics: Metrics = drainer.metrics
        self.should_abort: Callable[[], bool] = drainer.should_abort
        self.clock: Callable[[], float] = drainer.clock
        self.node_drain_delay = node_drain_delay
        self.drains: dict[str, Drain] = {}
        """The drains in flight, by node."""
        self.finished: list[float] = []
        """When (``clock``) the drains of this process finished: within ``node_drain_delay`` each keeps its place."""
        self.results: list[DrainResult] = []
        """Every :class:`~rescheduler.cluster.drain.DrainResult` of this process (tests and ``--once`` read them)."""

    def __len__(self) -> int:
        return len(self.drains)

    def __iter__(self) -> Iterator[str]:
        return iter(self.drains)

    def start(self, decision: Decision, starts: int) -> None:
        """Start the decision's drains, in order, while fewer than ``starts`` have started (a node already in
        flight is passed over); a skipped one is recorded with its Event."""
        started = 0
        for nm in decision.drains:
            if started >= starts or self.should_abort():
                break
            if nm.node in self.drains:
                continue
            drain = self.drainer.start(nm.node, nm.pods, dict(nm.targets))
            if isinstance(drain, Drain):
                self.drains[nm.node] = drain
                started += 1
                continue
            self.results.append(drain)
            if drain.outcome is DrainOutcome.SKIPPED:
                self.drainer.report.skip_event(drain)
            elif drain.outcome is DrainOutcome.DRY_RUN:
                # A dry run's drain takes its place among this cycle's starts, so a dry run shows the drains a real
                # run would start now, no more.
                started += 1
        self._count()

    def advance(self) -> int:
        """One step of every drain in flight (none once the loop must stop acting); how many ended."""
        ended = 0
        for node, drain in list(self.drains.items()):
            if self.should_abort():
                return ended
            try:
                result = self.drainer.advance(drain)
            except ApiError as e:
                log.warning("drain of node %s: %s (tried again)", node, e, extra=fields(node=node))
                continue
            if result is not None:
                ended += self._ended(node, result)
        self._count()
        return ended

    def interrupt(self) -> int:
        """Stop every drain in flight (lost lease): no further eviction, each mark's removal tried once now. A drain
        whose mark is not removed yet stays in flight, rolling back, tried again at each call (or pass, once the
        lease is ours again). How many ended."""
        ended = 0
        for node, drain in list(self.drains.items()):
            result = self.drainer.interrupt(drain)
            if result is not None:
                ended += self._ended(node, result)
        self._count()
        return ended

    def end_all(self, give_up: float) -> None:
        """On the way out: end every drain's rollback, riding out API errors until ``give_up``
        (``time.monotonic``)."""
        for node, drain in list(self.drains.items()):
            self._ended(node, self.drainer.end_rollback(drain, give_up - time.monotonic()))
        self.metrics.drains_in_flight.set(0)

    def _ended(self, node: str, result: DrainResult) -> int:
        del self.drains[node]
        self.results.append(result)
        self.finished.append(self.clock())
        return 1

    def _count(self) -> None:
        self.metrics.drains_in_flight.set(len(self.drains))

    def cooling(self) -> int:
        """Drains ended less than ``node_drain_delay`` ago: each keeps its place in the budget that long."""
        since = self.clock() - self.node_drain_delay
        self.finished = [t for t in self.finished if t > since]
        return len(self.finished)

    def claims(self, snapshot: ClusterSnapshot) -> Counter[str]:
        """Budget key → how many evictions the drains in flight will still take of it (the pods they have yet to
        evict, :func:`~rescheduler.plan.cycle.budget_claims`)."""
        return budget_claims((p for d in self.drains.values() for p in d.to_evict), PdbIndex(snapshot.pdbs))

    def project(self, snapshot: ClusterSnapshot) -> None:
        """Count the drains in flight where their pods go in ``snapshot`` (:func:`project_drains`)."""
        project_drains(snapshot, self.drains.values(), self.state)


def project_drains(snapshot: ClusterSnapshot, drains: Iterable[Drain], state: ClusterState) -> None:
    """Count the pods of the drains in flight where they are going, so a new plan does not give their spot room to
    another node: a pod not yet evicted is moved to its target in ``snapshot``; an evicted one whose replacement is
    not yet bound to a node (:func:`~rescheduler.cluster.drain.replacements_by_owner`) is put there as a stand-in
    (a pending replacement the planner also places first is counted twice: room held back, never given away
    twice)."""
    for drain in drains:
        waiting_for = _unbound(drain, state)
        for pod in drain.pods:
            target = drain.targets.get(pod.key)
            if target is None or target not in snapshot.nodes:
                continue
            info = snapshot.nodes.get(pod.node_name)
            here = next((p for p in info.pods if p.uid == pod.uid), None) if info is not None else None
            if here is not None and not here.terminating:
                snapshot.move_pod(here, target)
                continue
            owner = pod.controller.uid if pod.controller is not None else ""
            if waiting_for.get(owner, 0) > 0:
                waiting_for[owner] -= 1
                stand_in = replace(pod, name=f"{pod.name}.in-flight", uid=f"{pod.uid}.in-flight", node_name="")
                snapshot.add_pod(stand_in, target)


def _unbound(drain: Drain, state: ClusterState) -> dict[str, int]:
    """Owner UID → how many of the drain's evicted pods have no replacement bound to a node yet."""
    bound = replacements_by_owner(drain, state)
    out: dict[str, int] = {}
    for owner, need in drain.need.items():
        evicted = sum(1 for p in drain.evicted if p.controller is not None and p.controller.uid == owner)
        out[owner] = max(0, min(need, evicted) - len(bound.get(owner, ())))
    return out
