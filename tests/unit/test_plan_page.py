"""``spot-rescheduler plan --output html``: the page's data, its self-containment, and the page as Chromium renders it.

The rendering test runs Debian's headless ``chromium`` (``tests/run.sh`` installs it) with ``--dump-dom``: the
node cards exist only once the page's own script has drawn them from the embedded JSON, so finding the drained
node marked ``data-drained="true"`` proves the page renders, not just that the file was written. Without
chromium the test fails: it is part of what the project promises.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.output.page import json_for_script, page_data, render_html
from rescheduler.plan.planner import plan
from rescheduler.plan.stay_reasons import Kind
from shared.config import Config, parse_config
from shared.movable import BLOCK_NOT_SAFE_TO_EVICT
from tests.builders import ON_DEMAND, SPOT, api_list, node_json, owner, pod_json

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def node(name: str, labels: dict[str, str], cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **labels}
    return node_json(name, labels=labels, allocatable={"cpu": cpu, "memory": memory, "pods": "110"})


def pod(name: str, on: str, cpu: str, memory: str, **annotations: str) -> dict[str, Any]:
    """A ready pod of the ReplicaSet ``<app>-rs`` in namespace ``shop``, where ``<app>`` is ``name`` less its
    last ``-`` part."""
    app = name.rsplit("-", 1)[0]
    return pod_json(
        name,
        namespace="shop",
        uid=f"uid-{name}",
        labels={"app": app},
        annotations=annotations,
        owners=[owner("ReplicaSet", f"{app}-rs", uid=f"rs-{app}")],
        node_name=on,
        requests={"cpu": cpu, "memory": memory},
        conditions=[{"type": "Ready", "status": "True"}],
    )


def cluster() -> bytes:
    """od-1 drains onto spot-1; od-2 stays (a pod that must not be evicted); cp-1 is neither class."""
    items = [
        node("od-1", ON_DEMAND),
        node("od-2", ON_DEMAND),
        node("spot-1", SPOT),
        node("cp-1", {"node-role.kubernetes.io/control-plane": ""}),
        pod("web-1", "od-1", "500m", "512Mi"),
        pod("web-2", "od-1", "250m", "256Mi"),
        pod("db-1", "od-2", "1", "2Gi", **{"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
        pod("cache-1", "spot-1", "1", "1Gi"),
    ]
    return orjson.dumps(api_list(items))


@pytest.fixture
def planned() -> tuple[Any, Any, Config]:
    config = Config()
    snapshot = load_bytes(cluster())
    return snapshot, plan(snapshot, config), config


def test_page_data_draws_every_spot_and_on_demand_node_before_and_after(planned: tuple[Any, Any, Config]) -> None:
    snapshot, result, config = planned
    data = page_data(snapshot, result, config, source="test")
    nodes = {n["name"]: n for n in data["nodes"]}
    assert set(nodes) == {"od-1", "od-2", "spot-1"} and data["other_nodes"] == 1
    assert nodes["od-1"]["state"] == "drained"
    assert {p["pod"] for p in nodes["od-1"]["leaving"]} == {"shop/web-1", "shop/web-2"}
    assert all(p["to"] == "spot-1" for p in nodes["od-1"]["leaving"])
    assert nodes["od-1"]["staying"] == {"cpu": 0, "memory": 0}
    assert nodes["od-2"]["state"] == "stays" and "safe-to-evict" in nodes["od-2"]["reason"]
    assert nodes["od-2"]["staying"] == {"cpu": 1000, "memory": 2 * 2**30}
    assert nodes["spot-1"]["state"] == "target"
    assert {p["pod"] for p in nodes["spot-1"]["arriving"]} == {"shop/web-1", "shop/web-2"}
    assert {p["cpu"] for p in nodes["spot-1"]["arriving"]} == {500, 250}
    assert nodes["spot-1"]["staying"] == {"cpu": 1000, "memory": 2**30}
    assert nodes["spot-1"]["allocatable"] == {"cpu": 4000, "memory": 8 * 2**30}
    assert nodes["od-1"]["worth"] == result.worth["od-1"].to_json() and nodes["od-1"]["worth"]["verdict"] == "worth"
    assert nodes["od-2"]["worth"] is None and nodes["spot-1"]["worth"] is None


def test_page_data_groups_the_nodes_that_stay_by_the_kind_of_their_reason(planned: tuple[Any, Any, Config]) -> None:
    snapshot, result, config = planned
    data = page_data(snapshot, result, config)
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["od-2"]["reason_kind"] == Kind.NOT_MOVABLE.value
    assert nodes["od-1"]["reason_kind"] == "" and nodes["spot-1"]["reason_kind"] == ""
    assert data["reasons"] == [
        {"kind": Kind.NOT_MOVABLE.value, "reason": BLOCK_NOT_SAFE_TO_EVICT, "nodes": ["od-2"]},
    ]
    # The same groups as the CLI's table and the JSON summary.
    assert [(g["reason"], len(g["nodes"])) for g in data["reasons"]] == [
        (r["reason"], r["nodes"]) for r in result.summary.top_reasons
    ]


def test_a_spot_node_younger_than_min_target_age_is_drawn_as_no_target_with_its_reason() -> None:
    now = 1_800_000_000.0
    items = orjson.loads(cluster())["items"]
    for item in items:
        if item["metadata"]["name"] == "spot-1":
            item["metadata"]["creationTimestamp"] = "2027-01-15T07:59:00Z"  # one minute before ``now``
    config = parse_config({"disruption": {"min_target_age": "5m"}})
    snapshot = load_bytes(orjson.dumps(api_list(items)))
    result = plan(snapshot, config, now=now)
    assert result.drained == () and result.summary.spot_too_young == 1
    spot = {n["name"]: n for n in page_data(snapshot, result, config, now=now)["nodes"]}["spot-1"]
    assert spot["state"] == "not-target" and "min_target_age" in spot["reason"]
    # Ten minutes later the same node is a target, as it is in a plan made without a time.
    later = {n["name"]: n for n in page_data(snapshot, result, config, now=now + 600)["nodes"]}["spot-1"]
    assert later["state"] == "target"
    assert {n["name"]: n for n in page_data(snapshot, result, config)["nodes"]}["spot-1"]["state"] == "target"


def test_embedded_json_cannot_close_its_script_element() -> None:
    text = json_for_script({"reason": "</script><script>alert(1)</script> & more"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert orjson.loads(text) == {"reason": "</script><script>alert(1)</script> & more"}


def test_the_page_is_self_contained(planned: tuple[Any, Any, Config]) -> None:
    page = render_html(*planned)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=|<link|@import|url\(|https?://""", page), "the page must load nothing"
    assert 'id="plan-data"' in page


def test_the_cli_writes_the_page_to_the_file_named_after_output_html(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_bytes(cluster())
    out = tmp_path / "plan.html"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_")}
    proc = subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", "plan", "--snapshot", str(snap), "--output", "html", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"wrote html plan to {out}"
    assert "od-1" in out.read_text()


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium is not installed: `bash tests/run.sh` installs Debian's chromium package", pytrace=False)
    return found


def render_in_chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_chromium_renders_the_page_and_shows_the_drained_nodes(
    planned: tuple[Any, Any, Config], tmp_path: Path
) -> None:
    page = tmp_path / "plan.html"
    page.write_text(render_html(*planned, source="unit test"))
    proc = render_in_chromium(page, tmp_path / "profile", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'data-rendered="true"' in dom, "the page's script did not run to the end"
    cards = {m[1]: m[0] for m in re.findall(r'(<article class="node"[^>]*data-node="([^"]+)"[^>]*>)', dom)}
    assert set(cards) == {"od-1", "od-2", "spot-1"}, cards
    assert 'data-drained="true"' in cards["od-1"] and 'data-state="drained"' in cards["od-1"]
    assert 'data-drained="false"' in cards["od-2"] and 'data-state="stays"' in cards["od-2"]
    assert 'data-drained="false"' in cards["spot-1"] and 'data-state="target"' in cards["spot-1"]
    assert re.search(r'data-reason="true">[^<]*safe-to-evict', dom), "the undrainable node says why"
    assert 'data-reason-kind="pod-not-movable"' in cards["od-2"]
    row = re.search(r'<tr data-kind="pod-not-movable"><td>([^<]*)</td><td>1</td><td class="muted">od-2</td></tr>', dom)
    assert row is not None and row[1] == BLOCK_NOT_SAFE_TO_EVICT, "the why-nodes-stay table groups by kind"
    assert 'data-pod="shop/web-1"' in dom and "shop/web-1 → spot-1" in dom, "moved pods are listed"
    assert '<div class="seg out"' in dom and '<div class="seg in"' in dom, "moved pods are drawn in the bins"
    assert re.search(r'class="worth" data-verdict="worth">saves [0-9.]+ vCPU-h, costs [0-9.]+ vCPU-h: worth<', dom)
