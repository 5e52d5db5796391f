"""shared.kube.shards: one list fetched in shards at once, at the version of its first page, through the informer.

Scripted collections (the project's own boundary, as in test_informer.py): the shards' requests (the first at
exactly the first page's version, the rest by continue token), their join in key order, the watch from that
version, the fall back to the plain list where the server cannot serve the shards, and the bound on the pages
fetched at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from shared.kube.informer import Informer, json_page
from shared.kube.shards import NoShards, exact, list_shards, namespaced
from tests.unit.test_informer import Gone, Recorder, Refused, Script, obj, page


class Shard:
    """One part of a collection: its list answers, taken in order; the queries it was asked."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.queries: list[dict[str, Any]] = []

    def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
        self.queries.append(dict(query))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch(self, query: Sequence[tuple[str, Any]], timeout: float) -> Any:
        raise AssertionError("a shard is never watched")


def informer_of(script: Script, splits: list[list[Shard]]) -> tuple[Informer[str], Recorder, list[str]]:
    """An informer over ``script`` whose every list is split into the next shards of ``splits``."""
    handler = Recorder()
    asked: list[str] = []

    def split(version: str) -> list[Shard]:
        asked.append(version)
        return splits.pop(0)

    informer: Informer[str] = Informer("things", script, handler, page_size=2, backoff=0.001, split=split)
    return informer, handler, asked


def run(informer: Informer[str], script: Script) -> None:
    informer.start()
    try:
        assert script.idle.wait(10), "the informer should end up in a quiet watch"
    finally:
        informer.close()
        informer.join(5)


def test_a_big_list_is_fetched_in_shards_at_its_first_pages_version_and_watched_from_it() -> None:
    script = Script(lists=[page([obj("x", "3")], rv="10", token="t1")], watches=[])
    a = Shard([page([obj("a1", "1"), obj("a2", "2")], rv="10", token="a-t"), page([obj("a3", "4")], rv="10")])
    b = Shard([page([obj("b1", "5")], rv="10")])
    informer, handler, asked = informer_of(script, [[a, b]])
    run(informer, script)
    assert script.list_queries == [{"limit": 2}], "the first page only: its items are the shards' too"
    assert asked == ["10"]
    assert a.queries == [{"limit": 2, **dict(exact("10"))}, {"limit": 2, "continue": "a-t"}]
    assert b.queries == [{"limit": 2, **dict(exact("10"))}]
    assert handler.replaced == [["a1", "a2", "a3", "b1"]], "every shard's items, in the shards' order"
    assert script.watch_queries[0]["resourceVersion"] == "10"
    assert (informer.lists, informer.shards) == (1, 2)


def test_a_list_that_fits_in_its_first_page_is_not_split() -> None:
    script = Script(lists=[page([obj("a", "1")], rv="7")], watches=[])
    informer, handler, asked = informer_of(script, [])
    run(informer, script)
    assert asked == []
    assert handler.replaced == [["a"]]
    assert script.watch_queries[0]["resourceVersion"] == "7"
    assert informer.shards == 0


@pytest.mark.parametrize(
    "refusal",
    [Gone("too old resource version"), page([obj("b1", "12")], rv="12")],
    ids=["410-gone", "newer-data"],
)
def test_shards_the_server_cannot_serve_at_the_version_give_way_to_the_plain_list(
    refusal: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plain = [page([obj("a1", "1"), obj("a2", "2")], rv="12", token="p1"), page([obj("b1", "12")], rv="12")]
    script = Script(lists=[page([obj("a1", "1")], rv="10", token="t1"), *plain], watches=[])
    a = Shard([page([obj("a1", "1"), obj("a2", "2")], rv="10")])
    b = Shard([refusal])
    informer, handler, _ = informer_of(script, [[a, b]])
    with caplog.at_level(logging.WARNING, logger="spotshift.informer"):
        run(informer, script)
    assert handler.replaced == [["a1", "a2", "b1"]], "the plain list's items, no shard's"
    assert script.list_queries[1:] == [{"limit": 2}, {"limit": 2, "continue": "p1"}]
    assert script.watch_queries[0]["resourceVersion"] == "12"
    assert informer.shards == 0
    assert any("cannot list things in shards at resourceVersion 10" in r.getMessage() for r in caplog.records)


def test_another_failure_of_a_shard_is_a_failed_list_tried_again_in_shards() -> None:
    script = Script(
        lists=[page([obj("a1", "1")], rv="10", token="t1"), page([obj("a1", "1")], rv="20", token="t2")], watches=[]
    )
    first = [Shard([page([obj("a1", "1")], rv="10")]), Shard([Refused("unavailable")])]
    second = [Shard([page([obj("a1", "1")], rv="20")]), Shard([page([obj("b1", "15")], rv="20")])]
    informer, handler, asked = informer_of(script, [first, second])
    run(informer, script)
    assert asked == ["10", "20"]
    assert handler.replaced == [["a1", "b1"]], "nothing of the failed list is handed over"
    assert script.watch_queries[0]["resourceVersion"] == "20"


def test_no_more_shards_are_fetched_at_once_than_there_are_workers() -> None:
    in_flight, peak = [0], [0]
    cond = threading.Condition()

    class Slow(Shard):
        def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
            with cond:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
                cond.notify_all()
                cond.wait_for(lambda: in_flight[0] >= 4, timeout=0.05)  # a fourth would come now if it could
                in_flight[0] -= 1
            return super().list(query)

    shards = [
        Slow([page([obj(f"s{i}-1", "1")], rv="9", token="c"), page([obj(f"s{i}-2", "1")], rv="9")]) for i in range(12)
    ]
    names = list_shards(shards, "9", lambda: lambda b: _names(b), page_size=1, workers=3)
    assert names == [f"s{i}-{j}" for i in range(12) for j in (1, 2)]
    assert peak[0] == 3


def _names(body: bytes) -> Any:
    p = json_page(body)
    return type(p)([o["metadata"]["name"] for o in p.items], p.continue_token, p.resource_version)


def test_a_stopped_list_of_shards_raises_rather_than_hand_over_a_part() -> None:
    stop = threading.Event()

    class Stopping(Shard):
        def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
            stop.set()
            return super().list(query)

    shards = [Stopping([page([obj("a", "1")], rv="9", token="c"), page([obj("b", "1")], rv="9")])]
    with pytest.raises(InterruptedError):
        list_shards(shards, "9", lambda: _names, page_size=1, stop=stop)


def namespaces_page(names: list[str], rv: str, token: str = "") -> bytes:
    return page([{"metadata": {"name": n}} for n in names], rv=rv, token=token)


def test_namespaced_shards_are_the_namespaces_at_the_version_in_the_order_of_the_keys() -> None:
    asked: list[tuple[str, dict[str, Any]]] = []
    answers = {"/api/v1/namespaces": [namespaces_page(["b", "a"], "10", "n1"), namespaces_page(["a-b", "c d"], "10")]}

    def fetch(path: str, query: Sequence[tuple[str, Any]]) -> bytes:
        asked.append((path, dict(query)))
        return answers[path].pop(0) if path in answers else page([], rv="10")

    shards = namespaced(fetch, "pods", page_size=2)("10")
    assert asked == [
        ("/api/v1/namespaces", {"limit": 2, **dict(exact("10"))}),
        ("/api/v1/namespaces", {"limit": 2, "continue": "n1"}),
    ]
    for shard in shards:
        shard.list([("limit", 5)])
    # Keys in storage are "namespace/name": "a-b/..." sorts before "a/..." ("-" before "/").
    assert [path for path, _ in asked[2:]] == [
        "/api/v1/namespaces/a-b/pods",
        "/api/v1/namespaces/a/pods",
        "/api/v1/namespaces/b/pods",
        "/api/v1/namespaces/c%20d/pods",
    ]


def test_namespaces_answered_at_another_version_are_no_shards() -> None:
    def fetch(path: str, query: Sequence[tuple[str, Any]]) -> bytes:
        return orjson.dumps({"metadata": {"resourceVersion": "11"}, "items": [{"metadata": {"name": "a"}}]})

    with pytest.raises(NoShards):
        namespaced(fetch, "pods")("10")


def test_a_first_page_without_a_version_is_followed_by_the_plain_list() -> None:
    plain = [page([obj("a1", "1")], rv="5", token="p1"), page([obj("b1", "2")], rv="5")]
    script = Script(lists=[page([obj("a1", "1")], token="t1"), *plain], watches=[])
    informer, handler, asked = informer_of(script, [])
    run(informer, script)
    assert asked == [], "no version to list the shards at"
    assert handler.replaced == [["a1", "b1"]]
    assert script.watch_queries[0]["resourceVersion"] == "5"


def test_no_shards_at_all_is_no_list() -> None:
    with pytest.raises(NoShards):
        list_shards([], "9", lambda: _names, page_size=1)
