"""The Flask application: ``/mutate``, ``/filter``, ``/prioritize``, ``/healthz``, ``/readyz``, ``/metrics``.

A thin layer: decode, call the pure functions of :mod:`extender.admission` and :mod:`extender.scheduling`,
encode with orjson, count. Built by :func:`create_app` (no module-global app), so tests make as many as
they like with their own configuration and caches.

Error policy. A request we cannot read (bad JSON, wrong kind, no uid, not a Pod, too large, a body that
stops arriving or breaks off) is answered with a 4xx and a JSON message, and the worker carries on. A bug
of ours never blocks a pod: ``/mutate`` admits it unchanged with a warning, ``/filter`` answers with its
``Error`` field (the scheduler skips an ``ignorable`` extender), ``/prioritize`` answers an empty list (no
opinion).

The scheduler's NodeNames calls (``nodeCacheCapable: true``: a filter and a prioritize call for every pod
it schedules, each waited for in turn) are answered by :func:`_scheduler_fast_path` in front of Flask: the
same functions, counted in the same metrics, without Flask's per-request machinery (request context,
routing, hooks, response object), which cost as much as the answer itself. Anything else, and any such
call the fast path would not answer with a 200 (bad input, cache not synced, too late), goes through Flask
with the body it read, so errors have one implementation. spot-extender's poller worker goes one step further
and asks the same fast path before gunicorn reads the request at all (extender/direct.py).

Limits (documented in the README, with what a caller gets past them): request bodies of
:data:`DEFAULT_MAX_ADMISSION_BYTES` and :data:`DEFAULT_MAX_EXTENDER_BYTES` (a larger one is refused with
413 and ``Connection: close`` before its body is read), :data:`DEFAULT_MAX_NODES` node names or Node
objects per extender call (400), and a deadline per request below its caller's timeout
(:data:`MUTATE_DEADLINE`, :data:`EXTENDER_DEADLINE`), counted from the request's first byte when the
worker records it: a request still unanswered by then gets the no-opinion answer, since its caller is
about to give up on it.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec
import orjson
from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from extender import metrics
from extender.admission import MutationMemo, MutationPolicy, allow_unchanged, build_response, parse_review
from extender.errors import BadRequest, ExtenderError, NotReady, PayloadTooLarge, RequestTimeout
from extender.reviews import ExtenderFilterResult, fold_keys
from extender.scheduling import (
    ExtenderPolicy,
    NodeEntry,
    NodeIndex,
    PodIndex,
    ceilings,
    filter_names,
    filter_nodes,
    node_problem,
    pod_problem,
    prioritize_names,
    prioritize_nodes,
    share_of,
    spot_allowed,
    workload_key,
)
from shared.config import Config

__all__ = [
    "create_app",
    "NodeSource",
    "DEFAULT_MAX_ADMISSION_BYTES",
    "DEFAULT_MAX_EXTENDER_BYTES",
    "DEFAULT_MAX_NODES",
    "MUTATE_DEADLINE",
    "EXTENDER_DEADLINE",
    "ARRIVED_ENVIRON_KEY",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_ADMISSION_BYTES = 4 * 1024 * 1024
"""An AdmissionReview carries the object (etcd caps it at 1.5 MiB) and, on UPDATE, the old one too."""
DEFAULT_MAX_EXTENDER_BYTES = 32 * 1024 * 1024
"""Full Node objects run ~4.3 KB each: 5,000 nodes (Kubernetes' largest supported cluster) are ~22-25 MB.
A NodeNames request is far smaller (5,000 names are ~100 KB)."""
DEFAULT_MAX_NODES = 15_000
"""Node names or Node objects per extender call: the largest cluster a managed provider supports. The
scheduler sends at most the cluster's node count."""

MUTATE_DEADLINE = 2.5
"""Seconds from a review's first byte to its answer: below the webhook's ``timeoutSeconds: 3`` (deploy/)."""
EXTENDER_DEADLINE = 4.5
"""Seconds from an extender call's first byte to its answer: below the scheduler's ``httpTimeout: 5s``."""
ARRIVED_ENVIRON_KEY = "spotshift.arrived"
"""WSGI environ key: ``time.monotonic()`` when the request's first byte arrived (set by the worker)."""

_JSON = "application/json"


class NodeSource(Protocol):
    """What the app needs of a node cache; :class:`extender.cache.ClusterCache` provides it."""

    @property
    def nodes(self) -> NodeIndex: ...

    @property
    def pods(self) -> PodIndex | None: ...

    def synced(self) -> bool: ...


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype=_JSON)


def _raw_json(body: bytes) -> Response:
    return Response(body, mimetype=_JSON)


def _read_body(limit: int) -> bytes:
    """The request body, at most ``limit`` bytes. Past the limit the answer is 413 and the connection is
    closed: the rest of the body is never read (reading it to keep the connection would cost as much as
    serving it)."""
    length = request.content_length
    if length is not None and length > limit:
        g.close_connection = True
        raise PayloadTooLarge(f"request body of {length} bytes is over the limit of {limit} bytes")
    try:
        data = request.stream.read(limit + 1)
    except TimeoutError:
        g.close_connection = True
        raise RequestTimeout("the request body stopped arriving before it was complete") from None
    except Exception as e:  # a malformed chunked body, a client gone mid-body: the stream cannot go on
        g.close_connection = True
        raise BadRequest(f"the request body could not be read: {type(e).__name__}") from None
    if len(data) > limit:
        g.close_connection = True
        raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    if length is not None and len(data) < length:
        g.close_connection = True
        raise BadRequest(f"the request body ended after {len(data)} of its {length} bytes")
    g.body_read = True
    return data


_DECODER = msgspec.json.Decoder()


def _decode_object(body: bytes) -> dict[str, Any]:
    """Decode an extender body. msgspec builds the objects straight from the bytes: orjson's parser first
    builds a document of its own, whose peak was ~15 times the body (336 MB for 5,000 full Nodes)."""
    try:
        value = _DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError) as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadRequest("request body must be a JSON object")
    return value


def _extender_args(body: bytes, max_nodes: int) -> tuple[Mapping[str, Any], list[str] | None, Mapping[str, Any] | None]:
    """Decode ``ExtenderArgs``: ``(pod, node names, NodeList)`` with exactly one of the last two set."""
    args = fold_keys(_decode_object(body))
    pod: Any = args.get("Pod")
    problem = pod_problem(pod)
    if problem is not None or not isinstance(pod, dict):
        raise BadRequest(f"ExtenderArgs.Pod {problem or 'must be an object'}")
    names, nodes = args.get("NodeNames"), args.get("Nodes")
    if names is not None:
        # set(map(type, ...)): one C-level pass, where a generator of isinstance() calls cost ~0.5 µs a name
        if not isinstance(names, list) or not {str}.issuperset(map(type, names)):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        if len(names) > max_nodes:
            raise BadRequest(f"ExtenderArgs.NodeNames has {len(names)} names, over the limit of {max_nodes}")
        return pod, names, None
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(nodes, dict) or not isinstance(items or [], list):
            raise BadRequest("ExtenderArgs.Nodes must be a NodeList object")
        if len(items or ()) > max_nodes:
            raise BadRequest(f"ExtenderArgs.Nodes has {len(items or ())} items, over the limit of {max_nodes}")
        for i, item in enumerate(items or ()):
            problem = node_problem(item)
            if problem is not None:
                raise BadRequest(f"ExtenderArgs.Nodes.items[{i}] {problem}")
        return pod, None, nodes
    raise BadRequest("ExtenderArgs has neither NodeNames nor Nodes")


def _filter_error(message: str) -> ExtenderFilterResult:
    """A filter answer the scheduler reads as an error: with ``ignorable: true`` it skips this extender."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def _child(cache: dict[Any, Any], metric: Any, label: str) -> Any:
    child = cache.get(label)
    if child is None:
        child = cache[label] = metric.labels(label)
    return child


def create_app(
    config: Config | None = None,
    cache: NodeSource | None = None,
    *,
    max_admission_bytes: int = DEFAULT_MAX_ADMISSION_BYTES,
    max_extender_bytes: int = DEFAULT_MAX_EXTENDER_BYTES,
    max_nodes: int = DEFAULT_MAX_NODES,
    echo: bool = False,
) -> Flask:
    """Build the server.

    ``cache`` is the watch-backed node (and pod) cache; without one, NodeNames requests cannot be answered
    (``nodeCacheCapable: false`` still works) and ``/readyz`` is ready at once. ``echo`` adds ``POST /echo``,
    which returns its body: the benchmark's baseline for "the same stack doing nothing".

    ``app.spotshift_body_limit(path)`` tells the worker the body limit of a path, so it can refuse an
    oversized request from its head alone. ``app.spotshift_direct(path, body, arrived)`` is the NodeNames
    fast path for a worker that reads scheduler calls itself (extender/direct.py): the 200 body, counted in
    the metrics as Flask would count it, or None for Flask to answer.
    """
    config = config or Config()
    policy = MutationPolicy.from_config(config)
    memo = MutationMemo()
    ext = ExtenderPolicy.from_config(config)
    app = Flask("spotshift")
    app.config["SPOTSHIFT_CONFIG"] = config
    body_limits = {"/mutate": max_admission_bytes, "/filter": max_extender_bytes, "/prioritize": max_extender_bytes}
    if echo:
        body_limits["/echo"] = max_admission_bytes
    other_paths = 64 * 1024  # answered 404/405 without being read; the connection then closes
    app.spotshift_body_limit = lambda path: body_limits.get(path, other_paths)  # type: ignore[attr-defined]
    synced: Callable[[], bool] = cache.synced if cache is not None else (lambda: True)

    empty_index = NodeIndex()

    def node_index() -> NodeIndex:
        return cache.nodes if cache is not None else empty_index

    def node_entries() -> Mapping[str, NodeEntry]:
        return node_index().items

    @app.before_request
    def _start_timer() -> None:
        g.started = time.perf_counter()
        arrived = request.environ.get(ARRIVED_ENVIRON_KEY)
        g.arrived = arrived if isinstance(arrived, float) else time.monotonic()

    def late(budget: float) -> bool:
        """Whether the request's caller has (nearly) given up on it: past ``budget`` s since its first byte."""
        return time.monotonic() - g.arrived > budget

    # Labelled children resolved once: ``labels()`` validates and locks on every call.
    requests_by: dict[tuple[str, int], Any] = {}
    latency_by: dict[str, Any] = {}
    skips_by: dict[str, Any] = {}
    patches_by: dict[str, Any] = {}

    @app.after_request
    def _count(response: Response) -> Response:
        if request.content_length and not g.get("body_read"):
            g.close_connection = True  # a body left unread would have to be drained to keep the connection
        if g.get("close_connection"):
            response.headers["Connection"] = "close"
        endpoint = request.endpoint or "unknown"
        key = (endpoint, response.status_code)
        counter = requests_by.get(key)
        if counter is None:
            counter = requests_by[key] = metrics.REQUESTS.labels(endpoint, str(response.status_code))
        counter.inc()
        started = g.get("started")
        if started is not None:
            histogram = latency_by.get(endpoint)
            if histogram is None:
                histogram = latency_by[endpoint] = metrics.LATENCY.labels(endpoint)
            histogram.observe(time.perf_counter() - started)
        return response

    @app.errorhandler(ExtenderError)
    def _our_error(e: ExtenderError) -> Response:
        return _json({"error": e.message, "status": e.status}, e.status)

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException) -> Response:
        code = e.code or 400
        return _json({"error": e.description or e.name, "status": code}, code)

    @app.post("/mutate")
    def mutate() -> Response:
        review = parse_review(_read_body(max_admission_bytes))
        if late(MUTATE_DEADLINE):
            _child(skips_by, metrics.SKIPS, "deadline").inc()
            return _json(allow_unchanged(review, "spotshift: the review arrived too slowly, pod admitted unchanged"))
        try:
            answer, mutation = build_response(review, policy, memo)
        except Exception:
            log.exception("mutate: internal error; admitting the pod unchanged")
            metrics.SKIPS.labels("internal-error").inc()
            return _json(allow_unchanged(review, "spotshift: internal error, pod admitted unchanged"))
        if not review["request"].get("dryRun"):
            if mutation.skipped:
                _child(skips_by, metrics.SKIPS, mutation.skipped).inc()
            for kind in mutation.kinds:
                _child(patches_by, metrics.PATCHES, kind).inc()
        return _json(answer)

    def spot_ok(pod: Mapping[str, Any], nodes: Mapping[str, NodeEntry]) -> bool:
        """Per-workload ceiling: False when one more pod on spot would break it (see extender.scheduling)."""
        pods = cache.pods if cache is not None else None
        if pods is None:
            return True
        meta = pod.get("metadata") or {}
        max_pct, min_on_demand = ceilings(meta, ext.ceiling)
        if max_pct >= 100 and min_on_demand <= 0:
            return True
        workload = workload_key(meta)
        if workload is None:
            return True
        return spot_allowed(max_pct, min_on_demand, share_of(workload, pods, nodes))

    def count_filtered(failed: Iterable[str], entries: Mapping[str, NodeEntry]) -> None:
        """Count the nodes a node-name /filter dropped, by the reclaim signal the cache recorded for each."""
        for name in failed:
            entry = entries.get(name)
            metrics.FILTERED.labels(entry.reclaim if entry is not None and entry.reclaim else "reclaimed").inc()

    @app.post("/filter", endpoint="filter")
    def filter_() -> Response:
        _, names, nodes = _extender_args(_read_body(max_extender_bytes), max_nodes)
        try:
            if late(EXTENDER_DEADLINE):
                raise NotReady("spotshift: the request arrived too slowly to be answered in time")
            if names is not None:
                if not synced():
                    raise NotReady("spotshift node cache has not synced yet")
                result = filter_names(names, node_index(), ext)
            else:
                assert nodes is not None
                result, why = filter_nodes(nodes, ext)
                for reason in why:
                    metrics.FILTERED.labels(reason).inc()
        except NotReady as e:
            return _json(_filter_error(e.message))
        except Exception as e:
            log.exception("filter: internal error")
            return _json(_filter_error(f"spotshift: {e}"))
        if names is not None:
            count_filtered(result["FailedNodes"], node_entries())
        try:
            return _json(result)
        except orjson.JSONEncodeError as e:  # nested past 254 levels, an integer past 64 bits: no real Node
            raise BadRequest(f"ExtenderArgs.Nodes items cannot be echoed back: {e}") from None

    @app.post("/prioritize")
    def prioritize() -> Response:
        pod, names, nodes = _extender_args(_read_body(max_extender_bytes), max_nodes)
        try:
            if late(EXTENDER_DEADLINE):
                return _raw_json(b"[]")
            entries = node_entries()
            if names is not None:
                if not synced():
                    return _raw_json(b"[]")
                return _raw_json(prioritize_names(names, node_index(), spot_ok=spot_ok(pod, entries)))
            assert nodes is not None
            return _raw_json(prioritize_nodes(nodes.get("items") or (), ext, spot_ok=spot_ok(pod, entries)))
        except Exception:
            log.exception("prioritize: internal error; answering with no opinion")
            return _raw_json(b"[]")

    def fast_answer(path: str, body: bytes, arrived: Any) -> bytes | None:
        """The 200 answer of a NodeNames call, or None to let Flask answer (and explain)."""
        try:
            pod, names, _ = _extender_args(body, max_nodes)
        except ExtenderError:
            return None
        if (
            names is None
            or not synced()
            or (isinstance(arrived, float) and time.monotonic() - arrived > EXTENDER_DEADLINE)
        ):
            return None
        index = node_index()
        if path == "/prioritize":
            return prioritize_names(names, index, spot_ok=spot_ok(pod, index.items))
        result = filter_names(names, index, ext)
        count_filtered(result["FailedNodes"], index.items)
        return orjson.dumps(result)

    def count(endpoint: str, started: float) -> None:
        counter = requests_by.get((endpoint, 200))
        if counter is None:
            counter = requests_by[endpoint, 200] = metrics.REQUESTS.labels(endpoint, "200")
        counter.inc()
        histogram = latency_by.get(endpoint)
        if histogram is None:
            histogram = latency_by[endpoint] = metrics.LATENCY.labels(endpoint)
        histogram.observe(time.perf_counter() - started)

    def direct(path: str, body: bytes, arrived: float | None) -> bytes | None:
        """:func:`fast_answer` for a worker that reads the request itself (extender/direct.py), counted alike."""
        started = time.perf_counter()
        try:
            out = fast_answer(path, body, arrived)
        except Exception:  # Flask's handler logs it and answers with no opinion: never a 500
            return None
        if out is not None:
            count(_FAST_ENDPOINTS[path], started)
        return out

    app.wsgi_app = _scheduler_fast_path(app.wsgi_app, fast_answer, count, max_extender_bytes)  # type: ignore[method-assign]
    app.spotshift_direct = direct  # type: ignore[attr-defined]

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if not synced():
            return _json({"status": "node cache not synced"}, 503)
        return _json({"status": "ok"})

    @app.get("/metrics", endpoint="metrics")
    def metrics_() -> Response:
        if cache is not None:
            metrics.CACHED_NODES.set(len(cache.nodes.items))
        return Response(metrics.render(), content_type=metrics.CONTENT_TYPE)

    if echo:

        @app.post("/echo", endpoint="echo")
        def echo_() -> Response:
            return _raw_json(_read_body(max_admission_bytes))

    return app


_FAST_ENDPOINTS = {"/filter": "filter", "/prioritize": "prioritize"}


class _Unreadable(io.RawIOBase):
    """A request body whose reading failed: reading it again fails the same way, for Flask to report."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise self.error


def _scheduler_fast_path(
    flask_app: Callable[..., Any],
    answer: Callable[[str, bytes, Any], bytes | None],
    count: Callable[[str, float], None],
    body_limit: int,
) -> Callable[..., Any]:
    """WSGI in front of ``flask_app``: a POST to /filter or /prioritize with a ``Content-Length`` body within
    ``body_limit`` is answered by ``answer(path, body, arrived)`` when it returns bytes; otherwise Flask gets
    the request, its body put back as it was read."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        endpoint = _FAST_ENDPOINTS.get(environ.get("PATH_INFO", ""))
        length = environ.get("CONTENT_LENGTH")
        if endpoint is None or environ.get("REQUEST_METHOD") != "POST" or not length or not length.isdigit():
            return flask_app(environ, start_response)
        if int(length) > body_limit:
            return flask_app(environ, start_response)
        started = time.perf_counter()
        try:
            body = environ["wsgi.input"].read(int(length))
        except Exception as e:  # Flask's reader reports it (408 or 400)
            environ["wsgi.input"] = _Unreadable(e)
            return flask_app(environ, start_response)
        try:
            arrived = environ.get(ARRIVED_ENVIRON_KEY)
            out = answer(environ["PATH_INFO"], body, arrived) if len(body) == int(length) else None
        except Exception:  # Flask's handler logs it and answers with no opinion: never a 500
            out = None
        if out is None:
            environ["wsgi.input"] = io.BytesIO(body)
            return flask_app(environ, start_response)
        start_response("200 OK", [("Content-Type", _JSON), ("Content-Length", str(len(out)))])
        count(endpoint, started)
        return [out]

    return wsgi
