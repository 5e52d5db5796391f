"""A plan's time budget, judged step by step (``--plan-time-budget``: the run loop's planning budget).

The plan folder reads no clock of its own: a caller that wants a budget hands its clock, and :class:`Pace` reads it.
A step (a packing pass, a trial of the improvement search) is started only while the time spent so far plus the
slowest step taken so far still fits the budget: a step cannot be stopped half way, so the budget is kept by
not starting one that would likely overrun it. Which steps run then depends on the clock; what each step finds
does not.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Clock", "Pace"]

Clock = Callable[[], float]
"""Seconds from an arbitrary start that never go back (``time.monotonic``)."""


class Pace:
    """One plan's time budget (``budget`` seconds from the first reading of ``clock``; ``None``: no budget, every
    step runs and no clock is read)."""

    __slots__ = ("_clock", "_budget", "_started", "slowest")

    def __init__(self, clock: Clock | None, budget: float | None) -> None:
        if budget is not None and clock is None:
            raise ValueError("a time budget needs the clock to measure it by")
        self._clock = clock
        self._budget = budget
        self._started = clock() if clock is not None else 0.0
        self.slowest = 0.0
        """The longest a step timed by :meth:`took` took."""

    def now(self) -> float:
        """The clock's reading (``0.0`` without a clock)."""
        return self._clock() if self._clock is not None else 0.0

    def allows(self, estimate: float = 0.0) -> bool:
        """Whether a step as long as the slowest so far, or ``estimate`` when that is longer, still fits the budget
        (read at ``now``)."""
        if self._budget is None:
            return True
        return self.now() - self._started + max(self.slowest, estimate) <= self._budget

    def took(self, since: float) -> float:
        """The seconds since ``since`` (a :meth:`now` reading), counted as one step's."""
        seconds = self.now() - since
        self.slowest = max(self.slowest, seconds)
        return seconds
