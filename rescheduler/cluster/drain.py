"""Drain an on-demand node onto spot, or leave it exactly as it was: a state machine the run loop advances.

A drain never blocks the loop. :meth:`Drainer.start` re-checks and marks the node and returns a :class:`Drain`;
each pass of the loop calls :meth:`Drainer.advance` on every drain in flight, which does what can be done now
without waiting and returns the :class:`DrainResult` once the drain is over. Several nodes drain at once this
way, within the disruption budgets the loop enforces (:mod:`rescheduler.run`). The phases:

1. **Re-check** (:meth:`Drainer.precheck`) against the live state: the node's movable pods are still the
   planned ones, and the PodDisruptionBudgets of their namespaces (listed fresh, not from the watch cache) let
   the drain start by ``rescheduler.pdb_rule`` (:func:`rescheduler.plan.safety.pdb_refusals`). A budget whose
   status is absent or stale is judged by the status computed from the watched pods, as the plan judged it
   (:mod:`shared.disruption`). A refusal skips the node untouched.
2. **Mark** the node so evicted pods do not come back: a ``PreferNoSchedule`` taint ``<drain_taint_key>=
   spotshift-rescheduler`` or a cordon, plus the annotation ``spotshift.io/drain-state: draining``. The mark
   names spotshift, so a restarted rescheduler or the next leader finds what it left
   (:mod:`rescheduler.cluster.marks`) and never touches a cordon or taint set by someone else.
3. :attr:`Phase.JOBS` — with ``disruption.jobs: wait``, the node's running Job pods finish first (Succeeded,
   Failed or gone) within ``disruption.job_timeout``; the mark keeps new pods off meanwhile, and other drains go
   on. On timeout the drain is rolled back and the node backed off.
4. :attr:`Phase.FREEING` — the spot room the pods go to is made free first, and the first eviction waits
   until the watch shows it free (:func:`rescheduler.plan.capacity.in_the_way`): the node's own placeholder
   pods (capacity mode), any placeholder on a target node, and any placeholder waiting for a node are deleted
   (``free_room``), and the drain goes on once none is left in the watched state. kube-scheduler preempts a
   placeholder only for a pod that fits no node at all, so a replacement that found its room still held, or
   taken by a placeholder tried again the moment the room was freed, would be placed on an on-demand node with
   room instead. The run loop asks for no new placeholder while a drain is in flight
   (:meth:`rescheduler.cluster.capacity.CapacityRequester.step`), so none can take the room until the
   replacements are bound. Placeholders still there ``pod_eviction_timeout`` later end the drain with nothing
   evicted (``room-not-freed``), the node backed off. Nothing in the way: the phase takes no time.
5. :attr:`Phase.EVICTING` — every pod is evicted through :class:`~rescheduler.cluster.evictor.Evictor`, one
   attempt at a time: a budget's 429 is tried again after a backoff, or at once when the watched budget allows a
   disruption again, until ``pod_eviction_timeout`` passes with no eviction of the node going through. The API
   server checks each eviction against its budget atomically, so a budget shared by pods of several nodes
   draining at once is respected at every moment; the loop starts no drain whose budgets the drains in flight
   still need (:func:`rescheduler.plan.cycle.decide`), so drains do not wait on each other.
6. :attr:`Phase.TERMINATING` — the evicted pods are gone (``max_graceful_termination`` plus headroom).
7. :attr:`Phase.REPLACING` — as many new pods of each owner as were evicted are Running and Ready
   (``replacement_timeout``), from the watch. A replacement that landed on an on-demand node means the move
   did not work (the scheduler prefers on-demand for it, or spot is full): the node is unmarked and backed off
   exponentially (``node_backoff`` × 2^(failures-1), stored in node annotations), so the rescheduler never
   loops evicting the same pods.
8. **Finish**: the emptied node keeps its mark as ``drained`` for the autoscaler (``keep_drained_tainted``), or
   is made schedulable again.

Any failure after the mark unmarks the node (rollback). A shutdown (SIGTERM) or a lost lease interrupts every
drain in flight (:meth:`Drainer.interrupt`): no further eviction, the mark removed; pods already evicted are
replaced by their controllers. Every API call of a step rides out transient errors (an API server or etcd
restarting) within ``pod_eviction_timeout``; a mark that still cannot be removed is put right by a later cycle
(:class:`~rescheduler.cluster.marks.MarkReconciler`).
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rescheduler.cluster.events import (
    DRAIN_ABORTED,
    DRAIN_FAILED,
    DRAIN_STARTED,
    DRAIN_SUCCEEDED,
    NODE_BACKOFF,
    NORMAL,
    WAITING_FOR_JOBS,
    WARNING,
    EventRecorder,
    Ref,
)
from rescheduler.cluster.evictor import EvictionResult, EvictionTry, Evictor
from rescheduler.cluster.marks import NodeMarker, iso
from rescheduler.cluster.state import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.capacity import in_the_way
from rescheduler.plan.labels import DrainLabel
from rescheduler.plan.safety import Refusal, pdb_refusals
from shared.classes import node_class
from shared.config import JOBS_WAIT, Config
from shared.disruption import with_computed_status
from shared.eviction import USES, budget_use
from shared.kube.api import ApiError, Kube, NotFound, Retry, pod_path
from shared.model import PDB, PREFER_NO_SCHEDULE, Pod
from shared.movable import is_job_pod, movability
from shared.placeholders import is_placeholder

__all__ = [
    "DrainOutcome",
    "Phase",
    "Drain",
    "DrainResult",
    "Drainer",
    "FreeRoom",
    "movable_pods",
    "TERMINATION_HEADROOM",
    "FREE_AGAIN",
]

log = logging.getLogger("spotshift.rescheduler.cluster.drain")

TERMINATION_HEADROOM = 30.0
"""Added to ``max_graceful_termination`` when waiting for evicted pods to be gone (pusher's podEvictionHeadroom)."""

FREE_AGAIN = 1.0
"""Seconds after which :attr:`Phase.FREEING` asks again for the placeholders still in the way to be deleted."""

FreeRoom = Callable[[str, Sequence[Pod]], None]
"""``(node, placeholders)``: delete the placeholders in the way of ``node``'s drain, and the node's own request
(the run loop's :meth:`~rescheduler.cluster.capacity.CapacityRequester.give_room`)."""


class DrainOutcome:
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    DRY_RUN = "dry-run"


class Phase(enum.Enum):
    """Where a drain in flight is (the node carries the mark in every phase)."""

    JOBS = "waiting-for-jobs"
    FREEING = "freeing-room"
    EVICTING = "evicting"
    TERMINATING = "terminating"
    REPLACING = "replacing"


@dataclass(frozen=True, slots=True)
class DrainResult:
    node: str
    outcome: str
    reason: str = ""
    message: str = ""
    evicted: tuple[str, ...] = ()
    replacements: tuple[tuple[str, str], ...] = ()
    """``(pod key, node)`` of each replacement seen Running and Ready."""
    refusals: tuple[Refusal, ...] = field(default=())

    @property
    def started(self) -> bool:
        return self.outcome in (DrainOutcome.SUCCEEDED, DrainOutcome.FAILED)


@dataclass(slots=True)
class Drain:
    """One node's drain in flight: its pods, its phase and since when (the drainer's clock)."""

    node: str
    ref: Ref
    pods: tuple[Pod, ...]
    targets: dict[str, str]
    phase: Phase
    since: float
    jobs: tuple[Pod, ...] = ()
    """The node's running Job pods waited for (:attr:`Phase.JOBS`)."""
    freed_at: float = 0.0
    """When the placeholders in the way were last asked to be deleted (:attr:`Phase.FREEING`)."""
    tries: list[EvictionTry] = field(default_factory=list)
    """Evictions not yet done (:attr:`Phase.EVICTING`)."""
    evicted: list[Pod] = field(default_factory=list)
    before: dict[str, set[str]] = field(default_factory=dict)
    """Owner UID → UIDs of its pods when the evictions began: those are not replacements."""
    need: dict[str, int] = field(default_factory=dict)
    """Owner UID → how many replacements the drain waits for."""

    @property
    def to_evict(self) -> tuple[Pod, ...]:
        """The pods not yet evicted (all of them before :attr:`Phase.EVICTING`)."""
        if self.phase in (Phase.JOBS, Phase.FREEING):
            return self.pods
        return tuple(t.pod for t in self.tries)


def movable_pods(pods: Iterable[Pod], config: Config, pdbs: Sequence[PDB]) -> tuple[list[Pod], list[Pod]]:
    """``(to move, blocking)`` among a node's pods, by :func:`shared.movable.movability`."""
    move, block = [], []
    for p in pods:
        m = movability(p, config, pdbs)
        if m.moves:
            move.append(p)
        elif m.blocks:
            block.append(p)
    return move, block


class Drainer:
    """Starts, advances and ends drains (see the module docstring). ``should_abort`` is shutdown or lost
    leadership; ``clock`` (monotonic seconds) times the phases, ``wall`` (Unix seconds) stamps the marks;
    ``free_room`` deletes the placeholders in a drain's way (``None``: deleted here, no request ended)."""

    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        config: Config,
        evictor: Evictor,
        events: EventRecorder,
        metrics: Metrics,
        marker: NodeMarker,
        *,
        dry_run: bool,
        should_abort: Callable[[], bool],
        stop: threading.Event,
        heartbeat: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        free_room: FreeRoom | None = None,
    ) -> None:
        self.kube = kube
        self.state = state
        self.config = config
        self.evictor = evictor
        self.events = events
        self.metrics = metrics
        self.marker = marker
        self.dry_run = dry_run
        self.should_abort = should_abort
        self.stop = stop
        self.heartbeat = heartbeat
        self.clock = clock
        self.wall = wall
        self.free_room = free_room or self._delete_placeholders
        self.memory_backoff: dict[str, float] = {}
        """Backoffs decided in dry-run, or that could not be written to the node."""

    # ---- re-check -----------------------------------------------------------------------------------------

    def precheck(self, node_name: str, planned: Sequence[str]) -> tuple[list[Pod], DrainResult | None]:
        """The pods to evict, or the reason the drain must not start."""
        cfg = self.config
        node = self.state.node(node_name)
        if node is None or node_class(node, cfg.node_classes) != "on-demand":
            return [], self._skip(node_name, DrainLabel.NODE_CHANGED, "node is gone or no longer on-demand")
        with self.state.cond:
            pdbs = list(self.state.pdbs.values())
        pods, blocking = movable_pods(self.state.pods_on(node_name), cfg, pdbs)
        if blocking:
            return [], self._skip(node_name, DrainLabel.PLAN_STALE, f"pod {blocking[0].key} now blocks the drain")
        if {p.key for p in pods} != set(planned):
            extra = sorted({p.key for p in pods} - set(planned))
            why = f"pods changed since the plan (new: {', '.join(extra[:3]) or 'none'})"
            return [], self._skip(node_name, DrainLabel.PLAN_STALE, why)
        try:
            live = self._live_budgets(pods)
        except (ApiError, ValueError) as e:
            return [], self._skip(node_name, DrainLabel.PDB_LIST_FAILED, f"cannot list PodDisruptionBudgets: {e}")
        refusals = pdb_refusals(pods, live, rule=cfg.rescheduler.pdb_rule)
        if refusals:
            return [], self._skip(node_name, DrainLabel.PDB_PRECHECK, str(refusals[0]), tuple(refusals))
        return pods, None

    def _live_budgets(self, pods: Sequence[Pod]) -> list[PDB]:
        """The budgets of the pods' namespaces as the API server has them now (a stale status computed)."""
        retry = Retry(self.config.rescheduler.pod_eviction_timeout, wait=self.stop.wait)
        stop = self.should_abort
        api_version = f"policy/{retry.call(self.kube.pdb_version, stop=stop)}"
        live: list[PDB] = []
        for ns in sorted({p.namespace for p in pods}):
            path = self.kube.pdb_path(ns)
            items = retry.call(functools.partial(self.kube.get, path), stop=stop).get("items") or []
            live.extend(PDB.from_api({"apiVersion": api_version, **i}) for i in items)
        if not all(b.status_current for b in live):
            namespaces = {b.namespace for b in live}
            with self.state.cond:
                peers = [p for p in self.state.pods.values() if p.namespace in namespaces]
            live = with_computed_status(live, peers)
        return live

    def _skip(self, node_name: str, label: DrainLabel, message: str, refusals: tuple[Refusal, ...] = ()) -> DrainResult:
        self.metrics.drains_skipped.labels(label.value).inc()
        log.info(
            "not draining node %s: %s",
            node_name,
            message,
            extra=fields(node=node_name, reason=label.value, dry_run=self.dry_run),
        )
        return DrainResult(node_name, DrainOutcome.SKIPPED, label.value, message, refusals=refusals)

    # ---- start ----------------------------------------------------------------------------------------------

    def start(
        self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None
    ) -> Drain | DrainResult:
        """Re-check and mark ``node_name``, whose movable pods the plan moves (``planned`` keys; ``targets``: key →
        spot node). Returns the drain in flight, or the result when it did not start (skipped, dry-run, the mark
        failed)."""
        pods, skipped = self.precheck(node_name, planned)
        if skipped is not None:
            return skipped
        node = self.state.node(node_name)
        assert node is not None
        ref = Ref.node(node_name, node.uid)
        moves = ", ".join(f"{p.key}→{(targets or {}).get(p.key, 'spot')}" for p in pods)
        if self.dry_run:
            return self._dry_run(node_name, pods, moves)
        try:
            self.marker.mark(node_name, self.wall())
        except ApiError as e:
            return self._failed(node_name, ref, DrainLabel.MARK_FAILED, f"could not mark the node: {e}", ())
        self.metrics.drains_started.inc()
        log.info(
            "draining node %s: %d pods to spot",
            node_name,
            len(pods),
            extra=fields(node=node_name, pods=[p.key for p in pods]),
        )
        self.events.record(ref, NORMAL, DRAIN_STARTED, f"Moving {len(pods)} pods to spot nodes: {moves}"[:1000])
        drain = Drain(node_name, ref, tuple(pods), dict(targets or {}), Phase.EVICTING, self.clock())
        if self.config.disruption.jobs == JOBS_WAIT:
            self._wait_for_jobs(drain)
        if drain.phase is Phase.EVICTING:
            self._free_room(drain)
        return drain

    def _dry_run(self, node_name: str, pods: Sequence[Pod], moves: str) -> DrainResult:
        how = "cordon" if self.marker.mode == "cordon" else f"taint {self.marker.taint_key}:{PREFER_NO_SCHEDULE}"
        log.info(
            "dry-run: would %s node %s and evict %d pods",
            how,
            node_name,
            len(pods),
            extra=fields(node=node_name, pods=[p.key for p in pods], dry_run=True),
        )
        for p in pods:
            self.evictor.evict(p, why=f"dry-run: would move from on-demand node {node_name} to spot")
        return DrainResult(node_name, DrainOutcome.DRY_RUN, message=moves)

    def _wait_for_jobs(self, drain: Drain) -> None:
        """Enter :attr:`Phase.JOBS` when the node runs Job pods (``disruption.jobs: wait``), with an Event."""
        jobs = [p for p in self.state.pods_on(drain.node) if is_job_pod(p) and not p.terminal]
        if not jobs:
            return
        drain.phase, drain.jobs = Phase.JOBS, tuple(jobs)
        timeout = self.config.disruption.job_timeout
        names = ", ".join(p.key for p in jobs[:5])
        text = f"Waiting up to {timeout:.0f}s for {len(jobs)} Job pod(s) to finish before moving the rest: {names}"
        self.events.record(drain.ref, NORMAL, WAITING_FOR_JOBS, text[:1000])
        log.info(
            "node %s: waiting for %d Job pods to finish",
            drain.node,
            len(jobs),
            extra=fields(node=drain.node, pods=[p.key for p in jobs], timeout=timeout),
        )

    # ---- the room --------------------------------------------------------------------------------------------

    def in_the_way(self, drain: Drain) -> list[Pod]:
        """The placeholders in the watched state that hold, or could take, the room ``drain`` moves its pods to."""
        home = self.config.namespace
        with self.state.cond:
            placeholders = [p for p in self.state.pods.values() if is_placeholder(p, home)]
        return in_the_way(drain.node, drain.targets.values(), placeholders)

    def _free_room(self, drain: Drain) -> None:
        """Before the first eviction: delete what is in the way (and the node's own request, whatever the watch
        shows of it), then :attr:`Phase.FREEING` until it is gone, or the evictions at once if nothing is."""
        left = self.in_the_way(drain)
        self.free_room(drain.node, left)
        if not left:
            self._begin_evictions(drain)
            return
        drain.phase, drain.since = Phase.FREEING, self.clock()
        drain.freed_at = drain.since
        log.info(
            "node %s: waiting for %d placeholder pod(s) to be gone before the first eviction",
            drain.node,
            len(left),
            extra=fields(node=drain.node, pods=[p.key for p in left][:20]),
        )

    def _delete_placeholders(self, node: str, placeholders: Sequence[Pod]) -> None:
        """The default ``free_room``: delete the placeholders at once (already gone is fine)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        for p in placeholders:
            try:
                self.kube.delete(pod_path(p.namespace, p.name), body)
            except NotFound:
                pass
            except ApiError as e:  # asked again after FREE_AGAIN while the drain waits
                log.warning("could not delete placeholder %s: %s", p.key, e, extra=fields(node=node, pod=p.key))

    def _step_freeing(self, drain: Drain) -> DrainResult | None:
        left = self.in_the_way(drain)
        if not left:
            self._begin_evictions(drain)
            return None
        now = self.clock()
        timeout = self.config.rescheduler.pod_eviction_timeout
        if now - drain.since >= timeout:
            names = ", ".join(p.key for p in left[:5])
            msg = f"{len(left)} placeholder pod(s) still hold or could take the spot room {timeout:.0f}s later: {names}"
            return self._failed(drain.node, drain.ref, DrainLabel.ROOM_NOT_FREED, msg, (), back_off=True)
        if now - drain.freed_at >= FREE_AGAIN:
            drain.freed_at = now
            self.free_room(drain.node, left)
        return None

    def _begin_evictions(self, drain: Drain) -> None:
        """Enter :attr:`Phase.EVICTING`: note who will replace whom (the pods of each owner that exist now are not
        replacements) and queue every pod's eviction."""
        drain.phase, drain.since = Phase.EVICTING, self.clock()
        for p in drain.pods:
            ctrl = p.controller
            if ctrl is None or not ctrl.uid:
                continue
            if ctrl.uid not in drain.before:
                drain.before[ctrl.uid] = {q.uid for q in self.state.pods_of_owner(ctrl.uid)}
            drain.need[ctrl.uid] = drain.need.get(ctrl.uid, 0) + 1
        why = f"moving from on-demand node {drain.node} to spot"
        drain.tries = [self.evictor.begin(p, why=why) for p in drain.pods]

    # ---- advance ----------------------------------------------------------------------------------------------

    def advance(self, drain: Drain) -> DrainResult | None:
        """Do what can be done now for ``drain``, without waiting: the result once it is over, else ``None``."""
        while True:
            phase = drain.phase
            result = self._STEPS[phase](self, drain)
            if result is not None or drain.phase is phase:
                return result

    def _step_jobs(self, drain: Drain) -> DrainResult | None:
        left = self._running_jobs(drain)
        if not left:
            self._free_room(drain)
            return None
        timeout = self.config.disruption.job_timeout
        if self.clock() - drain.since < timeout:
            return None
        msg = f"Job pods still running {timeout:.0f}s later: {', '.join(left[:5])}"
        return self._failed(drain.node, drain.ref, DrainLabel.JOB_TIMEOUT, msg, (), back_off=True)

    def _running_jobs(self, drain: Drain) -> list[str]:
        with self.state.cond:
            return [
                p.key
                for p in drain.jobs
                if (now := self.state.pods.get(p.key)) is not None and now.uid == p.uid and not now.terminal
            ]

    def _step_evict(self, drain: Drain) -> DrainResult | None:
        now = self.clock()
        for t in list(drain.tries):
            if now < t.next_at and not (t.attempts and self._budget_allows(t.pod)):
                continue
            if self.should_abort():
                return None  # the caller interrupts the drain before another eviction
            self.heartbeat()
            result = self.evictor.attempt(t)
            if result is None:
                continue
            drain.tries.remove(t)
            if not result.result.ok:
                label = (
                    DrainLabel.EVICTION_REFUSED
                    if result.result is EvictionResult.REFUSED
                    else DrainLabel.EVICTION_FAILED
                )
                msg = f"eviction of {t.pod.key}: {result.message}"
                return self._failed(drain.node, drain.ref, label, msg, drain.evicted, back_off=True)
            drain.evicted.append(t.pod)
            # Progress: the pods still refused by their budgets get pod_eviction_timeout from now, so the drain fails
            # only when that long passes with no eviction of the node going through.
            for other in drain.tries:
                other.deadline = max(other.deadline, self.clock() + self.evictor.timeout)
        if not drain.tries:
            drain.phase, drain.since = Phase.TERMINATING, self.clock()
        return None

    def _budget_allows(self, pod: Pod) -> bool:
        """Whether the watched budget that refused ``pod``'s eviction allows a disruption again: then the next
        attempt need not wait out its backoff (the API server still decides)."""
        with self.state.cond:
            budgets = [b for b in self.state.pdbs.values() if b.namespace == pod.namespace and b.selects(pod)]
        return len(budgets) == 1 and budget_use(pod, budgets[0]) is USES and budgets[0].disruptions_allowed >= 1

    def _step_terminating(self, drain: Drain) -> DrainResult | None:
        with self.state.cond:
            left = [p.key for p in drain.evicted if (q := self.state.pods.get(p.key)) is not None and q.uid == p.uid]
        if not left:
            drain.phase, drain.since = Phase.REPLACING, self.clock()
            return None
        limit = self.config.rescheduler.max_graceful_termination + TERMINATION_HEADROOM
        if self.clock() - drain.since < limit:
            return None
        msg = f"pods still present {limit:.0f}s after eviction: {', '.join(left[:5])}"
        return self._failed(drain.node, drain.ref, DrainLabel.TERMINATION_TIMEOUT, msg, drain.evicted, back_off=True)

    def replacements(self, drain: Drain) -> list[Pod]:
        """The new pods of the evicted pods' owners, bound to a node, Running and Ready ones first."""
        out = []
        with self.state.cond:
            for owner, count in drain.need.items():
                fresh = [
                    q
                    for q in self.state.by_owner.get(owner, {}).values()
                    if q.uid not in drain.before[owner] and not q.terminating and q.node_name
                ]
                fresh.sort(key=lambda q: (not (q.phase == "Running" and q.ready), q.creation_timestamp))
                out.extend(fresh[:count])
        return out

    def _step_replacing(self, drain: Drain) -> DrainResult | None:
        got = self.replacements(drain)
        wanted = sum(drain.need.values())
        ready = sum(1 for q in got if q.phase == "Running" and q.ready)
        placed = tuple((q.key, q.node_name) for q in got)
        if len(got) >= wanted and ready == len(got):
            return self._judge(drain, placed)
        timeout = self.config.rescheduler.replacement_timeout
        if self.clock() - drain.since < timeout:
            return None
        msg = f"{ready} of {wanted} replacements Running and Ready after {timeout:.0f}s"
        label = DrainLabel.REPLACEMENT_TIMEOUT
        return self._failed(drain.node, drain.ref, label, msg, drain.evicted, back_off=True, placed=placed)

    def _judge(self, drain: Drain, placed: tuple[tuple[str, str], ...]) -> DrainResult:
        """Every replacement is Running and Ready: the drain worked if they all run on spot."""
        on_demand = []
        for key, where in placed:
            target = self.state.node(where)
            if target is None or node_class(target, self.config.node_classes) != "spot":
                on_demand.append(f"{key} on {where}")
        if on_demand:
            msg = f"replacements landed on non-spot nodes: {', '.join(on_demand[:5])}"
            label = DrainLabel.REPLACED_ON_DEMAND
            return self._failed(drain.node, drain.ref, label, msg, drain.evicted, back_off=True, placed=placed)
        return self._finish(drain, placed)

    _STEPS: ClassVar[dict[Phase, Callable[[Drainer, Drain], DrainResult | None]]] = {
        Phase.JOBS: _step_jobs,
        Phase.FREEING: _step_freeing,
        Phase.EVICTING: _step_evict,
        Phase.TERMINATING: _step_terminating,
        Phase.REPLACING: _step_replacing,
    }

    # ---- end ----------------------------------------------------------------------------------------------------

    def _finish(self, drain: Drain, placed: tuple[tuple[str, str], ...]) -> DrainResult:
        node_name = drain.node
        try:
            if self.config.rescheduler.keep_drained_tainted:
                self.marker.mark_drained(node_name)
            else:
                self.marker.unmark(node_name)
        except ApiError as e:
            log.warning("could not update node %s after its drain: %s", node_name, e, extra=fields(node=node_name))
        self.metrics.drains_succeeded.inc()
        msg = f"{len(drain.evicted)} pods moved to spot: " + ", ".join(f"{k}→{n}" for k, n in placed)
        self.events.record(drain.ref, NORMAL, DRAIN_SUCCEEDED, msg[:1000])
        log.info(
            "drained node %s",
            node_name,
            extra=fields(node=node_name, evicted=[p.key for p in drain.evicted], replacements=dict(placed)),
        )
        evicted = tuple(p.key for p in drain.evicted)
        return DrainResult(node_name, DrainOutcome.SUCCEEDED, message=msg, evicted=evicted, replacements=placed)

    def interrupt(self, drain: Drain) -> DrainResult:
        """Stop ``drain`` now (shutdown or lost leadership): no further eviction, the mark removed."""
        evicted = drain.evicted
        msg = f"stopped (shutdown or lost leadership) after {len(evicted)} evictions; the node's mark is removed"
        try:
            self.marker.unmark(drain.node)
        except ApiError as e:
            msg += f" (could not remove the mark: {e})"
        self.metrics.drains_failed.labels(DrainLabel.INTERRUPTED.value).inc()
        self.events.record(drain.ref, WARNING, DRAIN_ABORTED, msg)
        log.warning(
            "drain of node %s interrupted: %s",
            drain.node,
            msg,
            extra=fields(node=drain.node, reason=DrainLabel.INTERRUPTED.value),
        )
        return DrainResult(
            drain.node, DrainOutcome.FAILED, DrainLabel.INTERRUPTED.value, msg, tuple(p.key for p in evicted)
        )

    def drain(self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None) -> DrainResult:
        """:meth:`start` and :meth:`advance` until the drain is over, waiting for the watch between steps: one
        node's whole drain in one call (``spot-rescheduler run --once`` and the tests)."""
        drain = self.start(node_name, planned, targets)
        while isinstance(drain, Drain):
            if self.should_abort():
                return self.interrupt(drain)
            self.heartbeat()
            result = self.advance(drain)
            if result is not None:
                return result
            self.state.wait_change(self._next_due(drain), self.stop)
        return drain

    def _next_due(self, drain: Drain) -> float:
        """Seconds until ``drain`` has something to do that no watch event announces (at most one)."""
        if drain.phase is Phase.EVICTING and drain.tries:
            return min(1.0, max(0.0, min(t.next_at for t in drain.tries) - self.clock()))
        return 1.0

    def back_off(self, node_name: str, reason: str, ref: Ref | None = None) -> tuple[float, str]:
        """Leave the node alone for ``node_backoff`` × 2^(failures-1), recorded on the node (in memory when it
        cannot be written), with an Event naming ``reason``. Returns the Unix time until which the node rests,
        and a note for the message (``""``, or that the backoff is kept in memory only)."""
        base = self.config.rescheduler.node_backoff
        now = self.wall()
        note = ""
        try:
            until, failures = self.marker.back_off(node_name, now, base)
        except ApiError as e:
            until, failures = now + base, 1
            note = f" (backoff kept in memory only: {e})"
        # Also in memory: the next cycle may come before the watch shows the node's backoff annotation.
        self.memory_backoff[node_name] = max(until, self.memory_backoff.get(node_name, 0.0))
        self.events.record(
            ref or Ref.node(node_name),
            WARNING,
            NODE_BACKOFF,
            f"Not draining this node again before {iso(until)} (failure {failures}): {reason}",
        )
        return until, note

    def _failed(
        self,
        node_name: str,
        ref: Ref,
        label: DrainLabel,
        message: str,
        evicted: Sequence[Pod],
        *,
        back_off: bool = False,
        placed: tuple[tuple[str, str], ...] = (),
    ) -> DrainResult:
        try:
            self.marker.unmark(node_name)
        except ApiError as e:
            message += f" (could not remove the mark: {e})"
        if back_off:
            message += self.back_off(node_name, label.value, ref)[1]
        self.metrics.drains_failed.labels(label.value).inc()
        self.events.record(ref, WARNING, DRAIN_FAILED, f"{label.value}: {message}"[:1000])
        log.warning(
            "drain of node %s failed: %s: %s",
            node_name,
            label.value,
            message,
            extra=fields(node=node_name, reason=label.value, evicted=[p.key for p in evicted]),
        )
        evicted_keys = tuple(p.key for p in evicted)
        return DrainResult(node_name, DrainOutcome.FAILED, label.value, message, evicted_keys, replacements=placed)
