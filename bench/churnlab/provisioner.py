"""The provisioner: cluster-autoscaler's behaviour as this benchmark models it (see :class:`Provisioner`), and the
cloud giving it the nodes it asks for. The nodes whose provisioning delay is over join before kube-scheduler's turn
in the tick (so the pods they were added for are bound to them before the provisioner looks for pending pods
again); its scan for pending pods comes last, its scale-down of under-used nodes (an option) before the
controllers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from bench.churnlab.books import AUTOSCALER, SPOT_LABEL, TYPE_LABEL, ZONE_LABEL, Books, NodeBook, Obj
from bench.churnlab.scenario import ALLOCATABLE_SHARE, ZONES, NodeType
from shared.fit import fits
from shared.fit_reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS
from shared.kube.api import ApiError
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot, NodeInfo

REMOVAL_DELAY = 600.0
"""Seconds a node stays empty before the provisioner removes it (the default of ``World(removal_delay=...)``)."""

ASK = 1_000
"""The most nodes the provisioner asks of one pool at once when it does not know the pool's room."""
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
LOCAL_STORAGE = ("emptyDir", "hostPath")


class Coming(NamedTuple):
    """A node asked for: it joins at ``at`` (a spot node only while its pool has room, with ``ScaleUpTimeout``),
    and is given up at ``give_up`` (or at ``at`` when that is later) if it has not joined by then, with every node
    of its pool still missing (the group's request is given up at once). Unlike cluster-autoscaler, a new ask of
    the group does not move the deadline of the nodes already asked for: with no group maximum modelled, a pool
    asked again and again would otherwise keep its pods waiting for ever."""

    at: float
    node_type: NodeType
    zone: str
    spot: bool
    give_up: float = math.inf


@dataclass(frozen=True, slots=True)
class ScaleUpTimeout:
    """cluster-autoscaler's handling of a node group that does not give the nodes asked for, with its defaults.

    The cloud tells it when a spot pool has no room: ``capacity_error_delay`` seconds after the ask, the nodes
    beyond the pool's room are reported failed, the request's missing nodes all given up at once, and the pool
    backed off. On AWS the Auto Scaling group's scaling activity fails (``InsufficientInstanceCapacity``); the
    provider's cache of the groups, refreshed once a minute (``refreshInterval`` in
    ``cluster-autoscaler/cloudprovider/aws/aws_manager.go``), reads the failed activity
    (``isNodeGroupAvailable``) and marks the placeholder instances it makes for the missing nodes
    ``placeholder-cannot-be-fulfilled`` (``createPlaceholdersForDesiredNonStartedInstances`` in
    ``auto_scaling_groups.go``), which ``Nodes()`` (``aws_cloud_provider.go``) reports as instances with an
    ``OutOfResourcesErrorClass`` error; ``handleInstanceCreationErrorsForNodeGroup``
    (``cluster-autoscaler/clusterstate/clusterstate.go``) then takes them off the scale-up and registers a failed
    scale-up, which backs the group off. The refresh takes up to a minute and the activity's failure is taken as
    up to another: 120 s by default (bench/README.md's churn section). ``None``: the cloud says nothing, and the
    nodes beyond the room are given up only after ``max_node_provision_time``.

    A request not fulfilled ``max_node_provision_time`` seconds after the ask (``--max-node-provision-time``,
    15 minutes) is given up, all its missing nodes at once: the fallback when the cloud reports no error (a spot
    node asked within its pool's room always joins here, so with ``capacity_error_delay`` set it is never used).
    A group whose request is given up is backed off ``initial_backoff`` seconds, doubling with each failure in a
    row up to ``max_backoff`` (``--initial-node-group-backoff-duration`` 5 minutes,
    ``--max-node-group-backoff-duration`` 30 minutes, in ``cluster-autoscaler/config/flags/flags.go``); a node
    that joins ends the group's backoff."""

    max_node_provision_time: float = 900.0
    initial_backoff: float = 300.0
    max_backoff: float = 1_800.0
    capacity_error_delay: float | None = 120.0

    def give_up_after(self, spot: bool) -> float:
        """Seconds after the ask that a node of this capacity type not yet joined is given up."""
        if spot and self.capacity_error_delay is not None:
            return self.capacity_error_delay
        return self.max_node_provision_time

    def backoff(self, failures: int) -> float:
        """The backoff after ``failures`` failures in a row (at least one)."""
        return min(self.max_backoff, self.initial_backoff * 2.0 ** (failures - 1))


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """cluster-autoscaler's scale-down of under-used nodes, with its defaults: a node whose pods request less than
    ``utilization_threshold`` of its allocatable CPU and of its memory (``--scale-down-utilization-threshold``) for
    ``unneeded_time`` seconds (``--scale-down-unneeded-time``) is drained and removed when every pod on it may move
    by cluster-autoscaler's rules and fits another node; none is removed within ``delay_after_add`` seconds of a
    scale-up (``--scale-down-delay-after-add``)."""

    utilization_threshold: float = 0.5
    unneeded_time: float = 600.0
    delay_after_add: float = 600.0


class Provisioner:
    """cluster-autoscaler's behaviour as this benchmark models it: every 10 s, the pods kube-scheduler marked
    ``Unschedulable`` (placeholders included: their priority is above the expendable cutoff) that will not fit on
    the nodes already coming are packed (first fit, largest first) onto new nodes of the type that costs least for
    them (``expander`` below), spot where a pool with room allows the pods (their zone, their capacity-type
    selector), else on-demand; the nodes join ``delay`` seconds later (:func:`cheapest_nodes` decides). A node
    with no pod for ``removal_delay`` seconds (10 minutes by default) is removed.

    Three options make it cluster-autoscaler's own way (the churn day has all three; the replay worlds none).
    Without them the provisioner knows at once whether a spot pool has room (no failed attempt, no fallback delay),
    takes the cheapest option and never removes a node that still has pods. With ``scale_up_timeout``
    (:class:`ScaleUpTimeout`) it does not know a spot pool's room: it asks any pool not backed off, the nodes beyond
    the trace's limit do not come, the pods wait for them, and the cloud reports them missing after
    ``capacity_error_delay`` (or, when it says nothing, they are given up after ``max_node_provision_time``): they
    are given up and the pool backed off, so that the next scan packs the pods onto the next option. With
    ``expander`` (a generator seeded per scenario) the option is the one cluster-autoscaler's
    ``--expander=priority,least-waste`` takes (:func:`least_waste_nodes`) instead of the cheapest. With
    ``scale_down`` (:class:`ScaleDown`) a node whose pods use less than the threshold for long enough is drained
    through the Eviction API and removed, when its pods may all move and fit elsewhere (:meth:`remove_underused`).

    With ``refill`` (spot pool → desired node count: the *refill* world), the spot pools are node groups of a fixed
    size instead: the cluster starts with their nodes, a group below its count (a node reclaimed) gets new empty
    nodes, ``delay`` seconds later, as soon as the trace allows the pool that many, and its nodes are never removed
    for being empty; pending pods get on-demand nodes only (cluster-autoscaler on an on-demand group)."""

    def __init__(
        self,
        books: Books,
        delay: float,
        removal_delay: float = REMOVAL_DELAY,
        refill: dict[tuple[str, str], int] | None = None,
        scale_down: ScaleDown | None = None,
        scale_up_timeout: ScaleUpTimeout | None = None,
        expander: random.Random | None = None,
    ) -> None:
        self.books = books
        self.delay = delay
        self.removal_delay = removal_delay
        self.refill = dict(refill or {})
        self.scale_down = scale_down
        self.scale_up_timeout = scale_up_timeout
        self.expander = expander
        """With it, options are chosen by :func:`least_waste_nodes`, its ties drawn from it; else
        :func:`cheapest_nodes`."""
        self.coming: list[Coming] = []
        self.failures: dict[tuple[str, str], int] = {}
        """Spot pool → its scale-ups given up in a row (``scale_up_timeout`` only)."""
        self.backed_off: dict[tuple[str, str], float] = {}
        """Spot pool → until when it is not asked for nodes."""
        self.scanned = -math.inf
        self.scanned_down = -math.inf
        self.scaled_up = -math.inf
        """When the provisioner last asked for nodes."""
        self.unneeded: dict[str, float] = {}
        """Node → since when its pods have been under the scale-down threshold (``scale_down`` only)."""
        self.seen_version = -1
        """The view's version when the unneeded times were last brought up to date."""
        self.blocked: dict[str, int] = {}
        """Node → the cluster's change count when it last could not be drained (tried again once that changes)."""
        self.allowed: dict[tuple[str, str, bool], bool] = {}
        """(workload, or a pod's key for a Job pod or a placeholder; zone; spot) → :meth:`allows`."""

    def add_node(self, node_type: NodeType, zone: str, spot: bool) -> str:
        """The cloud's node of ``node_type`` in ``zone`` (spot or on-demand) joins the cluster; its name."""
        w = self.books
        name = f"{'spot' if spot else 'od'}-{zone[-1]}-{node_type.name.split('.')[1]}-{w.next_serial():05d}"
        labels = {
            "kubernetes.io/hostname": name,
            SPOT_LABEL: "spot" if spot else "on-demand",
            ZONE_LABEL: zone,
            TYPE_LABEL: node_type.name,
        }
        spec: Obj = {}
        if not spot and w.setup.prefer_no_schedule_on_demand:
            spec["taints"] = [{"key": "on-demand", "value": "true", "effect": "PreferNoSchedule"}]
        cpu = int(node_type.cpu_m * ALLOCATABLE_SHARE)
        memory = int(node_type.memory_mi * ALLOCATABLE_SHARE)
        w.server.put(
            "nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": {
                    "allocatable": {"cpu": f"{cpu}m", "memory": f"{memory}Mi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        w.nodes[name] = NodeBook(name, node_type, zone, spot, w.now)
        return name

    def next_removal(self) -> float:
        """When the first empty node is removed if it stays empty, or the first under-used one may be (infinity:
        none)."""
        at = min(
            (b.empty_since + self.removal_delay for b in self.books.nodes.values() if b.empty_since is not None),
            default=math.inf,
        )
        rules = self.scale_down
        if rules is not None and self.unneeded:
            now = self.books.now
            due = [since + rules.unneeded_time for since in self.unneeded.values()]
            at = min([at, *(t for t in due if t > now)])
            if any(t <= now for t in due) and self.scaled_up + rules.delay_after_add > now:
                at = min(at, self.scaled_up + rules.delay_after_add)
        return at

    def allows(self, p: Pod, zone: str, spot: bool) -> bool:
        """Whether a new node of this zone and capacity type could take ``p`` (its selector, affinity and volumes;
        the same for every pod of a workload, so asked once per workload)."""
        book = self.books.pods.get(p.key)
        key = (book.workload if book is not None and not book.job else p.key, zone, spot)
        known = self.allowed.get(key)
        if known is None:
            known = self.allowed[key] = self._allows_now(p, zone, spot)
        return known

    def _allows_now(self, p: Pod, zone: str, spot: bool) -> bool:
        w = self.books
        probe = NodeInfo(_probe_node(zone, spot, w.setup.prefer_no_schedule_on_demand))
        snap = ClusterSnapshot(pvs=w.view.pvs.values(), pvcs=w.view.pvcs.values())
        snap.nodes[probe.name] = probe
        return not any(
            r
            for r in fits(p, probe, snap, check_node_ready=False)
            if r.code not in (ERR_INSUFFICIENT, ERR_TOO_MANY_PODS)
        )

    def join(self) -> None:
        """The nodes whose delay is over join the cluster (before kube-scheduler's turn in the tick: a pod waiting
        for a node is bound to it before the next scan looks for pods that need one). With ``scale_up_timeout`` a
        spot node joins only while its pool has room under the trace's limit, and is given up at its deadline, its
        pool backed off."""
        w = self.books
        rules = self.scale_up_timeout
        limits = w.trace.limits_at(w.now) if rules is not None else {}
        failed: set[tuple[str, str]] = set()
        for item in [c for c in self.coming if c.at <= w.now]:
            pool = (item.zone, item.node_type.name)
            if rules is not None and item.spot and self._live(pool) >= limits[pool]:
                if w.now >= item.give_up:
                    failed.add(pool)
                continue
            self.coming.remove(item)
            self.add_node(item.node_type, item.zone, item.spot)
            if item.spot:
                self.failures.pop(pool, None)
                self.backed_off.pop(pool, None)
        for pool in sorted(failed):
            assert rules is not None
            # The pool's whole request is given up (its missing nodes all go): one failure.
            self.coming = [c for c in self.coming if not (c.spot and (c.zone, c.node_type.name) == pool)]
            self.failures[pool] = self.failures.get(pool, 0) + 1
            self.backed_off[pool] = w.now + rules.backoff(self.failures[pool])

    def _live(self, pool: tuple[str, str]) -> int:
        return sum(
            1 for b in self.books.nodes.values() if b.spot and b.ends_at is None and (b.zone, b.node_type.name) == pool
        )

    def fill(self) -> None:
        """The refill world's start: every spot group at its desired count."""
        types = {nt.name: nt for nt in self.books.node_types}
        for (zone, type_name), n in sorted(self.refill.items()):
            for _ in range(n):
                self.add_node(types[type_name], zone, True)

    def _refill(self) -> None:
        w = self.books
        limits = w.trace.limits_at(w.now)
        types = {nt.name: nt for nt in w.node_types}
        for (zone, type_name), desired in sorted(self.refill.items()):
            have = sum(
                1
                for b in w.nodes.values()
                if b.spot and b.ends_at is None and b.zone == zone and b.node_type.name == type_name
            )
            have += sum(1 for c in self.coming if c.spot and c.zone == zone and c.node_type.name == type_name)
            for _ in range(max(0, min(desired, limits[(zone, type_name)]) - have)):
                self.coming.append(Coming(w.now + self.delay, types[type_name], zone, True))

    def step(self) -> None:
        w = self.books
        self._scale_down()
        if self.refill:
            self._refill()
        if w.now - self.scanned < 10.0:
            return
        self.scanned = w.now
        # The view was brought up to date just before: its pods without a node are the API server's unbound ones
        # (their order does not matter: the scale-up sorts them).
        store = w.server.store["pods"]
        waiting = [
            p
            for key in w.server.unbound
            if (p := w.view.pods.get(key)) is not None
            and not p.node_name
            and not p.terminal
            and _unschedulable_marked(store.get(key))
        ]
        if waiting:
            self._scale_up(waiting)

    def _scale_down(self) -> None:
        w = self.books
        busy = {name for name, pods in w.view.by_node.items() if pods}
        for name, book in list(w.nodes.items()):
            if name in busy or book.ends_at is not None or (book.spot and self.refill):
                book.empty_since = None
                continue
            if book.empty_since is None:
                book.empty_since = w.now
            elif w.now - book.empty_since >= self.removal_delay:
                w.server.remove("nodes", name)
                del w.nodes[name]

    def _scale_up(self, waiting: list[Pod]) -> None:
        room = [
            [c.node_type.cpu_m * ALLOCATABLE_SHARE, c.node_type.memory_mi * ALLOCATABLE_SHARE, c.zone, c.spot]
            for c in self.coming
        ]
        for group in groups_to_add(waiting, room, self.allows):
            self._add_for(group)

    def _add_for(self, pods: list[Pod]) -> None:
        w = self.books
        limits = w.trace.limits_at(w.now)
        counts: dict[tuple[str, str], int] = {}
        for book in w.nodes.values():
            if book.spot and book.ends_at is None:
                counts[(book.zone, book.node_type.name)] = counts.get((book.zone, book.node_type.name), 0) + 1
        for c in self.coming:
            if c.spot:
                counts[(c.zone, c.node_type.name)] = counts.get((c.zone, c.node_type.name), 0) + 1
        sample = pods[0]
        zones = {spot: [z for z in ZONES if self.allows(sample, z, spot)] for spot in (True, False)}
        spot_room = self._spot_room(limits, counts)
        if self.expander is not None:
            choice = least_waste_nodes([_req(p) for p in pods], w.node_types, spot_room, zones, self.expander)
        else:
            choice = cheapest_nodes(
                [_req(p) for p in pods],
                w.node_types,
                spot_room=spot_room,
                zones=zones,
                zone_nodes={z: sum(1 for b in w.nodes.values() if b.zone == z) for z in ZONES},
                prices={pool: w.price_share(*pool) for pool in limits},
            )
        if choice is None:
            return
        self.scaled_up = w.now
        nt, zone, n, spot = choice
        rules = self.scale_up_timeout
        give_up = w.now + rules.give_up_after(spot) if rules is not None else math.inf
        for _ in range(n):
            self.coming.append(Coming(w.now + self.delay, nt, zone, spot, give_up))

    def _spot_room(
        self, limits: dict[tuple[str, str], int], counts: dict[tuple[str, str], int]
    ) -> dict[tuple[str, str], int]:
        """The nodes the provisioner may ask of each spot pool: none in the refill world; with
        ``scale_up_timeout`` as many as it likes of every pool not backed off (it cannot know the cloud's room, a
        pool the trace cut to zero included); else the room the trace leaves."""
        if self.refill:
            return dict.fromkeys(limits, 0)
        if self.scale_up_timeout is not None:
            now = self.books.now
            return {pool: 0 if self.backed_off.get(pool, -math.inf) > now else ASK for pool in limits}
        return {pool: limits[pool] - counts.get(pool, 0) for pool in limits}

    # ---- cluster-autoscaler's scale-down of under-used nodes ----------------------------------------------------

    def remove_underused(self) -> None:
        """The scale-down of under-used nodes (with ``scale_down``), every 10 s, early in the tick: the
        controllers replace the evicted pods and kube-scheduler places them in the same tick."""
        if self.scale_down is None or self.books.now - self.scanned_down < 10.0:
            return
        self.scanned_down = self.books.now
        self._remove_underused(self.scale_down)

    def _remove_underused(self, rules: ScaleDown) -> None:
        """Every node's unneeded time kept; then, outside the delay after a scale-up, the least used node unneeded
        long enough that can be drained is drained and removed: one a scan (cluster-autoscaler drains one non-empty
        node at a time)."""
        w = self.books
        if w.view.version != self.seen_version:  # else no node or pod changed: every node is as needed as it was
            self.seen_version = w.view.version
            self._unneeded_now(rules)
        if w.now - self.scaled_up < rules.delay_after_add:
            return
        changes = sum(len(w.server.log[k]) for k in ("nodes", "pods", "pdbs"))
        ripe = sorted(
            (utilization(w.view.nodes[name], w.view.by_node[name].values()), name)
            for name, since in self.unneeded.items()
            if w.now - since >= rules.unneeded_time
            and self.blocked.get(name) != changes
            and name in w.nodes
            and w.nodes[name].ends_at is None  # under a notice or gone since the view was last brought up to date
        )
        snap = w.view.snapshot() if ripe else None
        for _, name in ripe:
            assert snap is not None
            if self._drain(name, snap):
                return
            self.blocked[name] = changes

    def _unneeded_now(self, rules: ScaleDown) -> None:
        """Every node's unneeded time: since when its pods have been under the threshold (empty nodes and nodes
        under a reclaim notice are not counted: the former are removed after ``removal_delay``)."""
        w = self.books
        for name, book in w.nodes.items():
            pods = w.view.by_node.get(name)
            node = w.view.nodes.get(name)
            if not pods or node is None or book.ends_at is not None or (book.spot and self.refill):
                self.unneeded.pop(name, None)
            elif utilization(node, pods.values()) < rules.utilization_threshold:
                self.unneeded.setdefault(name, w.now)
            else:
                self.unneeded.pop(name, None)
        for name in [n for n in self.unneeded if n not in w.nodes]:
            del self.unneeded[name]

    def _drain(self, name: str, snap: ClusterSnapshot) -> bool:
        """Drain ``name`` through the Eviction API and remove it, if its pods may all move and fit elsewhere
        (``snap`` is left as it was when they do not)."""
        w = self.books
        pods = sorted(snap.nodes[name].pods, key=lambda p: (-p.node_requests.get("cpu", 0), p.key))
        if any(not movable_by_autoscaler(p) for p in pods) or not self._budgets_allow(pods):
            return False
        if not fit_elsewhere(name, pods, snap):
            return False
        w.evictor = AUTOSCALER
        try:
            for p in pods:
                try:
                    w.server.request(
                        "POST",
                        f"/api/v1/namespaces/{p.namespace}/pods/{p.name}/eviction",
                        body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": p.name}},
                    )
                except ApiError:
                    return False  # the drain fails; the node stays and is tried again after a change
        finally:
            w.evictor = ""
        w.server.remove("nodes", name)
        w.nodes.pop(name, None)
        self.unneeded.pop(name, None)
        return True

    def _budgets_allow(self, pods: list[Pod]) -> bool:
        """cluster-autoscaler's budget check: every budget allows as many disruptions as it selects pods here."""
        for pdb in self.books.view.pdbs.values():
            n = sum(1 for p in pods if pdb.selects(p))
            if n and pdb.disruptions_allowed < n:
                return False
        return True


def utilization(node: Node, pods: Iterable[Pod]) -> float:
    """cluster-autoscaler's utilization of a node: the larger of its pods' CPU and memory requests as a share of
    its allocatable."""
    cpu = mem = 0
    for p in pods:
        cpu += p.node_requests.get("cpu", 0)
        mem += p.node_requests.get("memory", 0)
    return max(cpu / (node.allocatable.get("cpu", 0) or 1), mem / (node.allocatable.get("memory", 0) or 1))


def movable_by_autoscaler(p: Pod) -> bool:
    """cluster-autoscaler's drain rules for one pod: it has a controller, no local storage, and is not marked
    ``safe-to-evict: "false"``."""
    if p.controller is None or p.annotations.get(SAFE_TO_EVICT) == "false":
        return False
    return not any(v.kind in LOCAL_STORAGE for v in p.volumes)


def fit_elsewhere(name: str, pods: list[Pod], snap: ClusterSnapshot) -> bool:
    """Whether ``pods`` (all of node ``name``'s) fit the other nodes, each by kube-scheduler's filters
    (:func:`shared.fit.fits`) after the earlier ones, first fit; ``snap`` is left as it was."""
    moved: list[Pod] = []
    ok = True
    for p in pods:
        cpu = p.node_requests.get("cpu", 0)
        snap.remove_pod(p)
        target = next(
            (
                other
                for other, info in snap.nodes.items()
                if other != name and info.free("cpu") >= cpu and not fits(p, info, snap, first_only=True)
            ),
            None,
        )
        if target is None:
            snap.add_pod(p)
            ok = False
            break
        moved.append(snap.add_pod(p, target))
    for m, p in zip(moved, pods, strict=False):
        snap.remove_pod(m)
        snap.add_pod(p)
    return ok


def cheapest_nodes(
    requests: list[tuple[int, int]],
    node_types: Iterable[NodeType],
    *,
    spot_room: dict[tuple[str, str], int],
    zones: dict[bool, list[str]],
    zone_nodes: dict[str, int],
    prices: dict[tuple[str, str], float],
) -> tuple[NodeType, str, int, bool] | None:
    """The provisioner's choice for one group of pending pods (``requests``: CPU millicores and MiB each, pods
    that may go to the same nodes): ``(node type, zone, how many nodes, spot)`` at the least price. The pods are
    packed first fit onto nodes of each type; spot where a pool of an allowed zone has room (``spot_room``), as
    many nodes as it has left (the pods it cannot take wait for the next scan), at the pool's price (``prices``: a
    share of on-demand), else on-demand; among the options of one price, the larger type, then spot, then the zone
    with the most room, then the fewest nodes (``zone_nodes``), among those allowed (``zones[spot]``). ``None`` when
    nothing fits."""
    options = []
    for nt, n, z, room, spot in _options(requests, node_types, spot_room, zones):
        price = nt.price * n * (prices.get((z, nt.name), 1.0) if spot else 1.0)
        options.append((price, -nt.cpu_m, nt.name, not spot, -room, zone_nodes.get(z, 0), z, nt, room, spot))
    if not options:
        return None
    *_, zone, nt, n, spot = min(options)
    return nt, zone, n, spot


def least_waste_nodes(
    requests: list[tuple[int, int]],
    node_types: Iterable[NodeType],
    spot_room: dict[tuple[str, str], int],
    zones: dict[bool, list[str]],
    rng: random.Random,
) -> tuple[NodeType, str, int, bool] | None:
    """The provisioner's choice for one group of pending pods as cluster-autoscaler makes it with
    ``--expander=priority,least-waste`` and the spot groups at the higher priority: the options are those of
    :func:`cheapest_nodes` (spot where a pool of an allowed zone has room, else on-demand); the spot options if
    any, else the on-demand ones (``priority``); among them the least waste (``least-waste``: the idle share of
    the new nodes' CPU plus that of their memory once the pods are on them, as
    ``cluster-autoscaler/expander/waste/waste.go`` scores it); the ties (the zones of one type among them)
    broken by ``rng``, as cluster-autoscaler breaks the expanders' last ties at random. No price is read: the
    ``price`` expander works on GCE, GKE and Equinix Metal only (``cluster-autoscaler/FAQ.md``). ``None`` when
    nothing fits."""
    cpu = sum(c for c, _ in requests)
    mem = sum(m for _, m in requests)
    scored = []
    for nt, n, z, room, spot in _options(requests, node_types, spot_room, zones):
        cap_c, cap_m = nt.cpu_m * ALLOCATABLE_SHARE * n, nt.memory_mi * ALLOCATABLE_SHARE * n
        waste = round((cap_c - cpu) / cap_c + (cap_m - mem) / cap_m, 9)
        scored.append(((not spot, waste), (nt.name, z), (nt, z, room, spot)))
    if not scored:
        return None
    best = min(key for key, _, _ in scored)
    ties = [option for key, _, option in sorted(scored, key=lambda s: s[1]) if key == best]
    nt, zone, n, spot = rng.choice(ties)
    return nt, zone, n, spot


def _options(
    requests: list[tuple[int, int]],
    node_types: Iterable[NodeType],
    spot_room: dict[tuple[str, str], int],
    zones: dict[bool, list[str]],
) -> Iterable[tuple[NodeType, int, str, int, bool]]:
    """Every option for the pods: (node type, nodes the pods need, zone, nodes that may be asked, spot)."""
    for nt in node_types:
        n = _pack(requests, nt)
        if n is None:
            continue
        for spot in (True, False):
            for z in zones[spot]:
                room = min(n, spot_room.get((z, nt.name), 0)) if spot else n
                if room >= 1:
                    yield nt, n, z, room, spot


def groups_to_add(
    waiting: list[Pod], room: list[list[Any]], allows: Callable[[Pod, str, bool], bool]
) -> list[list[Pod]]:
    """The provisioner's first step: the waiting pods that the nodes already coming (``room``: free CPU, free MiB,
    zone, spot each; used up in place) cannot take, largest first, grouped by where a new node could take them
    (``allows(pod, zone, spot)``), groups in a stable order."""
    left: list[Pod] = []
    for p in sorted(waiting, key=lambda p: (-p.node_requests.get("cpu", 0), p.key)):
        cpu, mem = _req(p)
        for r in room:
            if r[0] >= cpu and r[1] >= mem and allows(p, r[2], r[3]):
                r[0] -= cpu
                r[1] -= mem
                break
        else:
            left.append(p)
    groups: dict[tuple[str, ...], list[Pod]] = {}
    for p in left:
        where = tuple(f"{z}:{int(s)}" for z in ZONES for s in (True, False) if allows(p, z, s))
        groups.setdefault(where, []).append(p)
    return [groups[key] for key in sorted(groups)]


def _req(p: Pod) -> tuple[int, int]:
    return p.node_requests.get("cpu", 0), p.node_requests.get("memory", 0) // (1 << 20)


def _pack(requests: Iterable[tuple[int, int]], nt: NodeType) -> int | None:
    cap_c, cap_m = nt.cpu_m * ALLOCATABLE_SHARE, nt.memory_mi * ALLOCATABLE_SHARE
    bins: list[list[float]] = []
    for cpu, mem in requests:
        if cpu > cap_c or mem > cap_m:
            return None
        for b in bins:
            if b[0] >= cpu and b[1] >= mem:
                b[0] -= cpu
                b[1] -= mem
                break
        else:
            bins.append([cap_c - cpu, cap_m - mem])
    return len(bins)


_PROBES: dict[tuple[str, bool, bool], Node] = {}


def _probe_node(zone: str, spot: bool, prefer_no_schedule_on_demand: bool) -> Node:
    key = (zone, spot, prefer_no_schedule_on_demand)
    node = _PROBES.get(key)
    if node is None:
        node = Node.from_api(
            {
                "metadata": {
                    "name": f"probe-{zone}-{int(spot)}",
                    "labels": {SPOT_LABEL: "spot" if spot else "on-demand", ZONE_LABEL: zone},
                },
                "spec": {},
                "status": {"allocatable": {"cpu": "1000", "memory": "1000Gi", "pods": "1000"}},
            }
        )
        _PROBES[key] = node
    return node


def _unschedulable_marked(obj: Obj | None) -> bool:
    if obj is None:
        return False
    return any(c.get("reason") == "Unschedulable" for c in (obj.get("status") or {}).get("conditions") or ())
