"""``plan`` in capacity mode names the spot room each node that only lacks room would need; with the mode off
(the default) the output is what it always was, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from tests.builders import ON_DEMAND, SPOT, api_list, node_json, owner, pod_json
from tests.support.cluster_gen import DRAINABLE, generate, write_list
from tests.unit.test_plan_cli import run

ALLOC = {"cpu": "8", "memory": "32Gi", "pods": "110"}


def _snapshot(tmp_path: Path) -> Path:
    rs = [owner("ReplicaSet", "web-1", uid="rs-1")]
    items = [
        node_json("od-7", labels=ON_DEMAND, allocatable=ALLOC),
        node_json("od-8", labels=ON_DEMAND, allocatable=ALLOC),
        node_json("spot-1", labels=SPOT, allocatable={"cpu": "1", "memory": "2Gi", "pods": "110"}),
        pod_json("a", namespace="shop", node_name="od-7", owners=rs, requests={"cpu": "2", "memory": "8Gi"}),
        pod_json("b", namespace="shop", node_name="od-7", owners=rs, requests={"cpu": "1500m", "memory": "4Gi"}),
        pod_json("bare", namespace="shop", node_name="od-8", requests={"cpu": "100m"}),
    ]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(api_list(items)))
    return path


def test_plan_in_capacity_mode_shows_what_each_node_needs_on_spot(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    on = {"SPOTSHIFT_CAPACITY_ENABLED": "true"}
    table = run("plan", "--snapshot", str(snap), env=on)
    assert table.returncode == 0, table.stderr.decode()
    out = table.stdout.decode()
    assert "od-7: needs 3.5 CPU / 12 GiB on spot (2 pod(s))" in out
    assert "od-8: needs" not in out, "a node with a pod that may not move needs nothing"
    data = orjson.loads(run("plan", "--snapshot", str(snap), "--output", "json", env=on).stdout)
    assert data["capacity"] == [
        {
            "node": "od-7",
            "pods": ["shop/a", "shop/b"],
            "cpu_millicores": 3500,
            "memory_bytes": 12 * 2**30,
            "text": "needs 3.5 CPU / 12 GiB on spot",
        }
    ]


def test_with_the_mode_off_the_plan_output_is_unchanged_and_names_no_capacity(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    mode_off = {"SPOTSHIFT_CAPACITY_ENABLED": "false"}
    off = run("plan", "--snapshot", str(snap), env=mode_off)
    assert "Capacity mode" not in off.stdout.decode() and "needs" not in off.stdout.decode()
    assert "capacity" not in orjson.loads(run("plan", "--snapshot", str(snap), "--output", "json", env=mode_off).stdout)
    # The plan itself does not depend on the mode: everything but the added view is the same.
    generated = tmp_path / "generated.json"
    with generated.open("wb") as fh:
        write_list(generate(7, 12, 120, DRAINABLE), fh)
    for path in (snap, generated):
        plain = orjson.loads(run("plan", "--snapshot", str(path), "--output", "json", env=mode_off).stdout)
        with_mode = orjson.loads(run("plan", "--snapshot", str(path), "--output", "json").stdout)
        with_mode.pop("capacity")
        assert plain == with_mode
