"""Full garbage collections on a clock rather than on allocations: the rescheduler's big, long-lived state.

``spot-rescheduler run`` keeps the cluster's state in memory: at 150,000 pods about 1.9 million objects that
CPython's cyclic garbage collector tracks (a watch event's replacement frees the old object by reference counting,
not by the collector). CPython collects its oldest generation, walking every one of those objects, once
the objects promoted to it since its last full collection exceed a quarter of it. A planning cycle replaces its
plan caches, and those count among them: at 5,000 nodes one planning cycle in four or five paid a full collection of
0.6-1 s, about as much CPU as the rest of the cycle (``bench/run_cycle.py``; docs/sizing.md).

:class:`FullCollections` turns that automatic trigger off and makes the full collection itself: at the end of a
cycle, once :data:`FULL_COLLECTION_INTERVAL` has passed since the last one. The young generations are collected as
before, so the loop's short-lived garbage goes as it did; a reference cycle that reaches the oldest generation (a
traceback kept by an exception, a closed connection) is freed within the interval instead of at an unknown later
time. Each full collection is timed into ``spotshift_rescheduler_full_collection_duration_seconds``.

This relies on the generational collector of CPython 3.11 to 3.13 (the oldest generation's threshold counts the
collections of the middle one). On another interpreter :meth:`FullCollections.start` leaves the collector alone and
:meth:`FullCollections.after_cycle` does nothing.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable

from rescheduler.logs import fields

__all__ = ["FullCollections", "FULL_COLLECTION_INTERVAL", "SCHEDULED"]

log = logging.getLogger("spotshift.rescheduler")

FULL_COLLECTION_INTERVAL = 600.0
"""Seconds between two full collections (``clock``), the first counted from :meth:`FullCollections.start`."""

SCHEDULED = sys.implementation.name == "cpython" and sys.version_info < (3, 14)
"""Whether this interpreter's collector is the generational one :class:`FullCollections` schedules."""

_OUT_OF_REACH = 1 << 30
"""The oldest generation's threshold while the full collections are scheduled: collections of the middle
generation it would take before the next automatic one (at about twenty a planning cycle, never)."""


class FullCollections:
    """The full collections of one process, made every ``interval`` seconds of ``clock`` at the end of a cycle;
    ``observe`` is given each one's seconds (a histogram's ``observe``)."""

    def __init__(
        self,
        observe: Callable[[float], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = FULL_COLLECTION_INTERVAL,
        scheduled: bool = SCHEDULED,
    ) -> None:
        self.observe = observe
        self.clock = clock
        self.interval = interval
        self.scheduled = scheduled
        self.last: float | None = None
        """When (``clock``) the interval last started: :meth:`start`, then each full collection."""
        self._thresholds: tuple[int, int, int] | None = None

    def start(self) -> None:
        """Turn the automatic full collections off (the young generations' thresholds kept); the first scheduled
        one is due an interval from now."""
        if not self.scheduled or self._thresholds is not None:
            return
        self._thresholds = gc.get_threshold()
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, _OUT_OF_REACH)
        self.last = self.clock()

    def stop(self) -> None:
        """The collector's thresholds as they were before :meth:`start`."""
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def after_cycle(self) -> float | None:
        """A full collection if one is due; its seconds, else ``None``."""
        if self._thresholds is None or self.last is None or self.clock() - self.last < self.interval:
            return None
        t0 = time.perf_counter()
        unreachable = gc.collect()
        seconds = time.perf_counter() - t0
        self.last = self.clock()
        self.observe(seconds)
        log.debug(
            "full garbage collection",
            extra=fields(seconds=round(seconds, 3), unreachable=unreachable),
        )
        return seconds
