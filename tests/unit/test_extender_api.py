"""``/filter``, ``/prioritize``, ``/healthz``, ``/readyz``, ``/metrics`` through Flask's test client.

The wire format is k8s.io/kube-scheduler/extender/v1 as Go's encoding/json writes and reads it: Go field
names as keys (no JSON tags), decoded case-insensitively, the unused one of Nodes/NodeNames ``null``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from extender.app import create_app
from extender.scheduling import ExtenderPolicy, NodeIndex, PodIndex, PodPlacement, reduce_node
from shared.config import Config, parse_config
from shared.fit_reasons import ERR_RECLAIMED
from tests.builders import ON_DEMAND, SPOT, Json, node_json, owner, pod_json, taint
from tests.support.door_client import AppClient, DoorResponse

CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}


def node(name: str, labels: dict[str, str] | None = None, **kw: Any) -> Json:
    """A node labelled with its hostname, with 4 CPUs and no Ready condition (the extender reads none);
    ``kw`` are :func:`tests.builders.node_json` keywords."""
    return node_json(
        name,
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"},
        ready=None,
        **kw,
    )


def pod(annotations: dict[str, str] | None = None, replica_set: str = "web-5d9c") -> Json:
    """A pod of the ReplicaSet ``replica_set`` (``<deployment>-<pod-template-hash>``) in ``shop``."""
    return pod_json(
        f"{replica_set}-abcde",
        namespace="shop",
        labels={"pod-template-hash": replica_set.rsplit("-", 1)[1]},
        annotations=annotations or None,
        owners=[owner("ReplicaSet", replica_set, uid="rs", api_version="apps/v1")],
        image="x",
    )


class FakeCache:
    """The app's view of a watch-backed cache, filled directly (the reflector is tested on the real API)."""

    def __init__(self, nodes: Iterable[dict[str, Any]], config: Config, *, synced: bool = True) -> None:
        policy = ExtenderPolicy.from_config(config)
        self.nodes = NodeIndex()
        self.nodes.replace_all({n["metadata"]["name"]: reduce_node(n, policy) for n in nodes})
        self.pods: PodIndex | None = PodIndex()
        self._synced = synced

    def synced(self) -> bool:
        return self._synced


CLUSTER = [
    node("spot-1", SPOT),
    node("spot-2", SPOT),
    node("od-1", ON_DEMAND),
    node("plain-1"),
    node("cp-1", CONTROL_PLANE),
    node("spot-itn", SPOT, taints=[taint("aws-node-termination-handler/spot-itn", "x")]),
    node("spot-cordoned", SPOT, unschedulable=True),
]
NAMES = [n["metadata"]["name"] for n in CLUSTER]


def client_for(config: Config | None = None, cache: Any = None, nodes: Iterable[dict[str, Any]] = CLUSTER) -> AppClient:
    config = config or Config()
    if cache is None:
        cache = FakeCache(nodes, config)
    return AppClient(create_app(config, cache))


@pytest.fixture
def client() -> AppClient:
    return client_for()


def post(c: AppClient, path: str, payload: Any) -> Any:
    r = c.post(path, data=orjson.dumps(payload), content_type="application/json")
    assert r.status_code == 200, r.data
    assert r.mimetype == "application/json"
    return orjson.loads(r.data)


# --- filter -----------------------------------------------------------------------------------------------


def test_filter_with_node_names_drops_reclaimed_nodes_with_the_shared_reason(client: AppClient) -> None:
    result = post(client, "/filter", {"Pod": pod(), "Nodes": None, "NodeNames": NAMES})
    assert result == {
        "Nodes": None,
        "NodeNames": ["spot-1", "spot-2", "od-1", "plain-1", "cp-1"],
        "FailedNodes": {"spot-itn": ERR_RECLAIMED, "spot-cordoned": ERR_RECLAIMED},
        "FailedAndUnresolvableNodes": {"spot-itn": ERR_RECLAIMED, "spot-cordoned": ERR_RECLAIMED},
        "Error": "",
    }


def test_filter_follows_nodes_that_start_and_stop_being_reclaimed() -> None:
    config = Config()
    cache = FakeCache(CLUSTER, config)
    c = client_for(config, cache)
    policy = ExtenderPolicy.from_config(config)
    taint = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    cache.nodes.put("spot-1", reduce_node(node("spot-1", SPOT, taints=taint), policy))
    assert "spot-1" in post(c, "/filter", {"Pod": pod(), "NodeNames": ["spot-1", "od-1"]})["FailedNodes"]
    cache.nodes.put("spot-1", reduce_node(node("spot-1", SPOT), policy))
    cache.nodes.delete("spot-itn")
    assert post(c, "/filter", {"Pod": pod(), "NodeNames": ["spot-1", "spot-itn"]})["FailedNodes"] == {}


def post_chunked(client: AppClient, path: str, body: bytes) -> DoorResponse:
    """``body`` POSTed without a length (``Transfer-Encoding: chunked``), as the worker hands such a call on."""
    return client.call("POST", path, body, chunked=True)


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
def test_a_names_call_is_answered_alike_with_and_without_a_content_length(client: AppClient, path: str) -> None:
    """A chunked body (no length; gunicorn marks its input terminated) is read like one with a length."""
    body = orjson.dumps({"Pod": pod(), "NodeNames": NAMES})
    sized = client.post(path, data=body, content_type="application/json")
    chunked = post_chunked(client, path, body)
    assert (sized.status_code, sized.mimetype) == (chunked.status_code, chunked.mimetype) == (200, "application/json")
    assert orjson.loads(sized.data) == orjson.loads(chunked.data)


@pytest.mark.parametrize(
    "taint_key",
    [
        "aws-node-termination-handler/spot-itn",
        "aws-node-termination-handler/rebalance-recommendation",
        "cloud.google.com/impending-node-termination",
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
    ],
)
def test_every_reclaim_taint_is_filtered(taint_key: str) -> None:
    c = client_for(nodes=[node("n", SPOT, taints=[taint(taint_key)])])
    result = post(c, "/filter", {"Pod": pod(), "NodeNames": ["n"]})
    assert result["NodeNames"] == [] and result["FailedNodes"] == {"n": ERR_RECLAIMED}


def test_filter_with_full_nodes_answers_a_node_list_and_null_names(client: AppClient) -> None:
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": CLUSTER}
    result = post(client, "/filter", {"Pod": pod(), "Nodes": node_list, "NodeNames": None})
    assert result["NodeNames"] is None
    assert result["Error"] == ""
    assert result["Nodes"]["kind"] == "NodeList"
    assert result["Nodes"]["items"] == CLUSTER[:5], "kept nodes are returned unchanged"
    assert result["FailedNodes"] == {"spot-itn": ERR_RECLAIMED, "spot-cordoned": ERR_RECLAIMED}


def test_full_nodes_work_without_any_node_cache() -> None:
    c = AppClient(create_app(Config()))
    result = post(c, "/filter", {"Pod": pod(), "Nodes": {"items": CLUSTER}})
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == NAMES[:5]


def test_filter_keeps_a_node_the_cache_does_not_know_yet(client: AppClient) -> None:
    result = post(client, "/filter", {"Pod": pod(), "NodeNames": ["brand-new", "spot-itn"]})
    assert result["NodeNames"] == ["brand-new"]


def test_filter_reclaimed_can_be_turned_off() -> None:
    c = client_for(parse_config({"extender": {"filter_reclaimed": False}}))
    assert post(c, "/filter", {"Pod": pod(), "NodeNames": NAMES})["NodeNames"] == NAMES


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param(("Pod", "NodeNames"), id="go-field-names"),
        pytest.param(("pod", "nodenames"), id="lower-case"),
        pytest.param(("POD", "NODENAMES"), id="upper-case"),
        pytest.param(("pod", "nodeNames"), id="camel-case"),
    ],
)
def test_decode_is_case_insensitive_like_go(client: AppClient, keys: tuple[str, str]) -> None:
    pod_key, names_key = keys
    result = post(client, "/filter", {pod_key: pod(), names_key: ["spot-1", "spot-itn"]})
    assert result["NodeNames"] == ["spot-1"]
    scores = post(client, "/prioritize", {pod_key: pod(), names_key: ["spot-1", "od-1"]})
    assert scores == [{"Host": "spot-1", "Score": 10}, {"Host": "od-1", "Score": 0}]


def test_filter_before_the_cache_synced_reports_an_error_so_an_ignorable_extender_is_skipped() -> None:
    c = client_for(cache=FakeCache(CLUSTER, Config(), synced=False))
    result = post(c, "/filter", {"Pod": pod(), "NodeNames": NAMES})
    assert result["Error"] and result["NodeNames"] is None


# --- prioritize -------------------------------------------------------------------------------------------


def test_prioritize_scores_spot_high_and_nodes_being_reclaimed_0_as_integers_from_0_to_10(
    client: AppClient,
) -> None:
    scores = post(client, "/prioritize", {"Pod": pod(), "NodeNames": NAMES})
    assert scores == [
        {"Host": "spot-1", "Score": 10},
        {"Host": "spot-2", "Score": 10},
        {"Host": "od-1", "Score": 0},
        {"Host": "plain-1", "Score": 0},
        {"Host": "cp-1", "Score": 0},
        {"Host": "spot-itn", "Score": 0},  # termination notice: /prioritize may be configured without /filter
        {"Host": "spot-cordoned", "Score": 0},
    ]
    assert all(type(s["Score"]) is int and 0 <= s["Score"] <= 10 for s in scores)


def test_prioritize_full_nodes_gives_the_same_scores(client: AppClient) -> None:
    by_names = post(client, "/prioritize", {"Pod": pod(), "NodeNames": NAMES})
    by_nodes = post(client, "/prioritize", {"Pod": pod(), "Nodes": {"items": CLUSTER}})
    assert by_nodes == by_names


def test_scores_come_from_the_configuration() -> None:
    config = parse_config({"extender": {"spot_score": 8, "on_demand_score": 2, "other_score": 1}})
    scores = post(client_for(config), "/prioritize", {"Pod": pod(), "NodeNames": ["spot-1", "od-1", "cp-1"]})
    assert [s["Score"] for s in scores] == [8, 2, 1]


def test_unknown_node_scores_zero(client: AppClient) -> None:
    assert post(client, "/prioritize", {"Pod": pod(), "NodeNames": ["ghost"]}) == [{"Host": "ghost", "Score": 0}]


def test_prioritize_before_sync_has_no_opinion() -> None:
    c = client_for(cache=FakeCache(CLUSTER, Config(), synced=False))
    assert post(c, "/prioritize", {"Pod": pod(), "NodeNames": NAMES}) == []


class BrokenCache:
    """A synced cache whose node index fails: an internal error, not the caller's."""

    pods = None

    def synced(self) -> bool:
        return True

    @property
    def nodes(self) -> NodeIndex:
        raise RuntimeError("the node index is broken")


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
def test_an_internal_error_on_the_node_name_fast_path_is_never_a_500_and_is_counted(path: str) -> None:
    endpoint = {"endpoint": path.lstrip("/")}
    before = REGISTRY.get_sample_value("spotshift_internal_errors_total", endpoint) or 0.0
    c = client_for(cache=BrokenCache())
    r = c.post(path, data=orjson.dumps({"Pod": pod(), "NodeNames": NAMES}), content_type="application/json")
    assert r.status_code < 500, r.data
    assert REGISTRY.get_sample_value("spotshift_internal_errors_total", endpoint) == before + 1


# --- per-workload spot ceilings ---------------------------------------------------------------------------


def place(cache: FakeCache, workload_pods: dict[str, int]) -> None:
    """Bind pods of the Deployment shop/web onto nodes: ``{"spot-1": 3, "od-1": 1}``."""
    assert cache.pods is not None
    items = {}
    for node_name, count in workload_pods.items():
        for i in range(count):
            items[f"{node_name}-{i}"] = PodPlacement("shop/Deployment/web", node_name)
    cache.pods.replace_all(items)


@pytest.mark.parametrize(
    ("annotations", "placed", "spot_first"),
    [
        pytest.param({}, {"spot-1": 10}, True, id="no-ceiling-spot-always-first"),
        pytest.param({"spotshift.io/max-spot-percent": "70"}, {"spot-1": 6, "od-1": 3}, True, id="below-70-percent"),
        pytest.param({"spotshift.io/max-spot-percent": "70"}, {"spot-1": 7, "od-1": 3}, False, id="at-70-percent"),
        pytest.param({"spotshift.io/max-spot-percent": "0"}, {}, False, id="zero-percent-never-prefers-spot"),
        pytest.param({"spotshift.io/min-on-demand": "2"}, {"spot-1": 5, "od-1": 1}, False, id="below-on-demand-floor"),
        pytest.param({"spotshift.io/min-on-demand": "2"}, {"spot-1": 5, "od-1": 2}, True, id="on-demand-floor-met"),
        pytest.param({"spotshift.io/max-spot-percent": "junk"}, {"spot-1": 10}, True, id="bad-annotation-is-ignored"),
    ],
)
def test_ceiling_swaps_scores_when_one_more_spot_pod_would_break_it(
    annotations: dict[str, str], placed: dict[str, int], spot_first: bool
) -> None:
    cache = FakeCache(CLUSTER, Config())
    place(cache, placed)
    c = client_for(cache=cache)
    scores = {
        s["Host"]: s["Score"]
        for s in post(c, "/prioritize", {"Pod": pod(annotations), "NodeNames": ["spot-1", "od-1"]})
    }
    assert (scores["spot-1"] > scores["od-1"]) is spot_first
    full = post(c, "/prioritize", {"Pod": pod(annotations), "Nodes": {"items": CLUSTER[:3]}})
    assert ({s["Host"]: s["Score"] for s in full}["spot-1"] == 10) is spot_first


def test_cluster_default_ceiling_applies_without_annotation() -> None:
    config = parse_config({"spot_ceiling": {"default_max_spot_percent": 50}})
    cache = FakeCache(CLUSTER, config)
    place(cache, {"spot-1": 1})
    scores = post(client_for(config, cache), "/prioritize", {"Pod": pod(), "NodeNames": ["spot-1", "od-1"]})
    assert scores == [{"Host": "spot-1", "Score": 0}, {"Host": "od-1", "Score": 10}]


def test_pods_of_other_workloads_do_not_count() -> None:
    cache = FakeCache(CLUSTER, Config())
    place(cache, {"spot-1": 9})
    assert cache.pods is not None
    cache.pods.put("api-0", PodPlacement("shop/Deployment/api", "od-1"))
    other = pod({"spotshift.io/max-spot-percent": "50"}, replica_set="api-77f")
    scores = post(client_for(cache=cache), "/prioritize", {"Pod": other, "NodeNames": ["spot-1", "od-1"]})
    assert scores[0] == {"Host": "spot-1", "Score": 10}, "api: 0 of 1 on spot, so a 2nd on spot is 50%: allowed"


# --- health, readiness, metrics ----------------------------------------------------------------------------


def test_healthz_and_readyz() -> None:
    synced, unsynced = client_for(), client_for(cache=FakeCache(CLUSTER, Config(), synced=False))
    assert synced.get("/healthz").status_code == 200
    assert unsynced.get("/healthz").status_code == 200, "alive even while the cache lists"
    assert synced.get("/readyz").status_code == 200
    assert unsynced.get("/readyz").status_code == 503


def test_metrics_count_requests_patches_and_skips(client: AppClient) -> None:
    post(client, "/prioritize", {"Pod": pod(), "NodeNames": NAMES})
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "kube-system",
            "operation": "CREATE",
            "object": pod(),
        },
    }
    post(client, "/mutate", review)
    review["request"]["namespace"] = "shop"
    post(client, "/mutate", review)
    text = client.get("/metrics").data.decode()
    assert 'spotshift_http_requests_total{code="200",endpoint="prioritize"}' in text
    assert 'spotshift_http_request_duration_seconds_bucket{endpoint="mutate",le="0.005"}' in text
    assert 'spotshift_webhook_skips_total{reason="excluded-namespace"}' in text
    assert 'spotshift_webhook_patches_total{kind="preferred-affinity"}' in text
    assert "spotshift_node_cache_nodes 7.0" in text
