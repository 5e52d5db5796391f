"""The cloud of the churn replay (tests/e2e/test_churn_replay_e2e.py) on the real control plane: the spot market
and the node provisioner of bench/churnlab/replay.py's trace, on the trace's clock.

* the **spot market**: a spot pool whose limit (the trace's) falls below its nodes gives the newest of them
  the reclaim notice (the ``aws-node-termination-handler/spot-itn`` taint, ``NoSchedule``) and deletes them with
  their pods when the notice runs out;
* the **provisioner**, as the simulation's (``bench.churnlab.provisioner.Provisioner``): every scan, the pods of the
  given namespaces (the workloads', spotshift's placeholders') that kube-scheduler marked ``Unschedulable`` and
  that do not fit on the nodes already coming are grouped by where a new node could take them (the product's
  own fit check against a probe node) and each group gets the nodes
  :func:`bench.churnlab.provisioner.cheapest_nodes` chooses, joining ``PROVISION_DELAY`` later; a node with no pod
  bound for ``REMOVAL_DELAY`` is deleted.

That is the *pending* world (the default). In the *refill* world (``replay.WORLDS``) each zone's spot pool is a node
group of ``replay.REFILL`` nodes instead: the cloud starts with them, replaces a reclaimed one by a new empty node
``PROVISION_DELAY`` after the trace allows the pool again, and never removes them for being empty; pending pods get
on-demand nodes only. ``run`` chooses the trace (``replay.LONG`` by default).

Every node is a kubelet stand-in node (tests/support/controlplane) labelled as the simulation's are (capacity type,
zone, instance type) plus the test's own label. The clock is trace time: ``(monotonic - t0) * COMPRESSION``.
Each node's lifetime is recorded, so on-demand node-minutes are an exact integral of the nodes that existed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from bench.churnlab import replay
from bench.churnlab.books import RECLAIM_TAINT, SPOT_LABEL, TYPE_LABEL, ZONE_LABEL
from bench.churnlab.provisioner import cheapest_nodes, groups_to_add
from bench.churnlab.scenario import ALLOCATABLE_SHARE, ZONES
from shared.fit import fits
from shared.fit_reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS
from shared.model import Node, Pod
from shared.snapshot import ClusterSnapshot, NodeInfo
from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.controlplane.kubelet import NOT_READY_TAINT
from tests.support.provisioner import unschedulable

TEST_LABEL = "e2e.spotshift.io/test"


@dataclass(slots=True)
class Book:
    name: str
    zone: str
    spot: bool
    born: float
    """Trace seconds at which the node was Ready."""
    ends_at: float | None = None
    """Reclaim notice given: the node ends then."""
    gone: float | None = None
    empty_since: float | None = None


class Cloud(threading.Thread):
    """See the module docstring. ``errors`` collects the API calls that failed (each retried on the next tick) and
    the error that ended the thread, if one did."""

    def __init__(
        self,
        plane: ControlPlane,
        namespaces: list[str],
        label: str,
        compression: float,
        *,
        world: str = "pending",
        run: replay.Replay = replay.LONG,
    ) -> None:
        super().__init__(daemon=True, name="replay-cloud")
        self.world = world
        self.refill = replay.refill_of(world) or {}
        self.trace = run.trace
        self.on_node_end: Callable[[str, float], None] = lambda name, at: None
        """Told of each node the cloud ends or removes, before its pods go."""
        self.plane = plane
        self.api = plane.new_api()
        self.namespaces = namespaces
        self.label = label
        self.k = compression
        self.t0 = time.monotonic()
        self.books: dict[str, Book] = {}
        self.coming: list[tuple[float, str, bool]] = []
        self.scanned = -math.inf
        self.serial = 0
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.events: list[str] = []
        """What the cloud did, by trace time (printed by the test)."""
        self.allows: dict[tuple[str, str, bool], bool] = {}

    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.k

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.tick()
            except (ApiError, requests.RequestException) as error:  # retried next tick, and reported
                self.errors.append(f"t={self.now():.0f}s: {error}")
            except Exception as error:  # a node that never became Ready, a bug here: the test fails on it
                self.errors.append(f"t={self.now():.0f}s: {error!r}")
                raise
            self.stop.wait(0.1)

    def fill(self) -> None:
        """The refill world's start: every spot group at its desired count, Ready (before the trace's clock
        starts)."""
        names = [self._add(zone, True) for (zone, _), n in sorted(self.refill.items()) for _ in range(n)]
        for name in names:
            wait_for(lambda name=name: self._ready(name), timeout=30, what=f"node {name} to become Ready")
            self.books[name].born = 0.0
        if names:
            self.log(f"spot groups filled: {', '.join(names)}")

    def tick(self) -> None:
        self._market()
        self._refill()
        self._join()
        pods = [p for ns in self.namespaces for p in self.api.list(f"/api/v1/namespaces/{ns}/pods")]
        self._scale_down(pods)
        if self.now() - self.scanned >= replay.PROVISIONER_SCAN:
            self.scanned = self.now()
            waiting = [p for p in pods if unschedulable(p)]
            if waiting:
                self._scale_up([Pod.from_api(p) for p in waiting], pods)

    # ---- the spot market ------------------------------------------------------------------------------------

    def _market(self) -> None:
        now = self.now()
        self._remove([b for b in self.live() if b.ends_at is not None and b.ends_at <= now])
        limits = self.trace.limits_at(now)
        pools: dict[tuple[str, str], list[Book]] = {}
        for book in self.live():
            if book.spot and book.ends_at is None:
                pools.setdefault((book.zone, replay.NODE_TYPE.name), []).append(book)
        for pool, books in pools.items():
            over = len(books) - limits[pool]
            for book in sorted(books, key=lambda b: (-b.born, b.name))[: max(0, over)]:
                node = self.api.get(f"/api/v1/nodes/{book.name}")
                taints = [
                    *(node["spec"].get("taints") or []),
                    {"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"},
                ]
                self.api.patch(f"/api/v1/nodes/{book.name}", {"spec": {"taints": taints}})
                book.ends_at = now + replay.NOTICE
                self.log(f"reclaim notice on {book.name}")

    # ---- the provisioner ------------------------------------------------------------------------------------

    def _refill(self) -> None:
        limits = self.trace.limits_at(self.now())
        for (zone, type_name), desired in sorted(self.refill.items()):
            have = sum(1 for b in self.live() if b.spot and b.ends_at is None and b.zone == zone)
            have += sum(1 for _, z, spot in self.coming if spot and z == zone)
            n = max(0, min(desired, limits[(zone, type_name)]) - have)
            if n:
                self.coming += [(self.now() + replay.PROVISION_DELAY, zone, True)] * n
                self.log(f"{n} spot node(s) in {zone} to refill its group")

    def _join(self) -> None:
        due = [c for c in self.coming if c[0] <= self.now()]
        for item in due:
            self.coming.remove(item)
        names = [self._add(zone, spot) for _, zone, spot in due]
        if names:
            self.log(f"joined {', '.join(names)}")
        for name in names:
            wait_for(lambda name=name: self._ready(name), timeout=30, what=f"node {name} to become Ready")

    def _ready(self, name: str) -> bool:
        """Ready, and rid of the not-ready taint every new node gets (kube-scheduler may use it)."""
        node = self.api.get(f"/api/v1/nodes/{name}")
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        return ready and not any(t.get("key") == NOT_READY_TAINT for t in node["spec"].get("taints") or [])

    def _add(self, zone: str, spot: bool) -> str:
        """Create a node (Ready moments later, by the kubelet stand-in); its life counts from now."""
        self.serial += 1
        name = f"replay-{self.label}-{'spot' if spot else 'od'}-{zone[-1]}-{self.serial:03d}"
        nt = replay.NODE_TYPE
        self.plane.create_node(
            name,
            labels={
                SPOT_LABEL: "spot" if spot else "on-demand",
                ZONE_LABEL: zone,
                TYPE_LABEL: nt.name,
                TEST_LABEL: self.label,
            },
            allocatable={
                "cpu": f"{int(nt.cpu_m * ALLOCATABLE_SHARE)}m",
                "memory": f"{int(nt.memory_mi * ALLOCATABLE_SHARE)}Mi",
                "pods": "110",
            },
            wait=False,
        )
        self.books[name] = Book(name, zone, spot, self.now())
        return name

    def _remove(self, books: list[Book]) -> None:
        """Delete nodes with their pods at once, as a cloud ends machines: cordoned, their pods deleted with no
        grace period (a collection call per node and namespace), then the nodes; their life counts until now."""
        if not books:
            return
        now = self.now()
        names = {b.name for b in books}
        for book in books:
            book.gone = now
            self.on_node_end(book.name, now)
            self.api.patch(f"/api/v1/nodes/{book.name}", {"spec": {"unschedulable": True}})
        for ns in self.namespaces:
            for name in sorted(names):
                self.api.delete(
                    f"/api/v1/namespaces/{ns}/pods", fieldSelector=f"spec.nodeName={name}", gracePeriodSeconds=0
                )
        for name in sorted(names):
            self.api.delete_if_exists(f"/api/v1/nodes/{name}")
        # A pod bound in the moment before a cordon was seen: gone with its node, as the pods before it.
        for ns in self.namespaces:
            for pod in self.api.list(f"/api/v1/namespaces/{ns}/pods"):
                if pod["spec"].get("nodeName") in names:
                    self.api.delete_if_exists(
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", gracePeriodSeconds=0
                    )
        self.log(f"removed {', '.join(sorted(names))}")

    def _scale_down(self, pods: list[dict[str, Any]]) -> None:
        busy = {p["spec"].get("nodeName") for p in pods}
        now = self.now()
        idle = []
        for book in self.live():
            if book.name in busy or book.ends_at is not None or (book.spot and self.refill):
                book.empty_since = None
            elif book.empty_since is None:
                book.empty_since = now
            elif now - book.empty_since >= replay.REMOVAL_DELAY:
                idle.append(book)
        self._remove(idle)

    def _scale_up(self, waiting: list[Pod], pods: list[dict[str, Any]]) -> None:
        """Nodes for the waiting pods that fit neither the free room of the nodes there (kube-scheduler has not
        retried them yet: it backs off a pod that failed, up to 10 s; cluster-autoscaler, too, leaves out pods
        that fit existing nodes) nor the nodes coming."""
        nt = replay.NODE_TYPE
        cap = (nt.cpu_m * ALLOCATABLE_SHARE, nt.memory_mi * ALLOCATABLE_SHARE)
        used: dict[str, list[int]] = {}
        for obj in pods:
            if obj["spec"].get("nodeName"):
                cpu, mem = _req(Pod.from_api(obj))
                u = used.setdefault(obj["spec"]["nodeName"], [0, 0])
                u[0] += cpu
                u[1] += mem
        room = [
            [cap[0] - used.get(b.name, [0, 0])[0], cap[1] - used.get(b.name, [0, 0])[1], b.zone, b.spot]
            for b in self.live()
            if b.ends_at is None
        ]
        room += [[cap[0], cap[1], zone, spot] for _, zone, spot in self.coming]
        for group in groups_to_add(waiting, room, self._allows):
            self._add_for(group)

    def _add_for(self, pods: list[Pod]) -> None:
        limits = self.trace.limits_at(self.now())
        counts: dict[tuple[str, str], int] = {}
        for book in self.live():
            if book.spot and book.ends_at is None:
                counts[(book.zone, replay.NODE_TYPE.name)] = counts.get((book.zone, replay.NODE_TYPE.name), 0) + 1
        for _, zone, spot in self.coming:
            if spot:
                counts[(zone, replay.NODE_TYPE.name)] = counts.get((zone, replay.NODE_TYPE.name), 0) + 1
        sample = pods[0]
        choice = cheapest_nodes(
            [_req(p) for p in pods],
            (replay.NODE_TYPE,),
            spot_room={pool: 0 if self.refill else limits[pool] - counts.get(pool, 0) for pool in limits},
            zones={spot: [z for z in ZONES if self._allows(sample, z, spot)] for spot in (True, False)},
            zone_nodes={z: sum(1 for b in self.live() if b.zone == z) for z in ZONES},
            prices=dict.fromkeys(limits, replay.SPOT_FRACTION),
        )
        if choice is None:
            return
        _, zone, n, spot = choice
        self.coming += [(self.now() + replay.PROVISION_DELAY, zone, spot)] * n
        self.log(f"{n} {'spot' if spot else 'on-demand'} node(s) in {zone} for {len(pods)} pod(s) ({pods[0].key}, ...)")

    def log(self, what: str) -> None:
        self.events.append(f"t={self.now():6.0f}s {what}")

    def _allows(self, p: Pod, zone: str, spot: bool) -> bool:
        """Whether a new node of this zone and capacity type could take ``p`` (asked once per controller: the pods
        of one controller ask for the same nodes)."""
        controllers = tuple(f"{o.kind}/{o.name}" for o in p.owners if o.controller)
        owner = f"{p.namespace}/{'/'.join(controllers)}" if controllers else p.key
        key = (owner, zone, spot)
        known = self.allows.get(key)
        if known is None:
            probe = NodeInfo(
                Node.from_api(
                    {
                        "metadata": {
                            "name": f"probe-{zone}-{int(spot)}",
                            "labels": {
                                SPOT_LABEL: "spot" if spot else "on-demand",
                                ZONE_LABEL: zone,
                                TEST_LABEL: self.label,
                            },
                        },
                        "spec": {},
                        "status": {"allocatable": {"cpu": "1000", "memory": "1000Gi", "pods": "1000"}},
                    }
                )
            )
            snap = ClusterSnapshot()
            snap.nodes[probe.name] = probe
            reasons = fits(p, probe, snap, check_node_ready=False)
            known = self.allows[key] = not any(
                r for r in reasons if r.code not in (ERR_INSUFFICIENT, ERR_TOO_MANY_PODS)
            )
        return known

    # ---- figures --------------------------------------------------------------------------------------------

    def live(self) -> list[Book]:
        return [b for b in self.books.values() if b.gone is None]

    def on_demand_node_minutes(self, until: float) -> float:
        """The integral of the on-demand node count over ``[0, until)`` trace seconds, in minutes."""
        return node_minutes(self.books, until, spot=False)

    def series(self, until: float) -> list[int]:
        """The on-demand node count at each trace minute up to ``until``."""
        return on_demand_series(self.books, until)

    def halt(self) -> None:
        """Stop the market and the provisioner; the nodes stay."""
        self.stop.set()
        if self.is_alive():
            self.join(60)

    def close(self) -> None:
        self.halt()
        self.plane.delete_nodes([b.name for b in self.live()])
        self.api.close()


def _req(p: Pod) -> tuple[int, int]:
    return p.node_requests.get("cpu", 0), p.node_requests.get("memory", 0) // (1 << 20)


def node_minutes(books: dict[str, Book], until: float, *, spot: bool) -> float:
    """The integral of the count of nodes of one capacity type over ``[0, until)`` trace seconds, in minutes."""
    total = 0.0
    for b in books.values():
        if b.spot == spot:
            end = until if b.gone is None else min(b.gone, until)
            total += max(0.0, end - max(b.born, 0.0))
    return total / 60.0


def on_demand_series(books: dict[str, Book], until: float) -> list[int]:
    """The on-demand node count at each trace minute up to ``until``."""
    return [
        sum(1 for b in books.values() if not b.spot and b.born <= t and (b.gone is None or b.gone > t))
        for t in range(0, int(until), 60)
    ]
