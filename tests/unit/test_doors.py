"""The service's two doors for the scheduler's calls give the same answer for the same request.

The direct door (extender/direct.py, the poller worker's) and Flask's route must send the same status, body and
headers and count the same metrics once, for calls the direct door answers and for calls it leaves to Flask (a
Nodes call, bad JSON, cache not synced, too late, an internal error); the body is decoded once either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

import extender.app
import extender.direct
from extender import direct
from extender.app import EXTENDER_DEADLINE, ExtenderApp, create_app
from shared.config import Config
from tests.unit.test_direct import go_request, split
from tests.unit.test_extender_api import CLUSTER, NAMES, BrokenCache, FakeCache, pod

NAMES_BODY = orjson.dumps({"Pod": pod(), "Nodes": None, "NodeNames": NAMES})
NODES_BODY = orjson.dumps({"Pod": pod(), "Nodes": {"items": CLUSTER}})


def _synced() -> Any:
    return FakeCache(CLUSTER, Config())


CASES = [
    pytest.param(NAMES_BODY, _synced, None, True, id="names-answered-directly"),
    pytest.param(NODES_BODY, _synced, None, False, id="nodes-declined"),
    pytest.param(b'{"Pod": {', _synced, None, False, id="bad-json-declined"),
    pytest.param(NAMES_BODY, lambda: FakeCache(CLUSTER, Config(), synced=False), None, False, id="not-synced"),
    pytest.param(NAMES_BODY, _synced, EXTENDER_DEADLINE + 1, False, id="too-late"),
    pytest.param(NAMES_BODY, BrokenCache, None, False, id="internal-error"),
]


def _metrics(endpoint: str) -> dict[str, float]:
    """The samples a scheduler call can move, by name and labels."""
    out: dict[str, float] = {}
    for family in REGISTRY.collect():
        if family.name not in (
            "spotshift_http_requests",
            "spotshift_http_request_duration_seconds",
            "spotshift_extender_filtered_nodes",
        ):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket", "_sum")):
                continue
            if sample.labels.get("endpoint", endpoint) == endpoint:
                out[f"{sample.name}{sorted(sample.labels.items())}"] = sample.value
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def _decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Count the body decodes of both doors."""
    seen: list[bytes] = []
    for module in (extender.app, extender.direct):
        real: Callable[..., Any] = module.decode_extender_args

        def counting(body: bytes, *args: Any, real: Callable[..., Any] = real) -> Any:
            seen.append(body)
            return real(body, *args)

        monkeypatch.setattr(module, "decode_extender_args", counting)
    return seen


def _late(app: ExtenderApp, late_by: float | None) -> float | None:
    arrived = None if late_by is None else time.monotonic() - late_by
    app.arrival = lambda: arrived
    return arrived


def _by_flask(app: ExtenderApp, path: str, body: bytes) -> tuple[int, str, bytes, str | None]:
    r = app.test_client().post(path, data=body, content_type="application/json")
    assert int(r.headers["Content-Length"]) == len(r.data)
    return r.status_code, r.headers["Content-Type"], r.data, r.headers.get("Connection")


@pytest.mark.parametrize(("path", "endpoint"), [("/filter", "filter"), ("/prioritize", "prioritize")])
@pytest.mark.parametrize(("body", "cache", "late_by", "answered_directly"), CASES)
def test_both_doors_send_the_same_answer_and_count_it_once(
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    endpoint: str,
    body: bytes,
    cache: Callable[[], Any],
    late_by: float | None,
    answered_directly: bool,
) -> None:
    flask_app = create_app(Config(), cache())
    _late(flask_app, late_by)
    before = _metrics(endpoint)
    by_flask = _by_flask(flask_app, path, body)
    counted_by_flask = _delta(before, _metrics(endpoint))

    door_app = create_app(Config(), cache())
    arrived = _late(door_app, late_by)
    decodes = _decodes(monkeypatch)
    before = _metrics(endpoint)
    done = direct.answer(go_request(path, body), door_app.direct.decide, arrived, True)
    assert (done is not None) is answered_directly
    if done is not None:
        status, fields, sent = split(done[0])
        by_door = (int(status.split(b" ")[1]), fields[b"Content-Type"].decode(), sent, None)
        assert int(fields[b"Content-Length"]) == len(sent)
    else:
        by_door = _by_flask(door_app, path, body)  # the worker hands the request to gunicorn and Flask
    assert by_door == by_flask
    assert _delta(before, _metrics(endpoint)) == counted_by_flask
    assert counted_by_flask[f"spotshift_http_requests_total{[('code', str(by_flask[0])), ('endpoint', endpoint)]}"] == 1
    assert decodes == [body], "the body is decoded once"
