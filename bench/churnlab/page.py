"""The churn benchmark's page: the frontier of cost against disruption over every scenario, then per scenario the
on-demand node count over the day for each policy, with the spot cuts and returns marked. One self-contained HTML
file (inline SVG, no script, no external resource)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from bench.churnlab.scenario import DAY
from bench.churnlab.sim import Scenario

COLOURS = ("#888888", "#4c78a8", "#2ca02c", "#17becf", "#9467bd", "#e45756", "#f58518", "#000000")
WIDTH, HEIGHT, PAD = 900, 260, 40


def _chart(entry: dict[str, Any], scenario: Scenario) -> str:
    lines = [*entry["policies"], entry["lower_bound"]]
    top = max([1, *(n for f in lines for _, n in f["on_demand_series"])])

    def x(t: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * t / DAY

    def y(n: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * n / top

    parts = [f'<svg width="{WIDTH}" height="{HEIGHT}" role="img">']
    tr = scenario.trace_of()
    for at in tr.cuts():
        parts.append(
            f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{PAD}" y2="{HEIGHT - PAD}" stroke="#e45756" '
            'stroke-dasharray="3,3"><title>spot cut</title></line>'
        )
    for at in tr.returns():
        parts.append(
            f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{PAD}" y2="{HEIGHT - PAD}" stroke="#2ca02c" '
            'stroke-dasharray="3,3"><title>spot back</title></line>'
        )
    for i, f in enumerate(lines):
        points = " ".join(f"{x(t):.1f},{y(n):.1f}" for t, n in f["on_demand_series"])
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
            f"<title>{html.escape(f['policy'])}</title></polyline>"
        )
    for h in range(0, 25, 3):
        parts.append(
            f'<text x="{x(h * 3600):.1f}" y="{HEIGHT - PAD + 16}" font-size="11" text-anchor="middle">{h:02d}:00</text>'
        )
    parts.append(f'<text x="4" y="{PAD - 8}" font-size="11">on-demand nodes (max {top})</text></svg>')
    legend = " ".join(
        f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(f["policy"])}</span>'
        for i, f in enumerate(lines)
    )
    return (
        "\n".join(parts) + f"<p>{legend} <span style='color:#e45756'>┆ spot cut</span> "
        "<span style='color:#2ca02c'>┆ spot back</span></p>"
    )


FRONTIER_WIDTH, FRONTIER_HEIGHT, FRONTIER_PAD = 760, 380, 60
DISRUPTION_FLOOR = 0.01
"""Disruptions per pod-day below this are drawn at it (the axis is logarithmic)."""


def frontier_points(report: Sequence[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Per policy, in the report's order: (name, mean disruptions per pod-day, mean cost against the bound) over
    every scenario."""
    names = [f["policy"] for f in report[0]["policies"]]
    out = []
    for i, name in enumerate(names):
        rows = [(entry["policies"][i], entry["lower_bound"]) for entry in report]
        disruption = sum(f["disruptions_per_pod_day"] for f, _ in rows) / len(rows)
        cost = sum(f["cost"] / b["cost"] for f, b in rows) / len(rows)
        out.append((name, disruption, cost))
    return out


def frontier(report: Sequence[dict[str, Any]]) -> str:
    """The SVG scatter of mean cost against the bound (up) over mean disruptions per pod-day (right, logarithmic),
    one labelled point per policy: the cheaper and the less disruptive, the nearer the lower left corner."""
    points = frontier_points(report)
    w, h, pad = FRONTIER_WIDTH, FRONTIER_HEIGHT, FRONTIER_PAD
    lo = math.floor(math.log10(DISRUPTION_FLOOR))
    hi = max(lo + 1, math.ceil(math.log10(max([DISRUPTION_FLOOR, *(d for _, d, _ in points)]))))
    bottom = min([1.0, *(c for _, _, c in points)])
    top = max([bottom + 0.05, *(c for _, _, c in points)])
    bottom, top = bottom - 0.02 * (top - bottom), top + 0.05 * (top - bottom)

    def x(d: float) -> float:
        return pad + (w - 2 * pad) * (math.log10(max(d, DISRUPTION_FLOOR)) - lo) / (hi - lo)

    def y(c: float) -> float:
        return h - pad - (h - 2 * pad) * (c - bottom) / (top - bottom)

    parts = [f'<svg width="{w}" height="{h}" role="img"><title>cost against disruption, every policy</title>']
    parts.append(f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="none" stroke="#ccc"/>')
    for k in range(lo, hi + 1):
        label = f"{10.0**k:g}" if k > lo else f"≤{10.0**k:g}"
        parts.append(
            f'<text x="{x(10.0**k):.1f}" y="{h - pad + 16}" font-size="11" text-anchor="middle">{label}</text>'
        )
    for c in (bottom + (top - bottom) * i / 4 for i in range(5)):
        parts.append(f'<text x="{pad - 6}" y="{y(c) + 4:.1f}" font-size="11" text-anchor="end">{c:.2f}</text>')
    parts.append(
        f'<text x="{w / 2:.0f}" y="{h - 12}" font-size="12" text-anchor="middle">disruptions per pod-day '
        "(mean over the scenarios, logarithmic)</text>"
    )
    parts.append(f'<text x="12" y="{pad - 20}" font-size="12">cost against the lower bound (mean)</text>')
    for i, (name, d, c) in enumerate(points):
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<circle cx="{x(d):.1f}" cy="{y(c):.1f}" r="5" fill="{colour}"><title>{html.escape(name)}: '
            f"{d:.3f} disruptions per pod-day, {c:.3f} of the bound</title></circle>"
        )
        parts.append(
            f'<text x="{x(d) + 8:.1f}" y="{y(c) - 6 - 11 * (i % 2):.1f}" font-size="11" fill="{colour}">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def render(report: Sequence[dict[str, Any]], scenarios: Sequence[Scenario]) -> str:
    body = [
        f"<h2>Cost against disruption, {len(report)} scenario{'s' if len(report) != 1 else ''}</h2>",
        frontier(report),
    ]
    for entry, sc in zip(report, scenarios, strict=True):
        body.append(f"<h2>{html.escape(sc.profile)} / {html.escape(sc.trace)} / seed {sc.seed}</h2>")
        body.append(_chart(entry, sc))
        rows = "".join(
            f"<tr><td>{html.escape(f['policy'])}</td><td>{f['on_demand_node_hours']:.0f}</td>"
            f"<td>{f['cost']:.1f}</td><td>{f['evictions_per_pod_day']:.3f}</td>"
            f"<td>{f['autoscaler_evictions_per_pod_day']:.3f}</td><td>{f['moved_then_reclaimed']}</td>"
            f"<td>{f['job_minutes_lost']:.0f}</td><td>{f['disruptions_per_pod_day']:.3f}</td></tr>"
            for f in entry["policies"]
        )
        body.append(
            "<table><tr><th>policy</th><th>on-demand node-hours</th><th>cost $</th><th>evictions/pod-day</th>"
            "<th>CA evictions/pod-day</th><th>moved→reclaimed</th><th>Job minutes lost</th>"
            "<th>disruptions/pod-day</th></tr>"
            f"{rows}<tr><td>lower bound</td><td>{entry['lower_bound']['on_demand_node_hours']:.0f}</td>"
            f"<td>{entry['lower_bound']['cost']:.1f}</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>"
            "</table>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>spotshift: a day of spot churn</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
        "td:first-child{text-align:left}</style></head><body><h1>A day of spot churn</h1>"
        + "\n".join(body)
        + "</body></html>"
    )
