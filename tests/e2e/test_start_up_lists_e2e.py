"""The rescheduler's pods on a real control plane: listed in shards at one version, then watched from it.

The state lists the pods as one page of the whole list, the namespaces at its resourceVersion and each
namespace's pods at exactly that version, several at once (``shared/kube/shards.py``), then watches from that
version. Pods created and deleted while those lists are under way (here: just before the first shard's first
page and the first continued page are served) are not in the lists, which are one cut of the cluster before
them, and are all in the state once the watch has run: none lost, none left behind.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from rescheduler.cluster.watch_cache import POD_FIELD_SELECTOR, PODS, ClusterState, Parsed, StateInformer
from shared.kube.api import HttpTransport, Kube
from shared.kube.credentials import load_client_configuration
from tests.support.controlplane import ControlPlane

PAGE = 5


def pod(name: str) -> dict[str, Any]:
    """A pod no node takes (its node selector matches none): it stays Pending, and a DELETE removes it at once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "nodeSelector": {"e2e.spotshift.io/nowhere": "true"},
            "terminationGracePeriodSeconds": 0,
        },
    }


class Hooked:
    """The real transport, but ``hook(path, query)`` runs before each request is sent."""

    def __init__(self, transport: HttpTransport, hook: Callable[[str, dict[str, Any]], None]) -> None:
        self.transport = transport
        self.hook = hook

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), **kwargs: Any) -> bytes:
        self.hook(path, dict(query))
        return self.transport.request(method, path, query=query, **kwargs)

    def stream(self, path: str, **kwargs: Any) -> Any:
        return self.transport.stream(path, **kwargs)


@pytest.fixture
def two_namespaces(control_plane: ControlPlane) -> Iterator[list[str]]:
    names = [f"e2e-shards-{n}-{uuid.uuid4().hex[:6]}" for n in ("a", "b")]
    for name in names:
        control_plane.create_namespace(name)
    yield names
    for name in names:
        control_plane.delete_namespace(name)


def pod_keys(plane: ControlPlane, namespaces: list[str]) -> set[str]:
    pods = ((ns, p) for ns in namespaces for p in plane.api.list(f"/api/v1/namespaces/{ns}/pods"))
    return {f"{ns}/{p['metadata']['name']}" for ns, p in pods}


def test_pods_created_and_deleted_while_listed_in_shards_are_all_in_the_state_after_the_watch(
    control_plane: ControlPlane, two_namespaces: list[str]
) -> None:
    api = control_plane.api
    a, b = two_namespaces
    for ns, count in ((a, 12), (b, 8)):
        for i in range(count):
            api.post(f"/api/v1/namespaces/{ns}/pods", pod(f"before-{i}"))
    changes = [
        # before the first shard's first page: one pod more and one less in each namespace
        ([(a, "during-1"), (b, "during-2")], [(a, "before-0"), (b, "before-0")]),
        # before the first continued page of a shard
        ([(a, "during-3"), (b, "during-4")], [(a, "before-11"), (b, "before-7")]),
    ]
    created = {f"{ns}/{name}" for made, _ in changes for ns, name in made}
    deleted = {f"{ns}/{name}" for _, gone in changes for ns, name in gone}
    lock = threading.Lock()

    def change(path: str, query: dict[str, Any]) -> None:
        shard = path.startswith("/api/v1/namespaces/") and path.endswith("/pods")
        due = shard and (query.get("resourceVersionMatch") == "Exact" if len(changes) == 2 else "continue" in query)
        with lock:
            if not due or not changes:
                return
            made, gone = changes.pop(0)
            for ns, name in made:
                api.post(f"/api/v1/namespaces/{ns}/pods", pod(name))
            for ns, name in gone:
                api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", gracePeriodSeconds=0)

    transport = HttpTransport(load_client_configuration(str(control_plane.kubeconfig), None), user_agent="e2e-shards")
    kube = Kube(Hooked(transport, change))
    state = ClusterState()
    informer = StateInformer(
        kube,
        state,
        PODS,
        "/api/v1/pods",
        threading.Event(),
        query=(("fieldSelector", POD_FIELD_SELECTOR),),
        page_size=PAGE,
        list_workers=2,
    )
    listed: list[set[str]] = []
    replace = informer.handler.replace

    def keep(items: list[Parsed]) -> None:
        listed.append({key for key, _, _ in items if key.split("/")[0] in two_namespaces})
        replace(items)

    informer.handler.replace = keep  # type: ignore[method-assign]
    informer.start()
    try:
        assert state.wait_until(lambda: PODS.name in state.synced, 60), "the pods were never listed"
        assert changes == [], "both changes were made while the shards were listed"
        assert informer.shards >= 2, "the pods were listed in shards, at one version"
        assert listed[0] & created == set() and deleted <= listed[0], "the lists are the cut before the changes"
        want = pod_keys(control_plane, two_namespaces)
        assert created <= want and not deleted & want

        def current() -> bool:
            return {k for k in state.pods if k.split("/")[0] in two_namespaces} == want

        assert state.wait_until(current, 30), "the watch from the lists' version brings every change"
        assert informer.lists == 1, "no relist: the watch started where the lists were cut"
    finally:
        informer.close()
        informer.join(10)
