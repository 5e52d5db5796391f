"""How many on-demand nodes the planner frees, against pusher's algorithm and against the exact optimum.

    python3 bench/plan_quality.py [--profile budgets|packing|pdb-heavy] [--pdb-rule rate-limit|all-at-once]
                                  [--instances 24] [--time-limit 60] [--seed 1]

For each generated instance (30-60 nodes; :data:`tests.support.cluster_gen.MILP_PROFILE`; ``--profile packing``
for :data:`tests.support.cluster_gen.MILP_PACKING`, where bin packing rather than PDB budgets decides;
``--profile pdb-heavy`` for :data:`tests.support.cluster_gen.PDB_HEAVY`, most multi-replica workloads with a
budget allowing one disruption) it prints the nodes drained by the pusher algorithm
(:func:`tests.support.pusher.pusher_plan`), by the planner (the portfolio of
:func:`rescheduler.plan.planner.plan`) and the optimum of a mixed-integer programme solved by HiGHS, then the
planner/optimum ratio and its average. All three follow the same PodDisruptionBudget rule
(``rescheduler.pdb_rule``, default ``rate-limit``). Every plan of the planner is checked by the independent
checker (:func:`tests.support.plan_check.check_plan`: each move with :func:`shared.fit.fits`, the budgets'
pacing replayed, ceilings); the script fails if one is invalid or drains fewer nodes than pusher's.

The MILP (maximise drained nodes):

* ``y[n]`` binary per on-demand node whose pods are all movable; ``x[p,t]`` binary per movable pod and spot
  target that passes the static filters (node state, taints, node affinity, volumes, extended resources,
  and inter-pod anti-affinity / host ports against the pods already on the target), all from :mod:`shared`;
* a pod is placed iff its node is drained: ``sum_t x[p,t] = y[n(p)]``;
* capacity per target and resource (cpu, memory, ephemeral-storage, extended resources, pod slots),
  expendable pods on targets counting as free;
* two moving pods in conflict (one's required anti-affinity term matches the other, topology key the
  hostname; or a shared host port) never land on the same target: ``x[p,t] + x[q,t] <= 1``;
* PodDisruptionBudgets: under ``rate-limit`` a node with a pod whose budget allows no disruption now is not a
  candidate (``y[n] = 0``), and budgets otherwise only pace the drain; under ``all-at-once``
  ``sum_n need[n,b] y[n] <= disruptionsAllowed[b]``. Spot ceilings and on-demand floors per workload are
  ``sum`` constraints like the latter.

What it does not encode, and why the instances leave it out: topology spread and zone-keyed (anti-)affinity
depend on counts across nodes that change with every move, and pod affinity on the presence of other pods;
the instances are generated without them (:data:`tests.support.cluster_gen.PACKING_ONLY`; hostname anti-affinity, host
ports, taints, selectors, PVs, PDBs and ceilings remain). Resources and hostname conflicts only get stricter
as pods are added, so any optimal assignment can be applied in any order and the optimum is a true upper
bound for the planner. Every MILP solution is replayed move by move with :func:`shared.fit.fits` as a check
of the encoding.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import highspy
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.planner import plan
from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT, PDB_RULES, Config
from shared.fit import fits
from shared.interpod import check_inter_pod_affinity, term_matches
from shared.model import Pod
from shared.movable import is_expendable
from shared.nodeaffinity import check_node_affinity
from shared.nodestate import check_ready, check_unschedulable
from shared.ports import check_host_ports, host_port_conflicts
from shared.resources import is_scalar_resource
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.taints import check_taints
from shared.volumes import check_volumes
from shared.workloads import spot_ceiling, workload_key
from tests.support.cluster_gen import MILP_PACKING, MILP_PROFILE, PDB_HEAVY, generate
from tests.support.plan_check import check_plan
from tests.support.pusher import movable_pods, pusher_plan, spot_targets

PROFILES = {"budgets": MILP_PROFILE, "packing": MILP_PACKING, "pdb-heavy": PDB_HEAVY}

HOSTNAME = "kubernetes.io/hostname"


def instances(count: int, seed: int) -> list[tuple[str, int, int, int]]:
    """(label, seed, nodes, pods): sizes from 30 to 60 nodes, 10 to 22 pods a node, DaemonSets included."""
    out = []
    sizes = (30, 40, 50, 60)
    densities = (10, 14, 18, 22)
    for i in range(count):
        nodes = sizes[i % len(sizes)]
        density = densities[(i // len(sizes)) % len(densities)]
        s = seed + i
        out.append((f"n{nodes}-d{density}-s{s}", s, nodes, nodes * density))
    return out


def _static_ok(pod: Pod, t: NodeInfo, snapshot: ClusterSnapshot) -> bool:
    node = t.node
    if check_ready(node) or check_unschedulable(pod, node) or check_taints(pod, node) or check_node_affinity(pod, node):
        return False
    if pod.volumes and check_volumes(pod, node, snapshot):
        return False
    if pod.host_ports and check_host_ports(pod, t):
        return False
    for name, want in pod.requests.items():
        extended = name not in ("cpu", "memory", "ephemeral-storage") and is_scalar_resource(name)
        if want > 0 and extended and want > t.allocatable(name):
            return False
    # Against the pods already there (hostname terms only in these instances: the state of the target).
    return check_inter_pod_affinity(pod, t, snapshot) is None


def _conflict(p: Pod, q: Pod, ns_labels: Any) -> bool:
    for term in p.pod_anti_affinity:
        if term.topology_key == HOSTNAME and term_matches(term, q, ns_labels):
            return True
    for term in q.pod_anti_affinity:
        if term.topology_key == HOSTNAME and term_matches(term, p, ns_labels):
            return True
    for hp in p.host_ports:
        if host_port_conflicts(hp.ip, hp.protocol, hp.port, q.host_ports):
            return True
    return False


def optimum(snapshot: ClusterSnapshot, config: Config, time_limit: float) -> tuple[int, bool, list[tuple[Pod, str]]]:
    """(drained nodes, proven optimal, the optimal assignment) for the MILP described in the module docstring."""
    cutoff = config.movability.expendable_priority_cutoff
    targets, candidates = spot_targets(snapshot, config)
    preempted = [p for t in targets for p in t.pods if is_expendable(p, cutoff)]
    for p in preempted:
        snapshot.remove_pod(p)
    try:
        return _solve(snapshot, config, targets, candidates, preempted, time_limit)
    finally:
        for p in preempted:
            snapshot.add_pod(p)


class _Milp:
    """The MILP's variables and what its constraints are built from: ``y[n]`` per candidate node, ``x[i, j]`` per
    movable pod ``pods[i]`` and target ``j``, the candidate nodes each budget and each workload needs drained, and
    each workload's spot ceiling and on-demand floor."""

    def __init__(self, h: Any) -> None:
        self.h = h
        self.y: dict[str, Any] = {}
        self.x: dict[tuple[int, int], Any] = {}
        self.pods: list[Pod] = []
        self.node_of: list[str] = []
        self.pdb_need: dict[int, list[tuple[str, int]]] = {}
        self.workload_need: dict[str, Counter[str]] = {}
        self.limits: dict[str, tuple[int, int]] = {}


def _solve(
    snapshot: ClusterSnapshot,
    config: Config,
    targets: list[NodeInfo],
    candidates: list[NodeInfo],
    preempted: list[Pod],
    time_limit: float,
) -> tuple[int, bool, list[tuple[Pod, str]]]:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", 1)
    pdbs = list(snapshot.pdbs)
    rule = config.rescheduler.pdb_rule
    m = _Milp(h)
    for info in candidates:
        _add_candidate(m, info, snapshot, config, targets, pdbs)
    if not m.y:
        return 0, True, []
    _add_target_constraints(m, targets, snapshot.namespace_labels)
    if rule == PDB_ALL_AT_ONCE:
        for b, needs in m.pdb_need.items():
            h.addConstr(sum(n * m.y[name] for name, n in needs) <= pdbs[b].disruptions_allowed)
    if any(pct < 100 or floor > 0 for pct, floor in m.limits.values()):
        _add_ceiling_constraints(m, snapshot, config, candidates, preempted)
    h.maximize(sum(m.y.values()))
    status = h.getModelStatus()
    optimal = status == highspy.HighsModelStatus.kOptimal
    info = h.getInfo()
    drained = round(info.objective_function_value) if info.primal_solution_status else 0
    assignment = [(m.pods[i], targets[j].name) for (i, j), var in m.x.items() if h.val(var) > 0.5]
    return drained, optimal, assignment


def _add_candidate(
    m: _Milp, info: NodeInfo, snapshot: ClusterSnapshot, config: Config, targets: list[NodeInfo], pdbs: list[Any]
) -> None:
    """``y`` for ``info`` and ``x`` for each of its pods, placed iff the node is drained, when every pod is movable
    and has a target (and, under ``rate-limit``, no budget of its pods is at zero)."""
    h = m.h
    why, movable, pdb_of = movable_pods(info, config, pdbs)
    if why is not None:
        return
    if config.rescheduler.pdb_rule == PDB_RATE_LIMIT and any(
        b is not None and pdbs[b].disruptions_allowed < 1 for b in pdb_of
    ):
        return  # a budget allowing no disruption now blocks the node
    options: list[list[int]] = []
    for p in movable:
        opts = [j for j, t in enumerate(targets) if _static_ok(p, t, snapshot)]
        if not opts:
            return
        options.append(opts)
    m.y[info.name] = h.addBinary()
    for p, opts, b in zip(movable, options, pdb_of, strict=True):
        i = len(m.pods)
        m.pods.append(p)
        m.node_of.append(info.name)
        for j in opts:
            m.x[(i, j)] = h.addBinary()
        h.addConstr(sum(m.x[(i, j)] for j in opts) == m.y[info.name])
        if b is not None:
            m.pdb_need.setdefault(b, [])
        wk = workload_key(p)
        if wk is not None:
            m.workload_need.setdefault(wk, Counter())[info.name] += 1
            m.limits[wk] = spot_ceiling(p.annotations, config.spot_ceiling)
    for b, n in Counter(b for b in pdb_of if b is not None).items():
        m.pdb_need[b].append((info.name, n))


def _add_target_constraints(m: _Milp, targets: list[NodeInfo], ns_labels: Any) -> None:
    """Per target: capacity per resource the scheduler checks and pod slots, and no two moving pods in conflict."""
    h, x, pods = m.h, m.x, m.pods
    by_target: dict[int, list[int]] = {}
    for i, j in x:
        by_target.setdefault(j, []).append(i)
    for j, members in by_target.items():
        t = targets[j]
        resources = {r for i in members for r, v in pods[i].requests.items() if v > 0}
        for r in resources:
            if r != "cpu" and r != "memory" and r != "ephemeral-storage" and not is_scalar_resource(r):
                continue  # not checked by the scheduler
            free = max(0, t.free(r))
            terms = [(pods[i].requests.get(r, 0), x[(i, j)]) for i in members if pods[i].requests.get(r, 0) > 0]
            if terms:
                h.addConstr(sum(v * var for v, var in terms) <= free)
        h.addConstr(sum(x[(i, j)] for i in members) <= max(0, t.free("pods")))
        # Pairwise conflicts between pods moving to the same target.
        special = [i for i in members if pods[i].pod_anti_affinity or pods[i].host_ports]
        if special:
            for a in special:
                for b in members:
                    if b == a or (b in special and b < a):
                        continue
                    if _conflict(pods[a], pods[b], ns_labels):
                        h.addConstr(x[(a, j)] + x[(b, j)] <= 1)


def _add_ceiling_constraints(
    m: _Milp, snapshot: ClusterSnapshot, config: Config, candidates: list[NodeInfo], preempted: list[Pod]
) -> None:
    """Each workload's on-demand floor and spot ceiling over the pods the drained nodes move."""
    cls_spot = {i.name for i in snapshot if _is_spot(i, config)}
    od_names = {c.name for c in candidates}
    share: dict[str, list[int]] = {wk: [0, 0, 0] for wk in m.limits}
    for info in snapshot:
        for p in info.pods:
            wk = workload_key(p)
            if wk in share:
                share[wk][0] += info.name in cls_spot
                share[wk][1] += info.name in od_names
                share[wk][2] += 1
    for p in preempted:
        wk = workload_key(p)
        if wk in share:
            share[wk][0] += 1
            share[wk][2] += 1
    for wk, (pct, floor) in m.limits.items():
        spot, od, total = share[wk]
        moved = sum(n * m.y[name] for name, n in m.workload_need[wk].items())
        # A workload already at or over its limit may not move at all (moved <= 0).
        if floor > 0:
            m.h.addConstr(moved <= max(0, od - floor))
        if pct < 100:
            m.h.addConstr(100 * moved <= max(0, pct * total - 100 * spot))


def _is_spot(info: NodeInfo, config: Config) -> bool:
    from shared.classes import node_class

    return node_class(info.node, config.node_classes) == "spot"


def replay_ok(snapshot: ClusterSnapshot, assignment: list[tuple[Pod, str]], config: Config) -> bool:
    """Apply the MILP's moves one by one with :func:`shared.fit.fits` (expendable pods on targets preempted)."""
    targets, _ = spot_targets(snapshot, config)
    cutoff = config.movability.expendable_priority_cutoff
    preempted = [p for t in targets for p in t.pods if is_expendable(p, cutoff)]
    for p in preempted:
        snapshot.remove_pod(p)
    done: list[tuple[Pod, Pod]] = []
    ok = True
    try:
        for pod, target in assignment:
            if fits(pod, snapshot[target], snapshot, first_only=True):
                ok = False
                break
            done.append((pod, snapshot.move_pod(pod, target)))
    finally:
        for original, moved in reversed(done):
            snapshot.remove_pod(moved)
            snapshot.add_pod(original)
        for p in preempted:
            snapshot.add_pod(p)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=60.0, help="HiGHS time limit per instance, seconds")
    ap.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        default="budgets",
        help="budgets: PDBs and ceilings matter (MILP_PROFILE); packing: bin packing decides (MILP_PACKING); "
        "pdb-heavy: most multi-replica workloads have a one-at-a-time budget (PDB_HEAVY)",
    )
    ap.add_argument("--pdb-rule", choices=PDB_RULES, default=PDB_RATE_LIMIT, help="rescheduler.pdb_rule")
    args = ap.parse_args(argv)
    profile = PROFILES[args.profile]
    base = Config()
    config = replace(base, rescheduler=replace(base.rescheduler, pdb_rule=args.pdb_rule))
    rows = []
    header = ("instance", "od nodes", "pusher", "planner", "optimum", "ratio", "milp s")
    print("{:<18} {:>8} {:>6} {:>7} {:>7} {:>6}  {:>6}  strategy".format(*header))
    for label, seed, nodes, pods in instances(args.instances, args.seed):
        items = generate(seed, nodes, pods, profile)
        snapshot = load_bytes(orjson.dumps({"kind": "List", "items": items}))
        baseline = pusher_plan(snapshot, config)
        planned = plan(snapshot, config, verify=True)
        try:
            check_plan(snapshot, planned, config)
        except AssertionError as e:
            print(f"{label}: the planner's plan is invalid: {e}", file=sys.stderr)
            return 1
        if planned.summary.verify_rejections:
            print(f"{label}: fits() rejected {planned.summary.verify_rejections} planned move(s)", file=sys.stderr)
            return 1
        started = time.perf_counter()
        best, proven, assignment = optimum(snapshot, config, args.time_limit)
        seconds = time.perf_counter() - started
        if not replay_ok(snapshot, assignment, config):
            print(f"{label}: the MILP's assignment does not replay with fits(): encoding bug", file=sys.stderr)
            return 1
        got = len(planned.drained)
        ratio = 1.0 if best == 0 else got / best  # nothing can be drained: both are right
        rows.append((len(baseline.drained), got, best, ratio))
        mark = "" if proven else "*"
        print(
            f"{label:<18} {planned.summary.on_demand_nodes:>8} {len(baseline.drained):>6} {got:>7} "
            f"{str(best) + mark:>7} {ratio:>6.3f}  {seconds:>6.1f}  {planned.summary.strategy}"
        )
    if not rows:
        return 0
    avg = statistics.mean(r[3] for r in rows)
    pusher_avg = statistics.mean(1.0 if r[2] == 0 else r[0] / r[2] for r in rows)
    vs_pusher = min(1.0 if r[0] == 0 and r[1] == 0 else (r[1] / r[0] if r[0] else float("inf")) for r in rows)
    below = sum(r[1] < r[0] for r in rows)
    print(
        f"\nprofile {args.profile}, rule {args.pdb_rule}: average planner/optimum {avg:.4f} "
        f"(pusher/optimum {pusher_avg:.4f}) over {len(rows)} instances; min planner/pusher {vs_pusher:.3f}; "
        f"planner < pusher on {below}, planner = optimum on {sum(r[1] == r[2] for r in rows)}"
    )
    useful = [r for r in rows if r[2] > 0]
    if useful:
        planner_useful = statistics.mean(r[1] / r[2] for r in useful)
        pusher_useful = statistics.mean(r[0] / r[2] for r in useful)
        print(
            f"over the {len(useful)} instances where the optimum drains at least one node: planner/optimum "
            f"{planner_useful:.4f}, pusher/optimum {pusher_useful:.4f}; "
            f"nodes drained in total: pusher {sum(r[0] for r in rows)}, planner {sum(r[1] for r in rows)}, "
            f"optimum {sum(r[2] for r in rows)}"
        )
    print("(* = HiGHS hit the time limit: the best solution found, not proven optimal)")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
