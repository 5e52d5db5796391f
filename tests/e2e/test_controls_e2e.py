"""The operator's controls (``disruption`` settings) under ``run`` on the real control plane.

* A drain window that is closed holds a drainable node: nothing touches it over several cycles, the node gets
  one ``SpotshiftDrainHeldBack`` Event, the gauge counts it under ``drain-window``, and ``plan`` says
  "outside drain window until ...".
* A running Job pod holds its node under the default (``jobs: block``); under ``jobs: wait`` the node is marked,
  nothing is evicted while the Job runs, and once the Job pod is Succeeded (set through the API, as a kubelet
  would when the container exits; the harness's kubelet stand-in runs no containers) the rest of the node is
  moved to spot and the node is drained.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.controlplane import wait_for
from tests.support.rescheduler_world import ROOT, NodeWatcher, Rescheduler, World, command_env, pod_nodes

pytestmark = pytest.mark.e2e


def closed_window() -> dict[str, Any]:
    """A one-hour window twelve hours from now (UTC): closed for the whole test."""
    hour = (datetime.datetime.now(datetime.UTC).hour + 12) % 24
    return {"budgets": [{"nodes": "1", "schedule": f"0 {hour} * * *", "duration": "1h"}], "time_zone": "UTC"}


def cycles(r: Rescheduler, n: int) -> None:
    """Wait until the loop has planned ``n`` times (each housekeeping cycle logs one ``plan:`` line)."""
    wait_for(lambda: len(r.logged("plan:")) >= n, timeout=60, what=f"{n} housekeeping cycles")


def held_events(world: World, node: str) -> list[dict[str, Any]]:
    return [e for e in world.events("SpotshiftDrainHeldBack") if e["involvedObject"]["name"] == node]


def test_a_closed_drain_window_holds_a_drainable_node(world: World, start: Callable[..., Rescheduler]) -> None:
    od = world.on_demand()
    world.deployment("web", 2)
    web = world.ready("web")
    assert set(pod_nodes(web).values()) == {od}
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()
    config = world.config(disruption=closed_window())

    r = start(config)
    wait_for(lambda: held_events(world, od), timeout=60, what="the held-back Event on the on-demand node")
    cycles(r, 4)

    assert nodes.close() == {}, "the node was tainted or cordoned outside the drain window"
    assert {p["metadata"]["uid"] for p in world.pods("web")} == {p["metadata"]["uid"] for p in web}
    (event,) = held_events(world, od)
    assert event["message"].startswith("Held back by drain-window: outside drain window until ")
    assert event["count"] == 1, "one Event per change, not one per cycle"
    assert r.metric("spotshift_rescheduler_nodes_held_back", '{control="drain-window"}') == 1
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0

    env = command_env()
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "plan",
            f"--kubeconfig={world.plane.kubeconfig}",
            f"--config={config}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "Nothing is drained now: outside drain window until " in shown.stdout
    assert f"{od}: outside drain window until " in shown.stdout


def running(world: World, app: str) -> list[dict[str, Any]]:
    return [p for p in world.pods(app) if (p.get("status") or {}).get("phase") == "Running"]


def test_a_running_job_pod_holds_its_node_by_default_and_is_waited_for_under_wait(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("web", 1)
    web = world.ready("web")
    world.job("report")
    (report,) = wait_for(lambda: running(world, "report"), timeout=60, what="the Job's pod to run")
    assert report["spec"]["nodeName"] == od and set(pod_nodes(web).values()) == {od}
    spot = world.spot()

    # The default: the Job pod keeps its node.
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()
    first = start(world.config(), name="block")
    wait_for(lambda: held_events(world, od), timeout=60, what="the held-back Event on the on-demand node")
    cycles(first, 3)
    assert held_events(world, od)[0]["message"].startswith("Held back by job: pod ")
    assert first.metric("spotshift_rescheduler_nodes_held_back", '{control="job"}') == 1
    first.close()
    assert nodes.close() == {}, "the node was touched while a Job pod ran on it"

    # jobs: wait: the node is marked, nothing is evicted until the Job pod has finished.
    second = start(world.config(disruption={"jobs": "wait", "job_timeout": "5m"}), name="wait")
    wait_for(lambda: world.events("SpotshiftWaitingForJobs"), timeout=60, what="the drain to start waiting for the Job")
    assert world.our_taints(od), "the node is marked while the Job finishes"
    assert {p["metadata"]["uid"] for p in world.pods("web")} == {web[0]["metadata"]["uid"]}, "nothing evicted yet"
    assert second.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') in (None, 0)

    name = report["metadata"]["name"]
    world.plane.api.patch(
        f"/api/v1/namespaces/{world.ns}/pods/{name}/status", {"status": {"phase": "Succeeded"}}, "merge"
    )
    second.wait_logged("drained node", timeout=180)

    moved = world.pods("web")
    assert len(moved) == 1 and moved[0]["spec"]["nodeName"] == spot, pod_nodes(moved)
    assert second.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') == 1
    finished = world.plane.api.get(f"/api/v1/namespaces/{world.ns}/pods/{name}")
    assert finished["status"]["phase"] == "Succeeded" and not finished["metadata"].get("deletionTimestamp")
