"""The spot market: a pool whose limit (the trace's) falls below its nodes gives the newest of them a reclaim notice
(the termination handler's ``aws-node-termination-handler/spot-itn`` taint) and deletes them, with their pods, when
the notice runs out. With background reclaim rates (an option: the churn day has them, the replay worlds not), each
spot node is also reclaimed, with the same notice, at a time drawn when it joins: exponential with its pool's rate
per node-hour (single nodes at random, on top of the trace's cuts)."""

from __future__ import annotations

import math
import random

from bench.churnlab.books import RECLAIM_TAINT, Books, NodeBook

NOTICE = 120.0
"""Seconds between a spot reclaim notice and the node's end (the default of ``World(notice=...)``)."""


class SpotMarket:
    """See the module docstring; ``notice``: seconds from a reclaim notice to the node's end."""

    def __init__(
        self,
        books: Books,
        notice: float = NOTICE,
        reclaim_rates: dict[tuple[str, str], float] | None = None,
        *,
        seed: int = 0,
    ) -> None:
        self.books = books
        self.notice = notice
        self.reclaim_rates = dict(reclaim_rates or {})
        """Spot pool → reclaims per node-hour besides the trace's cuts (a pool not named: none)."""
        self.seed = seed
        self.reclaim_at: dict[str, float] = {}
        """Spot node → when the market reclaims it (its notice starts) unless the trace does first."""
        self.joined: dict[tuple[str, str], int] = {}
        """Spot pool → nodes that joined it so far (the k-th node of a pool draws its time from its own stream)."""

    def step(self) -> None:
        """Nodes whose notice ran out end (their pods counted as reclaimed, and those moved there by the policy as
        moved then reclaimed), then pools over their limit give
        notice to their newest nodes."""
        b = self.books
        for name, book in list(b.nodes.items()):
            if book.ends_at is not None and book.ends_at <= b.now:
                if b.counting():
                    gone = [
                        b.pods[k]
                        for k, o in b.server.store["pods"].items()
                        if o["spec"].get("nodeName") == name and k in b.pods
                    ]
                    b.tally.reclaimed_pods += len(gone)
                    b.tally.moved_then_reclaimed += sum(1 for book in gone if book.moved)
                self._remove_node(name)
        if self.reclaim_rates:
            self._background()
        limits = b.trace.limits_at(b.now)
        live: dict[tuple[str, str], list[NodeBook]] = {}
        for book in b.nodes.values():
            if book.spot and book.ends_at is None:
                live.setdefault((book.zone, book.node_type.name), []).append(book)
        for pool, books in live.items():
            over = len(books) - limits[pool]
            for book in sorted(books, key=lambda x: (-x.born, x.name))[: max(0, over)]:
                self._notice(book)

    def reclaiming(self) -> bool:
        """Whether a node is under notice."""
        return any(b.ends_at is not None for b in self.books.nodes.values())

    def next_change(self) -> float:
        """When the trace next changes a pool's limit or a node's background reclaim is due (infinity: never)."""
        b = self.books
        at = min([c.at for c in b.trace.changes if c.at > b.now][:1], default=math.inf)
        return min([at, *self.reclaim_at.values()])

    def _background(self) -> None:
        """Draw the reclaim time of every spot node that joined since the last step; give notice to those due."""
        b = self.books
        for name, book in b.nodes.items():
            if not book.spot or name in self.reclaim_at or book.ends_at is not None:
                continue
            pool = (book.zone, book.node_type.name)
            k = self.joined[pool] = self.joined.get(pool, 0) + 1
            rate = self.reclaim_rates.get(pool, 0.0)
            rng = random.Random(f"{self.seed}/{pool[0]}/{pool[1]}/{k}")
            self.reclaim_at[name] = book.born + (rng.expovariate(rate / 3_600.0) if rate > 0 else math.inf)
        for name in [n for n, at in self.reclaim_at.items() if n not in b.nodes]:
            del self.reclaim_at[name]
        for name, at in sorted(self.reclaim_at.items()):
            book = b.nodes[name]
            if at <= b.now and book.ends_at is None:
                self._notice(book)

    def _remove_node(self, name: str) -> None:
        b = self.books
        for key in [k for k, o in b.server.store["pods"].items() if o["spec"].get("nodeName") == name]:
            b.delete_pod(key)
        b.server.remove("nodes", name)
        b.nodes.pop(name, None)

    def _notice(self, book: NodeBook) -> None:
        b = self.books
        book.ends_at = b.now + self.notice
        obj = b.server.store["nodes"][book.name]
        obj = {**obj, "spec": {**obj["spec"]}}
        obj["spec"]["taints"] = [
            *(obj["spec"].get("taints") or []),
            {"key": RECLAIM_TAINT, "value": "true", "effect": "NoSchedule"},
        ]
        b.server.put("nodes", obj)
