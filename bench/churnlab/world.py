"""The simulated cluster around a policy: an in-memory API server and the actors a real cluster has.

Everything is stored as API objects in the books' in-memory API server (:class:`bench.churnlab.books.ApiServer`,
which answers evictions by the PodDisruptionBudgets as the API server does), so the rescheduler's own run loop works
against it unchanged. Each actor is a class of its own module, reading and writing the cluster through the shared
:class:`bench.churnlab.books.Books`; :class:`World` owns the books, builds the actors and plays them each tick
(``World.tick``), in this order:

* the **spot market** (:mod:`bench.churnlab.market`): a pool whose limit falls below its nodes gives the newest of
  them a two-minute notice (the termination handler's ``aws-node-termination-handler/spot-itn`` taint) and deletes
  them, with their pods, when it runs out;
* the **controllers** (:mod:`bench.churnlab.controllers`): Deployments follow the demand curve every five minutes
  (a scale-down deletes unbound pods first, then the newest), StatefulSets keep their replicas (same names, the same
  zonal volume), CronJobs start a Job on schedule whose pods work ``runs_for`` seconds once Running (an evicted one
  starts again from zero);
* the **webhook** (policies that have it): every pod the controllers create goes through
  :func:`extender.admission.mutate_pod`;
* **kube-scheduler** (:mod:`bench.churnlab.scheduler`): pending pods in queue order (priority, then age), each
  filtered by :func:`shared.fit.fits` (and, with the extender, by its filter) and scored by kube-scheduler's default
  score plugins that apply here (``NodeResourcesFit`` least-allocated, ``NodeResourcesBalancedAllocation``,
  ``NodeAffinity``, ``TaintToleration``; weights 1, 1, 2, 3) plus the extender's score (weight 5, as
  ``deploy/scheduler`` sets it); ties broken at random (seeded), as ``selectHost`` does; a pod that fits nowhere
  preempts lower-priority pods (spotshift's placeholders) where that makes room, else is marked ``Unschedulable``;
* the **kubelets** (:mod:`bench.churnlab.kubelets`): a bound pod is Running at once and Ready ``ready_after``
  seconds later;
* the **disruption controller** (:mod:`bench.churnlab.disruption_controller`): every budget's status from the Ready
  pods;
* the **provisioner** (:mod:`bench.churnlab.provisioner`, cluster-autoscaler's behaviour as this benchmark models
  it; see ``Provisioner``, whose ``refill`` option makes the spot pools node groups of a fixed size): the nodes
  whose provisioning delay is over join before kube-scheduler's turn (so the pods they were added for are bound to
  them before the provisioner looks for pending pods again), its scan comes last.

Figures are accumulated per tick over the day (:class:`bench.churnlab.books.Tally`).
"""

from __future__ import annotations

import math
import random

from bench.churnlab.books import Books, NodeBook, PodBook, Setup, Tally
from bench.churnlab.controllers import Controllers
from bench.churnlab.disruption_controller import DisruptionController
from bench.churnlab.kubelets import Kubelets
from bench.churnlab.market import NOTICE, SpotMarket
from bench.churnlab.provisioner import REMOVAL_DELAY, Provisioner, ScaleDown, ScaleUpTimeout
from bench.churnlab.scenario import NODE_TYPES, NodeType, Trace, Workload
from bench.churnlab.scheduler import Scheduler
from extender.admission import MutationPolicy
from extender.scheduling import ExtenderPolicy
from rescheduler.cluster.watch_cache import ClusterState
from shared.config import Config
from shared.model import Node, Pod


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
        refill: dict[tuple[str, str], int] | None = None,
        scale_down: ScaleDown | None = None,
        scale_up_timeout: ScaleUpTimeout | None = None,
        least_waste: bool = False,
        spot_prices: dict[tuple[str, str], float] | None = None,
        reclaim_rates: dict[tuple[str, str], float] | None = None,
    ) -> None:
        self.check = check
        """Check every tick that no node holds more than its allocatable (the property tests; costs time)."""
        self.books = Books(
            seed=seed,
            workloads=workloads,
            trace=trace,
            setup=setup,
            spot_fraction=spot_fraction,
            node_types=node_types,
            start=start,
            spot_prices=spot_prices,
        )
        b = self.books
        self.server = b.server
        self.workloads = b.workloads
        self.applied = b.applied
        self.nodes: dict[str, NodeBook] = b.nodes
        self.pods: dict[str, PodBook] = b.pods
        self.tally: Tally = b.tally
        self.market = SpotMarket(b, notice, reclaim_rates, seed=seed)
        self.controllers = Controllers(b, MutationPolicy.from_config(config) if setup.webhook else None)
        self.scheduler = Scheduler(b, ExtenderPolicy.from_config(config) if setup.extender else None)
        self.kubelets = Kubelets(b, ready_after)
        self.disruption = DisruptionController(b)
        self.provisioner = Provisioner(
            b,
            provision_delay,
            removal_delay,
            refill,
            scale_down=scale_down,
            scale_up_timeout=scale_up_timeout,
            expander=random.Random(f"expander/{seed}") if least_waste else None,
        )
        self.provisioner.fill()
        self.server.breaks_budget = self.disruption.breaks_budget
        self.next_job = self.controllers.next_job
        """CronJob → when it next starts a Job."""
        self.last_sample = -math.inf
        for w in workloads:
            self.disruption.adopt(w)
            self.controllers.adopt(w, start)

    @property
    def now(self) -> float:
        """The simulated clock (seconds from the start of the day)."""
        return self.books.now

    @now.setter
    def now(self, value: float) -> None:
        self.books.now = value

    @property
    def view(self) -> ClusterState:
        """kube-scheduler's and the provisioner's view of the cluster (a policy may share it with its own loop)."""
        return self.books.view

    @view.setter
    def view(self, state: ClusterState) -> None:
        self.books.view = state

    @property
    def scaled_at(self) -> float:
        """When the Deployments last followed the demand curve."""
        return self.controllers.scaled_at

    def affinity_score(self, pod: Pod, node: Node) -> int:
        """kube-scheduler's preferred node affinity score of ``pod`` on ``node`` (see
        :meth:`bench.churnlab.scheduler.Scheduler.affinity_score`)."""
        return self.scheduler.affinity_score(pod, node)

    def sync(self, state: ClusterState) -> None:
        """Apply the API server's changes since the last sync to ``state`` (the world's view)."""
        self.books.sync(state)

    # ---- one tick ---------------------------------------------------------------------------------------------

    def tick(self, dt: float) -> None:
        """Everything but the policy, for the ``dt`` seconds ending now."""
        self.market.step()
        self.provisioner.remove_underused()
        self.controllers.step()
        self.controllers.count_lost()
        self.provisioner.join()
        self.sync(self.view)
        self.scheduler.step()
        self.kubelets.step(dt)
        self.disruption.step()
        self.sync(self.view)
        self.provisioner.step()
        self.sync(self.view)

    def active(self) -> bool:
        """Whether the next tick must follow at once: pods wait or start, nodes come or go."""
        if self.provisioner.coming or self.server.unbound or self.books.starting:
            return True
        return self.market.reclaiming()

    def next_event(self) -> float:
        """The next time something happens on its own: a scale step, a CronJob, a spot limit change, an empty
        node's removal, a Job pod's end."""
        return min(
            self.controllers.next_event(),
            self.market.next_change(),
            self.provisioner.next_removal(),
            self.kubelets.next_event(),
        )

    def account(self, dt: float) -> None:
        """Add ``dt`` seconds of the current cluster to the figures (only within the day)."""
        if not self.books.counting():
            return
        t = self.tally
        od = spot = 0
        for book in self.nodes.values():
            share = self.books.price_share(book.zone, book.node_type.name) if book.spot else 1.0
            price = book.node_type.price * share
            t.cost_seconds += price * dt
            if book.spot:
                spot += 1
            else:
                od += 1
        t.on_demand_node_seconds += od * dt
        if not t.on_demand_steps or t.on_demand_steps[-1][1] != od:
            t.on_demand_steps.append((self.now, od))
        t.spot_node_seconds += spot * dt
        running = on_spot = pending = eligible_od = 0
        nodes = self.nodes
        for pb in self.pods.values():  # placeholders have no book: not counted
            if pb.node is None:
                pending += 1
                continue
            running += 1
            node = nodes.get(pb.node)
            if node is not None and node.spot:
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
