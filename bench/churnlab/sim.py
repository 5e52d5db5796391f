"""One simulated day of one policy, its figures, and the lower bound that knows the day in advance."""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

from bench.churnlab.books import Tally
from bench.churnlab.policies import POLICIES, Actor, Policy, attach, config_of
from bench.churnlab.scenario import (
    ALLOCATABLE_SHARE,
    DAY,
    NODE_TYPES,
    PROFILES,
    SCALE_EVERY,
    WARM_UP,
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

    def workloads(self) -> list[Workload]:
        return workloads(PROFILES[self.profile], random.Random(f"{self.seed}/{self.profile}"))

    def trace_of(self) -> Trace:
        return trace(self.trace, random.Random(f"{self.seed}/{self.trace}"), base_limits(self.workloads()))


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
    """(Evictions + pods reclaimed after a move) per pod-day."""
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
    )


def run(scenario: Scenario, policy_name: str, spot_fraction: float = 0.3) -> Figures:
    """The day of ``policy_name`` on ``scenario``."""
    world = simulate(scenario, policy_name, spot_fraction)
    return figures(policy_name, world.tally, scenario.trace_of())


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


def figures(name: str, t: Tally, tr: Trace) -> Figures:
    back, never = back_on_spot(t, tr)
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
        disruptions_per_pod_day=(t.evictions + t.moved_then_reclaimed) / pods_per_day,
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
    )


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def back_on_spot(t: Tally, tr: Trace) -> tuple[list[float], int]:
    """Minutes per capacity return (see :attr:`Figures.back_on_spot_p50`), and how many never came back."""
    series = t.eligible_on_demand
    out: list[float] = []
    never = 0
    cuts = tr.cuts()
    for r in tr.returns():
        if r >= DAY or r < 0:
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
            back = DAY
        out.append((back - r) / 60.0)
    return out, never


# --- the lower bound -----------------------------------------------------------------------------------------


def lower_bound(scenario: Scenario, spot_fraction: float = 0.3, slice_seconds: float = SCALE_EVERY) -> Figures:
    """The cost of the day to a policy that knows it in advance, relaxed to a linear program per slice and solved in
    closed form: nodes and pods are divisible (no packing), zones and placement rules are ignored, pods move
    instantly and for free, nodes join at once. Per slice and per resource (CPU, memory), the pods pinned to
    on-demand are paid at the on-demand rate and the rest at the spot rate up to the spot pools' limits, at the
    on-demand rate beyond; the bound is the larger of the two resources' costs (every node type costs the same per
    CPU and per GiB). Job pods run on schedule; Deployments at their replica count of the slice."""
    world = world_of(scenario, POLICIES[0], spot_fraction)
    od_rate = NODE_TYPES[0].price / (NODE_TYPES[0].cpu_m * ALLOCATABLE_SHARE)
    mem_rate = NODE_TYPES[0].price / (NODE_TYPES[0].memory_mi * ALLOCATABLE_SHARE)
    cost = od_hours = 0.0
    t = 0.0
    series = []
    while t < DAY:
        pinned, flexible = _demand(world, t)
        limits = scenario.trace_of().limits_at(t)
        spot_cpu = spot_mem = 0.0
        for (_, type_name), n in limits.items():
            nt = next(x for x in NODE_TYPES if x.name == type_name)
            spot_cpu += n * nt.cpu_m * ALLOCATABLE_SHARE
            spot_mem += n * nt.memory_mi * ALLOCATABLE_SHARE
        by_resource = []
        for rate, pin, flex, room, per_node in (
            (od_rate, pinned[0], flexible[0], spot_cpu, NODE_TYPES[0].cpu_m * ALLOCATABLE_SHARE),
            (mem_rate, pinned[1], flexible[1], spot_mem, NODE_TYPES[0].memory_mi * ALLOCATABLE_SHARE),
        ):
            on_demand = pin + max(0.0, flex - room)
            by_resource.append((rate * on_demand + rate * spot_fraction * min(flex, room), on_demand / per_node))
        rate_cost, od_nodes = max(by_resource)
        cost += rate_cost * slice_seconds / 3_600.0
        od_hours += od_nodes * slice_seconds / 3_600.0
        series.append((t, math.ceil(od_nodes * NODE_TYPES[0].cpu_m / NODE_TYPES[-1].cpu_m)))
        t += slice_seconds
    big = NODE_TYPES[0].cpu_m / NODE_TYPES[-1].cpu_m
    return Figures(
        "lower bound",
        od_hours * big,
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


def _demand(world: World, t: float) -> tuple[tuple[float, float], tuple[float, float]]:
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
