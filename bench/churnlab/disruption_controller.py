"""The disruption controller: every PodDisruptionBudget's status from the Ready pods, and the judgement of an
eviction from the pods themselves (:meth:`DisruptionController.breaks_budget`), by which the API server counts the
evictions it lets through on a stale status."""

from __future__ import annotations

import math

from bench.churnlab.books import Books, Obj
from bench.churnlab.scenario import Workload


class DisruptionController:
    """See the module docstring."""

    def __init__(self, books: Books) -> None:
        self.books = books

    def adopt(self, w: Workload) -> None:
        """Create ``w``'s budget, if it has one."""
        if w.pdb:
            self.books.server.put("pdbs", _pdb(w))

    def step(self) -> None:
        """Every budget's status, when a pod changed since the last step."""
        server = self.books.server
        if not server.pods_changed:
            return
        server.pods_changed = False
        ready: dict[str, int] = {}
        expected: dict[str, int] = {}
        for book in self.books.pods.values():
            expected[book.workload] = expected.get(book.workload, 0) + 1
            if book.ready:
                ready[book.workload] = ready.get(book.workload, 0) + 1
        for obj in list(server.store["pdbs"].values()):
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
                server.put("pdbs", new)

    def breaks_budget(self, pod: Obj) -> bool:
        """Whether evicting ``pod`` (Ready) now breaks its budget, judged from the pods themselves (not from the
        status the eviction read)."""
        b = self.books
        app = pod["metadata"]["labels"]["app"]
        obj = b.server.store["pdbs"].get(f"default/{app}")
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        book = b.pods.get(key)
        if obj is None or book is None or not book.ready:
            return False
        ready = sum(1 for x in b.pods.values() if x.workload == app and x.ready)
        n = sum(1 for x in b.pods.values() if x.workload == app)
        return ready - 1 < _desired(obj, n)


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
