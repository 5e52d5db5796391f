"""On a Karpenter cluster the rescheduler leaves to Karpenter the nodes of NodePools that consolidate toward spot by
themselves (``karpenter.defer_to_consolidation``): the judgement of a NodePool (:mod:`shared.nodepools`), the plan
(not a candidate, no placeholder, the stay reason in the table, JSON and HTML), the snapshot decoder, the live
listing, the watch cache and the run loop's start-up and gauge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from rescheduler.cluster.listing import NODEPOOLS_PATH, NotServed, Refused, load_cluster
from rescheduler.cluster.watch_cache import NODEPOOLS, NODES, ClusterState, node_pools_access
from rescheduler.decode.reader import load_bytes
from rescheduler.metrics import Metrics
from rescheduler.output.page import reason_groups
from rescheduler.plan.capacity_needs import capacity_needs
from rescheduler.plan.planner import plan
from rescheduler.plan.stay_reasons import Kind
from rescheduler.run import Rescheduler, RunOptions
from shared.config import Config, parse_config
from shared.kube.api import Forbidden, NotFound
from shared.nodepools import NodePool, consolidation_toward_spot
from tests.builders import api_list, node_json, owner, pod_json
from tests.support import fake_api

ROOT = Path(__file__).resolve().parents[2]
POOL = "karpenter.sh/nodepool"
CT = "karpenter.sh/capacity-type"
NODE_SIZE = {"cpu": "4", "memory": "16Gi", "pods": "110"}


def nodepool_json(
    name: str = "default",
    *,
    policy: str | None = "WhenEmptyOrUnderutilized",
    after: str | None = "0s",
    capacity: list[dict[str, Any]] | None = None,
    budgets: list[dict[str, Any]] | None = None,
    replicas: int | None = None,
) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodePool; ``capacity`` lists its capacity-type requirements (``None``: none)."""
    disruption: dict[str, Any] = {}
    if policy is not None:
        disruption["consolidationPolicy"] = policy
    if after is not None:
        disruption["consolidateAfter"] = after
    if budgets is not None:
        disruption["budgets"] = budgets
    requirements = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
    requirements += [{"key": CT, **r} for r in capacity or ()]
    spec: dict[str, Any] = {
        "disruption": disruption,
        "template": {"spec": {"requirements": requirements, "nodeClassRef": {"name": "default"}}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


BOTH = [{"operator": "In", "values": ["spot", "on-demand"]}]
ON_DEMAND_ONLY = [{"operator": "In", "values": ["on-demand"]}]

# --- the judgement ---------------------------------------------------------------------------------------------

JUDGEMENTS = [
    # (id, NodePool keyword arguments, consolidates toward spot)
    ("underutilized-spot-and-on-demand", {"capacity": BOTH}, True),
    ("balanced", {"policy": "Balanced", "capacity": BOTH}, True),
    ("policy-absent-is-the-api-default", {"policy": None, "capacity": BOTH}, True),
    ("when-empty", {"policy": "WhenEmpty", "capacity": BOTH}, False),
    ("consolidate-after-never", {"after": "Never", "capacity": BOTH}, False),
    ("consolidate-after-absent", {"after": None, "capacity": BOTH}, True),
    ("consolidate-after-30m", {"after": "30m", "capacity": BOTH}, True),
    ("on-demand-only", {"capacity": ON_DEMAND_ONLY}, False),
    ("spot-only", {"capacity": [{"operator": "In", "values": ["spot"]}]}, True),
    ("no-capacity-type-requirement", {"capacity": None}, True),
    ("exists", {"capacity": [{"operator": "Exists"}]}, True),
    ("not-in-reserved", {"capacity": [{"operator": "NotIn", "values": ["reserved"]}]}, True),
    ("not-in-spot", {"capacity": [{"operator": "NotIn", "values": ["spot"]}]}, False),
    ("does-not-exist", {"capacity": [{"operator": "DoesNotExist"}]}, False),
    ("two-requirements-one-refusing", {"capacity": [*BOTH, *ON_DEMAND_ONLY]}, False),
    ("budget-absent-is-10-percent", {"capacity": BOTH, "budgets": None}, True),
    ("budget-zero-always", {"capacity": BOTH, "budgets": [{"nodes": "0"}]}, False),
    ("budget-zero-percent-always", {"capacity": BOTH, "budgets": [{"nodes": "0%"}]}, False),
    (
        "budget-zero-for-underutilized",
        {"capacity": BOTH, "budgets": [{"nodes": "0", "reasons": ["Drifted", "Underutilized"]}]},
        False,
    ),
    ("budget-zero-for-drift-only", {"capacity": BOTH, "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]}, True),
    ("budget-zero-for-empty-only", {"capacity": BOTH, "budgets": [{"nodes": "0", "reasons": ["Empty"]}]}, True),
    (
        "budget-zero-in-a-window-defers-anyway",
        {"capacity": BOTH, "budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]},
        True,
    ),
    ("budget-one-node", {"capacity": BOTH, "budgets": [{"nodes": "1"}, {"nodes": "20%"}]}, True),
    ("static-nodepool", {"capacity": BOTH, "replicas": 3}, False),
]


@pytest.mark.parametrize(("kwargs", "expected"), [(k, e) for _, k, e in JUDGEMENTS], ids=[i for i, _, _ in JUDGEMENTS])
def test_whether_a_nodepool_consolidates_toward_spot(kwargs: dict[str, Any], expected: bool) -> None:
    pool = NodePool.from_api(nodepool_json("pool", **kwargs))
    consolidates, why = consolidation_toward_spot(pool)
    assert consolidates is expected, why
    assert "NodePool pool" in why


def test_a_nodepool_without_a_name_is_refused() -> None:
    from shared.model import ParseError

    with pytest.raises(ParseError, match=r"metadata\.name"):
        NodePool.from_api({"spec": {}})


# --- the plan ----------------------------------------------------------------------------------------------------


def _cluster(*pools: dict[str, Any], spot_room: bool = True) -> list[dict[str, Any]]:
    """Two on-demand nodes with one small web pod each: ``od-karpenter`` of NodePool ``default``, ``od-asg`` of no
    NodePool; a spot node with room for both (``spot_room``) or none."""
    spot_size = NODE_SIZE if spot_room else {"cpu": "50m", "memory": "64Mi", "pods": "110"}
    items: list[dict[str, Any]] = [
        node_json("od-karpenter", labels={CT: "on-demand", POOL: "default"}, allocatable=NODE_SIZE),
        node_json("od-asg", labels={CT: "on-demand"}, allocatable=NODE_SIZE),
        node_json("spot-1", labels={CT: "spot", POOL: "default"}, allocatable=spot_size),
    ]
    for i, node in enumerate(("od-karpenter", "od-asg")):
        items.append(
            pod_json(
                f"web-{i}",
                node_name=node,
                labels={"app": "web"},
                owners=[owner("ReplicaSet", "web-5d8f", uid="web-rs")],
                requests={"cpu": "100m", "memory": "128Mi"},
            )
        )
    return [*items, *pools]


def _snapshot(items: list[dict[str, Any]]) -> Any:
    return load_bytes(orjson.dumps(api_list(items)))


def test_a_node_of_a_consolidating_nodepool_is_left_to_karpenter_and_the_others_drain() -> None:
    snap = _snapshot(_cluster(nodepool_json(capacity=BOTH)))
    result = plan(snap)
    assert result.drained == ("od-asg",)
    why = result.reasons["od-karpenter"]
    assert why.kind is Kind.KARPENTER_CONSOLIDATES
    assert "NodePool default" in why.message
    assert [m.source for m in result.moves] == ["od-asg"]
    out = result.to_json()
    assert out["reasons"]["od-karpenter"]["kind"] == "karpenter-consolidates"
    assert [g["kind"] for g in reason_groups(result)] == ["karpenter-consolidates"]


@pytest.mark.parametrize(
    "pools",
    [
        pytest.param([nodepool_json(capacity=ON_DEMAND_ONLY)], id="on-demand-only-nodepool"),
        pytest.param([nodepool_json(policy="WhenEmpty", capacity=BOTH)], id="when-empty-nodepool"),
        pytest.param([nodepool_json("other", capacity=BOTH)], id="nodepool-deleted"),
        pytest.param([], id="no-nodepools-at-all"),
    ],
)
def test_nodes_of_nodepools_that_do_not_consolidate_toward_spot_stay_the_reschedulers(
    pools: list[dict[str, Any]],
) -> None:
    result = plan(_snapshot(_cluster(*pools)))
    assert set(result.drained) == {"od-karpenter", "od-asg"}


def test_with_the_setting_off_every_node_is_the_reschedulers() -> None:
    config = parse_config({"karpenter": {"defer_to_consolidation": False}})
    result = plan(_snapshot(_cluster(nodepool_json(capacity=BOTH))), config)
    assert set(result.drained) == {"od-karpenter", "od-asg"}


def test_unreadable_nodepools_leave_karpenters_nodes_alone_and_the_others_drain() -> None:
    snap = _snapshot(_cluster())
    snap.node_pools_problem = "forbidden: RBAC"
    result = plan(snap)
    assert result.drained == ("od-asg",)
    why = result.reasons["od-karpenter"]
    assert why.kind is Kind.KARPENTER_UNREADABLE
    assert "forbidden: RBAC" in why.message and "NodePool default" in why.message


def test_no_placeholders_are_asked_for_a_node_left_to_karpenter() -> None:
    snap = _snapshot(_cluster(nodepool_json(capacity=BOTH), spot_room=False))
    config = Config()
    result = plan(snap, config)
    assert result.drained == ()
    assert result.reasons["od-karpenter"].kind is Kind.KARPENTER_CONSOLIDATES
    needs = capacity_needs(snap, result.reasons, config)
    assert [n.node for n in needs] == ["od-asg"]


def _run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", *args],
        capture_output=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_plan_on_a_snapshot_file_shows_the_stay_reason_in_table_json_and_html(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps(api_list(_cluster(nodepool_json(capacity=BOTH)))))
    table = _run_cli("plan", "--snapshot", str(path))
    assert table.returncode == 0, table.stderr.decode()
    text = table.stdout.decode()
    assert "left to Karpenter's consolidation (karpenter.defer_to_consolidation)" in text
    js = _run_cli("plan", "--snapshot", str(path), "--output", "json")
    assert js.returncode == 0, js.stderr.decode()
    out = orjson.loads(js.stdout)
    assert out["drained"] == ["od-asg"]
    assert out["reasons"]["od-karpenter"]["kind"] == "karpenter-consolidates"
    page = tmp_path / "plan.html"
    html = _run_cli("plan", "--snapshot", str(path), "--output", "html", str(page))
    assert html.returncode == 0, html.stderr.decode()
    assert "karpenter-consolidates" in page.read_text()


# --- reading NodePools ------------------------------------------------------------------------------------------


def test_the_snapshot_decoder_reads_nodepools_from_a_list_and_a_nodepool_list() -> None:
    snap = _snapshot(_cluster(nodepool_json(capacity=BOTH), nodepool_json("od", capacity=ON_DEMAND_ONLY)))
    assert sorted(snap.node_pools) == ["default", "od"]
    assert snap.node_pools_problem is None
    typed = {"kind": "NodePoolList", "apiVersion": "karpenter.sh/v1", "items": [nodepool_json("solo", after="Never")]}
    for item in typed["items"]:
        del item["kind"], item["apiVersion"]
    only = load_bytes(orjson.dumps(typed))
    assert only.node_pools["solo"].consolidate_after == "Never"


class _Api:
    """Raw GETs of a cluster with NodePools served (``served``) and listable (``allowed``)."""

    def __init__(self, items: list[dict[str, Any]], *, served: bool = True, allowed: bool = True) -> None:
        self.items = items
        self.served, self.allowed = served, allowed

    def __call__(self, path: str, query: list[tuple[str, Any]]) -> bytes:
        kinds = {
            "/api/v1/nodes": "Node",
            "/api/v1/pods": "Pod",
            NODEPOOLS_PATH: "NodePool",
        }
        if path == NODEPOOLS_PATH and not self.served:
            raise NotServed(path)
        if path == NODEPOOLS_PATH and not self.allowed:
            raise Refused(path)
        kind = kinds.get(path)
        items = [i for i in self.items if i["kind"] == kind] if kind else []
        return orjson.dumps({"kind": "List", "metadata": {}, "items": items})


def test_a_live_plan_lists_nodepools_where_served_and_says_when_refused() -> None:
    items = _cluster(nodepool_json(capacity=BOTH))
    served = load_cluster(fetch=_Api(items))
    assert list(served.node_pools) == ["default"] and served.node_pools_problem is None
    absent = load_cluster(fetch=_Api(items, served=False))
    assert absent.node_pools == {} and absent.node_pools_problem is None
    refused = load_cluster(fetch=_Api(items, allowed=False))
    assert refused.node_pools == {} and refused.node_pools_problem is not None
    assert "forbidden" in refused.node_pools_problem
    assert plan(refused).reasons["od-karpenter"].kind is Kind.KARPENTER_UNREADABLE


def test_the_watch_cache_keeps_nodepools_and_needs_them_listed_only_where_watched() -> None:
    state = ClusterState()
    for kind in ("nodes", "pods", "poddisruptionbudgets", "namespaces", "persistentvolumes"):
        state.synced.add(kind)
    state.synced.update({"persistentvolumeclaims", "storageclasses"})
    assert state.is_synced(), "without Karpenter the NodePools are not waited for"
    state.watch_node_pools()
    assert not state.is_synced()
    state.replace(NODEPOOLS, [nodepool_json(capacity=BOTH)])
    assert state.is_synced()
    state.replace(NODES, [node_json("od-karpenter", labels={CT: "on-demand", POOL: "default"})])
    assert list(state.snapshot().node_pools) == ["default"]
    state.apply(NODEPOOLS, "MODIFIED", nodepool_json(policy="WhenEmpty"))
    assert state.snapshot().node_pools["default"].consolidation_policy == "WhenEmpty"
    state.apply(NODEPOOLS, "DELETED", nodepool_json())
    assert state.snapshot().node_pools == {}
    state.node_pools_problem = "forbidden"
    assert state.snapshot().node_pools_problem == "forbidden"


class _Kube:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.paths: list[str] = []

    def get_raw(self, path: str, query: Any = ()) -> bytes:
        self.paths.append(path)
        if self.error is not None:
            raise self.error
        return b'{"items": []}'


def test_nodepool_access_tells_served_absent_and_forbidden_apart() -> None:
    assert node_pools_access(_Kube(None)) is None  # type: ignore[arg-type]
    assert node_pools_access(_Kube(NotFound("not found", path=NODEPOOLS_PATH))) == "absent"  # type: ignore[arg-type]
    problem = node_pools_access(_Kube(Forbidden("forbidden", path=NODEPOOLS_PATH)))  # type: ignore[arg-type]
    assert problem is not None and problem.startswith("forbidden") and "nodepools.karpenter.sh" in problem


def test_the_gauge_counts_the_nodes_left_to_karpenter() -> None:
    metrics = Metrics()
    text = metrics.render().decode()
    assert 'spotshift_rescheduler_nodes_left_to_karpenter{reason="consolidates"} 0.0' in text
    assert 'spotshift_rescheduler_nodes_left_to_karpenter{reason="nodepools-unreadable"} 0.0' in text


# --- the run loop ------------------------------------------------------------------------------------------------


def _fake_cluster() -> fake_api.FakeApiServer:
    """``od-karpenter`` (of NodePool ``default``) and ``od-asg``, one pod each, and a roomy spot node; the fake API
    server serves no NodePools (a 404, as a cluster without Karpenter)."""
    server = fake_api.FakeApiServer()
    server.put("namespaces", fake_api.namespace("default"))
    server.put("namespaces", fake_api.namespace("spotshift"))
    server.put("nodes", fake_api.node("od-karpenter", cpu="2", labels={POOL: "default"}))
    server.put("nodes", fake_api.node("od-asg", cpu="2"))
    server.put("nodes", fake_api.node("spot-1", spot=True, cpu="8"))
    server.put("pods", fake_api.pod("a-0", "od-karpenter", app="a", owner="rs-a"))
    server.put("pods", fake_api.pod("b-0", "od-asg", app="b", owner="rs-b"))
    return server


def _run_once(server: fake_api.FakeApiServer) -> Rescheduler:
    config = parse_config({"rescheduler": {"dry_run": True, "leader_elect": False}})
    r = Rescheduler(server, config, RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    return r


def _drainable(r: Rescheduler) -> list[str]:
    """The nodes the last decision could empty onto spot (one drain at a time starts: no disruption budgets)."""
    assert r.plans.last_decision is not None
    return sorted(nm.node for nm in r.plans.last_decision.drains)


def _left(r: Rescheduler, reason: str) -> float | None:
    return r.metrics.registry.get_sample_value("spotshift_rescheduler_nodes_left_to_karpenter", {"reason": reason})


def test_without_karpenter_the_loop_asks_once_and_drains_every_node(caplog: pytest.LogCaptureFixture) -> None:
    server = _fake_cluster()
    with caplog.at_level("INFO", logger="spotshift.rescheduler"):
        r = _run_once(server)
    assert _drainable(r) == ["od-asg", "od-karpenter"]
    asked = [path for method, path, _ in server.requests if path == NODEPOOLS_PATH]
    assert len(asked) == 1, "one look at start-up, no informer retrying a collection that is not served"
    assert [m for m in caplog.messages if "NodePools" in m] == [
        "no Karpenter NodePools served: every on-demand node is the rescheduler's"
    ]
    assert _left(r, "consolidates") == 0 and _left(r, "nodepools-unreadable") == 0


def test_nodepools_forbidden_is_said_loudly_once_and_karpenters_nodes_are_not_drained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = _fake_cluster()
    server.unreachable("/nodepools$", 403)
    with caplog.at_level("INFO", logger="spotshift.rescheduler"):
        r = _run_once(server)
    assert _drainable(r) == ["od-asg"] and [res.node for res in r.results] == ["od-asg"]
    errors = [rec for rec in caplog.records if rec.levelname == "ERROR" and "NodePools" in rec.getMessage()]
    assert len(errors) == 1 and "nodepools.karpenter.sh" in errors[0].getMessage()
    assert _left(r, "nodepools-unreadable") == 1
    assert r.plans.last_plan is not None
    assert r.plans.last_plan.reasons["od-karpenter"].kind is Kind.KARPENTER_UNREADABLE


def test_with_the_setting_off_the_loop_never_asks_for_nodepools() -> None:
    server = _fake_cluster()
    server.unreachable("/nodepools$", 403)
    config = parse_config(
        {
            "rescheduler": {"dry_run": True, "leader_elect": False},
            "karpenter": {"defer_to_consolidation": False},
        }
    )
    r = Rescheduler(server, config, RunOptions(once=True, identity="me", sync_timeout=5))
    try:
        assert r.run() == 0
    finally:
        server.close()
    assert _drainable(r) == ["od-asg", "od-karpenter"]
    assert not [path for _, path, _ in server.requests if "nodepools" in path]
