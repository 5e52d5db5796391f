"""CPU cost of one rescheduler cycle over a cached 5,000-node / 150,000-pod cluster state.

    python3 bench/run_cycle.py                     # 5,000 nodes, 150,000 pods, 3 timed cycles
    python3 bench/run_cycle.py --nodes 500 --pods 15000 --runs 5
    python3 bench/run_cycle.py --change pod --runs 5     # a pod replaced by its controller before each cycle
    python3 bench/run_cycle.py --change none --runs 5    # the idle cycle: nothing changed since the last one

Why this measures what it does: in production the state is already in memory (the informers listed it once
and the watches keep it current), so a housekeeping cycle costs what the loop does with it: assemble a
snapshot from the watched views, plan (:mod:`rescheduler.plan.planner`), and decide which nodes to drain
(:func:`rescheduler.plan.cycle.decide`, PDB pre-checks included). No API call is made. The state is built the
way the informers build it: every generated object goes through :meth:`ClusterState.apply`, the watch path.

The planner runs as the loop runs it: with ``--plan-time-budget`` (0.5 s by default), so on this cluster only the
first packing strategy of the portfolio and pusher's order run (small clusters get the whole portfolio;
``spot-rescheduler plan`` always does), and with one :class:`~rescheduler.plan.planner.PlanCache` kept from cycle to
cycle, as :func:`rescheduler.run.default_planner` keeps it: what was derived from a node's pods is reused while the
node holds the same ``Pod`` objects (the state keeps them until a watch event replaces one). The first timed cycle
starts with an empty cache; ``--no-cache`` plans every cycle from scratch. With ``--change``, one untimed cycle
fills the cache first and a change goes through the watch path before each timed cycle (``pod``: one pod replaced
by its controller on its node; ``pod-gone``: one pod deleted; ``node``: one node's annotations changed;
``node-label``: one node's label that no pod reads set; ``none``: nothing, the idle cycle).
``--profile FILE`` writes a cProfile of the timed cycles. CPython's full garbage collections are made as
``spot-rescheduler run`` makes them (:mod:`rescheduler.full_collections`: every ten minutes, after a cycle, so
none within the timed cycles); ``--automatic-full-collections`` leaves them to the interpreter's allocation counts,
which at 5,000 nodes put one of about a second in one cycle in four or five. The state's snapshot is a copy of
NodeInfos maintained event by event, not a rebuild.

The figure is ``time.process_time()`` (CPU seconds of this process, all threads) per cycle, the median of
``--runs`` runs; the acceptance bound is 2 s (``--limit``). Recorded figures, with the commands that reproduce
them, are in bench/README.md. Building the state itself (the one-time cost of the informers' initial list) is
not timed.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rescheduler.cluster.watch_cache import NAMESPACES, NODES, PDBS, PODS, PVCS, PVS, STORAGE_CLASSES, ClusterState
from rescheduler.full_collections import FULL_COLLECTION_INTERVAL, FullCollections
from rescheduler.plan.candidates import PlanCache
from rescheduler.plan.cycle import decide, gate, plan_nodes
from rescheduler.plan.safety import unschedulable_pods
from rescheduler.run import DEFAULT_PLAN_TIME_BUDGET
from shared.config import Config
from tests.support import cluster_gen

_KINDS = {
    "Node": NODES,
    "Pod": PODS,
    "PodDisruptionBudget": PDBS,
    "Namespace": NAMESPACES,
    "PersistentVolume": PVS,
    "PersistentVolumeClaim": PVCS,
    "StorageClass": STORAGE_CLASSES,
}


SAMPLE_EVERY = 997
"""Every this many bound pods with a controller, the generated object is kept: the pods ``--change pod`` replaces."""


def build_state(
    nodes: int, pods: int, seed: int, sample: dict[str, list[dict[str, Any]]] | None = None
) -> ClusterState:
    """The informers' view of a generated cluster (finished pods left out, as the pod field selector does).
    ``sample["Pod"]`` receives every :data:`SAMPLE_EVERY`-th bound pod that has a controller, ``sample["Node"]`` every
    node, as generated."""
    state = ClusterState()
    bound = 0
    for item in cluster_gen.iter_items(seed, nodes, pods):
        kind = _KINDS.get(item.get("kind", ""))
        if kind is None:
            continue
        if kind is PODS and (item.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        state.apply(kind, "ADDED", item)
        if sample is None:
            continue
        if kind is NODES:
            sample.setdefault("Node", []).append(item)
        elif kind is PODS and item["spec"].get("nodeName") and _controller(item):
            bound += 1
            if bound % SAMPLE_EVERY == 0:
                sample.setdefault("Pod", []).append(item)
    state.synced.update(k.name for k in _KINDS.values())
    return state


def _controller(item: dict[str, Any]) -> bool:
    return any(ref.get("controller") for ref in item["metadata"].get("ownerReferences") or ())


class Changes:
    """The change ``--change`` applies between two timed cycles, through :meth:`ClusterState.apply` (the watch path).

    ``pod``: one pod replaced by its controller on the same node (``DELETED``, then ``ADDED`` under a fresh name
    and UID), a different node each time. ``pod-gone``: one pod deleted (its node has that much more room).
    ``node``: one node's annotations changed (``MODIFIED``: the node's own fields, its pods the same).
    ``node-label``: one node's label ``bench.spotshift.io/team`` set (no pod reads it). ``none``: nothing changes
    (the idle cycle)."""

    def __init__(self, state: ClusterState, kind: str, sample: dict[str, list[dict[str, Any]]]) -> None:
        self.state, self.kind, self.done = state, kind, 0
        self.items = sample.get("Node" if kind.startswith("node") else "Pod", [])

    def apply(self) -> None:
        """One change (none for ``none``)."""
        if self.kind == "none":
            return
        self.done += 1
        at = (self.done * 7919) % len(self.items)
        old = self.items[at]
        new = self.items[at] = copy.deepcopy(old)
        meta = new["metadata"]
        if self.kind == "pod-gone":
            self.state.apply(PODS, "DELETED", self.items.pop(at))
            return
        if self.kind == "pod":
            meta["name"] = f"{meta['name']}-r{self.done}"
            meta["uid"] = f"{meta.get('uid', '')}-r{self.done}"
            self.state.apply(PODS, "DELETED", old)
            self.state.apply(PODS, "ADDED", new)
        else:
            touched = "labels" if self.kind == "node-label" else "annotations"
            key = "bench.spotshift.io/team" if self.kind == "node-label" else "bench.spotshift.io/touched"
            meta.setdefault(touched, {})[key] = str(self.done)
            self.state.apply(NODES, "MODIFIED", new)


Result = tuple[int, int, int, tuple[str, ...]]
"""One cycle's pending pods, planned nodes, chosen nodes and packing strategies."""


def one_cycle(state: ClusterState, config: Config, budget: float | None, cache: PlanCache | None = None) -> Result:
    """What the run loop does each interval before it touches the API: (pending, planned, chosen, the packing
    strategies that ran).

    The generator leaves a few pods it could not place Pending/Unschedulable: the planner places them first
    (:mod:`rescheduler.plan.waiting`), as the loop does. The figure is the cost of the full path: snapshot, gate,
    plan, decision.
    """
    with state.cond:
        pending = unschedulable_pods(p for p in state.pods.values() if not p.node_name)
    snapshot = state.snapshot()
    g = gate(snapshot, config, now=time.time())
    planned = plan_nodes(snapshot, config, time_budget=budget, clock=time.monotonic, cache=cache, exclude=g.excluded)
    decision = decide(snapshot, planned, config, excluded=g.excluded)
    return len(pending), len(planned.drains), len(decision.drains), planned.plan.summary.strategies_tried


def timed_cycles(
    runs: int, cycle: Callable[[], Result], changes: Changes, profile: cProfile.Profile | None
) -> tuple[list[float], list[float], Result]:
    """CPU and wall seconds of ``runs`` cycles, each after its change, and the last cycle's result."""
    cpu: list[float] = []
    wall: list[float] = []
    result: Result = (0, 0, 0, ())
    for _ in range(runs):
        changes.apply()
        c0, w0 = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        result = cycle()
        if profile is not None:
            profile.disable()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return cpu, wall, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=150_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=float, default=2.0, help="CPU seconds a cycle may take (exit 1 above it)")
    ap.add_argument(
        "--plan-time-budget",
        type=float,
        default=DEFAULT_PLAN_TIME_BUDGET,
        help="the run loop's planner budget (spot-rescheduler run --plan-time-budget); negative: none",
    )
    ap.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="plan every cycle from scratch (no PlanCache kept between cycles, unlike the run loop)",
    )
    ap.add_argument(
        "--change",
        choices=("pod", "pod-gone", "node", "node-label", "none"),
        help="after one untimed cycle, apply this change before each timed one: a pod replaced by its controller "
        "(pod), a pod deleted (pod-gone), a node's annotations changed (node), a node's label no pod reads set "
        "(node-label), nothing (none: the idle cycle); "
        "default: no untimed cycle, "
        "nothing changed",
    )
    ap.add_argument("--profile", metavar="FILE", help="write a cProfile of the timed cycles to FILE")
    ap.add_argument(
        "--automatic-full-collections",
        action="store_true",
        help="leave CPython's full garbage collections to its allocation counts (default: made every ten minutes "
        "after a cycle, as spot-rescheduler run makes them, so none within the timed cycles)",
    )
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    sample: dict[str, list[dict[str, Any]]] = {}
    state = build_state(args.nodes, args.pods, args.seed, sample)
    print(
        f"state: {len(state.nodes):,} nodes, {len(state.pods):,} pods, {len(state.pdbs):,} PDBs "
        f"(built in {time.perf_counter() - t0:.1f} s, not timed)",
        flush=True,
    )
    config = Config()
    cache = PlanCache() if args.cache else None
    budget = args.plan_time_budget if args.plan_time_budget >= 0 else None
    changes = Changes(state, args.change or "none", sample)
    if args.change is not None:
        one_cycle(state, config, budget, cache)
    gc.collect()
    collections = FullCollections(lambda seconds: None)
    if not args.automatic_full_collections:
        collections.start()  # as the run loop starts them once the state is listed
    profile = cProfile.Profile() if args.profile else None
    cpu, wall, result = timed_cycles(args.runs, lambda: one_cycle(state, config, budget, cache), changes, profile)
    if profile is not None:
        profile.dump_stats(args.profile)
    median = statistics.median(cpu)
    print(
        f"unschedulable pods: {result[0]} (planned first); "
        f"plan: {result[1]} nodes can be emptied; decision: {result[2]} pass the cached pre-checks; "
        f"strategies (last cycle): {', '.join(result[3])}"
    )
    print("cycle CPU seconds: " + ", ".join(f"{c:.3f}" for c in cpu) + f" (wall {statistics.median(wall):.3f} s)")
    print(f"median cycle CPU: {median:.3f} s (limit {args.limit:.1f} s)")
    c0 = time.process_time()
    gc.collect()
    print(
        f"a full garbage collection of this state: {time.process_time() - c0:.3f} s CPU "
        f"(spot-rescheduler run makes one every {FULL_COLLECTION_INTERVAL / 60:.0f} minutes)"
    )
    return 0 if median <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
