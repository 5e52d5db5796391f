"""Paired comparisons over scenarios: the mean of paired differences and its 95% confidence interval (Student's t),
without a statistics package."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}
"""The 0.975 quantile of Student's t by degrees of freedom (a two-sided 95% interval); 1.960 beyond 120."""


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (at least 1). Between two rows of
    :data:`T_975` the row of fewer degrees of freedom is taken: the interval is then a little wider, never
    narrower."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if df > max(T_975):
        return 1.960
    return T_975[max(k for k in T_975 if k <= df)]


@dataclass(frozen=True, slots=True)
class Paired:
    """The mean of ``n`` paired differences and its 95% confidence interval (``low``, ``high``; NaN for n < 2)."""

    n: int
    mean: float
    low: float
    high: float

    @property
    def at_most(self) -> bool | None:
        """Whether the first of each pair is at most the second with 95% confidence (the interval's upper end
        at most 0); ``None`` when there is no interval."""
        return None if math.isnan(self.high) else self.high <= 0.0


def paired(first: Sequence[float], second: Sequence[float]) -> Paired:
    """``first[i] - second[i]`` over the pairs: their mean and the paired t interval."""
    if len(first) != len(second) or not first:
        raise ValueError("paired needs two equally long, non-empty sequences")
    diffs = [a - b for a, b in zip(first, second, strict=True)]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Paired(1, mean, math.nan, math.nan)
    half = t_quantile(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Paired(len(diffs), mean, mean - half, mean + half)
