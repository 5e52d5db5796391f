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
  (:class:`~rescheduler.cluster.drain.Drainer`): several nodes drain at once within ``disruption.budgets``
  (one at a time without budgets), a finished drain keeping its place for ``node_drain_delay``.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rescheduler.cluster import USER_AGENT
from rescheduler.cluster.capacity_requests import CapacityRequester
from rescheduler.cluster.drain import Drain, Drainer, DrainOutcome, DrainResult
from rescheduler.cluster.events import DRAIN_HELD_BACK, DRAIN_SKIPPED, NORMAL, EventRecorder, Ref
from rescheduler.cluster.evictor import Evictor
from rescheduler.cluster.leader import LeaderElector, LeaseConfig
from rescheduler.cluster.marking import MarkReconciler, NodeMarker, clean_leftovers
from rescheduler.cluster.rules import discover_switches
from rescheduler.cluster.watch_cache import PDBS, WATCHES, ClusterState, StateInformer
from rescheduler.flags import DEFAULT_PLAN_TIME_BUDGET, add_run_arguments, config_from_args, positive_seconds
from rescheduler.logs import fields, setup_logging
from rescheduler.metrics import HELD_BACK_CONTROLS, Heartbeat, Metrics, MetricsServer
from rescheduler.plan.cycle import Decision, Gate, PlannedCycle, budget_claims, decide, gate, plan_nodes
from rescheduler.plan.gate import reads_clock
from rescheduler.plan.records import Plan
from rescheduler.plan.stay_reasons import CONTROLS, Kind
from shared.config import Config, ConfigError
from shared.kube.api import ApiError, Kube, KubeconfigError, Retry, Transport, transport_from_kubeconfig
from shared.model import Pod
from shared.pdbs import PdbIndex
from shared.snapshot import ClusterSnapshot
from shared.switches import CURRENT, STRICTEST, Switches

__all__ = [
    "RunOptions",
    "Rescheduler",
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
    ) -> None:
        self.kube = Kube(transport)
        self.config = config
        self.options = options
        self.dry_run = config.rescheduler.dry_run
        self.identity = options.identity or default_identity()
        self.clock, self.wall = clock, wall
        self.switches: Switches = STRICTEST
        """The cluster's kube-scheduler rules, read from ``/version`` when :meth:`run` starts."""
        self.plan_fn = plan or default_planner(options.plan_time_budget, lambda: self.switches, wall=wall)
        self.metrics = metrics or Metrics()
        self.stop = stop or threading.Event()
        self.state = ClusterState()
        self.heartbeat = Heartbeat(max_age=self._liveness_window())
        self.events = EventRecorder(self.kube, host=options.node_name or socket.gethostname(), enabled=not self.dry_run)
        self.elector = self._elector() if config.rescheduler.leader_elect else None
        self.marker = NodeMarker(
            self.kube,
            taint_key=config.rescheduler.drain_taint_key,
            mode=config.rescheduler.drain_taint,
            identity=self.identity,
        )
        """One attempt per write: a drain tries again at a later pass, the reconciler at a later cycle."""
        self.drainer = self._drainer()
        self.reconciler = MarkReconciler(self.state, self.marker, config, self.events, dry_run=self.dry_run)
        self.capacity = CapacityRequester(
            self.kube,
            self.state,
            config,
            self.events,
            self.metrics,
            dry_run=self.dry_run,
            back_off=self._back_off,
            owner=self._placeholder_owner,
        )
        """Placeholder pods asking for spot room (``capacity.enabled``;
        :mod:`rescheduler.cluster.capacity_requests`)."""
        self._bookkeeping()

    def _bookkeeping(self) -> None:
        """What the loop remembers from one pass to the next."""
        self._orphans_checked = False
        self.informers: list[StateInformer] = []
        self.drains: dict[str, Drain] = {}
        """The drains in flight, by node: each pass of the loop advances them (:meth:`advance_drains`)."""
        self.finished: list[float] = []
        """When (``clock``) the drains of this process finished: within ``node_drain_delay`` each keeps its place."""
        self.next_cycle = 0.0
        """When (``clock``) the next cycle is due."""
        self.last_planned: PlannedCycle | None = None
        self.planned_from: tuple[Any, ...] | None = None
        """What :attr:`last_planned` was made from (:meth:`_plan_inputs`): equal inputs give an equal plan."""
        self.plan_reused = False
        """Whether the last cycle reused the plan before it."""
        self.last_decision: Decision | None = None
        self._held_reported: dict[str, str] = {}
        """Node → the control last reported (an Event) as holding it back; a change is reported again."""
        self._waiting_reported: set[str] = set()
        self.results: list[DrainResult] = []
        """Every :class:`~rescheduler.cluster.drain.DrainResult` of this process (tests and ``--once`` read them)."""

    @property
    def last_plan(self) -> Plan | None:
        """The last cycle's whole plan (why each node stays: capacity mode reads it)."""
        return self.last_planned.plan if self.last_planned is not None else None

    def _elector(self) -> LeaderElector:
        o, r = self.options, self.config.rescheduler
        lease = LeaseConfig(
            namespace=self.config.namespace,
            name=r.lease_name,
            identity=self.identity,
            lease_duration=o.lease_duration,
            renew_deadline=o.renew_deadline,
            retry_period=o.retry_period,
        )
        return LeaderElector(self.kube, lease, on_change=self._leadership_changed)

    def _drainer(self) -> Drainer:
        r = self.config.rescheduler
        evictor = Evictor(
            self.kube,
            timeout=r.pod_eviction_timeout,
            max_grace=r.max_graceful_termination,
            dry_run=self.dry_run,
            metrics=self.metrics,
            events=self.events,
            should_abort=self.should_abort,
            wait=self._wait,
            clock=self.clock,
        )
        return Drainer(
            self.kube,
            self.state,
            self.config,
            evictor,
            self.events,
            self.metrics,
            self.marker,
            dry_run=self.dry_run,
            should_abort=self.should_abort,
            stop=self.stop,
            heartbeat=self.heartbeat.beat,
            clock=self.clock,
            wall=self.wall,
            free_room=self._give_room,
        )

    def _give_room(self, node: str, placeholders: Sequence[Pod]) -> None:
        self.capacity.give_room(node, placeholders)

    def _back_off(self, node: str, reason: str) -> None:
        self.drainer.back_off(node, reason)

    def _placeholder_owner(self) -> dict[str, Any] | None:
        """The leader-election Lease as the placeholders' controller (``None`` without leader election)."""
        if self.elector is None:
            return None
        lease = self.kube.get(self.elector.path)
        meta = lease["metadata"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
        }

    def _wait(self, seconds: float) -> None:
        """Sleep that ends early on shutdown (the evictor's backoff between 429s)."""
        self.stop.wait(seconds)

    def _liveness_window(self) -> float:
        """How long ``/healthz`` tolerates no beat: a few intervals, plus one eviction's 429 retries."""
        r = self.config.rescheduler
        return max(60.0, 3 * r.housekeeping_interval) + r.pod_eviction_timeout + 60.0

    # ---- leadership -----------------------------------------------------------------------------------------

    def _leadership_changed(self, leader: bool) -> None:
        self.metrics.leader.set(1 if leader else 0)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def ready(self) -> bool:
        """Readiness: the cluster state is listed and the leader-election Lease can be used (or is not used)."""
        return self.state.is_synced() and (self.elector is None or not self.elector.problem)

    def should_abort(self) -> bool:
        """Stop acting now: shutdown was asked for, or the lease is no longer ours."""
        return self.stop.is_set() or not self.is_leader()

    # ---- lifecycle ------------------------------------------------------------------------------------------

    def start_informers(self) -> None:
        """Discover the PodDisruptionBudget version, then list and watch every kind the planner reads (those
        ``spot-rescheduler plan`` lists: :mod:`rescheduler.cluster.listing`)."""
        self.state.pdb_api_version = f"policy/{self.kube.pdb_version()}"
        for kind, path, query in ((PDBS, self.kube.pdb_path(), ()), *WATCHES):
            informer = StateInformer(
                self.kube,
                self.state,
                kind,
                path,
                threading.Event(),
                query=query,
                watch_timeout=self.options.watch_timeout,
            )
            informer.start()
            self.informers.append(informer)

    def stop_informers(self) -> None:
        for informer in self.informers:
            informer.close()
        for informer in self.informers:
            informer.join(timeout=5)

    def run(self) -> int:
        """Run until stopped (or one cycle with ``once``). Returns the process exit code."""
        self.metrics.leader.set(0 if self.elector is not None else 1)
        self.switches = discover_switches(self.kube, log)
        try:
            self.start_informers()
        except ApiError as e:
            log.error("cannot reach the API server: %s", e)
            return 1
        try:
            log.info(
                "waiting for the cluster state",
                extra=fields(identity=self.identity, dry_run=self.dry_run, node=self.options.node_name),
            )
            if not self.state.wait_synced(self.options.sync_timeout, self.stop):
                if not self.stop.is_set():
                    log.error("cluster state not listed within %.0fs", self.options.sync_timeout)
                    return 1
                return 0
            with self.state.cond:
                counts = {k: len(v) for k, v in (("nodes", self.state.nodes), ("pods", self.state.pods))}
            log.info("cluster state listed", extra=fields(**counts))
            if self.elector is not None:
                self.elector.start()
            return self._loop()
        finally:
            self.shutdown()

    def _loop(self) -> int:
        """Plan every ``housekeeping_interval`` (and as soon as a drain ends), advance the drains in flight at every
        pass; with ``once``, one cycle and its drains to their end."""
        cycled = False
        while not self.stop.is_set():
            self.heartbeat.beat()
            if not self.is_leader():
                code = self._follow()
                if code is not None:
                    return code
                continue
            if self.clock() >= self.next_cycle and not (self.options.once and cycled):
                self.step_cycle()
                cycled = True
            self.advance_drains()
            if self.options.once and cycled and not self.drains:
                return 0
            self._pause()
        return 0

    def _follow(self) -> int | None:
        """Not the leader: stop the drains of a lost lease, wait for it; an exit code for ``once``, else ``None``."""
        assert self.elector is not None
        self.interrupt_drains()
        self.capacity.forget()  # the leader now owns whatever placeholders we made
        # --once waits long enough for a dead holder's lease to expire; the loop re-checks each interval.
        interval = self.config.rescheduler.housekeeping_interval
        wait = self.options.lease_duration + 2 * self.options.retry_period if self.options.once else interval
        if self.elector.wait_for_leadership(wait, self.stop) or self.stop.is_set() or not self.options.once:
            return None
        if self.elector.problem:
            log.error(self.elector.problem)
            return 1
        holder = self.elector.holder
        log.warning("not the leader (lease held by %s): nothing done", holder or "?", extra=fields(holder=holder))
        return 3

    def step_cycle(self) -> None:
        """Put the marks nobody is draining right, then one cycle; the next is due one interval later."""
        try:
            self.reconciler.reconcile(busy=set(self.drains))
            self.cycle()
        except ApiError as e:
            log.warning("cycle failed: %s", e)
        self.next_cycle = self.clock() + self.config.rescheduler.housekeeping_interval

    def _pause(self) -> None:
        """Until the next cycle, or a change the drains in flight may be waiting for (half a second at most)."""
        left = self.next_cycle - self.clock()
        if self.drains:
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
            for node, drain in list(self.drains.items()):
                self._ended(node, self.drainer.end_rollback(drain, give_up - time.monotonic()))
            self.metrics.drains_in_flight.set(0)
            try:
                self.capacity.shutdown()
            except Exception:
                log.exception("could not delete the placeholder pods on the way out")
            try:
                cleanup = self.marker.with_retry(Retry(max(0.0, give_up - time.monotonic())))
                clean_leftovers(self.state, cleanup, self.config, self.events, dry_run=self.dry_run)
            except Exception:
                log.exception("could not put the drain marks right on the way out")
        if self.elector is not None:
            self.elector.stop(release=True)
        self.metrics.leader.set(0)
        self.stop_informers()

    # ---- drains in flight ---------------------------------------------------------------------------------------

    def advance_drains(self) -> None:
        """One step of every drain in flight; the ended ones are recorded and free their place after
        ``node_drain_delay``, and the next cycle comes at once (the cluster moved)."""
        for node, drain in list(self.drains.items()):
            if self.should_abort():
                return
            try:
                result = self.drainer.advance(drain)
            except ApiError as e:
                log.warning("drain of node %s: %s (tried again)", node, e, extra=fields(node=node))
                continue
            if result is not None:
                self._ended(node, result)
        self.metrics.drains_in_flight.set(len(self.drains))

    def _ended(self, node: str, result: DrainResult) -> None:
        del self.drains[node]
        self.results.append(result)
        now = self.clock()
        self.finished.append(now)
        self.next_cycle = min(self.next_cycle, now)

    def interrupt_drains(self) -> None:
        """Stop every drain in flight (lost lease): no further eviction, each mark's removal tried once now. A drain
        whose mark is not removed yet stays in flight, rolling back, tried again at each call (or pass, once the
        lease is ours again)."""
        for node, drain in list(self.drains.items()):
            result = self.drainer.interrupt(drain)
            if result is not None:
                self._ended(node, result)
        self.metrics.drains_in_flight.set(len(self.drains))

    def cooling(self) -> int:
        """Drains ended less than ``node_drain_delay`` ago: each keeps its place in the budget that long."""
        since = self.clock() - self.config.rescheduler.node_drain_delay
        self.finished = [t for t in self.finished if t > since]
        return len(self.finished)

    # ---- one cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> Decision | None:
        started = time.perf_counter()
        try:
            return self._cycle()
        finally:
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.metrics.last_cycle.set(self.wall())

    def _cycle(self) -> Decision | None:
        cfg = self.config
        if not self._orphans_checked and not cfg.capacity.enabled:
            # Placeholders left from when capacity mode was on: they have no purpose now.
            self.capacity.collect_orphans()
            self._orphans_checked = True
        with self.state.cond:
            version, snapshot = self.state.version, self.state.snapshot()
        count_in_flight(snapshot, self.drains.values(), self.state)
        now, cooling = self.wall(), self.cooling()
        g = gate(
            snapshot,
            cfg,
            now=now,
            memory_backoff=self.drainer.memory_backoff,
            broken_nodes=self.state.broken_nodes(),
            in_flight=len(self.drains),
            cooling=cooling,
        )
        decision = self._plan_and_decide(snapshot, g, version)
        if not (self.dry_run and self.plan_reused):
            # A dry run starts nothing, so a reused plan's drains were checked and logged by an earlier cycle
            # already: checking them again would only repeat their log lines and their budgets' lists.
            self._start_drains(decision, g)
        if cfg.capacity.enabled:
            # No new placeholder while a drain is in flight: it could take the room the drain frees.
            self._ask_capacity(snapshot, hold=bool(self.drains))
        return decision

    def _start_drains(self, decision: Decision, g: Gate) -> None:
        """Start the decision's drains, in order, while the gate allows."""
        started = 0
        for nm in decision.drains:
            if started >= g.starts or self.should_abort():
                break
            if nm.node in self.drains:
                continue
            drain = self.drainer.start(nm.node, nm.pods, dict(nm.targets))
            if isinstance(drain, Drain):
                self.drains[nm.node] = drain
                started += 1
                continue
            self.results.append(drain)
            if drain.outcome == DrainOutcome.SKIPPED:
                self.events.record(Ref.node(nm.node), NORMAL, DRAIN_SKIPPED, f"{drain.reason}: {drain.message}")
            elif drain.outcome == DrainOutcome.DRY_RUN:
                # A dry run's drain takes its place among this cycle's starts, so a dry run shows the drains a real
                # run would start now, no more.
                started += 1
        self.metrics.drains_in_flight.set(len(self.drains))

    def _ask_capacity(self, snapshot: ClusterSnapshot, *, hold: bool) -> None:
        """Capacity mode: follow the placeholder requests out, and ask for the nodes that only lack spot room
        (:mod:`rescheduler.cluster.capacity_requests`), from this cycle's plan; with ``hold``, ask for none."""
        plan = self.last_plan
        if plan is None or plan.window_closed:
            # No drain may start now (outside every drain window): ask for no new room, whose placeholders would
            # only hold spot capacity until a window opens; follow the requests out.
            self.capacity.tend()
            return
        # A node the budget holds back until its turn still wants its room: the placeholders keep it meanwhile.
        waiting_turn = tuple(n for n, why in plan.reasons.items() if why.kind is Kind.DISRUPTION_BUDGET)
        self.capacity.step(snapshot, plan.reasons, plan.drained + waiting_turn, hold=hold)

    def _plan_inputs(self, version: int, g: Gate) -> tuple[Any, ...] | None:
        """Everything a plan is made from, or None when it also depends on the time (:func:`reads_clock`) or on the
        drains in flight (their pods are counted where they go): the state's version (every watch event that
        changes it counts), the nodes left out, the configuration and the scheduler rules."""
        if self.drains or reads_clock(self.config):
            return None
        return (version, tuple(sorted(g.excluded.items())), self.config, self.switches)

    def _plan_and_decide(self, snapshot: ClusterSnapshot, g: Gate, version: int) -> Decision:
        cfg = self.config
        t0 = time.perf_counter()
        inputs = self._plan_inputs(version, g)
        planned = self.last_planned
        # Nothing in the cluster changed since the last plan (no watch event), nor anything else it is made from:
        # the same plan again, without the planner's CPU (a quiet big cluster's cycle is then cheap).
        reused = planned is not None and inputs is not None and inputs == self.planned_from
        self.plan_reused = reused
        if not reused:
            self.last_planned = self.planned_from = None
            planned = self.plan_fn(snapshot, cfg, g.excluded)
            self.last_planned, self.planned_from = planned, inputs
            self.metrics.plan_duration.observe(time.perf_counter() - t0)
        assert planned is not None
        claimed = budget_claims((p for d in self.drains.values() for p in d.to_evict), PdbIndex(snapshot.pdbs))
        decision = decide(snapshot, planned, cfg, excluded=g.excluded, own_node=self.options.node_name, claimed=claimed)
        self.last_decision = decision
        self._report(planned, decision)
        log.info(
            "plan: %d nodes can be emptied onto spot, %d left alone",
            len(decision.drains),
            len(decision.skipped),
            extra=fields(
                drainable=[nm.node for nm in decision.drains][:20],
                skipped=dict(decision.skipped[:20]),
                in_flight=sorted(self.drains)[:20],
                may_start=g.starts,
                plan_seconds=round(time.perf_counter() - t0, 3),
                plan_reused=reused,
                dry_run=self.dry_run,
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


def count_in_flight(snapshot: ClusterSnapshot, drains: Iterable[Drain], state: ClusterState) -> None:
    """Count the pods of the drains in flight where they are going, so a new plan does not give their spot room to
    another node: a pod not yet evicted is moved to its target in ``snapshot``; an evicted one whose replacement is
    not yet bound to a node is put there as a stand-in (a pending replacement the planner also places first is
    counted twice: room held back, never given away twice)."""
    for drain in drains:
        waiting_for = _unbound_replacements(drain, state)
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


def _unbound_replacements(drain: Drain, state: ClusterState) -> dict[str, int]:
    """Owner UID → how many of the drain's evicted pods have no replacement bound to a node yet."""
    out: dict[str, int] = {}
    with state.cond:
        for owner, need in drain.need.items():
            evicted = sum(1 for p in drain.evicted if p.controller is not None and p.controller.uid == owner)
            bound = sum(
                1
                for q in state.by_owner.get(owner, {}).values()
                if q.uid not in drain.before.get(owner, ()) and q.node_name and not q.terminating
            )
            out[owner] = max(0, min(need, evicted) - bound)
    return out


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
    stop = threading.Event()
    rescheduler = Rescheduler(transport, config, options, stop=stop)

    def on_signal(signum: int, frame: Any) -> None:
        log.info("received %s: finishing up", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return _serve(rescheduler, config)


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
            rescheduler.metrics, bind, healthy=rescheduler.heartbeat.alive, ready=rescheduler.ready
        ).start()
    except OSError as e:
        print(f"spot-rescheduler: cannot listen on {bind}: {e.strerror or e}", file=sys.stderr)
        return 2
    log.info(
        "spot-rescheduler starting",
        extra=fields(
            identity=rescheduler.identity,
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
    log.info("spot-rescheduler stopped", extra=fields(identity=rescheduler.identity, exit_code=code))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rescheduler.run``: the ``run`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="spot-rescheduler run", description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
