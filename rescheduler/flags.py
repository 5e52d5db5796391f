"""The rescheduler's command-line flags, and the configuration they make with the file and the environment.

Flags are the fourth configuration source (flag > ``SPOTSHIFT_*`` environment > YAML file > default): each
flag that sets a setting is a row of :data:`RUN_FLAGS` (flag → field path), and its value goes to
:func:`shared.config.load_config` as an override named by the flag, so a bad value is rejected by the same
rules as the file's and the error names the flag: ``config field rescheduler.node_drain_delay (from
--node-drain-delay): must be a duration ...``. Names follow pusher/k8s-spot-rescheduler where the concept
is the same.

``plan`` takes the flags that change what is planned (node classes and which pods may move), so a preview
made with the same flags as ``run`` plans alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from shared.config import Config, flag_overrides, load_config, parse_duration

__all__ = [
    "RUN_FLAGS",
    "PLAN_FLAGS",
    "DEFAULT_PLAN_TIME_BUDGET",
    "add_run_arguments",
    "add_plan_config_arguments",
    "config_from_args",
    "positive_seconds",
]

DEFAULT_PLAN_TIME_BUDGET = 0.5
"""The run loop's planner time budget, in seconds (``--plan-time-budget``)."""

PLAN_FLAGS: Mapping[str, str] = {
    "--delete-non-replicated-pods": "movability.delete_non_replicated_pods",
}
"""Flags of ``plan`` and ``run`` that set a setting (flag → field path); the node-label flags are separate,
since ``--spot-node-label`` adds to the configured selectors rather than replacing them."""

RUN_FLAGS: Mapping[str, str] = {
    **PLAN_FLAGS,
    "--housekeeping-interval": "rescheduler.housekeeping_interval",
    "--node-drain-delay": "rescheduler.node_drain_delay",
    "--pod-eviction-timeout": "rescheduler.pod_eviction_timeout",
    "--max-graceful-termination": "rescheduler.max_graceful_termination",
    "--replacement-timeout": "rescheduler.replacement_timeout",
    "--node-backoff": "rescheduler.node_backoff",
    "--max-nodes-per-cycle": "rescheduler.max_nodes_per_cycle",
    "--drain-taint": "rescheduler.drain_taint",
    "--listen-address": "rescheduler.metrics_bind",
    "--namespace": "namespace",
    "--lease-name": "rescheduler.lease_name",
    "--leader-elect": "rescheduler.leader_elect",
    "--dry-run": "rescheduler.dry_run",
}
"""Flags of ``run`` that set a setting (flag → field path)."""

_SPOT_SELECTORS = "node_classes.spot_selectors"
_ON_DEMAND_SELECTORS = "node_classes.on_demand_selectors"


def positive_seconds(flag: str, text: str) -> float:
    """A process option's duration (not a setting): seconds, or ValueError naming ``flag`` in one sentence."""
    try:
        value = parse_duration(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{flag}: must be a positive duration like 15s or 1m, got {text!r}")
    return value


def _add_class_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--on-demand-node-label", metavar="SELECTOR", help="label selector of on-demand nodes (default: not spot)"
    )
    g.add_argument("--spot-node-label", metavar="SELECTOR", help="label selector of spot nodes, added to the presets")
    g.add_argument(
        "--delete-non-replicated-pods",
        nargs="?",
        const=True,
        metavar="BOOL",
        help="also move pods without a controller (they are not recreated)",
    )


def add_plan_config_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``plan`` that change what is planned, as ``run`` has them."""
    _add_class_arguments(p.add_argument_group("planning flags (as for run)"))


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The ``run`` subcommand's flags (pusher/k8s-spot-rescheduler's names where the concept is the same)."""
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster service account, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--config", help="spotshift YAML configuration (default: $SPOTSHIFT_CONFIG, else built-in defaults)")
    p.add_argument("--dry-run", action="store_true", default=None, help="plan and log every action, perform none")
    p.add_argument("--once", action="store_true", help="run one housekeeping cycle, then exit")
    g = p.add_argument_group("pusher/k8s-spot-rescheduler flags")
    g.add_argument("--housekeeping-interval", metavar="DURATION", help="how often to plan (10s)")
    g.add_argument(
        "--node-drain-delay",
        metavar="DURATION",
        help="wait after a drain ends before its place is taken by another (10m)",
    )
    g.add_argument(
        "--pod-eviction-timeout", metavar="DURATION", help="how long to retry an eviction refused with 429 (2m)"
    )
    g.add_argument(
        "--max-graceful-termination",
        metavar="DURATION",
        help="cap on an evicted pod's grace period, and how long to wait for it to be gone (2m)",
    )
    _add_class_arguments(g)
    g.add_argument("--listen-address", metavar="HOST:PORT", help="address of /metrics and /healthz (0.0.0.0:9235)")
    s = p.add_argument_group("spotshift flags")
    s.add_argument("--replacement-timeout", metavar="DURATION", help="how long to wait for replacements on spot (5m)")
    s.add_argument("--node-backoff", metavar="DURATION", help="rest after a failed drain, doubling each time (30m)")
    s.add_argument("--max-nodes-per-cycle", metavar="N", help="at most this many drains started per cycle (1)")
    s.add_argument("--drain-taint", metavar="MODE", help="how a draining node is marked: prefer-no-schedule or cordon")
    s.add_argument("--namespace", help="namespace of the leader-election Lease (spotshift)")
    s.add_argument("--lease-name", help="name of the leader-election Lease (spotshift-rescheduler)")
    s.add_argument("--leader-elect", metavar="BOOL", help="hold a Lease before acting (true)")
    s.add_argument("--leader-elect-lease-duration", default="15s", metavar="DURATION")
    s.add_argument("--leader-elect-renew-deadline", default="10s", metavar="DURATION")
    s.add_argument("--leader-elect-retry-period", default="2s", metavar="DURATION")
    s.add_argument(
        "--plan-time-budget",
        type=float,
        default=DEFAULT_PLAN_TIME_BUDGET,
        metavar="SECONDS",
        help="seconds after which the planner tries no further packing strategy (0.5); the first strategy and "
        "pusher's order always run, so a plan is never worse than pusher's",
    )
    s.add_argument("--node-name", default=None, help="the node this process runs on (default: $NODE_NAME)")
    s.add_argument("--log-format", choices=("json", "text"), default="json")
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> Config:
    """The configuration file, then the environment, then the flags on top, validated by the same rules.

    Works for ``run`` and ``plan`` alike: a flag the subcommand does not define is simply absent.
    ``--spot-node-label`` adds one selector to the spot selectors of the file and environment;
    ``--on-demand-node-label`` replaces the on-demand selectors.
    """
    values: dict[str, Any] = vars(args)
    overrides, sources = flag_overrides(values, RUN_FLAGS)
    path = values.get("config")
    on_demand = values.get("on_demand_node_label")
    if on_demand:
        overrides[_ON_DEMAND_SELECTORS] = [on_demand]
        sources[_ON_DEMAND_SELECTORS] = "--on-demand-node-label"
    spot = values.get("spot_node_label")
    if spot:
        # Added to what the file and environment configure: read those first (validating everything else).
        configured = load_config(path, env, overrides, sources).node_classes.spot_selectors
        overrides[_SPOT_SELECTORS] = [s.text for s in configured] + [spot]
        sources[_SPOT_SELECTORS] = "--spot-node-label"
    return load_config(path, env, overrides, sources)
