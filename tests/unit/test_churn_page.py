"""The churn benchmark's page (bench/churnlab/page.py): the frontier of cost against disruption."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench.churnlab.page import frontier, frontier_points


def _entry(costs: dict[str, float], disruptions: dict[str, float], bound: float) -> dict[str, Any]:
    return {
        "policies": [
            {"policy": name, "cost": cost, "disruptions_per_pod_day": disruptions[name]} for name, cost in costs.items()
        ],
        "lower_bound": {"cost": bound},
    }


REPORT = [
    _entry({"spotshift": 120.0, "none": 150.0}, {"spotshift": 0.5, "none": 0.0}, 100.0),
    _entry({"spotshift": 140.0, "none": 150.0}, {"spotshift": 0.3, "none": 0.0}, 100.0),
]


def test_each_policy_is_one_point_at_its_means_over_the_scenarios() -> None:
    points = frontier_points(REPORT)
    assert [name for name, _, _ in points] == ["spotshift", "none"]
    assert points[0][1:] == pytest.approx((0.4, 1.3))
    assert points[1][1:] == pytest.approx((0.0, 1.5))


def test_the_chart_has_a_labelled_point_per_policy_the_cheaper_one_lower() -> None:
    svg = frontier(REPORT)
    circles = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    assert len(circles) == 2
    (x_shift, y_shift), (x_none, y_none) = ((float(a), float(b)) for a, b in circles)
    assert y_shift > y_none  # cheaper: lower on the page (SVG's y grows downwards)
    assert x_shift > x_none  # more disruptive: further right; no disruption sits at the axis' floor
    assert ">spotshift</text>" in svg and ">none</text>" in svg
