"""The books every actor of the simulated cluster shares: the in-memory API server, the simulated clock, the nodes
and pods the world keeps track of (:class:`NodeBook`, :class:`PodBook`), the Jobs' progress and the day's figures
(:class:`Tally`).

:class:`Books` holds them and the few operations more than one actor makes on them (booking a pod, deleting one,
counting an eviction). Each actor (the spot market, the controllers, kube-scheduler, the kubelets, the disruption
controller, the provisioner) reads and writes the cluster through them; :class:`bench.churnlab.world.World` ties
the actors together.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.churnlab.scenario import NodeType, Trace, Workload
from rescheduler.cluster.watch_cache import KINDS, ClusterState
from tests.support.fake_api import FakeApiServer, namespace

Obj = dict[str, Any]

SPOT_LABEL = "karpenter.sh/capacity-type"
RECLAIM_TAINT = "aws-node-termination-handler/spot-itn"
ZONE_LABEL = "topology.kubernetes.io/zone"
TYPE_LABEL = "node.kubernetes.io/instance-type"
STORE = {"poddisruptionbudgets": "pdbs"}

AUTOSCALER = "autoscaler"
""":attr:`Books.evictor` while the provisioner drains a node (cluster-autoscaler's scale-down)."""

PRIORITY_CLASSES = {"spotshift-placeholder": -5}
"""The PriorityClasses deploy/ ships (the placeholders' class: value -5, ``preemptionPolicy: Never``)."""


@dataclass(frozen=True, slots=True)
class Setup:
    """What the cluster runs besides the workloads: the webhook, the extender, and pusher's recommended
    ``PreferNoSchedule`` taint on on-demand nodes."""

    webhook: bool = False
    extender: bool = False
    prefer_no_schedule_on_demand: bool = False


@dataclass(slots=True)
class NodeBook:
    name: str
    node_type: NodeType
    zone: str
    spot: bool
    born: float
    ends_at: float | None = None
    empty_since: float | None = None


@dataclass(slots=True)
class PodBook:
    workload: str
    created: float
    bound_at: float | None = None
    ready: bool = False
    worked: float = 0.0
    job: str = ""
    node: str | None = None
    moved: bool = False
    """Created as the replacement of a pod a policy evicted (see :meth:`Books.book`)."""


@dataclass(slots=True)
class Tally:
    """The day's figures, accumulated per tick (seconds and counts)."""

    on_demand_node_seconds: float = 0.0
    spot_node_seconds: float = 0.0
    cost_seconds: float = 0.0
    """Σ price per hour × seconds (divide by 3,600 for dollars)."""
    pod_seconds: float = 0.0
    pod_seconds_on_spot: float = 0.0
    pending_pod_seconds: float = 0.0
    pod_count_seconds: float = 0.0
    evictions: int = 0
    """Pods the policy evicted."""
    autoscaler_evictions: int = 0
    """Pods the autoscaler evicted to remove an under-used node."""
    reclaimed_pods: int = 0
    moved_then_reclaimed: int = 0
    """Pods reclaimed with their spot node after a move: replacements of pods a policy evicted (reclaims are not
    evictions), so each is a second disruption the move led to."""
    pdb_violations: int = 0
    lost_pods: int = 0
    """Pods found missing once the controllers had their turn: a Deployment or StatefulSet short of its replicas,
    or a pod the world created that left the API server without the world deleting or seeing it evicted. Each pod
    once, however long it stays missing."""
    job_work_lost_seconds: float = 0.0
    on_demand_series: list[tuple[float, int]] = field(default_factory=list)
    spot_series: list[tuple[float, int]] = field(default_factory=list)
    eligible_on_demand: list[tuple[float, int]] = field(default_factory=list)
    """(t, spot-eligible workload pods on on-demand nodes), sampled every minute."""
    on_demand_steps: list[tuple[float, int]] = field(default_factory=list)
    """(t, on-demand nodes) at every change of that count: exact, where ``on_demand_series`` is sampled at the first
    tick a minute or more after the last sample (far apart when nothing happens)."""
    capacity_breaches: int = 0


class Books:
    """The shared state of one policy's cluster; see the module docstring. Creating the books creates the
    ``default`` and ``spotshift`` namespaces."""

    def __init__(
        self,
        *,
        seed: int,
        workloads: list[Workload],
        trace: Trace,
        setup: Setup,
        spot_fraction: float,
        node_types: tuple[NodeType, ...],
        start: float,
        spot_prices: dict[tuple[str, str], float] | None = None,
    ) -> None:
        self.server = ApiServer(self)
        self.rng = random.Random(seed * 7_919 + 17)
        """The cluster's one source of chance: the CronJobs' first runs, then kube-scheduler's ties."""
        self.workloads = {w.name: w for w in workloads}
        self.trace = trace
        self.setup = setup
        self.spot_fraction = spot_fraction
        self.spot_prices = dict(spot_prices or {})
        """Spot pool (zone, node type) → its price as a share of on-demand (a pool not named: ``spot_fraction``)."""
        self.node_types = node_types
        self.now = start
        self.view = ClusterState()
        """kube-scheduler's and the provisioner's view of the cluster (fed from the change log, as a watch)."""
        self.applied: dict[str, int] = {kind.name: 0 for kind in KINDS}
        self.nodes: dict[str, NodeBook] = {}
        self.pods: dict[str, PodBook] = {}
        """The workloads' pods (placeholders have no book)."""
        self.owned: dict[str, set[str]] = {}
        """Controller (workload or Job) → the keys of its pods."""
        self.starting: set[str] = set()
        """Bound pods not Ready yet."""
        self.working: set[str] = set()
        """Job pods (their work counts while they are bound)."""
        self.jobs: dict[str, tuple[str, int, int]] = {}
        """Job name → (CronJob, pods still to succeed, pods created so far)."""
        self.moving: dict[str, int] = {}
        """Controller → its pods evicted by the policy that no pod created since has replaced yet."""
        self.serial = 0
        """The last number given to a node or a controller's object name."""
        self.tally = Tally()
        self.evictor = ""
        """Who evicts now: ``""`` the policy, :data:`AUTOSCALER` the provisioner."""
        self.server.on_evict = self.evicted
        for ns in ("default", "spotshift"):
            self.server.put("namespaces", namespace(ns))

    def price_share(self, zone: str, node_type: str) -> float:
        """A spot node's price in pool (``zone``, ``node_type``) as a share of its on-demand price."""
        return self.spot_prices.get((zone, node_type), self.spot_fraction)

    def counting(self) -> bool:
        """Whether the figures count now (the day, not the warm-up before it)."""
        return self.now >= 0.0

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial

    def book(self, key: str, book: PodBook) -> None:
        """Track a pod its controller created. Each eviction of a pod of a controller marks the next pod that
        controller creates as moved, one for one."""
        owner = book.job or book.workload
        if self.moving.get(owner):
            self.moving[owner] -= 1
            book.moved = True
        self.pods[key] = book
        self.owned.setdefault(owner, set()).add(key)

    def unbook(self, key: str) -> PodBook | None:
        book = self.pods.pop(key, None)
        if book is not None:
            self.owned[book.job or book.workload].discard(key)
        return book

    def delete_pod(self, key: str) -> None:
        """Delete a pod; a Job pod's work done so far is lost."""
        book = self.unbook(key)
        if book is not None and book.job and key in self.server.store["pods"]:
            self.tally.job_work_lost_seconds += book.worked if self.counting() else 0.0
        self.server.remove("pods", key)

    def evicted(self, pod: Obj) -> None:
        """The API server's word that it evicted ``pod``."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        book = self.unbook(key)
        if book is None:
            return  # a placeholder
        owner = book.job or book.workload
        self.moving[owner] = self.moving.get(owner, 0) + 1
        if self.counting():
            if self.evictor == AUTOSCALER:
                self.tally.autoscaler_evictions += 1
            else:
                self.tally.evictions += 1
            if book.job:
                self.tally.job_work_lost_seconds += book.worked

    def job_pod_succeeded(self, key: str, job: str) -> None:
        """A Job pod did its work: one pod fewer for its Job to run, and the pod goes."""
        cron, left, made = self.jobs[job]
        self.jobs[job] = (cron, left - 1, made)
        self.unbook(key)
        self.working.discard(key)
        self.server.remove("pods", key)

    def sync(self, state: ClusterState) -> None:
        """Apply the API server's changes since the last sync to ``state`` (the world's view)."""
        sync_state(self.server, state, self.applied)


class ApiServer(FakeApiServer):
    """The in-memory API server, counting each eviction it lets through although the pod's budget, judged from
    the pods themselves (``breaks_budget``, the disruption controller's judgement), did not allow it (the status
    it read was stale)."""

    def __init__(self, books: Books) -> None:
        super().__init__()
        self.books = books
        self.breaks_budget: Callable[[Obj], bool] = lambda pod: False
        """Whether evicting a pod now breaks its budget."""
        self.unbound: set[str] = set()
        """Pods without a node (kube-scheduler's queue)."""
        self.pods_changed = True
        """A pod was written or deleted since the disruption controller last looked."""
        self.budgets_of: dict[tuple[str, frozenset[tuple[str, str]]], list[str]] = {}
        """(namespace, labels) → the keys of the budgets selecting such a pod; emptied when a budget is added,
        removed or its spec replaced."""

    def _copy(self, obj: Any) -> Any:
        """The object itself: the simulation replaces objects and never changes one in place."""
        return obj

    def _pdbs_for(self, pod: Obj) -> list[Obj]:
        """As the in-memory server's, the selectors matched once per namespace and set of labels."""
        meta = pod["metadata"]
        key = (meta.get("namespace") or "default", frozenset((meta.get("labels") or {}).items()))
        keys = self.budgets_of.get(key)
        if keys is None:
            keys = self.budgets_of[key] = [self._key(b, "pdbs") for b in super()._pdbs_for(pod)]
        return [self.store["pdbs"][k] for k in keys]

    def put(self, kind: str, obj: Obj, event: str | None = None) -> Obj:
        """As the in-memory server's, without its deep copies: the simulation replaces objects and never changes
        one in place, and every reader only parses what it gets. A pod naming a PriorityClass gets its value as
        ``spec.priority`` (the API server's Priority admission plugin)."""
        spec = obj.get("spec") or {}
        if kind == "pods" and "priority" not in spec and spec.get("priorityClassName") in PRIORITY_CLASSES:
            obj = {**obj, "spec": {**spec, "priority": PRIORITY_CLASSES[spec["priorityClassName"]]}}
        with self.cond:
            meta = {**obj.get("metadata", {})}
            obj = {**obj, "metadata": meta}
            meta.setdefault("uid", f"uid-{next(self._uid)}")
            meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
            meta.setdefault("generation", 1)
            rv = next(self.rv)
            self.last_rv = rv
            meta["resourceVersion"] = str(rv)
            key = self._key(obj, kind)
            old = self.store[kind].get(key)
            etype = event or ("MODIFIED" if old is not None else "ADDED")
            if kind == "pdbs" and (old is None or old.get("spec") is not obj.get("spec")):
                self.budgets_of.clear()
            self.store[kind][key] = obj
            self.log[kind].append((rv, etype, obj))
            if kind == "pods":
                self.pods_changed = True
                if obj["spec"].get("nodeName"):
                    self.unbound.discard(key)
                else:
                    self.unbound.add(key)
            return obj

    def remove(self, kind: str, key: str) -> None:
        with self.cond:
            obj = self.store[kind].pop(key, None)
            if obj is None:
                return
            if kind == "pdbs":
                self.budgets_of.clear()
            rv = next(self.rv)
            self.last_rv = rv
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
            self.log[kind].append((rv, "DELETED", obj))
        if kind == "pods":
            self.pods_changed = True
            self.unbound.discard(key)

    def _evict(self, namespace: str, name: str, body: Any) -> Obj:
        pod = self.store["pods"].get(f"{namespace}/{name}")
        violates = pod is not None and self.breaks_budget(pod)
        out = super()._evict(namespace, name, body)
        if violates and self.books.counting():
            self.books.tally.pdb_violations += 1
        return out


def sync_state(server: FakeApiServer, state: ClusterState, applied: dict[str, int]) -> None:
    """Apply ``server``'s change log past ``applied`` to ``state``, as its watches would."""
    for kind in KINDS:
        log = server.log[STORE.get(kind.name, kind.name)]
        start = applied[kind.name]
        for _, etype, obj in log[start:]:
            state.apply(kind, etype, obj)
        applied[kind.name] = len(log)
        state.synced.add(kind.name)
