"""One simulated day of one policy, its figures, and the lower bound that knows the day in advance."""

from __future__ import annotations

import itertools
import logging
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from bench.churnlab.books import Tally
from bench.churnlab.policies import POLICIES, Actor, Policy, attach, config_of
from bench.churnlab.provisioner import ScaleDown, ScaleUpTimeout
from bench.churnlab.scenario import (
    ALLOCATABLE_SHARE,
    DAY,
    NODE_TYPES,
    PROFILES,
    SCALE_EVERY,
    WARM_UP,
    ZONES,
    NodeType,
    Trace,
    Workload,
    base_limits,
    replicas,
    trace,
    workloads,
)
from bench.churnlab.world import World

STEP = 10.0
"""Simulated seconds per tick while anything moves (the rescheduler's housekeeping interval)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    profile: str
    trace: str
    seed: int
    scale: float = 1.0
    """The workloads' replicas and Jobs' parallelism times this (at least one each): a smaller cluster, for tests."""

    def workloads(self) -> list[Workload]:
        drawn = workloads(PROFILES[self.profile], random.Random(f"{self.seed}/{self.profile}"))
        if self.scale == 1.0:
            return drawn
        return [scaled(w, self.scale) for w in drawn]

    def trace_of(self) -> Trace:
        return trace(self.trace, random.Random(f"{self.seed}/{self.trace}"), base_limits(self.workloads()))

    def spot_prices(self, spot_fraction: float) -> dict[tuple[str, str], float]:
        """Each spot pool's price as a share of on-demand: ``spot_fraction`` times a factor drawn per pool in
        ``PRICE_SPREAD`` (at most ``MAX_PRICE_SHARE``), the same for every policy of the scenario."""
        rng = random.Random(f"{self.seed}/{self.profile}/{self.trace}/prices")
        low, high = PRICE_SPREAD
        return {pool: min(MAX_PRICE_SHARE, spot_fraction * rng.uniform(low, high)) for pool in sorted(_pools())}

    def reclaim_rates(self) -> dict[tuple[str, str], float]:
        """Each spot pool's background reclaims per node-hour: ``VOLATILE_SHARE`` of the pools volatile (a rate
        drawn in ``VOLATILE_RATE``), the others steady (``STEADY_RATE``), the same for every policy."""
        rng = random.Random(f"{self.seed}/{self.profile}/{self.trace}/reclaims")
        out = {}
        for pool in sorted(_pools()):
            low, high = VOLATILE_RATE if rng.random() < VOLATILE_SHARE else STEADY_RATE
            out[pool] = rng.uniform(low, high)
        return out


PRICE_SPREAD = (0.7, 1.3)
"""A spot pool's price is ``--spot-fraction`` times a factor drawn in this range (about +-30%)."""
MAX_PRICE_SHARE = 0.95
"""No spot pool costs more than this share of on-demand."""
VOLATILE_SHARE = 1 / 3
"""The share of spot pools that are volatile."""
STEADY_RATE = (0.0, 0.002)
"""Background reclaims per node-hour of a steady pool (at most about one node in 500 an hour)."""
VOLATILE_RATE = (0.01, 0.03)
"""Background reclaims per node-hour of a volatile pool (one node in 33 to 100 an hour)."""


def _pools() -> list[tuple[str, str]]:
    return [(z, nt.name) for z in ZONES for nt in NODE_TYPES]


@dataclass(frozen=True, slots=True)
class Figures:
    policy: str
    on_demand_node_hours: float
    spot_node_hours: float
    cost: float
    spot_share: float
    """Share of pod-hours on spot nodes."""
    evictions: int
    evictions_per_pod_day: float
    moved_then_reclaimed: int
    """Pods reclaimed with their spot node after a move (:attr:`bench.churnlab.books.Tally.moved_then_reclaimed`)."""
    disruptions_per_pod_day: float
    """(Evictions, the policy's and the autoscaler's, + pods reclaimed after a move) per pod-day."""
    back_on_spot_p50: float
    back_on_spot_p95: float
    """Minutes from spot capacity returning until the spot-eligible pods on on-demand nodes are back to their number
    before the cut (the end of the day when never)."""
    never_back: int
    pending_pod_minutes: float
    pdb_violations: int
    lost_pods: int
    reclaimed_pods: int
    job_minutes_lost: float
    capacity_breaches: int
    on_demand_series: list[tuple[float, int]]
    autoscaler_evictions: int = 0
    """Pods the autoscaler evicted to remove under-used nodes (not in ``evictions``, which are the policy's)."""
    autoscaler_evictions_per_pod_day: float = 0.0


def scaled(w: Workload, scale: float) -> Workload:
    """``w`` with its replicas and parallelism times ``scale``, at least one each."""

    def times(n: int) -> int:
        return max(1, round(n * scale))

    return replace(w, peak=times(w.peak), floor=min(times(w.peak), times(w.floor)), parallelism=times(w.parallelism))


def world_of(scenario: Scenario, policy: Policy, spot_fraction: float, *, check: bool = False) -> World:
    return World(
        check=check,
        seed=scenario.seed,
        workloads=scenario.workloads(),
        trace=scenario.trace_of(),
        setup=policy.setup,
        config=config_of(policy.overrides),
        spot_fraction=spot_fraction,
        start=-WARM_UP,
        scale_down=ScaleDown(),
        scale_up_timeout=ScaleUpTimeout(),
        least_waste=True,
        spot_prices=scenario.spot_prices(spot_fraction),
        reclaim_rates=scenario.reclaim_rates(),
    )


def run(scenario: Scenario, policy_name: str, spot_fraction: float = 0.3, *, until: float = DAY) -> Figures:
    """The day of ``policy_name`` on ``scenario`` (``until``: its first ``until`` seconds only)."""
    world = simulate(scenario, policy_name, spot_fraction, until=until)
    return figures(policy_name, world.tally, scenario.trace_of(), until)


def simulate(
    scenario: Scenario,
    policy_name: str,
    spot_fraction: float = 0.3,
    *,
    until: float = DAY,
    check: bool = False,
    after_tick: Callable[[World], None] | None = None,
) -> World:
    """The world of ``policy_name`` on ``scenario`` at ``until`` (``check``: capacity checked every tick;
    ``after_tick`` is called after every tick of the cluster, before the policy acts, for the property tests)."""
    policy = next(p for p in POLICIES if p.name == policy_name)
    world = world_of(scenario, policy, spot_fraction, check=check)
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the drains' own log lines; the figures say what happened
    try:
        return play(world, attach(policy, world), until, after_tick)
    finally:
        logging.disable(previous)


def play(world: World, actor: Actor, until: float, after_tick: Callable[[World], None] | None = None) -> World:
    """Run ``world`` with ``actor`` (the policy) from its current time to ``until``: a tick every ``STEP`` while
    anything moves, else straight to the next event."""
    last = world.now
    while world.now < until:
        world.tick(world.now - last if world.now > last else STEP)
        if after_tick is not None:
            after_tick(world)
        actor.step()
        world.sync(world.view)
        if world.active() or actor.busy():
            nxt = world.now + STEP
        else:
            nxt = max(world.now + STEP, min(world.next_event(), actor.wake()))
        nxt = min(until, STEP * math.ceil(nxt / STEP))
        world.account(nxt - max(world.now, 0.0) if nxt > 0 else 0.0)
        last, world.now = world.now, nxt
    return world


def figures(name: str, t: Tally, tr: Trace, until: float = DAY) -> Figures:
    """The figures of a day counted over ``[0, until)`` (per pod-day: per pod present over that time, in days)."""
    back, never = back_on_spot(t, tr, until)
    pods_per_day = t.pod_count_seconds / DAY or 1.0
    return Figures(
        policy=name,
        on_demand_node_hours=t.on_demand_node_seconds / 3_600.0,
        spot_node_hours=t.spot_node_seconds / 3_600.0,
        cost=t.cost_seconds / 3_600.0,
        spot_share=t.pod_seconds_on_spot / t.pod_seconds if t.pod_seconds else 0.0,
        evictions=t.evictions,
        evictions_per_pod_day=t.evictions / pods_per_day,
        moved_then_reclaimed=t.moved_then_reclaimed,
        disruptions_per_pod_day=(t.evictions + t.autoscaler_evictions + t.moved_then_reclaimed) / pods_per_day,
        back_on_spot_p50=_quantile(back, 0.5),
        back_on_spot_p95=_quantile(back, 0.95),
        never_back=never,
        pending_pod_minutes=t.pending_pod_seconds / 60.0,
        pdb_violations=t.pdb_violations,
        lost_pods=t.lost_pods,
        reclaimed_pods=t.reclaimed_pods,
        job_minutes_lost=t.job_work_lost_seconds / 60.0,
        capacity_breaches=t.capacity_breaches,
        on_demand_series=t.on_demand_series,
        autoscaler_evictions=t.autoscaler_evictions,
        autoscaler_evictions_per_pod_day=t.autoscaler_evictions / pods_per_day,
    )


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def back_on_spot(t: Tally, tr: Trace, until: float = DAY) -> tuple[list[float], int]:
    """Minutes per capacity return (see :attr:`Figures.back_on_spot_p50`), and how many never came back."""
    series = t.eligible_on_demand
    out: list[float] = []
    never = 0
    cuts = tr.cuts()
    for r in tr.returns():
        if r >= until or r < 0:
            continue
        before = [c for c in cuts if c < r]
        if not before:
            continue
        cut = before[-1]
        baseline = next((n for at, n in reversed(series) if at < cut), None)
        if baseline is None:
            continue
        back = next((at for at, n in series if at >= r and n <= baseline), None)
        if back is None:
            never += 1
            back = until
        out.append((back - r) / 60.0)
    return out, never


# --- the lower bound -----------------------------------------------------------------------------------------


def lower_bound(scenario: Scenario, spot_fraction: float = 0.3, *, until: float = DAY) -> Figures:
    """The cost of ``[0, until)`` to a policy that knows it in advance, relaxed to a linear program and solved in
    closed form on every piece of the day over which demand and spot limits are constant (:func:`pieces`): nodes
    and pods are divisible (no packing), zones and placement rules are ignored, pods move instantly and for free,
    nodes join at once and are never reclaimed but by the trace's limits. Job pods run on schedule, from each
    CronJob run's start for ``runs_for`` seconds; Deployments at the replica count of the scale step.

    Per piece and per resource (CPU, memory) alone, the pods pinned to on-demand and the flexible demand beyond the
    spot pools' room are paid at the on-demand price of that resource, the rest of the flexible demand at the spot
    pools' prices, cheapest pool first (:func:`piece_cost`); every node type costs the same per CPU and per GiB, so
    the price of a resource does not depend on the node type that offers it. Each resource alone is a relaxation of
    the day, so the larger of the two is still a lower bound on every policy's cost, in the same USD.

    On-demand node-hours are in the policies' units (nodes, of any type): the on-demand capacity of the relaxation,
    the larger over the two resources, divided by the capacity of the largest node type (the fewest nodes that hold
    it, divisible). That is at most the on-demand node-hours of any policy that serves the same demand.

    Every pod is paid for all the time the schedule says it exists; in a policy's day a pod waiting for a node costs
    nothing meanwhile, so a policy can come below the bound only by leaving demand unserved (its pending
    pod-minutes)."""
    world = world_of(scenario, POLICIES[0], spot_fraction)
    tr = scenario.trace_of()
    prices = scenario.spot_prices(spot_fraction)
    largest = NODE_TYPES[-1]
    cost = od_hours = 0.0
    series = []
    cuts = pieces(world, tr, until)
    for a, b in itertools.pairwise(cuts):
        pinned, flexible = _demand(world, a)
        rate, od_capacity = piece_cost(pinned, flexible, tr.limits_at(a), prices)
        od_nodes = max(od_capacity[0] / _cap(largest)[0], od_capacity[1] / _cap(largest)[1])
        cost += rate * (b - a) / 3_600.0
        od_hours += od_nodes * (b - a) / 3_600.0
        series.append((a, math.ceil(od_nodes - 1e-9)))
    return Figures(
        "lower bound",
        od_hours,
        math.nan,
        cost,
        math.nan,
        0,
        0.0,
        0,
        0.0,
        0.0,
        0.0,
        0,
        0.0,
        0,
        0,
        0,
        0.0,
        0,
        series,
    )


def pieces(world: World, tr: Trace, until: float = DAY) -> list[float]:
    """The breakpoints of ``[0, until)``, both ends included: every Deployment scale step, every CronJob run's start
    and end, every change of the trace. Between two of them demand and spot limits are constant."""
    cuts = {0.0, until}
    cuts.update(k * SCALE_EVERY for k in range(math.ceil(until / SCALE_EVERY)))
    cuts.update(c.at for c in tr.changes)
    for w in world.workloads.values():
        if w.kind != "CronJob":
            continue
        start = world.next_job[w.name]
        while start < until:
            cuts.update((start, start + w.runs_for))
            start += w.every
    return sorted(t for t in cuts if 0.0 <= t <= until)


def _cap(nt: NodeType) -> tuple[float, float]:
    return nt.cpu_m * ALLOCATABLE_SHARE, nt.memory_mi * ALLOCATABLE_SHARE


def piece_cost(
    pinned: tuple[float, float],
    flexible: tuple[float, float],
    limits: dict[tuple[str, str], int],
    prices: dict[tuple[str, str], float],
) -> tuple[float, tuple[float, float]]:
    """The relaxation's cost per hour (USD) for constant demand (``pinned``, ``flexible``: CPU millicores, MiB) and
    spot limits (``limits``: nodes per pool, priced at ``prices``, a share of on-demand each), and the on-demand
    capacity it pays for (CPU, MiB); see :func:`lower_bound`."""
    types = {nt.name: nt for nt in NODE_TYPES}
    by_resource = []
    od_capacity = []
    for r in (0, 1):
        od_price = NODE_TYPES[0].price / _cap(NODE_TYPES[0])[r]
        left, spot = flexible[r], 0.0
        for pool in sorted(limits, key=lambda p: (prices[p], p)):
            take = min(left, limits[pool] * _cap(types[pool[1]])[r])
            spot += take * od_price * min(1.0, prices[pool])
            left -= take
        on_demand = pinned[r] + left
        by_resource.append(on_demand * od_price + spot)
        od_capacity.append(on_demand)
    return max(by_resource), (od_capacity[0], od_capacity[1])


def _demand(world: World, t: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The CPU millicores and MiB the schedule asks for at ``t``: pinned to on-demand, and the rest."""
    pinned = [0.0, 0.0]
    flexible = [0.0, 0.0]
    for w in world.workloads.values():
        if w.kind == "CronJob":
            first = world.next_job[w.name]
            n = 0
            if t >= first:
                since = (t - first) % w.every
                runs = math.floor((t - first) / w.every)
                n = w.parallelism * sum(1 for k in range(runs + 1) if since + k * w.every < w.runs_for)
        else:
            n = replicas(w, SCALE_EVERY * math.floor(t / SCALE_EVERY))
        into = pinned if w.pinned else flexible
        into[0] += n * w.cpu_m
        into[1] += n * w.memory_mi
    return (pinned[0], pinned[1]), (flexible[0], flexible[1])


def as_dict(f: Figures) -> dict[str, object]:
    return asdict(f)
