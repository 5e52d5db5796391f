"""The planner's plans on fixed generated clusters, compared byte for byte with recorded ones.

Why: the planner is a portfolio of heuristics whose result depends on many small orderings (ties, the
order strategies run in, which node the local search holds back). A change meant to move code around
must not change a single move; this test says so in bytes. Each golden file under
``tests/unit/golden/<rule>/``, one folder per PodDisruptionBudget rule (``rescheduler.pdb_rule``), holds the
generator's parameters, a digest of the generated items (so a change of the generator is told
apart from a change of the planner), the JSON of :func:`rescheduler.plan.planner.plan` with the default
strategies, and the nodes the run loop's planner (:func:`rescheduler.plan.cycle.plan_nodes`) empties, with a
time budget far larger than any plan here takes, so the budget never cuts a strategy and the result is
deterministic.

Regenerate (only when a plan is meant to change, and say why in the commit):
``python -m tests.unit.test_plan_golden [RULE...]`` (default: every rule).
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.cycle import plan_nodes
from rescheduler.plan.planner import plan
from shared.config import PDB_ALL_AT_ONCE, PDB_RATE_LIMIT, Config
from shared.snapshot import ClusterSnapshot
from tests.support import cluster_gen

GOLDEN = Path(__file__).resolve().parent / "golden"

# (seed, nodes, pods, profile name in the generator): two of each profile, 30-60 nodes.
CASES = [
    (101, 30, 420, "FULL"),
    (102, 50, 600, "FULL"),
    (103, 40, 480, "PACKING_ONLY"),
    (104, 36, 540, "DRAINABLE"),
    (105, 60, 720, "DRAINABLE"),
    (106, 45, 540, "MILP_PROFILE"),
    (107, 32, 448, "MILP_PROFILE"),
    (108, 40, 520, "MILP_PACKING"),
    (109, 55, 660, "MILP_PACKING"),
]

RULES = (PDB_RATE_LIMIT, PDB_ALL_AT_ONCE)
"""The rules whose plans are pinned: ``rate-limit`` (the default) and ``all-at-once``, whose goldens were
recorded when it was the only rule and must keep matching byte for byte."""

RUN_LOOP_BUDGET = 3600.0
"""Seconds: the run loop's planner with a budget it never reaches (the real one, 0.5 s, depends on load)."""


def _name(seed: int, nodes: int, pods: int, profile: str) -> str:
    return f"{profile.lower()}-{nodes}-nodes-{pods}-pods-seed-{seed}"


def _items(seed: int, nodes: int, pods: int, profile: str) -> list[dict[str, Any]]:
    return cluster_gen.generate(seed, nodes, pods, getattr(cluster_gen, profile))


def _snapshot(items: list[dict[str, Any]]) -> ClusterSnapshot:
    return load_bytes(orjson.dumps({"kind": "List", "items": items}))


def _config(rule: str) -> Config:
    base = Config()
    return replace(base, rescheduler=replace(base.rescheduler, pdb_rule=rule))


def _record(rule: str, seed: int, nodes: int, pods: int, profile: str) -> dict[str, Any]:
    items = _items(seed, nodes, pods, profile)
    config = _config(rule)
    result = plan(_snapshot(items), config)
    loop = plan_nodes(_snapshot(items), config, time_budget=RUN_LOOP_BUDGET, clock=time.monotonic)
    return {
        "generator": {
            "seed": seed,
            "nodes": nodes,
            "pods": pods,
            "profile": profile,
            "sha256": hashlib.sha256(orjson.dumps(items)).hexdigest(),
        },
        "plan": {k: v for k, v in result.to_json().items() if k not in UNPINNED},
        "run_loop": [{"node": nm.node, "pods": list(nm.pods), "targets": dict(nm.targets)} for nm in loop.drains],
    }


UNPINNED = ("worth",)
"""Keys of the plan's JSON not recorded: each drainable node's saving and cost (``worth``) follow the defaults of
the ``worth`` section, and no node here is rejected as not worth it (``tests/unit/test_plan_worth.py`` plans these
clusters with it set to reject some)."""

NEW_KEYS = ("reasons", "pacing")
"""Keys the plan's JSON gained after the ``all-at-once`` goldens were recorded, dropped before comparing: each
node's reason as a record (``kind``, ``pod``, ``detail``), its sentence still compared in ``undrainable``;
and the budgets pacing each drain, empty under that rule (checked apart)."""
NEW_TOP_REASON_KEYS = ("kind",)
"""Keys each ``summary.top_reasons`` entry gained since: the kind of reason the group counts."""


def _comparable(plan_json: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in plan_json.items() if k not in NEW_KEYS}
    summary = dict(out["summary"])
    summary["top_reasons"] = [
        {k: v for k, v in r.items() if k not in NEW_TOP_REASON_KEYS} for r in summary["top_reasons"]
    ]
    out["summary"] = summary
    return out


def _dump(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


def _path(rule: str, seed: int, nodes: int, pods: int, profile: str) -> Path:
    return GOLDEN / rule / f"{_name(seed, nodes, pods, profile)}.json"


PARAMS = [(rule, *case) for rule in RULES for case in CASES]


@pytest.mark.parametrize(
    ("rule", "seed", "nodes", "pods", "profile"), PARAMS, ids=[f"{p[0]}-{_name(*p[1:])}" for p in PARAMS]
)
def test_plan_is_byte_identical_to_the_recorded_one(rule: str, seed: int, nodes: int, pods: int, profile: str) -> None:
    golden = orjson.loads(_path(rule, seed, nodes, pods, profile).read_bytes())
    now = _record(rule, seed, nodes, pods, profile)
    assert now["generator"] == golden["generator"], "the cluster generator changed: these goldens no longer apply"
    if rule == PDB_ALL_AT_ONCE:
        assert now["plan"]["pacing"] == {}, "under all-at-once every eviction is allowed at once: nothing paces"
        assert _dump(_comparable(now["plan"])) == _dump(_comparable(golden["plan"]))
    else:
        assert _dump(now["plan"]) == _dump(golden["plan"])
    assert _dump(now["run_loop"]) == _dump(golden["run_loop"])


@pytest.mark.parametrize("rule", RULES)
def test_goldens_drain_nodes_and_keep_some(rule: str) -> None:
    # Guards the comparison above against recording plans that say nothing (nothing drained, nothing kept). The
    # clusters generated with pods waiting for a node drain little: those pods are planned first and hold the
    # on-demand nodes they could use once emptied.
    drained = kept = 0
    for case in CASES:
        golden = orjson.loads(_path(rule, *case).read_bytes())
        drained += len(golden["plan"]["drained"])
        kept += len(golden["plan"]["undrainable"])
    assert drained >= 15
    assert kept >= 20


def regenerate(rules: tuple[str, ...] = RULES) -> None:
    for rule in rules:
        (GOLDEN / rule).mkdir(parents=True, exist_ok=True)
        for case in CASES:
            path = _path(rule, *case)
            path.write_bytes(_dump(_record(rule, *case)))
            print(path, file=sys.stderr)


if __name__ == "__main__":
    regenerate(tuple(sys.argv[1:]) or RULES)
