"""Drain one on-demand node onto spot, or leave it exactly as it was.

The steps, each a place where the drain may stop safely:

1. **Re-check** against the live state: the node's movable pods are still the planned ones, and the
   PodDisruptionBudgets of their namespaces (listed fresh, not from the watch cache) let the drain start by
   ``rescheduler.pdb_rule`` (:func:`rescheduler.plan.safety.pdb_refusals`): each allows a disruption now, or
   under ``all-at-once`` every eviction together. A budget whose status is absent or stale is judged by the
   status computed from the watched pods, as the plan judged it (:mod:`shared.disruption`). A refusal skips
   the node untouched.
2. **Mark** the node so evicted pods do not come back: a ``PreferNoSchedule`` taint ``<drain_taint_key>=
   spotshift-rescheduler`` or a cordon, plus the annotation ``spotshift.io/drain-state: draining``. The
   mark names spotshift, so a restarted rescheduler finds and removes what it left (:mod:`rescheduler.cluster.marks`)
   and never touches a cordon or taint set by someone else.
2b. With ``disruption.jobs: wait``, **wait for the node's running Job pods** to finish (Succeeded, Failed or
   gone) for up to ``disruption.job_timeout``: the mark keeps new pods off meanwhile; on timeout the drain is
   rolled back and the node backed off like any failed drain.
3. **Evict** each pod, one at a time, through :class:`~rescheduler.cluster.evictor.Evictor`, which retries a
   budget's 429 until ``pod_eviction_timeout``: a budget allowing fewer disruptions than the node's pods
   paces the drain as replacements become Ready.
4. **Wait** for the evicted pods to be gone (``max_graceful_termination`` plus headroom) and for as many new
   pods of each owner as were evicted to be Running and Ready (``replacement_timeout``), from the watch.
5. **Judge**: a replacement that landed on an on-demand node means the move did not work (the scheduler
   prefers on-demand for it, or spot is full): the node is unmarked and backed off exponentially
   (``node_backoff`` × 2^(failures-1), stored in node annotations so a restart or the next leader respects it),
   so the rescheduler never loops evicting the same pods.
6. **Finish**: the emptied node keeps its mark as ``drained`` for the autoscaler (``keep_drained_tainted``), or
   is made schedulable again.

Any failure after step 2 unmarks the node (rollback). A shutdown (SIGTERM) or a lost lease stops at the
next step: no further eviction, the mark removed; pods already evicted are replaced by their controllers.
Every API call of a drain rides out transient errors (an API server or etcd restarting) within
``pod_eviction_timeout``; a mark that still cannot be removed is put right by a later cycle
(:class:`~rescheduler.cluster.marks.MarkReconciler`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

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
from rescheduler.cluster.evictor import Evictor, Result
from rescheduler.cluster.kube import ApiError, Kube, Retry
from rescheduler.cluster.marks import (
    NodeMarker,
    iso,
)
from rescheduler.cluster.state import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.safety import Refusal, pdb_refusals
from shared.classes import node_class
from shared.config import JOBS_WAIT, Config
from shared.disruption import with_computed_status
from shared.model import PDB, PREFER_NO_SCHEDULE, Pod
from shared.movable import is_job_pod, movability

__all__ = [
    "Outcome",
    "DrainResult",
    "Drainer",
    "movable_pods",
    "SKIP_PDB",
    "SKIP_PLAN_STALE",
    "SKIP_NODE_CHANGED",
    "SKIP_PDB_LIST",
    "FAIL_MARK",
    "FAIL_EVICTION_REFUSED",
    "FAIL_EVICTION",
    "FAIL_TERMINATION_TIMEOUT",
    "FAIL_REPLACEMENT_TIMEOUT",
    "FAIL_REPLACED_ON_DEMAND",
    "FAIL_INTERRUPTED",
    "FAIL_JOB_TIMEOUT",
]

log = logging.getLogger("spotshift.rescheduler.cluster.drain")

# Why a planned drain was not started (metric label values, also in logs and Events).
SKIP_PDB = "pdb-precheck"
SKIP_PLAN_STALE = "plan-stale"
SKIP_NODE_CHANGED = "node-changed"
SKIP_PDB_LIST = "pdb-list-failed"
# Why a started drain failed.
FAIL_MARK = "mark-failed"
FAIL_EVICTION_REFUSED = "eviction-refused"
FAIL_EVICTION = "eviction-failed"
FAIL_TERMINATION_TIMEOUT = "termination-timeout"
FAIL_REPLACEMENT_TIMEOUT = "replacement-timeout"
FAIL_REPLACED_ON_DEMAND = "replaced-on-on-demand"
FAIL_INTERRUPTED = "interrupted"
FAIL_JOB_TIMEOUT = "job-timeout"

TERMINATION_HEADROOM = 30.0
"""Added to ``max_graceful_termination`` when waiting for evicted pods to be gone (pusher's podEvictionHeadroom)."""


class Outcome:
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    DRY_RUN = "dry-run"


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
        return self.outcome in (Outcome.SUCCEEDED, Outcome.FAILED)


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
    """Drains one node at a time (see the module docstring). ``should_abort`` is shutdown or lost leadership."""

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
        self.memory_backoff: dict[str, float] = {}
        """Backoffs decided in dry-run, or that could not be written to the node."""

    # ---- step 1 -------------------------------------------------------------------------------------------

    def precheck(self, node_name: str, planned: Sequence[str]) -> tuple[list[Pod], DrainResult | None]:
        """The pods to evict, or the reason the drain must not start."""
        cfg = self.config
        node = self.state.node(node_name)
        if node is None or node_class(node, cfg.node_classes) != "on-demand":
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_NODE_CHANGED, "node is gone or no longer on-demand")
        with self.state.cond:
            pdbs = list(self.state.pdbs.values())
        pods, blocking = movable_pods(self.state.pods_on(node_name), cfg, pdbs)
        if blocking:
            why = f"pod {blocking[0].key} now blocks the drain"
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PLAN_STALE, why)
        if {p.key for p in pods} != set(planned):
            extra = sorted({p.key for p in pods} - set(planned))
            why = f"pods changed since the plan (new: {', '.join(extra[:3]) or 'none'})"
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PLAN_STALE, why)
        live: list[PDB] = []
        retry = Retry(self.config.rescheduler.pod_eviction_timeout, wait=self.stop.wait)
        stop = self.should_abort
        try:
            api_version = f"policy/{retry.call(self.kube.pdb_version, stop=stop)}"
            for ns in sorted({p.namespace for p in pods}):
                path = self.kube.pdb_path(ns)
                items = retry.call(functools.partial(self.kube.get, path), stop=stop).get("items") or []
                live.extend(PDB.from_api({"apiVersion": api_version, **i}) for i in items)
        except (ApiError, ValueError) as e:
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PDB_LIST, f"cannot list PodDisruptionBudgets: {e}")
        if not all(b.status_current for b in live):
            namespaces = {b.namespace for b in live}
            with self.state.cond:
                peers = [p for p in self.state.pods.values() if p.namespace in namespaces]
            live = with_computed_status(live, peers)
        refusals = pdb_refusals(pods, live, rule=cfg.rescheduler.pdb_rule)
        if refusals:
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PDB, str(refusals[0]), refusals=tuple(refusals))
        return pods, None

    # ---- the drain ------------------------------------------------------------------------------------------

    def drain(self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None) -> DrainResult:
        """Drain ``node_name`` whose movable pods the plan moves (``planned`` keys; ``targets``: key → spot node)."""
        pods, skipped = self.precheck(node_name, planned)
        if skipped is not None:
            self.metrics.drains_skipped.labels(skipped.reason).inc()
            log.info(
                "not draining node %s: %s",
                node_name,
                skipped.message,
                extra=fields(node=node_name, reason=skipped.reason, dry_run=self.dry_run),
            )
            return skipped
        node = self.state.node(node_name)
        assert node is not None
        ref = Ref.node(node_name, node.uid)
        moves = ", ".join(f"{p.key}→{(targets or {}).get(p.key, 'spot')}" for p in pods)
        if self.dry_run:
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
            return DrainResult(node_name, Outcome.DRY_RUN, message=moves)

        # Step 2: mark.
        try:
            self.marker.mark(node_name, self.wall())
        except ApiError as e:
            return self._failed(node_name, ref, FAIL_MARK, f"could not mark the node: {e}", (), unmark=True)
        self.metrics.drains_started.inc()
        log.info(
            "draining node %s: %d pods to spot",
            node_name,
            len(pods),
            extra=fields(node=node_name, pods=[p.key for p in pods]),
        )
        self.events.record(ref, NORMAL, DRAIN_STARTED, f"Moving {len(pods)} pods to spot nodes: {moves}"[:1000])

        # Step 2b: with disruption.jobs: wait, the node's running Job pods finish first.
        if self.config.disruption.jobs == JOBS_WAIT:
            stopped = self._wait_for_jobs(node_name, ref)
            if stopped is not None:
                return stopped

        # Who will replace whom: the pods of each owner that exist now are not replacements.
        before: dict[str, set[str]] = {}
        need: dict[str, int] = {}
        for p in pods:
            ctrl = p.controller
            if ctrl is None or not ctrl.uid:
                continue
            if ctrl.uid not in before:
                before[ctrl.uid] = {q.uid for q in self.state.pods_of_owner(ctrl.uid)}
            need[ctrl.uid] = need.get(ctrl.uid, 0) + 1

        # Step 3: evict.
        evicted: list[Pod] = []
        for p in pods:
            if self.should_abort():
                return self._interrupted(node_name, ref, evicted)
            self.heartbeat()
            result = self.evictor.evict(p, why=f"moving from on-demand node {node_name} to spot")
            if result.result is Result.ABORTED:
                return self._interrupted(node_name, ref, evicted)
            if not result.result.ok:
                reason = FAIL_EVICTION_REFUSED if result.result is Result.REFUSED else FAIL_EVICTION
                return self._failed(
                    node_name, ref, reason, f"eviction of {p.key}: {result.message}", evicted, back_off=True
                )
            evicted.append(p)

        # Step 4: wait for the pods to be gone, then for their replacements.
        def gone() -> bool:
            for p in evicted:
                now = self.state.pods.get(p.key)
                if now is not None and now.uid == p.uid:
                    return False
            return True

        limit = self.config.rescheduler.max_graceful_termination + TERMINATION_HEADROOM
        waited = self._wait(gone, limit)
        if waited is None:
            return self._interrupted(node_name, ref, evicted)
        if not waited:
            left = [p.key for p in evicted if (q := self.state.pod(p.key)) is not None and q.uid == p.uid]
            msg = f"pods still present {limit:.0f}s after eviction: {', '.join(left[:5])}"
            return self._failed(node_name, ref, FAIL_TERMINATION_TIMEOUT, msg, evicted, back_off=True)

        def replacements() -> list[Pod]:
            out = []
            for owner, count in need.items():
                fresh = [
                    q
                    for q in self.state.by_owner.get(owner, {}).values()
                    if q.uid not in before[owner] and not q.terminating and q.node_name
                ]
                fresh.sort(key=lambda q: (not (q.phase == "Running" and q.ready), q.creation_timestamp))
                out.extend(fresh[:count])
            return out

        def replaced() -> bool:
            got = replacements()
            return len(got) >= sum(need.values()) and all(q.phase == "Running" and q.ready for q in got)

        waited = self._wait(replaced, self.config.rescheduler.replacement_timeout)
        if waited is None:
            return self._interrupted(node_name, ref, evicted)
        with self.state.cond:
            got = replacements()
        placed = tuple((q.key, q.node_name) for q in got)
        if not waited:
            ready = sum(1 for q in got if q.phase == "Running" and q.ready)
            msg = (
                f"{ready} of {sum(need.values())} replacements Running and Ready after "
                f"{self.config.rescheduler.replacement_timeout:.0f}s"
            )
            return self._failed(node_name, ref, FAIL_REPLACEMENT_TIMEOUT, msg, evicted, back_off=True, placed=placed)

        # Step 5: judge where they went.
        on_demand = []
        for key, where in placed:
            target = self.state.node(where)
            if target is None or node_class(target, self.config.node_classes) != "spot":
                on_demand.append(f"{key} on {where}")
        if on_demand:
            msg = f"replacements landed on non-spot nodes: {', '.join(on_demand[:5])}"
            return self._failed(node_name, ref, FAIL_REPLACED_ON_DEMAND, msg, evicted, back_off=True, placed=placed)

        # Step 6: finish.
        try:
            if self.config.rescheduler.keep_drained_tainted:
                self.marker.mark_drained(node_name)
            else:
                self.marker.unmark(node_name)
        except ApiError as e:
            log.warning("could not update node %s after its drain: %s", node_name, e, extra=fields(node=node_name))
        self.metrics.drains_succeeded.inc()
        msg = f"{len(evicted)} pods moved to spot: " + ", ".join(f"{k}→{n}" for k, n in placed)
        self.events.record(ref, NORMAL, DRAIN_SUCCEEDED, msg[:1000])
        log.info(
            "drained node %s",
            node_name,
            extra=fields(node=node_name, evicted=[p.key for p in evicted], replacements=dict(placed)),
        )
        return DrainResult(
            node_name, Outcome.SUCCEEDED, message=msg, evicted=tuple(p.key for p in evicted), replacements=placed
        )

    def _wait_for_jobs(self, node_name: str, ref: Ref) -> DrainResult | None:
        """Wait for the node's running Job pods to be Succeeded, Failed or gone; ``None`` when they are, else the
        drain's result (rolled back and backed off on ``disruption.job_timeout``, or interrupted)."""
        jobs = [p for p in self.state.pods_on(node_name) if is_job_pod(p) and not p.terminal]
        if not jobs:
            return None
        timeout = self.config.disruption.job_timeout
        names = ", ".join(p.key for p in jobs[:5])
        self.events.record(
            ref,
            NORMAL,
            WAITING_FOR_JOBS,
            f"Waiting up to {timeout:.0f}s for {len(jobs)} Job pod(s) to finish before moving the rest: {names}"[:1000],
        )
        log.info(
            "node %s: waiting for %d Job pods to finish",
            node_name,
            len(jobs),
            extra=fields(node=node_name, pods=[p.key for p in jobs], timeout=timeout),
        )

        def running() -> list[str]:
            out = []
            for p in jobs:
                now = self.state.pods.get(p.key)
                if now is not None and now.uid == p.uid and not now.terminal:
                    out.append(p.key)
            return out

        waited = self._wait(lambda: not running(), timeout)
        if waited is None:
            return self._interrupted(node_name, ref, ())
        if not waited:
            with self.state.cond:
                left = running()
            msg = f"Job pods still running {timeout:.0f}s later: {', '.join(left[:5])}"
            return self._failed(node_name, ref, FAIL_JOB_TIMEOUT, msg, (), back_off=True)
        return None

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool | None:
        """``True`` when ``predicate`` held, ``False`` on timeout, ``None`` when the drain must stop."""
        deadline = self.clock() + timeout
        while True:
            if self.should_abort():
                return None
            self.heartbeat()
            left = deadline - self.clock()
            if self.state.wait_until(predicate, min(max(left, 0.0), 1.0), self.stop):
                return True
            if self.clock() >= deadline:
                return False

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
            self.memory_backoff[node_name] = until
            note = f" (backoff kept in memory only: {e})"
        self.events.record(
            ref or Ref.node(node_name),
            WARNING,
            NODE_BACKOFF,
            f"Not draining this node again before {iso(until)} (failure {failures}): {reason}",
        )
        return until, note

    def _interrupted(self, node_name: str, ref: Ref, evicted: Sequence[Pod]) -> DrainResult:
        msg = f"stopped (shutdown or lost leadership) after {len(evicted)} evictions; the node's mark is removed"
        try:
            self.marker.unmark(node_name)
        except ApiError as e:
            msg += f" (could not remove the mark: {e})"
        self.metrics.drains_failed.labels(FAIL_INTERRUPTED).inc()
        self.events.record(ref, WARNING, DRAIN_ABORTED, msg)
        log.warning(
            "drain of node %s interrupted: %s", node_name, msg, extra=fields(node=node_name, reason=FAIL_INTERRUPTED)
        )
        return DrainResult(node_name, Outcome.FAILED, FAIL_INTERRUPTED, msg, tuple(p.key for p in evicted))

    def _failed(
        self,
        node_name: str,
        ref: Ref,
        reason: str,
        message: str,
        evicted: Sequence[Pod],
        *,
        unmark: bool = True,
        back_off: bool = False,
        placed: tuple[tuple[str, str], ...] = (),
    ) -> DrainResult:
        if unmark:
            try:
                self.marker.unmark(node_name)
            except ApiError as e:
                message += f" (could not remove the mark: {e})"
        if back_off:
            message += self.back_off(node_name, reason, ref)[1]
        self.metrics.drains_failed.labels(reason).inc()
        self.events.record(ref, WARNING, DRAIN_FAILED, f"{reason}: {message}"[:1000])
        log.warning(
            "drain of node %s failed: %s: %s",
            node_name,
            reason,
            message,
            extra=fields(node=node_name, reason=reason, evicted=[p.key for p in evicted]),
        )
        return DrainResult(
            node_name, Outcome.FAILED, reason, message, tuple(p.key for p in evicted), replacements=placed
        )
