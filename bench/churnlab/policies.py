"""The policies compared on one trace, each an actor stepped after the cluster's own tick.

* ``none``: the default scheduler alone; ``webhook+extender``: spotshift's webhook and extender, no rescheduler;
* ``spotshift`` (its defaults: capacity mode on), ``spotshift jobs:evict``, ``spotshift no-capacity``
  (``capacity.enabled: false``): the webhook, the extender and spotshift's own run loop
  (:class:`rescheduler.run.Rescheduler`: gate, plan, decision, controls, budgets, drains, evictions, Jobs,
  placeholders) against the in-memory API server, on the simulated clock;
* ``pusher-like``: k8s-spot-rescheduler as its README sets it up (on-demand nodes tainted ``PreferNoSchedule``, the
  default scheduler, no webhook) and as it behaves: every 10 s, unless a drain ended less than ``node_drain_delay``
  (10 minutes) ago or a pod of the cluster is ``Unschedulable`` (pending, ``PodScheduled=False``), it plans with its
  own rules (on-demand nodes by requested CPU, pods largest first onto the
  fullest spot node that fits, all or nothing per node; every pod with a controller may move, Job pods included;
  a pod whose budget allows no disruption keeps its node; pending pods are not looked at) and drains the first node
  that can be emptied: the ``ToBeDeletedByClusterAutoscaler`` taint, then every pod evicted through the Eviction API,
  a 429 retried until ``pod_eviction_timeout`` (2 minutes); the taint goes when the drain ends, emptied (the node
  is left schedulable, for the autoscaler to remove once empty) or failed;
* ``descheduler (chart)`` and ``descheduler (spot-tuned)``: the webhook's preferred spot affinity and the default
  scheduler, with sigs.k8s.io/descheduler v0.36.0's rules (:class:`Descheduler`, :class:`DeschedulerRun`) as its Helm
  chart ships them (:data:`DESCHEDULER_CHART`) and as an operator tunes them for spot (:data:`DESCHEDULER_SPOT`).
  ``RemovePodsViolatingNodeAffinity`` for ``preferredDuringSchedulingIgnoredDuringExecution`` evicts a pod that fits
  some node (its own counts, without its requests) when some Ready node, with room or not, matches a greater weight of
  its preferred terms than its own; ``nodeFit`` adds that it fits a node other than its own (not cordoned, selectors
  and required affinity, untolerated ``NoSchedule``/``NoExecute`` taints, room for its requests), any such node,
  whatever its weight. ``requiredDuringSchedulingIgnoredDuringExecution`` (the chart's only type) evicts a pod whose
  node no longer matches its required affinity: never here, node labels do not change, so the chart moves nothing back
  to spot. ``RemovePodsViolatingNodeTaints`` (the chart's) evicts the pods of a node under a reclaim notice. A 429
  skips the pod. ``RemovePodsHavingTooManyRestarts``, ``RemovePodsViolatingInterPodAntiAffinity`` and
  ``RemovePodsViolatingTopologySpreadConstraint`` (the chart's) have nothing to act on here (no restarts,
  anti-affinity or spread constraints). The chart's ``balance`` plugins run after the ``deschedule`` ones:
  ``RemoveDuplicates`` (:class:`RemoveDuplicates`) and ``LowNodeUtilization`` (:class:`LowNodeUtilization`) spread
  pods across nodes, which adds evictions and moves no pod towards spot.

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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bench.churnlab.books import Setup, sync_state
from bench.churnlab.world import World
from rescheduler.run import Rescheduler, RunOptions, default_planner
from shared.config import Config, parse_config
from shared.kube.api import ApiError
from shared.model import Pod
from shared.movable import is_daemonset_pod, is_mirror_pod
from shared.nodeaffinity import check_node_affinity
from shared.quantity import parse_quantity
from shared.resources import check_resources
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT
from shared.taints import check_taints, tolerates_all
from tests.support.pusher import pusher_plan

EPOCH = 1_800_000_000.0
"""The simulated wall clock at the start of the day (Unix seconds)."""
FORCED_CYCLE = 300.0
PUSHER_TAINT = "ToBeDeletedByClusterAutoscaler"


SYSTEM_CRITICAL = 2_000_000_000
"""``SystemCriticalPriority``: pods at or above it are not evicted."""
RESOURCES = ("cpu", "memory", "pods")

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class Descheduler:
    """One way to run sigs.k8s.io/descheduler v0.36.0: its interval, the ``deschedule`` plugins of its profile that
    act in this world, and its ``DefaultEvictor``'s arguments. ``None`` limits are unlimited (the defaults)."""

    interval: float
    node_affinity: tuple[str, ...] = ()
    """``RemovePodsViolatingNodeAffinity``'s ``nodeAffinityType`` (empty: the plugin is not enabled)."""
    node_taints: bool = False
    """``RemovePodsViolatingNodeTaints`` enabled (``NoSchedule`` taints only: ``includePreferNoSchedule`` false)."""
    node_fit: bool = False
    """The ``DefaultEvictor``'s ``nodeFit``: a pod is evicted only if it fits a node other than its own."""
    protect_pvc: bool = False
    """The ``DefaultEvictor``'s ``PodsWithPVC`` protection: a pod with a PersistentVolumeClaim is never evicted."""
    max_per_node: int | None = None
    max_per_namespace: int | None = None
    max_total: int | None = None
    remove_duplicates: bool = False
    """The ``balance`` plugin ``RemoveDuplicates`` enabled (no ``excludeOwnerKinds``, every namespace)."""
    low_node_utilization: Utilization | None = None
    """The ``balance`` plugin ``LowNodeUtilization`` with these thresholds (``None``: not enabled)."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Percentages of a node's allocatable CPU, memory and pods, over the pods' requests (``None``: the resource is
    not among the thresholds)."""

    cpu: float | None = None
    memory: float | None = None
    pods: float | None = None

    def of(self, resource: str) -> float | None:
        value: float | None = getattr(self, resource)
        return value

    def named(self) -> list[tuple[str, float]]:
        return [(r, v) for r in RESOURCES if (v := self.of(r)) is not None]


@dataclass(frozen=True, slots=True)
class Utilization:
    """``LowNodeUtilization``'s arguments: a schedulable node whose usage is at most ``thresholds`` for every resource
    is under-utilised, a node above ``target`` for some resource over-utilised."""

    thresholds: Thresholds
    target: Thresholds


CHART_UTILIZATION = Utilization(Thresholds(20, 20, 20), Thresholds(50, 50, 50))
"""The chart's ``LowNodeUtilization`` arguments: ``thresholds`` 20% and ``targetThresholds`` 50% of CPU, memory
and pods."""

DESCHEDULER_CHART = Descheduler(
    interval=120.0,
    node_affinity=(REQUIRED,),
    node_taints=True,
    protect_pvc=True,
    remove_duplicates=True,
    low_node_utilization=CHART_UTILIZATION,
)
"""The descheduler as its Helm chart (sigs.k8s.io/descheduler v0.36.0, ``charts/descheduler``) ships it: a CronJob
every 2 minutes (``*/2 * * * *``), the chart's policy: the ``deschedule`` plugins
``RemovePodsViolatingNodeAffinity`` for ``requiredDuringSchedulingIgnoredDuringExecution`` only and
``RemovePodsViolatingNodeTaints``, then the ``balance`` plugins ``RemoveDuplicates`` and ``LowNodeUtilization``
(:data:`CHART_UTILIZATION`); ``PodsWithPVC`` protected, no ``nodeFit``, no eviction limits."""

DESCHEDULER_SPOT = Descheduler(interval=10.0, node_affinity=(PREFERRED,), node_fit=True)
"""The descheduler as an operator tunes it for spot: one profile with ``RemovePodsViolatingNodeAffinity`` for
``preferredDuringSchedulingIgnoredDuringExecution`` (the webhook's spot preference), ``nodeFit: true`` so that a pod
is evicted only when it fits another node, run as a Deployment with ``deschedulingInterval: 10s`` (as often as
spotshift's rescheduler looks), no eviction limits."""


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    setup: Setup
    actor: str = ""
    """``spotshift``, ``pusher``, ``descheduler`` or ``""`` (none)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    descheduler: Descheduler | None = None
    """How the descheduler runs (``actor`` ``descheduler``)."""


SPOTSHIFT = Setup(webhook=True, extender=True)
POLICIES = (
    Policy("none", Setup()),
    Policy("webhook+extender", SPOTSHIFT),
    Policy("spotshift", SPOTSHIFT, "spotshift"),
    Policy("spotshift jobs:evict", SPOTSHIFT, "spotshift", {"disruption": {"jobs": "evict"}}),
    Policy("spotshift no-capacity", SPOTSHIFT, "spotshift", {"capacity": {"enabled": False}}),
    Policy("spotshift worth:off", SPOTSHIFT, "spotshift", {"worth": {"enabled": False}}),
    Policy("spotshift eviction-cost:2", SPOTSHIFT, "spotshift", {"worth": {"eviction_cost": 2.0}}),
    Policy("spotshift window:0", SPOTSHIFT, "spotshift", {"spot": {"stability_window": 0}}),
    Policy(
        "spotshift no-capacity cost:2",
        SPOTSHIFT,
        "spotshift",
        {"capacity": {"enabled": False}, "worth": {"eviction_cost": 2.0}},
    ),
    Policy("pusher-like", Setup(prefer_no_schedule_on_demand=True), "pusher"),
    Policy("descheduler (chart)", Setup(webhook=True), "descheduler", descheduler=DESCHEDULER_CHART),
    Policy("descheduler (spot-tuned)", Setup(webhook=True), "descheduler", descheduler=DESCHEDULER_SPOT),
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
        """When a cycle is due although nothing changed: a drain's place in the budget or a backoff ends, a spot pool
        settles, or the forced interval."""
        r = self.r
        at = self.last + FORCED_CYCLE
        delay = r.config.rescheduler.node_drain_delay
        at = min([at, *(t + delay for t in r.finished if t + delay > self.last)])
        ends = [u - EPOCH for u in r.drainer.memory_backoff.values() if u - EPOCH > self.last]
        settles = r.parts.spot.next_change(EPOCH + self.last) - EPOCH  # a spot pool's window runs out
        return min([at, *ends, settles])

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
        if any_unschedulable(w):
            return  # pusher waits for the cluster's unschedulable pods to be placed before it plans
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
        if not left or w.now - started >= self.TIMEOUT:
            # Drained or given up: the taint goes either way; an emptied node is the autoscaler's to remove.
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
    """See the module docstring; ``settings``: how the descheduler runs."""

    def __init__(self, world: World, settings: Descheduler) -> None:
        self.world = world
        self.settings = settings
        self.view = world.view
        self.applied = world.applied
        self.next_run = 0.0
        self.idle = -1
        """The cluster's change count when a cycle last evicted nothing: until it changes, a cycle would decide
        the same, and none runs."""
        self.evicted = False
        """The last step's cycle evicted pods: the cluster reacts at the next tick (the owners' replacements are
        created and scheduled), not at the next cycle."""

    def step(self) -> None:
        w = self.world
        self.evicted = False
        if w.now < self.next_run or _changes(w) == self.idle:
            return
        self.next_run = w.now + self.settings.interval
        sync_state(w.server, self.view, self.applied)
        before = _changes(w)
        cycle = DeschedulerRun(w, self.settings, self.view.snapshot())
        cycle.run()
        self.evicted = bool(cycle.evicted)
        self.idle = before if not cycle.evicted else -1

    def busy(self) -> bool:
        return self.evicted

    def wake(self) -> float:
        return math.inf if _changes(self.world) == self.idle else self.next_run


class DeschedulerRun:
    """One descheduling cycle over a snapshot of the cluster: the ``deschedule`` plugins in the profile's order
    (``RemovePodsViolatingNodeTaints``, then ``RemovePodsViolatingNodeAffinity`` per ``nodeAffinityType``), each over
    the Ready nodes in turn, then the ``balance`` plugins (``RemoveDuplicates``, ``LowNodeUtilization``), every
    eviction through the Eviction API (a refusal is logged and the next pod tried)."""

    def __init__(self, world: World, settings: Descheduler, snap: ClusterSnapshot) -> None:
        self.world, self.settings, self.snap = world, settings, snap
        self.nodes = sorted((i for i in snap.nodes.values() if i.node.ready), key=lambda i: i.name)
        self.evicted: set[str] = set()
        self.per_node: dict[str, int] = {}
        self.per_namespace: dict[str, int] = {}
        self.done = False
        """The total limit was reached: the cycle ends."""
        self.best: dict[int, int] = {}
        """Preferred terms (by identity: a workload's pods share theirs) → the best weight a Ready node gives."""
        self.fitting: dict[tuple[str, str], list[str]] = {}
        """(namespace, controller) → the first two Ready nodes with room for one of its pods (a controller's pods are
        alike; one of them may be the pod's own)."""
        self.scores: dict[tuple[int, str], int] = {}
        """(preferred terms, node) → the weight the node matches."""

    def run(self) -> None:
        s = self.settings
        if s.node_taints:
            self._plugin(lambda pod, info: check_taints(pod, info.node) is not None)
        for kind in s.node_affinity:
            self._plugin(self.violates_required if kind == REQUIRED else self.violates_preferred)
        if s.remove_duplicates and not self.done:
            RemoveDuplicates(self).run()
        if s.low_node_utilization is not None and not self.done:
            LowNodeUtilization(self, s.low_node_utilization).run()

    def _plugin(self, rule: Callable[[Pod, NodeInfo], bool]) -> None:
        for info in self.nodes:
            if self.done:
                return
            for pod in sorted(info.pods, key=lambda p: p.key):
                if not self.evictable(pod) or not rule(pod, info):
                    continue
                if self.settings.node_fit and not self.fits_any(pod, info, other=True):
                    continue  # the DefaultEvictor's PreEvictionFilter
                if not self.evict_pod(pod, info):
                    break

    def evictable(self, pod: Pod) -> bool:
        """The ``DefaultEvictor``'s ``Filter`` for this world's pods: not a DaemonSet's or a mirror pod, owned, below
        system-critical priority, not terminating, not already evicted in this cycle, no claim when ``PodsWithPVC``
        is protected."""
        if pod.key in self.evicted or is_daemonset_pod(pod) or is_mirror_pod(pod) or not pod.owners:
            return False
        if pod.priority >= SYSTEM_CRITICAL:
            return False  # system-critical priority: evictSystemCriticalPods is off
        if pod.deletion_timestamp is not None or pod.terminal:
            return False  # terminating, or Succeeded/Failed (the plugins' pod listing leaves those out)
        return not (self.settings.protect_pvc and any(v.claim_name for v in pod.volumes))

    def violates_required(self, pod: Pod, info: NodeInfo) -> bool:
        """``requiredDuringSchedulingIgnoredDuringExecution``: the pod has required node affinity, fits some node
        and its node no longer matches its node selector and affinity."""
        return (
            pod.required_affinity is not None
            and self.fits_any(pod, info, other=False)
            and check_node_affinity(pod, info.node) is not None
        )

    def violates_preferred(self, pod: Pod, info: NodeInfo) -> bool:
        """``preferredDuringSchedulingIgnoredDuringExecution``: the pod has preferred node affinity, fits some node
        (its own counts, without its resources) and some Ready node, whether or not it has room, matches a greater
        weight of its preferred terms than its own node."""
        if not pod.preferred_affinity:
            return False
        score = self.world.affinity_score
        key = id(pod.preferred_affinity)
        if key not in self.best:
            self.best[key] = max((score(pod, other.node) for other in self.nodes), default=0)
        here = self.scores.get((key, info.name))
        if here is None:
            here = self.scores[key, info.name] = score(pod, info.node)
        return self.best[key] > here and self.fits_any(pod, info, other=False)

    def fits_any(self, pod: Pod, info: NodeInfo, *, other: bool) -> bool:
        """``PodFitsAnyNode`` (``other``: ``PodFitsAnyOtherNode``) over the Ready nodes."""
        if not other and info.node.ready and self.node_fit(pod, info, room=False):
            return True  # its own node, where its requests are already counted
        owner = pod.controller
        key = (pod.namespace, owner.name if owner else pod.name)
        if key not in self.fitting:
            fitting = (n.name for n in self.nodes if self.node_fit(pod, n, room=True))
            self.fitting[key] = list(itertools.islice(fitting, 2))
        return any(name != info.name for name in self.fitting[key])

    @staticmethod
    def node_fit(pod: Pod, info: NodeInfo, *, room: bool) -> bool:
        """The descheduler's ``NodeFit``: the node is not cordoned, matches the pod's node selector and required
        affinity, has no ``NoSchedule``/``NoExecute`` taint the pod does not tolerate, and (``room``: any node but
        the pod's own) has room for its requests. (Its inter-pod anti-affinity check has nothing to find here: the
        scenarios' pods carry none.)"""
        node = info.node
        if node.unschedulable or check_node_affinity(pod, node) is not None or check_taints(pod, node) is not None:
            return False
        return not room or not check_resources(pod, info)

    def evict_pod(self, pod: Pod, info: NodeInfo) -> bool:
        """Evict ``pod`` within the limits; ``False`` when the node's limit is reached (the plugin moves on to the
        next node) or the total's (the cycle ends: ``done``). A refusal returns ``True`` and leaves the pod out of
        ``evicted``."""
        s = self.settings
        if s.max_total is not None and len(self.evicted) >= s.max_total:
            self.done = True
            return False
        if s.max_per_node is not None and self.per_node.get(info.name, 0) >= s.max_per_node:
            return False
        if s.max_per_namespace is not None and self.per_namespace.get(pod.namespace, 0) >= s.max_per_namespace:
            return True  # an error for this pod alone
        obj = self.world.server.store["pods"].get(pod.key)
        if obj is not None and evict(self.world, obj):
            self.evicted.add(pod.key)
            self.per_node[info.name] = self.per_node.get(info.name, 0) + 1
            self.per_namespace[pod.namespace] = self.per_namespace.get(pod.namespace, 0) + 1
        return True


OwnerKey = tuple[str, str, str, str]
"""RemoveDuplicates' ``podOwner``: namespace, owner kind, owner name, the pod's sorted images joined by ``#``."""


class RemoveDuplicates:
    """The ``balance`` plugin ``RemoveDuplicates`` over one cycle's Ready nodes. On each node, a pod whose owner
    references and container images (every ``namespace/kind/name/image``) equal those of an earlier pod of that node
    is a duplicate; pods without owners are left out, and so are pods the ``DefaultEvictor`` would not evict. For
    each owner with duplicates, the target nodes are the nodes where its duplicates could land by taints
    (``NoSchedule``/``NoExecute``) and node selector and required affinity, room or not, counted only where more
    than one node matches; with fewer than two, nothing is evicted. Otherwise ``upper = ceil(pods of the owner /
    target nodes)`` and each node keeps its first pod and ``upper - 1`` duplicates: the rest are evicted (a refusal
    is logged and the next pod tried)."""

    def __init__(self, cycle: DeschedulerRun) -> None:
        self.cycle = cycle
        self.occurrences: dict[OwnerKey, int] = {}
        self.duplicates: dict[OwnerKey, dict[str, list[Pod]]] = {}

    def images(self, pod: Pod) -> list[str]:
        obj = self.cycle.world.server.store["pods"].get(pod.key) or {}
        return sorted(str(c.get("image") or "") for c in (obj.get("spec") or {}).get("containers") or ())

    def find(self) -> None:
        """``Balance``'s first pass: each owner's pods and, per node, its duplicates."""
        for info in self.cycle.nodes:
            seen: set[tuple[str, ...]] = set()
            for pod in sorted(info.pods, key=lambda p: p.key):
                if not pod.owners or not self.cycle.evictable(pod):
                    continue
                images = self.images(pod)
                owners = [(pod.namespace, o.kind, o.name, "#".join(images)) for o in pod.owners]
                for key in owners:
                    self.occurrences[key] = self.occurrences.get(key, 0) + 1
                keys = tuple(sorted(f"{ns}/{kind}/{name}/{image}" for ns, kind, name, _ in owners for image in images))
                if keys not in seen:
                    seen.add(keys)
                    continue
                for key in owners:
                    self.duplicates.setdefault(key, {}).setdefault(info.name, []).append(pod)

    def targets(self, pods: list[Pod]) -> set[str]:
        """``getTargetNodes``: for each distinct placement (tolerations, node selector, required affinity) of the
        duplicates, the nodes it matches, when more than one does."""
        distinct = {(p.tolerations, tuple(sorted(p.node_selector.items())), p.required_affinity): p for p in pods}
        found: set[str] = set()
        for pod in distinct.values():
            matching = {
                info.name
                for info in self.cycle.nodes
                if check_taints(pod, info.node) is None and check_node_affinity(pod, info.node) is None
            }
            if len(matching) > 1:
                found |= matching
        return found

    def run(self) -> None:
        self.find()
        cycle = self.cycle
        for key, by_node in self.duplicates.items():
            targets = self.targets([p for pods in by_node.values() for p in pods])
            if len(targets) < 2:
                continue
            upper = math.ceil(self.occurrences[key] / len(targets))
            for name, pods in by_node.items():
                if len(pods) + 1 <= upper:
                    continue
                info = cycle.snap.nodes[name]
                for pod in pods[upper - 1 :]:
                    if pod.key in cycle.evicted:
                        continue
                    if not cycle.evict_pod(pod, info):
                        if cycle.done:
                            return
                        break  # the node's limit


class LowNodeUtilization:
    """The ``balance`` plugin ``LowNodeUtilization`` over one cycle's Ready nodes, on the pods' requests. A node's
    usage is the requests of every pod on it (``pods``: their count) in percent of its allocatable. Schedulable
    nodes at or below ``thresholds`` for every resource are under-utilised, nodes above ``target`` for some resource
    over-utilised. Nothing happens unless both exist and not every node is under-utilised. The room to move into is
    the sum over under-utilised nodes of ``target`` of allocatable minus usage. Over-utilised nodes, the most used
    first (millicores plus bytes plus pods), give up evictable pods (lowest priority first, then BestEffort,
    Burstable, Guaranteed) that tolerate every taint of some under-utilised node, while the node is above ``target``
    for some resource and the room is positive for every resource; each eviction takes its requests from both."""

    def __init__(self, cycle: DeschedulerRun, args: Utilization) -> None:
        self.cycle, self.args = cycle, args
        self.usage = {info.name: usage_of(info) for info in cycle.nodes}

    def percent(self, info: NodeInfo, resource: str) -> float:
        allocatable = info.allocatable(resource)
        return 100.0 * self.usage[info.name][resource] / allocatable if allocatable else 0.0

    def capped(self, info: NodeInfo, resource: str) -> int:
        """``capNodeCapacityToThreshold``: ``target`` percent of the node's allocatable, truncated (all of it for a
        resource without a target)."""
        target = self.args.target.of(resource)
        allocatable = info.allocatable(resource)
        return allocatable if target is None else int(target * 0.01 * allocatable)

    def run(self) -> None:
        cycle, args = self.cycle, self.args
        low = [
            i
            for i in cycle.nodes
            if not i.node.unschedulable and all(self.percent(i, r) <= v for r, v in args.thresholds.named())
        ]
        high = [i for i in cycle.nodes if any(self.percent(i, r) > v for r, v in args.target.named())]
        if not low or len(low) == len(cycle.nodes) or not high:
            return
        room = {r: sum(self.capped(i, r) - self.usage[i.name][r] for i in low) for r in RESOURCES}
        high.sort(key=lambda i: -sum(self.usage[i.name].values()))
        for info in high:
            pods = sorted((p for p in info.pods if cycle.evictable(p)), key=self.eviction_order)
            if not pods or not self.go_on(info, room):
                continue
            for pod in pods:
                if not any(tolerates_all(i.node.taints, pod.tolerations) for i in low):
                    continue
                if not cycle.evict_pod(pod, info):
                    if cycle.done:
                        return
                    break  # the node's limit
                if pod.key not in cycle.evicted:
                    continue  # refused
                for r, used in usage_of(NodeInfo(info.node, [pod])).items():
                    self.usage[info.name][r] -= used
                    room[r] -= used
                if not self.go_on(info, room):
                    break

    def eviction_order(self, pod: Pod) -> tuple[int, int, str]:
        """``SortPodsBasedOnPriorityLowToHigh``: priority, then BestEffort, Burstable, Guaranteed."""
        obj = self.cycle.world.server.store["pods"].get(pod.key) or {}
        return pod.priority, qos_rank(obj), pod.key

    def go_on(self, info: NodeInfo, room: dict[str, int]) -> bool:
        """The eviction goes on while the node is above ``target`` for some resource and there is room for all."""
        above = any(self.usage[info.name][r] > self.capped(info, r) for r in RESOURCES)
        return above and all(v > 0 for v in room.values())


def usage_of(info: NodeInfo) -> dict[str, int]:
    """The requests of the node's pods (``pods``: how many)."""
    usage = {r: 0 for r in RESOURCES}
    for pod in info.pods:
        usage["pods"] += 1
        for r in ("cpu", "memory"):
            usage[r] += pod.requests.get(r, 0)
    return usage


def qos_rank(obj: dict[str, Any]) -> int:
    """The pod's QoS class: 0 BestEffort (no container requests or limits CPU or memory), 2 Guaranteed (every
    container's CPU and memory limits set, its requests equal to them or unset), 1 Burstable."""
    containers = [c.get("resources") or {} for c in (obj.get("spec") or {}).get("containers") or ()]
    named = ("cpu", "memory")
    if not any(r in (c.get(k) or {}) for c in containers for k in ("requests", "limits") for r in named):
        return 0
    for c in containers:
        limits, requests = c.get("limits") or {}, c.get("requests") or {}
        for r in named:
            if r not in limits or parse_quantity(requests.get(r, limits[r])) != parse_quantity(limits[r]):
                return 1
    return 2


def any_unschedulable(world: World) -> bool:
    """Whether a pod of the cluster is pending with ``PodScheduled=False``, reason ``Unschedulable``."""
    store = world.server.store["pods"]
    for key in world.server.unbound:
        obj = store.get(key)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions):
            return True
    return False


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
        return DeschedulerLike(world, policy.descheduler or DESCHEDULER_CHART)
    return Actor()
