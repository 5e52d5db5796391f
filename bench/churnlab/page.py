"""The churn benchmark's page: per scenario, the on-demand node count over the day for each policy, with the spot
cuts and returns marked. One self-contained HTML file (inline SVG, no script, no external resource)."""

from __future__ import annotations

import html
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


def render(report: Sequence[dict[str, Any]], scenarios: Sequence[Scenario]) -> str:
    body = []
    for entry, sc in zip(report, scenarios, strict=True):
        body.append(f"<h2>{html.escape(sc.profile)} / {html.escape(sc.trace)} / seed {sc.seed}</h2>")
        body.append(_chart(entry, sc))
        rows = "".join(
            f"<tr><td>{html.escape(f['policy'])}</td><td>{f['on_demand_node_hours']:.0f}</td>"
            f"<td>{f['cost']:.1f}</td><td>{f['evictions_per_pod_day']:.3f}</td><td>{f['moved_then_reclaimed']}</td>"
            f"<td>{f['disruptions_per_pod_day']:.3f}</td></tr>"
            for f in entry["policies"]
        )
        body.append(
            "<table><tr><th>policy</th><th>on-demand node-hours</th><th>cost $</th><th>evictions/pod-day</th>"
            "<th>moved→reclaimed</th><th>disruptions/pod-day</th></tr>"
            f"{rows}<tr><td>lower bound</td><td>-</td><td>{entry['lower_bound']['cost']:.1f}</td><td>-</td><td>-</td>"
            "<td>-</td></tr>"
            "</table>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>spotshift: a day of spot churn</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
        "td:first-child{text-align:left}</style></head><body><h1>A day of spot churn</h1>"
        + "\n".join(body)
        + "</body></html>"
    )
