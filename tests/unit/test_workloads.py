"""shared.workloads and shared.pdbs: one policy for the extender, the planner and the test support.

The extender reads a pod's raw metadata, the planner a parsed :class:`~shared.model.Pod`; both must name the
same workload and read the same ceiling, and a breach must be the same arithmetic for a new pod (the extender)
and for moved pods (the planner).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from shared.config import Config, parse_config
from shared.model import Pod
from shared.pdbs import PdbIndex
from shared.workloads import (
    BREACH_FLOOR,
    BREACH_PERCENT,
    SpotCeiling,
    SpotShare,
    ceiling_breach,
    spot_allowed,
    spot_ceiling,
    workload_counts,
    workload_key,
    workload_key_of_meta,
)
from tests.support.cluster_gen import FULL, generate


def meta(owner: tuple[str, str] | None, **labels: str) -> dict[str, Any]:
    m: dict[str, Any] = {"name": "p-1", "namespace": "shop", "labels": labels, "uid": "u-1"}
    if owner is not None:
        m["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True, "uid": "o-1"}]
    return m


def parsed(m: dict[str, Any]) -> Pod:
    return Pod.from_api({"metadata": m, "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}})


@pytest.mark.parametrize(
    ("m", "key"),
    [
        pytest.param(meta(("ReplicaSet", "web-5d9c"), **{"pod-template-hash": "5d9c"}), "shop/Deployment/web", id="rs"),
        pytest.param(meta(("ReplicaSet", "web-5d9c")), "shop/ReplicaSet/web-5d9c", id="replicaset-without-hash"),
        pytest.param(
            meta(("ReplicaSet", "web-5d9c"), **{"pod-template-hash": "other"}),
            "shop/ReplicaSet/web-5d9c",
            id="hash-differs",
        ),
        pytest.param(meta(("StatefulSet", "db")), "shop/StatefulSet/db", id="statefulset"),
        pytest.param(meta(None), None, id="bare-pod"),
    ],
)
def test_raw_and_parsed_pods_name_the_same_workload(m: dict[str, Any], key: str | None) -> None:
    assert workload_key_of_meta(m) == key
    assert workload_key(parsed(m)) == key


def test_workload_counts_count_each_pod_under_its_key() -> None:
    pods = [parsed(meta(("StatefulSet", "db"))), parsed(meta(("StatefulSet", "db"))), parsed(meta(None))]
    assert workload_counts(pods) == {"shop/StatefulSet/db": 2}


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param({}, SpotCeiling(100, 0), id="defaults"),
        pytest.param({"spotshift.io/max-spot-percent": "70"}, SpotCeiling(70, 0), id="percent"),
        pytest.param({"spotshift.io/max-spot-percent": " 70% "}, SpotCeiling(70, 0), id="percent-sign"),
        pytest.param({"spotshift.io/max-spot-percent": "170"}, SpotCeiling(100, 0), id="above-100-is-a-typo"),
        pytest.param({"spotshift.io/min-on-demand": "-1"}, SpotCeiling(100, 0), id="negative-is-a-typo"),
        pytest.param({"spotshift.io/min-on-demand": "two"}, SpotCeiling(100, 0), id="words-are-a-typo"),
        pytest.param({"spotshift.io/min-on-demand": "2"}, SpotCeiling(100, 2), id="floor"),
    ],
)
def test_ceiling_annotations_fall_back_to_the_cluster_default(annotations: dict[str, str], want: SpotCeiling) -> None:
    assert spot_ceiling(annotations, Config().spot_ceiling) == want


def test_cluster_defaults_apply_without_annotations() -> None:
    config = parse_config({"spot_ceiling": {"default_max_spot_percent": 60, "default_min_on_demand": 1}})
    assert spot_ceiling({}, config.spot_ceiling) == SpotCeiling(60, 1)


@pytest.mark.parametrize(
    ("ceiling", "split", "want"),
    [
        pytest.param(SpotCeiling(100, 0), (10, 0, 10), None, id="no-limit"),
        pytest.param(SpotCeiling(50, 0), (5, 5, 10), None, id="at-the-ceiling"),
        pytest.param(SpotCeiling(50, 0), (6, 4, 10), BREACH_PERCENT, id="over-the-ceiling"),
        pytest.param(SpotCeiling(100, 2), (8, 2, 10), None, id="at-the-floor"),
        pytest.param(SpotCeiling(100, 2), (9, 1, 10), BREACH_FLOOR, id="under-the-floor"),
        pytest.param(SpotCeiling(0, 3), (1, 1, 2), BREACH_FLOOR, id="floor-asked-first"),
    ],
)
def test_ceiling_breach(ceiling: SpotCeiling, split: tuple[int, int, int], want: str | None) -> None:
    assert ceiling_breach(ceiling, *split) == want


def test_spot_allowed_is_the_breach_of_one_more_new_pod() -> None:
    share = SpotShare(spot=1, on_demand=1, total=2)
    assert not spot_allowed(50, 0, share)  # 2 of 3 on spot
    assert spot_allowed(70, 0, share)  # 2 of 3 is 66%
    assert spot_allowed(100, 1, share)
    assert not spot_allowed(100, 2, share)


def test_pdb_index_finds_what_a_scan_of_every_budget_finds() -> None:
    snap = load_bytes(orjson.dumps({"kind": "List", "items": generate(21, 40, 600, FULL)}))
    pdbs = list(snap.pdbs)
    index = PdbIndex(pdbs)
    pods = [p for info in snap for p in info.pods]
    assert len(pdbs) >= 5 and len(pods) >= 300
    selected = 0
    for p in pods:
        scan = [i for i, b in enumerate(pdbs) if b.selects(p)]
        assert index.indices(p) == scan
        assert index.selecting(p) == [pdbs[i] for i in scan]
        selected += bool(scan)
    assert selected >= 20, "the cluster should have pods that budgets select"
