"""Prometheus metrics of the webhook/extender server, multiprocess-aware.

Under gunicorn every worker is its own process, so ``spot-extender`` sets ``PROMETHEUS_MULTIPROC_DIR``
before this module is imported (prometheus-client picks its value class at import time) and ``/metrics``
aggregates the workers' files. Without the variable (tests, a single process) the default registry serves.
"""

from __future__ import annotations

import os

from cryptography import x509
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

__all__ = [
    "CONTENT_TYPE",
    "REQUESTS",
    "LATENCY",
    "PATCHES",
    "SKIPS",
    "FILTERED",
    "INTERNAL_ERRORS",
    "CACHED_NODES",
    "CERT_EXPIRY",
    "observe_certificate",
    "render",
    "mark_process_dead",
]

REQUESTS = Counter(
    "spotshift_http_requests", "HTTP requests served, by endpoint and status code.", ["endpoint", "code"]
)
LATENCY = Histogram(
    "spotshift_http_request_duration_seconds",
    "Time spent handling a request inside the worker (body read, decode, work, encode), by endpoint.",
    ["endpoint"],
    # Admission and NodeNames calls take well under a millisecond; full-Node bodies take hundreds.
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
PATCHES = Counter(
    "spotshift_webhook_patches",
    "Pods mutated by the webhook, by what was added (preferred-affinity, required-affinity, tolerations, "
    "scheduler-name). A pod mutated in two ways counts once for each.",
    ["kind"],
)
SKIPS = Counter("spotshift_webhook_skips", "Pods the webhook left unchanged, by reason.", ["reason"])
FILTERED = Counter("spotshift_extender_filtered_nodes", "Nodes removed by /filter, by reason.", ["reason"])
INTERNAL_ERRORS = Counter(
    "spotshift_internal_errors",
    "Requests answered by the internal-error fallback, by endpoint: a bug in spotshift, not the caller's (the pod "
    "admitted unchanged, no opinion given to the scheduler); the server's log holds the traceback.",
    ["endpoint"],
)
CACHED_NODES = Gauge(
    "spotshift_node_cache_nodes",
    "Nodes in the watch-backed node cache (per worker; aggregated as the maximum).",
    multiprocess_mode="max",
)

CERT_EXPIRY = Gauge(
    "spotshift_tls_certificate_expiry_timestamp_seconds",
    "When the serving certificate in use expires (Unix time; the soonest of the live workers), so an alert can "
    "fire before kube-apiserver and kube-scheduler start refusing the server.",
    multiprocess_mode="livemin",
)


def observe_certificate(certfile: str) -> None:
    """Record the expiry of the certificate just loaded for serving (called on every load and reload).

    A file that cannot be parsed records nothing: the TLS context that loaded it already said what is wrong.
    """
    try:
        with open(certfile, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError):
        return
    CERT_EXPIRY.set(cert.not_valid_after_utc.timestamp())


def _multiproc_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def render() -> bytes:
    """The exposition text: every worker's metrics under gunicorn, this process's otherwise."""
    if _multiproc_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def mark_process_dead(pid: int) -> None:
    """gunicorn ``child_exit`` hook: drop a dead worker's live gauges."""
    if _multiproc_dir():
        multiprocess.mark_process_dead(pid)
