"""How long a node is left alone after a failed drain or a failed capacity request: one object that the drainer and
the capacity requester share, so both rest a node the same way and the gate reads one memory of it.

A node rests ``node_backoff`` × 2^(failures-1), recorded in its annotations
(:meth:`~rescheduler.cluster.marking.NodeMarker.back_off`). A rest that cannot be written, or that the watch does
not show yet, is kept in :attr:`NodeBackoff.memory` too (the gate's ``memory_backoff``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rescheduler.cluster.events import NODE_BACKOFF, WARNING, EventRecorder, Ref
from rescheduler.cluster.marking import ONE_ATTEMPT, NodeMarker, iso
from shared.kube.api import ApiError

__all__ = ["NodeBackoff"]


class NodeBackoff:
    """Rests nodes: writes the rest on the node (one attempt), remembers it, and records a ``NodeBackoff`` Event.
    ``base`` is ``node_backoff``; ``wall`` (Unix seconds) dates the rests."""

    def __init__(
        self,
        marker: NodeMarker,
        events: EventRecorder,
        base: float,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.marker = marker.with_retry(ONE_ATTEMPT)
        self.events = events
        self.base = base
        self.wall = wall
        self.memory: dict[str, float] = {}
        """Node → until when (Unix seconds) it rests: rests decided in dry-run, not yet watched, or not written."""

    def back_off(self, node_name: str, reason: str, ref: Ref | None = None) -> tuple[float, str]:
        """Leave the node alone for ``node_backoff`` × 2^(failures-1), recorded on the node (one attempt; in memory
        when it cannot be written), with an Event naming ``reason``. Returns the Unix time until which the node
        rests, and a note for the message (``""``, or that the backoff is kept in memory only)."""
        try:
            rest: tuple[float, int] | None = self.marker.back_off(node_name, self.wall(), self.base)
            error = ""
        except ApiError as e:
            rest, error = None, str(e)
        note = self.rest(node_name, ref or Ref.node(node_name), rest, reason, error)
        return self.memory[node_name], note

    def rest(self, node_name: str, ref: Ref, rest: tuple[float, int] | None, reason: str, error: str) -> str:
        """Remember the node's rest (``rest`` as written, or one ``node_backoff`` when it could not be) with an
        Event; the note for the message (``""``, or that the backoff is kept in memory only)."""
        now = self.wall()
        until, failures = rest if rest is not None else (now + self.base, 1)
        note = "" if rest is not None else f" (backoff kept in memory only: {error})"
        # Also in memory: the next cycle may come before the watch shows the node's backoff annotation.
        self.memory[node_name] = max(until, self.memory.get(node_name, 0.0))
        self.events.record(
            ref,
            WARNING,
            NODE_BACKOFF,
            f"Not draining this node again before {iso(until)} (failure {failures}): {reason}",
        )
        return note
