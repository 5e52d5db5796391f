"""rescheduler/full_collections.py: the process's full garbage collections made on a clock, after a cycle, and the
run loop that makes them (``spot-rescheduler run`` wires them; the helm e2e test scrapes their histogram from the
image's process, as the dashboard reads it)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from rescheduler.full_collections import SCHEDULED, FullCollections
from rescheduler.metrics import Metrics
from rescheduler.run import Rescheduler, RunOptions
from tests.unit.test_run import cluster, fast

pytestmark = pytest.mark.skipif(not SCHEDULED, reason="the generational collector of CPython 3.11 to 3.13")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """An object in a reference cycle with itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_start_turns_only_the_automatic_full_collections_off_and_stop_puts_them_back(
    thresholds: tuple[int, int, int],
) -> None:
    fc = FullCollections(lambda s: None)
    fc.start()
    young, middle, oldest = gc.get_threshold()
    assert (young, middle) == thresholds[:2], "the young generations are collected as before"
    assert oldest > 1_000_000, "no full collection is triggered by the allocation counts"
    fc.stop()
    assert gc.get_threshold() == thresholds


def test_a_full_collection_is_made_after_a_cycle_once_the_interval_has_passed(
    thresholds: tuple[int, int, int],
) -> None:
    clock, seen = Clock(), []
    fc = FullCollections(seen.append, clock=clock, interval=600)
    assert fc.after_cycle() is None, "not started: nothing scheduled"
    fc.start()
    try:
        clock.now += 599
        assert fc.after_cycle() is None and seen == []
        clock.now += 1
        seconds = fc.after_cycle()
        assert seconds is not None and seen == [seconds]
        clock.now += 599
        assert fc.after_cycle() is None, "the next interval counts from the collection"
        clock.now += 1
        assert fc.after_cycle() is not None and len(seen) == 2
    finally:
        fc.stop()


def test_a_reference_cycle_in_the_oldest_generation_is_freed_by_the_scheduled_collection(
    thresholds: tuple[int, int, int],
) -> None:
    clock = Clock()
    fc = FullCollections(lambda s: None, clock=clock, interval=600)
    fc.start()
    try:
        garbage = Node()
        gone = weakref.ref(garbage)
        gc.collect(1)  # survives the young generations: now in the oldest one
        del garbage
        gc.collect(1)
        assert gone() is not None, "the young collections do not walk the oldest generation"
        clock.now += 600
        fc.after_cycle()
        assert gone() is None
    finally:
        fc.stop()


def test_on_another_collector_nothing_is_changed_or_collected(thresholds: tuple[int, int, int]) -> None:
    clock, seen = Clock(), []
    fc = FullCollections(seen.append, clock=clock, interval=600, scheduled=False)
    fc.start()
    assert gc.get_threshold() == thresholds
    clock.now += 10_000
    assert fc.after_cycle() is None and seen == []


def test_the_run_loop_makes_a_due_full_collection_after_a_cycle_and_times_it(thresholds: tuple[int, int, int]) -> None:
    clock, metrics = Clock(), Metrics()
    fc = FullCollections(metrics.full_collection_duration.observe, clock=clock, interval=0)  # as run_command wires it
    server = cluster()
    r = Rescheduler(
        server, fast(), RunOptions(once=True, identity="me", sync_timeout=5), metrics=metrics, collections=fc
    )
    fc.start()
    try:
        assert r.run() == 0
    finally:
        fc.stop()
        server.close()
    made = metrics.registry.get_sample_value("spotshift_rescheduler_full_collection_duration_seconds_count")
    assert made == 1, "one cycle, one full collection after it"


def test_a_loop_without_them_leaves_the_collector_alone(thresholds: tuple[int, int, int]) -> None:
    server = cluster()
    r = Rescheduler(server, fast(), RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert gc.get_threshold() == thresholds
