"""Karpenter with its KWOK cloud provider (tests/support/peers.py) on the real control plane, and the spot market of
the replay's trace played through it.

* :class:`Karpenter`: the controller as a process, out of cluster, with the control plane's admin kubeconfig, no
  leader election and its own free metrics and health ports; :func:`install_crds` applies Karpenter's CRDs first.
* :func:`node_class` and :func:`node_pool`: one ``KWOKNodeClass`` and one ``NodePool`` allowing spot and on-demand,
  of the KWOK type closest to the replay's ``m.xlarge`` (:data:`INSTANCE_TYPE`) in three zones, consolidating
  ``WhenEmptyOrUnderutilized`` with Karpenter's defaults (``consolidateAfter: 0s``, the 10%-of-nodes budget).
  Its template annotates every node for the kubelet stand-in (tests/support/controlplane/kubelet.py) and labels
  it with the test's label, which the test's pods select; Karpenter itself removes the ``karpenter.sh/unregistered``
  taint it puts on each node once the node is registered, and the stand-in the ``not-ready`` one.
* :class:`KarpenterCloud`: the spot market (KWOK's spot never runs out): from the trace's cut to its return the
  NodePool allows on-demand only, and every spot node gets the reclaim notice (the
  ``aws-node-termination-handler/spot-itn`` taint) and ends ``NOTICE`` later, cordoned, its pods deleted with no
  grace period, then the Node deleted (Karpenter's termination finalizer then finds nothing to drain). It keeps
  node books as tests/support/replay_cloud.py's ``Cloud`` does, from the Node objects Karpenter creates, with the
  same figures, and the marks seen on each node (Karpenter's ``karpenter.sh/disrupted`` taint, spotshift's
  ``spotshift.io/draining``).

"No spot capacity" is the NodePool's capacity types narrowed to on-demand: the operator's one NodePool stays the
one Karpenter provisions from, and no spot node can come while the market is out (a second, spot-only NodePool
whose limits drop to zero would change the configuration measured). Karpenter sees its spot nodes drifted
(``RequirementsDrifted``) from then on and replaces them, an on-demand node first, then a drain, within its
disruption budget, while their notice runs: what Karpenter on AWS does on a reclaim notice with its interruption
handling, though budgeted. Those evictions fall before the trace's return (the test reports them apart).

What the test cannot compress: Karpenter's own timers run on the wall clock while the trace runs ``COMPRESSION``
times faster: the disruption controller's 10 s poll, the 15 s wait before a consolidation is carried out (it
checks the decision still holds), the provisioner's batching window (1 s idle, 10 s at most). In trace time they
are five times longer than on a real cluster, so consolidation here starts later and moves fewer nodes a trace
minute than it would: the on-demand node-minutes measured for Karpenter are an upper bound of the real ones.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.controlplane.kubelet import MANAGED_ANNOTATION, MANAGED_VALUE
from tests.support.controlplane.process import Component, free_ports
from tests.support.peers import karpenter_binary, karpenter_crds
from tests.support.replay_cloud import TEST_LABEL, Book

INSTANCE_TYPE = "s-4x-amd64-linux"
"""The KWOK type of the replay's ``m.xlarge`` (4 CPU, 16 GiB): the same CPU and memory. Karpenter reserves 100m
CPU and 10 MiB of it, so it holds three of the replay's 1-CPU pods, as ``m.xlarge`` does."""
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c")
"""Three of the four zones KWOK offers, as the replay's three."""
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
RECLAIM_TAINT = "aws-node-termination-handler/spot-itn"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
DRAIN_TAINT = "spotshift.io/draining"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crds(plane: ControlPlane, timeout: float = 60.0) -> None:
    """Karpenter's CRDs, created (or left as they are) and Established."""
    names = []
    for path in karpenter_crds():
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            plane.api.post(CRDS, body)
        except ApiError as error:
            if error.status != 409:
                raise

    def established() -> bool:
        for name in names:
            conditions = plane.api.get(f"{CRDS}/{name}").get("status", {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_for(established, timeout=timeout, what="Karpenter's CRDs to be Established")


class Karpenter(Component):
    """``karpenter-kwok`` against ``plane`` (its settings in its environment, set by ``env`` in the process the
    component starts); ``start()`` returns once its health probe answers."""

    def __init__(self, plane: ControlPlane, log_path: Path) -> None:
        self.metrics_port, self.health_port = free_ports(2)
        settings = {
            "KUBECONFIG": str(plane.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "SYSTEM_NAMESPACE": "kube-system",
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "LOG_LEVEL": "info",
        }
        argv = ["env", *(f"{k}={v}" for k, v in settings.items()), str(karpenter_binary())]
        super().__init__("karpenter", argv, log_path)

    def start(self, timeout: float = 60.0) -> None:
        super().start()
        session = requests.Session()
        session.trust_env = False
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        try:
            wait_for(lambda: session.get(url, timeout=2).ok, timeout=timeout, what=url, check=self.ensure_alive)
        finally:
            session.close()


def node_class(name: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}}


def capacity_requirement(types: list[str]) -> dict[str, Any]:
    return {"key": CAPACITY_TYPE, "operator": "In", "values": types}


CONSOLIDATING: dict[str, Any] = {"consolidationPolicy": "WhenEmptyOrUnderutilized"}
"""The NodePool's disruption as most operators write it: consolidation with Karpenter's defaults."""


def when_empty(consolidate_after: str) -> dict[str, Any]:
    """A disruption block that makes Karpenter the autoscaler of nodes for pending pods and nothing more: a node
    empty for ``consolidate_after`` is removed (any number at once), a used one is never consolidated, and a node
    drifted from the NodePool (the spot nodes, once the outage narrows it to on-demand) is not replaced."""
    return {
        "consolidationPolicy": "WhenEmpty",
        "consolidateAfter": consolidate_after,
        "budgets": [{"nodes": "100%", "reasons": ["Empty"]}, {"nodes": "0", "reasons": ["Drifted"]}],
    }


def node_pool(
    name: str, node_class_name: str, label: str, capacity_types: list[str], disruption: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The NodePool: ``INSTANCE_TYPE`` in ``ZONES`` of ``capacity_types``, nodes labelled ``TEST_LABEL: label`` and
    served by the kubelet stand-in; ``disruption`` (default ``CONSOLIDATING``)."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {TEST_LABEL: label}, "annotations": {MANAGED_ANNOTATION: MANAGED_VALUE}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": node_class_name},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
                        {"key": ZONE_LABEL, "operator": "In", "values": list(ZONES)},
                        capacity_requirement(capacity_types),
                    ],
                },
            },
            "disruption": dict(disruption or CONSOLIDATING),
        },
    }


def set_capacity_types(plane: ControlPlane, pool: str, types: list[str]) -> None:
    """The NodePool's capacity types, the other requirements as they are."""
    path = f"{NODEPOOLS}/{pool}"
    body = plane.api.get(path)
    requirements = body["spec"]["template"]["spec"]["requirements"]
    body["spec"]["template"]["spec"]["requirements"] = [
        *(r for r in requirements if r["key"] != CAPACITY_TYPE),
        capacity_requirement(types),
    ]
    plane.api.put(path, body)


class KarpenterCloud(threading.Thread):
    """The spot market of a trace (``cut``, ``back``, ``notice`` in trace seconds) over the nodes Karpenter creates
    for ``pool`` (labelled ``TEST_LABEL: label``), and their books. The clock is trace time:
    ``(monotonic - t0) * compression``. ``ended`` lists the nodes the cloud reclaimed, with the trace time;
    ``on_node_end`` is told of each, before its pods go."""

    def __init__(
        self,
        plane: ControlPlane,
        namespaces: list[str],
        pool: str,
        label: str,
        compression: float,
        *,
        cut: float,
        back: float,
        notice: float,
    ) -> None:
        super().__init__(daemon=True, name="karpenter-cloud")
        self.plane = plane
        self.api = plane.new_api()
        self.namespaces = namespaces
        self.pool = pool
        self.label = label
        self.k = compression
        self.cut, self.back, self.notice = cut, back, notice
        self.t0 = time.monotonic()
        self.books: dict[str, Book] = {}
        self.ended: list[tuple[str, float]] = []
        self.on_node_end: Callable[[str, float], None] = lambda name, at: None
        self.marks: dict[str, dict[str, float]] = {}
        """Per node, the marks of a drain seen on it (``DISRUPTED_TAINT``, ``DRAIN_TAINT``), each with the trace
        time it was first seen."""
        self.spot_allowed = True
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.events: list[str] = []

    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.k

    def log(self, message: str) -> None:
        self.events.append(f"t={self.now():6.0f}s {message}")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.tick()
            except (ApiError, requests.RequestException) as error:  # retried next tick, and reported
                self.errors.append(f"t={self.now():.0f}s: {error}")
            except Exception as error:  # a bug here: the test fails on it
                self.errors.append(f"t={self.now():.0f}s: {error!r}")
                raise
            self.stop.wait(0.1)

    def tick(self) -> None:
        now = self.now()
        outage = self.cut <= now < self.back
        if outage == self.spot_allowed:
            set_capacity_types(self.plane, self.pool, ["on-demand"] if outage else ["spot", "on-demand"])
            self.spot_allowed = not outage
            self.log("spot " + ("cut: the NodePool allows on-demand only" if outage else "back: spot allowed again"))
        nodes = {
            n["metadata"]["name"]: n for n in self.api.list("/api/v1/nodes", labelSelector=f"{TEST_LABEL}={self.label}")
        }
        self._books(nodes, now)
        self._remove([b for b in self.live() if b.ends_at is not None and b.ends_at <= now])
        if outage:
            for book in self.live():
                if book.spot and book.ends_at is None and book.name in nodes:
                    self._notice(nodes[book.name], now)
                    book.ends_at = now + self.notice

    def _books(self, nodes: dict[str, dict[str, Any]], now: float) -> None:
        """Nodes not in the books enter them at ``now``; booked ones that vanished (Karpenter's) end at ``now``; the
        marks seen, and the stand-in's annotation where a node lacks it."""
        for name, node in nodes.items():
            meta = node["metadata"]
            if name not in self.books:
                labels = meta.get("labels") or {}
                spot = labels.get(CAPACITY_TYPE) == "spot"
                self.books[name] = Book(name, labels.get(ZONE_LABEL, ""), spot, now)
                self.log(f"node {name} ({'spot' if spot else 'on-demand'}, {labels.get(ZONE_LABEL)})")
            if (meta.get("annotations") or {}).get(MANAGED_ANNOTATION) != MANAGED_VALUE:
                self.api.patch(
                    f"/api/v1/nodes/{name}", {"metadata": {"annotations": {MANAGED_ANNOTATION: MANAGED_VALUE}}}
                )
            for taint in node["spec"].get("taints") or []:
                if taint.get("key") in (DISRUPTED_TAINT, DRAIN_TAINT):
                    self.marks.setdefault(name, {}).setdefault(taint["key"], now)
        for book in self.live():
            if book.name not in nodes:
                book.gone = now
                self.log(f"node {book.name} gone (Karpenter)")

    def _notice(self, node: dict[str, Any], now: float) -> None:
        name = node["metadata"]["name"]
        taints = [*(node["spec"].get("taints") or []), {"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"}]
        self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints}})
        self.log(f"reclaim notice on {name}")

    def _remove(self, books: list[Book]) -> None:
        """End nodes as a cloud does: cordoned, their pods deleted with no grace period, then the Node."""
        if not books:
            return
        now = self.now()
        names = {b.name for b in books}
        for book in books:
            book.gone = now
            self.ended.append((book.name, now))
            self.on_node_end(book.name, now)
            with contextlib.suppress(ApiError):
                self.api.patch(f"/api/v1/nodes/{book.name}", {"spec": {"unschedulable": True}})
        for ns in self.namespaces:
            for name in sorted(names):
                self.api.delete(
                    f"/api/v1/namespaces/{ns}/pods", fieldSelector=f"spec.nodeName={name}", gracePeriodSeconds=0
                )
        for name in sorted(names):
            self.api.delete_if_exists(f"/api/v1/nodes/{name}")
        self.log(f"reclaimed {', '.join(sorted(names))}")

    # ---- figures --------------------------------------------------------------------------------------------

    def live(self) -> list[Book]:
        return [b for b in self.books.values() if b.gone is None]

    def on_demand_count(self) -> int:
        return sum(1 for b in self.live() if not b.spot)

    def fill(self) -> None:
        """Nothing before the trace's clock starts: Karpenter creates every node for the pods."""

    def halt(self) -> None:
        """Stop the market; the nodes stay, Karpenter's."""
        self.stop.set()
        if self.is_alive():
            self.join(30)

    def close(self) -> None:
        self.halt()
        self.api.close()


def evictions_by(plane: ControlPlane, namespace: str, component: str = "karpenter") -> list[dict[str, Any]]:
    """The ``Evicted`` events ``component`` recorded on the pods of ``namespace``."""
    out = []
    for event in plane.api.list(f"/api/v1/namespaces/{namespace}/events"):
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
        if event.get("reason") == "Evicted" and event["involvedObject"].get("kind") == "Pod" and component in source:
            out.append(event)
    return out


def remove_pool(plane: ControlPlane, pool: str, node_class_name: str, label: str, timeout: float = 120.0) -> None:
    """The NodePool and its nodes (Karpenter deletes them), then the node class."""
    plane.api.delete_if_exists(f"{NODEPOOLS}/{pool}")

    def gone() -> bool:
        return not list(plane.api.list("/api/v1/nodes", labelSelector=f"{TEST_LABEL}={label}"))

    with contextlib.suppress(TimeoutError):
        wait_for(gone, timeout=timeout, what=f"the nodes of NodePool {pool} to go")
    plane.api.delete_if_exists(f"{NODECLASSES}/{node_class_name}")


__all__ = [
    "INSTANCE_TYPE",
    "ZONES",
    "Karpenter",
    "KarpenterCloud",
    "evictions_by",
    "install_crds",
    "node_class",
    "node_pool",
    "remove_pool",
    "set_capacity_types",
]
