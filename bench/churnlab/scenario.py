"""What a simulated day is made of: node types and prices, workload profiles, the daily demand curve and the spot
capacity traces. Everything here is data drawn from one seeded ``random.Random``: the same seed gives the same day.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DAY = 86_400.0
"""Seconds in the simulated day; figures are counted over ``[0, DAY)``."""

WARM_UP = 3_600.0
"""Simulated seconds before the day during which the cluster is built for the first demand (not counted)."""

ZONES = ("zone-a", "zone-b", "zone-c")


@dataclass(frozen=True, slots=True)
class NodeType:
    name: str
    cpu_m: int
    memory_mi: int
    price: float
    """On-demand price per hour (USD); a spot node costs ``price * spot_fraction``."""


NODE_TYPES = (
    NodeType("m.xlarge", 4_000, 16_384, 0.192),
    NodeType("m.2xlarge", 8_000, 32_768, 0.384),
    NodeType("m.4xlarge", 16_000, 65_536, 0.768),
)
"""General-purpose node types (AWS m-family prices); allocatable is what a kubelet reports after its reserves."""

ALLOCATABLE_SHARE = 0.94
"""Share of a node type's CPU and memory a kubelet offers to pods (the rest is system reserve)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One Deployment, StatefulSet or CronJob of the simulated cluster."""

    name: str
    kind: str
    """``Deployment``, ``StatefulSet`` or ``CronJob``."""
    cpu_m: int
    memory_mi: int
    peak: int
    """Replicas at the daily peak (Deployments follow the demand curve; StatefulSets keep ``peak``)."""
    floor: int = 1
    pdb: str = ""
    """``""`` (none), ``max-unavailable-1`` or ``min-available-n-1``."""
    pinned: bool = False
    """``nodeSelector`` on on-demand capacity (the rescheduler leaves such pods where they are)."""
    zone: str = ""
    """StatefulSets: the zone of their PersistentVolumes (each replica's volume is bound there)."""
    every: float = 0.0
    """CronJobs: seconds between runs."""
    runs_for: float = 0.0
    """CronJobs: seconds one run's pods work before they succeed."""
    parallelism: int = 1


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    deployments: int
    pdb_share: float
    statefulsets: int = 0
    cronjobs: int = 0
    pinned_share: float = 0.05


PROFILES = {
    "web": Profile("web", "web services: Deployments scaling with traffic, half behind budgets", 46, 0.5),
    "batch": Profile(
        "batch", "batch-heavy: fewer services, many CronJobs whose Jobs run 10-60 minutes", 24, 0.4, cronjobs=18
    ),
    "pdb-heavy": Profile("pdb-heavy", "PDB-heavy: nearly every Deployment allows one disruption at a time", 46, 0.9),
    "stateful": Profile(
        "stateful", "StatefulSets with zonal volumes beside the services", 34, 0.6, statefulsets=10, pinned_share=0.03
    ),
}


def workloads(profile: Profile, rng: random.Random) -> list[Workload]:
    """The profile's workloads: sizes drawn so that the day's peak needs about 200 nodes."""
    out: list[Workload] = []
    for i in range(profile.deployments):
        cpu = rng.choice((250, 250, 500, 500, 750, 1_000, 1_500))
        pdb = ""
        if rng.random() < profile.pdb_share:
            pdb = rng.choice(("max-unavailable-1", "min-available-n-1"))
        peak = rng.randint(8, 40)
        out.append(
            Workload(
                f"svc-{i:02d}",
                "Deployment",
                cpu,
                cpu * rng.choice((2, 3, 4)),
                peak,
                floor=max(2, peak // 5),
                pdb=pdb,
                pinned=rng.random() < profile.pinned_share,
            )
        )
    for i in range(profile.statefulsets):
        cpu = rng.choice((500, 1_000, 1_500))
        pdb = "max-unavailable-1" if rng.random() < profile.pdb_share else ""
        out.append(
            Workload(f"db-{i:02d}", "StatefulSet", cpu, cpu * 4, rng.randint(3, 6), pdb=pdb, zone=ZONES[i % len(ZONES)])
        )
    for i in range(profile.cronjobs):
        cpu = rng.choice((500, 1_000, 2_000))
        out.append(
            Workload(
                f"job-{i:02d}",
                "CronJob",
                cpu,
                cpu * 2,
                0,
                every=rng.choice((1_800.0, 3_600.0, 7_200.0)),
                runs_for=rng.choice((600.0, 1_200.0, 1_800.0, 3_600.0)),
                parallelism=rng.randint(2, 8),
            )
        )
    return out


def demand(t: float) -> float:
    """Share of peak traffic at simulated second ``t``: 0.35 at night, 1.0 at 14:00, a smooth day between."""
    hour = (t % DAY) / 3_600.0
    day = max(0.0, math.sin(math.pi * (hour - 6.0) / 16.0)) if 6.0 <= hour <= 22.0 else 0.0
    return 0.35 + 0.65 * day


SCALE_EVERY = 300.0
"""How often the horizontal autoscalers change the replica counts (simulated seconds)."""


def replicas(w: Workload, t: float) -> int:
    if w.kind != "Deployment":
        return w.peak
    return max(w.floor, math.ceil(w.peak * demand(t)))


# --- spot capacity -------------------------------------------------------------------------------------------


UNLIMITED = 10_000
"""A change's limit that puts the pool back to its base limit."""


@dataclass(frozen=True, slots=True)
class Change:
    """From ``at`` on, spot pool ``(zone, node type)`` holds at most ``limit`` nodes."""

    at: float
    zone: str
    node_type: str
    limit: int


SPOT_ROOM = 0.9
"""The spot pools together hold this share of the day's peak demand (CPU): at the peak some pods need on-demand
nodes, off the peak spot has room again, as in a region where spot capacity is not unlimited."""


def base_limits(ws: list[Workload]) -> dict[tuple[str, str], int]:
    """Each spot pool's node limit outside cuts: ``SPOT_ROOM`` of the peak CPU demand (Deployments at their peak,
    StatefulSets, CronJobs' pods by the share of time they run), split evenly over the pools."""
    peak = 0.0
    for w in ws:
        if w.kind == "CronJob":
            peak += w.cpu_m * w.parallelism * max(1.0, w.runs_for / w.every)
        elif not w.pinned:
            peak += w.cpu_m * w.peak
    pools = len(ZONES) * len(NODE_TYPES)
    return {
        (z, nt.name): math.ceil(SPOT_ROOM * peak / pools / (nt.cpu_m * ALLOCATABLE_SHARE))
        for z in ZONES
        for nt in NODE_TYPES
    }


@dataclass(slots=True)
class Trace:
    name: str
    description: str
    changes: list[Change] = field(default_factory=list)
    base: dict[tuple[str, str], int] = field(default_factory=dict)
    """Each pool's limit outside cuts (a pool not named: unlimited); a change to :data:`UNLIMITED` restores it."""

    def limits_at(self, t: float) -> dict[tuple[str, str], int]:
        out = {(z, nt.name): self.base.get((z, nt.name), UNLIMITED) for z in ZONES for nt in NODE_TYPES}
        for c in self.changes:
            if c.at <= t:
                pool = (c.zone, c.node_type)
                out[pool] = self.base.get(pool, UNLIMITED) if c.limit == UNLIMITED else c.limit
        return out

    def returns(self) -> list[float]:
        """Times at which a pool's limit rises again after a cut (spot capacity returning)."""
        out = []
        current = {(z, nt.name): UNLIMITED for z in ZONES for nt in NODE_TYPES}
        for c in sorted(self.changes, key=lambda c: c.at):
            pool = (c.zone, c.node_type)
            if c.limit > current[pool]:
                out.append(c.at)
            current[pool] = c.limit
        return sorted(set(out))

    def cuts(self) -> list[float]:
        out = []
        current = {(z, nt.name): UNLIMITED for z in ZONES for nt in NODE_TYPES}
        for c in sorted(self.changes, key=lambda c: c.at):
            pool = (c.zone, c.node_type)
            if c.limit < current[pool]:
                out.append(c.at)
            current[pool] = c.limit
        return sorted(set(out))


def _outage(zone: str, start: float, length: float, limit: int, types: tuple[str, ...]) -> list[Change]:
    return [Change(start, zone, t, limit) for t in types] + [Change(start + length, zone, t, UNLIMITED) for t in types]


def trace(name: str, rng: random.Random, base: dict[tuple[str, str], int]) -> Trace:
    """``calm``: two short cuts of one pool; ``spiky``: a cut every 40-90 minutes, 20-90 minutes long, to zero or a
    few nodes of one pool (sometimes of every type in a zone); ``zone-loss``: the calm day plus every spot pool of one
    zone gone from 10:00 to 12:00."""
    types = tuple(nt.name for nt in NODE_TYPES)
    if name == "calm" or name == "zone-loss":
        changes = []
        for _ in range(2):
            start = rng.uniform(1.0, 22.0) * 3_600.0
            changes += _outage(rng.choice(ZONES), start, rng.uniform(20, 40) * 60.0, 0, (rng.choice(types),))
        t = Trace(name, "two short cuts of one spot pool", changes, base)
        if name == "zone-loss":
            t.description = "two short cuts, and every spot pool of one zone gone from 10:00 to 12:00"
            t.changes += _outage(rng.choice(ZONES), 10 * 3_600.0, 2 * 3_600.0, 0, types)
        t.changes.sort(key=lambda c: c.at)
        return t
    if name == "spiky":
        changes = []
        at = rng.uniform(0.5, 1.5) * 3_600.0
        while at < DAY - 1_800.0:
            zone = rng.choice(ZONES)
            which = types if rng.random() < 0.3 else (rng.choice(types),)
            length = rng.uniform(20, 90) * 60.0
            changes += _outage(zone, at, min(length, DAY - at), rng.choice((0, 0, 1, 2)), which)
            at += rng.uniform(40, 90) * 60.0
        changes.sort(key=lambda c: c.at)
        return Trace(name, "a cut of one pool or zone every 40-90 minutes, 20-90 minutes long", changes, base)
    raise ValueError(f"unknown trace {name!r}")


TRACES = ("calm", "spiky", "zone-loss")
