"""The replay: a 30-minute spot trace over a small cluster, defined once, played by the simulation (here) and on
the real control plane (tests/e2e/test_churn_replay_e2e.py), whose figures must agree within ``TOLERANCE``.

The cluster: four Deployments of 1-CPU pods (36 pods, three of the Deployments behind a ``maxUnavailable: 1``
budget) on one node type (``m.xlarge``: three pods a node) in three zones, built from nothing by the provisioner
at minute 0. Spot: every pool cut to zero at minute 4 (each spot node gets the reclaim notice and ends two minutes
later), back at minute 10. spotshift runs with capacity mode on (placeholders ask the provisioner for spot room
for each on-demand node), drains one node at a time and starts the next as soon as one ends.

Two autoscaling worlds (``WORLDS``): *pending*, where nodes appear only for pending pods (the provisioner above),
and *refill*, where each zone's spot pool is a node group of ``REFILL`` nodes from the start, refilled with empty
nodes after a reclaim once the trace allows the pool again (on-demand nodes still come only for pending pods).
``SHORT`` is a 15-minute variant of the trace (cut at minute 3, back at minute 6) for quicker runs.

Every duration here is in trace seconds: the simulation runs them as they are; the real control plane plays the
trace ``COMPRESSION`` times faster, with every duration (the provisioner's, the kubelets', the spot notice, the
rescheduler's configuration) divided by it, and converts what it measures back to trace time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from bench.churnlab.policies import DESCHEDULER_CHART, DESCHEDULER_SPOT, SPOTSHIFT, Policy, attach, config_of
from bench.churnlab.scenario import NODE_TYPES, UNLIMITED, ZONES, Change, NodeType, Trace, Workload
from bench.churnlab.sim import play
from bench.churnlab.world import World
from shared.config import SpotConfig, WorthConfig

LENGTH = 1_800.0
"""Trace seconds played and counted."""
COMPRESSION = 5.0
"""Trace seconds per second of wall-clock time on the real control plane."""
SPOT_FRACTION = 0.3
"""A spot node's price as a share of the on-demand price."""
TOLERANCE = 0.10
"""How far the real figures may be from the simulated ones (a share of the simulated figure)."""

NODE_TYPE: NodeType = next(nt for nt in NODE_TYPES if nt.name == "m.xlarge")
CUT = 240.0
BACK = 600.0

WORKLOADS = (
    Workload("web", "Deployment", 1_000, 2_048, 12, floor=12, pdb="max-unavailable-1"),
    Workload("api", "Deployment", 1_000, 2_048, 9, floor=9, pdb="max-unavailable-1"),
    Workload("cache", "Deployment", 1_000, 2_048, 6, floor=6, pdb="max-unavailable-1"),
    Workload("worker", "Deployment", 1_000, 2_048, 9, floor=9),
)
"""Constant replicas (``floor == peak``); 36 pods of 1 CPU and 2 GiB."""

TRACE = Trace(
    "replay",
    "every spot pool cut to zero at minute 4, back at minute 10",
    [Change(CUT, z, NODE_TYPE.name, 0) for z in ZONES] + [Change(BACK, z, NODE_TYPE.name, UNLIMITED) for z in ZONES],
)

PROVISION_DELAY = 90.0
"""From the scan that sees pods pending to the new node (cluster-autoscaler plus a cloud's boot)."""
READY_AFTER = 20.0
"""From a pod running to it being Ready (a readiness probe)."""
REMOVAL_DELAY = 600.0
"""How long a node stays empty before the provisioner removes it."""
NOTICE = 120.0
"""From a spot node's reclaim notice to its end."""
PROVISIONER_SCAN = 10.0
"""How often the provisioner looks for pending pods (as ``provisioner.Provisioner``)."""

RESCHEDULER = {
    "housekeeping_interval": 10.0,
    "node_drain_delay": 0.0,
    "pod_eviction_timeout": 120.0,
    "max_graceful_termination": 120.0,
    "replacement_timeout": 300.0,
    "node_backoff": 1_800.0,
}
"""The rescheduler's durations (its defaults but ``node_drain_delay``: the next drain starts when one ends)."""
CAPACITY = {"enabled": True, "timeout": 600.0}
WORTH_DURATIONS = ("removal_delay", "expected_stay", "horizon", "default_start_up", "volume_attach_time")
"""A drain's worth's durations, at their defaults. Its figures are vCPU-hours, a time too: compressed with the rest
(``eviction_cost`` included), the same drains are worth it at every compression."""
STABILITY_WINDOW = 300.0
"""``spot.stability_window`` of the replay: 5 minutes, shorter than the six minutes from the trace's reclaim notices
to spot's return, so the pools the reclaims hit are targets again once spot is back, as on a churn day whose cuts
outlast the window (the product's 30 minutes would keep the refill world's pods on on-demand to the trace's end:
its groups refill the very pools just reclaimed). The memory records the reclaims, ranks the pools and keeps the
unsettled ones from targets, placeholders and the extender's spot score meanwhile."""
WORTH, SPOT = WorthConfig(), SpotConfig()
SCHEDULER_NAME = "spotshift-scheduler"
"""The scheduler profile with the extender; the webhook sets it on every pod (``webhook.scheduler_name``)."""


@dataclass(frozen=True, slots=True)
class Replay:
    """One length of the replay: every spot pool cut to zero at ``cut``, back at ``back``, counted over ``length``."""

    name: str
    length: float
    cut: float
    back: float

    @property
    def trace(self) -> Trace:
        return Trace(
            self.name,
            f"every spot pool cut to zero at minute {self.cut / 60:g}, back at minute {self.back / 60:g}",
            [Change(self.cut, z, NODE_TYPE.name, 0) for z in ZONES]
            + [Change(self.back, z, NODE_TYPE.name, UNLIMITED) for z in ZONES],
        )


LONG = Replay("replay", LENGTH, CUT, BACK)
SHORT = Replay("short", 900.0, 180.0, 360.0)
"""The cut leaves the first nodes' pods time to be bound and Ready (kube-scheduler retries a pod that found no node
after a backoff of up to 10 wall-clock seconds, 50 trace seconds)."""
REPLAYS = {r.name: r for r in (LONG, SHORT)}

WORLDS = ("pending", "refill")
"""The worlds of the replay's own provisioner (tests/support/replay_cloud.py on the real control plane)."""
REFILL = 4
"""Spot nodes per zone in the refill world: the 36 pods at three a node, spread over the three zones."""

KARPENTER_WHEN_EMPTY = "karpenter-when-empty"
"""The world where the real Karpenter is the pending world's autoscaler: nodes for pending pods, a node empty for
its NodePool's ``consolidateAfter`` removed, no consolidation of used nodes and no drift replacement (its NodePool:
tests/support/karpenter.py's ``when_empty``). The simulation plays it as the pending world at Karpenter's pace."""
KARPENTER_PROVISION_DELAY = 2.0 * COMPRESSION
"""From the scan that sees pods pending to Karpenter's node, in trace seconds: its batching window's idle second
(``--batch-idle-duration``) and about a second for the NodeClaim's Node to register and be Ready. Karpenter's
timers run on the wall clock, so at ``COMPRESSION`` each of its seconds is that many trace seconds."""
KARPENTER_REMOVAL_DELAY = REMOVAL_DELAY + (5.0 + 15.0 + 2.0) * COMPRESSION
"""How long a node stays empty before Karpenter removes it, in trace seconds: the NodePool's ``consolidateAfter``
(the replay's ``REMOVAL_DELAY``), then on the wall clock half the disruption controller's 10 s poll on average,
the 15 s it waits before it carries out a consolidation command (emptiness included: ``commandValidationDelay``
in its ``pkg/controllers/disruption``), and about 2 s for the termination of an empty node."""


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """A world as the simulation plays it: fixed spot groups or not, and the provisioner's pace."""

    refill: bool
    provision_delay: float
    removal_delay: float


SIMULATED_WORLDS = {
    "pending": Autoscaling(False, PROVISION_DELAY, REMOVAL_DELAY),
    "refill": Autoscaling(True, PROVISION_DELAY, REMOVAL_DELAY),
    KARPENTER_WHEN_EMPTY: Autoscaling(False, KARPENTER_PROVISION_DELAY, KARPENTER_REMOVAL_DELAY),
}


def autoscaling_of(world: str) -> Autoscaling:
    if world not in SIMULATED_WORLDS:
        raise ValueError(f"unknown world {world!r}: one of {', '.join(SIMULATED_WORLDS)}")
    return SIMULATED_WORLDS[world]


def refill_of(world: str) -> dict[tuple[str, str], int] | None:
    """The spot groups' desired counts of a world (``None``: no fixed groups, nodes only for pending pods)."""
    if not autoscaling_of(world).refill:
        return None
    return {(z, NODE_TYPE.name): REFILL for z in ZONES}


def overrides(compression: float = 1.0) -> dict[str, Any]:
    """The spotshift configuration of the replay, durations divided by ``compression`` (1: trace seconds). The
    replay's nodes carry ``karpenter.sh/capacity-type`` as Karpenter's do, so spotshift runs with the ``karpenter``
    preset only, as ``deploy/overlays/karpenter`` configures it: the webhook's spot affinity is that one term."""
    return {
        "node_classes": {"presets": ["karpenter"]},
        "webhook": {"scheduler_name": SCHEDULER_NAME},
        "rescheduler": {k: v / compression for k, v in RESCHEDULER.items()},
        "capacity": {**CAPACITY, "timeout": CAPACITY["timeout"] / compression},
        "spot": {"stability_window": STABILITY_WINDOW / compression, "memory": SPOT.memory / compression},
        "worth": {
            **{k: getattr(WORTH, k) / compression for k in WORTH_DURATIONS},
            "eviction_cost": WORTH.eviction_cost / compression,
        },
    }


POLICY = Policy("spotshift (replay)", SPOTSHIFT, "spotshift", overrides())

TUNED_INTERVAL = DESCHEDULER_SPOT.interval
"""The spot-tuned descheduler's interval in trace seconds: the rescheduler's housekeeping interval, so both react
to spot returning at the same pace."""
CHART_INTERVAL = DESCHEDULER_CHART.interval
"""The descheduler Helm chart's default: a CronJob every two minutes."""


def no_capacity(compression: float = 1.0) -> dict[str, Any]:
    """The replay's spotshift configuration with capacity mode off."""
    config = overrides(compression)
    config["capacity"] = {**config["capacity"], "enabled": False}
    return config


SIMULATED = {
    "none": Policy("none", SPOTSHIFT, "", overrides()),
    "spotshift": POLICY,
    "spotshift no-capacity": Policy("spotshift no-capacity", SPOTSHIFT, "spotshift", no_capacity()),
    "descheduler (chart)": Policy(
        "descheduler (chart)", SPOTSHIFT, "descheduler", overrides(), descheduler=DESCHEDULER_CHART
    ),
    "descheduler (spot-tuned)": Policy(
        "descheduler (spot-tuned)", SPOTSHIFT, "descheduler", overrides(), descheduler=DESCHEDULER_SPOT
    ),
}
"""The replay's policies as the simulation models them (``bench.churnlab.policies``' actors, with the webhook and
the extender in place as on the real control plane). The chart's descheduler model leaves out the chart's
``RemoveDuplicates`` and ``LowNodeUtilization`` plugins (they move nothing toward spot)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one policy did in one world, in trace time (the simulation's and the real control plane's alike)."""

    policy: str
    world: str
    on_demand_node_minutes: float
    spot_node_minutes: float
    cost: float
    """USD: each node's on-demand price per hour, a spot node's at the spot fraction."""
    evictions: int
    moved_then_reclaimed: int
    """Pods reclaimed after an eviction moved them."""
    reclaimed: int
    pending_pod_minutes: float
    pdb_violations: int
    lost_pods: int
    on_demand_pods_at_end: int
    """Workload pods on on-demand nodes at the end."""
    on_demand_series: list[int] = field(default_factory=list)
    """On-demand nodes at each trace minute."""
    on_demand_gone_at: float | None = None
    """The trace time the last on-demand node was gone at, where the run went on past the trace's end for it (the
    real Karpenter, whose timers are not compressed); ``None``: counted over the trace only."""
    on_demand_node_minutes_until_gone: float | None = None
    """The on-demand node-minutes over ``[0, on_demand_gone_at)``."""


@dataclass(frozen=True, slots=True)
class ReplayFigures:
    on_demand_node_minutes: float
    """The integral of the on-demand node count over ``[0, LENGTH)``, in trace minutes."""
    evictions: int
    """Pods evicted by spotshift."""
    pdb_violations: int
    lost_pods: int
    on_demand_series: list[tuple[float, int]]


def simulate_replay(spot_fraction: float = SPOT_FRACTION) -> tuple[ReplayFigures, World]:
    """The replay in the simulation: its figures and the world at ``LENGTH``. The rescheduler's own logging is
    off while it runs (a caller's logging is as it was afterwards: the e2e tier runs this in its own process)."""
    world = _played(POLICY, "pending", TRACE, LENGTH, spot_fraction)
    t = world.tally
    figures = ReplayFigures(
        on_demand_node_minutes=t.on_demand_node_seconds / 60.0,
        evictions=t.evictions,
        pdb_violations=t.pdb_violations,
        lost_pods=t.lost_pods,
        on_demand_series=t.on_demand_series,
    )
    return figures, world


def _played(policy: Policy, world: str, trace: Trace, length: float, spot_fraction: float) -> World:
    """``policy`` played in a simulated ``world`` over ``trace`` for ``length`` trace seconds, the rescheduler's
    logging off meanwhile."""
    autoscaling = autoscaling_of(world)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        w = World(
            seed=1,
            workloads=list(WORKLOADS),
            trace=trace,
            setup=policy.setup,
            config=config_of(policy.overrides),
            spot_fraction=spot_fraction,
            ready_after=READY_AFTER,
            provision_delay=autoscaling.provision_delay,
            removal_delay=autoscaling.removal_delay,
            notice=NOTICE,
            node_types=(NODE_TYPE,),
            refill=refill_of(world),
        )
        play(w, attach(policy, w), length)
    finally:
        logging.disable(previous)
    return w


def simulate_outcome(policy: str, world: str, run: Replay = LONG, spot_fraction: float = SPOT_FRACTION) -> Outcome:
    """``policy`` (a key of ``SIMULATED``) in ``world`` over ``run``, in the simulation (deterministic)."""
    w = _played(SIMULATED[policy], world, run.trace, run.length, spot_fraction)
    t = w.tally
    on_demand = {name for name, book in w.nodes.items() if not book.spot}
    return Outcome(
        policy=policy,
        world=world,
        on_demand_node_minutes=t.on_demand_node_seconds / 60.0,
        spot_node_minutes=t.spot_node_seconds / 60.0,
        cost=t.cost_seconds / 3_600.0,
        evictions=t.evictions,
        moved_then_reclaimed=t.moved_then_reclaimed,
        reclaimed=t.reclaimed_pods,
        pending_pod_minutes=t.pending_pod_seconds / 60.0,
        pdb_violations=t.pdb_violations,
        lost_pods=t.lost_pods,
        on_demand_pods_at_end=sum(1 for b in w.pods.values() if b.node in on_demand),
        on_demand_series=by_minute(t.on_demand_steps, run.length),
    )


def by_minute(series: list[tuple[float, int]], length: float = LENGTH) -> list[int]:
    """A series of ``(t, value)`` (a value holds from its ``t`` to the next one's) as its value at each trace
    minute."""
    out = []
    for minute in range(int(length // 60)):
        out.append(next((n for t, n in reversed(series) if t <= minute * 60.0), 0))
    return out


if __name__ == "__main__":
    f, _ = simulate_replay()
    print(f"on-demand node-minutes {f.on_demand_node_minutes:.1f}, evictions {f.evictions}")
    print("on-demand nodes by minute:", by_minute(f.on_demand_series))
