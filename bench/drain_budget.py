"""Time to empty 40 on-demand nodes once spot capacity is back: one drain at a time against drains in parallel.

    python3 bench/drain_budget.py                 # 40 on-demand nodes, the four policies below
    python3 bench/drain_budget.py --nodes 80 --ready-after 45

The rescheduler's own run loop (:class:`rescheduler.run.Rescheduler`: its gate, plan, decision, drains and
evictions) runs on a simulated clock against an in-memory API server (``tests/support/fake_api.py``, which answers
evictions by the PodDisruptionBudgets as the API server does). The other actors are played each simulated second:

* a ReplicaSet creates a replacement for each evicted pod;
* a scheduler binds each pending pod ``--schedule-after`` seconds after its creation to the spot node with the most
  free CPU (spot has room for every pod here);
* a kubelet makes a bound pod Running at once and Ready ``--ready-after`` seconds after it was bound;
* the disruption controller recomputes every budget's status from the Ready pods (``maxUnavailable: 1``).

The watch is the API server's own change log, applied to the loop's state after every simulated second, so the
run is deterministic. The cluster: ``--nodes`` on-demand nodes, each holding 4 pods; the pods belong to
``--nodes / 2`` Deployments of 8 replicas spread over 8 nodes, each behind a budget allowing one disruption, so
drains of different nodes compete for budgets as they do in real clusters. Printed per policy: the simulated
minutes until every on-demand node is drained and its ratio to the first policy (one at a time, no delay), the
most nodes draining at once, evictions, drains failed, and the simulated seconds in which a budget's
``currentHealthy`` was below ``desiredHealthy`` (must be 0; the command exits 1 otherwise, or when a policy does not
empty every node within ``--limit``).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rescheduler.cluster.watch_cache import KINDS
from rescheduler.plan.cycle import gate
from rescheduler.plan.drain_marks import STATE_ANNOTATION
from rescheduler.run import Rescheduler, RunOptions
from shared.config import Config, parse_config
from shared.switches import CURRENT
from tests.support.fake_api import FakeApiServer, namespace, node, pdb, pod

STORE = {"poddisruptionbudgets": "pdbs"}
"""The in-memory server's name of a kind where it differs from the API's."""

EPOCH = 1_800_000_000.0
"""The simulated wall clock starts here (Unix seconds)."""

POLICIES: dict[str, dict[str, Any]] = {
    "one at a time, node_drain_delay 0": {"rescheduler": {"node_drain_delay": "0s"}},
    "one at a time, node_drain_delay 10m (defaults)": {},
    'budget {nodes: "20%"}, 2 starts per cycle': {
        "rescheduler": {"node_drain_delay": "0s", "max_nodes_per_cycle": 2},
        "disruption": {"budgets": [{"nodes": "20%"}]},
    },
    'budget {nodes: "50%"}, 4 starts per cycle': {
        "rescheduler": {"node_drain_delay": "0s", "max_nodes_per_cycle": 4},
        "disruption": {"budgets": [{"nodes": "50%"}]},
    },
}


@dataclass
class Figures:
    seconds: float
    most_draining: int
    evictions: int
    failed: int
    floor_breaches: int
    done: bool


class World:
    """The in-memory API server and the actors around the rescheduler (module docstring)."""

    def __init__(self, nodes: int, schedule_after: float, ready_after: float) -> None:
        self.server = FakeApiServer()
        self.schedule_after, self.ready_after = schedule_after, ready_after
        self.now = 0.0
        self.born: dict[str, float] = {}
        """Pending pod key → when it was created; bound pod key → when it was bound."""
        self.applied = {kind.name: 0 for kind in KINDS}
        """Per kind, how many entries of the API server's change log the loop's state has seen."""
        self.on_demand = [f"od-{i:03d}" for i in range(nodes)]
        self._build(nodes)
        self.server.on_evict = self._replace

    def _build(self, nodes: int) -> None:
        s = self.server
        for ns in ("default", "spotshift"):
            s.put("namespaces", namespace(ns))
        for i in range(max(1, nodes // 8)):
            s.put("nodes", node(f"spot-{i:03d}", spot=True, cpu="32"))
        for name in self.on_demand:
            s.put("nodes", node(name, cpu="4"))
        for w in range(nodes // 2):
            app = f"app-{w:03d}"
            for r in range(8):
                where = self.on_demand[(w * 8 + r) // 4 % nodes]
                s.put("pods", pod(f"{app}-{r}", where, app=app, owner=f"rs-{app}", cpu="500m"))
            s.put("pdbs", pdb(app, app, allowed=1, healthy=8, desired=7))

    def _replace(self, evicted: dict[str, Any]) -> None:
        meta = evicted["metadata"]
        name = f"{meta['name'].split('~')[0]}~{int(self.now * 10)}"
        new = pod(name, app=meta["labels"]["app"], cpu="500m", phase="Pending", ready=False)
        new["metadata"]["ownerReferences"] = meta["ownerReferences"]
        new["status"] = {"phase": "Pending"}
        self.server.put("pods", new)
        self.born[f"default/{name}"] = self.now

    def tick(self) -> None:
        """One simulated second of the scheduler, the kubelets and the disruption controller."""
        s = self.server
        for key, obj in list(s.store["pods"].items()):
            since = self.born.get(key)
            if since is None:
                continue
            if not obj["spec"].get("nodeName") and self.now - since >= self.schedule_after:
                obj["spec"]["nodeName"] = self._roomiest_spot()
                obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
                s.put("pods", obj)
                self.born[key] = self.now
            elif obj["spec"].get("nodeName") and self.now - since >= self.ready_after:
                obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                s.put("pods", obj)
                del self.born[key]
        self._budgets()

    def _roomiest_spot(self) -> str:
        used: dict[str, int] = {}
        for obj in self.server.store["pods"].values():
            where = obj["spec"].get("nodeName", "")
            used[where] = used.get(where, 0) + 500
        spots = [n for n in self.server.store["nodes"] if n.startswith("spot-")]
        return max(spots, key=lambda n: (32_000 - used.get(n, 0), n))

    def _budgets(self) -> None:
        ready: dict[str, int] = {}
        for obj in self.server.store["pods"].values():
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in obj["status"].get("conditions", [])):
                app = obj["metadata"]["labels"]["app"]
                ready[app] = ready.get(app, 0) + 1
        for obj in list(self.server.store["pdbs"].values()):
            healthy = ready.get(obj["metadata"]["name"], 0)
            status = obj["status"]
            if status["currentHealthy"] != healthy or status["disruptionsAllowed"] != max(0, healthy - 7):
                status.update(currentHealthy=healthy, disruptionsAllowed=max(0, healthy - 7))
                self.server.put("pdbs", obj)

    def breaches(self) -> int:
        return sum(1 for obj in self.server.store["pdbs"].values() if obj["status"]["currentHealthy"] < 7)

    def sync(self, r: Rescheduler) -> None:
        """Apply the API server's changes since the last sync to the loop's state, as its watches would."""
        for kind in KINDS:
            log = self.server.log[STORE.get(kind.name, kind.name)]
            for _, etype, obj in log[self.applied[kind.name] :]:
                r.state.apply(kind, etype, obj)
            self.applied[kind.name] = len(log)
            r.state.synced.add(kind.name)

    def draining(self) -> int:
        return sum(
            1
            for name in self.on_demand
            if (self.server.store["nodes"][name]["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
            == "draining"
        )

    def all_drained(self) -> bool:
        return all(
            (self.server.store["nodes"][name]["metadata"].get("annotations") or {}).get(STATE_ANNOTATION) == "drained"
            for name in self.on_demand
        )


def config_of(overrides: dict[str, Any]) -> Config:
    base = parse_config({**overrides, "rescheduler": {**overrides.get("rescheduler", {})}})
    return replace(base, rescheduler=replace(base.rescheduler, leader_elect=False))


def _next_second(r: Rescheduler, world: World, now: float) -> float:
    """The next simulated second worth a pass: the next one while anything moves; when nothing does, the next
    cycle, or the moment a finished drain's place frees if no drain may start before then (the cycles skipped would
    plan and start nothing)."""
    if r.drains or world.born:
        return now + 1.0
    wake = max(now + 1.0, r.next_cycle)
    g = gate(r.state.snapshot(), r.config, now=EPOCH + now, in_flight=0, cooling=r.cooling())
    if g.starts == 0 and r.finished:
        wake = max(wake, min(r.finished) + r.config.rescheduler.node_drain_delay)
    return wake


def simulate(overrides: dict[str, Any], nodes: int, schedule_after: float, ready_after: float, limit: float) -> Figures:
    world = World(nodes, schedule_after, ready_after)
    clock = [0.0]
    r = Rescheduler(
        world.server,
        config_of(overrides),
        RunOptions(identity="bench"),
        stop=threading.Event(),
        clock=lambda: clock[0],
        wall=lambda: EPOCH + clock[0],
    )
    r.switches = CURRENT
    world.sync(r)
    most = breaches = 0
    while clock[0] < limit and not world.all_drained():
        if clock[0] >= r.next_cycle:
            r.step_cycle()
        r.advance_drains()
        most = max(most, world.draining())
        world.now = clock[0]
        world.tick()
        breaches += world.breaches()
        world.sync(r)
        clock[0] = _next_second(r, world, clock[0])
    failed = sum(1 for res in r.results if res.outcome == "failed")
    return Figures(clock[0], most, len(world.server.evictions), failed, breaches, world.all_drained())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40, help="on-demand nodes to empty (a multiple of 8)")
    ap.add_argument("--schedule-after", type=float, default=2.0, help="seconds from a pod's creation to its binding")
    ap.add_argument("--ready-after", type=float, default=20.0, help="seconds from binding to Ready")
    ap.add_argument("--limit", type=float, default=24 * 3600.0, help="simulated seconds before giving up")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # the drains' own log lines; the table says what happened
    if args.nodes % 8:
        ap.error("--nodes must be a multiple of 8")
    print(
        f"{args.nodes} on-demand nodes, 4 pods each ({args.nodes // 2} Deployments of 8 behind budgets allowing 1), "
        f"pods scheduled {args.schedule_after:g}s after creation and Ready {args.ready_after:g}s after binding"
    )
    print(f"{'policy':<50} {'minutes':>8} {'ratio':>6} {'at once':>7} {'evictions':>9} {'failed':>6} {'breaches':>8}")
    first: float | None = None
    ok = True
    for name, overrides in POLICIES.items():
        f = simulate(overrides, args.nodes, args.schedule_after, args.ready_after, args.limit)
        base = first if first is not None else f.seconds
        first = base if first is not None else f.seconds
        minutes = f"{f.seconds / 60:.1f}" if f.done else f">{args.limit / 60:.0f}"
        ratio = f.seconds / base if base else math.nan
        print(
            f"{name:<50} {minutes:>8} {ratio:>6.2f} {f.most_draining:>7} {f.evictions:>9} {f.failed:>6} "
            f"{f.floor_breaches:>8}"
        )
        ok = ok and f.done and f.floor_breaches == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
