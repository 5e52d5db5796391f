"""spot-rescheduler and spot-extender on a big cluster, live: start-up, memory, CPU per cycle, calls, throughput.

    python3 bench/live_scale.py [--nodes 1000] [--pods 30000] [--seed 1] [--skip-throughput]
    python3 bench/live_scale.py --nodes 5000 --pods 150000      # the big size: report, and what breaks first

Needs the e2e tier's control-plane binaries (``bash tests/run.sh`` builds them, or
``bash tests/e2e/controlplane/build.sh``). On that control plane (release ``SPOTSHIFT_K8S_VERSION``, by default the
newest the project runs on) it writes the generator's realistic cluster (:mod:`tests.support.cluster_gen`,
profile ``FULL``: node pools, spot with and without taints, reclaimed and NotReady nodes, DaemonSets, budgets,
zonal volumes, pending and finished pods) through the API, each object with its status
(:mod:`tests.support.cluster_load`; no kubelet or node stand-in is needed: nothing rewrites a status there), then:

1. **spot-rescheduler** ``run --dry-run`` (leader election off, ``--housekeeping-interval 5s``), as a process:
   seconds from start to ``ready`` (the state listed), of which after its lists started (its ``waiting for the
   cluster state`` line: the informers started, the interpreter's start-up and the ``/version`` read before),
   and to the first complete plan; peak and steady RSS of
   the process (``VmHWM``, ``VmRSS`` after the idle cycles) and the peak summed PSS of the process and its
   forked planners; CPU seconds of a cycle with nothing to do (the median over ``--cycles`` cycles, counted once
   the restored cluster is quiet: two cycles in a row that reuse the last plan; the cycles planned before are
   reported) and of a
   cycle with a plan to make (a label changed on an on-demand node just before it, so the cluster changed; the
   plan and the dry run's check of the drain it would start, the median over ``--plan-cycles``). The CPU is the
   process's and its reaped children's (``/proc``), between the cycles' ``plan:`` log lines. With ``--churn``,
   every pod is then relabelled through the API (a ``MODIFIED`` event for each, as a rollout sends) and the RSS
   read again a few cycles later: the state after every pod was replaced once, against the steady RSS before.
2. **spot-extender** (2 workers, node cache and pod index watching the cluster): seconds to ``/readyz`` (nodes
   listed) and until both workers' pod indexes are listed (their pod watches opened); RSS of each worker.
3. **The start-up request pattern** of each, from the API server's audit log (its own user per component):
   requests by verb and resource, whether every list is paginated, and GETs of single objects.
4. **Real kube-scheduler calls** (unless ``--skip-throughput``): kube-scheduler with the Go no-op extender
   (``bench/noop_extender``) and with spot-extender, configured as ``deploy/scheduler`` ships it, binds
   ``--throughput-pods`` new pods per round, ``--runs`` rounds each alternating; pods/s and spot-extender /
   no-op. spot-extender's ``/filter`` and ``/prioritize`` latency p50/p99 during its rounds from its own
   histogram (interpolated within buckets, as Prometheus' ``histogram_quantile`` does), and exact p50/p99 of the
   same calls replayed over one kept-alive TLS connection (the node names kube-scheduler sends at this size:
   ``max(100, nodes * (50 - nodes/125) / 100)`` feasible nodes).

Goals at 1,000 x 30,000 (printed beside each figure): rescheduler ready <= 20 s, RSS <= 600 MB, idle cycle
<= 0.2 s CPU, planning cycle <= 2 s; extender ready <= 10 s, <= 200 MB per worker; throughput >= 0.9x no-op.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from live_clusters import Written, written_cluster  # noqa: E402
from livelab import (  # noqa: E402
    EXTENDER_USER,
    RESCHEDULER_USER,
    Held,
    MemorySampler,
    Rescheduler,
    audit_requests,
    children_of,
    cpu_seconds,
    extender_held,
    memory_kib,
    paginated,
    relabel_pods,
    request_pattern,
    requests_between,
    rescheduler_held,
)
from scheduling_throughput import (  # noqa: E402
    NoopProcess,
    TlsClient,
    build_noop,
    extender_config,
    one_round,
    percentiles,
    timed,
)

from tests.support.cluster_gen import FULL, ON_DEMAND_LABEL, iter_items  # noqa: E402
from tests.support.controlplane.cluster import ControlPlane  # noqa: E402
from tests.support.extender_server import ExtenderProcess  # noqa: E402

MB = 1024 * 1024


def say(text: str) -> None:
    print(text, flush=True)


def mb(kib: int) -> str:
    return f"{kib * 1024 / MB:.0f} MB"


# -- the rescheduler ------------------------------------------------------------------------------------------


def touch_on_demand_node(plane: ControlPlane, value: int) -> None:
    """A label changed on one on-demand node: the next cycle has a changed cluster and plans it anew."""
    label, wanted = ON_DEMAND_LABEL
    for node in plane.api.list("/api/v1/nodes", labelSelector=f"{label}={wanted}", limit=1):
        name = node["metadata"]["name"]
        plane.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {"bench.spotshift.io/touch": str(value)}}})
        return
    raise RuntimeError("no on-demand node to touch")


QUIET_WITHIN = 60
"""Cycles after the first plan within which the restored cluster must have gone quiet (a plan reused)."""


def idle_cycles(resched: Rescheduler, pid: int, i: int, n: int) -> tuple[int, list[float], int]:
    """CPU seconds of ``n`` idle cycles after the ``plan:`` line at index ``i``, the index of the last line read, and
    how many cycles planned before the first idle one. An idle cycle is the CPU between two ``plan:`` lines that
    both reused the last plan: the first one's drains were not checked again after its line, and the second did not
    plan. After a restore the control plane's controllers write for a while (each write is a change, planned), so
    the count starts once the cluster is quiet."""
    idle: list[float] = []
    planned, reused_before = 0, False
    cpu = cpu_seconds(pid)
    while len(idle) < n:
        i, line = resched.wait_line("plan:", after=i + 1)
        now = cpu_seconds(pid)
        reused = bool(line.record.get("plan_reused"))
        if reused and reused_before:
            idle.append(now - cpu)
        elif not reused and not idle:
            planned += 1
            if planned > QUIET_WITHIN:
                raise RuntimeError(f"the cluster did not go quiet: {planned} cycles in a row planned")
        reused_before, cpu = reused, now
    return i, idle, planned


def measure_rescheduler(plane: ControlPlane, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    resched = Rescheduler(plane, work).start()
    assert resched.proc is not None
    pid = resched.proc.pid
    sampler = MemorySampler(pid)
    sampler.start()
    try:
        _, lists = resched.wait_line("waiting for the cluster state")
        _, listed = resched.wait_line("cluster state listed")
        i, first = resched.wait_line("plan:", after=0)
        out: dict[str, Any] = {
            "ready_s": listed.at - resched.started,
            "listed_s": listed.at - lists.at,
            "first_plan_s": first.at - resched.started,
            "first_plan_seconds": first.record.get("plan_seconds"),
            "first_plan_drainable": len(first.record.get("drainable") or ()),
        }
        say(f"rescheduler: ready in {out['ready_s']:.1f}s, first plan at {out['first_plan_s']:.1f}s")
        i, idle, out["cycles_until_quiet"] = idle_cycles(resched, pid, i, args.cycles)
        out["idle_cycle_cpu"] = statistics.median(idle)
        out["idle_cycles"] = idle
        planning, plan_seconds = [], []
        for k in range(args.plan_cycles):
            # The change is seen by the watch a moment later: the cycle that plans is the first not reusing a plan.
            touch_on_demand_node(plane, k)
            cpu = cpu_seconds(pid)
            while True:
                i, line = resched.wait_line("plan:", after=i + 1)
                if not line.record.get("plan_reused"):
                    break
            plan_seconds.append(float(line.record.get("plan_seconds") or 0.0))
            # Its drains are checked after its log line: up to the next cycle's line, less an idle cycle.
            i, _ = resched.wait_line("plan:", after=i + 1)
            planning.append(cpu_seconds(pid) - cpu - out["idle_cycle_cpu"])
        out["planning_cycle_cpu"] = statistics.median(planning)
        out["planning_cycles"] = planning
        out["planning_plan_seconds"] = statistics.median(plan_seconds)
        mem = memory_kib(pid)
        out["rss_steady_kib"] = mem["VmRSS"]
        out["rss_peak_kib"] = mem["VmHWM"]
        out["tree_pss_peak_kib"] = sampler.peak_kib
        cycles_ended = time.time()
        if args.churn:
            out.update(churn(plane, resched, i, args))
    finally:
        sampler.stop()
        resched.stop()
    log = plane.audit_log
    out["requests"] = requests_between(log, RESCHEDULER_USER, resched.began, first.wall)
    out["later_requests"] = requests_between(log, RESCHEDULER_USER, first.wall + 1e-6, cycles_ended)
    out["later_cycles"] = args.cycles + args.plan_cycles
    return out


def churn(plane: ControlPlane, resched: Rescheduler, i: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every pod relabelled through the API (each replaced in the rescheduler's state by its watch event's object),
    then the rescheduler's RSS once it has planned :data:`CHURN_SETTLE` more cycles."""
    assert resched.proc is not None
    pid = resched.proc.pid
    pods, seconds = relabel_pods(plane, "bench.spotshift.io/churn", "1", args.threads)
    say(f"{pods} pods relabelled in {seconds:.0f}s")
    for _ in range(CHURN_SETTLE):
        i, _ = resched.wait_line("plan:", after=i + 1)
    mem = memory_kib(pid)
    return {
        "churn_pods": pods,
        "churn_seconds": seconds,
        "rss_churned_kib": mem["VmRSS"],
        "rss_churned_peak_kib": mem["VmHWM"],
    }


CHURN_SETTLE = 3
"""Cycles the rescheduler plans after the last pod was relabelled before its memory is read (its pod watch has
applied the events by then: it applies them faster than the API server takes the patches)."""


# -- the extender ---------------------------------------------------------------------------------------------


def pod_watches(plane: ControlPlane, user: str) -> int:
    return sum(1 for r in audit_requests(plane.audit_log, user) if r.verb == "watch" and r.resource == "pods")


def measure_extender(plane: ControlPlane, work: Path, workers: int) -> tuple[ExtenderProcess, dict[str, Any]]:
    spot = ExtenderProcess(work, plane.kubeconfig_of(EXTENDER_USER), {}, workers=workers)
    began = time.monotonic()
    spot.start(timeout=600)
    out: dict[str, Any] = {"ready_s": time.monotonic() - began}
    deadline = time.monotonic() + 600
    while pod_watches(plane, EXTENDER_USER) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError("the extender's workers did not list the pods within 600s")
        time.sleep(0.2)
    out["pods_listed_s"] = time.monotonic() - began
    say(f"extender: ready in {out['ready_s']:.1f}s, pod indexes listed at {out['pods_listed_s']:.1f}s")
    time.sleep(2)
    assert spot.proc is not None
    worker_pids = children_of(spot.proc.pid)
    out["workers"] = [memory_kib(p) for p in worker_pids]
    out["requests"] = list(audit_requests(plane.audit_log, EXTENDER_USER))
    return spot, out


BUCKETS = "spotshift_http_request_duration_seconds_bucket"


def histogram_quantiles(before: str, after: str, endpoint: str) -> tuple[float, float, int]:
    """p50 and p99 of ``spotshift_http_request_duration_seconds`` for ``endpoint`` between two scrapes."""

    def buckets(text: str) -> dict[float, float]:
        out: dict[float, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == BUCKETS and sample.labels.get("endpoint") == endpoint:
                    le = float(sample.labels["le"])
                    out[le] = out.get(le, 0.0) + sample.value
        return out

    b0, b1 = buckets(before), buckets(after)
    counts = sorted((le, b1[le] - b0.get(le, 0.0)) for le in b1)
    total = counts[-1][1] if counts else 0.0

    def quantile(q: float) -> float:
        rank, lower, below = q * total, 0.0, 0.0
        for le, cumulative in counts:
            if cumulative >= rank:
                if le == float("inf"):
                    return lower
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 0.0)
            lower, below = le, cumulative
        return lower

    return quantile(0.5), quantile(0.99), int(total)


def feasible_nodes_sent(nodes: int) -> int:
    """How many node names kube-scheduler's filter finds before it stops (``numFeasibleNodesToFind``, adaptive
    ``percentageOfNodesToScore``: pkg/scheduler/schedule_one.go)."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def measure_calls(
    plane: ControlPlane, spot: ExtenderProcess, args: argparse.Namespace, node_names: list[str], pod: dict[str, Any]
) -> dict[str, Any]:
    noop = NoopProcess(build_noop(), spot.certs)
    out: dict[str, Any] = {"rates": {"go-noop": [], "spot-extender": []}}
    try:
        configs = {
            "go-noop": [extender_config(noop.url, spot.ca_bundle)],
            "spot-extender": [extender_config(spot.url, spot.ca_bundle)],
        }
        metrics_before = spot.metrics()
        for run in range(args.runs):
            order = ("go-noop", "spot-extender") if run % 2 == 0 else ("spot-extender", "go-noop")
            for mode in order:
                rate = one_round(plane, args.throughput_pods, configs[mode], 1000)
                out["rates"][mode].append(rate)
                say(f"  run {run + 1}: {mode}: {rate:.1f} pods/s")
        metrics_after = spot.metrics()
        for verb in ("filter", "prioritize"):
            out[f"histogram_{verb}"] = histogram_quantiles(metrics_before, metrics_after, verb)
        names = node_names[: feasible_nodes_sent(len(node_names))]
        body = orjson.dumps({"Pod": pod, "NodeNames": names, "Nodes": None})
        out["replay_names"] = len(names)
        for verb in ("filter", "prioritize"):
            with TlsClient(spot.port, spot.certs / "ca.crt") as client:
                client.call(f"/{verb}", body)
                out[f"replay_{verb}"] = percentiles(timed(lambda verb=verb: client.call(f"/{verb}", body), 300))
    finally:
        noop.stop()
    return out


# -- report -----------------------------------------------------------------------------------------------------


def pattern_lines(requests: list[Any]) -> list[str]:
    lines = [f"    {verb:6s} {resource:40s} {n}" for (verb, resource), n in sorted(request_pattern(requests).items())]
    lists = [r for r in requests if r.verb == "list"]
    gets = [r for r in requests if r.verb == "get" and r.name]
    paged = sum(paginated(r) for r in lists)
    lines.append(f"    lists paginated: {paged} of {len(lists)}; GETs of one object: {len(gets)}")
    return lines


def row(label: str, value: str, ok: bool | None = None) -> None:
    """One figure; ``ok`` says whether it meets its goal (None: no goal at this size)."""
    verdict = "" if ok is None else ("meets the goal" if ok else "MISSES the goal")
    say(f"  {label:32s} {value:28s} {verdict}".rstrip())


def report_rescheduler(r: dict[str, Any], goals: bool) -> None:
    say("spot-rescheduler run --dry-run:")
    row("ready (state listed)", f"{r['ready_s']:.1f} s", r["ready_s"] <= 20 if goals else None)
    row("  after its lists started", f"{r['listed_s']:.1f} s")
    row("first complete plan", f"{r['first_plan_s']:.1f} s")
    row("  its planning", f"{r['first_plan_seconds']} s, {r['first_plan_drainable']} nodes drainable")
    peak_ok = r["rss_peak_kib"] * 1024 <= 600 * MB if goals else None
    row("RSS peak / steady", f"{mb(r['rss_peak_kib'])} / {mb(r['rss_steady_kib'])}", peak_ok)
    row("PSS peak, with forked planners", mb(r["tree_pss_peak_kib"]))
    idle = ", ".join(f"{c:.2f}" for c in r["idle_cycles"])
    row("  cycles planned before quiet", str(r["cycles_until_quiet"]))
    row(
        "CPU, idle cycle (median)",
        f"{r['idle_cycle_cpu']:.2f} s ({idle})",
        r["idle_cycle_cpu"] <= 0.2 if goals else None,
    )
    planning = ", ".join(f"{c:.2f}" for c in r["planning_cycles"])
    planning_ok = r["planning_cycle_cpu"] <= 2.0 if goals else None
    row("CPU, planning cycle (median)", f"{r['planning_cycle_cpu']:.2f} s ({planning})", planning_ok)
    row("  its plan_seconds (median)", f"{r['planning_plan_seconds']:.2f} s")
    if "rss_churned_kib" in r:
        ratio = r["rss_churned_kib"] / r["rss_steady_kib"]
        row(
            f"RSS after all {r['churn_pods']:,} pods relabelled",
            f"{mb(r['rss_churned_kib'])} ({ratio:.2f} x steady; peak {mb(r['rss_churned_peak_kib'])})",
            ratio <= 1.1,
        )
        row("  the relabelling through the API", f"{r['churn_seconds']:.0f} s")
    say("  start-up requests (audit log, until the first plan):")
    for line in pattern_lines(r["requests"]):
        say(line)
    say(f"  requests in the {r['later_cycles']} cycles after it:")
    for line in pattern_lines(r["later_requests"]):
        say(line)


def report_extender(ext: dict[str, Any], goals: bool) -> None:
    say("spot-extender (2 workers):")
    row("ready (/readyz: nodes listed)", f"{ext['ready_s']:.1f} s", ext["ready_s"] <= 10 if goals else None)
    row("pod indexes listed", f"{ext['pods_listed_s']:.1f} s")
    for n, w in enumerate(ext["workers"]):
        ok = w["VmHWM"] * 1024 <= 200 * MB if goals else None
        row(f"worker {n + 1} RSS peak / now", f"{mb(w['VmHWM'])} / {mb(w['VmRSS'])}", ok)
    say("  start-up requests (audit log):")
    for line in pattern_lines(ext["requests"]):
        say(line)


def report_calls(calls: dict[str, Any], args: argparse.Namespace, goals: bool) -> None:
    noop = statistics.median(calls["rates"]["go-noop"])
    spot = statistics.median(calls["rates"]["spot-extender"])
    say(f"kube-scheduler, {args.throughput_pods} new pods per round, median of {args.runs} rounds each:")
    rounds = {mode: ", ".join(f"{r:.1f}" for r in rates) for mode, rates in calls["rates"].items()}
    row("go-noop", f"{noop:.1f} pods/s ({rounds['go-noop']})")
    row("spot-extender", f"{spot:.1f} pods/s ({rounds['spot-extender']})")
    row("spot-extender / go-noop", f"{spot / noop:.2f}", spot / noop >= 0.9 if goals else None)
    for verb in ("filter", "prioritize"):
        p50, p99, n = calls[f"histogram_{verb}"]
        r50, r99 = calls[f"replay_{verb}"]
        row(f"/{verb} real calls p50 / p99", f"{p50 * 1000:.2f} / {p99 * 1000:.2f} ms ({n} calls, histogram)")
        row(f"/{verb} replayed p50 / p99", f"{r50 * 1000:.2f} / {r99 * 1000:.2f} ms ({calls['replay_names']} names)")


def report(
    args: argparse.Namespace, written: Written, resched: dict[str, Any], ext: dict[str, Any], calls: dict[str, Any]
) -> None:
    goals = args.nodes == 1000 and args.pods == 30000
    say("")
    how = f"written in {written.seconds:.0f}s ({written.requests} requests)"
    if written.restored:
        how += f", kept as {written.key} and restored in {written.restore_seconds:.0f}s"
    say(f"== {args.nodes} nodes, {args.pods} pods (seed {args.seed}): {how}")
    report_rescheduler(resched, goals)
    report_extender(ext, goals)
    if calls:
        report_calls(calls, args, goals)


def memory_report(who: str, held: Held) -> None:
    say(f"memory kept by {who}, in this process with tracemalloc, the same cluster fed page by page:")
    say(f"  {held.per_node:,.0f} bytes per node, {held.per_pod:,.0f} bytes per pod (with its PDBs and volumes);")
    say(f"  {held.total / MB:.0f} MB in all; the source lines that allocated the most of it:")
    for where, size in held.holders:
        say(f"    {size / MB:7.1f} MB  {where}")


def _replica(item: dict[str, Any]) -> bool:
    return (item["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=8, help="writers loading the cluster")
    parser.add_argument("--cycles", type=int, default=4, help="idle cycles measured")
    parser.add_argument("--plan-cycles", type=int, default=3, help="planning cycles measured")
    parser.add_argument("--throughput-pods", type=int, default=300, help="new pods per kube-scheduler round")
    parser.add_argument("--runs", type=int, default=2, help="kube-scheduler rounds per extender")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--churn",
        action="store_true",
        help="after the planning cycles, relabel every pod through the API and read the rescheduler's RSS again "
        "(goal: within 10%% of its steady RSS before)",
    )
    parser.add_argument("--skip-memory", action="store_true", help="leave out the bytes per object (tracemalloc)")
    parser.add_argument(
        "--no-keep",
        action="store_true",
        help="write the cluster through the API, not keeping it (default: kept under "
        "~/.cache/spotshift/live-clusters, and restored from there by the next run of the same size and seed)",
    )
    args = parser.parse_args()

    t0 = time.monotonic()
    names: list[str] = []
    sample: list[dict[str, Any]] = []
    for item in iter_items(args.seed, args.nodes, args.pods, FULL):
        if item["kind"] == "Node":
            names.append(item["metadata"]["name"])
        elif not sample and item["kind"] == "Pod" and _replica(item):
            sample.append(item)
    say(f"generated the cluster in {time.monotonic() - t0:.0f}s")
    with written_cluster(
        args.nodes,
        args.pods,
        args.seed,
        repr(FULL),
        lambda: iter_items(args.seed, args.nodes, args.pods, FULL),
        threads=args.threads,
        keep=not args.no_keep,
        progress=say,
    ) as (plane, written):
        work = plane.run_dir / "bench"
        work.mkdir()
        resched = measure_rescheduler(plane, work, args)
        spot, ext = measure_extender(plane, work, 2)
        try:
            calls = {} if args.skip_throughput else measure_calls(plane, spot, args, names, sample[0])
        finally:
            spot.stop()
        report(args, written, resched, ext, calls)
    if not args.skip_memory:
        items = list(iter_items(args.seed, args.nodes, args.pods, FULL))
        memory_report("spot-rescheduler (cluster state)", rescheduler_held(items))
        memory_report("spot-extender, one worker (node and pod indexes)", extender_held(items))
    say(f"total {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
