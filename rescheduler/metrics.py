"""Prometheus metrics of the rescheduler and the small HTTP server that serves them with ``/healthz``.

Each :class:`Metrics` has its own registry (not the process-global one), so tests and two replicas in one
test process do not share counters. Label values are fixed small sets (node class, drain failure reason,
eviction result), never node names, and pod names only in ``spotshift_rescheduler_waiting_pod_holds`` (at most ten
series: the waiting pods holding the most nodes), so the series count stays bounded on a 5,000-node cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics", "MetricsServer", "parse_bind", "HELD_BACK_CONTROLS", "KARPENTER_REASONS"]

HELD_BACK_CONTROLS = (
    "drain-window",
    "budget",
    "min-pod-age",
    "min-replicas",
    "scope",
    "job",
    "waiting-pod",
    "min-target-age",
)
"""The label values of ``spotshift_rescheduler_nodes_held_back`` (the planner's control names)."""

KARPENTER_REASONS = ("consolidates", "nodepools-unreadable")
"""The label values of ``spotshift_rescheduler_nodes_left_to_karpenter``."""

_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)


class Metrics:
    """Every series the rescheduler exports (names ``spotshift_rescheduler_*``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # /metrics lists the series in the order they are created here.
        self._cluster_metrics(self.registry)
        self._drain_metrics(self.registry)
        self._loop_metrics(self.registry)
        self._control_metrics(self.registry)
        self._capacity_metrics(self.registry)

    def _cluster_metrics(self, r: CollectorRegistry) -> None:
        """Creates the node counts: by class, and the on-demand nodes the last plan could empty."""
        self.nodes = Gauge("spotshift_rescheduler_nodes", "Nodes in the cluster, by class.", ["class"], registry=r)
        self.drainable_nodes = Gauge(
            "spotshift_rescheduler_drainable_nodes", "On-demand nodes the last plan could empty onto spot.", registry=r
        )
        for cls in ("spot", "on-demand", "other"):
            self.nodes.labels(cls).set(0)

    def _drain_metrics(self, r: CollectorRegistry) -> None:
        """Creates the counters of drains (started, succeeded, failed, skipped, not worth it) and of evictions."""
        self.drains_started = Counter(
            "spotshift_rescheduler_drains_started", "Node drains started (the node was tainted).", registry=r
        )
        self.drains_succeeded = Counter(
            "spotshift_rescheduler_drains_succeeded",
            "Node drains that ended with every pod replaced on spot.",
            registry=r,
        )
        self.drains_failed = Counter(
            "spotshift_rescheduler_drains_failed",
            "Node drains that failed or were rolled back, by reason.",
            ["reason"],
            registry=r,
        )
        self.drains_skipped = Counter(
            "spotshift_rescheduler_drains_skipped",
            "Planned drains not started because a safety check refused them, by reason.",
            ["reason"],
            registry=r,
        )
        self.evictions = Counter(
            "spotshift_rescheduler_evictions", "Eviction attempts of pods, by final result.", ["result"], registry=r
        )
        self.drains_not_worth = Counter(
            "spotshift_rescheduler_drains_not_worth",
            "Drains not started because their saving is less than their evictions cost (worth), once per node "
            "each time a plan starts keeping it for that.",
            registry=r,
        )

    def _loop_metrics(self, r: CollectorRegistry) -> None:
        """Creates the run loop's series: plan and cycle durations, pending pods, leadership, the last cycle."""
        self.plan_duration = Histogram(
            "spotshift_rescheduler_plan_duration_seconds",
            "Time to build the snapshot and plan.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.cycle_duration = Histogram(
            "spotshift_rescheduler_cycle_duration_seconds",
            "Time of one housekeeping cycle, drains included.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.pods_pending = Gauge(
            "spotshift_rescheduler_pods_pending",
            "Pods pending as unschedulable (planned first: each holds only the drains that would take room it could "
            "use).",
            registry=r,
        )
        self.drains_in_flight = Gauge(
            "spotshift_rescheduler_drains_in_flight", "Node drains started and not yet ended.", registry=r
        )
        self.waiting_pod_holds = Gauge(
            "spotshift_rescheduler_waiting_pod_holds",
            "On-demand nodes a pod waiting for a node holds back (it could use their room), for the ten pods "
            "holding the most.",
            ["pod"],
            registry=r,
        )
        self.leader = Gauge(
            "spotshift_rescheduler_leader", "1 while this replica holds the leader-election Lease.", registry=r
        )
        self.full_collection_duration = Histogram(
            "spotshift_rescheduler_full_collection_duration_seconds",
            "Time of each full garbage collection of the process's memory, made at the end of a cycle every ten "
            "minutes rather than whenever the interpreter's allocation counts call for one (docs/sizing.md).",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.last_cycle = Gauge(
            "spotshift_rescheduler_last_cycle_timestamp_seconds", "Unix time the last cycle finished.", registry=r
        )

    def _control_metrics(self, r: CollectorRegistry) -> None:
        """Creates the nodes held back by the disruption controls, one series per :data:`HELD_BACK_CONTROLS`."""
        self.nodes_held_back = Gauge(
            "spotshift_rescheduler_nodes_held_back",
            "Nodes an operator's disruption control held back in the last plan, by control: on-demand nodes that "
            "wait (drain-window, budget, min-pod-age, min-replicas, scope, job) and spot nodes not yet used as "
            "targets (min-target-age).",
            ["control"],
            registry=r,
        )
        for control in HELD_BACK_CONTROLS:
            self.nodes_held_back.labels(control).set(0)
        self.nodes_left_to_karpenter = Gauge(
            "spotshift_rescheduler_nodes_left_to_karpenter",
            "On-demand nodes of Karpenter NodePools the last plan left to Karpenter "
            "(karpenter.defer_to_consolidation), by reason: consolidates (the NodePool consolidates toward spot by "
            "itself) or nodepools-unreadable (RBAC refuses the NodePools, so Karpenter's nodes are not drained).",
            ["reason"],
            registry=r,
        )
        for reason in KARPENTER_REASONS:
            self.nodes_left_to_karpenter.labels(reason).set(0)

    def _capacity_metrics(self, r: CollectorRegistry) -> None:
        """Creates capacity mode's series (requests for spot room by outcome, the placeholder pods) and those of the
        spot pools (reclaims recorded, pools unsettled)."""
        self.capacity_requests = Counter(
            "spotshift_rescheduler_capacity_requests",
            "Requests for spot capacity (one on-demand node's placeholder pods) by what happened: requested, "
            "provisioned, drained, timed-out, preempted, on-demand, deleted, orphaned, create-failed.",
            ["outcome"],
            registry=r,
        )
        self.placeholder_pods = Gauge(
            "spotshift_rescheduler_placeholder_pods",
            "Placeholder pods holding or asking for spot room, created by this replica and not yet deleted.",
            registry=r,
        )
        self.spot_reclaims = Counter(
            "spotshift_rescheduler_spot_reclaims",
            "Reclaims of spot nodes recorded in the memory of spot pools (docs/spot-pools.md).",
            registry=r,
        )
        self.unsettled_spot_pools = Gauge(
            "spotshift_rescheduler_unsettled_spot_pools",
            "Spot pools reclaimed within spot.stability_window at the last cycle: their nodes are not targets.",
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


def parse_bind(bind: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → ``(host, port)``; an empty host listens on every address."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class MetricsServer:
    """``/metrics`` (Prometheus text), ``/healthz`` (the loop is alive) and ``/readyz`` (state synced)."""

    def __init__(
        self,
        metrics: Metrics,
        bind: str,
        *,
        healthy: Callable[[], bool] = lambda: True,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        host, port = parse_bind(bind)
        outer = self
        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    ok = outer.healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
                elif path == "/readyz":
                    ok = outer.ready()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"not ready\n")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # scrapes every 15 s are not news
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


class Heartbeat:
    """Liveness: the run loop beats at least once per ``max_age`` seconds, else ``/healthz`` fails."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self._last <= self.max_age
