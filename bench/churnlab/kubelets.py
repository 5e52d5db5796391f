"""The kubelets: a bound pod is Running at once and Ready ``ready_after`` seconds later; a Job pod works while it
is bound and succeeds once it has worked its workload's ``runs_for`` seconds."""

from __future__ import annotations

import math

from bench.churnlab.books import Books


class Kubelets:
    """See the module docstring."""

    def __init__(self, books: Books, ready_after: float) -> None:
        self.books = books
        self.ready_after = ready_after

    def step(self, dt: float) -> None:
        """The ``dt`` seconds ending now: pods become Ready, Job pods work and succeed."""
        b = self.books
        store = b.server.store["pods"]
        for key in sorted(b.starting | b.working):
            book = b.pods.get(key)
            obj = store.get(key)
            if obj is None or book is None:
                b.starting.discard(key)
                b.working.discard(key)
                continue
            if book.bound_at is None:
                continue
            if book.ready:
                b.starting.discard(key)
            if not book.ready and b.now - book.bound_at >= self.ready_after:
                book.ready = True
                b.starting.discard(key)
                obj = {**obj, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                b.server.put("pods", obj)
            if book.job and key in b.working:
                book.worked += dt
                w = b.workloads[book.workload]
                if book.worked >= w.runs_for:
                    b.job_pod_succeeded(key, book.job)

    def next_event(self) -> float:
        """When the first bound Job pod finishes its work (infinity: none is bound)."""
        b = self.books
        return min(
            (
                b.now + b.workloads[book.workload].runs_for - book.worked
                for book in b.pods.values()
                if book.job and book.bound_at is not None
            ),
            default=math.inf,
        )
