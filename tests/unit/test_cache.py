"""The watch-backed caches: the reflector's list/watch/relist protocol against a scripted API behind the project's
own transport boundary (:class:`shared.kube.api.Transport`), and the indexes.

The reflector against the real API server is exercised by the e2e tier (every extender e2e test waits for the
node cache to see its nodes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest

from extender.cache import DictStore, Reflector, node_collection, pod_collection
from extender.scheduling import (
    ExtenderPolicy,
    NodeIndex,
    PodIndex,
    PodPlacement,
    reduce_node,
    reduce_pod,
    share_of,
    spot_allowed,
    workload_key,
)
from shared.config import Config, parse_config
from shared.kube.api import Kube, Unavailable
from tests.builders import node_json, owner, pod_json


class Lines:
    """A watch's lines, as the transport hands them over; with ``block`` it stays open, as a watch does, until
    closed."""

    def __init__(self, lines: list[bytes] | None = None, block: threading.Event | None = None) -> None:
        self._lines = lines or []
        self._block = block

    def __iter__(self) -> Iterator[bytes]:
        yield from self._lines
        if self._block is not None:
            self._block.wait(5)

    def close(self) -> None:
        if self._block is not None:
            self._block.set()


def node(name: str, rv: str, **labels: str) -> dict[str, Any]:
    return node_json(name, labels=labels, resource_version=rv)


class ScriptedApi:
    """A :class:`~shared.kube.api.Transport`: two list pages, then a watch with events and a 410, then a relist,
    then a watch that stays open."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.paths: set[str] = set()
        self.relisted = threading.Event()
        self.hold = threading.Event()
        self.lists = 0

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), **_: Any) -> bytes:
        params = dict(query)
        self.calls.append(params)
        self.paths.add(f"{method} {path}")
        self.lists += 1 if not params.get("continue") else 0
        if self.lists == 1 and not params.get("continue"):
            return orjson.dumps({"metadata": {"continue": "page2"}, "items": [node("a", "1", x="1")]})
        if params.get("continue") == "page2":
            return orjson.dumps({"metadata": {"resourceVersion": "10"}, "items": [node("b", "2")]})
        return orjson.dumps({"metadata": {"resourceVersion": "20"}, "items": [node("z", "20")]})

    def stream(self, path: str, *, query: Sequence[tuple[str, Any]] = (), timeout: float = 300.0) -> Lines:
        params = dict(query)
        self.calls.append(params)
        self.paths.add(f"WATCH {path}")
        if self.lists == 1:
            events = [
                {"type": "ADDED", "object": node("c", "11", **{"karpenter.sh/capacity-type": "spot"})},
                {"type": "MODIFIED", "object": node("a", "12")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}},
                {"type": "DELETED", "object": node("b", "14")},
                {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}},
            ]
            return Lines([orjson.dumps(e) for e in events])
        self.relisted.set()
        return Lines(block=self.hold)


def test_reflector_lists_pages_watches_from_the_list_version_and_relists_on_410() -> None:
    api = ScriptedApi()
    seen: list[dict[str, Any]] = []
    store: DictStore[dict[str, Any]] = DictStore()

    def capture(obj: Any) -> dict[str, Any]:
        seen.append(obj)
        return dict(obj["metadata"].get("labels") or {})

    reflector = Reflector("nodes", node_collection(Kube(api)), capture, store, page_size=1).start()
    try:
        assert reflector.synced.wait(5)
        assert api.relisted.wait(5)
        assert api.paths == {"GET /api/v1/nodes", "WATCH /api/v1/nodes"}
        watches = [c for c in api.calls if c.get("watch")]
        assert watches[0]["resourceVersion"] == "10", "the watch starts at the list's resourceVersion"
        assert watches[0]["allowWatchBookmarks"] == "true"
        assert watches[1]["resourceVersion"] == "20", "after 410 Gone: relist, then watch from the new list"
        assert store.items == {"z": {}}, "the relist replaced everything"
        assert reflector.relists == 2 and reflector.events == 3
        assert [c.get("limit") for c in api.calls if not c.get("watch")][:2] == [1, 1]
    finally:
        reflector.stop()


def test_reflector_applies_events_between_lists() -> None:
    api = ScriptedApi()
    store: DictStore[str] = DictStore()
    states: list[dict[str, str]] = []

    reflector = Reflector(
        "nodes",
        node_collection(Kube(api)),
        lambda o: o["metadata"]["resourceVersion"],
        store,
        on_change=lambda: states.append(dict(store.items)),
    ).start()
    try:
        assert api.relisted.wait(5)
    finally:
        reflector.stop()
    assert states[0] == {"a": "1", "b": "2"}
    assert {"a": "12", "c": "11"} in states, "ADDED, MODIFIED and DELETED applied in order"


class Flaky:
    """A :class:`~shared.kube.api.Transport` whose API server does not answer the first request."""

    def __init__(self) -> None:
        self.calls = 0
        self.watching = threading.Event()

    def request(self, method: str, path: str, **_: Any) -> bytes:
        self.calls += 1
        if self.calls == 1:
            raise Unavailable("ConnectionRefusedError: API server restarting", method=method, path=path)
        return orjson.dumps({"metadata": {"resourceVersion": "5"}, "items": [node("a", "1")]})

    def stream(self, path: str, **_: Any) -> Lines:
        self.watching.set()
        return Lines(block=threading.Event())


def test_reflector_backs_off_and_retries_after_an_error() -> None:
    api = Flaky()
    store: DictStore[str] = DictStore()
    reflector = Reflector("pods", pod_collection(Kube(api)), lambda o: "x", store).start()
    try:
        assert api.watching.wait(5)
        assert store.items == {"a": "x"}
        assert api.calls == 2
    finally:
        reflector.stop()


# --- reducers and indexes -------------------------------------------------------------------------------------


def owned(kind: str, name: str, **labels: str) -> dict[str, Any]:
    return {
        "namespace": "shop",
        "labels": labels,
        "ownerReferences": [owner(kind, name)],
    }


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        pytest.param(
            owned("ReplicaSet", "web-5d9c", **{"pod-template-hash": "5d9c"}), "shop/Deployment/web", id="deployment"
        ),
        pytest.param(owned("ReplicaSet", "web-5d9c"), "shop/ReplicaSet/web-5d9c", id="bare-replicaset"),
        pytest.param(owned("StatefulSet", "db"), "shop/StatefulSet/db", id="statefulset"),
        pytest.param({"namespace": "shop"}, None, id="bare-pod"),
    ],
)
def test_workload_key(meta: dict[str, Any], key: str | None) -> None:
    assert workload_key(meta) == key


def pod(node: str | None, annotations: dict[str, str] | None = None, *, terminating: bool = False) -> dict[str, Any]:
    """A running pod of the StatefulSet ``shop/db``, bound to ``node`` unless it is None."""
    return pod_json(
        "db-0",
        namespace="shop",
        labels={},
        annotations=annotations or {},
        owners=[owner("StatefulSet", "db")],
        node_name=node or "",
        phase="Running",
        terminating=terminating,
    )


def test_pod_reducer_keeps_only_bound_live_pods_that_may_have_a_ceiling() -> None:
    ceiling = Config().spot_ceiling
    annotated = {"spotshift.io/max-spot-percent": "50"}
    assert reduce_pod(pod("n1", annotated), ceiling) == PodPlacement("shop/StatefulSet/db", "n1")
    assert reduce_pod(pod("n1"), ceiling) is None, "no annotation and no cluster default: nothing to enforce"
    assert reduce_pod(pod(None, annotated), ceiling) is None, "pending"
    assert reduce_pod(pod("n1", annotated, terminating=True), ceiling) is None
    defaults = parse_config({"spot_ceiling": {"default_min_on_demand": 1}}).spot_ceiling
    assert reduce_pod(pod("n1"), defaults) is not None, "a cluster default applies to every workload"


def test_pod_index_counts_a_workload_split_by_node_class() -> None:
    policy = ExtenderPolicy.from_config(Config())
    nodes = NodeIndex()
    nodes.replace_all(
        {
            "s": reduce_node(node("s", "1", **{"karpenter.sh/capacity-type": "spot"}), policy),
            "o": reduce_node(node("o", "1"), policy),
        }
    )
    pods = PodIndex()
    pods.replace_all({"1": PodPlacement("w", "s"), "2": PodPlacement("w", "o"), "3": PodPlacement("other", "s")})
    pods.put("4", PodPlacement("w", "s"))
    pods.put("2", PodPlacement("w", "s"))  # moved
    pods.delete("3")
    share = share_of("w", pods, nodes.items)
    assert (share.spot, share.on_demand, share.total) == (3, 0, 3)
    assert share_of("other", pods, nodes.items).total == 0
    assert not spot_allowed(50, 0, share)
    assert spot_allowed(100, 0, share)
    assert not spot_allowed(100, 1, share)


def test_node_index_keeps_fragments_in_step_with_entries() -> None:
    policy = ExtenderPolicy.from_config(Config())
    index = NodeIndex()
    index.put("s", reduce_node(node("s", "1", **{"karpenter.sh/capacity-type": "spot"}), policy))
    assert orjson.loads(index.fragments["s"]) == {"Host": "s", "Score": 10}
    assert orjson.loads(index.fragments_swapped["s"]) == {"Host": "s", "Score": 0}
    index.delete("s")
    assert not index.items and not index.fragments and not index.fragments_swapped
