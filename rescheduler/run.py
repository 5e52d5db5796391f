"""``spot-rescheduler run``: the long-running loop that plans every housekeeping interval and drains safely.

What runs, in one process:

* four informer threads keep :class:`~rescheduler.cluster.state.ClusterState` current (list once, then watch);
* a leader-election thread holds the ``coordination.k8s.io`` Lease (two replicas: one acts, one waits);
* an HTTP thread serves ``/metrics``, ``/healthz`` and ``/readyz``;
* at start-up, the API server's ``/version`` picks the kube-scheduler rules the planner follows
  (:mod:`rescheduler.cluster.version`; the strictest rules, with a warning, if it cannot be read);
* the main thread runs the cycle: pause if any pod is unschedulable, plan (pure, :mod:`rescheduler.plan.planner`),
  decide (pure, :mod:`rescheduler.plan.cycle`), then drain at most ``max_nodes_per_cycle`` nodes through
  :class:`~rescheduler.cluster.drain.Drainer`, ``node_drain_delay`` apart.

SIGTERM or SIGINT sets one stop event. Every wait in the loop, the drainer and the evictor watches it, so the
node in progress is rolled back (its mark removed) within a second or two, then the lease is released so the
other replica takes over at once. Before every cycle, and once more on the way out while the lease is still
ours, the leader puts right every node that carries spotshift's mark and is not being drained: a crashed or
killed predecessor's drain, or a rollback that the API server did not let through
(:class:`~rescheduler.cluster.marks.MarkReconciler`).

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
from dataclasses import dataclass
from typing import Any

from rescheduler.cluster.capacity import CapacityRequester
from rescheduler.cluster.drain import Drainer, Outcome
from rescheduler.cluster.events import DRAIN_HELD_BACK, DRAIN_SKIPPED, NORMAL, EventRecorder, Ref
from rescheduler.cluster.evictor import Evictor
from rescheduler.cluster.kube import ApiError, Kube, KubeconfigError, Retry, Transport, transport_from_kubeconfig
from rescheduler.cluster.leader import LeaderElector, LeaseConfig
from rescheduler.cluster.marks import MarkReconciler, NodeMarker
from rescheduler.cluster.state import PDBS, WATCHES, ClusterState, Informer
from rescheduler.cluster.version import discover_switches
from rescheduler.flags import DEFAULT_PLAN_TIME_BUDGET, add_run_arguments, config_from_args, positive_seconds
from rescheduler.logs import fields, setup_logging
from rescheduler.metrics import HELD_BACK_CONTROLS, Heartbeat, Metrics, MetricsServer
from rescheduler.plan.cycle import Decision, NodeMoves, decide, excluded_nodes, plan_nodes
from rescheduler.plan.reasons import CONTROLS
from rescheduler.plan.records import Plan
from rescheduler.plan.safety import unschedulable_pods
from shared.config import Config, ConfigError
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

PlanFunction = Callable[[ClusterSnapshot, Config, Mapping[str, str]], Sequence[NodeMoves]]
"""The planner as the loop sees it: a snapshot, the config and the nodes to leave alone this cycle (with the
reason) in, the nodes to empty (in order) out."""


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
    """The run loop. ``transport`` is the API boundary; ``plan`` defaults to :mod:`rescheduler.plan.planner`."""

    def __init__(
        self,
        transport: Transport,
        config: Config,
        options: RunOptions = RunOptions(),
        *,
        plan: PlanFunction | None = None,
        metrics: Metrics | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.kube = Kube(transport)
        self.config = config
        self.options = options
        self.dry_run = config.rescheduler.dry_run
        self.identity = options.identity or default_identity()
        self.switches: Switches = STRICTEST
        """The cluster's kube-scheduler rules, read from ``/version`` when :meth:`run` starts."""
        self.last_plan: Plan | None = None
        """The last plan of :func:`default_planner` (why each node stays: capacity mode reads it)."""
        self.plan_fn = plan or default_planner(options.plan_time_budget, lambda: self.switches, sink=self._keep_plan)
        self.metrics = metrics or Metrics()
        self.stop = stop or threading.Event()
        self.state = ClusterState()
        self.heartbeat = Heartbeat(max_age=self._liveness_window())
        self.events = EventRecorder(self.kube, host=options.node_name or socket.gethostname(), enabled=not self.dry_run)
        self.elector: LeaderElector | None = None
        if config.rescheduler.leader_elect:
            lease = LeaseConfig(
                namespace=config.namespace,
                name=config.rescheduler.lease_name,
                identity=self.identity,
                lease_duration=options.lease_duration,
                renew_deadline=options.renew_deadline,
                retry_period=options.retry_period,
            )
            self.elector = LeaderElector(self.kube, lease, on_change=self._leadership_changed)
        self.marker = NodeMarker(
            self.kube,
            taint_key=config.rescheduler.drain_taint_key,
            mode=config.rescheduler.drain_taint,
            identity=self.identity,
            retry=Retry(config.rescheduler.pod_eviction_timeout),
        )
        r = config.rescheduler
        self.evictor = Evictor(
            self.kube,
            timeout=r.pod_eviction_timeout,
            max_grace=r.max_graceful_termination,
            dry_run=self.dry_run,
            metrics=self.metrics,
            events=self.events,
            should_abort=self.should_abort,
            wait=self._wait,
        )
        self.drainer = Drainer(
            self.kube,
            self.state,
            config,
            self.evictor,
            self.events,
            self.metrics,
            self.marker,
            dry_run=self.dry_run,
            should_abort=self.should_abort,
            stop=self.stop,
            heartbeat=self.heartbeat.beat,
        )
        # A clean-up rides out API errors for a shorter while than a drain's own rollback, then waits for a
        # later cycle (the reconciler's backoff) instead of holding up the loop.
        cleanup = self.marker.with_retry(Retry(min(10.0, r.pod_eviction_timeout)))
        self.reconciler = MarkReconciler(self.state, cleanup, config, self.events, dry_run=self.dry_run)
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
        """Placeholder pods asking for spot room (``capacity.enabled``; :mod:`rescheduler.cluster.capacity`)."""
        self._orphans_checked = False
        self._planned_snapshot: ClusterSnapshot | None = None
        self.informers: list[Informer] = []
        self._next_drain_at = 0.0
        self.last_decision: Decision | None = None
        self._held_reported: dict[str, str] = {}
        """Node → the control last reported (an Event) as holding it back; a change is reported again."""
        self.results: list[Any] = []
        """Every :class:`~rescheduler.cluster.drain.DrainResult` of this process (tests and ``--once`` read them)."""

    def _keep_plan(self, plan: Plan) -> None:
        self.last_plan = plan

    def _back_off(self, node: str, reason: str) -> None:
        until, _ = self.drainer.back_off(node, reason)
        # Also in memory: the next cycle may come before the watch shows the node's backoff annotation.
        self.drainer.memory_backoff[node] = max(until, self.drainer.memory_backoff.get(node, 0.0))

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
            informer = Informer(
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
        interval = self.config.rescheduler.housekeeping_interval
        while not self.stop.is_set():
            self.heartbeat.beat()
            if self.elector is not None and not self.elector.is_leader():
                self.capacity.forget()  # the leader now owns whatever placeholders we made
                # --once waits long enough for a dead holder's lease to expire; the loop re-checks each interval.
                wait = self.options.lease_duration + 2 * self.options.retry_period if self.options.once else interval
                if not self.elector.wait_for_leadership(wait, self.stop):
                    if self.options.once and not self.stop.is_set() and self.elector.problem:
                        log.error(self.elector.problem)
                        return 1
                    if self.options.once and not self.stop.is_set():
                        log.warning(
                            "not the leader (lease held by %s): nothing done",
                            self.elector.holder or "?",
                            extra=fields(holder=self.elector.holder),
                        )
                        return 3
                    continue
            try:
                self.reconciler.reconcile()  # no drain is in progress between cycles
                self.cycle()
            except ApiError as e:
                log.warning("cycle failed: %s", e)
            if self.options.once:
                return 0
            self.stop.wait(interval)
        return 0

    def shutdown(self) -> None:
        """Put our marks right while the lease is still ours, release it (the successor takes over at once),
        and stop the informers."""
        if self.state.is_synced() and self.is_leader():
            try:
                self.capacity.shutdown()
            except Exception:
                log.exception("could not delete the placeholder pods on the way out")
            try:
                self.reconciler.reconcile(force=True)
            except Exception:
                log.exception("could not put the drain marks right on the way out")
        if self.elector is not None:
            self.elector.stop(release=True)
        self.metrics.leader.set(0)
        self.stop_informers()

    # ---- one cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> Decision | None:
        started = time.perf_counter()
        try:
            return self._cycle()
        finally:
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.metrics.last_cycle.set(time.time())

    def _cycle(self) -> Decision | None:
        cfg = self.config
        with self.state.cond:
            pending = unschedulable_pods((p for p in self.state.pods.values() if not p.node_name), cfg.namespace)
        self.metrics.pods_pending.set(len(pending))
        if not self._orphans_checked and not cfg.capacity.enabled:
            # Placeholders left from when capacity mode was on: they have no purpose now.
            self.capacity.collect_orphans()
            self._orphans_checked = True
        if pending and cfg.capacity.enabled:
            self.capacity.tend()
        if pending:
            log.info(
                "paused: %d pods are unschedulable",
                len(pending),
                extra=fields(pending=[p.key for p in pending[:10]], count=len(pending)),
            )
            return None
        now = time.monotonic()
        if now < self._next_drain_at:
            log.debug("node drain delay: %.0fs left", self._next_drain_at - now)
            return None
        decision = self._plan_and_decide()
        if decision is not None and cfg.capacity.enabled:
            self._ask_capacity(decision)
        done: set[str] = set()
        started = 0
        limit = cfg.rescheduler.max_nodes_per_cycle
        while decision is not None and started < limit and not self.should_abort():
            candidates = [nm for nm in decision.drains if nm.node not in done]
            if not candidates:
                break
            nm = candidates[0]
            done.add(nm.node)
            if cfg.capacity.enabled and not self.dry_run:
                self.capacity.release(nm.node)  # their room is for the evicted pods' replacements now
            result = self.drainer.drain(nm.node, nm.pods, dict(nm.targets))
            self.results.append(result)
            if result.outcome == Outcome.SKIPPED:
                self.events.record(Ref.node(nm.node), NORMAL, DRAIN_SKIPPED, f"{result.reason}: {result.message}")
                continue
            started += 1
            if result.started:
                self._next_drain_at = time.monotonic() + cfg.rescheduler.node_drain_delay
            if started < limit and len(candidates) > 1 and result.started and not self.dry_run:
                self.stop.wait(cfg.rescheduler.node_drain_delay)
                if self.should_abort():
                    break
                decision = self._plan_and_decide()  # the cluster moved: plan again before the next node
        return decision

    def _ask_capacity(self, decision: Decision) -> None:
        """Capacity mode: follow the placeholder requests out, and ask for the nodes that only lack spot room
        (:mod:`rescheduler.cluster.capacity`), from this cycle's plan."""
        plan = self.last_plan
        if plan is None or decision.paused or self._planned_snapshot is None or plan.window_closed:
            # No drain may start now (paused, or outside every drain window): ask for no new room, whose
            # placeholders would only hold spot capacity until a window opens; follow the requests out.
            self.capacity.tend()
            return
        self.capacity.step(self._planned_snapshot, plan.reasons, plan.drained)

    def _plan_and_decide(self) -> Decision | None:
        cfg = self.config
        t0 = time.perf_counter()
        snapshot = self._planned_snapshot = self.state.snapshot()
        self.last_plan = None
        now, broken = time.time(), self.state.broken_nodes()
        backoff = self.drainer.memory_backoff
        # Nodes this cycle will not drain are kept out of the plan, so they take no PDB allowance or spot room.
        excluded = excluded_nodes(snapshot, cfg, now=now, memory_backoff=backoff, broken_nodes=broken)
        planned = self.plan_fn(snapshot, cfg, excluded)
        self.metrics.plan_duration.observe(time.perf_counter() - t0)
        decision = decide(
            snapshot,
            planned,
            cfg,
            now=now,
            own_node=self.options.node_name,
            memory_backoff=backoff,
            broken_nodes=broken,
            excluded=excluded,
        )
        self.last_decision = decision
        for cls, n in decision.nodes_by_class.items():
            self.metrics.nodes.labels(cls).set(n)
        self.metrics.drainable_nodes.set(len(decision.drains))
        self._report_held(decision)
        log.info(
            "plan: %d nodes can be emptied onto spot, %d left alone",
            len(decision.drains),
            len(decision.skipped),
            extra=fields(
                drainable=[nm.node for nm in decision.drains][:20],
                skipped=dict(decision.skipped[:20]),
                plan_seconds=round(time.perf_counter() - t0, 3),
                dry_run=self.dry_run,
            ),
        )
        return decision

    def _report_held(self, decision: Decision) -> None:
        """The nodes the operator's controls held back: a gauge per control, and an Event on a node when the
        control holding it changes (not every cycle: a closed window would otherwise repeat one per interval)."""
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


# --- the planner --------------------------------------------------------------------------------------------------


def default_planner(
    time_budget: float | None = DEFAULT_PLAN_TIME_BUDGET,
    switches: Callable[[], Switches] = lambda: CURRENT,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sink: Callable[[Plan], None] | None = None,
) -> PlanFunction:
    """:mod:`rescheduler.plan.planner` adapted to :data:`PlanFunction`, with the loop's time budget and a
    :class:`~rescheduler.plan.candidates.PlanCache` kept from one cycle to the next (the state's pods are the same
    objects between cycles until an event replaces one; the plans are those made without it). The budget is
    measured on ``clock`` (``time.monotonic``): the plan folder reads no clock of its own. ``switches`` gives the
    cluster's kube-scheduler rules at each call (the loop learns them when it starts). ``wall`` (``time.time``)
    is the time the operator's ``disruption`` controls are judged at: pod ages, windows, budgets. ``sink``
    receives each whole plan."""
    from rescheduler.plan.candidates import PlanCache

    cache = PlanCache()

    def plan(snapshot: ClusterSnapshot, config: Config, exclude: Mapping[str, str]) -> Sequence[NodeMoves]:
        return plan_nodes(
            snapshot,
            config,
            time_budget=time_budget,
            clock=clock,
            cache=cache,
            switches=switches(),
            exclude=exclude,
            now=wall(),
            sink=sink,
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
    except ConfigError as e:
        print(f"spot-rescheduler: {e}", file=sys.stderr)
        return 2
    try:
        options = RunOptions(
            once=args.once,
            node_name=args.node_name if args.node_name is not None else env.get("NODE_NAME", ""),
            lease_duration=positive_seconds("--leader-elect-lease-duration", args.leader_elect_lease_duration),
            renew_deadline=positive_seconds("--leader-elect-renew-deadline", args.leader_elect_renew_deadline),
            retry_period=positive_seconds("--leader-elect-retry-period", args.leader_elect_retry_period),
            plan_time_budget=args.plan_time_budget,
        )
        LeaseConfig("x", "x", "x", options.lease_duration, options.renew_deadline, options.retry_period)
    except ValueError as e:
        print(f"spot-rescheduler: {e}.", file=sys.stderr)
        return 2
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        print(f"spot-rescheduler: kubeconfig {args.kubeconfig}: does not exist.", file=sys.stderr)
        return 2
    try:
        transport = transport_from_kubeconfig(args.kubeconfig, args.context)
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
    try:
        server = MetricsServer(
            rescheduler.metrics,
            config.rescheduler.metrics_bind,
            healthy=rescheduler.heartbeat.alive,
            ready=rescheduler.ready,
        ).start()
    except OSError as e:
        print(
            f"spot-rescheduler: cannot listen on {config.rescheduler.metrics_bind}: {e.strerror or e}", file=sys.stderr
        )
        return 2
    log.info(
        "spot-rescheduler starting",
        extra=fields(
            identity=rescheduler.identity,
            dry_run=config.rescheduler.dry_run,
            leader_elect=config.rescheduler.leader_elect,
            listen=config.rescheduler.metrics_bind,
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
