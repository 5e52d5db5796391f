"""The churn benchmark's paired comparisons (bench/churnlab/stats.py)."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from bench import churn
from bench.churnlab.sim import Figures, Scenario
from bench.churnlab.stats import paired, t_quantile


@pytest.mark.parametrize(("df", "q"), [(1, 12.706), (9, 2.262), (30, 2.042), (35, 2.042), (119, 2.000), (500, 1.960)])
def test_t_quantiles_take_the_row_of_fewer_degrees_of_freedom_between_rows(df: int, q: float) -> None:
    assert t_quantile(df) == q


def test_a_paired_interval_by_hand() -> None:
    # Differences 1, 2, 3: mean 2, standard deviation 1, t(2) = 4.303: 2 +- 4.303 / sqrt(3).
    p = paired([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert p.n == 3 and p.mean == pytest.approx(2.0)
    assert (p.low, p.high) == pytest.approx((2.0 - 4.303 / math.sqrt(3), 2.0 + 4.303 / math.sqrt(3)))
    assert p.at_most is False


def test_at_most_only_when_the_whole_interval_is_at_or_below_zero() -> None:
    assert paired([1.0, 2.0, 3.0, 4.0], [2.0, 3.1, 4.0, 5.2]).at_most is True
    assert paired([1.0, 2.0, 3.0], [0.5, 2.5, 3.0]).at_most is False  # mean 0, the interval straddles it
    one = paired([1.0], [2.0])
    assert one.mean == -1.0 and math.isnan(one.high) and one.at_most is None


def test_paired_refuses_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired([1.0], [1.0, 2.0])


def _figures(policy: str, cost: float, disruptions: float) -> Figures:
    zero = {f.name: ([] if f.name == "on_demand_series" else 0) for f in fields(Figures)}
    return Figures(**{**zero, "policy": policy, "cost": cost, "disruptions_per_pod_day": disruptions})


def test_the_comparison_says_where_spotshift_is_at_most_the_other_policy() -> None:
    scenarios = [Scenario("web", "spiky", seed) for seed in (1, 2, 3)]
    per_scenario = [
        (
            [_figures("spotshift", 100.0 + k, 0.5), _figures("pusher-like", 110.0 + 2 * k, 0.4 + 0.01 * k)],
            _figures("lower bound", 80.0, 0.0),
        )
        for k in range(3)
    ]
    lines = churn.comparisons(scenarios, per_scenario).splitlines()
    row = next(line.split() for line in lines if line.strip().startswith("pusher-like"))
    # Cost: differences -10, -11, -12, all below 0: yes. Disruptions: +0.1, +0.09, +0.08: no.
    assert row[1] == "-11.00" and row[4] == "yes"
    assert row[5] == "+0.090" and row[8] == "no"
    assert "web / spiky (3 scenarios)" in lines
    assert "all scenarios" not in "\n".join(lines)  # one profile x trace: no second group
