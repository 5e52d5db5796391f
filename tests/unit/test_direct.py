"""kube-scheduler's calls read and answered from raw bytes (extender/direct.py), against the door's other form.

The reader takes exactly the form Go's client sends and nothing else: every unusual form must give None so the
request is parsed by gunicorn's parser and given to the door's :meth:`~extender.direct.DirectDoor.respond`. Both
forms give the same answer, byte for byte, counted in the same metrics.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from extender import direct
from extender.app import EXTENDER_DEADLINE, ExtenderApp, create_app
from extender.service import Answer
from shared.config import Config
from tests.support.door_client import AppClient
from tests.unit.test_extender_api import CLUSTER, NAMES, BrokenCache, FakeCache, pod, post_chunked

BODY = orjson.dumps({"Pod": pod(), "Nodes": None, "NodeNames": NAMES})


def go_request(path: str = "/filter", body: bytes = BODY, *, extra: bytes = b"", **replace: bytes) -> bytes:
    """A request as Go's net/http client writes it (kube-scheduler's extender client), with header values
    replaced (``replace``, by lower-case name with ``_`` for ``-``; ``b""`` drops the header) or added."""
    headers = {
        "Host": b"spotshift.spotshift.svc:443",
        "User-Agent": b"Go-http-client/1.1",
        "Content-Length": str(len(body)).encode(),
        "Content-Type": b"application/json",
        "Accept-Encoding": b"gzip",
    }
    for key, value in replace.items():
        name = next((h for h in headers if h.lower() == key.replace("_", "-")), key.replace("_", "-").title())
        headers[name] = value
    head = b"".join(b"%s: %s\r\n" % (k.encode(), v) for k, v in headers.items() if v)
    return b"POST %s HTTP/1.1\r\n%s%s\r\n%s" % (path.encode(), head, extra, body)


def test_go_clients_request_is_read_with_its_path_body_and_end() -> None:
    data = go_request("/prioritize") + b"GET /healthz HTTP/1.1\r\n\r\n"
    request = direct.parse(data)
    assert request is not None
    assert (request.path, request.body, request.close) == ("/prioritize", BODY, False)
    assert data[request.end :] == b"GET /healthz HTTP/1.1\r\n\r\n"


@pytest.mark.parametrize(
    ("value", "close"), [(b"close", True), (b"Close", True), (b"keep-alive", False), (b"Keep-Alive", False)]
)
def test_the_connection_header_is_read(value: bytes, close: bool) -> None:
    request = direct.parse(go_request(connection=value))
    assert request is not None and request.close is close


@pytest.mark.parametrize(
    "extra_ok",
    [
        pytest.param({"content_type": b""}, id="no-content-type"),
        pytest.param({"content_type": b"application/json; charset=utf-8"}, id="json-with-charset"),
        pytest.param({"accept": b"application/json"}, id="accept"),
        pytest.param({"host": b""}, id="no-host"),
        pytest.param({"user_agent": b"python-requests/2.32"}, id="other-user-agent"),
    ],
)
def test_the_usual_variations_are_read(extra_ok: dict[str, bytes]) -> None:
    request = direct.parse(go_request(**extra_ok))
    assert request is not None and request.body == BODY


UNUSUAL = [
    pytest.param(go_request().replace(b"POST ", b"PUT ", 1), id="other-method"),
    pytest.param(go_request("/mutate"), id="other-path"),
    pytest.param(go_request("/filter?x=1"), id="query-string"),
    pytest.param(go_request("/Filter"), id="path-case"),
    pytest.param(go_request().replace(b"HTTP/1.1", b"HTTP/1.0", 1), id="http-1.0"),
    pytest.param(go_request().replace(b"POST /filter", b"POST  /filter", 1), id="double-space"),
    pytest.param(go_request(content_length=b"", transfer_encoding=b"chunked"), id="chunked"),
    pytest.param(go_request(transfer_encoding=b"chunked"), id="chunked-and-length"),
    pytest.param(go_request(expect=b"100-continue"), id="expect"),
    pytest.param(go_request(x_forwarded_for=b"10.0.0.1"), id="other-header"),
    pytest.param(go_request(extra=b"Content-Length: %d\r\n" % len(BODY)), id="repeated-length"),
    pytest.param(go_request(extra=b"Host: other\r\n"), id="repeated-host"),
    pytest.param(go_request(content_length=b""), id="no-length"),
    pytest.param(go_request(content_length=b"+%d" % len(BODY)), id="signed-length"),
    pytest.param(go_request(content_length=b"%d, %d" % (len(BODY), len(BODY))), id="list-length"),
    pytest.param(go_request(content_length=b"0x10"), id="hex-length"),
    pytest.param(go_request(body=b""), id="empty-body"),
    pytest.param(go_request(content_type=b"text/plain"), id="other-content-type"),
    pytest.param(go_request(content_type=b"application/jsonx"), id="content-type-prefix"),
    pytest.param(go_request(connection=b"upgrade"), id="connection-upgrade"),
    pytest.param(go_request(connection=b"keep-alive, close"), id="connection-list"),
    pytest.param(go_request(user_agent=b"Go\x00"), id="nul-in-value"),
    pytest.param(go_request(user_agent=b"Go\x7f"), id="del-in-value"),
    pytest.param(go_request(user_agent=b"Go\xc3\xa9"), id="non-ascii-value"),
    pytest.param(go_request(extra=b" folded\r\n"), id="folded-header"),
    pytest.param(go_request(extra=b"Accept : */*\r\n"), id="space-before-colon"),
    pytest.param(go_request(extra=b"Accept\r\n"), id="no-colon"),
    pytest.param(go_request().replace(b"\r\nUser-Agent", b"\nUser-Agent", 1), id="bare-lf"),
    pytest.param(go_request()[:-1], id="body-not-all-here"),
    pytest.param(go_request().split(b"\r\n\r\n")[0] + b"\r\n", id="head-not-all-here"),
    pytest.param(go_request(user_agent=b"x" * direct.MAX_HEAD), id="head-too-long"),
    pytest.param(b"", id="nothing"),
]


@pytest.mark.parametrize("data", UNUSUAL)
def test_every_unusual_form_is_left_to_gunicorns_parser(data: bytes) -> None:
    assert direct.parse(data) is None
    assert direct.answer(data, lambda *_: Answer(200, b"{}"), None, True) is None


def test_a_body_over_the_paths_limit_is_left_to_gunicorns_parser() -> None:
    assert direct.parse(go_request(), lambda path: len(BODY) - 1) is None
    assert direct.parse(go_request(), lambda path: len(BODY)) is not None


def split(response: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    head, body = response.split(b"\r\n\r\n", 1)
    status, *lines = head.split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    return status, fields, body


def app_for(cache: Any = None) -> ExtenderApp:
    return create_app(Config(), cache if cache is not None else FakeCache(CLUSTER, Config()))


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_answer_is_the_other_forms_byte_for_byte(path: str, keep_alive: bool) -> None:
    app = app_for()
    done = direct.answer(go_request(path), app.direct.decide, time.monotonic(), keep_alive)
    assert done is not None
    response, end, kept = done
    assert (end, kept) == (len(go_request(path)), keep_alive)
    status, fields, body = split(response)
    assert status == b"HTTP/1.1 200 OK"
    assert fields[b"Content-Type"] == b"application/json"
    assert int(fields[b"Content-Length"]) == len(body)
    assert (fields.get(b"Connection") == b"close") is not keep_alive
    client = AppClient(app)
    sized = client.post(path, data=BODY)  # another form, with a length
    chunked = post_chunked(client, path, BODY)  # no length
    assert sized.status_code == chunked.status_code == 200
    assert body == sized.data == chunked.data
    if path == "/filter":
        assert orjson.loads(body)["FailedNodes"], "the cluster has nodes being reclaimed: the answer must show them"


def test_the_client_asking_to_close_is_answered_with_connection_close() -> None:
    app = app_for()
    done = direct.answer(go_request(connection=b"close"), app.direct.decide, None, True)
    assert done is not None
    assert split(done[0])[1][b"Connection"] == b"close" and done[2] is False


BAD_BODIES = [
    pytest.param(b'{"Pod": {', id="malformed-json"),
    pytest.param(b"[]", id="not-an-object"),
    pytest.param(orjson.dumps({"Pod": pod()}), id="neither-names-nor-nodes"),
    pytest.param(orjson.dumps({"Pod": pod(), "NodeNames": "n"}), id="names-not-a-list"),
    pytest.param(orjson.dumps({"Pod": 1, "NodeNames": NAMES}), id="pod-not-an-object"),
]


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_bad_body_is_answered_400_and_the_connection_kept(path: str, body: bytes) -> None:
    app = app_for()
    done = direct.answer(go_request(path, body), app.direct.decide, None, True)
    assert done is not None
    status, _, sent = split(done[0])
    assert status == b"HTTP/1.1 400 Bad Request" and orjson.loads(sent)["status"] == 400 and done[2] is True
    r = AppClient(app).post(path, data=body)
    assert (r.status_code, r.data) == (400, sent)


@pytest.mark.parametrize("path", ["/filter", "/prioritize"])
def test_calls_not_decided_get_the_no_opinion_answer(path: str) -> None:
    not_synced = app_for(FakeCache(CLUSTER, Config(), synced=False))
    too_late = time.monotonic() - EXTENDER_DEADLINE - 1
    for app, arrived in ((not_synced, None), (app_for(), too_late), (app_for(BrokenCache()), None)):
        done = direct.answer(go_request(path), app.direct.decide, arrived, True)
        assert done is not None
        status, _, body = split(done[0])
        assert status == b"HTTP/1.1 200 OK"
        if path == "/prioritize":
            assert body == b"[]"
        else:
            assert orjson.loads(body)["Error"].startswith("spotshift")
    full_nodes = orjson.dumps({"Pod": pod(), "Nodes": {"items": []}})
    done = direct.answer(go_request(path, full_nodes), app_for().direct.decide, None, True)
    assert done is not None and split(done[0])[0] == b"HTTP/1.1 200 OK"


def _counted(endpoint: str, code: str = "200") -> tuple[float, float]:
    requests = REGISTRY.get_sample_value("spotshift_http_requests_total", {"endpoint": endpoint, "code": code})
    latency = REGISTRY.get_sample_value("spotshift_http_request_duration_seconds_count", {"endpoint": endpoint})
    return requests or 0.0, latency or 0.0


@pytest.mark.parametrize(("path", "endpoint"), [("/filter", "filter"), ("/prioritize", "prioritize")])
def test_answers_are_counted_alike_in_either_form(path: str, endpoint: str) -> None:
    app = app_for()
    before = _counted(endpoint)
    assert direct.answer(go_request(path), app.direct.decide, None, True) is not None
    after_go_form = _counted(endpoint)
    assert AppClient(app).post(path, data=BODY).status_code == 200
    after_other = _counted(endpoint)
    assert after_go_form == (before[0] + 1, before[1] + 1)
    assert after_other == (after_go_form[0] + 1, after_go_form[1] + 1)
    refused = _counted(endpoint, "400")[0]
    assert direct.answer(go_request(path, b"{"), app.direct.decide, None, True) is not None
    assert _counted(endpoint, "400")[0] == refused + 1, "a refused call is counted with its status"
