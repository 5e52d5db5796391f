"""``plan --now TIME``: the disruption controls judged at a given moment, to replay a saved snapshot; a time that
is not RFC 3339 with an offset is a usage error naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from tests.builders import ON_DEMAND, SPOT, api_list, node_json, owner, pod_json
from tests.unit.test_plan_cli import run

ALLOC = {"cpu": "8", "memory": "32Gi", "pods": "110"}
MIN_POD_AGE = {"SPOTSHIFT_DISRUPTION_MIN_POD_AGE": "10m"}


def _snapshot(tmp_path: Path) -> Path:
    """od-1's one pod was created at 08:00 UTC; spot-1 has room for it."""
    web = pod_json(
        "web-1",
        namespace="shop",
        node_name="od-1",
        owners=[owner("ReplicaSet", "web", uid="rs-web")],
        requests={"cpu": "1", "memory": "1Gi"},
    )
    web["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"
    items = [
        node_json("od-1", labels=ON_DEMAND, allocatable=ALLOC),
        node_json("spot-1", labels=SPOT, allocatable=ALLOC),
        web,
    ]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(api_list(items)))
    return path


def _plan(snap: Path, now: str) -> dict:
    done = run("plan", "--snapshot", str(snap), "--output", "json", "--now", now, env=MIN_POD_AGE)
    assert done.returncode == 0, done.stderr.decode()
    return orjson.loads(done.stdout)


def test_a_pod_is_judged_young_or_settled_at_the_time_given(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    early = _plan(snap, "2027-01-15T08:05:00Z")
    assert early["drained"] == [] and early["reasons"]["od-1"]["kind"] == "pod-too-young"
    # The same moment in another offset, then exactly min_pod_age later: old enough (the limit is inclusive).
    assert _plan(snap, "2027-01-15T09:05:00+01:00")["drained"] == []
    assert _plan(snap, "2027-01-15T08:10:00Z")["drained"] == ["od-1"]


def test_a_time_without_an_offset_or_not_rfc_3339_is_a_usage_error(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    for bad, says in (("2027-01-15T08:05:00", "no time zone offset"), ("yesterday", "is not an RFC 3339 time")):
        done = run("plan", "--snapshot", str(snap), "--now", bad)
        assert done.returncode == 2
        err = done.stderr.decode()
        assert "--now" in err and says in err, err
