"""A day of spot churn: what each policy pays and disrupts, on the same generated cluster and spot trace.

    python3 bench/churn.py --profile all --seed 1                  # 4 profiles x 3 traces, every policy
    python3 bench/churn.py --profile web --trace spiky --seed 1 2 3 --json /tmp/churn.json --html /tmp/churn.html

Each scenario (profile x trace x seed, bench/churnlab/scenario.py) is simulated for 24 hours after an hour of
warm-up, once per policy (bench/churnlab/policies.py), on an in-memory API server with the actors of a real
cluster around it (bench/churnlab/world.py: spot reclaims with two minutes' notice, controllers, kube-scheduler's
filters and default scores, kubelets, the disruption controller, a cluster-autoscaler-like provisioner). What the
simulation attributes to spotshift is decided by the product's own code: the webhook's mutation, the extender's
filter and score, and the rescheduler's run loop on a simulated clock. A lower bound that knows the day in advance
(bench/churnlab/sim.py: ``lower_bound``) closes each table.

Figures per policy: on-demand node-hours, cost in USD (spot at ``--spot-fraction`` of the on-demand price), share of
pod-hours on spot, evictions per pod-day, pods reclaimed with their spot node after a move (``moved→reclaimed``:
replacements of evicted pods, one for one), disruptions per pod-day (evictions and those reclaims), minutes from
spot capacity returning until the spot-eligible pods on on-demand nodes are back to their number before the cut
(p50, p95; a return never caught up counts as the rest of the day and is counted in ``never``), pending pod-minutes,
PodDisruptionBudget violations and lost pods (both must be 0: the command exits 1 otherwise). The run is
deterministic: the same seed gives the same figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.churnlab.page import render
from bench.churnlab.policies import POLICIES
from bench.churnlab.scenario import PROFILES, TRACES
from bench.churnlab.sim import Figures, Scenario, lower_bound, run

NAME = 24
COLUMNS = (
    ("policy", NAME, "{}"),
    ("od node-h", 9, "{:.0f}"),
    ("cost $", 7, "{:.1f}"),
    ("vs bound", 8, "{:.2f}"),
    ("spot share", 10, "{:.3f}"),
    ("evict/pod-day", 13, "{:.3f}"),
    ("moved→reclaimed", 15, "{}"),
    ("disrupt/pod-day", 15, "{:.3f}"),
    ("back p50", 8, "{:.0f}"),
    ("back p95", 8, "{:.0f}"),
    ("never", 5, "{}"),
    ("pending pod-min", 15, "{:.0f}"),
    ("pdb viol.", 9, "{}"),
    ("lost", 4, "{}"),
)


def _one(job: tuple[Scenario, str, float]) -> Figures:
    scenario, policy, fraction = job
    return run(scenario, policy, fraction)


def _row(f: Figures, bound: Figures) -> list[str]:
    values = (
        f.policy,
        f.on_demand_node_hours,
        f.cost,
        f.cost / bound.cost if bound.cost else math.nan,
        f.spot_share,
        f.evictions_per_pod_day,
        f.moved_then_reclaimed,
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


def summary(per_scenario: list[tuple[list[Figures], Figures]]) -> str:
    """Every scenario at once: per policy, the mean of each figure, and in how many scenarios it cost least."""
    names = [f.policy for f in per_scenario[0][0]]
    lines = [
        f"all {len(per_scenario)} scenarios: means per policy",
        f"{'policy':<{NAME}} {'cost vs bound':>13} {'od node-h':>9} {'evict/pod-day':>13} {'moved→reclaimed':>15} "
        f"{'disrupt/pod-day':>15} {'back p50':>8} "
        f"{'back p95':>8} {'never':>5} {'cheapest':>8} {'pdb viol.':>9} {'lost':>4}",
    ]
    for i, name in enumerate(names):
        rows = [(mine[i], bound) for mine, bound in per_scenario]
        cheapest = sum(1 for mine, _ in per_scenario if mine[i].cost <= min(f.cost for f in mine))

        def mean(values: list[float]) -> float:
            return sum(values) / len(values)

        lines.append(
            f"{name:<{NAME}} {mean([f.cost / b.cost for f, b in rows]):>13.3f} "
            f"{mean([f.on_demand_node_hours for f, _ in rows]):>9.0f} "
            f"{mean([f.evictions_per_pod_day for f, _ in rows]):>13.3f} "
            f"{mean([f.moved_then_reclaimed for f, _ in rows]):>15.1f} "
            f"{mean([f.disruptions_per_pod_day for f, _ in rows]):>15.3f} "
            f"{mean([f.back_on_spot_p50 for f, _ in rows]):>8.0f} {mean([f.back_on_spot_p95 for f, _ in rows]):>8.0f} "
            f"{sum(f.never_back for f, _ in rows):>5} {cheapest:>8} {sum(f.pdb_violations for f, _ in rows):>9} "
            f"{sum(f.lost_pods for f, _ in rows):>4}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="all", choices=["all", *PROFILES])
    ap.add_argument("--trace", default="all", choices=["all", *TRACES])
    ap.add_argument("--seed", type=int, nargs="+", default=[1])
    ap.add_argument("--policy", nargs="+", default=[p.name for p in POLICIES], choices=[p.name for p in POLICIES])
    ap.add_argument("--spot-fraction", type=float, default=0.3, help="spot price as a share of on-demand (0.3)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--html", type=Path, help="write the page with the on-demand node count over time here")
    args = ap.parse_args(argv)
    if not 0 < args.spot_fraction <= 1:
        ap.error("--spot-fraction must be in (0, 1]")
    profiles = list(PROFILES) if args.profile == "all" else [args.profile]
    traces = list(TRACES) if args.trace == "all" else [args.trace]
    scenarios = [Scenario(p, t, s) for s in args.seed for p in profiles for t in traces]
    jobs = [(sc, name, args.spot_fraction) for sc in scenarios for name in args.policy]
    started = time.monotonic()
    ok = True
    report = []
    per_scenario: list[tuple[list[Figures], Figures]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # The rescheduler's days take several times longer than the others: started first within each scenario,
        # they do not leave one process working alone at the end, and each scenario's table still prints as soon
        # as its days are done.
        order = sorted(
            range(len(jobs)), key=lambda i: (i // len(args.policy), not jobs[i][1].startswith("spotshift"), i)
        )
        futures = dict(zip(order, [pool.submit(_one, jobs[i]) for i in order], strict=True))
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
    print(f"{len(jobs)} simulated days in {time.monotonic() - started:.0f} s on {args.jobs} processes")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.html:
        args.html.write_text(render(report, scenarios))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
