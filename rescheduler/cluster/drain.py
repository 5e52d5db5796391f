"""Drain an on-demand node onto spot, or leave it exactly as it was: a state machine the run loop advances.

A drain never blocks the loop, and no drain waits on another. :meth:`Drainer.start` re-checks the node and returns
a :class:`Drain` that has made one attempt at its mark; each pass of the loop calls :meth:`Drainer.advance` on
every drain in flight, which does what can be done now without waiting (at most one attempt at each API call
that is due) and returns the :class:`DrainResult` once the drain is over. Several nodes drain at once this way,
within the disruption budgets the loop enforces (:mod:`rescheduler.cluster.drain_queue`). A drain starts in
:attr:`Phase.PENDING` and ends in one of :class:`DrainOutcome`'s end states; each phase's step returns a
:data:`Step` (the next :class:`Phase`, the end, a :class:`Failure`, or ``None``: nothing more to do now), never
sets it, and :data:`NEXT` lists where each phase may go (:func:`transition`). :class:`DrainReporter` records the
metric, Event and log line of each start and end. The phases:

1. **Re-check** (:meth:`Drainer.precheck`, in :meth:`Drainer.start`) against the live state: the node's movable
   pods are still the planned ones, and the PodDisruptionBudgets of their namespaces (listed fresh, not from the
   watch cache; one attempt, an API error skips the node until a later cycle plans it again) let the drain start
   by ``rescheduler.pdb_rule`` (:func:`rescheduler.plan.safety.pdb_refusals`). A budget whose status is absent
   or stale is judged by the status computed from the watched pods, as the plan judged it
   (:mod:`shared.disruption`). A refusal skips the node untouched.
2. :attr:`Phase.MARKING` — the mark, so evicted pods do not come back: a ``PreferNoSchedule`` taint
   ``<drain_taint_key>=spotshift-rescheduler`` or a cordon, plus the annotation ``spotshift.io/drain-state:
   draining``. The mark names spotshift, so a restarted rescheduler or the next leader finds what it left
   (:mod:`rescheduler.cluster.marking`) and never touches a cordon or taint set by someone else. Nothing is
   evicted before it is written. A write that meets an API error is tried again (see the node writes below)
   until ``pod_eviction_timeout`` after the start; then, or on a definite refusal, the drain fails
   (``mark-failed``) and rolls back.
3. :attr:`Phase.JOBS` — with ``disruption.jobs: wait``, the node's running Job pods finish first (Succeeded,
   Failed or gone) within ``disruption.job_timeout``; the mark keeps new pods off meanwhile, and other drains go
   on. On timeout the drain is rolled back and the node backed off.
4. :attr:`Phase.FREEING` — the spot room the pods go to is made free first, and the first eviction waits
   until the watch shows it free (:func:`rescheduler.plan.capacity_needs.in_the_way`): the node's own placeholder
   pods (capacity mode), any placeholder on a target node, and any placeholder waiting for a node are deleted
   (``free_room``), and the drain goes on once none is left in the watched state. kube-scheduler preempts a
   placeholder only for a pod that fits no node at all, so a replacement that found its room still held, or
   taken by a placeholder tried again the moment the room was freed, would be placed on an on-demand node with
   room instead. The run loop asks for no new placeholder while a drain is in flight
   (:meth:`rescheduler.cluster.capacity_requests.CapacityRequester.step`), so none can take the room until the
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
8. :attr:`Phase.FINISHING` — the emptied node keeps its mark as ``drained`` for the autoscaler
   (``keep_drained_tainted``), or is made schedulable again; tried until ``pod_eviction_timeout`` after the
   replacements were Ready, after which the drain has succeeded all the same and
   :class:`~rescheduler.cluster.marking.MarkReconciler` finishes the node.

:attr:`Phase.ROLLING_BACK` — any failure after the start (the mark's too: a write that got no answer may have
landed) removes the mark, and, when the failure calls for a backoff, records it in the same write. The rollback
has no deadline: the drain stays in flight (it counts against the disruption budgets, and the pods it had yet to
evict keep their PodDisruptionBudgets claimed) until its mark is gone. A definite refusal ends it, the mark left
to :class:`~rescheduler.cluster.marking.MarkReconciler`; a backoff that could not be written is kept in memory.

The node writes (mark, finish, rollback) are tried once per advance: an attempt that gets no answer, a 5xx, a
429 or a conflict is tried again after a backoff (:data:`WRITE_BACKOFF` doubling to :data:`WRITE_MAX_BACKOFF`;
a longer ``Retry-After`` up to that). An API server or etcd restarting thus delays the drains whose calls meet
it, each by its own backoff, and no other drain.

A shutdown (SIGTERM) or a lost lease interrupts every drain in flight (:meth:`Drainer.interrupt`): no further
eviction, and the drain rolls back like a failed one (pods already evicted are replaced by their controllers).
On the way out :meth:`Drainer.end_rollback` rides out API errors for a bounded time instead, and a mark it
could not remove is left to the next leader's :class:`~rescheduler.cluster.marking.MarkReconciler`.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

from rescheduler.cluster.events import (
    DRAIN_ABORTED,
    DRAIN_FAILED,
    DRAIN_SKIPPED,
    DRAIN_STARTED,
    DRAIN_SUCCEEDED,
    NORMAL,
    WAITING_FOR_JOBS,
    WARNING,
    EventRecorder,
    Ref,
)
from rescheduler.cluster.evictor import EvictionResult, EvictionTry, Evictor
from rescheduler.cluster.marking import ONE_ATTEMPT, NodeMarker
from rescheduler.cluster.node_backoff import NodeBackoff
from rescheduler.cluster.watch_cache import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.capacity_needs import in_the_way
from rescheduler.plan.labels import DrainLabel
from rescheduler.plan.safety import Refusal, pdb_refusals
from shared.classes import node_class
from shared.config import JOBS_WAIT, Config
from shared.disruption import with_computed_status
from shared.eviction import USES, budget_use
from shared.kube.api import ApiError, Conflict, Kube, NotFound, Retry, is_transient, pod_path
from shared.model import PDB, PREFER_NO_SCHEDULE, Pod
from shared.movable import is_job_pod, movability
from shared.placeholders import is_placeholder

__all__ = [
    "DrainOutcome",
    "Phase",
    "Failure",
    "Step",
    "NEXT",
    "transition",
    "replacements_by_owner",
    "DrainReporter",
    "NodeWrite",
    "Rollback",
    "Drain",
    "DrainResult",
    "Drainer",
    "FreeRoom",
    "movable_pods",
    "TERMINATION_HEADROOM",
    "FREE_AGAIN",
    "WRITE_BACKOFF",
    "WRITE_MAX_BACKOFF",
]

log = logging.getLogger("spotshift.rescheduler.cluster.drain")

TERMINATION_HEADROOM = 30.0
"""Added to ``max_graceful_termination`` when waiting for evicted pods to be gone (pusher's podEvictionHeadroom)."""

FREE_AGAIN = 1.0
"""Seconds after which :attr:`Phase.FREEING` asks again for the placeholders still in the way to be deleted."""

WRITE_BACKOFF = 0.5
"""Seconds before a node write (mark, finish, rollback) that met an API error is tried again, doubled each time."""

WRITE_MAX_BACKOFF = 5.0
"""The longest wait between two attempts at a node write: a returning API server is noticed this soon."""

FreeRoom = Callable[[str, Sequence[Pod]], None]
"""``(node, placeholders)``: delete the placeholders in the way of ``node``'s drain, and the node's own request
(the run loop's :meth:`~rescheduler.cluster.capacity_requests.CapacityRequester.give_room`)."""


class DrainOutcome(enum.StrEnum):
    """How a drain ended (the value is the ``outcome`` of its result, in logs and tests): a drain in flight ends
    :attr:`SUCCEEDED` (from :attr:`Phase.FINISHING`) or :attr:`FAILED` (from :attr:`Phase.ROLLING_BACK`); one that
    never started is :attr:`SKIPPED` or :attr:`DRY_RUN`."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    DRY_RUN = "dry-run"


class Phase(enum.Enum):
    """Where a drain in flight is (the node carries the mark from :attr:`JOBS` to :attr:`FINISHING`);
    :attr:`PENDING` is the start state, before the first phase is entered."""

    PENDING = "pending"
    MARKING = "marking"
    JOBS = "waiting-for-jobs"
    FREEING = "freeing-room"
    EVICTING = "evicting"
    TERMINATING = "terminating"
    REPLACING = "replacing"
    FINISHING = "finishing"
    ROLLING_BACK = "rolling-back"


WRITES = frozenset({Phase.MARKING, Phase.FINISHING, Phase.ROLLING_BACK})
"""The phases that write the node, one attempt per advance (:class:`NodeWrite`)."""

BEFORE_EVICTING = frozenset({Phase.PENDING, Phase.MARKING, Phase.JOBS, Phase.FREEING})
"""The phases in which no eviction is queued yet: every pod of the drain is still to be evicted."""


@dataclass(frozen=True, slots=True)
class Failure:
    """What a step returns when the drain fails: the label, the message, and whether the node backs off. The
    drain then rolls back (:attr:`Phase.ROLLING_BACK`)."""

    label: DrainLabel
    message: str
    back_off: bool = False


Step = Phase | DrainOutcome | Failure | None
"""What a phase's step (or entry) returns: the next phase, the end of the drain, a failure, or ``None`` (nothing
more to do now)."""

NEXT: Final[Mapping[Phase, frozenset[Phase | DrainOutcome]]] = {
    Phase.PENDING: frozenset({Phase.MARKING}),
    Phase.MARKING: frozenset({Phase.JOBS, Phase.FREEING, Phase.ROLLING_BACK}),
    Phase.JOBS: frozenset({Phase.FREEING, Phase.ROLLING_BACK}),
    Phase.FREEING: frozenset({Phase.EVICTING, Phase.ROLLING_BACK}),
    Phase.EVICTING: frozenset({Phase.TERMINATING, Phase.ROLLING_BACK}),
    Phase.TERMINATING: frozenset({Phase.REPLACING, Phase.ROLLING_BACK}),
    Phase.REPLACING: frozenset({Phase.FINISHING, Phase.ROLLING_BACK}),
    Phase.FINISHING: frozenset({DrainOutcome.SUCCEEDED, Phase.ROLLING_BACK}),
    Phase.ROLLING_BACK: frozenset({DrainOutcome.FAILED}),
}
"""Every state a phase may lead to: the phases, and the end states :attr:`DrainOutcome.SUCCEEDED` and
:attr:`DrainOutcome.FAILED`. A failure leads to :attr:`Phase.ROLLING_BACK` (the interruption of a drain in
flight too)."""


def transition(phase: Phase, step: Step) -> Phase | DrainOutcome:
    """Where a drain in ``phase`` goes on ``step``: ``None`` stays, a :class:`Failure` rolls back (nothing else
    does: the rollback needs its reason), a phase or an outcome is gone to; a ``ValueError`` for a step that
    :data:`NEXT` does not allow from ``phase``."""
    if step is None:
        return phase
    to = Phase.ROLLING_BACK if isinstance(step, Failure) else step
    if to not in NEXT[phase] or (to is Phase.ROLLING_BACK) is not isinstance(step, Failure):
        raise ValueError(f"no drain goes from {phase.value} to {to.value}")
    return to


@dataclass(frozen=True, slots=True)
class DrainResult:
    node: str
    outcome: DrainOutcome
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
class NodeWrite:
    """The node write of a drain's phase (:data:`WRITES`) across its attempts: when to try next, until when
    (``None``: no deadline, a rollback), and the last error."""

    deadline: float | None
    next_at: float = 0.0
    delay: float = WRITE_BACKOFF
    attempts: int = 0
    last: str = ""


@dataclass(frozen=True, slots=True)
class Rollback:
    """Why a drain is rolling back, and what its result says: the label, the message, whether the node backs off,
    and the phase it failed in (what it had yet to evict)."""

    label: DrainLabel
    message: str
    failed_in: Phase
    back_off: bool = False


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
    placed: tuple[tuple[str, str], ...] = ()
    """``(pod key, node)`` of each replacement seen Running and Ready (:attr:`Phase.REPLACING`)."""
    write: NodeWrite = field(default_factory=lambda: NodeWrite(None))
    """The node write of :attr:`Phase.MARKING`, :attr:`Phase.FINISHING` or :attr:`Phase.ROLLING_BACK`."""
    rollback: Rollback | None = None
    note: str = ""
    """What the end adds to the drain's message (a write that did not go through, a rest kept in memory)."""

    @property
    def to_evict(self) -> tuple[Pod, ...]:
        """The pods not yet evicted (all of them before :attr:`Phase.EVICTING`); a drain rolling back keeps those
        it had left when it failed, so the budgets they use stay claimed until its mark is gone."""
        phase = self.rollback.failed_in if self.rollback is not None else self.phase
        if phase in BEFORE_EVICTING:
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


def replacements_by_owner(drain: Drain, state: ClusterState) -> dict[str, list[Pod]]:
    """Owner UID → the new pods of that owner of an evicted pod, bound to a node, Running and Ready ones first, as
    many as the drain waits for: the one rule for what replaces a drain's pods (the drain's judge and the next
    plan's count of the drains in flight both read it)."""
    out: dict[str, list[Pod]] = {}
    with state.cond:
        for owner, count in drain.need.items():
            fresh = [
                q
                for q in state.by_owner.get(owner, {}).values()
                if q.uid not in drain.before.get(owner, ()) and not q.terminating and q.node_name
            ]
            fresh.sort(key=lambda q: (not (q.phase == "Running" and q.ready), q.creation_timestamp))
            out[owner] = fresh[:count]
    return out


class DrainReporter:
    """The metric, Event and log line of each way a drain starts or ends, and its :class:`DrainResult`."""

    def __init__(self, events: EventRecorder, metrics: Metrics, *, dry_run: bool) -> None:
        self.events = events
        self.metrics = metrics
        self.dry_run = dry_run

    def skipped(self, node_name: str, label: DrainLabel, message: str, refusals: tuple[Refusal, ...]) -> DrainResult:
        self.metrics.drains_skipped.labels(label.value).inc()
        log.info(
            "not draining node %s: %s",
            node_name,
            message,
            extra=fields(node=node_name, reason=label.value, dry_run=self.dry_run),
        )
        return DrainResult(node_name, DrainOutcome.SKIPPED, label.value, message, refusals=refusals)

    def skip_event(self, result: DrainResult) -> None:
        """The Event of a drain the run loop chose and the re-check skipped."""
        self.events.record(Ref.node(result.node), NORMAL, DRAIN_SKIPPED, f"{result.reason}: {result.message}")

    def dry_run_result(self, node_name: str, pods: Sequence[Pod], how: str, moves: str) -> DrainResult:
        log.info(
            "dry-run: would %s node %s and evict %d pods",
            how,
            node_name,
            len(pods),
            extra=fields(node=node_name, pods=[p.key for p in pods], dry_run=True),
        )
        return DrainResult(node_name, DrainOutcome.DRY_RUN, message=moves)

    def started(self, drain: Drain) -> None:
        self.metrics.drains_started.inc()
        log.info(
            "draining node %s: %d pods to spot",
            drain.node,
            len(drain.pods),
            extra=fields(node=drain.node, pods=[p.key for p in drain.pods], attempts=drain.write.attempts),
        )
        moves = ", ".join(f"{p.key}→{drain.targets.get(p.key, 'spot')}" for p in drain.pods)
        text = f"Moving {len(drain.pods)} pods to spot nodes: {moves}"
        self.events.record(drain.ref, NORMAL, DRAIN_STARTED, text[:1000])

    def ended(self, drain: Drain, outcome: DrainOutcome) -> DrainResult:
        """The result of a drain in flight that reached ``outcome`` (:data:`NEXT`'s end states)."""
        return self._succeeded(drain) if outcome is DrainOutcome.SUCCEEDED else self._failed(drain)

    def _succeeded(self, drain: Drain) -> DrainResult:
        self.metrics.drains_succeeded.inc()
        placed = drain.placed
        msg = f"{len(drain.evicted)} pods moved to spot: " + ", ".join(f"{k}→{n}" for k, n in placed)
        self.events.record(drain.ref, NORMAL, DRAIN_SUCCEEDED, msg[:1000])
        log.info(
            "drained node %s",
            drain.node,
            extra=fields(node=drain.node, evicted=[p.key for p in drain.evicted], replacements=dict(placed)),
        )
        evicted = tuple(p.key for p in drain.evicted)
        return DrainResult(drain.node, DrainOutcome.SUCCEEDED, message=msg, evicted=evicted, replacements=placed)

    def _failed(self, drain: Drain) -> DrainResult:
        rollback = drain.rollback
        assert rollback is not None
        label, message = rollback.label, rollback.message + drain.note
        self.metrics.drains_failed.labels(label.value).inc()
        if label is DrainLabel.INTERRUPTED:
            self.events.record(drain.ref, WARNING, DRAIN_ABORTED, message)
            what = f"drain of node {drain.node} interrupted: {message}"
        else:
            self.events.record(drain.ref, WARNING, DRAIN_FAILED, f"{label.value}: {message}"[:1000])
            what = f"drain of node {drain.node} failed: {label.value}: {message}"
        log.warning(
            "%s",
            what,
            extra=fields(node=drain.node, reason=label.value, evicted=[p.key for p in drain.evicted]),
        )
        evicted = tuple(p.key for p in drain.evicted)
        return DrainResult(drain.node, DrainOutcome.FAILED, label.value, message, evicted, replacements=drain.placed)


class Drainer:
    """Starts, advances and ends drains (see the module docstring). ``should_abort`` is shutdown or lost
    leadership; ``clock`` (monotonic seconds) times the phases and paces the node writes, ``wall`` (Unix seconds)
    stamps the marks; ``free_room`` deletes the placeholders in a drain's way (``None``: deleted here, no request
    ended); ``backoff`` rests the nodes whose drain fails (``None``: one of its own)."""

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
        backoff: NodeBackoff | None = None,
    ) -> None:
        self.kube = kube
        self.state = state
        self.config = config
        self.evictor = evictor
        self.events = events
        self.metrics = metrics
        self.marker = marker.with_retry(ONE_ATTEMPT)
        """Every node write is tried once per advance: the phase schedules the next attempt."""
        self.dry_run = dry_run
        self.should_abort = should_abort
        self.stop = stop
        self.heartbeat = heartbeat
        self.clock = clock
        self.wall = wall
        self.free_room = free_room or self._delete_placeholders
        self.backoff = backoff or NodeBackoff(marker, events, config.rescheduler.node_backoff, wall)
        self.report = DrainReporter(events, metrics, dry_run=dry_run)

    @property
    def memory_backoff(self) -> dict[str, float]:
        """Backoffs decided in dry-run, or that could not be written to the node (:attr:`NodeBackoff.memory`)."""
        return self.backoff.memory

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
        """The budgets of the pods' namespaces as the API server has them now (a stale status computed): one
        attempt, so a node whose budgets cannot be read now is skipped, not waited for."""
        api_version = f"policy/{self.kube.pdb_version()}"
        live: list[PDB] = []
        for ns in sorted({p.namespace for p in pods}):
            items = self.kube.get(self.kube.pdb_path(ns)).get("items") or []
            live.extend(PDB.from_api({"apiVersion": api_version, **i}) for i in items)
        if not all(b.status_current for b in live):
            namespaces = {b.namespace for b in live}
            with self.state.cond:
                peers = [p for p in self.state.pods.values() if p.namespace in namespaces]
            live = with_computed_status(live, peers)
        return live

    def _skip(self, node_name: str, label: DrainLabel, message: str, refusals: tuple[Refusal, ...] = ()) -> DrainResult:
        return self.report.skipped(node_name, label, message, refusals)

    # ---- start ----------------------------------------------------------------------------------------------

    def start(
        self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None
    ) -> Drain | DrainResult:
        """Re-check ``node_name``, whose movable pods the plan moves (``planned`` keys; ``targets``: key → spot
        node), and make the first attempt at its mark. Returns the drain in flight (marked, its mark to be tried
        again, or rolling back a mark refused), or the result when it did not start (skipped, dry-run)."""
        pods, skipped = self.precheck(node_name, planned)
        if skipped is not None:
            return skipped
        node = self.state.node(node_name)
        assert node is not None
        if self.dry_run:
            moves = ", ".join(f"{p.key}→{(targets or {}).get(p.key, 'spot')}" for p in pods)
            return self._dry_run(node_name, pods, moves)
        ref = Ref.node(node_name, node.uid)
        drain = Drain(node_name, ref, tuple(pods), dict(targets or {}), Phase.PENDING, self.clock())
        self._take(drain, Phase.MARKING)
        self._take(drain, self._step_mark(drain))
        return drain

    # ---- phases ---------------------------------------------------------------------------------------------

    def advance(self, drain: Drain) -> DrainResult | None:
        """Do what can be done now for ``drain``, without waiting: the result once it is over, else ``None``."""
        while True:
            step = self._STEPS[drain.phase](self, drain)
            if step is None:
                return None
            result = self._take(drain, step)
            if result is not None:
                return result

    def _take(self, drain: Drain, step: Step) -> DrainResult | None:
        """Follow ``step`` from the drain's phase (:func:`transition`): the result when the drain ends; else enter
        the next phase, and the next one when its entry says so (nothing to wait for there). The one place a
        drain's phase changes."""
        while step is not None:
            to = transition(drain.phase, step)
            if isinstance(step, Failure):
                drain.rollback = Rollback(step.label, step.message, drain.phase, step.back_off)
            if isinstance(to, DrainOutcome):
                return self.report.ended(drain, to)
            drain.phase, drain.since = to, self.clock()
            # Worded apart from the "drain of node ... failed/interrupted" lines that operators and tests look for.
            log.info("node %s: drain phase %s", drain.node, to.value, extra=fields(node=drain.node, phase=to.value))
            entry = self._ENTRIES.get(to)
            step = entry(self, drain) if entry is not None else None
        return None

    def _enter_write(self, drain: Drain) -> None:
        """A node write begins: tried at once, until ``pod_eviction_timeout`` from now (a rollback: no limit)."""
        timeout = self.config.rescheduler.pod_eviction_timeout
        deadline = None if drain.phase is Phase.ROLLING_BACK else self.clock() + timeout
        drain.write = NodeWrite(deadline)

    def _try_write(self, drain: Drain, write: Callable[[], object]) -> bool | None:
        """One attempt at the node write of ``drain``'s phase, if it is due: ``True`` written, ``None`` to be tried
        again (an API error that may pass, before the deadline), ``False`` given up (``drain.write.last`` says why)."""
        w = drain.write
        now = self.clock()
        if now < w.next_at:
            return None
        self.heartbeat()
        w.attempts += 1
        try:
            write()
        except ApiError as e:
            w.last = str(e)
            if not (is_transient(e) or isinstance(e, Conflict)) or (w.deadline is not None and now >= w.deadline):
                return False
            wait = min(max(w.delay, e.retry_after or 0.0), WRITE_MAX_BACKOFF)
            w.next_at, w.delay = now + wait, min(w.delay * 2, WRITE_MAX_BACKOFF)
            log.warning(
                "node %s: drain phase %s: attempt %d failed, tried again in %.1fs: %s",
                drain.node,
                drain.phase.value,
                w.attempts,
                wait,
                e,
                extra=fields(node=drain.node, phase=drain.phase.value, attempts=w.attempts, retry_in=wait),
            )
            return None
        return True

    def _step_mark(self, drain: Drain) -> Step:
        done = self._try_write(drain, lambda: self.marker.mark(drain.node, self.wall()))
        if done is None:
            return None
        if not done:
            return Failure(DrainLabel.MARK_FAILED, f"could not mark the node: {drain.write.last}")
        self.report.started(drain)
        return Phase.JOBS if self.config.disruption.jobs == JOBS_WAIT else Phase.FREEING

    def _dry_run(self, node_name: str, pods: Sequence[Pod], moves: str) -> DrainResult:
        how = "cordon" if self.marker.mode == "cordon" else f"taint {self.marker.taint_key}:{PREFER_NO_SCHEDULE}"
        result = self.report.dry_run_result(node_name, pods, how, moves)
        for p in pods:
            self.evictor.evict(p, why=f"dry-run: would move from on-demand node {node_name} to spot")
        return result

    def _enter_jobs(self, drain: Drain) -> Phase | None:
        """Wait for the node's running Job pods (``disruption.jobs: wait``), with an Event; none: free the room."""
        jobs = [p for p in self.state.pods_on(drain.node) if is_job_pod(p) and not p.terminal]
        if not jobs:
            return Phase.FREEING
        drain.jobs = tuple(jobs)
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
        return None

    def _step_jobs(self, drain: Drain) -> Step:
        left = self._running_jobs(drain)
        if not left:
            return Phase.FREEING
        timeout = self.config.disruption.job_timeout
        if self.clock() - drain.since < timeout:
            return None
        msg = f"Job pods still running {timeout:.0f}s later: {', '.join(left[:5])}"
        return Failure(DrainLabel.JOB_TIMEOUT, msg, back_off=True)

    def _running_jobs(self, drain: Drain) -> list[str]:
        with self.state.cond:
            return [
                p.key
                for p in drain.jobs
                if (now := self.state.pods.get(p.key)) is not None and now.uid == p.uid and not now.terminal
            ]

    # ---- the room --------------------------------------------------------------------------------------------

    def in_the_way(self, drain: Drain) -> list[Pod]:
        """The placeholders in the watched state that hold, or could take, the room ``drain`` moves its pods to."""
        home = self.config.namespace
        with self.state.cond:
            placeholders = [p for p in self.state.pods.values() if is_placeholder(p, home)]
        return in_the_way(drain.node, drain.targets.values(), placeholders)

    def _enter_freeing(self, drain: Drain) -> Phase | None:
        """Before the first eviction: delete what is in the way (and the node's own request, whatever the watch
        shows of it), then wait until it is gone, or go to the evictions at once if nothing is."""
        left = self.in_the_way(drain)
        self.free_room(drain.node, left)
        if not left:
            return Phase.EVICTING
        drain.freed_at = drain.since
        log.info(
            "node %s: waiting for %d placeholder pod(s) to be gone before the first eviction",
            drain.node,
            len(left),
            extra=fields(node=drain.node, pods=[p.key for p in left][:20]),
        )
        return None

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

    def _step_freeing(self, drain: Drain) -> Step:
        left = self.in_the_way(drain)
        if not left:
            return Phase.EVICTING
        now = self.clock()
        timeout = self.config.rescheduler.pod_eviction_timeout
        if now - drain.since >= timeout:
            names = ", ".join(p.key for p in left[:5])
            msg = f"{len(left)} placeholder pod(s) still hold or could take the spot room {timeout:.0f}s later: {names}"
            return Failure(DrainLabel.ROOM_NOT_FREED, msg, back_off=True)
        if now - drain.freed_at >= FREE_AGAIN:
            drain.freed_at = now
            self.free_room(drain.node, left)
        return None

    def _begin_evictions(self, drain: Drain) -> None:
        """Entering :attr:`Phase.EVICTING`: note who will replace whom (the pods of each owner that exist now are
        not replacements) and queue every pod's eviction."""
        for p in drain.pods:
            ctrl = p.controller
            if ctrl is None or not ctrl.uid:
                continue
            if ctrl.uid not in drain.before:
                drain.before[ctrl.uid] = {q.uid for q in self.state.pods_of_owner(ctrl.uid)}
            drain.need[ctrl.uid] = drain.need.get(ctrl.uid, 0) + 1
        why = f"moving from on-demand node {drain.node} to spot"
        drain.tries = [self.evictor.begin(p, why=why) for p in drain.pods]

    # ---- evictions and replacements ----------------------------------------------------------------------------

    def _step_evict(self, drain: Drain) -> Step:
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
                return Failure(label, f"eviction of {t.pod.key}: {result.message}", back_off=True)
            drain.evicted.append(t.pod)
            # Progress: the pods still refused by their budgets get pod_eviction_timeout from now, so the drain fails
            # only when that long passes with no eviction of the node going through.
            for other in drain.tries:
                other.deadline = max(other.deadline, self.clock() + self.evictor.timeout)
        return None if drain.tries else Phase.TERMINATING

    def _budget_allows(self, pod: Pod) -> bool:
        """Whether the watched budget that refused ``pod``'s eviction allows a disruption again: then the next
        attempt need not wait out its backoff (the API server still decides)."""
        with self.state.cond:
            budgets = [b for b in self.state.pdbs.values() if b.namespace == pod.namespace and b.selects(pod)]
        return len(budgets) == 1 and budget_use(pod, budgets[0]) is USES and budgets[0].disruptions_allowed >= 1

    def _step_terminating(self, drain: Drain) -> Step:
        with self.state.cond:
            left = [p.key for p in drain.evicted if (q := self.state.pods.get(p.key)) is not None and q.uid == p.uid]
        if not left:
            return Phase.REPLACING
        limit = self.config.rescheduler.max_graceful_termination + TERMINATION_HEADROOM
        if self.clock() - drain.since < limit:
            return None
        msg = f"pods still present {limit:.0f}s after eviction: {', '.join(left[:5])}"
        return Failure(DrainLabel.TERMINATION_TIMEOUT, msg, back_off=True)

    def replacements(self, drain: Drain) -> list[Pod]:
        """The new pods of the evicted pods' owners, bound to a node, Running and Ready ones first
        (:func:`replacements_by_owner`)."""
        return [q for fresh in replacements_by_owner(drain, self.state).values() for q in fresh]

    def _step_replacing(self, drain: Drain) -> Step:
        got = self.replacements(drain)
        wanted = sum(drain.need.values())
        ready = sum(1 for q in got if q.phase == "Running" and q.ready)
        drain.placed = tuple((q.key, q.node_name) for q in got)
        if len(got) >= wanted and ready == len(got):
            return self._judge(drain)
        timeout = self.config.rescheduler.replacement_timeout
        if self.clock() - drain.since < timeout:
            return None
        msg = f"{ready} of {wanted} replacements Running and Ready after {timeout:.0f}s"
        return Failure(DrainLabel.REPLACEMENT_TIMEOUT, msg, back_off=True)

    def _judge(self, drain: Drain) -> Step:
        """Every replacement is Running and Ready: the drain worked if they all run on spot."""
        on_demand = []
        for key, where in drain.placed:
            target = self.state.node(where)
            if target is None or node_class(target, self.config.node_classes) != "spot":
                on_demand.append(f"{key} on {where}")
        if on_demand:
            msg = f"replacements landed on non-spot nodes: {', '.join(on_demand[:5])}"
            return Failure(DrainLabel.REPLACED_ON_DEMAND, msg, back_off=True)
        return Phase.FINISHING

    # ---- the end ------------------------------------------------------------------------------------------------

    def _step_finish(self, drain: Drain) -> Step:
        node_name = drain.node
        if self.config.rescheduler.keep_drained_tainted:
            done = self._try_write(drain, lambda: self.marker.mark_drained(node_name))
        else:
            done = self._try_write(drain, lambda: self.marker.unmark(node_name))
        if done is None:
            return None
        if not done:  # the pods moved all the same; the reconciler finishes the node
            why = drain.write.last
            log.warning("could not update node %s after its drain: %s", node_name, why, extra=fields(node=node_name))
        return DrainOutcome.SUCCEEDED

    def interrupt(self, drain: Drain) -> DrainResult | None:
        """Stop ``drain`` (shutdown or lost leadership): no further eviction, and its rollback's first attempt now
        (a drain already rolling back keeps its own). The result once the mark is removed; else ``None``, and the
        rollback goes on at each :meth:`advance`."""
        if drain.phase is not Phase.ROLLING_BACK:
            n = len(drain.evicted)
            msg = f"stopped (shutdown or lost leadership) after {n} evictions; the node's mark is removed"
            self._take(drain, Failure(DrainLabel.INTERRUPTED, msg))
        return self.advance(drain)

    def end_rollback(self, drain: Drain, within: float) -> DrainResult:
        """On the way out: interrupt ``drain`` and end its rollback here, riding out API errors for at most
        ``within`` seconds (waiting, unlike :meth:`advance`); a mark still there is left to the reconciler."""
        result = self.interrupt(drain)
        if result is not None:
            return result
        drain.write = NodeWrite(deadline=self.clock())  # one more attempt, then the result whatever it is
        result = self._take(drain, self._roll_back(drain, self.marker.with_retry(Retry(max(0.0, within)))))
        assert result is not None
        return result

    def _step_roll_back(self, drain: Drain) -> Step:
        return self._roll_back(drain, self.marker)

    def _roll_back(self, drain: Drain, marker: NodeMarker) -> Step:
        """One attempt at removing the mark (and writing the node's rest): the end once done or refused."""
        rollback = drain.rollback
        assert rollback is not None
        rest: tuple[float, int] | None = None

        def write() -> None:
            nonlocal rest
            if rollback.back_off:
                rest = marker.roll_back(drain.node, self.wall(), self.config.rescheduler.node_backoff)
            else:
                marker.unmark(drain.node)

        done = self._try_write(drain, write)
        if done is None:
            return None
        drain.note = "" if done else f" (could not remove the mark: {drain.write.last})"
        if rollback.back_off:
            # A rolled-back drain's node rests: as written with the rollback, else in memory only.
            error = "" if rest is not None else drain.write.last or "the node is gone"
            drain.note += self.backoff.rest(drain.node, drain.ref, rest, rollback.label.value, error)
        return DrainOutcome.FAILED

    _STEPS: ClassVar[dict[Phase, Callable[[Drainer, Drain], Step]]] = {
        Phase.MARKING: _step_mark,
        Phase.JOBS: _step_jobs,
        Phase.FREEING: _step_freeing,
        Phase.EVICTING: _step_evict,
        Phase.TERMINATING: _step_terminating,
        Phase.REPLACING: _step_replacing,
        Phase.FINISHING: _step_finish,
        Phase.ROLLING_BACK: _step_roll_back,
    }
    """Each phase's step (:data:`Step`): the next phase, the end, a failure, or ``None`` (nothing more to do now)."""

    _ENTRIES: ClassVar[dict[Phase, Callable[[Drainer, Drain], Step]]] = {
        Phase.MARKING: _enter_write,
        Phase.JOBS: _enter_jobs,
        Phase.FREEING: _enter_freeing,
        Phase.EVICTING: _begin_evictions,
        Phase.FINISHING: _enter_write,
        Phase.ROLLING_BACK: _enter_write,
    }
    """What entering a phase does first; a phase returned is entered at once (nothing to wait for)."""

    # ---- one drain to its end, and backoff -------------------------------------------------------------------------

    def drain(self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None) -> DrainResult:
        """:meth:`start` and :meth:`advance` until the drain is over, waiting for the watch between steps: one
        node's whole drain in one call (the tests)."""
        drain = self.start(node_name, planned, targets)
        while isinstance(drain, Drain):
            if self.should_abort():
                return self.end_rollback(drain, self.evictor.timeout)
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
        if drain.phase in WRITES:
            return min(1.0, max(0.0, drain.write.next_at - self.clock()))
        return 1.0

    def back_off(self, node_name: str, reason: str, ref: Ref | None = None) -> tuple[float, str]:
        """Leave the node alone (:meth:`~rescheduler.cluster.node_backoff.NodeBackoff.back_off`)."""
        return self.backoff.back_off(node_name, reason, ref)
