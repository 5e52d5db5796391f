"""``spot-rescheduler plan --output table``: the plan for a person at a terminal.

What gets freed, what moves where (at most twenty drained nodes; ``--output json`` lists every move), each drain's
expected saving, cost and verdict in on-demand vCPU-hours (:mod:`rescheduler.plan.worth`) and the nodes weighed but
not drained, the PodDisruptionBudgets that pace those drains, why the other nodes stay (counted by the kind of their
reason, as the planner groups them in ``summary.top_reasons``), and in capacity mode the spot room each node would
need.
"""

from __future__ import annotations

from collections.abc import Sequence

from rescheduler.plan.capacity_needs import CapacityNeed
from rescheduler.plan.records import Plan, Summary
from rescheduler.plan.worth import Worth

__all__ = ["render_table"]

_MAX_ROWS = 20


def _cores(milli: int) -> str:
    return f"{milli / 1000:,.1f}"


def _gib(b: int) -> str:
    return f"{b / 2**30:,.1f} GiB"


def render_table(result: Plan, needs: Sequence[CapacityNeed] | None = None) -> str:
    """The plan for a person: what gets freed, what moves where, and why the other nodes stay; with ``needs``
    (capacity mode), the spot room each node that only lacks room would need."""
    lines = _summary_lines(result.summary)
    if result.drained:
        lines.append("")
        lines.extend(_drain_lines(result))
    if set(result.worth) - set(result.drained):
        lines.append("")
        lines.extend(_weighed_lines(result))
    if result.pacing:
        lines.append("")
        lines.extend(_pacing_lines(result))
    if result.summary.top_reasons:
        lines.append("")
        lines.extend(_stay_lines(result))
    if needs is not None:
        lines.append("")
        lines.extend(_capacity_lines(needs))
    return "\n".join(lines) + "\n"


def _summary_lines(s: Summary) -> list[str]:
    """The table's opening sentences: what can be drained and freed, then any warning, budget or window."""
    lines: list[str] = []
    lines.append(
        f"{s.drained:,} of {s.on_demand_nodes:,} on-demand nodes can be drained onto {s.spot_targets:,} spot nodes "
        f"({s.spot_not_targets:,} spot nodes are not ready, cordoned or being reclaimed)."
    )
    if s.spot_unsettled:
        lines.append(f"{s.spot_unsettled:,} of them are in a spot pool reclaimed within spot.stability_window.")
    lines.append(
        f"Pods to move: {s.pods_moved:,}. Freed on-demand capacity: {_cores(s.freed_cpu_millicores)} CPU, "
        f"{_gib(s.freed_memory_bytes)} memory. Strategy: {s.strategy}."
    )
    if s.pending_unschedulable:
        holding = sum(1 for nodes in (s.waiting_pods or {}).values() if nodes)
        lines.append(
            f"Pending: {s.pending_unschedulable:,} pod(s) wait for a node; they are planned first, and "
            f"{holding:,} of them hold on-demand nodes they could use (a pending pod could use the room)."
        )
    budget = s.disruption_budget
    if budget is not None and budget.outside_window_until:
        lines.append(f"Nothing is drained now: {budget.outside_window_until}.")
    elif budget is not None:
        lines.append(
            f"Disruption budget {budget.budget}: at most {budget.limit or 0:,} node(s) draining at once "
            f"({budget.draining:,} draining now)."
        )
    if s.spot_too_young:
        lines.append(
            f"{s.spot_too_young:,} spot node(s) are younger than disruption.min_target_age and not used as targets."
        )
    return lines


def _drain_lines(result: Plan) -> list[str]:
    """The drained nodes (at most ``_MAX_ROWS``), each with its pod count, its worth and its three main targets."""
    targets: dict[str, dict[str, int]] = {}
    for m in result.moves:
        per = targets.setdefault(m.source, {})
        per[m.target] = per.get(m.target, 0) + 1
    rows = [("NODE TO DRAIN", "PODS", *_WORTH_HEADER, "MOVE TO")]
    for name in result.drained[:_MAX_ROWS]:
        per = targets.get(name, {})
        dest = ", ".join(f"{t} ({n})" for t, n in sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        if len(per) > 3:
            dest += f", +{len(per) - 3} more"
        rows.append((name, str(sum(per.values())), *_worth_cells(result.worth.get(name)), dest or "(nothing to move)"))
    lines = _columns(rows)
    if len(result.drained) > _MAX_ROWS:
        lines.append(f"... and {len(result.drained) - _MAX_ROWS:,} more (--output json lists every move)")
    return lines


_WORTH_HEADER = ("SAVING", "COST", "VERDICT")


def _worth_cells(w: Worth | None) -> tuple[str, str, str]:
    """Saving and cost in vCPU-hours, and the verdict (``-`` for a node not weighed)."""
    if w is None:
        return ("-", "-", "-")
    return (f"{w.saving:,.2f}", f"{w.cost:,.2f}", w.verdict)


def _weighed_lines(result: Plan) -> list[str]:
    """The nodes weighed but not drained (not worth it, or waiting for the disruption budget), at most
    ``_MAX_ROWS``, with their worth and why they stay."""
    names = [n for n in result.worth if n not in result.drained]
    lines = ["Weighed, not drained (saving and cost in on-demand vCPU-hours, docs/worth.md):"]
    rows = [("NODE", "PODS", *_WORTH_HEADER, "WHY IT STAYS")]
    for name in names[:_MAX_ROWS]:
        w = result.worth[name]
        why = result.reasons.get(name)
        rows.append((name, str(w.evictions), *_worth_cells(w), why.kind.value if why is not None else "-"))
    lines.extend(_columns(rows))
    if len(names) > _MAX_ROWS:
        lines.append(f"... and {len(names) - _MAX_ROWS:,} more (--output json lists them all)")
    return lines


def _pacing_lines(result: Plan) -> list[str]:
    """The PodDisruptionBudgets that pace the shown drains, one row per node and budget."""
    lines = [
        f"{len(result.pacing):,} drain(s) paced by PodDisruptionBudgets (pods evicted as the budget allows, "
        "429s retried as replacements become Ready):"
    ]
    pace_rows = [("NODE TO DRAIN", "PODDISRUPTIONBUDGET", "NOTE")]
    for name in [n for n in result.drained if n in result.pacing][:_MAX_ROWS]:
        for p in result.pacing[name]:
            pace_rows.append((name, p.pdb, f"{p.pods} pod(s) here, {p.allowed} evicted at a time"))
    lines.extend(_columns(pace_rows))
    return lines


def _stay_lines(result: Plan) -> list[str]:
    """Why nodes stay, counted by kind of reason, then up to five nodes with their sentence."""
    # Grouped by the kind of reason (StayReason.group), counted by the planner: summary.top_reasons.
    why_rows = [("WHY NODES STAY", "NODES")]
    why_rows.extend((r["reason"], f"{r['nodes']:,}") for r in result.summary.top_reasons)
    lines = _columns(why_rows)
    shown = list(result.undrainable.items())[:5]
    if shown:
        lines.append("")
        lines.append("For example:")
        lines.extend(f"  {node}: {why}" for node, why in shown)
    return lines


def _capacity_lines(needs: Sequence[CapacityNeed]) -> list[str]:
    """Capacity mode: the spot room each node that only lacks room would need (at most ``_MAX_ROWS``)."""
    if not needs:
        return ["Capacity mode: no node stays only for lack of spot room."]
    lines = [
        f"Capacity mode: {len(needs):,} node(s) stay only for lack of spot room; the rescheduler asks for it "
        "with placeholder pods (within capacity.max_pods, max_cpu, max_memory):"
    ]
    lines.extend(f"  {n.node}: {n.text} ({len(n.pods)} pod(s))" for n in needs[:_MAX_ROWS])
    if len(needs) > _MAX_ROWS:
        lines.append(f"  ... and {len(needs) - _MAX_ROWS:,} more (--output json lists them all)")
    return lines


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)]
        out.append("  ".join([*cells, r[-1]]).rstrip())
    return out
