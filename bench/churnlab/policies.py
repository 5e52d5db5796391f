"""The policies compared on one trace, each an actor stepped after the cluster's own tick.

* ``none``: the default scheduler alone; ``webhook+extender``: spotshift's webhook and extender, no rescheduler;
* ``spotshift`` (its defaults: capacity mode on), ``spotshift jobs:evict``, ``spotshift no-capacity``
  (``capacity.enabled: false``): the webhook, the extender and spotshift's own run loop
  (:class:`rescheduler.run.Rescheduler`: gate, plan, decision, controls, budgets, drains, evictions, Jobs,
  placeholders) against the in-memory API server, on the simulated clock;
* ``pusher-like``: k8s-spot-rescheduler as its README sets it up (on-demand nodes tainted ``PreferNoSchedule``, the
  default scheduler, no webhook) and as it behaves: every 10 s, unless a drain ended less than ``node_drain_delay``
  (10 minutes) ago, it plans with its own rules (on-demand nodes by requested CPU, pods largest first onto the
  fullest spot node that fits, all or nothing per node; every pod with a controller may move, Job pods included;
  a pod whose budget allows no disruption keeps its node; pending pods are not looked at) and drains the first node
  that can be emptied: the ``ToBeDeletedByClusterAutoscaler`` taint, then every pod evicted through the Eviction API,
  a 429 retried until ``pod_eviction_timeout`` (2 minutes), after which the drain fails and the taint goes;
* ``descheduler-like``: the webhook's preferred spot affinity and the default scheduler, with the descheduler's
  ``RemovePodsViolatingNodeAffinity`` (``preferredDuringSchedulingIgnoredDuringExecution``) every 5 minutes: a pod
  whose node matches less of its preferred affinity than another node it fits (the descheduler's ``NodeFit``:
  taints, selectors and affinity, free resources, not cordoned) is evicted; a 429 skips the pod.

The rescheduler's cycles: the loop runs one every ``housekeeping_interval`` (10 s). A cycle over a cluster in which
nothing changed since the previous one plans the same nodes, so the simulation runs a cycle only when nodes, pods or
budgets changed since the last one, a drain is in flight, a drain's place or a node's backoff ends, or five
simulated minutes passed. Its planner has the loop's time budget, counted in strategies rather than seconds (the
first strategy and pusher's order run, as on a large cluster), so that a run's figures do not depend on the
machine.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from bench.churnlab.books import Setup, sync_state
from bench.churnlab.world import World
from rescheduler.run import Rescheduler, RunOptions, default_planner
from shared.config import Config, parse_config
from shared.fit import fits
from shared.kube.api import ApiError
from shared.model import Pod
from shared.movable import is_daemonset_pod, is_mirror_pod
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT
from tests.support.pusher import pusher_plan

EPOCH = 1_800_000_000.0
"""The simulated wall clock at the start of the day (Unix seconds)."""
FORCED_CYCLE = 300.0
PUSHER_TAINT = "ToBeDeletedByClusterAutoscaler"


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    setup: Setup
    actor: str = ""
    """``spotshift``, ``pusher``, ``descheduler`` or ``""`` (none)."""
    overrides: dict[str, Any] = field(default_factory=dict)


SPOTSHIFT = Setup(webhook=True, extender=True)
POLICIES = (
    Policy("none", Setup()),
    Policy("webhook+extender", SPOTSHIFT),
    Policy("spotshift", SPOTSHIFT, "spotshift"),
    Policy("spotshift jobs:evict", SPOTSHIFT, "spotshift", {"disruption": {"jobs": "evict"}}),
    Policy("spotshift no-capacity", SPOTSHIFT, "spotshift", {"capacity": {"enabled": False}}),
    Policy("pusher-like", Setup(prefer_no_schedule_on_demand=True), "pusher"),
    Policy("descheduler-like", Setup(webhook=True), "descheduler"),
)


def config_of(overrides: dict[str, Any]) -> Config:
    base = parse_config(overrides)
    return replace(base, rescheduler=replace(base.rescheduler, leader_elect=False))


def _changes(world: World) -> int:
    log = world.server.log
    return len(log["pods"]) + len(log["nodes"]) + len(log["pdbs"])


class Actor:
    def step(self) -> None:
        """What the policy does at the world's current time."""

    def busy(self) -> bool:
        """Whether the next tick must come at once (something in flight)."""
        return False

    def wake(self) -> float:
        """The next simulated time the policy wants a tick even if nothing else happens."""
        return math.inf


class Spotshift(Actor):
    def __init__(self, world: World, overrides: dict[str, Any]) -> None:
        self.world = world
        work = itertools.count()
        config = config_of(overrides)
        self.r = Rescheduler(
            world.server,
            config,
            RunOptions(identity="sim"),
            plan=default_planner(0.5, lambda: CURRENT, clock=lambda: float(next(work)), wall=self._wall),
            stop=threading.Event(),
            clock=lambda: world.now,
            wall=self._wall,
        )
        self.r.switches = CURRENT
        # The loop's informers see what kube-scheduler's view sees: one state, fed from the API server's change log
        # (the world has not read the log yet when a policy is attached).
        world.view = self.r.state
        self.applied = world.applied
        self.seen = -1
        self.last = -math.inf

    def _wall(self) -> float:
        return EPOCH + self.world.now

    def _due(self) -> bool:
        r, now = self.r, self.world.now
        if now < r.next_cycle:
            return False
        return bool(r.drains) or _changes(self.world) != self.seen or now >= self._timed()

    def _timed(self) -> float:
        """When a cycle is due although nothing changed: a drain's place in the budget or a backoff ends, or the
        forced interval."""
        r = self.r
        at = self.last + FORCED_CYCLE
        delay = r.config.rescheduler.node_drain_delay
        at = min([at, *(t + delay for t in r.finished if t + delay > self.last)])
        ends = [u - EPOCH for u in r.drainer.memory_backoff.values() if u - EPOCH > self.last]
        return min([at, *ends])

    def step(self) -> None:
        sync_state(self.world.server, self.r.state, self.applied)
        if self._due():
            self.r.step_cycle()
            self.last = self.world.now
            sync_state(self.world.server, self.r.state, self.applied)
            self.seen = _changes(self.world)
        if self.r.drains:
            self.r.advance_drains()

    def busy(self) -> bool:
        return bool(self.r.drains)

    def wake(self) -> float:
        if _changes(self.world) != self.seen:
            return self.r.next_cycle
        return max(self.r.next_cycle, self._timed())


class PusherLike(Actor):
    """See the module docstring."""

    INTERVAL, DELAY, TIMEOUT = 10.0, 600.0, 120.0

    def __init__(self, world: World) -> None:
        self.world = world
        self.config = config_of({"disruption": {"jobs": "evict"}})
        self.view = world.view
        self.applied = world.applied
        self.draining: tuple[str, list[str], float] | None = None
        self.ended = -math.inf
        self.next_check = -math.inf
        self.seen = -1
        self.last = -math.inf

    def step(self) -> None:
        w = self.world
        if self.draining is not None:
            self._drain()
            return
        if w.now < self.next_check or w.now - self.ended < self.DELAY:
            return
        self.next_check = w.now + self.INTERVAL
        if _changes(w) == self.seen and w.now - self.last < FORCED_CYCLE:
            return
        sync_state(w.server, self.view, self.applied)
        self.seen, self.last = _changes(w), w.now
        plan = pusher_plan(self.view.snapshot(), self.config, plan_waiting=False)
        if not plan.drained:
            return
        node = plan.drained[0]
        pods = [m.pod for m in plan.moves if m.source == node]
        self._taint(node, add=True)
        self.draining = (node, pods, w.now)
        self._drain()

    def _taint(self, node: str, *, add: bool) -> None:
        obj = self.world.server.store["nodes"].get(node)
        if obj is None:
            return
        taints = [t for t in obj["spec"].get("taints") or [] if t["key"] != PUSHER_TAINT]
        if add:
            taints.append({"key": PUSHER_TAINT, "value": "1", "effect": "NoSchedule"})
        self.world.server.put("nodes", {**obj, "spec": {**obj["spec"], "taints": taints}})

    def _drain(self) -> None:
        assert self.draining is not None
        node, pods, started = self.draining
        w = self.world
        left = []
        for key in pods:
            obj = w.server.store["pods"].get(key)
            if obj is None or obj["spec"].get("nodeName") != node:
                continue
            if not evict(w, obj):
                left.append(key)
        if not left:
            self.draining, self.ended = None, w.now
        elif w.now - started >= self.TIMEOUT:
            self._taint(node, add=False)
            self.draining, self.ended = None, w.now
        else:
            self.draining = (node, left, started)

    def busy(self) -> bool:
        return self.draining is not None

    def wake(self) -> float:
        at = max(self.next_check, self.ended + self.DELAY)
        if _changes(self.world) == self.seen:
            at = max(at, self.last + FORCED_CYCLE)
        return at


class DeschedulerLike(Actor):
    """See the module docstring."""

    INTERVAL = 300.0

    def __init__(self, world: World) -> None:
        self.world = world
        self.view = world.view
        self.applied = world.applied
        self.next_run = 0.0

    def step(self) -> None:
        w = self.world
        if w.now < self.next_run:
            return
        self.next_run = w.now + self.INTERVAL
        sync_state(w.server, self.view, self.applied)
        snap = self.view.snapshot()
        better: dict[tuple[int, int], list[tuple[int, NodeInfo]]] = {}
        """(preferred terms, score of the pod's node) → the nodes scoring higher, roomiest first."""
        for info in list(snap.nodes.values()):
            for pod in list(info.pods):
                if not pod.preferred_affinity or is_daemonset_pod(pod) or is_mirror_pod(pod) or not pod.owners:
                    continue
                here = w.affinity_score(pod, info.node)
                if here >= sum(weight for weight, _ in pod.preferred_affinity):
                    continue  # its node matches every preferred term: no node can score higher
                key = (id(pod.preferred_affinity), here)
                if key not in better:
                    better[key] = sorted(
                        (
                            (other.free("cpu"), other)
                            for other in snap.nodes.values()
                            if not other.node.unschedulable and w.affinity_score(pod, other.node) > here
                        ),
                        key=lambda x: (-x[0], x[1].name),
                    )
                if self._fits_one(pod, info, better[key], snap):
                    obj = w.server.store["pods"].get(pod.key)
                    if obj is not None:
                        evict(w, obj)

    @staticmethod
    def _fits_one(pod: Pod, info: NodeInfo, others: list[tuple[int, NodeInfo]], snap: ClusterSnapshot) -> bool:
        """The descheduler's ``NodeFit`` over the nodes that match more of the pod's preferred affinity: one fits
        the pod now (taints, selectors and affinity, free resources as they are at the start of the run)."""
        cpu = pod.node_requests.get("cpu", 0)
        for free, other in others:
            if free < cpu:
                return False
            if other is not info and not fits(pod, other, snap, first_only=True):
                return True
        return False

    def wake(self) -> float:
        return self.next_run


def evict(world: World, obj: dict[str, Any]) -> bool:
    """One Eviction API call; ``False`` when refused (429: a budget allows no disruption now)."""
    meta = obj["metadata"]
    try:
        world.server.request(
            "POST",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
            body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"]}},
        )
    except ApiError:
        return False
    return True


def attach(policy: Policy, world: World) -> Actor:
    if policy.actor == "spotshift":
        return Spotshift(world, policy.overrides)
    if policy.actor == "pusher":
        return PusherLike(world)
    if policy.actor == "descheduler":
        return DeschedulerLike(world)
    return Actor()
