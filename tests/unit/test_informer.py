"""shared.kube.informer: the one list+watch loop, against a scripted collection (the project's own boundary).

The extender's cache (tests/unit/test_cache.py) and the rescheduler's state (tests/unit/test_state.py) test it
through their adapters; these tests pin the protocol itself: continue tokens, the version a watch starts from,
bookmarks, 410 Gone from a list, a watch event or a watch request, and other errors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest

from shared.kube.informer import Informer, json_page, list_pages


class Gone(Exception):
    status = 410


class Refused(Exception):
    status = 503


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def page(items: list[dict[str, Any]], rv: str = "", token: str = "") -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if token:
        meta["continue"] = token
    return orjson.dumps({"metadata": meta, "items": items})


class Lines:
    def __init__(self, events: list[dict[str, Any]], hold: threading.Event | None = None) -> None:
        self.events = events
        self.hold = hold

    def __iter__(self) -> Iterator[bytes]:
        for e in self.events:
            yield orjson.dumps(e)
        if self.hold is not None:
            self.hold.wait(5)

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()


class Script:
    """List answers and watch answers, taken in order; the last watch answer repeats."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_queries: list[dict[str, Any]] = []
        self.watch_queries: list[dict[str, Any]] = []
        self.idle = threading.Event()
        self.hold = threading.Event()

    def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
        self.list_queries.append(dict(query))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch(self, query: Sequence[tuple[str, Any]], timeout: float) -> Lines:
        self.watch_queries.append(dict(query))
        if not self.watches:
            self.idle.set()
            return Lines([], self.hold)
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Lines(answer)


class Recorder:
    def __init__(self) -> None:
        self.replaced: list[list[str]] = []
        self.applied: list[tuple[str, str]] = []

    def convert(self, o: dict[str, Any]) -> str:
        return str(o["metadata"]["name"])

    def replace(self, items: list[str]) -> None:
        self.replaced.append(items)

    def apply(self, event_type: str, o: dict[str, Any]) -> None:
        self.applied.append((event_type, o["metadata"]["name"]))


def run(script: Script) -> tuple[Informer[str], Recorder]:
    handler = Recorder()
    informer: Informer[str] = Informer("things", script, handler, page_size=2, backoff=0.001)
    informer.start()
    try:
        assert script.idle.wait(10), "the informer should end up in a quiet watch"
    finally:
        informer.close()
        informer.join(5)
    return informer, handler


def test_list_pages_follows_continue_tokens_and_sends_the_query_every_time() -> None:
    answers = [page([obj("a", "1")], token="t1"), page([obj("b", "2")], rv="9")]
    queries: list[list[tuple[str, Any]]] = []

    def fetch(q: Sequence[tuple[str, Any]]) -> bytes:
        queries.append(list(q))
        return answers.pop(0)

    pages = list(list_pages(fetch, json_page, page_size=1, query=[("fieldSelector", "x")]))
    assert [p.resource_version for p in pages] == ["", "9"]
    assert queries == [
        [("limit", 1), ("fieldSelector", "x")],
        [("limit", 1), ("fieldSelector", "x"), ("continue", "t1")],
    ]


def test_an_expired_continue_token_starts_the_list_over() -> None:
    script = Script(
        lists=[page([obj("old", "1")], token="t1"), Gone("continue token expired"), page([obj("a", "5")], rv="5")],
        watches=[],
    )
    informer, handler = run(script)
    assert handler.replaced == [["a"]], "the half list is dropped, not handed over"
    assert informer.lists == 1
    assert script.watch_queries[0]["resourceVersion"] == "5"


def test_watch_starts_at_the_list_version_and_bookmarks_advance_it() -> None:
    script = Script(
        lists=[page([obj("a", "1")], rv="10")],
        watches=[
            [
                {"type": "ADDED", "object": obj("b", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ]
        ],
    )
    informer, handler = run(script)
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "15"]
    assert script.watch_queries[0]["allowWatchBookmarks"] == "true"
    assert handler.applied == [("ADDED", "b")], "a bookmark is no event"
    assert (informer.lists, informer.events) == (1, 1)


def test_gone_from_a_watch_event_or_a_watch_request_lists_again() -> None:
    script = Script(
        lists=[page([obj("a", "1")], rv="10"), page([obj("b", "2")], rv="20"), page([obj("c", "3")], rv="30")],
        watches=[[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}], Gone("410")],
    )
    informer, handler = run(script)
    assert handler.replaced == [["a"], ["b"], ["c"]]
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "20", "30"]
    assert informer.lists == 3


def test_other_errors_back_off_and_watch_again_from_the_last_version() -> None:
    script = Script(
        lists=[Refused("list refused"), page([obj("a", "1")], rv="10")],
        watches=[
            [{"type": "MODIFIED", "object": obj("a", "12")}, {"type": "ERROR", "object": {"code": 500}}],
            Refused("watch refused"),
        ],
    )
    informer, handler = run(script)
    assert informer.lists == 1, "a failed watch does not cost a relist"
    assert [q["resourceVersion"] for q in script.watch_queries] == ["10", "12", "12"]
    assert handler.applied == [("MODIFIED", "a")]


def test_pages_read_ahead_are_the_pages_read_one_by_one() -> None:
    bodies = [page([obj("a", "1")], token="t1"), page([obj("b", "2")], token="t2"), page([obj("c", "3")], rv="9")]

    def pages(ahead: bool) -> list[Any]:
        answers = list(bodies)
        return list(list_pages(lambda q: answers.pop(0), json_page, page_size=1, ahead=ahead))

    assert pages(ahead=True) == pages(ahead=False)


def test_the_next_page_is_fetched_while_this_one_is_decoded() -> None:
    answers = [page([obj("a", "1")], token="t1"), page([obj("b", "2")], rv="9")]
    second_asked = threading.Event()
    seen_while_decoding: list[bool] = []

    def fetch(q: Sequence[tuple[str, Any]]) -> bytes:
        if dict(q).get("continue") == "t1":
            second_asked.set()
        return answers.pop(0)

    def decode(body: bytes) -> Any:
        if not seen_while_decoding:  # the first page: its decoding waits for the second page's request
            seen_while_decoding.append(second_asked.wait(10))
        return json_page(body)

    pages = list(list_pages(fetch, decode, page_size=1, ahead=True))
    assert seen_while_decoding == [True]
    assert [p.items[0]["metadata"]["name"] for p in pages] == ["a", "b"]


def test_a_failure_of_the_page_fetched_ahead_is_raised_when_that_page_is_due() -> None:
    answers: list[Any] = [page([obj("a", "1")], token="t1"), Refused("down")]

    def fetch(q: Sequence[tuple[str, Any]]) -> bytes:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    pages = list_pages(fetch, json_page, page_size=1, ahead=True)
    assert next(pages).items == [obj("a", "1")]
    with pytest.raises(Refused):
        next(pages)
