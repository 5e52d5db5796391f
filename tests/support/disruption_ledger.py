"""What happened to the workload pods of a run on the real control plane, whoever disrupted them: a list+watch of
the pods of the given namespaces (the informer of tests/support/controlplane/kubelet.py) that records each pod's
creation, binding and end, and a sampler of the PodDisruptionBudgets. The figures it yields are the same for every
policy (spotshift, the descheduler, Karpenter):

* **evictions**: pods that ended through the Eviction API (the API server sets the ``DisruptionTarget`` condition
  with reason ``EvictionByEvictionAPI`` on the pod before deleting it);
* **reclaimed**: pods that ended with a spot node the cloud removed (the cloud tells the ledger, ``node_ended``);
* **moved then reclaimed**: each eviction of a pod of owner O at time t marks the next pod of O created after t as
  moved (one to one); a moved pod later reclaimed counts;
* **pending pod-minutes**: from each pod's creation (at the earliest the start of the run) to its binding, or to
  its end or the end of the run when it was never bound;
* **PDB violations**: the times a budget went below its minimum (``currentHealthy < desiredHealthy``) with no spot
  reclaim to explain it: a budget one of whose pods was reclaimed is explained until it is seen whole
  ``SETTLE`` trace seconds or more after that reclaim (the disruption controller writes a budget's status after
  the pods go, so a sample just after a reclaim may still show it whole), and a budget counts from the first time
  it is whole with pods (they start unready);
* **lost pods**: as the simulation counts them (``bench.churnlab.books.Tally.lost_pods``): each Deployment's
  replicas missing at the end, plus pods that left the API server without an eviction or a reclaim.

Times are the caller's clock (``now``: trace seconds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.controlplane import Api, ControlPlane
from tests.support.controlplane.kubelet import Watcher

SETTLE = 30.0
"""Trace seconds after a reclaim during which a budget seen whole is still explained (its status may lag)."""

EVICTED_REASON = "EvictionByEvictionAPI"
PDBS = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"


@dataclass(slots=True)
class PodRecord:
    namespace: str
    name: str
    owner: str
    """The controller's uid (``""``: none)."""
    labels: dict[str, str]
    created: float
    bound: float | None = None
    node: str | None = None
    ended: float | None = None
    evicted: bool = False
    reclaimed: bool = False
    moved: bool = False


def _evicted(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == EVICTED_REASON
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class DisruptionLedger:
    """See the module docstring. ``start()`` returns once the pods are listed; ``close()`` stops the watch."""

    def __init__(self, plane: ControlPlane, namespaces: list[str], now: Callable[[], float]) -> None:
        self.plane = plane
        self.namespaces = namespaces
        self.now = now
        self.lock = threading.Lock()
        self.pods: dict[str, PodRecord] = {}
        """By uid."""
        self.ended_nodes: dict[str, float] = {}
        self.pending_moves: dict[str, list[float]] = {}
        """Owner uid → times of evictions not matched to a replacement yet."""
        self.stop = threading.Event()
        self.pdb_api: Api = plane.new_api()
        self.below: dict[str, bool] = {}
        self.whole_once: set[str] = set()
        self.dirty: dict[str, float] = {}
        """Budgets with a pod reclaimed since they were last seen whole ``SETTLE`` after it: the last reclaim's time."""
        self.violations: list[tuple[float, str]] = []
        self.samples = 0
        self.selectors: dict[str, dict[str, str]] = {}
        """Budget → its ``matchLabels``."""
        self.watchers = [
            Watcher(
                f"ledger-{ns}",
                plane.new_api(),
                f"/api/v1/namespaces/{ns}/pods",
                {},
                self._on_list,
                self._on_event,
                self.stop,
            )
            for ns in namespaces
        ]

    def start(self, timeout: float = 30.0) -> None:
        for w in self.watchers:
            w.start()
        for w in self.watchers:
            if not w.synced.wait(timeout):
                raise TimeoutError(f"{w.name} did not list the pods in {timeout}s")

    def close(self) -> None:
        self.stop.set()
        for w in self.watchers:
            w.close()
        for w in self.watchers:
            w.join(10)
            w.api.close()
        self.pdb_api.close()

    # ---- the cloud's word -----------------------------------------------------------------------------------

    def node_ended(self, name: str, at: float) -> None:
        """The cloud ends node ``name`` at ``at`` (before its pods go): its pods that end are reclaimed, and their
        budgets' fall is explained from now on."""
        with self.lock:
            self.ended_nodes[name] = at
            for record in self.pods.values():
                if record.node == name and record.ended is None:
                    self._explain(record)

    # ---- the watch ------------------------------------------------------------------------------------------

    def _on_list(self, items: list[dict[str, Any]]) -> None:
        for pod in items:
            self._on_event("ADDED", pod)

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with self.lock:
            record = self.pods.get(meta["uid"])
            if record is None:
                record = self._record(pod)
            node = pod["spec"].get("nodeName")
            if node and record.bound is None:
                record.bound, record.node = self.now(), node
            record.evicted = record.evicted or _evicted(pod)
            if kind == "DELETED" and record.ended is None:
                self._end(record)

    def _record(self, pod: dict[str, Any]) -> PodRecord:
        meta = pod["metadata"]
        owner = next((o["uid"] for o in meta.get("ownerReferences") or [] if o.get("controller")), "")
        record = PodRecord(meta["namespace"], meta["name"], owner, dict(meta.get("labels") or {}), self.now())
        self.pods[meta["uid"]] = record
        moves = self.pending_moves.get(owner)
        if owner and moves:
            moves.pop(0)
            record.moved = True
        return record

    def _end(self, record: PodRecord) -> None:
        record.ended = self.now()
        if record.evicted:
            if record.owner:
                self.pending_moves.setdefault(record.owner, []).append(record.ended)
        elif record.node is not None and record.node in self.ended_nodes:
            record.reclaimed = True
            self._explain(record)

    def _explain(self, record: PodRecord) -> None:
        for pdb, selector in self.selectors.items():
            if all(record.labels.get(k) == v for k, v in selector.items()):
                self.dirty[pdb] = self.now()

    # ---- the budgets ----------------------------------------------------------------------------------------

    def sample_budgets(self) -> None:
        """Read every budget's status once; a fall below its minimum that no reclaim explains is a violation."""
        now = self.now()
        for ns in self.namespaces:
            for pdb in self.pdb_api.list(PDBS.format(ns=ns)):
                key = f"{ns}/{pdb['metadata']['name']}"
                with self.lock:
                    self.selectors[key] = dict((pdb["spec"].get("selector") or {}).get("matchLabels") or {})
                status = pdb.get("status") or {}
                if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                    continue
                below = status.get("currentHealthy", 0) < status.get("desiredHealthy", 0)
                with self.lock:
                    if not below:
                        if now - self.dirty.get(key, -SETTLE) >= SETTLE:
                            self.dirty.pop(key, None)
                        if status.get("expectedPods", 0) > 0:
                            self.whole_once.add(key)
                    elif not self.below.get(key) and key in self.whole_once and key not in self.dirty:
                        self.violations.append((now, key))
                    self.below[key] = below
        self.samples += 1

    # ---- figures --------------------------------------------------------------------------------------------

    def records(self) -> list[PodRecord]:
        with self.lock:
            return list(self.pods.values())

    def evictions(self) -> int:
        return sum(1 for r in self.records() if r.evicted and r.ended is not None)

    def reclaimed(self) -> int:
        return sum(1 for r in self.records() if r.reclaimed)

    def moved_then_reclaimed(self) -> int:
        return sum(1 for r in self.records() if r.moved and r.reclaimed)

    def pending_pod_minutes(self, until: float) -> float:
        total = 0.0
        for r in self.records():
            end = r.bound if r.bound is not None else (r.ended if r.ended is not None else until)
            total += max(0.0, min(end, until) - max(r.created, 0.0))
        return total / 60.0

    def unexplained_ends(self, before: float) -> int:
        """Pods that ended before ``before`` with neither an eviction nor a reclaim."""
        return sum(
            1 for r in self.records() if r.ended is not None and r.ended < before and not r.evicted and not r.reclaimed
        )

    def lost_pods(self, namespace: str, before: float) -> int:
        """Each Deployment's replicas missing now (pods not terminating), plus :meth:`unexplained_ends`."""
        api = self.plane.api
        pods = [
            p for p in api.list(f"/api/v1/namespaces/{namespace}/pods") if not p["metadata"].get("deletionTimestamp")
        ]
        missing = 0
        for d in api.list(f"/apis/apps/v1/namespaces/{namespace}/deployments"):
            selector = d["spec"]["selector"].get("matchLabels") or {}
            have = sum(
                1 for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            )
            missing += max(0, d["spec"].get("replicas", 1) - have)
        return missing + self.unexplained_ends(before)
