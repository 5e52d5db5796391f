"""``spot-rescheduler run``: the long-running loop that plans every housekeeping interval and drains safely.

What runs, in one process:

* an informer thread per watched kind keeps :class:`~rescheduler.cluster.watch_cache.ClusterState` current (list once,
  then watch);
* a leader-election thread holds the ``coordination.k8s.io`` Lease (two replicas: one acts, one waits);
* an HTTP thread serves ``/metrics``, ``/healthz`` and ``/readyz``;
* at start-up, the API server's ``/version`` picks the kube-scheduler rules the planner follows
  (:mod:`shared.kube.version`; the strictest rules, with a warning, if it cannot be read);
* the main thread runs the loop. Every ``housekeeping_interval``, and as soon as a drain ends, a cycle: the gate
  (who may drain now, how many may start), the plan with the drains in flight counted where their pods go and
  the pods waiting for a node placed first (pure: :mod:`rescheduler.plan.cycle`, :mod:`rescheduler.plan.planner`;
  the last plan again when nothing it is made from changed and it reads no clock), the decision, and the start of
  as many drains as the gate allows. Between cycles, at most every half second
  and whenever the watch brings a change, every drain in flight is advanced one step
  (:class:`~rescheduler.cluster.drain_queue.DrainQueue`, :class:`~rescheduler.cluster.drain.Drainer`): several
  nodes drain at once within ``disruption.budgets``
  (one at a time without budgets), a finished drain keeping its place for ``node_drain_delay``.

Each cycle also tells the spot reclaims from the state's nodes and records them in the memory of spot pools
(:mod:`rescheduler.cluster.spot_memory`, read at ``wall``'s time; kept in the Lease, so a new leader inherits it):
a spot node of a pool reclaimed within ``spot.stability_window`` is no target, and placeholders do not ask for it.

No pass of the loop waits on the API server: each drain makes at most one attempt at each call that is due and
schedules the next itself (:mod:`rescheduler.cluster.drain`), so an API error delays only the drain that met it.

SIGTERM or SIGINT sets one stop event. The loop watches it between steps, so every drain in flight is rolled back
(its mark removed; with the API server away, tried for :data:`SHUTDOWN_GRACE` seconds at most), then the lease is
released so the other replica takes over at once. A lost lease interrupts them too: each goes on rolling back,
one attempt at a time. Before every cycle (one attempt per node, then a backoff), and once more on the way out
while the lease is still ours, the leader puts right every node that carries spotshift's mark and is not being
drained by it: a crashed or killed predecessor's drains, or a rollback that the API server did not let through
(:class:`~rescheduler.cluster.marking.MarkReconciler`). The loop reads time through ``clock`` and ``wall`` only and
never sleeps in a decision, so a simulation can drive it.

Command-line flags (:mod:`rescheduler.flags`) use pusher/k8s-spot-rescheduler's names where the concept is the
same, and override the configuration file and ``SPOTSHIFT_*`` variables; they are validated by the same rules (a
bad value is one sentence naming the flag, exit code 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from rescheduler.cluster import USER_AGENT
from rescheduler.cluster.capacity_requests import CapacityRequester
from rescheduler.cluster.drain import Drain, Drainer, DrainResult
from rescheduler.cluster.drain_queue import DrainQueue
from rescheduler.cluster.events import DRAIN_HELD_BACK, NORMAL, EventRecorder, Ref
from rescheduler.cluster.evictor import Evictor
from rescheduler.cluster.leader import LeaderElector, LeaseCarry, LeaseConfig
from rescheduler.cluster.listing import NODEPOOLS_PATH
from rescheduler.cluster.marking import MarkReconciler, NodeMarker, clean_leftovers
from rescheduler.cluster.node_backoff import NodeBackoff
from rescheduler.cluster.rules import discover_switches
from rescheduler.cluster.spot_memory import SpotMemory
from rescheduler.cluster.watch_cache import (
    NODEPOOLS,
    PDBS,
    WATCHES,
    ClusterState,
    StateInformer,
    node_pools_access,
)
from rescheduler.flags import DEFAULT_PLAN_TIME_BUDGET, add_run_arguments, config_from_args, positive_seconds
from rescheduler.full_collections import FullCollections
from rescheduler.logs import fields, setup_logging
from rescheduler.metrics import HELD_BACK_CONTROLS, KARPENTER_REASONS, Heartbeat, Metrics, MetricsServer
from rescheduler.plan.cycle import Decision, Gate, PlannedCycle, decide, gate, plan_nodes
from rescheduler.plan.gate import reads_clock
from rescheduler.plan.records import Plan
from rescheduler.plan.stay_reasons import CONTROLS, Kind
from shared import heap
from shared.config import Config, ConfigError
from shared.kube.api import ApiError, Kube, KubeconfigError, Retry, Transport, transport_from_kubeconfig
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import PoolOutlook
from shared.switches import CURRENT, STRICTEST, Switches

__all__ = [
    "RunOptions",
    "Parts",
    "Rescheduler",
    "Planning",
    "placeholder_owner",
    "leader_elector",
    "watch_node_pools",
    "liveness_window",
    "PlanFunction",
    "add_run_arguments",
    "run_command",
    "config_from_args",
    "main",
]

log = logging.getLogger("spotshift.rescheduler")

PlanFunction = Callable[[ClusterSnapshot, Config, Mapping[str, str]], PlannedCycle]
"""The planner as the loop sees it: a snapshot, the config and the nodes to leave alone this cycle (with the
reason) in, the cycle's :class:`~rescheduler.plan.cycle.PlannedCycle` out."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the loop needs beyond :class:`~shared.config.Config`: process-level settings."""

    once: bool = False
    node_name: str = ""
    """The node this process runs on (``NODE_NAME`` from the downward API): drained last, if ever."""
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    sync_timeout: float = 600.0
    watch_timeout: float = 300.0
    plan_time_budget: float | None = DEFAULT_PLAN_TIME_BUDGET
    """Seconds after which the planner tries no further packing strategy (the first and pusher's order always
    run, so the plan is never worse than pusher's): small clusters get the whole portfolio, a 150,000-pod one
    those two. ``None``: no limit."""


@dataclass(slots=True)
class Parts:
    """What the loop is wired from (:meth:`Rescheduler.__init__`): the API, the probes, the Events, the lease, the
    node writes and rests, the drains, the mark reconciler, the capacity requests, the memory of spot reclaims and
    the informers."""

    kube: Kube
    heartbeat: Heartbeat
    events: EventRecorder
    elector: LeaderElector | None
    marker: NodeMarker
    """One attempt per write: a drain tries again at a later pass, the reconciler at a later cycle."""
    backoff: NodeBackoff
    """The node rests, shared by the drains and the capacity requests."""
    capacity: CapacityRequester
    """Placeholder pods asking for spot room (``capacity.enabled``; :mod:`rescheduler.cluster.capacity_requests`)."""
    drainer: Drainer
    reconciler: MarkReconciler
    spot: SpotMemory
    """The memory of spot reclaims, kept in the Lease (:mod:`rescheduler.cluster.spot_memory`)."""
    informers: list[StateInformer] = field(default_factory=list)
    collections: FullCollections | None = None
    """The process's full garbage collections, made after each cycle when due (``spot-rescheduler run``'s own:
    a loop built without them leaves its process's collector alone)."""


class Rescheduler:
    """The run loop. ``transport`` is the API boundary; ``plan`` defaults to :mod:`rescheduler.plan.planner`.
    ``clock`` (monotonic seconds) paces the loop and times the drains, ``wall`` (Unix seconds) judges backoffs,
    budgets and windows: both can be driven by a simulation."""

    def __init__(
        self,
        transport: Transport,
        config: Config,
        options: RunOptions = RunOptions(),
        *,
        plan: PlanFunction | None = None,
        metrics: Metrics | None = None,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        collections: FullCollections | None = None,
    ) -> None:
        self.config = config
        self.options = replace(options, identity=options.identity or default_identity())
        self.clock, self.wall = clock, wall
        self.metrics = metrics or Metrics()
        self.stop = stop or threading.Event()
        self.state = ClusterState()
        self.switches: Switches = STRICTEST
        """The cluster's kube-scheduler rules, read from ``/version`` when :meth:`run` starts."""
        self.parts = replace(self._wire(Kube(transport)), collections=collections)
        self.queue = DrainQueue(self.parts.drainer, node_drain_delay=config.rescheduler.node_drain_delay)
        planner = plan or default_planner(options.plan_time_budget, lambda: self.switches, wall=wall)
        self.plans = Planning(planner, config, self.metrics, self.parts.events, options.node_name)
        self.next_cycle = 0.0
        """When (``clock``) the next cycle is due."""

    def _wire(self, kube: Kube) -> Parts:
        """The parts, each built once from those before it (the node rests before the capacity requests and the
        drains that share them)."""
        config, r, dry_run = self.config, self.config.rescheduler, self.dry_run
        events = EventRecorder(kube, host=self.options.node_name or socket.gethostname(), enabled=not dry_run)
        marker = NodeMarker(kube, taint_key=r.drain_taint_key, mode=r.drain_taint, identity=self.options.identity)
        backoff = NodeBackoff(marker, events, r.node_backoff, self.wall)
        spot = SpotMemory(config, self.metrics)
        elector = leader_elector(kube, config, self.options, self.metrics, spot) if r.leader_elect else None
        owner = partial(placeholder_owner, kube, elector)
        capacity = CapacityRequester(
            kube, self.state, config, events, self.metrics, dry_run=dry_run, back_off=backoff.back_off, owner=owner
        )
        heartbeat = Heartbeat(max_age=liveness_window(config))
        evictor = Evictor(
            kube,
            timeout=r.pod_eviction_timeout,
            max_grace=r.max_graceful_termination,
            dry_run=dry_run,
            metrics=self.metrics,
            events=events,
            should_abort=self.should_abort,
            wait=self.stop.wait,  # its backoff between 429s ends early on shutdown
            clock=self.clock,
        )
        drainer = Drainer(
            kube,
            self.state,
            config,
            evictor,
            events,
            self.metrics,
            marker,
            dry_run=dry_run,
            should_abort=self.should_abort,
            stop=self.stop,
            heartbeat=heartbeat.beat,
            clock=self.clock,
            wall=self.wall,
            free_room=capacity.give_room,
            backoff=backoff,
        )
        reconciler = MarkReconciler(self.state, marker, config, events, dry_run=dry_run)
        return Parts(kube, heartbeat, events, elector, marker, backoff, capacity, drainer, reconciler, spot)

    @property
    def dry_run(self) -> bool:
        return self.config.rescheduler.dry_run

    @property
    def drainer(self) -> Drainer:
        return self.parts.drainer

    @property
    def drains(self) -> dict[str, Drain]:
        """The drains in flight, by node: each pass of the loop advances them (:meth:`advance_drains`)."""
        return self.queue.drains

    @property
    def finished(self) -> list[float]:
        return self.queue.finished

    @property
    def results(self) -> list[DrainResult]:
        """Every :class:`~rescheduler.cluster.drain.DrainResult` of this process (tests and ``--once`` read them)."""
        return self.queue.results

    # ---- leadership -----------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.parts.elector is None or self.parts.elector.is_leader()

    def ready(self) -> bool:
        """Readiness: the cluster state is listed and the leader-election Lease can be used (or is not used)."""
        return self.state.is_synced() and (self.parts.elector is None or not self.parts.elector.problem)

    def should_abort(self) -> bool:
        """Stop acting now: shutdown was asked for, or the lease is no longer ours."""
        return self.stop.is_set() or not self.is_leader()

    # ---- lifecycle ------------------------------------------------------------------------------------------

    def start_informers(self) -> None:
        """Discover the PDB version, list and watch every kind the planner reads (as ``plan`` lists them)."""
        kube = self.parts.kube
        self.state.pdb_api_version = f"policy/{kube.pdb_version()}"
        watch = self.options.watch_timeout
        pools = ((NODEPOOLS, NODEPOOLS_PATH, ()),) if watch_node_pools(kube, self.state, self.config) else ()
        for kind, path, query in ((PDBS, kube.pdb_path(), ()), *WATCHES, *pools):
            informer = StateInformer(kube, self.state, kind, path, threading.Event(), query=query, watch_timeout=watch)
            informer.start()
            self.parts.informers.append(informer)

    def stop_informers(self) -> None:
        for informer in self.parts.informers:
            informer.close()
        for informer in self.parts.informers:
            informer.join(timeout=5)

    def run(self) -> int:
        """Run until stopped (or one cycle with ``once``). Returns the process exit code."""
        self.metrics.leader.set(0 if self.parts.elector is not None else 1)
        self.switches = discover_switches(self.parts.kube, log)
        try:
            self.start_informers()
        except ApiError as e:
            log.error("cannot reach the API server: %s", e)
            return 1
        try:
            log.info(
                "waiting for the cluster state",
                extra=fields(identity=self.options.identity, dry_run=self.dry_run, node=self.options.node_name),
            )
            if not self.state.wait_synced(self.options.sync_timeout, self.stop):
                if not self.stop.is_set():
                    log.error("cluster state not listed within %.0fs", self.options.sync_timeout)
                    return 1
                return 0
            with self.state.cond:
                counts = {k: len(v) for k, v in (("nodes", self.state.nodes), ("pods", self.state.pods))}
            heap.trim()
            log.info("cluster state listed", extra=fields(**counts))
            if self.parts.elector is not None:
                self.parts.elector.start()
            return self._loop()
        finally:
            self.shutdown()

    def _loop(self) -> int:
        """Plan every ``housekeeping_interval`` (and as soon as a drain ends), advance the drains in flight at every
        pass; with ``once``, one cycle and its drains to their end."""
        cycled = False
        while not self.stop.is_set():
            self.parts.heartbeat.beat()
            if not self.is_leader():
                code = self._follow()
                if code is not None:
                    return code
                continue
            if self.clock() >= self.next_cycle and not (self.options.once and cycled):
                self.step_cycle()
                cycled = True
            self.advance_drains()
            if self.options.once and cycled and not self.queue:
                return 0
            self._pause()
        return 0

    def _follow(self) -> int | None:
        """Not the leader: stop the drains of a lost lease, wait for it; an exit code for ``once``, else ``None``."""
        elector = self.parts.elector
        assert elector is not None
        self.interrupt_drains()
        self.parts.capacity.forget()  # the leader now owns whatever placeholders we made
        # --once waits long enough for a dead holder's lease to expire; the loop re-checks each interval.
        interval = self.config.rescheduler.housekeeping_interval
        wait = self.options.lease_duration + 2 * self.options.retry_period if self.options.once else interval
        if elector.wait_for_leadership(wait, self.stop) or self.stop.is_set() or not self.options.once:
            return None
        if elector.problem:
            log.error(elector.problem)
            return 1
        holder = elector.holder
        log.warning("not the leader (lease held by %s): nothing done", holder or "?", extra=fields(holder=holder))
        return 3

    def step_cycle(self) -> None:
        """Put the marks nobody is draining right, then one cycle; the next is due one interval later."""
        try:
            self.parts.reconciler.reconcile(busy=set(self.queue))
            self.cycle()
        except ApiError as e:
            log.warning("cycle failed: %s", e)
        if self.parts.collections is not None:
            self.parts.collections.after_cycle()
        self.next_cycle = self.clock() + self.config.rescheduler.housekeeping_interval

    def _pause(self) -> None:
        """Until the next cycle, or a change the drains in flight may be waiting for (half a second at most)."""
        left = self.next_cycle - self.clock()
        if self.queue:
            self.state.wait_change(min(left, 0.5), self.stop)
        elif left > 0:
            self.stop.wait(left)

    def shutdown(self) -> None:
        """Roll back the drains in flight and put our marks right while the lease is still ours, release it (the
        successor takes over at once), and stop the informers. The rollbacks and the clean-up ride out API errors
        for :data:`SHUTDOWN_GRACE` seconds in all (at most ``pod_eviction_timeout``); a mark still left is the
        next leader's to put right."""
        if self.state.is_synced() and self.is_leader():
            give_up = time.monotonic() + min(SHUTDOWN_GRACE, self.config.rescheduler.pod_eviction_timeout)
            self.queue.end_all(give_up)
            try:
                self.parts.capacity.shutdown()
            except Exception:
                log.exception("could not delete the placeholder pods on the way out")
            try:
                cleanup = self.parts.marker.with_retry(Retry(max(0.0, give_up - time.monotonic())))
                clean_leftovers(self.state, cleanup, self.config, self.parts.events, dry_run=self.dry_run)
            except Exception:
                log.exception("could not put the drain marks right on the way out")
        if self.parts.elector is not None:
            self.parts.elector.stop(release=True)
        self.metrics.leader.set(0)
        self.stop_informers()

    # ---- drains in flight ---------------------------------------------------------------------------------------

    def advance_drains(self) -> None:
        """One step of every drain in flight; the ended ones are recorded and free their place after
        ``node_drain_delay``, and the next cycle comes at once (the cluster moved)."""
        if self.queue.advance():
            self.next_cycle = min(self.next_cycle, self.clock())

    def interrupt_drains(self) -> None:
        """Stop every drain in flight (lost lease) (:meth:`~rescheduler.cluster.drain_queue.DrainQueue.interrupt`)."""
        if self.queue.interrupt():
            self.next_cycle = min(self.next_cycle, self.clock())

    def cooling(self) -> int:
        """Drains ended less than ``node_drain_delay`` ago: each keeps its place in the budget that long."""
        return self.queue.cooling()

    # ---- one cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> Decision | None:
        started = time.perf_counter()
        try:
            return self._cycle()
        finally:
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.metrics.last_cycle.set(self.wall())

    def _cycle(self) -> Decision | None:
        cfg, capacity = self.config, self.parts.capacity
        if not cfg.capacity.enabled:
            capacity.collect_leftovers()
        version, snapshot = _snapshot(self.state, self.parts.spot, self.wall())
        self.queue.project(snapshot)
        g = gate(
            snapshot,
            cfg,
            now=self.wall(),
            memory_backoff=self.parts.backoff.memory,
            broken_nodes=self.state.broken_nodes(),
            in_flight=len(self.queue),
            cooling=self.queue.cooling(),
        )
        decision = self.plans.decide(snapshot, g, self._plan_inputs(version, g, snapshot.spot_outlook), self.queue)
        if not (self.dry_run and self.plans.reused):
            # A dry run starts nothing, so a reused plan's drains were checked and logged by an earlier cycle
            # already: checking them again would only repeat their log lines and their budgets' lists.
            self.queue.start(decision, g.starts)
        if cfg.capacity.enabled:
            # No new placeholder while a drain is in flight: it could take the room the drain frees.
            capacity.ask(self.plans.last_plan, snapshot, hold=bool(self.queue))
        return decision

    def _plan_inputs(self, version: int, g: Gate, outlook: PoolOutlook) -> tuple[Any, ...] | None:
        """Everything a plan is made from, or None when it also depends on the time (:func:`reads_clock`) or on the
        drains in flight (their pods are counted where they go): the state's version (every watch event that
        changes it counts), the nodes left out, the spot pools' outlook, the configuration and the rules."""
        if self.queue or reads_clock(self.config):
            return None
        return (version, tuple(sorted(g.excluded.items())), outlook, self.config, self.switches)


def _snapshot(state: ClusterState, spot: SpotMemory, now: float) -> tuple[int, ClusterSnapshot]:
    """The state's version and a snapshot of it, with the spot reclaims its nodes tell recorded and the memory
    read at ``now`` (the snapshot's :attr:`~shared.snapshot.ClusterSnapshot.spot_outlook`). The last cycle's snapshot
    again when neither the state nor that snapshot changed since (a cycle that reused its plan changes none)."""
    with state.cond:
        version, snapshot = state.version, state.snapshot(again=True)
    spot.observe(snapshot, now, version)
    return version, snapshot


def watch_node_pools(kube: Kube, state: ClusterState, config: Config) -> bool:
    """Whether to watch Karpenter's NodePools (``karpenter.defer_to_consolidation``, and served and readable).
    Asked once, at start-up: a cluster without Karpenter gets one line, RBAC refusing them one error, and the
    planner then leaves every node of a NodePool alone (``nodes_left_to_karpenter`` counts them)."""
    if not config.karpenter.defer_to_consolidation:
        return False
    access = node_pools_access(kube)
    if access is None:
        state.watch_node_pools()
        return True
    if access == "absent":
        log.info("no Karpenter NodePools served: every on-demand node is the rescheduler's")
        return False
    state.node_pools_problem = access
    log.error("cannot read Karpenter's NodePools (%s): nodes labelled karpenter.sh/nodepool are not drained", access)
    return False


def leader_elector(
    kube: Kube, config: Config, options: RunOptions, metrics: Metrics, carry: LeaseCarry | None = None
) -> LeaderElector:
    """The elector of the ``coordination.k8s.io`` Lease (two replicas: one acts, one waits), which sets the
    ``leader`` gauge on every change and keeps ``carry`` (the memory of spot reclaims) in the Lease."""
    o, r = options, config.rescheduler
    lease = LeaseConfig(
        namespace=config.namespace,
        name=r.lease_name,
        identity=o.identity,
        lease_duration=o.lease_duration,
        renew_deadline=o.renew_deadline,
        retry_period=o.retry_period,
    )
    return LeaderElector(kube, lease, on_change=lambda leader: metrics.leader.set(1 if leader else 0), carry=carry)


def liveness_window(config: Config) -> float:
    """How long ``/healthz`` tolerates no beat: a few intervals, plus one eviction's 429 retries."""
    r = config.rescheduler
    return max(60.0, 3 * r.housekeeping_interval) + r.pod_eviction_timeout + 60.0


def placeholder_owner(kube: Kube, elector: LeaderElector | None) -> dict[str, Any] | None:
    """The leader-election Lease as the placeholders' controller (``None`` without leader election)."""
    if elector is None:
        return None
    meta = kube.get(elector.path)["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


class Planning:
    """A cycle's plan and decision: the planner's plan, or the last one again when nothing it is made from changed
    (no watch event; a plan that reads the clock or counts drains in flight is always made anew), the decision
    with the budgets the drains in flight still claim, and the metrics and Events that report them."""

    def __init__(self, plan: PlanFunction, config: Config, metrics: Metrics, events: EventRecorder, own: str) -> None:
        self.plan_fn = plan
        self.config = config
        self.metrics = metrics
        self.events = events
        self.own_node = own
        self.last_planned: PlannedCycle | None = None
        self.planned_from: tuple[Any, ...] | None = None
        """What :attr:`last_planned` was made from: equal inputs give an equal plan."""
        self.reused = False
        """Whether the last cycle reused the plan before it."""
        self.last_decision: Decision | None = None
        self.decided_with: Mapping[str, int] | None = None
        """The budget claims :attr:`last_decision` was made with."""
        self._held_reported: dict[str, str] = {}
        """Node → the control last reported (an Event) as holding it back; a change is reported again."""
        self._waiting_reported: set[str] = set()
        self._not_worth_reported: set[str] = set()

    @property
    def last_plan(self) -> Plan | None:
        """The last cycle's whole plan (why each node stays: capacity mode reads it)."""
        return self.last_planned.plan if self.last_planned is not None else None

    def decide(self, snapshot: ClusterSnapshot, g: Gate, inputs: tuple[Any, ...] | None, queue: DrainQueue) -> Decision:
        """The plan (``inputs``: what it is made from, ``None`` when it cannot be reused) and the decision for
        ``snapshot``, reported."""
        cfg = self.config
        t0 = time.perf_counter()
        planned = self.last_planned
        # Nothing in the cluster changed since the last plan (no watch event), nor anything else it is made from:
        # the same plan again, without the planner's CPU (a quiet big cluster's cycle is then cheap).
        reused = self.reused = planned is not None and inputs is not None and inputs == self.planned_from
        if not reused:
            self.last_planned = self.planned_from = None
            planned = self.plan_fn(snapshot, cfg, g.excluded)
            self.last_planned, self.planned_from = planned, inputs
            self.metrics.plan_duration.observe(time.perf_counter() - t0)
        assert planned is not None
        claimed = queue.claims(snapshot)
        decision = self.last_decision
        if not (reused and decision is not None and claimed == self.decided_with):
            # A reused plan was made from the same state (its version), nodes left out, configuration and rules as
            # the last decision: with the same claims, the decision is the same too, and already reported.
            decision = decide(snapshot, planned, cfg, excluded=g.excluded, own_node=self.own_node, claimed=claimed)
            self.last_decision, self.decided_with = decision, claimed
            self._report(planned, decision)
        log.info(
            "plan: %d nodes can be emptied onto spot, %d left alone",
            len(decision.drains),
            len(decision.skipped),
            extra=fields(
                drainable=[nm.node for nm in decision.drains][:20],
                skipped=dict(decision.skipped[:20]),
                in_flight=sorted(queue)[:20],
                may_start=g.starts,
                plan_seconds=round(time.perf_counter() - t0, 3),
                plan_reused=reused,
                dry_run=cfg.rescheduler.dry_run,
            ),
        )
        return decision

    def _report(self, planned: PlannedCycle, decision: Decision) -> None:
        for cls, n in decision.nodes_by_class.items():
            self.metrics.nodes.labels(cls).set(n)
        self.metrics.drainable_nodes.set(len(decision.drains))
        summary = planned.plan.summary
        self.metrics.pods_pending.set(summary.pending_unschedulable)
        self._report_held(decision)
        self._report_waiting(summary.waiting_pods or {})
        self._report_not_worth(planned.plan)
        left = dict.fromkeys(KARPENTER_REASONS, 0)
        for why in planned.plan.reasons.values():
            if why.kind is Kind.KARPENTER_CONSOLIDATES:
                left["consolidates"] += 1
            elif why.kind is Kind.KARPENTER_UNREADABLE:
                left["nodepools-unreadable"] += 1
        for reason, n in left.items():
            self.metrics.nodes_left_to_karpenter.labels(reason).set(n)

    def _report_held(self, decision: Decision) -> None:
        """The nodes held back on purpose: a gauge per control, and an Event on a node when the control holding
        it changes (not every cycle: a closed window would otherwise repeat one per interval)."""
        counts = {control: 0 for control in HELD_BACK_CONTROLS}
        counts["min-target-age"] = decision.young_targets
        reported: dict[str, str] = {}
        for node, why in decision.held.items():
            control = CONTROLS[why.kind]
            counts[control] = counts.get(control, 0) + 1
            reported[node] = control
            if self._held_reported.get(node) != control:
                self.events.record(Ref.node(node), NORMAL, DRAIN_HELD_BACK, f"Held back by {control}: {why.message}")
        self._held_reported = reported
        for control, n in counts.items():
            self.metrics.nodes_held_back.labels(control).set(n)

    def _report_not_worth(self, plan: Plan) -> None:
        """``spotshift_rescheduler_drains_not_worth``: a node counts once when a plan starts keeping it as not worth
        draining, and again only after a plan that did not (it drained, became worth it, or stays for another
        reason), however many cycles in between find the same."""
        now = {node for node, why in plan.reasons.items() if why.kind is Kind.NOT_WORTH}
        self.metrics.drains_not_worth.inc(len(now - self._not_worth_reported))
        self._not_worth_reported = now

    def _report_waiting(self, holds: Mapping[str, Sequence[str]]) -> None:
        """``spotshift_rescheduler_waiting_pod_holds{pod}``: the nodes each waiting pod holds, for the
        :data:`WAITING_SERIES` pods holding the most (series of pods that hold nothing any more are removed)."""
        top = sorted(((len(nodes), pod) for pod, nodes in holds.items() if nodes), reverse=True)[:WAITING_SERIES]
        now = {pod: n for n, pod in top}
        for pod in self._waiting_reported - now.keys():
            self.metrics.waiting_pod_holds.remove(pod)
        for pod, n in now.items():
            self.metrics.waiting_pod_holds.labels(pod).set(n)
        self._waiting_reported = set(now)


SHUTDOWN_GRACE = 10.0
"""Seconds the way out rides out API errors in all, removing the marks of the drains in flight and then any other
mark of ours, one node after another (a bounded best effort within the pod's termination grace period)."""

WAITING_SERIES = 10
"""At most this many ``spotshift_rescheduler_waiting_pod_holds`` series (one per waiting pod holding nodes)."""


# --- the planner --------------------------------------------------------------------------------------------------


def default_planner(
    time_budget: float | None = DEFAULT_PLAN_TIME_BUDGET,
    switches: Callable[[], Switches] = lambda: CURRENT,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> PlanFunction:
    """:mod:`rescheduler.plan.planner` adapted to :data:`PlanFunction`, with the loop's time budget and a
    :class:`~rescheduler.plan.candidates.PlanCache` kept from one cycle to the next (the state's pods are the same
    objects between cycles until an event replaces one; the plans are those made without it). The budget is
    measured on ``clock`` (``time.monotonic``): the plan folder reads no clock of its own. ``switches`` gives the
    cluster's kube-scheduler rules at each call (the loop learns them when it starts). ``wall`` (``time.time``)
    is the time the operator's ``disruption`` controls are judged at: pod ages, windows, budgets."""
    from rescheduler.plan.candidates import PlanCache

    cache = PlanCache()

    def plan(snapshot: ClusterSnapshot, config: Config, exclude: Mapping[str, str]) -> PlannedCycle:
        return plan_nodes(
            snapshot,
            config,
            time_budget=time_budget,
            clock=clock,
            cache=cache,
            switches=switches(),
            exclude=exclude,
            now=wall(),
        )

    return plan


# --- command line --------------------------------------------------------------------------------------------------


def default_identity() -> str:
    """``<pod or host name>_<random>``: unique per process, readable in ``kubectl get lease -o yaml``."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


def run_command(args: argparse.Namespace, *, env: Mapping[str, str] | None = None) -> int:
    """Entry point of ``spot-rescheduler run`` (the CLI's subcommand calls this)."""
    env = os.environ if env is None else env
    setup_logging(args.log_format, args.log_level)
    try:
        config = config_from_args(args, env)
        options = _options(args, env)
    except ConfigError as e:
        print(f"spot-rescheduler: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"spot-rescheduler: {e}.", file=sys.stderr)
        return 2
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        print(f"spot-rescheduler: kubeconfig {args.kubeconfig}: does not exist.", file=sys.stderr)
        return 2
    try:
        transport = transport_from_kubeconfig(args.kubeconfig, args.context, user_agent=USER_AGENT)
    except KubeconfigError as e:
        print(f"spot-rescheduler: {e}", file=sys.stderr)
        return 2
    heap.map_large_buffers()  # the start-up lists' pages are given back to the system when read (shared.heap)
    stop = threading.Event()
    metrics = Metrics()
    # The automatic full collections are off from before the lists on: they would walk the growing state again
    # and again as it is listed (rescheduler.full_collections).
    collections = FullCollections(metrics.full_collection_duration.observe)
    rescheduler = Rescheduler(transport, config, options, metrics=metrics, stop=stop, collections=collections)

    def on_signal(signum: int, frame: Any) -> None:
        log.info("received %s: finishing up", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    collections.start()
    try:
        return _serve(rescheduler, config)
    finally:
        collections.stop()


def _options(args: argparse.Namespace, env: Mapping[str, str]) -> RunOptions:
    """The process-level settings from the flags (a ``ValueError`` naming the flag when one is wrong)."""
    options = RunOptions(
        once=args.once,
        node_name=args.node_name if args.node_name is not None else env.get("NODE_NAME", ""),
        lease_duration=positive_seconds("--leader-elect-lease-duration", args.leader_elect_lease_duration),
        renew_deadline=positive_seconds("--leader-elect-renew-deadline", args.leader_elect_renew_deadline),
        retry_period=positive_seconds("--leader-elect-retry-period", args.leader_elect_retry_period),
        plan_time_budget=args.plan_time_budget,
    )
    LeaseConfig("x", "x", "x", options.lease_duration, options.renew_deadline, options.retry_period)
    return options


def _serve(rescheduler: Rescheduler, config: Config) -> int:
    """Serve ``/metrics`` and the probes and run the loop; the exit code (2 when the address cannot be used)."""
    bind = config.rescheduler.metrics_bind
    try:
        server = MetricsServer(
            rescheduler.metrics, bind, healthy=rescheduler.parts.heartbeat.alive, ready=rescheduler.ready
        ).start()
    except OSError as e:
        print(f"spot-rescheduler: cannot listen on {bind}: {e.strerror or e}", file=sys.stderr)
        return 2
    log.info(
        "spot-rescheduler starting",
        extra=fields(
            identity=rescheduler.options.identity,
            dry_run=config.rescheduler.dry_run,
            leader_elect=config.rescheduler.leader_elect,
            listen=bind,
            metrics_port=server.port,
        ),
    )
    try:
        code = rescheduler.run()
    finally:
        server.stop()
    log.info("spot-rescheduler stopped", extra=fields(identity=rescheduler.options.identity, exit_code=code))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rescheduler.run``: the ``run`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="spot-rescheduler run", description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
