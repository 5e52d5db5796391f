"""The simulated cluster around a policy: an in-memory API server and the actors a real cluster has.

Everything is stored as API objects in :class:`tests.unit.fake_api.FakeApiServer` (which answers evictions by the
PodDisruptionBudgets as the API server does), so the rescheduler's own run loop works against it unchanged. Played
each tick (``World.tick``), in this order:

* the **spot market**: a pool whose limit falls below its nodes gives the newest of them a two-minute notice (the
  termination handler's ``aws-node-termination-handler/spot-itn`` taint) and deletes them, with their pods, when it
  runs out;
* the **controllers**: Deployments follow the demand curve every five minutes (a scale-down deletes unbound pods
  first, then the newest), StatefulSets keep their replicas (same names, the same zonal volume), CronJobs start a Job
  on schedule whose pods work ``runs_for`` seconds once Running (an evicted one starts again from zero);
* the **webhook** (policies that have it): every pod created goes through :func:`extender.admission.mutate_pod`;
* **kube-scheduler**: pending pods in queue order (priority, then age), each filtered by :func:`shared.fit.fits`
  (and, with the extender, by its filter) and scored by kube-scheduler's default score plugins that apply here
  (``NodeResourcesFit`` least-allocated, ``NodeResourcesBalancedAllocation``, ``NodeAffinity``,
  ``TaintToleration``; weights 1, 1, 2, 3) plus the extender's score (weight 5, as ``deploy/scheduler`` sets it);
  ties broken at random (seeded), as ``selectHost`` does; a pod that fits nowhere preempts lower-priority pods
  (spotshift's placeholders) where that makes room, else is marked ``Unschedulable``;
* the **kubelets**: a bound pod is Running at once and Ready ``ready_after`` seconds later;
* the **disruption controller**: every budget's status from the Ready pods;
* the **provisioner** (cluster-autoscaler's behaviour as the issue describes it; see ``Provisioner``): the nodes
  whose provisioning delay is over join before kube-scheduler's turn (so the pods they were added for are bound
  to them before the provisioner looks for pending pods again), its scan comes last.

Figures are accumulated per tick over the day (:class:`Tally`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.churnlab.scenario import (
    ALLOCATABLE_SHARE,
    NODE_TYPES,
    SCALE_EVERY,
    ZONES,
    NodeType,
    Trace,
    Workload,
    replicas,
)
from extender.admission import MutationPolicy, mutate_pod
from extender.scheduling import ExtenderPolicy, reduce_node
from rescheduler.cluster.watch_cache import KINDS, ClusterState
from shared.config import Config
from shared.fit import fits
from shared.fit_reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS
from shared.model import Node, Pod
from shared.nodeaffinity import preferred_affinity_score
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.taints import count_intolerable_prefer_no_schedule
from tests.support.fake_api import FakeApiServer, namespace

Obj = dict[str, Any]

SPOT_LABEL = "karpenter.sh/capacity-type"
RECLAIM_TAINT = "aws-node-termination-handler/spot-itn"
NOTICE = 120.0
"""Seconds between a spot reclaim notice and the node's end (the default of ``World(notice=...)``)."""
REMOVAL_DELAY = 600.0
"""Seconds a node stays empty before the provisioner removes it (the default of ``World(removal_delay=...)``)."""
STORE = {"poddisruptionbudgets": "pdbs"}

PRIORITY_CLASSES = {"spotshift-placeholder": -5}
"""The PriorityClasses deploy/ ships (the placeholders' class: value -5, ``preemptionPolicy: Never``)."""

ZONE_LABEL = "topology.kubernetes.io/zone"
TYPE_LABEL = "node.kubernetes.io/instance-type"


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
    reclaimed_pods: int = 0
    pdb_violations: int = 0
    lost_pods: int = 0
    """Pods found missing once the controllers had their turn: a Deployment or StatefulSet short of its replicas,
    or a pod the world created that left the API server without the world deleting or seeing it evicted."""
    job_work_lost_seconds: float = 0.0
    on_demand_series: list[tuple[float, int]] = field(default_factory=list)
    spot_series: list[tuple[float, int]] = field(default_factory=list)
    eligible_on_demand: list[tuple[float, int]] = field(default_factory=list)
    """(t, spot-eligible workload pods on on-demand nodes), sampled every minute."""
    capacity_breaches: int = 0


class World:
    """The cluster of one policy's run; see the module docstring."""

    def __init__(
        self,
        *,
        seed: int,
        workloads: list[Workload],
        trace: Trace,
        setup: Setup,
        config: Config,
        spot_fraction: float,
        ready_after: float = 20.0,
        provision_delay: float = 90.0,
        removal_delay: float = REMOVAL_DELAY,
        notice: float = NOTICE,
        node_types: tuple[NodeType, ...] = NODE_TYPES,
        start: float = 0.0,
        check: bool = False,
    ) -> None:
        self.check = check
        """Check every tick that no node holds more than its allocatable (the property tests; costs time)."""
        self.server = _Server(self)
        self.rng = random.Random(seed * 7_919 + 17)
        self.workloads = {w.name: w for w in workloads}
        self.trace = trace
        self.setup = setup
        self.spot_fraction = spot_fraction
        self.ready_after = ready_after
        self.notice = notice
        self.node_types = node_types
        self.now = start
        self.view = ClusterState()
        """kube-scheduler's and the provisioner's view of the cluster (fed from the change log, as a watch)."""
        self.applied: dict[str, int] = {kind.name: 0 for kind in KINDS}
        self.nodes: dict[str, NodeBook] = {}
        self.pods: dict[str, PodBook] = {}
        self.owned: dict[str, set[str]] = {}
        """Controller (workload or Job) → the keys of its pods."""
        self.allows: dict[tuple[str, str, bool], bool] = {}
        self.scores: dict[tuple[Any, str], int] = {}
        self.entries: dict[str, tuple[str | None, tuple[bool, int]]] = {}
        self.last_pass = -1
        """:meth:`_scheduling_inputs` after kube-scheduler's last pass over the pending pods."""
        """The extender's answer per node name, with the resourceVersion of the Node it was computed from."""
        self.starting: set[str] = set()
        """Bound pods not Ready yet."""
        self.working: set[str] = set()
        """Job pods (their work counts while they are bound)."""
        self.jobs: dict[str, tuple[str, int, int]] = {}
        """Job name → (CronJob, pods still to succeed, pods created so far)."""
        self.next_job: dict[str, float] = {}
        self.serial = 0
        self.mutation = MutationPolicy.from_config(config) if setup.webhook else None
        self.extender = ExtenderPolicy.from_config(config) if setup.extender else None
        self.provisioner = Provisioner(self, provision_delay, removal_delay)
        self.tally = Tally()
        self.last_sample = -math.inf
        self.scaled_at = -math.inf
        self.server.on_evict = self._evicted
        for ns in ("default", "spotshift"):
            self.server.put("namespaces", namespace(ns))
        for w in workloads:
            if w.pdb:
                self.server.put("pdbs", _pdb(w))
            if w.kind == "CronJob":
                self.next_job[w.name] = start + self.rng.uniform(0, w.every)
            if w.kind == "StatefulSet":
                for i in range(w.peak):
                    self._volume(w, i)

    # ---- objects ----------------------------------------------------------------------------------------------

    def _volume(self, w: Workload, i: int) -> None:
        name = f"data-{w.name}-{i}"
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pv-{w.name}-{i}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "claimRef": {"namespace": "default", "name": name},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [w.zone]}]}
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv["metadata"]["name"]},
            "status": {"phase": "Bound"},
        }
        self.server.put("persistentvolumes", pv)
        self.server.put("persistentvolumeclaims", pvc)

    def add_node(self, node_type: NodeType, zone: str, spot: bool) -> str:
        self.serial += 1
        name = f"{'spot' if spot else 'od'}-{zone[-1]}-{node_type.name.split('.')[1]}-{self.serial:05d}"
        labels = {
            "kubernetes.io/hostname": name,
            SPOT_LABEL: "spot" if spot else "on-demand",
            ZONE_LABEL: zone,
            TYPE_LABEL: node_type.name,
        }
        spec: Obj = {}
        if not spot and self.setup.prefer_no_schedule_on_demand:
            spec["taints"] = [{"key": "on-demand", "value": "true", "effect": "PreferNoSchedule"}]
        cpu = int(node_type.cpu_m * ALLOCATABLE_SHARE)
        memory = int(node_type.memory_mi * ALLOCATABLE_SHARE)
        self.server.put(
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
        self.nodes[name] = NodeBook(name, node_type, zone, spot, self.now)
        return name

    def remove_node(self, name: str) -> None:
        for key in [k for k, o in self.server.store["pods"].items() if o["spec"].get("nodeName") == name]:
            self._delete_pod(key)
        self.server.remove("nodes", name)
        self.nodes.pop(name, None)

    def _new_pod(self, w: Workload, name: str, *, job: str = "") -> None:
        meta: Obj = {
            "name": name,
            "namespace": "default",
            "labels": {"app": w.name},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        }
        owner_kind, owner = {
            "Deployment": ("ReplicaSet", f"{w.name}-rs"),
            "StatefulSet": ("StatefulSet", w.name),
            "CronJob": ("Job", job),
        }[w.kind]
        api = "batch/v1" if owner_kind == "Job" else "apps/v1"
        meta["ownerReferences"] = [
            {"apiVersion": api, "kind": owner_kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
        spec: Obj = {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": f"{w.cpu_m}m", "memory": f"{w.memory_mi}Mi"}}}
            ],
            "schedulerName": "default-scheduler",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            ],
        }
        if w.kind == "CronJob":
            spec["restartPolicy"] = "OnFailure"
        if w.pinned:
            spec["nodeSelector"] = {SPOT_LABEL: "on-demand"}
        if w.kind == "StatefulSet":
            ordinal = name.rsplit("-", 1)[1]
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{w.name}-{ordinal}"}}]
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        if self.mutation is not None:
            mutation = mutate_pod(pod, "default", self.mutation)
            if mutation.ops:
                _apply_in_place(pod, mutation.ops)
        pod["status"] = {"phase": "Pending"}
        self.server.put("pods", pod)
        self._book(f"default/{name}", PodBook(w.name, self.now, job=job))
        if job:
            self.working.add(f"default/{name}")

    def _book(self, key: str, book: PodBook) -> None:
        self.pods[key] = book
        self.owned.setdefault(book.job or book.workload, set()).add(key)

    def _unbook(self, key: str) -> PodBook | None:
        book = self.pods.pop(key, None)
        if book is not None:
            self.owned[book.job or book.workload].discard(key)
        return book

    def _delete_pod(self, key: str) -> None:
        book = self._unbook(key)
        if book is not None and book.job and key in self.server.store["pods"]:
            self.tally.job_work_lost_seconds += book.worked if self._counting() else 0.0
        self.server.remove("pods", key)

    def _evicted(self, pod: Obj) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        book = self._unbook(key)
        if book is None:
            return  # a placeholder
        if self._counting():
            self.tally.evictions += 1
            if book.job:
                self.tally.job_work_lost_seconds += book.worked

    def _counting(self) -> bool:
        return self.now >= 0.0

    # ---- one tick ---------------------------------------------------------------------------------------------

    def tick(self, dt: float) -> None:
        """Everything but the policy, for the ``dt`` seconds ending now."""
        self._spot_market()
        self._controllers()
        self._count_lost()
        self.provisioner.join()
        self.sync(self.view)
        self._schedule()
        self._kubelets(dt)
        self._budgets()
        self.sync(self.view)
        self.provisioner.step()
        self.sync(self.view)

    def active(self) -> bool:
        """Whether the next tick must follow at once: pods wait or start, nodes come or go."""
        if self.provisioner.coming or self.server.unbound or self.starting:
            return True
        return any(b.ends_at is not None for b in self.nodes.values())

    def next_event(self) -> float:
        """The next time something happens on its own: a scale step, a CronJob, a spot limit change, an empty
        node's removal, a Job pod's end."""
        at = [self.scaled_at + SCALE_EVERY, *self.next_job.values()]
        at += [c.at for c in self.trace.changes if c.at > self.now][:1]
        at += [b.empty_since + self.provisioner.removal_delay for b in self.nodes.values() if b.empty_since is not None]
        for book in self.pods.values():
            if book.job and book.bound_at is not None:
                at.append(self.now + self.workloads[book.workload].runs_for - book.worked)
        return min(at)

    def account(self, dt: float) -> None:
        """Add ``dt`` seconds of the current cluster to the figures (only within the day)."""
        if not self._counting():
            return
        t = self.tally
        od = spot = 0
        for book in self.nodes.values():
            price = book.node_type.price * (self.spot_fraction if book.spot else 1.0)
            t.cost_seconds += price * dt
            if book.spot:
                spot += 1
            else:
                od += 1
        t.on_demand_node_seconds += od * dt
        t.spot_node_seconds += spot * dt
        running = on_spot = pending = eligible_od = 0
        nodes = self.nodes
        for pb in self.pods.values():  # placeholders have no book: not counted
            if pb.node is None:
                pending += 1
                continue
            running += 1
            book = nodes.get(pb.node)
            if book is not None and book.spot:
                on_spot += 1
            elif not self.workloads[pb.workload].pinned:
                eligible_od += 1
        t.pod_seconds += running * dt
        t.pod_seconds_on_spot += on_spot * dt
        t.pending_pod_seconds += pending * dt
        t.pod_count_seconds += (running + pending) * dt
        if self.now - self.last_sample >= 60.0:
            self.last_sample = self.now
            t.on_demand_series.append((self.now, od))
            t.spot_series.append((self.now, spot))
            t.eligible_on_demand.append((self.now, eligible_od))
        if self.check:
            self._check_capacity()

    def _check_capacity(self) -> None:
        """Count every node whose pods request more CPU, memory or pod slots than it has (read as kube-scheduler
        reads them: the view's parsed pods and nodes), and every pod bound to a node that is gone."""
        for name, pods in self.view.by_node.items():
            if not pods:
                continue
            node = self.view.nodes.get(name)
            if node is None:
                self.tally.capacity_breaches += 1
                continue
            for resource in ("cpu", "memory"):
                used = sum(p.node_requests.get(resource, 0) for p in pods.values())
                if used > node.allocatable.get(resource, 0):
                    self.tally.capacity_breaches += 1
            if len(pods) > node.allocatable.get("pods", 0):
                self.tally.capacity_breaches += 1

    # ---- the spot market --------------------------------------------------------------------------------------

    def _spot_market(self) -> None:
        for name, book in list(self.nodes.items()):
            if book.ends_at is not None and book.ends_at <= self.now:
                if self._counting():
                    self.tally.reclaimed_pods += sum(
                        1
                        for k, o in self.server.store["pods"].items()
                        if o["spec"].get("nodeName") == name and k in self.pods
                    )
                self.remove_node(name)
        limits = self.trace.limits_at(self.now)
        live: dict[tuple[str, str], list[NodeBook]] = {}
        for book in self.nodes.values():
            if book.spot and book.ends_at is None:
                live.setdefault((book.zone, book.node_type.name), []).append(book)
        for pool, books in live.items():
            over = len(books) - limits[pool]
            for book in sorted(books, key=lambda b: (-b.born, b.name))[: max(0, over)]:
                self._notice(book)

    def _notice(self, book: NodeBook) -> None:
        book.ends_at = self.now + self.notice
        obj = self.server.store["nodes"][book.name]
        obj = {**obj, "spec": {**obj["spec"]}}
        obj["spec"]["taints"] = [
            *(obj["spec"].get("taints") or []),
            {"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"},
        ]
        self.server.put("nodes", obj)

    # ---- controllers ------------------------------------------------------------------------------------------

    def _controllers(self) -> None:
        owned = self.owned
        scale = self.now - self.scaled_at >= SCALE_EVERY
        if scale:
            self.scaled_at = self.now
        for w in self.workloads.values():
            if w.kind == "Deployment":
                self._deployment(w, sorted(owned.get(w.name, ())), scale)
            elif w.kind == "StatefulSet":
                have = {k.rsplit("-", 1)[1] for k in owned.get(w.name, [])}
                for i in range(w.peak):
                    if str(i) not in have:
                        self._new_pod(w, f"{w.name}-{i}")
            else:
                self._cronjob(w, owned)

    def _count_lost(self) -> None:
        if not self._counting():
            return
        stored = self.server.store["pods"]
        missing = sum(1 for key in self.pods if key not in stored)
        for w in self.workloads.values():
            if w.kind == "Deployment":
                missing += max(0, replicas(w, self.scaled_at) - len(self.owned.get(w.name, ())))
            elif w.kind == "StatefulSet":
                missing += max(0, w.peak - len(self.owned.get(w.name, ())))
        self.tally.lost_pods += missing

    def _deployment(self, w: Workload, keys: list[str], scale: bool) -> None:
        want = replicas(w, self.scaled_at)
        have = len(keys)
        for _ in range(want - have):
            self.serial += 1
            self._new_pod(w, f"{w.name}-{self.serial:06d}")
        if have > want and scale:
            store = self.server.store["pods"]

            def rank(key: str) -> tuple[int, int, float]:
                bound = 1 if store[key]["spec"].get("nodeName") else 0
                return (bound, 1 if self.pods[key].ready else 0, -self.pods[key].created)

            for key in sorted(keys, key=rank)[: have - want]:
                self._delete_pod(key)

    def _cronjob(self, w: Workload, owned: dict[str, set[str]]) -> None:
        if self.now >= self.next_job[w.name]:
            self.next_job[w.name] += w.every
            self.serial += 1
            job = f"{w.name}-{self.serial:06d}"
            self.jobs[job] = (w.name, w.parallelism, 0)
        for job, (cron, left, made) in list(self.jobs.items()):
            if cron != w.name:
                continue
            running = len(owned.get(job, ()))
            if left <= 0:
                del self.jobs[job]
                continue
            for _ in range(left - running):
                made += 1
                self._new_pod(w, f"{job}-{made:03d}", job=job)
            self.jobs[job] = (cron, left, made)

    def _kubelets(self, dt: float) -> None:
        store = self.server.store["pods"]
        for key in sorted(self.starting | self.working):
            book = self.pods.get(key)
            obj = store.get(key)
            if obj is None or book is None:
                self.starting.discard(key)
                self.working.discard(key)
                continue
            if book.bound_at is None:
                continue
            if book.ready:
                self.starting.discard(key)
            if not book.ready and self.now - book.bound_at >= self.ready_after:
                book.ready = True
                self.starting.discard(key)
                obj = {**obj, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                self.server.put("pods", obj)
            if book.job and key in self.working:
                book.worked += dt
                w = self.workloads[book.workload]
                if book.worked >= w.runs_for:
                    cron, left, made = self.jobs[book.job]
                    self.jobs[book.job] = (cron, left - 1, made)
                    self._unbook(key)
                    self.working.discard(key)
                    self.server.remove("pods", key)

    def _budgets(self) -> None:
        if not self.server.pods_changed:
            return
        self.server.pods_changed = False
        ready: dict[str, int] = {}
        expected: dict[str, int] = {}
        for book in self.pods.values():
            expected[book.workload] = expected.get(book.workload, 0) + 1
            if book.ready:
                ready[book.workload] = ready.get(book.workload, 0) + 1
        for obj in list(self.server.store["pdbs"].values()):
            name = obj["metadata"]["name"]
            healthy, n = ready.get(name, 0), expected.get(name, 0)
            desired = _desired(obj, n)
            allowed = max(0, healthy - desired)
            status = obj["status"]
            if (
                status["currentHealthy"],
                status["desiredHealthy"],
                status["expectedPods"],
                status["disruptionsAllowed"],
            ) != (
                healthy,
                desired,
                n,
                allowed,
            ):
                new = {**obj, "status": {**status}}
                new["status"].update(
                    currentHealthy=healthy, desiredHealthy=desired, expectedPods=n, disruptionsAllowed=allowed
                )
                self.server.put("pdbs", new)

    def budget_violated(self, pod: Obj) -> bool:
        """Whether evicting ``pod`` (Ready) now breaks its budget, judged from the pods themselves (not from the
        status the eviction read)."""
        app = pod["metadata"]["labels"]["app"]
        obj = self.server.store["pdbs"].get(f"default/{app}")
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        book = self.pods.get(key)
        if obj is None or book is None or not book.ready:
            return False
        ready = sum(1 for b in self.pods.values() if b.workload == app and b.ready)
        n = sum(1 for b in self.pods.values() if b.workload == app)
        return ready - 1 < _desired(obj, n)

    # ---- kube-scheduler ---------------------------------------------------------------------------------------

    def sync(self, state: ClusterState) -> None:
        """Apply the API server's changes since the last sync to ``state`` (the world's view)."""
        sync_state(self.server, state, self.applied)

    def _scheduling_inputs(self) -> int:
        """A count that changes whenever anything kube-scheduler's filters or scores read changes."""
        log = self.server.log
        return sum(len(log[k]) for k in ("nodes", "pods", "persistentvolumes", "persistentvolumeclaims"))

    def _schedule(self) -> None:
        if not self.server.unbound:
            return
        # kube-scheduler tries an unschedulable pod again when something in the cluster changes: with nothing
        # changed since the last pass, every pod still waiting would fail exactly as it did.
        if self._scheduling_inputs() == self.last_pass:
            return
        snap = self.view.snapshot()
        queue = sorted(snap.pending, key=lambda p: (-p.priority, self._created(p), p.key))
        if not queue:
            self.last_pass = self._scheduling_inputs()
            return
        entries = self._extender_entries(snap)
        lowest: list[int] = []  # the lowest priority bound anywhere, found when a pod first needs preemption

        def may_preempt(pod: Pod) -> bool:
            if not lowest:
                lowest.append(min((p.priority for info in snap.nodes.values() for p in info.pods), default=0))
            return pod.priority > lowest[0]

        room = {name: info.free("cpu") for name, info in snap.nodes.items() if not entries or entries[name][0]}
        for pod in queue:
            self._schedule_one(pod, snap, entries, room, may_preempt)
        self.last_pass = self._scheduling_inputs()

    def affinity_score(self, pod: Pod, node: Node) -> int:
        """:func:`shared.nodeaffinity.preferred_affinity_score`, kept per (preferred terms, node): node labels do
        not change here, and the pods of a workload share their terms."""
        if not pod.preferred_affinity:
            return 0
        key = (pod.preferred_affinity, node.name)
        score = self.scores.get(key)
        if score is None:
            score = self.scores[key] = preferred_affinity_score(pod, node)
        return score

    def _created(self, pod: Pod) -> float:
        book = self.pods.get(pod.key)
        return book.created if book is not None else -1.0

    def _extender_entries(self, snap: ClusterSnapshot) -> dict[str, tuple[bool, int]]:
        """The extender's answer per node: (passes its filter, its score 0-10), from its own functions."""
        if self.extender is None:
            return {}
        out = {}
        nodes, known = self.server.store["nodes"], self.entries
        for name in snap.nodes:
            raw = nodes[name]
            version = raw["metadata"].get("resourceVersion")
            hit = known.get(name)
            if hit is None or hit[0] != version:
                entry = reduce_node(raw, self.extender)
                score = self.extender.score(entry.node_class) if entry.reclaim is None else 0
                hit = known[name] = (version, (entry.reclaim is None, score))
            out[name] = hit[1]
        return out

    def _feasible(self, pod: Pod, snap: ClusterSnapshot, room: dict[str, int]) -> list[NodeInfo]:
        """The nodes ``pod`` fits, in the snapshot's order; ``room`` holds the free CPU of every node the
        extender's filter passes (CPU first: it rules out most nodes for the price of a lookup)."""
        cpu = pod.node_requests.get("cpu", 0)
        infos = snap.nodes
        return [
            infos[name]
            for name, free in room.items()
            if free >= cpu and not fits(pod, infos[name], snap, first_only=True)
        ]

    def _schedule_one(
        self,
        pod: Pod,
        snap: ClusterSnapshot,
        entries: dict[str, tuple[bool, int]],
        room: dict[str, int],
        may_preempt: Callable[[Pod], bool],
    ) -> None:
        feasible = self._feasible(pod, snap, room)
        if not feasible and may_preempt(pod):
            feasible = self._preempt(pod, snap, entries)
        if not feasible:
            self._unschedulable(pod)
            return
        best = self._select(pod, feasible, entries)
        snap.add_pod(pod, best.name)
        room[best.name] = snap.nodes[best.name].free("cpu")
        obj = self.server.store["pods"][pod.key]
        obj = {**obj, "spec": {**obj["spec"], "nodeName": best.name}}
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        self.server.put("pods", obj)
        book = self.pods.get(pod.key)
        if book is not None:
            book.bound_at = self.now
            book.node = best.name
            self.starting.add(pod.key)
        self._bound_placeholder(pod.key, obj)

    def _bound_placeholder(self, key: str, obj: Obj) -> None:
        if key not in self.pods:  # placeholders are Ready as soon as they run (a pause container)
            obj = {**obj, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
            self.server.put("pods", obj)

    def _select(self, pod: Pod, feasible: list[NodeInfo], entries: dict[str, tuple[bool, int]]) -> NodeInfo:
        affinity = [self.affinity_score(pod, info.node) for info in feasible]
        top_affinity = max(affinity, default=0)
        taints = [count_intolerable_prefer_no_schedule(pod, info.node) for info in feasible]
        top_taints = max(taints, default=0)
        cpu = pod.node_requests.get("cpu", 0)
        mem = pod.node_requests.get("memory", 0)
        best: list[NodeInfo] = []
        best_score = -math.inf
        for i, info in enumerate(feasible):
            ac, am = info.allocatable("cpu") or 1, info.allocatable("memory") or 1
            fc = min(1.0, (info.requested.get("cpu", 0) + cpu) / ac)
            fm = min(1.0, (info.requested.get("memory", 0) + mem) / am)
            least = ((1 - fc) * 100 + (1 - fm) * 100) / 2
            balanced = (1 - abs(fc - fm) / 2) * 100
            score = int(least) + int(balanced)
            if top_affinity:
                score += 2 * (100 * affinity[i] // top_affinity)
            score += 3 * (100 - (100 * taints[i] // top_taints if top_taints else 0))
            if entries:
                score += 5 * 10 * entries[info.name][1]
            if score > best_score:
                best, best_score = [info], score
            elif score == best_score:
                best.append(info)
        return best[self.rng.randrange(len(best))] if len(best) > 1 else best[0]

    def _preempt(self, pod: Pod, snap: ClusterSnapshot, entries: dict[str, tuple[bool, int]]) -> list[NodeInfo]:
        """kube-scheduler's preemption, for the lower-priority pods here (placeholders): the node where removing
        the fewest of them makes room; the victims are deleted."""
        best: tuple[int, str] | None = None
        for info in snap.nodes.values():
            victims = [p for p in info.pods if p.priority < pod.priority]
            if not victims or (entries and not entries[info.name][0]):
                continue
            for v in victims:
                info.remove_pod(v)
            ok = not fits(pod, info, snap, first_only=True)
            for v in victims:
                info.add_pod(v)
            if ok and (best is None or (len(victims), info.name) < best):
                best = (len(victims), info.name)
        if best is None:
            return []
        info = snap.nodes[best[1]]
        for v in [p for p in info.pods if p.priority < pod.priority]:
            snap.remove_pod(v)
            self.server.remove("pods", v.key)
        return [info]

    def _unschedulable(self, pod: Pod) -> None:
        obj = self.server.store["pods"][pod.key]
        if (obj.get("status") or {}).get("conditions"):
            return
        obj = {**obj, "status": {"phase": "Pending", "conditions": [_UNSCHEDULABLE]}}
        self.server.put("pods", obj)


_UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


class _Server(FakeApiServer):
    """The in-memory API server, counting each eviction it lets through although the pod's budget, judged from
    the pods themselves, did not allow it (the status it read was stale)."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.unbound: set[str] = set()
        """Pods without a node (kube-scheduler's queue)."""
        self.pods_changed = True
        """A pod was written or deleted since the disruption controller last looked."""

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
            etype = event or ("MODIFIED" if key in self.store[kind] else "ADDED")
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
            rv = next(self.rv)
            self.last_rv = rv
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
            self.log[kind].append((rv, "DELETED", obj))
        if kind == "pods":
            self.pods_changed = True
            self.unbound.discard(key)

    def _evict(self, namespace: str, name: str, body: Any) -> Obj:
        pod = self.store["pods"].get(f"{namespace}/{name}")
        violates = pod is not None and self.world.budget_violated(pod)
        out = super()._evict(namespace, name, body)
        if violates and self.world.now >= 0:
            self.world.tally.pdb_violations += 1
        return out


def _apply_in_place(doc: Obj, ops: Iterable[Mapping[str, Any]]) -> None:
    """The webhook's JSON patch (``add`` and ``replace``, RFC 6902) applied to a pod this module just built."""
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent: Any = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif op["op"] == "add":
                parent.insert(int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            parent[last] = op["value"]


def sync_state(server: FakeApiServer, state: ClusterState, applied: dict[str, int]) -> None:
    """Apply ``server``'s change log past ``applied`` to ``state``, as its watches would."""
    for kind in KINDS:
        log = server.log[STORE.get(kind.name, kind.name)]
        start = applied[kind.name]
        for _, etype, obj in log[start:]:
            state.apply(kind, etype, obj)
        applied[kind.name] = len(log)
        state.synced.add(kind.name)


def _pdb(w: Workload) -> Obj:
    spec: Obj = {"selector": {"matchLabels": {"app": w.name}}}
    if w.pdb == "max-unavailable-1":
        spec["maxUnavailable"] = 1
    else:
        spec["minAvailable"] = "75%"
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": w.name, "namespace": "default", "generation": 1},
        "spec": spec,
        "status": {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
            "observedGeneration": 1,
        },
    }


def _desired(pdb: Obj, expected: int) -> int:
    spec = pdb["spec"]
    if "maxUnavailable" in spec:
        return max(0, expected - int(spec["maxUnavailable"]))
    return math.ceil(expected * int(str(spec["minAvailable"]).rstrip("%")) / 100)


# --- the provisioner -----------------------------------------------------------------------------------------


class Provisioner:
    """cluster-autoscaler's behaviour as this benchmark models it: every 10 s, the pods kube-scheduler marked
    ``Unschedulable`` (placeholders included: their priority is above the expendable cutoff) that will not fit on
    the nodes already coming are packed (first fit, largest first) onto new nodes of the type that costs least for
    them, spot where a pool with room allows the pods (their zone, their capacity-type selector), else on-demand;
    the nodes join ``delay`` seconds later (:func:`cheapest_nodes` decides). A node with no pod for
    ``removal_delay`` seconds (10 minutes by default) is removed. The provisioner knows at
    once whether a spot pool has room (no failed attempt, no fallback delay) and never removes a node that still
    has pods (no consolidation of its own)."""

    def __init__(self, world: World, delay: float, removal_delay: float = REMOVAL_DELAY) -> None:
        self.world = world
        self.delay = delay
        self.removal_delay = removal_delay
        self.coming: list[tuple[float, NodeType, str, bool]] = []
        self.scanned = -math.inf

    def join(self) -> None:
        """The nodes whose delay is over join the cluster (before kube-scheduler's turn in the tick: a pod waiting
        for a node is bound to it before the next scan looks for pods that need one)."""
        w = self.world
        for item in [c for c in self.coming if c[0] <= w.now]:
            self.coming.remove(item)
            w.add_node(item[1], item[2], item[3])

    def step(self) -> None:
        w = self.world
        self._scale_down()
        if w.now - self.scanned < 10.0:
            return
        self.scanned = w.now
        waiting = [
            p
            for p in w.view.pods.values()
            if not p.node_name and not p.terminal and _unschedulable_marked(w.server.store["pods"].get(p.key))
        ]
        if waiting:
            self._scale_up(waiting)

    def _scale_down(self) -> None:
        w = self.world
        busy = {name for name, pods in w.view.by_node.items() if pods}
        for name, book in list(w.nodes.items()):
            if name in busy or book.ends_at is not None:
                book.empty_since = None
                continue
            if book.empty_since is None:
                book.empty_since = w.now
            elif w.now - book.empty_since >= self.removal_delay:
                w.server.remove("nodes", name)
                del w.nodes[name]

    def _scale_up(self, waiting: list[Pod]) -> None:
        w = self.world
        room = [
            [nt.cpu_m * ALLOCATABLE_SHARE, nt.memory_mi * ALLOCATABLE_SHARE, z, spot] for _, nt, z, spot in self.coming
        ]
        for group in groups_to_add(waiting, room, lambda p, z, spot: _allows(p, z, spot, w)):
            self._add_for(group)

    def _add_for(self, pods: list[Pod]) -> None:
        w = self.world
        limits = w.trace.limits_at(w.now)
        counts: dict[tuple[str, str], int] = {}
        for book in w.nodes.values():
            if book.spot and book.ends_at is None:
                counts[(book.zone, book.node_type.name)] = counts.get((book.zone, book.node_type.name), 0) + 1
        for _, nt, z, spot in self.coming:
            if spot:
                counts[(z, nt.name)] = counts.get((z, nt.name), 0) + 1
        sample = pods[0]
        zone_nodes = {z: sum(1 for b in w.nodes.values() if b.zone == z) for z in ZONES}
        choice = cheapest_nodes(
            [_req(p) for p in pods],
            w.node_types,
            spot_room={pool: limits[pool] - counts.get(pool, 0) for pool in limits},
            zones={spot: [z for z in ZONES if _allows(sample, z, spot, w)] for spot in (True, False)},
            zone_nodes=zone_nodes,
            spot_fraction=w.spot_fraction,
        )
        if choice is None:
            return
        nt, zone, n, spot = choice
        for _ in range(n):
            self.coming.append((w.now + self.delay, nt, zone, spot))


def cheapest_nodes(
    requests: list[tuple[int, int]],
    node_types: Iterable[NodeType],
    *,
    spot_room: dict[tuple[str, str], int],
    zones: dict[bool, list[str]],
    zone_nodes: dict[str, int],
    spot_fraction: float,
) -> tuple[NodeType, str, int, bool] | None:
    """The provisioner's choice for one group of pending pods (``requests``: CPU millicores and MiB each, pods
    that may go to the same nodes): ``(node type, zone, how many nodes, spot)`` at the least price. The pods are
    packed first fit onto nodes of each type; spot where a pool of an allowed zone has room (``spot_room``), as
    many nodes as it has left (the pods it cannot take wait for the next scan), else on-demand; the zone with the
    most room, then the fewest nodes (``zone_nodes``), among those allowed (``zones[spot]``); on a tie in price the
    larger type, then spot. ``None`` when nothing fits."""
    options = []
    for nt in node_types:
        n = _pack(requests, nt)
        if n is None:
            continue
        for spot in (True, False):
            room = {z: min(n, spot_room.get((z, nt.name), 0)) if spot else n for z in zones[spot]}
            allowed = [z for z, r in room.items() if r >= 1]
            if not allowed:
                continue
            zone = min(allowed, key=lambda z: (-room[z], zone_nodes.get(z, 0), z))
            price = nt.price * n * (spot_fraction if spot else 1.0)
            options.append((price, -nt.cpu_m, nt.name, not spot, zone, nt, room[zone], spot))
    if not options:
        return None
    _, _, _, _, zone, nt, n, spot = min(options)
    return nt, zone, n, spot


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


def _allows(p: Pod, zone: str, spot: bool, w: World) -> bool:
    """Whether a new node of this zone and capacity type could take ``p`` (its selector, affinity and volumes;
    the same for every pod of a workload, so asked once per workload)."""
    book = w.pods.get(p.key)
    key = (book.workload if book is not None and not book.job else p.key, zone, spot)
    known = w.allows.get(key)
    if known is None:
        known = w.allows[key] = _allows_now(p, zone, spot, w)
    return known


def _allows_now(p: Pod, zone: str, spot: bool, w: World) -> bool:
    probe = NodeInfo(_probe_node(zone, spot, w))
    snap = ClusterSnapshot(pvs=w.view.pvs.values(), pvcs=w.view.pvcs.values())
    snap.nodes[probe.name] = probe
    return not any(
        r for r in fits(p, probe, snap, check_node_ready=False) if r.code not in (ERR_INSUFFICIENT, ERR_TOO_MANY_PODS)
    )


_PROBES: dict[tuple[str, bool, bool], Node] = {}


def _probe_node(zone: str, spot: bool, w: World) -> Node:
    key = (zone, spot, w.setup.prefer_no_schedule_on_demand)
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
