"""The watch-backed cluster state: list with pagination, then watch; relist on 410 Gone only."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest

from rescheduler.cluster.watch_cache import (
    NODES,
    PDBS,
    POD_FIELD_SELECTOR,
    PODS,
    WATCHES,
    ClusterState,
    PodPages,
    StateInformer,
)
from rescheduler.decode.pods import POD_ITEM, PodReader
from shared.kube.api import Kube, error_for
from shared.model import Pod
from tests.support import cluster_gen
from tests.support.fake_api import FakeApiServer, node, pdb, pod


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.close()


def start(server: FakeApiServer, state: ClusterState, kind, path: str, **kwargs) -> StateInformer:
    informer = StateInformer(Kube(server), state, kind, path, threading.Event(), backoff=0.01, **kwargs)
    informer.start()
    return informer


def test_list_is_paginated_then_watch_events_update_the_views(server: FakeApiServer) -> None:
    for i in range(7):
        server.put("pods", pod(f"web-{i}", "od-1"))
    state = ClusterState()
    query = (("fieldSelector", POD_FIELD_SELECTOR),)
    informer = start(server, state, PODS, "/api/v1/pods", page_size=3, query=query, list_workers=1)
    try:
        assert state.wait_until(lambda: "pods" in state.synced, 5)
        lists = [q for m, p, q in server.requests if m == "GET" and p == "/api/v1/pods"]
        assert len(lists) == 3  # 3 + 3 + 1 items
        assert len(state.pods) == 7
        assert {p.key for p in state.pods_on("od-1")} == {f"default/web-{i}" for i in range(7)}

        server.put("pods", pod("web-7", "spot-1"))
        server.remove("pods", "default/web-0")
        moved = pod("web-1", "od-1", ready=False)
        moved["metadata"]["uid"] = server.get_obj("pods", "default/web-1")["metadata"]["uid"]
        server.put("pods", moved)
        assert state.wait_until(lambda: "default/web-7" in state.pods and "default/web-0" not in state.pods, 5)
        assert state.wait_until(lambda: not state.pods["default/web-1"].ready, 5)
        assert [p.key for p in state.pods_on("spot-1")] == ["default/web-7"]
        assert "default/web-0" not in {p.key for p in state.pods_on("od-1")}
        assert len(state.pods_of_owner("uid-rs-web")) == 7
        assert informer.lists == 1, "a watch event must not cause a relist"
    finally:
        informer.close()
        informer.join(5)


def test_a_410_gone_watch_relists_and_drops_objects_deleted_meanwhile(server: FakeApiServer) -> None:
    server.put("nodes", node("a"))
    server.put("nodes", node("b"))
    state = ClusterState()
    informer = start(server, state, NODES, "/api/v1/nodes")
    try:
        assert state.wait_until(lambda: set(state.nodes) == {"a", "b"}, 5)
        server.compact("nodes")  # the watch's resourceVersion is now too old
        server.remove("nodes", "b")
        server.put("nodes", node("c"))
        assert state.wait_until(lambda: set(state.nodes) == {"a", "c"}, 5)
        assert informer.lists >= 2
    finally:
        informer.close()
        informer.join(5)


def test_a_failed_list_is_retried_with_backoff(server: FakeApiServer) -> None:
    server.put("nodes", node("a"))
    server.fail("GET", r"^/api/v1/nodes$", 500, 503)
    state = ClusterState()
    informer = start(server, state, NODES, "/api/v1/nodes")
    try:
        assert state.wait_until(lambda: "a" in state.nodes, 5)
    finally:
        informer.close()
        informer.join(5)


def test_v1beta1_pdb_items_get_their_api_version_so_an_empty_selector_selects_nothing() -> None:
    empty = pdb("all", "x", allowed=1)
    empty["spec"]["selector"] = {}
    del empty["apiVersion"]  # items of a list carry none
    beta = ClusterState(pdb_api_version="policy/v1beta1")
    beta.replace(PDBS, [empty])
    assert beta.pdbs["default/all"].selector is None
    v1 = ClusterState(pdb_api_version="policy/v1")
    v1.replace(PDBS, [empty])
    assert v1.pdbs["default/all"].selector is not None


def test_a_pod_that_cannot_be_read_marks_its_node_instead_of_vanishing() -> None:
    bad = pod("bad", "od-1", cpu="lots")
    state = ClusterState()
    state.replace(PODS, [pod("ok", "od-1"), bad])
    assert set(state.pods) == {"default/ok"}
    assert state.broken_nodes() == {"od-1"}
    state.apply(PODS, "DELETED", bad)
    assert state.broken_nodes() == set()


def test_snapshot_is_a_fresh_copy_the_planner_may_mutate() -> None:
    state = ClusterState()
    state.replace(NODES, [node("od-1"), node("spot-1", spot=True)])
    state.replace(PODS, [pod("web-0", "od-1"), pod("pending", phase="Pending")])
    snap = state.snapshot()
    assert [info.name for info in snap] == ["od-1", "spot-1"]
    assert [p.key for p in snap.pending] == ["default/pending"]
    snap.move_pod(snap["od-1"].pods[0], "spot-1")
    again = state.snapshot()
    assert [p.key for p in again["od-1"].pods] == ["default/web-0"]


def test_the_loops_snapshot_is_handed_out_again_only_while_neither_the_state_nor_it_changed() -> None:
    state = ClusterState()
    state.replace(NODES, [node("od-1"), node("spot-1", spot=True)])
    state.replace(PODS, [pod("web-0", "od-1")])
    first = state.snapshot(again=True)
    assert state.snapshot(again=True) is first
    # Copies of the state's nodes keep their stamps (the same pods): the planner's memos compare those first.
    assert [i.stamp for i in state.snapshot()] == [i.stamp for i in first]
    assert state.snapshot() is not first  # other callers always get a copy of their own
    assert state.snapshot(again=True) is first
    web = first["od-1"].pods[0]
    stamps = [i.stamp for i in first]
    first.move_pod(web, "spot-1")  # a plan that moved a pod and put it back leaves its snapshot changed all the same
    first.move_pod(first["spot-1"].pods[0], "od-1")
    assert all(i.stamp not in stamps for i in first)
    second = state.snapshot(again=True)
    assert second is not first and [p.key for p in second["od-1"].pods] == ["default/web-0"]
    assert state.snapshot(again=True) is second and [i.stamp for i in second] == stamps
    state.apply(PODS, "ADDED", pod("web-1", "od-1"))
    third = state.snapshot(again=True)
    assert [i.stamp == s for i, s in zip(third, stamps, strict=True)] == [False, True], "only od-1's pods changed"
    assert third["spot-1"] is second["spot-1"], "a node that changed neither in the state nor in the snapshot is kept"
    assert third["od-1"] is not second["od-1"]
    assert third is not second and [p.key for p in third["od-1"].pods] == ["default/web-0", "default/web-1"]
    third.move_pod(third["od-1"].pods[0], "spot-1")
    state.apply(PODS, "ADDED", pod("web-2", "od-1"))
    fourth = state.snapshot(again=True)
    assert fourth["spot-1"] is not third["spot-1"], "changed by its plan: copied from the state again"
    assert [p.key for p in fourth["spot-1"].pods] == [] and len(fourth["od-1"].pods) == 3


def _fingerprint(snap) -> dict:
    nodes = {
        info.name: (
            sorted(p.key for p in info.pods),
            {k: v for k, v in info.requested.items() if v},
            sorted((h.ip, h.protocol, h.port) for h in info.host_ports),
            sorted(p.key for p in info.pods_with_affinity),
            sorted(p.key for p in info.pods_with_required_anti_affinity),
        )
        for info in snap
    }
    return {
        "nodes": nodes,
        "order": [info.name for info in snap],
        "pending": sorted(p.key for p in snap.pending),
        "unknown": sorted(p.key for p in snap.unknown_node_pods),
    }


def test_the_maintained_snapshot_equals_one_built_from_scratch_after_random_events() -> None:
    import random

    from shared.snapshot import ClusterSnapshot

    rng = random.Random(7)
    state = ClusterState()
    state.replace(NODES, [node(f"n{i}") for i in range(4)])
    state.replace(PODS, [pod(f"p{i}", f"n{i % 4}") for i in range(8)])
    names = [f"n{i}" for i in range(6)]
    for step in range(600):
        r = rng.random()
        if r < 0.15:
            state.apply(NODES, rng.choice(["ADDED", "MODIFIED"]), node(rng.choice(names)))
        elif r < 0.22:
            state.apply(NODES, "DELETED", node(rng.choice(names)))
        elif r < 0.75:
            where = rng.choice([*names, ""])
            phase = rng.choice(["Running", "Running", "Pending", "Succeeded"])
            spec = {}
            if rng.random() < 0.2:
                spec["containers"] = [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]
            if rng.random() < 0.2:
                term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
            state.apply(PODS, "MODIFIED", pod(f"p{rng.randrange(12)}", where, phase=phase, **spec))
        else:
            state.apply(PODS, "DELETED", pod(f"p{rng.randrange(12)}"))
        scratch = state.snapshot()  # the planner mutates its snapshot: that must not reach the state
        movable = [p for info in scratch for p in info.pods]
        if movable and len(scratch) > 1:
            scratch.move_pod(movable[0], next(info.name for info in scratch if info.name != movable[0].node_name))
        fresh = ClusterSnapshot(
            [state.nodes[n] for n in sorted(state.nodes)], list(state.pods.values()), pdbs=[], namespaces=[]
        )
        assert _fingerprint(state.snapshot()) == _fingerprint(fresh), f"step {step}"
        looped = state.snapshot(again=True)  # the run loop's: handed out again while nothing changed
        assert _fingerprint(looped) == _fingerprint(fresh), f"step {step}"
        if movable and rng.random() < 0.3:
            looped.remove_pod(movable[0])
    # A relist rebuilds the same.
    state.replace(NODES, [state.nodes[n] and node(n) for n in sorted(state.nodes)])
    fresh = ClusterSnapshot([state.nodes[n] for n in sorted(state.nodes)], list(state.pods.values()))
    assert _fingerprint(state.snapshot()) == _fingerprint(fresh)


def _page(items: list[dict[str, object]], token: str = "") -> bytes:
    return orjson.dumps({"metadata": {"continue": token, "resourceVersion": "7"}, "items": items})


def test_a_listed_pod_page_is_read_by_the_snapshot_decoder_into_the_pods_a_watch_event_would_give() -> None:
    raws = [i for i in cluster_gen.generate(3, 12, 300) if i["kind"] == "Pod"]
    state = ClusterState()
    page = PodPages(state)(_page(raws, "more"))
    assert (page.continue_token, page.resource_version) == ("more", "7")
    assert page.items == [state.parse(PODS, raw) for raw in raws]
    assert len(page.items) == len(raws) and all(view is not None for _, view, _ in page.items)


def test_each_shards_decoder_reads_pages_as_the_lists_own_decoder_does() -> None:
    raws = [i for i in cluster_gen.generate(3, 12, 300) if i["kind"] == "Pod"]
    state = ClusterState()
    pages = PodPages(state)
    first, second = pages.list_decoder(), pages.list_decoder()
    bodies = [_page(raws[:150], "more"), _page(raws[150:])]
    assert [first(b) for b in bodies] == [PodPages(state)(b) for b in bodies] == [second(b) for b in bodies]


def test_a_pod_page_the_decoder_refuses_is_read_pod_by_pod_and_the_bad_pod_is_broken() -> None:
    raws = [pod("web-0", "od-1"), pod("bad", "od-1", cpu="lots"), pod("web-1", "od-1")]
    state = ClusterState()
    page = PodPages(state)(_page(raws))
    assert [(key, view is None) for key, view, _ in page.items] == [
        ("default/web-0", False),
        ("default/bad", True),
        ("default/web-1", False),
    ]
    state.replace_parsed(PODS, page.items)
    assert set(state.pods) == {"default/web-0", "default/web-1"} and set(state.broken) == {"default/bad"}


def _event(event_type: str, obj: dict[str, object]) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj})


def test_a_pod_watch_event_is_read_by_the_typed_decoder_into_the_pod_from_api_gives() -> None:
    raws = [i for i in cluster_gen.generate(3, 12, 300) if i["kind"] == "Pod"]
    state = ClusterState()
    pages = PodPages(state)
    for n, raw in enumerate(raws):
        raw["metadata"]["resourceVersion"] = str(1000 + n)
        event = pages.event(_event("MODIFIED" if n % 2 else "ADDED", raw))
        assert event.obj == state.parse(PODS, raw), raw["metadata"]["name"]
        assert event.resource_version == str(1000 + n)
    assert not pages.reader.templates, "events go through the watch reader, not the list's"
    assert pages.watch_reader.size() > 0
    gone = pages.event(_event("DELETED", raws[0]))
    assert gone.obj == (state.parse(PODS, raws[0])[0], None, "")


def test_an_event_the_typed_decoder_refuses_is_read_the_dict_way() -> None:
    odd = pod("web-0", "od-1", priority="5")  # a string where the typed decoder wants an integer
    state = ClusterState()
    event = PodPages(state).event(_event("ADDED", odd))
    assert event.obj == state.parse(PODS, odd)
    assert event.obj[1] is not None and event.obj[1].priority == 5


def test_watch_events_that_are_not_about_a_pod_keep_their_dict() -> None:
    state = ClusterState()
    pages = PodPages(state)
    bookmark = pages.event(_event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "77"}}))
    assert (bookmark.type, bookmark.resource_version) == ("BOOKMARK", "77")
    error = pages.event(_event("ERROR", {"kind": "Status", "code": 410, "message": "too old"}))
    assert error.obj["code"] == 410


def _informer_events(server: FakeApiServer, state: ClusterState) -> StateInformer:
    server.put("nodes", node("od-1"))  # the fake's first write has the version of its empty lists: not a pod's
    informer = start(server, state, PODS, "/api/v1/pods", query=(("fieldSelector", POD_FIELD_SELECTOR),))
    assert state.wait_until(lambda: "pods" in state.synced, 5)
    return informer


def test_pods_changed_by_watch_events_equal_from_api_and_a_bad_one_marks_its_node(server: FakeApiServer) -> None:
    raws = [i for i in cluster_gen.generate(3, 12, 120) if i["kind"] == "Pod"]
    state = ClusterState()
    informer = _informer_events(server, state)
    try:
        for raw in raws:
            server.put("pods", raw)
        server.put("pods", pod("bad", "od-1", cpu="lots"))
        assert state.wait_until(lambda: informer.events == len(raws) + 1, 5)
        for key, stored in server.store["pods"].items():
            if key != "default/bad" and stored["status"].get("phase") not in ("Succeeded", "Failed"):
                assert state.pods[key] == Pod.from_api(stored), key
        assert "default/bad" not in state.pods and state.broken_nodes() == {"od-1"}
        server.remove("pods", "default/bad")
        assert state.wait_until(lambda: not state.broken_nodes(), 5)
    finally:
        informer.close()
        informer.join(5)


def test_the_watch_reader_keeps_only_the_parts_of_the_pods_the_state_holds(server: FakeApiServer) -> None:
    raws = [i for i in cluster_gen.generate(3, 12, 120) if i["kind"] == "Pod" and i["status"]["phase"] == "Running"]
    state = ClusterState()
    informer = _informer_events(server, state)
    pages = informer.handler.pages
    try:
        for revision in ("1", "2", "3"):  # three rollouts: every pod replaced by one of a new template
            for raw in raws:
                raw["metadata"]["labels"]["pod-template-hash"] = revision
                server.put("pods", raw)
            want = len(raws) * int(revision)
            assert state.wait_until(lambda want=want: informer.events == want, 5)
            pages.prune()
        fresh = PodReader(compact=True)  # what a reader keeps for the last revision's pods alone
        fresh.prune([fresh.read(POD_ITEM.decode(orjson.dumps(stored))) for stored in server.store["pods"].values()])
        assert pages.watch_reader.size() == fresh.size()
    finally:
        informer.close()
        informer.join(5)


_STORES = {
    "Node": "nodes",
    "Pod": "pods",
    "PodDisruptionBudget": "pdbs",
    "Namespace": "namespaces",
    "PersistentVolume": "persistentvolumes",
    "PersistentVolumeClaim": "persistentvolumeclaims",
}
_ALL = ((PDBS, "/apis/policy/v1/poddisruptionbudgets", ()), *WATCHES)


def _generated(server: FakeApiServer) -> None:
    for item in cluster_gen.generate(5, 12, 300):
        server.put(_STORES[item["kind"]], item)


def _views(state: ClusterState) -> tuple[object, ...]:
    with state.cond:
        stores = (state.nodes, state.pods, state.pdbs, state.namespaces, state.pvs, state.pvcs, state.storage_classes)
        return (*(dict(s) for s in stores), dict(state.broken), _fingerprint(state.snapshot()))


def test_kinds_listed_together_make_the_state_listed_one_after_the_other_makes(server: FakeApiServer) -> None:
    _generated(server)
    together, in_turn = ClusterState(), ClusterState()
    informers = [start(server, together, kind, path, query=query, page_size=7) for kind, path, query in _ALL]
    try:
        assert together.wait_synced(10)
        for kind, path, query in _ALL:
            informers.append(start(server, in_turn, kind, path, query=query, page_size=500))
            assert in_turn.wait_until(lambda kind=kind: kind.name in in_turn.synced, 10)
        assert in_turn.is_synced()
        assert _views(together) == _views(in_turn)
        assert len(together.pods) > 200
    finally:
        for informer in informers:
            informer.close()
        for informer in informers:
            informer.join(5)


class _SecondPodPageFails:
    """The API server, but every page after the first of a pod list (of all pods, or of a namespace's when the
    list is fetched in shards) fails (HTTP 500) until ``release`` is set."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.failed = threading.Event()
        self.release = threading.Event()

    def request(self, method: str, path: str, *, query=(), **kwargs):
        if path.endswith("/pods") and dict(query).get("continue") and not self.release.is_set():
            self.failed.set()
            raise error_for(500, None, method=method, path=path)
        return self.server.request(method, path, query=query, **kwargs)

    def stream(self, path: str, **kwargs):
        return self.server.stream(path, **kwargs)


def test_a_kind_whose_list_fails_midway_leaves_the_state_unsynced_and_empty_of_it(server: FakeApiServer) -> None:
    _generated(server)
    api = _SecondPodPageFails(server)
    state = ClusterState()
    informers = []
    for kind, path, query in _ALL:
        informer = StateInformer(
            Kube(api), state, kind, path, threading.Event(), query=query, page_size=50, backoff=0.01
        )
        informer.start()
        informers.append(informer)
    try:
        others = {kind.name for kind, _, _ in _ALL} - {PODS.name}
        assert state.wait_until(lambda: api.failed.is_set() and others <= state.synced, 10)
        assert not state.is_synced() and not state.pods, "no half-listed pods, not ready"
        api.release.set()
        assert state.wait_synced(10)
        assert len(state.pods) == sum(
            1 for p in server.store["pods"].values() if p["status"].get("phase") not in ("Succeeded", "Failed")
        )
    finally:
        for informer in informers:
            informer.close()
        for informer in informers:
            informer.join(5)
