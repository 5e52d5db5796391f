"""The churn replay on a real control plane: each policy in each autoscaling world, the real figures beside the
simulation's.

    python3 bench/churn_real.py                                               # every policy in its worlds
    python3 bench/churn_real.py --policy spotshift "descheduler (spot-tuned)" --world refill --json /tmp/real.json
    python3 bench/churn_real.py --no-build --trace short --world karpenter    # Karpenter alone and beside spotshift
    python3 bench/churn_real.py --no-build --trace short --world karpenter-when-empty  # the provisioner model's check

The replay (bench/churnlab/replay.py: 36 pods of four Deployments, every spot pool cut at minute 4 and back at
minute 10; ``--trace short``: cut at minute 3, back at minute 6, 15 minutes) runs on a Kubernetes 1.37.2 control
plane (tests/support/controlplane: kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kubelet
stand-ins), ``COMPRESSION`` times faster than the trace, with spotshift's webhook and extender in front and one
policy's processes (tests/support/real_replay.py): ``none``, ``spotshift``, ``spotshift no-capacity``, the real
descheduler as its Helm chart ships it and as tuned for spot, in the worlds ``pending`` (nodes appear only for
pending pods) and ``refill`` (each zone's spot group refills its desired count after a reclaim); ``karpenter``
(the real Karpenter alone: no spotshift, plain Deployments) and ``karpenter + spotshift`` (spotshift's webhook,
extender and rescheduler with its defaults beside it) in the world ``karpenter``, where Karpenter (its KWOK cloud
provider) provisions from one NodePool allowing spot and on-demand, consolidating ``WhenEmptyOrUnderutilized``;
``none`` and ``spotshift`` again in the world ``karpenter-when-empty``, where Karpenter is only the autoscaler (nodes
for pending pods, empty nodes removed after the replay's removal delay, no consolidation of used nodes, no drift
replacement) and the simulation plays the pending world at Karpenter's pace: its provisioner model checked against
a real autoscaler. The default runs every policy in each of its worlds (``WORLD_POLICIES``); ``--policy`` and
``--world`` narrow that. Karpenter's timers run on the wall clock, not compressed: the ``karpenter`` world's runs
go on past the trace's end until no on-demand node is left, and print when that was and the on-demand node-minutes
until then besides the trace's.
Each run has its own namespace and nodes, deleted afterwards.

Figures per run, in trace time: on-demand and spot node-minutes, cost in USD (spot at 0.3 of the on-demand price),
evictions, pods reclaimed after an eviction moved them, pods reclaimed, pending pod-minutes, PodDisruptionBudget
violations, lost pods (both must be 0: the command exits 1 otherwise), workload pods on on-demand nodes at the
end. Where the simulation models the policy, its figure for the same policy and world follows the real one
(``real/sim``). The control plane's and the peers' binaries are built first when missing
(tests/e2e/controlplane/build.sh, tests/e2e/controlplane/peers.sh: the descheduler and Karpenter).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.churnlab import replay  # noqa: E402
from bench.churnlab.page import COLOURS, HEIGHT, PAD, WIDTH  # noqa: E402
from tests.support.controlplane import running_control_plane  # noqa: E402
from tests.support.real_replay import POLICIES, WORLDS, combinations, run_replay  # noqa: E402

VERSION = "1.37.2"
COLUMNS = (
    ("policy", 24),
    ("world", max(map(len, WORLDS))),
    ("od node-min", 13),
    ("spot node-min", 13),
    ("cost $", 11),
    ("evictions", 9),
    ("moved+recl.", 11),
    ("reclaimed", 9),
    ("pending pod-min", 15),
    ("pdb viol.", 9),
    ("lost", 5),
    ("od pods end", 11),
)


def build() -> None:
    """The control plane's binaries and the peers', built where missing (each script skips what is there)."""
    env = {**os.environ, "SPOTSHIFT_K8S_VERSION": VERSION}
    subprocess.run(["bash", "tests/e2e/controlplane/build.sh"], cwd=ROOT, env=env, check=True)
    peers = ROOT / "tests/e2e/controlplane/peers.sh"
    if not peers.exists():
        raise SystemExit(f"{peers.relative_to(ROOT)} is missing: the real peers cannot be built")
    subprocess.run(["bash", str(peers)], cwd=ROOT, env=env, check=True)


def _pair(real: float | int | None, sim: float | int | None, fmt: str) -> str:
    text = "-" if real is None else fmt.format(real)
    return text if sim is None else f"{text}/{fmt.format(sim)}"


def row(real: replay.Outcome, sim: replay.Outcome | None) -> str:
    def both(name: str, fmt: str) -> str:
        return _pair(getattr(real, name), None if sim is None else getattr(sim, name), fmt)

    cells = [
        real.policy.ljust(24),
        real.world.ljust(COLUMNS[1][1]),
        both("on_demand_node_minutes", "{:.0f}"),
        both("spot_node_minutes", "{:.0f}"),
        both("cost", "{:.2f}"),
        both("evictions", "{}"),
        both("moved_then_reclaimed", "{}"),
        both("reclaimed", "{}"),
        both("pending_pod_minutes", "{:.0f}"),
        both("pdb_violations", "{}"),
        both("lost_pods", "{}"),
        both("on_demand_pods_at_end", "{}"),
    ]
    return " ".join(c if i < 2 else c.rjust(w) for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True)))


def table(run: replay.Replay, results: list[tuple[replay.Outcome, replay.Outcome | None]]) -> str:
    head = " ".join(name.ljust(w) if i < 2 else name.rjust(w) for i, (name, w) in enumerate(COLUMNS))
    lines = [f"{run.name}: {run.trace.description}, {run.length / 60:g} minutes (real/simulated)", head]
    lines += [row(real, sim) for real, sim in results]
    lines += [
        f"{real.policy} / {real.world}: the last on-demand node gone at minute {real.on_demand_gone_at / 60:.1f}; "
        f"on-demand node-minutes until then {real.on_demand_node_minutes_until_gone or 0.0:.0f}"
        for real, _ in results
        if real.on_demand_gone_at is not None
    ]
    return "\n".join(lines)


def _chart(run: replay.Replay, world: str, results: list[tuple[replay.Outcome, replay.Outcome | None]]) -> str:
    series = [(r.policy, r.on_demand_series, False) for r, _ in results if r.world == world]
    series += [(f"{s.policy} (sim)", s.on_demand_series, True) for r, s in results if r.world == world and s]
    top = max([1, *(n for _, values, _ in series for n in values)])

    def x(minute: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * minute * 60 / run.length

    def y(n: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * n / top

    parts = [f'<h2>{html.escape(world)} world</h2><svg width="{WIDTH}" height="{HEIGHT}" role="img">']
    for at, colour, what in ((run.cut, "#e45756", "spot cut"), (run.back, "#2ca02c", "spot back")):
        parts.append(
            f'<line x1="{x(at / 60):.1f}" x2="{x(at / 60):.1f}" y1="{PAD}" y2="{HEIGHT - PAD}" stroke="{colour}" '
            f'stroke-dasharray="3,3"><title>{what}</title></line>'
        )
    policies = sorted({r.policy for r, _ in results})
    for name, values, simulated in series:
        colour = COLOURS[policies.index(name.removesuffix(" (sim)")) % len(COLOURS)]
        points = " ".join(f"{x(m):.1f},{y(n):.1f}" for m, n in enumerate(values))
        dash = ' stroke-dasharray="5,3"' if simulated else ""
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{points}">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
    parts.append(f'<text x="4" y="{PAD - 8}" font-size="11">on-demand nodes by minute (max {top})</text></svg>')
    legend = " ".join(
        f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(p)}</span>'
        for i, p in enumerate(policies)
    )
    return "\n".join(parts) + f"<p>{legend} (dashed: the simulation)</p>"


def page(run: replay.Replay, results: list[tuple[replay.Outcome, replay.Outcome | None]]) -> str:
    worlds = list(dict.fromkeys(r.world for r, _ in results))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>spotshift: the replay on a real control plane</title>"
        "<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px}</style></head><body>"
        f"<h1>The replay on a real control plane</h1><pre>{html.escape(table(run, results))}</pre>"
        + "\n".join(_chart(run, w, results) for w in worlds)
        + "</body></html>"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", nargs="+", choices=list(POLICIES), help="default: every policy")
    ap.add_argument("--world", nargs="+", choices=list(WORLDS), help="default: every world")
    ap.add_argument("--trace", default=replay.LONG.name, choices=list(replay.REPLAYS))
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--logs", type=Path, help="keep each run's logs here (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--html", type=Path, help="write the page with the on-demand node count by minute here")
    args = ap.parse_args(argv)
    pairs = combinations(args.policy, args.world)
    if not pairs:
        ap.error("no policy given is run in a world given (tests/support/real_replay.py: WORLD_POLICIES)")
    if not args.no_build:
        build()
    os.environ["SPOTSHIFT_K8S_VERSION"] = VERSION
    run = replay.REPLAYS[args.trace]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="churn-real-"))
    results: list[tuple[replay.Outcome, replay.Outcome | None]] = []
    started = time.monotonic()
    with running_control_plane() as plane:
        for world, policy in pairs:
            work_dir = logs / f"{world}-{policy.replace(' ', '_').replace('+', 'and')}"
            real, log = run_replay(plane, policy, world, work_dir, run=run)
            simulated = policy in replay.SIMULATED and world in replay.SIMULATED_WORLDS
            sim = replay.simulate_outcome(policy, world, run) if simulated else None
            results.append((real, sim))
            print(
                f"{policy} / {world}: {log.seconds:.0f} s; evictions by the ledger {real.evictions}, by the "
                f"policy's log {'-' if log.logged_evictions is None else log.logged_evictions}",
                flush=True,
            )
    print(table(run, results))
    print(f"{len(results)} runs in {time.monotonic() - started:.0f} s; logs in {logs}")
    if args.json:
        report = [{"real": asdict(r), "simulated": None if s is None else asdict(s)} for r, s in results]
        args.json.write_text(json.dumps(report, indent=1))
    if args.html:
        args.html.write_text(page(run, results))
    return 0 if all(r.pdb_violations == 0 and r.lost_pods == 0 for r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
