"""One door per request kind: the scheduler's calls are answered by the direct door alone, in either form.

Flask has no route for ``/filter`` or ``/prioritize``. The direct door (extender/direct.py) answers Go's form read
from the bytes and any other form gunicorn's parser reads with the same status, body and headers, counting the
same metrics once, for every outcome (a decided call, a Nodes call, bad JSON, cache not synced, too late, an
internal error); the body is decoded once either way. Every refusal of the other form (405, 413, an unreadable
body) comes from the door too.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

import extender.direct
from extender import direct
from extender.app import EXTENDER_DEADLINE, ExtenderApp, create_app
from shared.config import Config
from tests.support.door_client import AppClient
from tests.unit.test_direct import go_request, split
from tests.unit.test_extender_api import CLUSTER, NAMES, BrokenCache, FakeCache, pod

NAMES_BODY = orjson.dumps({"Pod": pod(), "Nodes": None, "NodeNames": NAMES})
NODES_BODY = orjson.dumps({"Pod": pod(), "Nodes": {"items": CLUSTER}})


def _synced() -> Any:
    return FakeCache(CLUSTER, Config())


CASES = [
    pytest.param(NAMES_BODY, _synced, None, id="names-decided"),
    pytest.param(NODES_BODY, _synced, None, id="nodes-decided"),
    pytest.param(b'{"Pod": {', _synced, None, id="bad-json-400"),
    pytest.param(NAMES_BODY, lambda: FakeCache(CLUSTER, Config(), synced=False), None, id="not-synced"),
    pytest.param(NAMES_BODY, _synced, EXTENDER_DEADLINE + 1, id="too-late"),
    pytest.param(NAMES_BODY, BrokenCache, None, id="internal-error"),
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
    for module in (extender.direct,):
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


def _by_other_form(app: ExtenderApp, path: str, body: bytes) -> tuple[int, str, bytes, str | None]:
    r = AppClient(app).post(path, data=body)
    assert int(r.headers["Content-Length"]) == len(r.data)
    return r.status_code, r.headers["Content-Type"], r.data, r.headers.get("Connection")


@pytest.mark.parametrize(("path", "endpoint"), [("/filter", "filter"), ("/prioritize", "prioritize")])
@pytest.mark.parametrize(("body", "cache", "late_by"), CASES)
def test_both_forms_get_the_same_answer_counted_once(
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    endpoint: str,
    body: bytes,
    cache: Callable[[], Any],
    late_by: float | None,
) -> None:
    other_app = create_app(Config(), cache())
    _late(other_app, late_by)
    before = _metrics(endpoint)
    by_other = _by_other_form(other_app, path, body)
    counted_by_other = _delta(before, _metrics(endpoint))

    go_app = create_app(Config(), cache())
    arrived = _late(go_app, late_by)
    decodes = _decodes(monkeypatch)
    before = _metrics(endpoint)
    done = direct.answer(go_request(path, body), go_app.direct.decide, arrived, True)
    assert done is not None
    status, fields, sent = split(done[0])
    by_go_form = (int(status.split(b" ")[1]), fields[b"Content-Type"].decode(), sent, None)
    assert int(fields[b"Content-Length"]) == len(sent)
    assert by_go_form == by_other
    assert _delta(before, _metrics(endpoint)) == counted_by_other
    assert counted_by_other[f"spotshift_http_requests_total{[('code', str(by_other[0])), ('endpoint', endpoint)]}"] == 1
    assert decodes == [body], "the body is decoded once"


def test_flask_has_no_route_for_the_scheduler_calls() -> None:
    app = create_app(Config(), _synced())
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert rules >= {"/mutate", "/healthz", "/readyz", "/metrics"}
    assert not rules & set(direct.PATHS), rules
    for path in direct.PATHS:
        assert app.test_client().post(path, data=NAMES_BODY).status_code == 404, "Flask never answers it"


def _unreadable(n: int) -> bytes:
    raise ValueError("malformed chunk")


def _stalled(n: int) -> bytes:
    raise TimeoutError


REFUSALS = [
    pytest.param("GET", 0, None, 405, "unknown", True, id="get-405-kept"),
    pytest.param("PUT", len(NAMES_BODY), None, 405, "unknown", False, id="put-with-body-405-closes"),
    pytest.param("POST", 33 * 1024 * 1024, None, 413, "", False, id="over-the-limit-413-closes"),
    pytest.param("POST", None, _unreadable, 400, "", False, id="unreadable-400-closes"),
    pytest.param("POST", None, _stalled, 408, "", False, id="stalled-408-closes"),
    pytest.param("POST", len(NAMES_BODY) + 5, None, 400, "", False, id="short-body-400-closes"),
    pytest.param("POST", None, None, 200, "", True, id="chunked-200-kept"),
]


@pytest.mark.parametrize("path", list(direct.PATHS))
@pytest.mark.parametrize(("method", "length", "read", "status", "counted_as", "kept"), REFUSALS)
def test_every_refusal_of_a_scheduler_call_comes_from_the_direct_door(
    path: str,
    method: str,
    length: int | None,
    read: Callable[[int], bytes] | None,
    status: int,
    counted_as: str,
    kept: bool,
) -> None:
    app = create_app(Config(), _synced())
    endpoint = counted_as or direct.PATHS[path]
    before = REGISTRY.get_sample_value("spotshift_http_requests_total", {"endpoint": endpoint, "code": str(status)})
    reader = read or io.BytesIO(NAMES_BODY).read
    response, keep = app.direct.respond(method, path, length, reader, None, True)
    head, fields, body = split(response)
    assert int(head.split(b" ")[1]) == status and keep is kept
    assert (fields.get(b"Connection") == b"close") is not kept
    assert int(fields[b"Content-Length"]) == len(body)
    if status != 200:
        assert orjson.loads(body) == {"error": orjson.loads(body)["error"], "status": status}
    after = REGISTRY.get_sample_value("spotshift_http_requests_total", {"endpoint": endpoint, "code": str(status)})
    assert (after or 0.0) == (before or 0.0) + 1
