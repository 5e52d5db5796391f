"""The portfolio's passes on several processes (:mod:`rescheduler.parallel.packing`): the same results, the
parent's own pod objects in them, the simulation left as it was, and a failed child's passes run again by
the parent. Real forked processes, no stand-ins."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence

import orjson
import pytest

from rescheduler.cli import main
from rescheduler.decode.reader import load_bytes
from rescheduler.parallel import packing
from rescheduler.plan.candidates import Candidates, PlanCache
from rescheduler.plan.placement import Planner, Result, run
from rescheduler.plan.planner import plan
from rescheduler.plan.simulation import Simulation
from rescheduler.plan.strategies import LARGE_PORTFOLIO, PORTFOLIO, Strategy
from shared.config import Config
from shared.snapshot import ClusterSnapshot
from tests.support.cluster_gen import FULL, PDB_HEAVY, generate

pytestmark = pytest.mark.skipif(not packing.can_fork(), reason="the platform cannot fork")


def _snapshot(seed: int, nodes: int, features: object = PDB_HEAVY) -> ClusterSnapshot:
    items = generate(seed, nodes, nodes * 14, features)  # type: ignore[arg-type]
    return load_bytes(orjson.dumps({"kind": "List", "items": items}))


def _state(snap: ClusterSnapshot) -> dict[str, list[str]]:
    """Which pods each node holds."""
    return {info.name: sorted(p.key for p in info.pods) for info in snap}


def _sig(r: Result) -> tuple[object, ...]:
    return (r.strategy, r.drained, [(id(m.pod), m.source, m.target) for m in r.moves], r.undrainable)


@pytest.mark.parametrize(("seed", "features"), [(11, PDB_HEAVY), (12, FULL), (13, PDB_HEAVY)])
@pytest.mark.parametrize("workers", [2, 3, 8])
def test_passes_on_several_processes_give_the_results_of_one_process(seed: int, features: object, workers: int) -> None:
    snap = _snapshot(seed, 60, features)
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    try:
        p = Planner(sim, Candidates(sim, cache), search_steps=0)
        start = _state(snap)
        alone = [run(p, s) for s in PORTFOLIO]
        together = packing.run_all(p, PORTFOLIO, workers)
        assert _state(snap) == start  # the parent's passes left the simulation as they found it
    finally:
        sim.restore()
    # The same drains, moves (of the parent's own pod objects: ids compared) and reasons, in strategy order.
    assert [_sig(r) for r in together] == [_sig(r) for r in alone]
    assert sum(len(r.moves) for r in alone) > 0


def test_a_pass_that_does_not_restore_leaves_its_drained_nodes_empty_of_movable_pods() -> None:
    snap = _snapshot(14, 60)
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    p = Planner(sim, Candidates(sim, cache), search_steps=0)
    start = _state(snap)
    kept = run(p, PORTFOLIO[0])
    assert _state(snap) == start
    left = run(p, PORTFOLIO[0], restore=False)
    assert left.drained == kept.drained and left.drained
    after = _state(snap)
    moved = {m.pod.key for m in left.moves}
    for name in left.drained:
        assert not moved & set(after[name])
    for m in left.moves:
        assert m.pod.key in after[m.target]


def test_a_child_that_fails_costs_only_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child whose pass raises exits non-zero: the parent runs that pass itself."""
    snap = _snapshot(15, 60)
    cache = PlanCache()
    sim = Simulation(snap, Config(), verify=False, topology_memo=cache.topology)
    parent = os.getpid()
    real_run = packing.run

    def run_failing_in_children(*args: object, **kwargs: object) -> Result:
        if os.getpid() != parent:
            raise RuntimeError("a pass failed in a child")
        return real_run(*args, **kwargs)  # type: ignore[arg-type]

    try:
        p = Planner(sim, Candidates(sim, cache), search_steps=0)
        alone = [run(p, s) for s in LARGE_PORTFOLIO]
        monkeypatch.setattr(packing, "run", run_failing_in_children)
        together = packing.run_all(p, LARGE_PORTFOLIO, 3)
    finally:
        sim.restore()
    assert [_sig(r) for r in together] == [_sig(r) for r in alone]


@pytest.mark.parametrize(
    ("status", "data"),
    [
        (0, b"not a pickle"),
        (3, pickle.dumps([])),
        (0, pickle.dumps({"not": "a list"})),
    ],
)
def test_an_answer_that_is_not_a_list_of_results_or_a_failed_exit_reads_as_a_failure(status: int, data: bytes) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        os.write(w, data)
        os._exit(status)
    os.close(w)
    assert packing._collect((pid, r)) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_default_workers_follows_the_cpus_this_process_may_use() -> None:
    """One process per large-portfolio strategy with more than one usable CPU, one with a single CPU (as a
    container's cpuset leaves it), whatever the machine has."""
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert packing.default_workers() == 1
        assert packing.passes(packing.default_workers()) is None
        if len(allowed) > 1:
            os.sched_setaffinity(0, set(sorted(allowed)[:2]))
            assert packing.default_workers() == len(LARGE_PORTFOLIO)
    finally:
        os.sched_setaffinity(0, allowed)


def test_plan_on_a_large_cluster_is_the_same_with_workers() -> None:
    """Above ``PARALLEL_MIN_CANDIDATES`` drainable candidates ``plan`` uses the passes it is handed; the plan is
    the one a single process makes."""
    snap = _snapshot(16, 1500)
    calls: list[int] = []

    def counting(p: Planner, strategies: Sequence[Strategy]) -> list[Result]:
        calls.append(len(strategies))
        return packing.run_all(p, strategies, 3)

    assert packing.passes(1) is None
    one = plan(snap, Config())
    three = plan(snap, Config(), passes=counting)
    assert calls == [len(LARGE_PORTFOLIO)]
    assert one.summary.strategies_tried == tuple(s.name for s in LARGE_PORTFOLIO)
    assert orjson.dumps(three.to_json()) == orjson.dumps(one.to_json())
    assert orjson.dumps(plan(snap, Config(), passes=packing.passes(3)).to_json()) == orjson.dumps(one.to_json())
    # With a time budget the passes run one after another (the budget judges them in turn); on a small cluster
    # too (they take milliseconds).
    plan(snap, Config(), passes=counting, time_budget=60.0, clock=lambda: 0.0)
    plan(_snapshot(17, 60), Config(), passes=counting)
    assert calls == [len(LARGE_PORTFOLIO)]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_plan_refuses_a_workers_value_that_is_not_a_positive_whole_number(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["plan", "--snapshot", "-", "--workers", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and value in err
