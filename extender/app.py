"""The Flask door: ``/mutate``, ``/healthz``, ``/readyz``, ``/metrics``.

A thin adapter over :class:`extender.service.ExtenderService`: read the body, decode it once, ask the service,
send its :class:`~extender.service.Answer`. Built by :func:`create_app` (no module-global app), so tests make as
many as they like with their own configuration and caches. kube-scheduler's ``/filter`` and ``/prioritize`` have
no route here: the poller worker gives every such call to the direct door (:mod:`extender.direct`), which the app
carries (:attr:`ExtenderApp.direct`) with the body limit of each path.

Error policy. A request we cannot read (bad JSON, wrong kind, no uid, not a Pod, too large, a body that
stops arriving or breaks off) is answered with a 4xx and a JSON message, and the worker carries on. A bug
of ours never blocks a pod: the service gives the no-opinion answer, and counts it in
``spotshift_internal_errors_total`` (an alert fires on any increase).

Limits (documented in docs/limits.md, with what a caller gets past them): request bodies of
:data:`DEFAULT_MAX_ADMISSION_BYTES` and :data:`DEFAULT_MAX_EXTENDER_BYTES` (a larger one is refused with
413 and ``Connection: close`` before its body is read), :data:`DEFAULT_MAX_NODES` node names or Node
objects per extender call (400), and a deadline per request below its caller's timeout
(:data:`MUTATE_DEADLINE`, :data:`EXTENDER_DEADLINE`), counted from the request's first byte when the
worker tells it (:attr:`ExtenderApp.arrival`): a request still unanswered by then gets the no-opinion answer,
since its caller is about to give up on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from extender import metrics
from extender.admission import parse_review
from extender.direct import DirectDoor, read_body
from extender.errors import ExtenderError
from extender.service import (
    DEFAULT_MAX_NODES,
    EXTENDER_DEADLINE,
    MUTATE_DEADLINE,
    Answer,
    ExtenderService,
    NodeSource,
    error_answer,
)
from shared.config import Config

__all__ = [
    "create_app",
    "ExtenderApp",
    "NodeSource",
    "DEFAULT_MAX_ADMISSION_BYTES",
    "DEFAULT_MAX_EXTENDER_BYTES",
    "DEFAULT_MAX_NODES",
    "MUTATE_DEADLINE",
    "EXTENDER_DEADLINE",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_ADMISSION_BYTES = 4 * 1024 * 1024
"""An AdmissionReview carries the object (etcd caps it at 1.5 MiB) and, on UPDATE, the old one too."""
DEFAULT_MAX_EXTENDER_BYTES = 32 * 1024 * 1024
"""Full Node objects run ~4.3 KB each: 5,000 nodes (Kubernetes' largest supported cluster) are ~22-25 MB.
A NodeNames request is far smaller (5,000 names are ~100 KB)."""
_OTHER_PATHS = 64 * 1024
"""Body limit of any other path: answered 404/405 without being read; the connection then closes."""

_JSON = "application/json"


def _unknown_arrival() -> float | None:
    return None


class ExtenderApp(Flask):
    """The Flask door, with what the poller worker (:mod:`extender.worker`) uses: :meth:`body_limit`, the
    :attr:`direct` door, and :attr:`arrival`, which the worker sets to tell the request's first byte."""

    def __init__(self, service: ExtenderService, body_limits: dict[str, int], max_nodes: int) -> None:
        super().__init__("spotshift")
        self.service = service
        self.body_limits = body_limits
        self.direct = DirectDoor(service, max_nodes, self.body_limit)
        """The door of ``/filter`` and ``/prioritize``."""
        self.arrival: Callable[[], float | None] = _unknown_arrival
        """``time.monotonic()`` at the first byte of the request being answered; None: unknown (now)."""

    def body_limit(self, path: str) -> int:
        """The body limit of ``path``: the worker refuses a larger request from its head alone."""
        return self.body_limits.get(path, _OTHER_PATHS)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype=_JSON)


def _send(answer: Answer) -> Response:
    return Response(answer.body, status=answer.status, mimetype=_JSON)


def _read_body(limit: int) -> bytes:
    """The request body, at most ``limit`` bytes (:func:`extender.direct.read_body`). When it is refused the
    connection is closed: the rest of the body is never read (reading it to keep the connection would cost as
    much as serving it)."""
    try:
        data = read_body(request.content_length, request.stream.read, limit)
    except ExtenderError:
        g.close_connection = True
        raise
    g.body_read = True
    return data


def create_app(
    config: Config | None = None,
    cache: NodeSource | None = None,
    *,
    max_admission_bytes: int = DEFAULT_MAX_ADMISSION_BYTES,
    max_extender_bytes: int = DEFAULT_MAX_EXTENDER_BYTES,
    max_nodes: int = DEFAULT_MAX_NODES,
    echo: bool = False,
) -> ExtenderApp:
    """Build the server over ``cache``, the watch-backed node (and pod) cache (see
    :class:`~extender.service.ExtenderService`; without one, ``/readyz`` is ready at once). ``echo`` adds
    ``POST /echo``, which returns its body: the benchmark's baseline for "the same stack doing nothing"."""
    config = config or Config()
    service = ExtenderService(config, cache)
    limits = {"/mutate": max_admission_bytes, "/filter": max_extender_bytes, "/prioritize": max_extender_bytes}
    if echo:
        limits["/echo"] = max_admission_bytes
    app = ExtenderApp(service, limits, max_nodes)
    app.config["SPOTSHIFT_CONFIG"] = config
    _add_hooks(app)
    _add_mutate_route(app)
    _add_status_routes(app)
    if echo:
        app.add_url_rule(
            "/echo", "echo", lambda: _send(Answer(200, _read_body(app.body_limit("/echo")))), methods=["POST"]
        )
    return app


def _add_hooks(app: ExtenderApp) -> None:
    """Time and count every request (in the service), close the connection when the body was left unread,
    and answer errors with a JSON message."""

    @app.before_request
    def _start_timer() -> None:
        g.started = time.perf_counter()
        arrived = app.arrival()
        g.arrived = arrived if arrived is not None else time.monotonic()

    @app.after_request
    def _count(response: Response) -> Response:
        if request.content_length and not g.get("body_read"):
            g.close_connection = True  # a body left unread would have to be drained to keep the connection
        if g.get("close_connection"):
            response.headers["Connection"] = "close"
        app.service.count(request.endpoint or "unknown", response.status_code, g.get("started"))
        return response

    @app.errorhandler(ExtenderError)
    def _our_error(e: ExtenderError) -> Response:
        return _send(error_answer(e))

    @app.errorhandler(HTTPException)
    def _http_error(e: HTTPException) -> Response:
        code = e.code or 400
        return _json({"error": e.description or e.name, "status": code}, code)

    @app.errorhandler(Exception)
    def _internal_error(e: Exception) -> Response:
        log.exception("%s: internal error before the request was decided", request.path)
        return _send(app.service.internal_error(request.endpoint or "unknown"))


def _add_mutate_route(app: ExtenderApp) -> None:
    """``/mutate``: the review decoded once, the service's answer sent."""
    service = app.service

    def mutate() -> Response:
        return _send(service.mutate(parse_review(_read_body(app.body_limit("/mutate"))), g.arrived))

    app.add_url_rule("/mutate", "mutate", mutate, methods=["POST"])


def _add_status_routes(app: ExtenderApp) -> None:
    service = app.service

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if not service.synced():
            return _json({"status": "node cache not synced"}, 503)
        return _json({"status": "ok"})

    @app.get("/metrics", endpoint="metrics")
    def metrics_() -> Response:
        if service.cache is not None:
            metrics.CACHED_NODES.set(len(service.cache.nodes.items))
        return Response(metrics.render(), content_type=metrics.CONTENT_TYPE)
