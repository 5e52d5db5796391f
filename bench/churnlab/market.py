"""The spot market: a pool whose limit (the trace's) falls below its nodes gives the newest of them a reclaim notice
(the termination handler's ``aws-node-termination-handler/spot-itn`` taint) and deletes them, with their pods, when
the notice runs out."""

from __future__ import annotations

import math

from bench.churnlab.books import RECLAIM_TAINT, Books, NodeBook

NOTICE = 120.0
"""Seconds between a spot reclaim notice and the node's end (the default of ``World(notice=...)``)."""


class SpotMarket:
    """See the module docstring; ``notice``: seconds from a reclaim notice to the node's end."""

    def __init__(self, books: Books, notice: float = NOTICE) -> None:
        self.books = books
        self.notice = notice

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
        """When the trace next changes a pool's limit (infinity: never)."""
        b = self.books
        return min([c.at for c in b.trace.changes if c.at > b.now][:1], default=math.inf)

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
