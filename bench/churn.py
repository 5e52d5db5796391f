"""A day of spot churn: what each policy pays and disrupts, on the same generated cluster and spot trace.

    python3 bench/churn.py --profile all --seed 1                  # 4 profiles x 3 traces, every policy
    python3 bench/churn.py --profile web --trace spiky --seed 1 2 3 --json /tmp/churn.json --html /tmp/churn.html
    python3 bench/churn.py --profile all --seeds 10                # 120 scenarios, paired intervals against spotshift

Each scenario (profile x trace x seed, bench/churnlab/scenario.py) is simulated for 24 hours after an hour of
warm-up, once per policy (bench/churnlab/policies.py), on an in-memory API server with the actors of a real
cluster around it (bench/churnlab/world.py: spot reclaims with two minutes' notice, controllers, kube-scheduler's
filters and default scores, kubelets, the disruption controller, a cluster-autoscaler-like provisioner with its
scale-down of under-used nodes and its backoff after spot scale-ups that fail, spot pools of their own price and
background reclaim rate). What the
simulation attributes to spotshift is decided by the product's own code: the webhook's mutation, the extender's
filter and score, and the rescheduler's run loop on a simulated clock. A lower bound that knows the day in advance
(bench/churnlab/sim.py: ``lower_bound``) closes each table.

Figures per policy: on-demand node-hours, cost in USD (each spot pool at its own share of the on-demand price, drawn
around ``--spot-fraction``), share of pod-hours on spot, evictions per pod-day (by the policy), the autoscaler's
evictions per pod-day (``CA evict``: draining under-used nodes), pods reclaimed with their spot node after a move
(``moved→reclaimed``: replacements of evicted pods, one for one), the minutes of Job work lost to evictions and
reclaims, disruptions per pod-day (every eviction, the policy's and the autoscaler's, and the pods reclaimed after a
move, over the pod-days), minutes from
spot capacity returning until the spot-eligible pods on on-demand nodes are back to their number before the cut
(p50, p95; a return never caught up counts as the rest of the day and is counted in ``never``), pending pod-minutes,
PodDisruptionBudget violations and lost pods (both must be 0: the command exits 1 otherwise). The run is
deterministic: the same seed gives the same figures. With more than one scenario, the means per policy follow, and
for every policy the paired difference from spotshift of cost and disruptions per pod-day, with 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.churnlab.daycache import DayCache, code_digest
from bench.churnlab.page import render
from bench.churnlab.policies import POLICIES
from bench.churnlab.scenario import PROFILES, TRACES
from bench.churnlab.sim import Figures, Scenario, lower_bound, run
from bench.churnlab.stats import Paired, paired

NAME = 28
COLUMNS = (
    ("policy", NAME, "{}"),
    ("od node-h", 9, "{:.0f}"),
    ("cost $", 7, "{:.1f}"),
    ("vs bound", 8, "{:.2f}"),
    ("spot share", 10, "{:.3f}"),
    ("evict/pod-day", 13, "{:.3f}"),
    ("CA evict/pod-day", 16, "{:.3f}"),
    ("moved→reclaimed", 15, "{}"),
    ("job min lost", 12, "{:.0f}"),
    ("disrupt/pod-day", 15, "{:.3f}"),
    ("back p50", 8, "{:.0f}"),
    ("back p95", 8, "{:.0f}"),
    ("never", 5, "{}"),
    ("pending pod-min", 15, "{:.0f}"),
    ("pdb viol.", 9, "{}"),
    ("lost", 4, "{}"),
)


Job = tuple[Scenario, str, float]
"""A day to simulate: scenario, policy, spot fraction."""


def _one(job: Job, cache: DayCache | None) -> Figures:
    scenario, policy, fraction = job
    figures = run(scenario, policy, fraction)
    if cache is not None:
        cache.put(scenario, figures, fraction)
    return figures


def _row(f: Figures, bound: Figures) -> list[str]:
    values = (
        f.policy,
        f.on_demand_node_hours,
        f.cost,
        f.cost / bound.cost if bound.cost else math.nan,
        f.spot_share,
        f.evictions_per_pod_day,
        f.autoscaler_evictions_per_pod_day,
        f.moved_then_reclaimed,
        f.job_minutes_lost,
        f.disruptions_per_pod_day,
        f.back_on_spot_p50,
        f.back_on_spot_p95,
        f.never_back,
        f.pending_pod_minutes,
        f.pdb_violations,
        f.lost_pods,
    )
    out = []
    for (_, width, fmt), v in zip(COLUMNS, values, strict=True):
        text = "-" if isinstance(v, float) and math.isnan(v) else fmt.format(v)
        out.append(text.rjust(width) if width != NAME else text.ljust(width))
    return out


def table(scenario: Scenario, results: list[Figures], bound: Figures) -> str:
    head = " ".join(name.rjust(w) if w != NAME else name.ljust(w) for name, w, _ in COLUMNS)
    lines = [f"{scenario.profile} / {scenario.trace} / seed {scenario.seed}", head]
    lines += [" ".join(_row(f, bound)) for f in [*results, bound]]
    return "\n".join(lines)


SUMMARY = (
    ("cost vs bound", 13, "{:.3f}", lambda f, b: f.cost / b.cost),
    ("od node-h", 9, "{:.0f}", lambda f, b: f.on_demand_node_hours),
    ("evict/pod-day", 13, "{:.3f}", lambda f, b: f.evictions_per_pod_day),
    ("CA evict/pod-day", 16, "{:.3f}", lambda f, b: f.autoscaler_evictions_per_pod_day),
    ("moved→reclaimed", 15, "{:.1f}", lambda f, b: f.moved_then_reclaimed),
    ("job min lost", 12, "{:.0f}", lambda f, b: f.job_minutes_lost),
    ("disrupt/pod-day", 15, "{:.3f}", lambda f, b: f.disruptions_per_pod_day),
    ("back p50", 8, "{:.0f}", lambda f, b: f.back_on_spot_p50),
    ("back p95", 8, "{:.0f}", lambda f, b: f.back_on_spot_p95),
    ("pending pod-min", 15, "{:.0f}", lambda f, b: f.pending_pod_minutes),
)
"""The summary's columns of means: name, width, format, the figure of one policy's day (and the day's bound)."""


def summary(per_scenario: list[tuple[list[Figures], Figures]]) -> str:
    """Every scenario at once: per policy, the mean of each figure, the returns never caught up, in how many
    scenarios it cost least, and the budget violations and lost pods."""
    names = [f.policy for f in per_scenario[0][0]]
    head = " ".join(name.rjust(width) for name, width, _, _ in SUMMARY)
    lines = [
        f"all {len(per_scenario)} scenarios: means per policy",
        f"{'policy':<{NAME}} {head} {'never':>5} {'cheapest':>8} {'pdb viol.':>9} {'lost':>4}",
    ]
    for i, name in enumerate(names):
        rows = [(mine[i], bound) for mine, bound in per_scenario]
        cheapest = sum(1 for mine, _ in per_scenario if mine[i].cost <= min(f.cost for f in mine))
        means = " ".join(
            fmt.format(sum(figure(f, b) for f, b in rows) / len(rows)).rjust(width) for _, width, fmt, figure in SUMMARY
        )
        lines.append(
            f"{name:<{NAME}} {means} {sum(f.never_back for f, _ in rows):>5} {cheapest:>8} "
            f"{sum(f.pdb_violations for f, _ in rows):>9} {sum(f.lost_pods for f, _ in rows):>4}"
        )
    return "\n".join(lines)


REFERENCE = "spotshift"
"""The policy every other is compared with, pair by pair."""


def comparisons(scenarios: list[Scenario], per_scenario: list[tuple[list[Figures], Figures]]) -> str:
    """Per profile x trace (over its seeds) and over all scenarios: for every policy, the mean paired difference
    ``spotshift - policy`` of the cost (USD a day) and of the disruptions per pod-day, with its 95% confidence
    interval (paired t over the scenarios), and whether spotshift is at most the policy (the interval's upper end
    at most 0: ``yes``; ``no`` otherwise; ``-`` with a single scenario)."""
    names = [f.policy for f in per_scenario[0][0]]
    if REFERENCE not in names:
        return f"(no paired comparison: {REFERENCE} was not run)"
    ref = names.index(REFERENCE)
    groups: dict[str, list[int]] = {}
    for i, sc in enumerate(scenarios):
        groups.setdefault(f"{sc.profile} / {sc.trace}", []).append(i)
    if len(groups) > 1:
        groups["all scenarios"] = list(range(len(scenarios)))
    lines = [
        f"paired against {REFERENCE}: mean of ({REFERENCE} - policy) over the scenarios, 95% confidence interval "
        f"(paired t); 'at most' says whether {REFERENCE} is at most the policy (the interval's upper end <= 0)"
    ]
    for label, members in groups.items():
        lines.append(f"{label} ({len(members)} scenario{'s' if len(members) > 1 else ''})")
        lines.append(
            f"  {'policy':<{NAME}} {'Δcost $':>9} {'95% CI':>19} {'at most':>7} {'Δdisrupt/pod-day':>16} "
            f"{'95% CI':>19} {'at most':>7}"
        )
        for j, name in enumerate(names):
            if j == ref:
                continue
            cells = []
            for figure in (lambda f: f.cost, lambda f: f.disruptions_per_pod_day):
                ours = [figure(per_scenario[k][0][ref]) for k in members]
                theirs = [figure(per_scenario[k][0][j]) for k in members]
                cells.append(paired(ours, theirs))
            lines.append(f"  {name:<{NAME}} {_cell(cells[0], 9, 2)} {_cell(cells[1], 16, 3)}")
    return "\n".join(lines)


def _cell(p: Paired, width: int, digits: int) -> str:
    interval = "-" if math.isnan(p.high) else f"[{p.low:+.{digits}f}, {p.high:+.{digits}f}]"
    verdict = {None: "-", True: "yes", False: "no"}[p.at_most]
    return f"{p.mean:>+{width}.{digits}f} {interval:>19} {verdict:>7}"


def _submit(
    pool: ProcessPoolExecutor, jobs: list[Job], per_scenario: int, cache: DayCache | None
) -> tuple[dict[int, Future[Figures]], int]:
    """Every job's future, by its index, and how many were read from ``cache`` (already done)."""
    futures: dict[int, Future[Figures]] = {}
    for i, (sc, policy, fraction) in enumerate(jobs):
        kept = cache.get(sc, policy, fraction) if cache is not None else None
        if kept is not None:
            futures[i] = Future()
            futures[i].set_result(kept)
    reused = len(futures)
    # The rescheduler's days take several times longer than the others: started first within each scenario, they do
    # not leave one process working alone at the end, and each scenario's table still prints as soon as its days
    # are done.
    order = sorted(
        (i for i in range(len(jobs)) if i not in futures),
        key=lambda i: (i // per_scenario, not jobs[i][1].startswith("spotshift"), i),
    )
    for i in order:
        futures[i] = pool.submit(_one, jobs[i], cache)
    return futures, reused


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="all", choices=["all", *PROFILES])
    ap.add_argument("--trace", default="all", choices=["all", *TRACES])
    seeds = ap.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, nargs="+", default=[1])
    seeds.add_argument("--seeds", type=int, metavar="N", help="seeds 1 to N (as --seed 1 2 ... N)")
    ap.add_argument("--policy", nargs="+", default=[p.name for p in POLICIES], choices=[p.name for p in POLICIES])
    ap.add_argument("--spot-fraction", type=float, default=0.3, help="spot price as a share of on-demand (0.3)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--html", type=Path, help="write the page with the on-demand node count over time here")
    ap.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="keep each simulated day's figures here and reuse those computed by the same code (a long run can stop "
        "and go on)",
    )
    args = ap.parse_args(argv)
    if not 0 < args.spot_fraction <= 1:
        ap.error("--spot-fraction must be in (0, 1]")
    if args.seeds is not None:
        if args.seeds < 1:
            ap.error("--seeds must be at least 1")
        args.seed = list(range(1, args.seeds + 1))
    profiles = list(PROFILES) if args.profile == "all" else [args.profile]
    traces = list(TRACES) if args.trace == "all" else [args.trace]
    scenarios = [Scenario(p, t, s) for s in args.seed for p in profiles for t in traces]
    jobs = [(sc, name, args.spot_fraction) for sc in scenarios for name in args.policy]
    started = time.monotonic()
    ok = True
    report = []
    per_scenario: list[tuple[list[Figures], Figures]] = []
    cache = DayCache(args.cache, code_digest()) if args.cache else None
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures, reused = _submit(pool, jobs, len(args.policy), cache)
        results = (futures[i].result() for i in range(len(jobs)))
        for sc in scenarios:
            mine = [next(results) for _ in args.policy]
            bound = lower_bound(sc, args.spot_fraction)
            print(table(sc, mine, bound), end="\n\n", flush=True)
            ok = ok and all(f.pdb_violations == 0 and f.lost_pods == 0 and f.capacity_breaches == 0 for f in mine)
            per_scenario.append((mine, bound))
            report.append({"scenario": asdict(sc), "policies": [asdict(f) for f in mine], "lower_bound": asdict(bound)})
    if len(scenarios) > 1:
        print(summary(per_scenario), end="\n\n")
        print(comparisons(scenarios, per_scenario), end="\n\n")
    kept = f" ({reused} read from {cache.directory})" if cache is not None else ""
    print(f"{len(jobs)} simulated days{kept} in {time.monotonic() - started:.0f} s on {args.jobs} processes")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.html:
        args.html.write_text(render(report, scenarios))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
