"""spot-rescheduler on a cluster of 200 nodes and 6,000 pods, live: how it starts, and that it plans as a file does.

A control plane of its own (the generated cluster is written through the API with every status, and the API
server keeps an audit log of the rescheduler's requests: ``bench/livelab.py``, ``tests/support/cluster_load.py``):

- at start-up the rescheduler reads each kind with one paginated list (``limit``, then ``continue``) and one
  watch from the list's version, asks two discovery questions, and GETs no single object (a client that read
  objects one by one would cost a big cluster's API server thousands of requests per start); the pods, more
  than a page, are read as one page of the whole list, the namespaces at its version, and each namespace's pods
  at exactly that version (``shared/kube/shards.py``), the watch starting from it;
- ``spot-rescheduler plan`` of the live cluster is the plan of ``plan --snapshot`` of the same objects written to
  a file as ``kubectl get -o json`` writes them, and ``run``'s first cycle names the nodes that plan drains.

``bench/live_scale.py`` measures the same at 1,000 x 30,000 (bench/README.md).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from livelab import (  # noqa: E402
    RESCHEDULER_USER,
    Rescheduler,
    component_env,
    control_plane_options,
    paginated,
    requests_between,
)

from rescheduler.plan.labels import DrainLabel  # noqa: E402
from tests.support.cluster_gen import FULL, iter_items  # noqa: E402
from tests.support.cluster_load import load  # noqa: E402
from tests.support.controlplane import Binaries, ControlPlane  # noqa: E402

NODES, PODS, SEED = 200, 6000, 1
PAGE = 500  # the informers' page size (shared/kube/informer.py)

# What the rescheduler watches (rescheduler/cluster/watch_cache.py) and the list paths `kubectl get -o json` would read.
KINDS = {
    "nodes": ("/api/v1/nodes", "v1", "Node"),
    "pods": ("/api/v1/pods", "v1", "Pod"),
    "poddisruptionbudgets": ("/apis/policy/v1/poddisruptionbudgets", "policy/v1", "PodDisruptionBudget"),
    "persistentvolumes": ("/api/v1/persistentvolumes", "v1", "PersistentVolume"),
    "persistentvolumeclaims": ("/api/v1/persistentvolumeclaims", "v1", "PersistentVolumeClaim"),
    "storageclasses": ("/apis/storage.k8s.io/v1/storageclasses", "storage.k8s.io/v1", "StorageClass"),
    "namespaces": ("/api/v1/namespaces", "v1", "Namespace"),
}


@pytest.fixture(scope="module")
def big_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(Binaries.locate(), **control_plane_options())
    plane.start()
    try:
        loaded = load(plane, iter_items(SEED, NODES, PODS, FULL))
        assert loaded.objects["Pod"] == PODS and loaded.objects["Node"] == NODES
        yield plane
    finally:
        plane.stop()
        plane.remove_run_dir()


def test_start_up_is_one_paginated_list_and_one_watch_per_kind_and_no_single_object_read(
    big_plane: ControlPlane, tmp_path: Path
) -> None:
    resched = Rescheduler(big_plane, tmp_path).start()
    try:
        _, first = resched.wait_line("plan:", timeout=300)
    finally:
        resched.stop()
    start_up = requests_between(big_plane.audit_log, RESCHEDULER_USER, resched.began, first.wall)
    assert start_up, "the audit log holds none of the rescheduler's requests"
    # Karpenter's NodePools are looked for once (one list of one item): this cluster does not serve them.
    probes = [r for r in start_up if r.uri.startswith("/apis/karpenter.sh/")]
    assert [(r.verb, r.code, r.query.get("limit")) for r in probes] == [("list", 404, ["1"])], probes
    start_up = [r for r in start_up if r not in probes]
    assert all(r.code == 200 for r in start_up), [(r.verb, r.uri, r.code) for r in start_up if r.code != 200]
    lists = Counter(r.resource for r in start_up if r.verb == "list")
    watches = Counter(r.resource for r in start_up if r.verb == "watch")
    assert set(lists) == set(KINDS) and set(watches) == set(KINDS)
    assert all(n == 1 for n in watches.values()), watches
    assert all(paginated(r) and r.query["limit"] == [str(PAGE)] for r in start_up if r.verb == "list")
    assert lists["nodes"] == 1 and lists["poddisruptionbudgets"] == 1
    assert_pods_listed_in_shards(big_plane, start_up)
    gets = [r.uri for r in start_up if r.verb == "get"]
    assert sorted(gets) == ["/apis/policy", "/version"], "discovery only: no object is read one by one"
    other = [(r.verb, r.uri) for r in start_up if r.verb not in ("list", "watch", "get")]
    assert other == [], "a dry run writes nothing"


def assert_pods_listed_in_shards(plane: ControlPlane, start_up: list[Any]) -> None:
    """One page of all pods, the namespaces at its version, then each namespace's pods at exactly that version
    (its first page) and by continue token (the others), no relist; the pod watch from the same version."""
    pod_lists = [r for r in start_up if r.verb == "list" and r.resource == "pods"]
    whole = [r for r in pod_lists if r.uri.startswith("/api/v1/pods?")]
    assert len(whole) == 1 and "continue" not in whole[0].query and "resourceVersion" not in whole[0].query
    exact = [r for r in start_up if r.verb == "list" and r.query.get("resourceVersionMatch") == ["Exact"]]
    versions = {v for r in exact for v in r.query["resourceVersion"]}
    assert len(versions) == 1, versions
    shard_lists = [r for r in pod_lists if r not in whole]
    firsts = [r for r in shard_lists if "continue" not in r.query]
    assert all(r in exact for r in firsts) and [r for r in exact if r.resource == "namespaces"]
    assert all(r not in exact for r in shard_lists if "continue" in r.query), "a continued page carries no version"
    per_namespace = Counter(
        p["metadata"]["namespace"]
        for p in plane.api.list("/api/v1/pods")
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    )
    namespaces = [n["metadata"]["name"] for n in plane.api.list("/api/v1/namespaces")]
    assert sorted(r.uri.split("/")[4] for r in firsts) == sorted(namespaces), "one shard per namespace"
    pages = sum(max(1, math.ceil(per_namespace[n] / PAGE)) for n in namespaces)
    assert len(shard_lists) == pages, "one request per page of each namespace's pods, no relist"
    watch = [r for r in start_up if r.verb == "watch" and r.resource == "pods"]
    assert watch[0].query["resourceVersion"] == list(versions), "the watch starts where the shards were listed"


def dump(plane: ControlPlane, path: Path) -> None:
    """The objects as ``kubectl get nodes,pods,pdb,pv,pvc,storageclass,namespaces -A -o json`` writes them."""
    items: list[dict[str, Any]] = []
    for list_path, api_version, kind in KINDS.values():
        items.extend({"apiVersion": api_version, "kind": kind, **obj} for obj in plane.api.list(list_path))
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def plan_json(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", "plan", "--output", "json", *args],
        cwd=ROOT,
        env=component_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_the_live_plan_is_the_plan_of_the_same_objects_in_a_file(big_plane: ControlPlane, tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.json"
    dump(big_plane, snapshot)
    kubeconfig = str(big_plane.kubeconfig_of(RESCHEDULER_USER))
    live = plan_json("--kubeconfig", kubeconfig)
    version = big_plane.api.get("/version")["gitVersion"]
    from_file = plan_json("--snapshot", str(snapshot), "--kubernetes-version", version)
    assert live == from_file
    assert live["summary"]["on_demand_nodes"] > 0 and live["reasons"], "a plan with something in it"

    # run plans within a time budget (0.5 s) that may stop the search early on a busy machine; without it, run
    # plans as plan does. Its decision then starts the planned drains whose budgets allow them now, in plan
    # order, and names the others with the budget that holds them (rescheduler.plan.cycle.decide).
    resched = Rescheduler(big_plane, tmp_path, extra=("--plan-time-budget", "600")).start()
    try:
        _, first = resched.wait_line("plan:", timeout=600)
    finally:
        resched.stop()
    drainable, skipped = first.record["drainable"], first.record["skipped"]
    held = {DrainLabel.PDB_IN_USE.value, DrainLabel.PDB_PRECHECK.value, DrainLabel.NOTHING_TO_MOVE.value}
    assert len(skipped) < 20, "the log line lists every skipped node"
    assert all(skipped.get(node) in held for node in live["drained"] if node not in drainable), (first.record, live)
    assert drainable == [node for node in live["drained"] if node not in skipped][:20]
    assert drainable, "at least one drain may start"
