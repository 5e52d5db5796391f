"""Bad requests get a 4xx with a JSON message, never a 5xx, and the server keeps serving.

Twice: through Flask's test client (fast, exact), and against a real ``spot-extender`` (gunicorn, TLS with a
certificate from ``spot-certs``) on loopback, all the bad requests on one keep-alive connection and then a
valid one on the same connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from prometheus_client import REGISTRY

from extender.app import create_app
from tests.builders import Json, pod_json
from tests.support.door_client import AppClient
from tests.support.servers import start_server, stop_server

LIMIT = 4 * 1024 * 1024


def pod() -> Json:
    """A minimal pod, a name and one container; a review carries its namespace beside it."""
    return pod_json("p", namespace=None, image="x")


def review(**request: Any) -> dict[str, Any]:
    req = {"uid": "d595e125-9c2e-4ac8-9e6a-1f6cc6b3a1c4", "kind": {"group": "", "version": "v1", "kind": "Pod"}}
    req.update({"namespace": "default", "operation": "CREATE", "object": pod()})
    req.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def without_uid() -> dict[str, Any]:
    r = review()
    del r["request"]["uid"]
    return r


def without_operation() -> dict[str, Any]:
    r = review()
    del r["request"]["operation"]
    return r


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


DEEP_NODE = b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n"},"x":' + nested(300) + b"}]}}"


BAD_REQUESTS: list[Any] = [
    pytest.param("/mutate", b'{"apiVersion": "admission.k8s.io/v1", "kind": ', 400, id="malformed-json"),
    pytest.param("/mutate", b"", 400, id="empty-body"),
    pytest.param("/mutate", orjson.dumps({**review(), "kind": "ConfigMap"}), 400, id="wrong-kind"),
    pytest.param("/mutate", orjson.dumps(without_uid()), 400, id="missing-uid"),
    pytest.param(
        "/mutate",
        orjson.dumps(review(kind={"group": "apps", "version": "v1", "kind": "Deployment"})),
        400,
        id="non-pod-kind",
    ),
    pytest.param("/mutate", orjson.dumps(review(object={"kind": "Secret", "data": {}})), 400, id="non-pod-object"),
    pytest.param("/mutate", orjson.dumps(review(object=[1, 2])), 400, id="object-not-a-map"),
    pytest.param("/mutate", b"x" * (LIMIT + 1), 413, id="body-over-the-limit"),
    pytest.param("/filter", b"not json", 400, id="filter-malformed-json"),
    pytest.param("/filter", orjson.dumps({"NodeNames": ["a"]}), 400, id="filter-without-pod"),
    pytest.param("/prioritize", orjson.dumps({"Pod": pod()}), 400, id="prioritize-without-nodes"),
    pytest.param("/prioritize", orjson.dumps({"Pod": pod(), "NodeNames": [1, 2]}), 400, id="node-names-not-strings"),
    pytest.param("/prioritize", orjson.dumps({"Pod": pod(), "Nodes": ["a"]}), 400, id="nodes-not-a-node-list"),
    pytest.param("/nope", b"{}", 404, id="unknown-path"),
    pytest.param("/mutate", b'{"kind":"AdmissionReview","apiVersion":[]}', 400, id="api-version-a-list"),
    pytest.param("/mutate", b'{"kind":' + b'{"k":' * 1000 + b"1" + b"}" * 1001, 400, id="kind-nested-1000-deep"),
    pytest.param("/mutate", orjson.dumps(without_operation()), 400, id="missing-operation"),
    pytest.param("/mutate", orjson.dumps(review(operation="")), 400, id="empty-operation"),
    pytest.param("/filter", DEEP_NODE, 400, id="filter-node-nested-300-deep"),
    pytest.param("/filter", orjson.dumps({"Pod": pod(), "Nodes": {"items": ["a"]}}), 400, id="node-items-not-nodes"),
    pytest.param(
        "/prioritize",
        orjson.dumps({"Pod": pod(), "NodeNames": [f"n{i}" for i in range(15_001)]}),
        400,
        id="node-names-over-the-cap",
    ),
    pytest.param("/prioritize", orjson.dumps({"Pod": [], "NodeNames": []}), 400, id="pod-not-an-object"),
]


@pytest.mark.parametrize(("path", "body", "status"), BAD_REQUESTS)
def test_bad_request_gets_a_4xx_with_a_json_message(path: str, body: bytes, status: int) -> None:
    client = AppClient(create_app())
    r = client.post(path, data=body, content_type="application/json")
    assert r.status_code == status
    assert r.is_json and r.json["error"], r.data
    ok = client.post("/mutate", data=orjson.dumps(review()), content_type="application/json")
    assert ok.status_code == 200 and ok.json["response"]["allowed"] is True


def test_a_body_over_the_limit_is_refused_unread_and_the_connection_closed() -> None:
    app = create_app(max_admission_bytes=1000)
    r = app.test_client().post("/mutate", data=b"x" * 1001, content_type="application/json")
    assert r.status_code == 413 and r.headers["Connection"] == "close"


def test_a_request_past_its_deadline_gets_the_no_opinion_answer() -> None:
    """The caller (API server: 3 s, scheduler: 5 s) has given up on a request that took longer to arrive."""
    import time

    app = create_app()
    client = AppClient(app)
    app.arrival = lambda: time.monotonic() - 10
    r = client.post("/mutate", data=orjson.dumps(review()))
    assert r.status_code == 200 and "patch" not in r.json["response"] and r.json["response"]["warnings"]
    names = orjson.dumps({"Pod": pod(), "NodeNames": ["a"]})
    assert client.post("/prioritize", data=names).json == []
    assert client.post("/filter", data=names).json["Error"]
    app.arrival = lambda: None
    assert "patch" in client.post("/mutate", data=orjson.dumps(review())).json["response"], "a fresh one is served"


def test_get_on_a_post_endpoint_is_405_with_a_message() -> None:
    r = create_app().test_client().get("/mutate")
    assert r.status_code == 405 and r.json["error"]


def _fallbacks(endpoint: str) -> float:
    return REGISTRY.get_sample_value("spotshift_internal_errors_total", {"endpoint": endpoint}) or 0.0


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("bug")


def test_an_internal_error_still_admits_the_pod_and_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import extender.service as service_module

    monkeypatch.setattr(service_module, "build_response", _boom)
    before = _fallbacks("mutate")
    r = create_app().test_client().post("/mutate", data=orjson.dumps(review()))
    assert r.status_code == 200
    assert r.json["response"] == {
        "uid": review()["request"]["uid"],
        "allowed": True,
        "warnings": ["spotshift: internal error, pod admitted unchanged"],
    }
    assert _fallbacks("mutate") == before + 1


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        pytest.param("/mutate", 500, {"error": "spotshift: internal error", "status": 500}, id="mutate-500"),
        pytest.param("/prioritize", 200, [], id="prioritize-no-opinion"),
    ],
)
def test_a_bug_in_a_door_before_the_service_decides_is_counted_with_its_endpoint(
    monkeypatch: pytest.MonkeyPatch, path: str, status: int, body: Any
) -> None:
    """A review whose uid the door could not read gets a 500 (``failurePolicy: Ignore`` admits the pod); a scheduler
    call gets the no-opinion answer. Either way the fallback is counted."""
    import extender.app as app_module
    import extender.direct as direct_module

    monkeypatch.setattr(app_module, "parse_review", _boom)
    monkeypatch.setattr(direct_module, "decode_extender_args", _boom)
    endpoint = path.lstrip("/")
    before = _fallbacks(endpoint)
    data = review() if path == "/mutate" else {"Pod": pod(), "NodeNames": ["n"]}
    r = AppClient(create_app()).post(path, data=orjson.dumps(data), content_type="application/json")
    assert (r.status_code, r.json) == (status, body)
    assert _fallbacks(endpoint) == before + 1


def test_a_bad_request_is_not_counted_as_an_internal_error() -> None:
    client = AppClient(create_app())
    before = {e: _fallbacks(e) for e in ("mutate", "filter", "prioritize")}
    assert client.post("/mutate", data=orjson.dumps({**review(), "request": []})).status_code == 400
    assert client.post("/filter", data=b'{"Pod": [], "NodeNames": []}').status_code == 400
    assert client.post("/prioritize", data=b'{"Pod": {}, "NodeNames": [1]}').status_code == 400
    assert {e: _fallbacks(e) for e in before} == before


# --- the same against a real server --------------------------------------------------------------------------


def _send_raw(base: str, ca: Path, path: str, part: bytes, length: int) -> bytes:
    """Send a head announcing ``length`` bytes and only ``part`` of them; the answer's first bytes."""
    import socket
    import ssl

    host, port = base.split("//")[1].split(":")
    context = ssl.create_default_context(cafile=str(ca))
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=host) as conn:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        conn.sendall(head.encode() + part)
        return conn.recv(4096)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """spot-extender with its default worker model."""
    running = start_server(tmp_path_factory.mktemp("server"))
    assert running.ca is not None
    yield running.base, running.ca
    stop_server(running)


def test_real_server_answers_every_bad_request_with_4xx_and_keeps_serving(server: tuple[str, Path]) -> None:
    base, ca = server
    session = requests.Session()
    session.trust_env = False
    session.verify = str(ca)
    for param in BAD_REQUESTS:
        path, body, status = param.values
        if status == 413:  # answered from the head, then closed: a client still sending sees a reset
            assert _send_raw(base, ca, path, body[:65536], len(body)).startswith(b"HTTP/1.1 413 ")
            continue
        r = session.post(base + path, data=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == status, (param.id, r.text)
        assert r.json()["error"], param.id
    r = session.post(base + "/mutate", data=orjson.dumps(review()), timeout=10)
    assert r.status_code == 200
    assert r.json()["response"]["uid"] == review()["request"]["uid"]
    assert r.json()["response"]["patchType"] == "JSONPatch"
    assert r.headers.get("Connection", "keep-alive").lower() == "keep-alive", "gthread keeps the connection"
    metrics = session.get(base + "/metrics", timeout=10).text
    assert 'spotshift_http_requests_total{code="400",endpoint="mutate"}' in metrics
    assert 'spotshift_http_requests_total{code="413",endpoint="mutate"}' in metrics
    assert 'code="5' not in metrics, "no 5xx was served"
